"""The host agent: run hosts' shares of a plan and write their results.

Life cycle of each host's :class:`Agent`: parse and check the plan, bind
listeners on every own NIC (TCP 7100 and UDP 4791; a busy port is an error,
not something to share), wait for ``plan.start_at`` while already accepting
peers, then start every transfer this host sends as soon as all its ``after``
transfers are complete as seen here (and, with ``after_start``, its compute time
has passed since the transfer it names started; with ``delay_s``, that long after
they completed), and stop when everything is complete or at
``start_at + deadline_s``. Unfinished transfers are reported with ``end=None`` and an
error, never dropped. Everything runs on one thread in one event loop, so
stopping is closing the loop's sockets; no thread or process outlives it.

One process can serve several hosts (:func:`run_agents`): their agents share
the event loop, and each opens its sockets in its own host's network
namespace (:mod:`fabric.agent.netns`). Every wake-up of a process costs far
more CPU than the packets it handles on a virtual machine (tens to
hundreds of us, growing with how long it slept), so one loop that wakes
for sixteen hosts costs a fraction of sixteen loops that each wake for one.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from fabric.agent import addressing, netstat
from fabric.agent.core.loop import EventLoop, lateness_summary
from fabric.agent.netns import Namespace
from fabric.agent.core.records import RECV, SEND, TransferRecord
from fabric.agent.roce.engine import RoceConfig, RoceEngine, qpn_for
from fabric.agent.tcp.engine import TcpConfig, TcpEngine
from fabric.traffic.model import Plan, ScheduleError, source_ports, validate_schedule

EXIT_OK, EXIT_FAILED = 0, 1


class _Terminated(Exception):
    """SIGTERM/SIGINT: stop, report what finished, exit 1."""


READY = "READY"  # what a gated agent prints when it can receive


@dataclass(frozen=True)
class AgentOptions:
    """Agent tunables that are not part of the plan."""

    tcp: TcpConfig = field(default_factory=TcpConfig)
    roce: RoceConfig = field(default_factory=RoceConfig)
    proc_net: Path = Path("/proc/net")
    # once its listeners are bound, say READY on stdout and take the start time
    # (wall clock) from a line on stdin: the launcher starts every agent together
    # however long the slowest took to come up
    start_gate: bool = False


class Agent:
    """One host's agent.

    Parameters
    ----------
    plan : Plan
        The whole plan (every agent reads the same one).
    host : str
        This endpoint's name in ``plan.hosts``.
    options : AgentOptions
        Ports and transport tunables.
    loop : EventLoop, optional
        The event loop to run on, shared by the agents of one process
        (default: a loop of its own).
    netns : Namespace, optional
        The host's network namespace when the process runs outside it: its
        sockets are opened there and its counters read from there.
    """

    def __init__(self, plan: Plan, host: str, options: AgentOptions = AgentOptions(),
                 loop: EventLoop | None = None, netns: Namespace | None = None) -> None:
        self.plan = plan
        self.host = host
        self.options = options
        self.errors: list[str] = []
        self.records: list[TransferRecord] = []
        self.by_id: dict[str, list[TransferRecord]] = {}
        self.waiting: dict[str, list[TransferRecord]] = {}  # dependency id -> dependents
        self.waiting_start: dict[str, list[TransferRecord]] = {}  # after_start id -> them
        self._timed: set[int] = set()  # id() of sends waiting for their after_start time
        self.started_at: float | None = None
        self.start_at = plan.start_at
        self.finished_at: float | None = None
        self.loop = loop if loop is not None else EventLoop()
        self.netns = netns
        self.done = False  # finished (or out of time): its process may stop
        self.engine: TcpEngine | RoceEngine | None = None
        self.engines: list[Any] = []
        self.addresses: list[str] = []
        self._kicked = False
        self._settled: set[int] = set()  # id() of records completed or failed
        self._netstat_before: dict[str, int] = {}
        self._netstat: dict[str, int] = {}
        self._cpu0 = 0.0  # process CPU time when the traffic starts (after the gate)
        self._cpu_end: float | None = None  # ... and when it ended, before the teardown
        self._setup_cpu = 0.0  # process CPU time spent before it
        self.process_hosts = 1  # agents in this process (they share cpu_s and the loop)

    # -- setup -------------------------------------------------------------------------
    def prepare(self) -> bool:
        """Check the plan, open the listeners, set up the sends; False (with
        :attr:`errors`) when the agent cannot run."""
        plan, host = self.plan, self.host
        if self.errors:  # e.g. its namespace could not be opened
            return False
        if host not in plan.hosts:
            self.errors.append(f"host {host!r} is not in the plan")
            return False
        try:
            validate_schedule(plan.transfers, plan.hosts)
            self.addresses = addressing.nic_addresses(plan.hosts[host])
        except (ScheduleError, ValueError) as exc:
            self.errors.append(f"bad plan: {exc}")
            return False
        if not self.addresses:
            self.errors.append(f"host {host!r} has no NIC in the plan")
            return False
        for index, t in enumerate(plan.transfers):
            for role, mine in ((SEND, t.src == host), (RECV, t.dst == host)):
                if mine:
                    record = TransferRecord(t, role, qpn=qpn_for(index))
                    self.records.append(record)
                    self.by_id.setdefault(t.id, []).append(record)
        for record in self._sends():
            for dep in record.transfer.after:
                self.waiting.setdefault(dep, []).append(record)
            if record.transfer.after_start:
                self.waiting_start.setdefault(record.transfer.after_start[0], []).append(record)
        ports = source_ports(plan, host).get(host, {})
        opener = self.netns.socket if self.netns else socket.socket
        tcp = TcpEngine(self.loop, plan.transport, self.addresses, self._done, self._fail,
                        self.options.tcp, ports, opener)
        roce = RoceEngine(self.loop, plan.transport, self.addresses, self._done, self._fail,
                          self.options.roce, ports, opener)
        self.engines = [tcp, roce]
        self.engine = tcp if plan.transport.kind == "tcp" else roce
        try:
            for engine in self.engines:
                engine.bind()
        except OSError as exc:
            self.errors.append(f"cannot bind listeners on {', '.join(self.addresses)}: {exc} "
                               f"(port busy: another agent or a stale run?)")
            return False
        for record in self.records:
            if record.role == RECV:
                self.engine.add_recv(record)
            elif self._resolve(record) is None:
                self.engine.prepare_send(record)  # before start_at, as a NIC sets up its QPs
        self.loop.add_service(roce.service)  # pacing, loss timers, delayed ACKs
        self.loop.add_service(self._service)
        return True

    def _sends(self) -> list[TransferRecord]:
        return [r for r in self.records if r.role == SEND]

    # -- life cycle --------------------------------------------------------------------
    @property
    def proc_net(self) -> Path:
        """Where this host's network counters are read."""
        return self.netns.proc_net if self.netns else self.options.proc_net

    def arm(self, start_at: float) -> None:
        """Schedule the start (wall clock ``start_at``) and the deadline after it."""
        self.start_at = start_at
        if self.plan.window and isinstance(self.engine, RoceEngine):
            self.engine.receiver.count_window(start_at + self.plan.window[0],
                                              start_at + self.plan.window[1])
        offset = time.monotonic() - time.time()
        self.loop.call_at(start_at + offset, self._kick)
        self.loop.call_at(start_at + self.plan.deadline_s + offset, self._deadline)
        if not self.records:
            self.done = True

    def close(self) -> None:
        """Close the agent's sockets."""
        for engine in self.engines:
            engine.close()

    def run(self, out: Path | None = None) -> int:
        """Run alone in this process (:func:`run_agents`); return the exit code."""
        return run_agents([self], {self.host: out}, self.options.start_gate)

    @property
    def succeeded(self) -> bool:
        """Every transfer complete and no agent-level error."""
        return not self.errors and all(r.ok for r in self.records) and (
            self._kicked or not self.records)

    def _kick(self) -> None:
        self._kicked = True
        self._netstat_before = netstat.read_counters(self.proc_net)
        for record in self._sends():
            if not record.transfer.after:
                self._try_start(record)

    def _try_start(self, record: TransferRecord) -> None:
        """Start a send whose dependencies are met: now, or when its after_start allows."""
        if record.ready is not None or record.finished or id(record) in self._timed:
            return
        if not all(self._complete(dep) for dep in record.transfer.after):
            return
        earliest = self._earliest_start(record)
        if earliest is None:
            return  # the transfer it is timed from has not started yet
        delay = earliest - time.time()
        if delay <= 0:
            self._start(record)
            return
        self._timed.add(id(record))
        self.loop.call_later(delay, lambda: None if record.finished else self._start(record))

    def _earliest_start(self, record: TransferRecord) -> float | None:
        """Wall-clock time ``after_start`` and ``delay_s`` allow (0 without them); None
        before it is known."""
        t = record.transfer
        earliest = 0.0
        if t.delay_s and t.after:
            # when the last dependency completed here (received, or confirmed sent)
            ends = [r.end for dep in t.after for r in self.by_id[dep]
                    if r.ok and r.end is not None]  # ok: it has an end
            earliest = max(ends) + t.delay_s
        if t.after_start is None:
            return earliest
        ref_id, seconds = t.after_start
        ref = next(r for r in self.by_id[ref_id] if r.role == SEND)
        return None if ref.ready is None else max(earliest, ref.ready + seconds)

    def _resolve(self, record: TransferRecord) -> str | None:
        """Set the record's addresses (the model's rule); the reason if it has none."""
        try:
            record.dst_ip = addressing.destination_address(self.plan, record.transfer)
            record.src_ip = addressing.source_address(self.plan.hosts[self.host],
                                                      record.dst_ip)
        except ValueError as exc:
            return f"no address: {exc}"
        return None

    def _start(self, record: TransferRecord) -> None:
        record.ready = time.time()
        problem = self._resolve(record)
        if problem:
            self._fail(record, problem)
        else:
            assert self.engine is not None
            self.engine.start_send(record, time.monotonic())
        for dependent in self.waiting_start.get(record.id, ()):
            self._try_start(dependent)  # timed from when it was ready to go, sent or not

    def _done(self, record: TransferRecord) -> None:
        self._settled.add(id(record))
        for dependent in self.waiting.get(record.id, ()):
            self._try_start(dependent)

    def _complete(self, transfer_id: str) -> bool:
        # the dependency is local: this host sent it (confirmed) or received it
        return any(r.ok for r in self.by_id.get(transfer_id, ()))

    def _fail(self, record: TransferRecord, reason: str) -> None:
        if record.finished:
            return
        record.error = reason
        self._settled.add(id(record))
        # what can never start fails now, so the agent need not wait for
        # its deadline when the rest is done
        never = list(self.waiting.get(record.id, ()))
        if record.ready is None:  # nor can what is timed from its start
            never += self.waiting_start.get(record.id, [])
        for dependent in never:
            self._fail(dependent, f"dependency {record.id} failed")

    def _fail_unfinished(self, reason: str) -> None:
        for record in self.records:
            if record.finished:
                continue
            record.error = reason
            if record.role == SEND and record.ready is None:
                pending = [d for d in record.transfer.after if not self._complete(d)]
                if record.transfer.after_start and self._earliest_start(record) is None:
                    pending.append(f"{record.transfer.after_start[0]} to start")
                record.error += (f"; never started, waiting for {', '.join(pending)}"
                                 if pending else "; never started")

    def _deadline(self) -> None:
        self._fail_unfinished(f"deadline: not finished {self.plan.deadline_s:g} s after "
                              f"start_at")
        self.done = True

    def _service(self, now: float) -> float | None:
        """Done once everything is finished and no receiver needs to linger."""
        if self.done or not self._kicked or len(self._settled) < len(self.records):
            return None  # (a counter: this runs every loop iteration)
        lingers = [t for t in (engine.linger_until() for engine in self.engines)
                   if t is not None]
        until = max(lingers) if lingers else None
        if until is None or now >= until:
            self.done = True
            return None
        return until

    # -- result ------------------------------------------------------------------------
    def result(self) -> dict[str, Any]:
        """The result document (call after :meth:`run`; see :func:`agent_result`)."""
        return agent_result(self)


