"""Turn a fabric graph into a running Mininet network, and undo it all.

This is the only module that imports Mininet (lazily, inside methods).
Bring-up order: check everything that can be checked without touching the
system (rates, root, tools, controller port, other runs), record an undo log
(:mod:`fabric.emulation.runstate`), set global sysctls, make sure Open vSwitch runs,
start the controller, build the network, configure hosts and shaping, and
wait until the controller confirms every switch's routes. Teardown always
runs the undo log, whatever happened before.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import networkx as nx

from fabric.emulation import (adaptive_routing, capacity, ecn, hostconfig, mnclasses, ovs,
                              runstate, shaping)
from fabric.emulation.adaptive_routing import AdaptiveRouting
from fabric.emulation.controller_process import ControllerProcess
from fabric.emulation.ecn import EcnMarking
from fabric.emulation.errors import EmulationError
from fabric.emulation.flow_control_session import FlowControlSession
from fabric.emulation.link_control import LinkControl, tc_in_netns
from fabric.emulation.machine_speed import machine_speed
from fabric.emulation.send_buffer import fabric_queue_packets, send_buffer_bytes
from fabric.host import libbpf, system
from fabric.model import graph as fg
from fabric.model.flowcontrol import FlowControl
from fabric.model.lanes import SINGLE_LANE, LaneConfig
from fabric.routing.adaptive import AdaptiveParams, params_for_rate
from fabric.routing.config import ControllerConfig
from fabric.routing.deadlock import buffer_dependencies, describe_cycle, find_cycle
from fabric.routing.policies import POLICIES, policy_route_tables
from fabric.routing.static import StaticRoutingError, static_route_tables
from fabric.routing.switch_ar import ArParams, check_port_sets
from fabric.routing.tables import check_pinned, route_tables
from fabric.traffic.model import TCP_PACKET_BYTES

OPENFLOW_PROTOCOLS = "OpenFlow13,OpenFlow15"
# Socket buffers for userspace OVS's AF_PACKET sockets (docs/platform.md,
# "Socket buffers"):
# receive sockets take rmem_default when ports are created, the send socket
# takes wmem_default when it is created. IPv6 stays off on new interfaces so
# the root-namespace switch ports do not emit DAD/RS/MLD into the fabric.
# The send buffer is the fabric's own (fabric.emulation.send_buffer).
RUN_SYSCTLS = {
    "net.core.rmem_default": str(8 * 1024 * 1024),
    "net.ipv6.conf.default.disable_ipv6": "1",
}
ALLOWED_TCP_CC = "net.ipv4.tcp_allowed_congestion_control"
# Inside each host: no IPv6; offloads off or TCP stalls over userspace OVS.
HOST_SETUP_SCRIPT = r"""
sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
# TCP ACKs carry the DSCP of the data they acknowledge (so they stay in its lane)
sysctl -qw net.ipv4.tcp_reflect_tos=1 2>/dev/null || true
# the pinned TCP congestion control (a new namespace takes the kernel's default)
sysctl -qw net.ipv4.tcp_congestion_control="$3"
ip -batch "$1"
tc -batch "$2"
shift 3
for dev in "$@"; do
  ethtool -K "$dev" tx off rx off tso off gso off gro off >/dev/null 2>&1 || true
done
"""
# The switches' ends of the links: jumbo MTU like the hosts' ends (a veth drops what
# exceeds its peer's MTU), offloads off.
SWITCH_PORTS_SCRIPT = r"""
mtu="$1"
shift
for dev in "$@"; do
  ip link set dev "$dev" mtu "$mtu"
  ethtool -K "$dev" tx off rx off tso off gso off gro off >/dev/null 2>&1 || true
