"""Run a transfer schedule on a running emulation and measure what happened.

Host agents (``python -m fabric.agent``) serve every endpoint that sends or
receives, all starting at one wall-clock instant. They run in as few
processes as the file-descriptor limit allows (:func:`agent_groups`), each
serving its endpoints from one event loop with sockets opened in every
endpoint's own network namespace: a process per endpoint spent most of its CPU
waking up. Around the traffic
the runner samples every link's counters, watches ovs-vswitchd's and the
machine's CPU, installs per-flow path monitors on the switches, and reads
exact drop counters from the endpoints' ingress buffers afterwards.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import resource
import selectors
import subprocess
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, cast

import networkx as nx

from fabric.children import log_tail, start_python
from fabric.emulation import fidelity, hostconfig, ovs
from fabric.emulation.flow_control_session import LosslessWatch
from fabric.emulation.flowmon import FlowKey, FlowMonitor, path_from_switches
from fabric.emulation.linkstats import LinkSampler
from fabric.emulation.network import Emulation
from fabric.emulation.shaping import ETHERNET_HEADER_BYTES
from fabric.errors import UserError
from fabric.host import system
from fabric.model import graph as fg
from fabric.model.flowcontrol import lossless_dscps, path_hold_pkts
from fabric.traffic.model import (ROCE_PORT, TCP_DATA_PORT, Plan, ScheduleError, Transfer,
                                  TransportSpec, destination_ip, source_ports, tcp_connection_keys,
                                  validate_schedule)
from fabric.traffic.result import LinkSeries, TrafficResult

# a plan's provisional start; in an emulation the agents say when they are listening
# (which takes longer the more hosts there are) and all get one start time this far
# ahead once the last one has
START_LEAD_S = 1.5
GO_LEAD_S = 0.3
READY_TIMEOUT_S = 60.0
# Agent processes per run (more when one would run out of file descriptors): on a VM a
# wake-up costs more than the work it serves, and one process for all endpoints wakes
# far less often than one per endpoint, at half the CPU and with its timers on time
# (measured: docs/benchmarks.md, "One agent process for all hosts").
AGENT_PROCESSES = 1
# Above the launcher, the controller and the samplers that share the agents' cores:
# one process now carries every host's NIC (a nice of -10 weighs about as much as the
# sixteen processes it replaced)
AGENT_NICE = -10
MIN_RTO_ROUTE_FLOOR_MS = 8  # HZ=250 kernels round smaller values up


class TrafficError(UserError, RuntimeError):
    """The traffic could not be run (bad schedule, agents failed to start)."""


def build_plan(emu: Emulation, transfers: list[Transfer], transport: TransportSpec,
               deadline_s: float = 120.0, port_seed: int = 0,
               window: tuple[float, float] | None = None) -> Plan:
    """A plan with the fabric's addresses, starting a little from now (``window``: see
    :attr:`Plan.window`).

    Raises
    ------
    ScheduleError
        When the transport's full-size packets are smaller than those the
        fabric's rates were planned for: more packets than its budget allows.
    """
    rates = emu.report.rate_plan
    assert rates is not None  # bring-up planned the rates
    planned = rates.packet_bytes
    if transport.packet_bytes < planned:
        raise ScheduleError(
            f"the fabric's rates were planned for {planned}-byte packets and this {transport.kind} "
            f"transport sends {transport.packet_bytes}-byte ones: more packets per second than "
            f"the forwarding budget allows (bring the fabric up with packet_bytes="
            f"{transport.packet_bytes})")
    graph = emu.graph
    hosts = {ep: [f"{nic['ip']}/{nic['prefix'].split('/')[1]}"
                  for nic in graph.nodes[ep]["nics"]] for ep in fg.endpoints(graph)}
    validate_schedule(transfers, hosts)
    if transport.rate_mbps is None:  # pace at the emulated host link rate
        transport = replace(transport, rate_mbps=rates.host_mbps)
    # the transport's timeout floor follows the switches' buffer; in a lossless lane,
    # all that the buffers of its longest path can hold
    transport = replace(transport, buffer_packets=emu.options.queue_pkts)
    fc = emu.options.flow_control
    if fc is not None and transport.kind == "roce":
        hold = max((path_hold_pkts(graph, nx.shortest_path(graph, t.src, t.dst), fc,
                                   emu.options.queue_pkts) for t in transfers), default=0)
        transport = replace(transport, lossless_dscps=lossless_dscps(emu.options.lanes),
                            lossless_hold_packets=hold)
    transfers = [t if t.dst_ip or len(graph.nodes[t.dst]["nics"]) == 1
                 else replace(t, dst_ip=fg.nearest_nic_ip(graph, t.src, t.dst)) for t in transfers]
    transfers = [t if t.hops else replace(t, hops=fg.path_links(graph, t.src, t.dst))
                 for t in transfers]
    return Plan(list(transfers), hosts, transport, time.time() + START_LEAD_S, deadline_s,
                port_seed, window)


def flow_keys(plan: Plan) -> tuple[list[FlowKey], dict[str, int]]:
    """Monitor keys for the plan's flows and, per transfer, its first key's index."""
    ports = source_ports(plan)
    keys: list[FlowKey] = []
    index: dict[FlowKey, int] = {}
    first: dict[str, int] = {}
    for t in plan.transfers:
        src_ip = _source_ip(plan, t)
        dst_ip = destination_ip(plan, t)
        if plan.transport.kind == "tcp":
            candidates = [FlowKey(src_ip, dst_ip, 6, ports[t.src][k][0], TCP_DATA_PORT, t.dscp)
                          for k in tcp_connection_keys(plan, t)]
        else:
            mine = ports[t.src][("roce", t.id)]
            sport = mine[0] if len(mine) == 1 else None
            candidates = [FlowKey(src_ip, dst_ip, 17, sport, ROCE_PORT, t.dscp)]
        for key in candidates:
            if key not in index:
                index[key] = len(keys)
                keys.append(key)
        first[t.id] = index[candidates[0]]
    return keys, first


def _source_ip(plan: Plan, transfer: Transfer) -> str:
    dst = ipaddress.ip_address(destination_ip(plan, transfer))
    nics = [ipaddress.ip_interface(n) for n in plan.hosts[transfer.src]]
    best = max((n for n in nics if dst in n.network), key=lambda n: n.network.prefixlen,
               default=nics[0])
    return str(best.ip)


def set_rto_min(emu: Emulation, endpoints: list[str], rto_min_ms: int) -> None:
    """Set a per-route minimum RTO on every NIC route of ``endpoints``."""
    if rto_min_ms < MIN_RTO_ROUTE_FLOOR_MS:
        raise TrafficError(f"rto_min below {MIN_RTO_ROUTE_FLOOR_MS} ms is rounded up by the "
                           f"kernel here; ask for at least that")
    for ep in endpoints:
        for nic in emu.graph.nodes[ep]["nics"]:
            out = emu.host(ep).cmd(f"ip {hostconfig.nic_route(ep, nic, rto_min_ms)}")
            if out.strip():
                raise TrafficError(f"{ep}: setting rto_min failed: {out.strip()}")


def leaf_queue_drops(tc_stats: str) -> int:
    """Sum the drops of the leaf (``pfifo_head_drop``) queues in ``tc -s qdisc`` output.

    The HTB root repeats its children's drops, so only leaves are counted.
    """
    total = 0
    for block in re.split(r"(?m)^qdisc ", tc_stats):
        if block.startswith("pfifo_head_drop"):
            found = re.search(r"dropped (\d+)", block)
            total += int(found.group(1)) if found else 0
    return total


def ingress_drops(emu: Emulation, endpoints: list[str]) -> dict[str, int]:
    """Packets dropped by the queues into each endpoint (exact): its IFBs, or under
    flow control the switch ports that hold those queues."""
    drops = {}
    for ep in endpoints:
        total = 0
        for nic in emu.graph.nodes[ep]["nics"]:
            if emu.options.flow_control:
                switch = next(n for n in emu.graph.neighbors(ep)
                              if fg.port(emu.graph, ep, n) == nic["port"])
                dev = fg.intf_name(switch, fg.port(emu.graph, switch, ep))
                total += leaf_queue_drops(system.run(["tc", "-s", "qdisc", "show", "dev",
                                                      dev]).stdout)
            else:
                ifb = hostconfig.ifb_name(ep, nic["port"])
                total += leaf_queue_drops(emu.host(ep).cmd(f"tc -s qdisc show dev {ifb}"))
        drops[ep] = total
    return drops


def agent_sockets(plan: Plan) -> dict[str, int]:
    """Sockets each endpoint's agent opens for ``plan`` (an upper bound): its
    listeners, its planned source ports, and for TCP the connections it accepts."""
    count = {ep: 2 * len(plan.hosts[ep]) for ep in plan.hosts}  # TCP and UDP listeners
    for src, ports in source_ports(plan).items():
        # a sprayed set is opened on every NIC that sends (each address binds its own)
        nics = len(plan.hosts[src]) if plan.transport.sprays else 1
        count[src] += nics * sum(len(p) for p in set(ports.values()))
    if plan.transport.kind == "tcp":  # connections persist across transfers
        accepted = {(t.dst, t.src, key) for t in plan.transfers
                    for key in tcp_connection_keys(plan, t)}
        for dst, _, _ in accepted:
            count[dst] += 1
    return count


def agent_groups(endpoints: list[str], processes: int,
                 sockets: dict[str, int] | None = None,
                 fd_limit: int | None = None) -> list[list[str]]:
    """Split ``endpoints`` over agent processes: ``processes`` of them, or more when
    one would need more than ``fd_limit`` file descriptors for ``sockets``.

    Endpoints go, largest first, to the process with the fewest sockets so far
    (then the fewest endpoints).

    Raises
    ------
    ValueError
        If ``processes`` is below 1, or one endpoint alone needs more sockets than
        a process may open.
    """
    if processes < 1:
        raise ValueError(f"agent processes must be at least 1, got {processes}")
    if not endpoints:
        return []
    need = {ep: (sockets or {}).get(ep, 0) for ep in endpoints}
    # the interpreter, the loop and the plan take some descriptors of their own
    room = (fd_limit - 64) if fd_limit is not None else None
    if room is not None and need and max(need.values()) > room:
        worst = max(need, key=need.__getitem__)
        raise ValueError(f"{worst} needs {need[worst]} sockets, more than the {fd_limit} "
                         f"files a process may open here: use fewer entropy_ports")
    for count in range(min(processes, len(endpoints)), len(endpoints) + 1):
        groups: list[list[str]] = [[] for _ in range(count)]
        load = [0] * count
        for ep in sorted(endpoints, key=lambda e: (-need[e], endpoints.index(e))):
            i = min(range(count), key=lambda g: (load[g], len(groups[g])))
            groups[i].append(ep)
            load[i] += need[ep]
        if room is None or max(load) <= room:
            return [sorted(g, key=endpoints.index) for g in groups if g]
    raise AssertionError("unreachable: one endpoint per process always fits")


def place_agent(pid: int, cpus: set[int] | None) -> None:
    """Raise agent process ``pid``'s priority (:data:`AGENT_NICE`) and keep it on
    ``cpus`` (None: anywhere), off the forwarding thread's core. Best effort: where
    the system refuses, the agents' lateness check measures what that costs."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, AGENT_NICE)
    except OSError:
        pass
    try:
        if cpus:
            os.sched_setaffinity(pid, cpus)
    except OSError:
        pass