def finish(agent: Agent) -> None:
    """Take the counters of ``agent`` into its records (then :meth:`Agent.close`): the
    engines' per-transfer counters, the host's network counters since the start, and
    when the traffic ended."""
    for engine in agent.engines:
        engine.snapshot()
    if agent._netstat_before:
        agent._netstat = netstat.delta(agent._netstat_before,
                                       netstat.read_counters(agent.proc_net))
    agent.finished_at = time.time()
    agent._cpu_end = time.process_time()


def agent_result(agent: Agent) -> dict[str, Any]:
    """The result document of ``agent`` (after its run and :func:`finish`).

    Parameters
    ----------
    agent : Agent
        An agent that ran (or could not).

    Returns
    -------
    dict
        Its transfers' rows, network counters, RoCE totals, errors and warnings of
        the agent and its engines, and the process's CPU time and wake-ups.
    """
    rows = [r.row() for r in agent.records]
    errors = list(agent.errors)
    for engine in agent.engines:
        errors.extend(getattr(engine, "errors", []))
    errors.extend(f"{r.id} ({r.role}): {r.error}" for r in agent.records if r.error)
    warnings = [w for engine in agent.engines for w in engine.warnings]
    roce = agent.engines[1].totals() if len(agent.engines) > 1 else {}
    # the traffic's CPU: closing thousands of sockets afterwards is not part of it
    end = time.process_time() if agent._cpu_end is None else agent._cpu_end
    cpu = end - agent._cpu0 if agent._cpu0 else 0.0
    return {"host": agent.host, "transport": agent.plan.transport.kind,
            "transfers": rows, "netstat": agent._netstat, "roce": roce,
            "errors": errors, "warnings": warnings, "ok": agent.succeeded,
            "started_at": agent.started_at, "finished_at": agent.finished_at,
            "start_at": agent.start_at,
            "pid": os.getpid(), "process_hosts": agent.process_hosts,
            "cpu_s": round(cpu, 4), "setup_cpu_s": round(agent._setup_cpu, 4),
            "wakeups": agent.loop.wakeups,
            "wake_late": lateness_summary(agent.loop.wake_late_s)}