done
"""


@dataclass(frozen=True)
class EmulationOptions:
    """How to emulate: routing policy, scaled rates, buffers, datapath."""

    policy: str = "ecmp"
    host_mbps: float | None = None  # None: the highest rate that fits (capacity)
    queue_pkts: int = shaping.DEFAULT_QUEUE_PKTS
    datapath: str = "auto"
    controller_port: int = 6653
    lanes: LaneConfig = SINGLE_LANE
    adaptive: AdaptiveParams | None = None  # None: timing scaled to the host rate
    busy_links: int | None = None  # endpoint links the workload loads at once (None: all)
    enforce_budget: bool = True  # False only to benchmark beyond the forwarding budget
    tcp_cc: str = "cubic"  # TCP congestion control of every emulated host
    controller_app: str | None = None  # your own os-ken app, MODULE:CLASS or app.py:CLASS
    remote_controller: str | None = None  # remote:HOST:PORT, already running, on loopback
    ecn: EcnMarking | None = EcnMarking()  # marking on switch queues; None: none
    # IP bytes of the workload's full-size packets (TransportSpec.packet_bytes): the
    # forwarding budget counts packets; ECN thresholds and adaptive timing are in them
    packet_bytes: int = TCP_PACKET_BYTES
    # link-level flow control (PFC) on the lanes that are lossless; None: lossy Ethernet
    flow_control: FlowControl | None = None
    # the switches' per-packet choice under policy "ar": threshold and flowlet gap
    adaptive_routing: ArParams = ArParams()
    # {switch: {destination ip: ports}} installed in place of the policy's routes
    # (fabric's own policy apps only; e.g. fabric.routing.deadlock.valley_routes)
    pinned_routes: dict[str, dict[str, tuple[int, ...]]] | None = None


@dataclass
class BringUpReport:
    """What bring-up measured: phase times and fidelity warnings."""

    datapath: str = ""
    rate_plan: capacity.RatePlan | None = None
    send_buffer_bytes: int = 0  # userspace OVS's send socket: every switch queue full
    phases_s: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def rates(self) -> capacity.RatePlan:
        """The rate plan, made before bring-up's first change."""
        if self.rate_plan is None:
            raise EmulationError("the emulation has no rate plan: it is not started")
        return self.rate_plan

    @property
    def total_s(self) -> float:
        """Seconds from the first system change until routes were confirmed."""
        return sum(self.phases_s.values())