def start_together(agents: dict[str, subprocess.Popen], plan: Plan,
                   timeout_s: float) -> list[str]:
    """Wait until every gated agent process is listening, then give all one start time.

    Each process prints READY once its hosts' listeners are bound (or exits,
    when no host's setup succeeded: the reports say why). ``plan.start_at``
    becomes the common start, ``GO_LEAD_S`` after the last one spoke. A
    process that neither spoke nor exited within ``timeout_s`` is stopped.

    Parameters
    ----------
    agents : dict
        label (its hosts) -> process.

    Returns
    -------
    list of str
        One error per process stopped.
    """
    waiting: dict[IO[bytes], str] = {}
    for ep, proc in agents.items():
        assert proc.stdout is not None  # the agents are started with stdout=PIPE
        waiting[proc.stdout] = ep
    with selectors.DefaultSelector() as selector:
        for pipe, ep in waiting.items():
            selector.register(pipe, selectors.EVENT_READ, ep)
        end = time.monotonic() + timeout_s
        while waiting and time.monotonic() < end:
            for key, _ in selector.select(max(0.0, end - time.monotonic())):
                # the selector hands back the object registered: one of the pipes
                ready = cast(IO[bytes], key.fileobj)
                ready.readline()  # READY, or b"" when the agent exited
                selector.unregister(ready)
                del waiting[ready]
    errors = []
    for ep in sorted(waiting.values()):
        agents[ep].kill()
        errors.append(f"agents of {ep} were not listening within {timeout_s:g} s; stopped")
    plan.start_at = time.time() + GO_LEAD_S
    for proc in agents.values():
        assert proc.stdin is not None  # the agents are started with stdin=PIPE
        try:
            proc.stdin.write(f"{plan.start_at!r}\n".encode())
            proc.stdin.close()
        except OSError:
            pass  # it exited (BrokenPipeError): its report says why
    return errors