def per_process(results: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One result per agent process (the first of its hosts'): ``cpu_s``,
    ``setup_cpu_s``, ``wakeups`` and ``wake_late`` are the process's, whatever
    host reports them. A result without a ``pid`` counts as a process of its own."""
    seen: set[int] = set()
    unique = []
    for result in results:
        pid = result.get("pid")
        if pid is None or pid not in seen:
            unique.append(result)
            if pid is not None:
                seen.add(pid)
    return unique


def _raise_terminated(signum: int, _frame: Any) -> None:
    raise _Terminated(signum)


def _raise_fd_limit() -> None:
    """Lift the open-files limit as far as allowed (best effort): to the kernel's
    ``nr_open`` when privileged (a process serving many hosts holds entropy_ports
    sockets per host and peer), else the soft limit to the hard one."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return
        try:
            ceiling = int(Path("/proc/sys/fs/nr_open").read_text())
            resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, ceiling))
            return
        except (OSError, ValueError):
            pass  # not privileged: up to the hard limit
        target = hard if hard != resource.RLIM_INFINITY else 1 << 20
        if soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        pass


def _await_start() -> tuple[float | None, str]:
    """Say READY and read the start time from stdin: (time or None, the line read)."""
    sys.stdout.write(READY + "\n")
    sys.stdout.flush()
    line = sys.stdin.readline()
    try:
        return float(line), line
    except ValueError:
        return None, line