class Emulation:
    """A running emulated fabric; use as a context manager.

    It owns one object per job besides the network itself: :attr:`controller`
    (:class:`ControllerProcess`), :attr:`flow_control` (:class:`FlowControlSession`,
    None without flow control), :attr:`adaptive_routing` (the switches' per-packet
    choice, None unless the policy is ``ar``) and, once up, :attr:`links`
    (:class:`LinkControl`: cut, restore, degrade).

    Parameters
    ----------
    graph : networkx.Graph
        A validated fabric graph; it must carry its ``spec`` (the controller
        process rebuilds the same graph from it).
    options : EmulationOptions
        Policy, rates, buffers and datapath.
    """

    def __init__(self, graph: nx.Graph, options: EmulationOptions = EmulationOptions()):
        if "spec" not in graph.graph:
            raise EmulationError("the graph has no spec; build it with topologies.build(spec)")
        self.graph = graph
        self.options = options
        self.report = BringUpReport()
        self.net: Any = None
        self.state: runstate.RunState | None = None
        self.workdir: Path | None = None
        self.controller = ControllerProcess(graph, options.policy, options.controller_port,
                                            options.controller_app, options.remote_controller)
        self.flow_control = (FlowControlSession(graph, options.flow_control, options.lanes,
                                                options.queue_pkts, self._frame_bytes)
                             if options.flow_control else None)
        self.adaptive_routing: AdaptiveRouting | None = None
        self.links: LinkControl | None = None
        self._made: runstate.RunState | None = None  # kept after stop, to verify
        self._markers: dict[float, Path] = {}  # link rate -> compiled ECN marker
        self._ar_object: Path | None = None  # the compiled adaptive-routing datapath

    @property
    def _state(self) -> runstate.RunState:
        """The run state, recorded at the start of bring-up (its ``workdir`` is
        :attr:`workdir`)."""
        if self.state is None:
            raise EmulationError("the emulation has no run state: it is not started")
        return self.state

    def __enter__(self) -> "Emulation":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def host(self, name: str) -> Any:
        """Return the Mininet host ``name``."""
        return self.net.get(name)

    def host_pids(self) -> dict[str, int]:
        """Endpoint -> the pid of its shell (a process in its network namespace)."""
        return {ep: self.host(ep).pid for ep in fg.endpoints(self.graph)}

    def interact(self, stdin: Any = None) -> None:
        """Run Mininet's CLI on the running fabric until the user quits (or ``stdin`` ends).

        Mininet prints command output at its ``output`` log level, which the
        bring-up keeps quiet; the CLI runs at that level.
        """
        from mininet.cli import CLI
        from mininet.log import setLogLevel

        setLogLevel("output")
        try:
            CLI(self.net, stdin=stdin or sys.stdin)
        finally:
            setLogLevel("error")

    # -- bring-up -----------------------------------------------------------

    def start(self) -> None:
        """Bring the fabric up; on any failure remove everything and re-raise."""
        self._check_before_changes()
        try:
            with _phase(self.report, "system"):
                self._record_and_set_sysctls()
                self.report.warnings += ovs.ensure_running(self.report.datapath,
                                                           self.report.send_buffer_bytes)
            with _phase(self.report, "controller"):
                self.controller.start(self._state.workdir, self._state, self._controller_config())
            with _phase(self.report, "network"):
                self._build_network()
            with _phase(self.report, "configure"):
                self._configure_hosts_and_shaping()
            if self.flow_control:
                with _phase(self.report, "flow control"):
                    self.report.warnings += self.flow_control.start(
                        self.host_pids(), self.report.rates.link_mbps, self._state.workdir,
                        self._state, ovs.agent_cpus(self.report.datapath))
            if self._ar_object:
                with _phase(self.report, "adaptive routing"):
                    self._start_adaptive_routing()
            with _phase(self.report, "routes"):
                self.controller.wait_until_routed()
            self.links = LinkControl(
                self.graph, self.report.rates.link_mbps, self.options.lanes,
                self.options.queue_pkts, self.options.ecn, self.flow_control is not None,
                self._frame_bytes, self._state.workdir, self.host_pids(), self.adaptive_routing)
            if self.report.datapath == "user":
                self.report.warnings += ovs.socket_buffer_warnings(
                    self._state.root_intfs, int(RUN_SYSCTLS["net.core.rmem_default"]),
                    self.report.send_buffer_bytes)
        except BaseException:
            self.stop()
            raise

    def _check_before_changes(self) -> None:
        datapath = ovs.choose_datapath(self.options.datapath)
        self.report.datapath = datapath
        try:
            speed = machine_speed()
        except ValueError as exc:
            raise EmulationError(str(exc)) from None
        plan = capacity.plan_rates(
            self.graph, self.options.host_mbps, datapath, self.options.busy_links,
            self.options.enforce_budget, self.options.packet_bytes, speed.factor)
        self.report.rate_plan = plan
        self.report.send_buffer_bytes = send_buffer_bytes(
            fabric_queue_packets(self.graph, self.options.queue_pkts, self.options.lanes,
                                 self.options.flow_control) if datapath == "user" else 0,
            self._frame_bytes)
        if self.options.enforce_budget and plan.machine_headroom < 1:
            self.report.warnings.append(
                f"{plan.host_mbps:g} Mbit/s per host fits the forwarding budget, but this "
                f"machine runs at {speed.factor:.2f} of the speed it was measured at "
                f"({speed.describe()}): the fidelity checks may fail above about "
                f"{int(plan.host_mbps * plan.machine_headroom * 10) / 10:g} Mbit/s")
        system.preflight()
        if self.options.ecn:
            # built now: a missing compiler must fail before anything changes
            try:
                self._markers = {mbps: ecn.marker_object(mbps, self.options.queue_pkts,
                                                         self.options.ecn, self._frame_bytes)
                                 for mbps in set(self.report.rates.link_mbps.values())}
            except ecn.MarkerError as exc:
                raise EmulationError(str(exc)) from None
        if self.flow_control:
            self.flow_control.check()  # a failed build changes nothing
        self._check_routing()
        available = tcp_congestion_controls()
        if self.options.tcp_cc not in available:
            raise EmulationError(f"TCP congestion control {self.options.tcp_cc!r} is not in "
                                 f"this kernel (available: {', '.join(available)})")
        for other in runstate.load_all():
            if system.running(other.owner_pid) and other.owner_pid != os.getpid():
                raise EmulationError(f"another fabric run (pid {other.owner_pid}) is active; "
                                     f"wait for it or stop it and run `fabric clean`")
            runstate.undo(other)  # a dead run's leftovers would collide with ours
        ovs.delete_bridges(runstate.orphan_bridges())
        self.controller.check()
        clashes = [sw for sw in fg.switches(self.graph) if Path(f"/sys/class/net/{sw}").exists()]
        if clashes:
            raise EmulationError(f"interfaces {', '.join(clashes[:5])} already exist; "
                                 f"run `fabric clean` or remove them")

    def _check_routing(self) -> None:
        """The policy can route this graph, and its datapath builds (before any change)."""
        if self.options.policy not in POLICIES:
            raise EmulationError(f"unknown routing policy {self.options.policy!r} "
                                 f"(known: {', '.join(POLICIES)})")
        try:
            if self.options.policy == "static":  # a graph without tiers
                static_route_tables(self.graph)
            if self.options.policy == "ar":
                check_port_sets(route_tables(self.graph))
                self._ar_object = adaptive_routing.build_object()
        except (StaticRoutingError, ValueError, adaptive_routing.AdaptiveRoutingError,
                libbpf.BpfError) as exc:
            raise EmulationError(str(exc)) from None
        own_app = not (self.options.controller_app or self.options.remote_controller)
        pinned = self.options.pinned_routes
        if pinned:
            if not own_app or self.options.policy == "ar":
                raise EmulationError("pinned routes go to fabric's own policy apps, not to "
                                     "your own controller nor under policy ar (its switches "
                                     "choose among the route's ports)")
            try:
                check_pinned(self.graph, pinned)
            except ValueError as exc:
                raise EmulationError(str(exc)) from None
        if self.flow_control and own_app:
            deps = buffer_dependencies(self.graph, policy_route_tables(
                self.options.policy, self.graph, pinned=pinned))
            self.flow_control.dependencies = deps  # the run-time detector's
            cycle = find_cycle(deps)
            if cycle:  # a run may build one on purpose; its pauses will show it
                self.report.warnings.append(
                    f"the routes can deadlock the lossless lanes: the links "
                    f"{describe_cycle(cycle)} may each wait for the next")

    @property
    def _frame_bytes(self) -> int:
        """Wire bytes of the workload's full-size packets, as HTB counts them."""
        return self.options.packet_bytes + shaping.ETHERNET_HEADER_BYTES

    def _record_and_set_sysctls(self) -> None:
        state = runstate.new_run_state()
        state.bridges = fg.switches(self.graph)
        state.root_intfs = [fg.intf_name(sw, fg.port(self.graph, sw, nbr))
                            for sw in state.bridges for nbr in self.graph.neighbors(sw)]
        state.host_intfs = [fg.intf_name(ep, nic["port"]) for ep in fg.endpoints(self.graph)
                            for nic in self.graph.nodes[ep]["nics"]]
        wanted = self._run_sysctls()
        state.sysctls = {key: system.read_sysctl(key) for key in wanted}
        state.save()  # before the first change, so a kill at any point can be undone
        self.state = self._made = state
        self.workdir = state.workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        for key, value in wanted.items():
            if key.endswith("_default") and int(system.read_sysctl(key)) >= int(value):
                continue
            system.write_sysctl(key, value)

    def _run_sysctls(self) -> dict[str, str]:
        """The global sysctls of this run: socket buffers, no IPv6 on new links, the
        TCP congestion control allowed to the hosts' namespaces (a namespace may only
        choose an allowed one) and what the forwarding thread needs."""
        allowed = system.read_sysctl(ALLOWED_TCP_CC).split()
        if self.options.tcp_cc not in allowed:
            allowed.append(self.options.tcp_cc)
        return {**RUN_SYSCTLS, "net.core.wmem_default": str(self.report.send_buffer_bytes),
                ALLOWED_TCP_CC: " ".join(allowed),
                **ovs.forwarding_sysctls(self.report.datapath)}

    def _build_network(self) -> None:
        from mininet.link import Link
        from mininet.log import setLogLevel
        from mininet.node import RemoteController

        setLogLevel("error")
        net = mnclasses.network_class()(
            topo=None, switch=mnclasses.switch_class(), link=Link, controller=None, build=False,
            autoSetMacs=False, autoStaticArp=False, waitConnected=False)
        self.net = net
        # every node's shell is recorded: teardown and `fabric clean` stop them all, even
        # when the process that started them lives on (an interpreter using the API)
        host, port = self.controller.address
        controller = net.addController("c0", controller=RemoteController, ip=host, port=port)
        self._state.add_process(controller.pid, expect="mininet:c0")
        datapath = "user" if self.report.datapath == "user" else "kernel"
        for sw in fg.switches(self.graph):
            switch = net.addSwitch(sw, dpid=self.graph.nodes[sw]["dpid"], datapath=datapath,
                                   protocols=OPENFLOW_PROTOCOLS, failMode="secure",
                                   fabric_run=self._state.run_id)
            self._state.add_process(switch.pid, expect=f"mininet:{sw}")
        for ep in fg.endpoints(self.graph):
            host = net.addHost(ep, ip=None)
            self._state.add_process(host.pid, expect=f"mininet:{ep}")
            self._state.netns_inodes.append(os.stat(f"/proc/{host.pid}/ns/net").st_ino)
        self._state.save()
        for a, b, data in self.graph.edges(data=True):
            pa, pb = data["ports"][a], data["ports"][b]
            net.addLink(a, b, port1=pa, port2=pb,
                        intfName1=fg.intf_name(a, pa), intfName2=fg.intf_name(b, pb))
        net.build()
        net.start()

    def _configure_hosts_and_shaping(self) -> None:
        shaping_args = (self.report.rates.link_mbps, self.options.queue_pkts,
                        self.options.lanes)
        fc = self.options.flow_control
        procs = []
        for ep in fg.endpoints(self.graph):
            ip_file = self._state.workdir / f"{ep}.ip"
            tc_file = self._state.workdir / f"{ep}.tc"
            ip_file.write_text(hostconfig.host_ip_batch(self.graph, ep))
            tc_file.write_text(hostconfig.endpoint_tc_batch(self.graph, ep, *shaping_args,
                                                            fc, self._frame_bytes))
            devs = [fg.intf_name(ep, nic["port"]) for nic in self.graph.nodes[ep]["nics"]]
            procs.append((ep, self.host(ep).popen(
                ["sh", "-ec", HOST_SETUP_SCRIPT, "sh", str(ip_file), str(tc_file),
                 self.options.tcp_cc, *devs],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
        root_tc = self._state.workdir / "switches.tc"
        root_tc.write_text("".join(hostconfig.switch_tc_batch(self.graph, sw, *shaping_args,
                                                              self._markers, fc,
                                                              self._frame_bytes)
                                   for sw in fg.switches(self.graph)))
        system.run(["tc", "-batch", str(root_tc)], timeout=60)
        system.run(["sh", "-ec", SWITCH_PORTS_SCRIPT, "sh", str(shaping.LINK_MTU),
                    *self._state.root_intfs], timeout=60)
        for ep, proc in procs:
            out, _ = proc.communicate(timeout=60)
            if proc.returncode != 0:
                raise EmulationError(f"configuring host {ep} failed: {out.decode().strip()}")
            if self._markers and not fc:  # under flow control the switch port marks
                marker_file = self._state.workdir / f"{ep}-ecn.tc"
                marker_file.write_text(hostconfig.endpoint_marker_batch(
                    self.graph, ep, self.report.rates.link_mbps, self._markers))
                tc_in_netns(self.host(ep).pid, marker_file)
            self._describe_nics(ep)

    def _controller_config(self) -> ControllerConfig:
        plan = self.report.rates
        return ControllerConfig(self.options.lanes, plan.scale_mbps_per_gbps,
                                self.options.adaptive or params_for_rate(
                                    plan.host_mbps, packet_bits=self.options.packet_bytes * 8),
                                dict(self.options.pinned_routes or {}))

    def _start_adaptive_routing(self) -> None:
        """Attach the switches' per-packet choice (after flow control: it reads its gates)."""
        assert self._ar_object is not None  # start() calls this only once it is compiled
        ids = self.flow_control.map_ids if self.flow_control else {}
        shared = {name: libbpf.map_by_id(ids[name]) for name in adaptive_routing.PFC_MAPS
                  } if ids else {}
        try:
            self.adaptive_routing = AdaptiveRouting(
                self.graph, self.report.rates.link_mbps, self.options.queue_pkts,
                self._frame_bytes, self.options.adaptive_routing, self._ar_object, shared)
        finally:
            for fd in shared.values():  # the object holds its own copies
                os.close(fd)

    def _describe_nics(self, endpoint: str) -> None:
        """Tell Mininet's interface objects the addresses the host batch gave them, so
        its CLI (pingall, iperf, dump) knows them; nothing is run."""
        host = self.host(endpoint)
        for nic in self.graph.nodes[endpoint]["nics"]:
            intf = host.intf(fg.intf_name(endpoint, nic["port"]))
            intf.ip, intf.mac = nic["ip"], nic["mac"]
            intf.prefixLen = int(nic["prefix"].split("/")[1])

    # -- teardown -------------------------------------------------------------

    def stop(self) -> list[str]:
        """Remove everything this run made and restore sysctls; idempotent.

        Signals are held off while this runs so a second Ctrl-C cannot leave
        half a fabric behind.
        """
        done: list[str] = []
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            if self.flow_control:  # first: it opens its gates while the links exist
                self.flow_control.stop()
            if self.adaptive_routing is not None:
                self.adaptive_routing.close()
                self.adaptive_routing = None
            self.links = None
            if self.net is not None:
                ours = {p["pid"] for p in self._state.processes}
                system.kill_trees([(pid, None) for pid in runstate.stray_processes(self._state)
                                   if pid not in ours], grace=1.0)  # daemons started in hosts
                try:
                    self.net.stop()
                except Exception as exc:  # the undo log below removes the rest
                    done.append(f"mininet stop failed: {exc}")
                self.net = None
            self.controller.stop()
            if self.state is not None:
                done += runstate.undo(self.state)
                self.state = None
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        return done

    def leftovers(self) -> list[str]:
        """After :meth:`stop`: whatever this run made that still exists (should be empty)."""
        if self._made is None:
            return []
        return runstate.leftovers(self._made)


def tcp_congestion_controls() -> list[str]:
    """The TCP congestion controls this kernel offers (any can be set per namespace)."""
    try:
        return Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    except OSError:
        return []


@contextmanager
def _phase(report: BringUpReport, name: str) -> Iterator[None]:
    start = time.monotonic()
    try:
        yield
    finally:
        report.phases_s[name] = time.monotonic() - start