def run_plan(emu: Emulation, plan: Plan, workdir: Path, monitor_paths: bool = True,
             sample_interval_s: float = 0.2) -> TrafficResult:
    """Run ``plan`` on ``emu`` and collect results, measurements and fidelity checks.

    Parameters
    ----------
    emu : Emulation
        A running fabric.
    plan : Plan
        From :func:`build_plan`. Its ``start_at`` becomes the moment every
        agent is listening, plus ``GO_LEAD_S`` (:func:`start_together`).
    workdir : Path
        Where the plan and the agents' reports are written.
    monitor_paths : bool
        Install per-flow path monitors on the switches.
    sample_interval_s : float
        Link counter sampling interval.
    """
    involved = sorted({t.src for t in plan.transfers} | {t.dst for t in plan.transfers})
    groups = _process_groups(plan, involved)
    workdir = workdir.resolve()  # the agents start in the source root
    workdir.mkdir(parents=True, exist_ok=True)
    keys, first_key = flow_keys(plan)
    monitor = FlowMonitor(emu.graph, keys) if monitor_paths else None
    if monitor:
        monitor.install()
    plan_path = workdir / "plan.json"
    plan.save(plan_path)
    drops_before = ingress_drops(emu, involved)
    rates = emu.report.rate_plan
    packet_bytes = plan.transport.packet_bytes
    assert emu.state is not None  # the fabric is up
    fid = fidelity.FidelityMonitor(
        emu.state.root_intfs, packet_bytes * 8 / (rates.host_mbps * 1e6) if rates else None,
        packet_bytes + ETHERNET_HEADER_BYTES)
    agents: dict[str, subprocess.Popen] = {}  # label (its endpoints) -> process
    watch = emu.flow_control.watch(plan) if emu.flow_control else nullcontext(
        LosslessWatch())
    with watch as lossless:
        checks, errors, logs, series = _run_agents(emu, plan, plan_path, workdir, groups,
                                                   agents, fid, sample_interval_s)
    results = _read_reports(workdir, involved, logs, errors)
    paths = _measured_paths(emu.graph, monitor, plan, first_key) if monitor else {}
    drops_after = ingress_drops(emu, involved)
    drops = {ep: drops_after[ep] - drops_before[ep] for ep in involved}
    checks += lossless.checks
    return TrafficResult(plan, results, series, paths, drops,
                         checks + _transport_checks(plan, results, checks), errors,
                         lossless.rows, lossless.deadlocks)