def _catch_termination() -> dict[int, Any]:
    """Make SIGTERM and SIGINT raise :class:`_Terminated` (on the main thread only, where
    Python runs signal handlers); return the handlers they had."""
    previous: dict[int, Any] = {
        sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)
    } if threading.current_thread() is threading.main_thread() else {}
    for sig in previous:
        signal.signal(sig, _raise_terminated)
    return previous


def _pass_start_gate(running: list[Agent], start_at: float) -> tuple[list[Agent], float]:
    """Take the common start time from the launcher: the agents that run and when they
    start (none when it sent no time, each then failing with the line it got)."""
    gate, line = _await_start()
    if gate is None:
        for agent in running:
            agent.errors.append(f"no start time from the launcher (got {line.strip()!r})")
        return [], start_at
    return running, gate


def _run_loop(loop: EventLoop, agents: list[Agent], running: list[Agent],
              start_at: float) -> None:
    """Arm the agents that run for ``start_at`` and run the loop until all are done."""
    # setup (sockets, port pools) is its own figure: cpu_s is the traffic's
    setup_cpu = time.process_time()
    for agent in agents:
        agent._setup_cpu = agent._cpu0 = setup_cpu
    for agent in running:
        agent.arm(start_at)

    def stop_when_done(_now: float) -> None:
        if all(agent.done for agent in running):
            loop.stop()

    loop.add_service(stop_when_done)  # after the agents': it sees this round's
    loop.run()


def _wind_up(loop: EventLoop, agents: list[Agent], outs: Mapping[str, Path | None]) -> None:
    """Take the agents' counters, close every socket, write each result."""
    for agent in agents:
        finish(agent)
    loop.close()  # first: one close of the epoll set drops every socket's registration
    for agent in agents:
        agent.close()
    for agent in agents:
        out = outs.get(agent.host)
        if out is not None:
            tmp = out.with_name(out.name + ".tmp")
            tmp.write_text(json.dumps(agent.result(), indent=1))
            tmp.replace(out)  # readers never see half a file


def run_agents(agents: list[Agent], outs: Mapping[str, Path | None],
               start_gate: bool = False) -> int:
    """Run agents that share one event loop to completion or deadline.

    Parameters
    ----------
    agents : list of Agent
        Made with the same plan and the same ``loop``.
    outs : mapping
        host -> where to write its :meth:`Agent.result` as JSON (atomically,
        still under the signal handling so a second SIGTERM cannot lose it),
        or None.
    start_gate : bool
        Once every agent is set up, say READY on stdout and take the common
        start time (wall clock) from a line on stdin instead of the plan's.
        An agent whose setup failed does not run (its report says why); when
        none could, the process does not wait for the gate: the launcher
        sees its stdout close.

    Returns
    -------
    int
        0 when every agent completed all its transfers, else 1.
    """
    loop = agents[0].loop
    if any(agent.loop is not loop for agent in agents):
        raise ValueError("agents run together must share one event loop")
    now = time.time()
    # start_at 0 (the model's default) means "as soon as the agents are up"
    start_at = agents[0].plan.start_at if agents[0].plan.start_at > 0 else now
    for agent in agents:
        agent.started_at, agent.start_at, agent.process_hosts = now, start_at, len(agents)
    previous = _catch_termination()
    _raise_fd_limit()  # packet entropy holds entropy_ports sockets per host and peer
    try:
        running = [agent for agent in agents if agent.prepare()]
        if running and start_gate:
            running, start_at = _pass_start_gate(running, start_at)
        if running:
            _run_loop(loop, agents, running, start_at)
    except _Terminated:
        for agent in agents:
            agent._fail_unfinished("agent terminated by a signal")
    finally:
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)  # finish the reports first
        _wind_up(loop, agents, outs)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return EXIT_OK if all(agent.succeeded for agent in agents) else EXIT_FAILED


def run_agent(plan_path: Path, hosts: Sequence[str], outs: Mapping[str, Path],
              options: AgentOptions = AgentOptions(),
              netns_pids: Mapping[str, int] | None = None) -> int:
    """Read a plan, run the agents of ``hosts`` in this process, write their results.

    Parameters
    ----------
    plan_path : Path
        The plan (JSON).
    hosts : sequence of str
        Endpoints this process serves (one event loop for all).
    outs : mapping
        host -> result JSON path.
    options : AgentOptions
        Tunables, the same for every host.
    netns_pids : mapping, optional
        host -> pid of a process in that host's network namespace, for hosts
        served from outside their namespace (the emulation's launcher).

    Returns
    -------
    int
        The exit code: 0 when every host's transfers completed.
    """
    try:
        plan = Plan.from_json(plan_path.read_text())
    except (OSError, ValueError, TypeError, KeyError) as exc:
        now = time.time()
        for host in hosts:
            outs[host].write_text(json.dumps(
                {"host": host, "transfers": [], "netstat": {}, "roce": {},
                 "errors": [f"cannot read plan {plan_path}: {exc}"],
                 "ok": False, "started_at": now, "finished_at": now}))
        return EXIT_FAILED
    loop = EventLoop()
    namespaces: list[Namespace] = []
    agents = []
    for host in hosts:
        netns, problem = None, None
        pid = (netns_pids or {}).get(host)
        if pid is not None:
            try:
                netns = Namespace(pid)
                namespaces.append(netns)
            except (OSError, ValueError) as exc:
                problem = f"cannot enter the network namespace of pid {pid}: {exc}"
        agent = Agent(plan, host, options, loop, netns)
        if problem:
            agent.errors.append(problem)  # it must not open sockets anywhere else
        agents.append(agent)
    try:
        return run_agents(agents, outs, options.start_gate)
    finally:
        for netns in namespaces:
            netns.close()