def _run_agents(emu: Emulation, plan: Plan, plan_path: Path, workdir: Path,
                groups: list[list[str]], agents: dict[str, subprocess.Popen],
                fid: fidelity.FidelityMonitor, sample_interval_s: float
                ) -> tuple[list[fidelity.Check], list[str], dict[str, Path], LinkSeries]:
    """Start the agents together, sample links and fidelity until they finish, stop
    them; the fidelity checks, errors, each endpoint's log and the link series."""
    rates = emu.report.rate_plan
    try:
        fid.arm()  # its sampler starts up before the agents do
        logs = _launch_agents(emu, plan_path, workdir, groups, agents,
                              ovs.agent_cpus(rates.datapath if rates else "user"))
        errors = start_together(agents, plan, READY_TIMEOUT_S)
        plan.save(plan_path)  # the start they were given (they have read the rest)
        with LinkSampler(emu.graph, sample_interval_s) as sampler:
            time.sleep(max(0.0, plan.start_at - time.time()))
            fid.start()
            errors += _wait_for(agents, plan.start_at + plan.deadline_s + 10)
            checks = fid.stop()
    finally:
        fid.close()
        _stop_all(agents)
    return checks, errors, logs, sampler.series


def _process_groups(plan: Plan, involved: list[str]) -> list[list[str]]:
    """The endpoints each agent process serves, within this process's open-files limit."""
    fd_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    try:
        return agent_groups(involved, AGENT_PROCESSES, agent_sockets(plan),
                            None if fd_limit == resource.RLIM_INFINITY else fd_limit)
    except ValueError as exc:
        raise TrafficError(str(exc)) from exc


def _launch_agents(emu: Emulation, plan_path: Path, workdir: Path, groups: list[list[str]],
                   agents: dict[str, subprocess.Popen], cpus: set[int] | None
                   ) -> dict[str, Path]:
    """Start one agent process per group (into ``agents``, so that a failure half-way
    still stops the ones started); return each endpoint's process log."""
    logs: dict[str, Path] = {}
    for index, group in enumerate(groups):
        args = ["--plan", str(plan_path), "--out", str(workdir / "agent-{host}.json"),
                "--start-gate"]
        for ep in group:
            args += ["--host", ep, "--netns-pid", f"{ep}={emu.host(ep).pid}"]
        logs.update(dict.fromkeys(group, workdir / f"agents-{index}.log"))
        with open(logs[group[0]], "wb") as log:
            proc = start_python("fabric.agent", args, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=log)
        agents[", ".join(group)] = proc
        # it runs outside the hosts: a crashed launcher's clean-up must find it by pid
        assert emu.state is not None  # the fabric is up
        emu.state.add_process(proc.pid, expect="fabric.agent")
        place_agent(proc.pid, cpus)
    return logs


def _wait_for(agents: dict[str, subprocess.Popen], deadline: float) -> list[str]:
    """Wait for every agent process until ``deadline`` (wall time); stop the late ones."""
    errors = []
    for label, proc in agents.items():
        try:
            proc.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            errors.append(f"agents of {label} did not finish; stopped")
            proc.kill()
            proc.wait()
    return errors


def _stop_all(agents: dict[str, subprocess.Popen]) -> None:
    for proc in agents.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None  # the agents are started with stdout=PIPE
        proc.stdout.close()


def _read_reports(workdir: Path, involved: list[str], logs: dict[str, Path],
                  errors: list[str]) -> dict[str, dict]:
    """Each endpoint's agent report; a missing one adds an error with its log's tail."""
    results = {}
    for ep in involved:
        try:
            results[ep] = json.loads((workdir / f"agent-{ep}.json").read_text())
        except (OSError, ValueError):
            errors.append(f"agent on {ep} wrote no report: {log_tail(logs[ep], 3)}")
    return results


def _measured_paths(graph: Any, monitor: FlowMonitor, plan: Plan, first_key: dict[str, int]
                    ) -> dict[str, list[str]]:
    """Each transfer's path, from the switches its first connection's packets crossed."""
    crossed = monitor.crossed()
    monitor.remove()
    paths: dict[str, list[str]] = {}
    for t in plan.transfers:
        try:
            paths[t.id] = path_from_switches(graph, t.src, t.dst, crossed[first_key[t.id]])
        except ValueError:
            pass  # a flow with no counted packet, or split over several paths, has no path
    return paths


def _transport_checks(plan: Plan, results: dict[str, dict],
                      checks: list[fidelity.Check]) -> list[fidelity.Check]:
    """The transport's own checks: roce agents' lateness and timeouts in lossless
    classes (``checks``: the run's others, its losses), TCP's segment size."""
    if plan.transport.kind == "roce":
        late = fidelity.agent_lateness_check(results.values())
        timeouts = ([fidelity.lossless_timeout_check(results.values(),
                                                      plan.transport.lossless_dscps, checks)]
                    if plan.transport.lossless_dscps else [])
        return ([late] if late is not None else []) + timeouts
    return [fidelity.tcp_segment_check(
        part["mss"] for report in results.values() for record in report.get("transfers", [])
        for part in record.get("parts", []) if part.get("mss"))]


def idle_path_check(emu: Emulation, transport: TransportSpec, workdir: Path,
                    nbytes: int = 1_000_000) -> fidelity.Check:
    """Goodput of one transfer between the two farthest-apart endpoints of an
    idle fabric, against the slowest link on its path (a fidelity check).

    With ECMP the transfer takes one of the equal-cost paths; they have the
    same bottleneck in the fabrics built here, so any one of them serves.
    """
    graph = emu.graph
    eps = [e for e in fg.endpoints(graph) if graph.nodes[e]["role"] == "host"]
    src = eps[0]
    core = graph.subgraph(fg.switches(graph))
    dist = nx.single_source_shortest_path_length(core, next(iter(graph.neighbors(src))))
    dst = max(eps[1:], key=lambda e: (dist[next(iter(graph.neighbors(e)))], e))
    plan = build_plan(emu, [Transfer("idle-path", src, dst, nbytes)], transport, deadline_s=60)
    result = run_plan(emu, plan, workdir, monitor_paths=False)
    (row,) = result.transfer_rows()
    path = nx.shortest_path(graph.subgraph(set(fg.switches(graph)) | {src, dst}), src, dst)
    rates = emu.report.rate_plan
    assert rates is not None  # bring-up planned the rates
    bottleneck = min(rates.link_mbps[frozenset(hop)] for hop in zip(path, path[1:]))
    achieved = nbytes * 8 / row["fct_s"] / 1e6 if row["fct_s"] else 0.0
    return fidelity.idle_path_check(achieved, bottleneck)
