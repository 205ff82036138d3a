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

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import networkx as nx

from fabric.emulation import (adaptive_routing, capacity, ecn, flowcontrol, hostconfig,
                              mnclasses, ovs, runstate, shaping)
from fabric.emulation.adaptive_routing import AdaptiveRouting
from fabric.emulation.ecn import EcnMarking
from fabric.emulation.machine_speed import machine_speed
from fabric.errors import UserError
from fabric.host import libbpf, ports, system
from fabric.model import graph as fg
from fabric.model.flowcontrol import FlowControl, lossless_lanes
from fabric.model.lanes import SINGLE_LANE, LaneConfig
from fabric.routing.adaptive import AdaptiveParams, params_for_rate
from fabric.routing.config import ControllerConfig, controller_config_to_dict
from fabric.routing.policies import POLICIES
from fabric.routing.static import StaticRoutingError, static_route_tables
from fabric.routing.switch_ar import ArParams, check_port_sets
from fabric.routing.tables import route_tables
from fabric.traffic.model import TCP_PACKET_BYTES

PROJECT_ROOT = Path(__file__).resolve().parents[2]
OPENFLOW_PROTOCOLS = "OpenFlow13,OpenFlow15"
CONTROLLER_READY_TIMEOUT_S = 20.0
# Status keys that list what is broken: links down, and (adaptive) links found slow.
HEALTH_KEYS = ("down_links", "slow_ports")
# Socket buffers for userspace OVS's AF_PACKET sockets (docs/platform.md,
# "Socket buffers"):
# receive sockets take rmem_default when ports are created, the send socket
# takes wmem_default when it is created. IPv6 stays off on new interfaces so
# the root-namespace switch ports do not emit DAD/RS/MLD into the fabric.
RUN_SYSCTLS = {
    "net.core.rmem_default": str(8 * 1024 * 1024),
    "net.core.wmem_default": str(ovs.WMEM_DEFAULT_BYTES),
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


class EmulationError(UserError, RuntimeError):
    """Bring-up failed; everything made so far has been removed."""


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


@dataclass
class BringUpReport:
    """What bring-up measured: phase times and fidelity warnings."""

    datapath: str = ""
    rate_plan: capacity.RatePlan | None = None
    phases_s: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def total_s(self) -> float:
        """Seconds from the first system change until routes were confirmed."""
        return sum(self.phases_s.values())


class Emulation:
    """A running emulated fabric; use as a context manager.

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
        self._controller: subprocess.Popen | None = None
        self._made: runstate.RunState | None = None  # kept after stop, to verify
        self._markers: dict[float, Path] = {}  # link rate -> compiled ECN marker
        self._pfc_object: Path | None = None  # the compiled flow-control accounting
        self._pfc: subprocess.Popen | None = None
        self._pfc_links: list[dict[str, Any]] = []  # the daemon's links (ids, reactions)
        self._pfc_map_ids: dict[str, int] = {}  # the accounting's maps, by name
        self.pfc_counters: flowcontrol.Counters | None = None
        self._ar_object: Path | None = None  # the compiled adaptive-routing datapath
        self.adaptive_routing: AdaptiveRouting | None = None

    def __enter__(self) -> "Emulation":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def host(self, name: str) -> Any:
        """Return the Mininet host ``name``."""
        return self.net.get(name)

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

    def set_link_rate(self, a: str, b: str, mbps: float) -> None:
        """Shape the link ``a``-``b`` (both directions) at ``mbps`` from now on: a
        degraded link, up but slow. Queued packets stay; buffers and lanes keep
        their sizes and shares.

        Raises
        ------
        EmulationError
            When there is no such link or the rate cannot be shaped.
        """
        if not self.graph.has_edge(a, b):
            raise EmulationError(f"no link between {a} and {b}")
        if not capacity.MIN_SHAPED_MBPS <= mbps <= capacity.MAX_SHAPED_MBPS:
            raise EmulationError(f"link rate must be {capacity.MIN_SHAPED_MBPS}.."
                                 f"{capacity.MAX_SHAPED_MBPS:g} Mbit/s, got {mbps}")
        lanes = self.options.lanes
        marker = None
        if self.options.ecn:
            try:
                marker = ecn.marker_object(mbps, self.options.queue_pkts, self.options.ecn,
                                           self._frame_bytes)
            except ecn.MarkerError as exc:
                raise EmulationError(str(exc)) from None
        fc = self.options.flow_control  # under flow control the way in is the switch's
        for node, other in ((a, b), (b, a)):
            port_no = fg.port(self.graph, node, other)
            if fg.is_endpoint(self.graph, node):  # NIC egress and, for the way in, its IFB
                ifb = hostconfig.ifb_name(node, port_no)
                devs = [fg.intf_name(node, port_no)] + ([] if fc else [ifb])
                lines = [line for dev in devs
                         for line in shaping.rate_change_lines(dev, mbps, lanes)]
                if marker and not fc:
                    lines.append(ecn.marker_line(ifb, marker, replace=True))
                batch = self.workdir / f"{node}-rate.tc"
                batch.write_text("".join(line + "\n" for line in lines))
                try:
                    self._tc_in_root_mounts(node, batch)
                except system.HostSetupError as exc:
                    raise EmulationError(f"{node}: changing the rate failed: {exc}") from None
            elif fc or not fg.is_endpoint(self.graph, other):  # else shaped at the IFB
                dev = fg.intf_name(node, port_no)
                lines = shaping.rate_change_lines(dev, mbps, lanes)
                if marker:
                    lines.append(ecn.marker_line(dev, marker, replace=True))
                system.run(["tc", "-batch", "-"],
                           input_text="".join(line + "\n" for line in lines))
        self.report.rate_plan.link_mbps[frozenset((a, b))] = mbps
        if self.adaptive_routing is not None:  # the switches' copies of its queues too
            self.adaptive_routing.set_rate(a, b, mbps)

    def set_link_state(self, links: Iterable[tuple[str, str]], up: bool) -> None:
        """Cut links or restore them, as pulled cables would: each link's switch
        end goes administratively down, its peer loses carrier, and both switches
        report the port down to the controller. All links change in one ``ip``
        call (a lost switch loses its links at once). Packets queued on a cut
        interface are lost; its shaping stays.

        Raises
        ------
        EmulationError
            When a link does not exist.
        """
        lines = []
        for a, b in links:
            if not self.graph.has_edge(a, b):
                raise EmulationError(f"no link between {a} and {b}")
            node, other = (a, b) if fg.is_switch(self.graph, a) else (b, a)
            dev = fg.intf_name(node, fg.port(self.graph, node, other))
            lines.append(f"link set dev {dev} {'up' if up else 'down'}\n")
        if lines:
            system.run(["ip", "-batch", "-"], input_text="".join(lines))
        if self.adaptive_routing is not None:  # the switches choose among the ports left
            self.adaptive_routing.set_links(links, up)

    def wait_until_healed(self, timeout_s: float = CONTROLLER_READY_TIMEOUT_S) -> None:
        """Block until the controller knows no link down or slow and has confirmed
        every switch's routes (after :meth:`set_link_state` or :meth:`set_link_rate`
        restored the links)."""
        deadline = time.monotonic() + timeout_s
        while any((status := self.controller_status()).get(key) for key in HEALTH_KEYS):
            if time.monotonic() > deadline:
                raise EmulationError(f"the controller still reports links down or slow after "
                                     f"{timeout_s:.0f} s: " + "; ".join(
                                         f"{key} {status[key]}" for key in HEALTH_KEYS
                                         if status.get(key)))
            time.sleep(0.02)
        self.wait_until_routed(max(1.0, deadline - time.monotonic()))

    def controller_status(self) -> dict:
        """The controller's status report (ready switches, down links, events)."""
        try:
            return json.loads((self.workdir / "controller.json").read_text())
        except (OSError, ValueError, TypeError):
            return {}

    # -- bring-up -----------------------------------------------------------

    def start(self) -> None:
        """Bring the fabric up; on any failure remove everything and re-raise."""
        self._check_before_changes()
        try:
            with _phase(self.report, "system"):
                self._record_and_set_sysctls()
                self.report.warnings += ovs.ensure_running(self.report.datapath)
            with _phase(self.report, "controller"):
                if not self.options.remote_controller:
                    self._start_controller()
            with _phase(self.report, "network"):
                self._build_network()
            with _phase(self.report, "configure"):
                self._configure_hosts_and_shaping()
            if self.options.flow_control:
                with _phase(self.report, "flow control"):
                    self._start_flow_control()
            if self._ar_object:
                with _phase(self.report, "adaptive routing"):
                    self._start_adaptive_routing()
            with _phase(self.report, "routes"):
                self.wait_until_routed()
            if self.report.datapath == "user":
                self.report.warnings += ovs.socket_buffer_warnings(
                    self.state.root_intfs, int(RUN_SYSCTLS["net.core.rmem_default"]),
                    ovs.WMEM_DEFAULT_BYTES)
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
                                 for mbps in set(self.report.rate_plan.link_mbps.values())}
            except ecn.MarkerError as exc:
                raise EmulationError(str(exc)) from None
        if self.options.flow_control:
            flowcontrol.check(self.graph, self.options.lanes)
            self._pfc_object = flowcontrol.build_object()  # a failed build changes nothing
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
        if self.options.remote_controller and self.options.controller_app:
            raise EmulationError("a remote controller and a controller app exclude each other")
        if self.options.remote_controller:
            try:
                ports.check_listening(*self.controller_address)
            except (ValueError, ports.NotListeningError) as exc:
                raise EmulationError(f"remote controller: {exc}") from None
        else:
            ports.check_port_free(*self.controller_address)
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
        return {**RUN_SYSCTLS, ALLOWED_TCP_CC: " ".join(allowed),
                **ovs.forwarding_sysctls(self.report.datapath)}

    def _start_controller(self) -> None:
        status = self.workdir / "controller.json"
        config = self.workdir / "controller-config.json"
        config.write_text(json.dumps(controller_config_to_dict(ControllerConfig(
            self.options.lanes, self.report.rate_plan.scale_mbps_per_gbps,
            self.options.adaptive or params_for_rate(
                self.report.rate_plan.host_mbps, packet_bits=self.options.packet_bytes * 8)))))
        log = open(self.workdir / "controller.log", "wb")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])))
        app = (["--app", self.options.controller_app] if self.options.controller_app
               else [self.options.policy])
        args = [sys.executable, "-m", "controllers", *app,
                "--topo", self.graph.graph["spec"], "--host", "127.0.0.1",
                "--port", str(self.options.controller_port), "--status-file", str(status),
                "--config", str(config)]
        self._controller = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=env,
                                            start_new_session=True, cwd=PROJECT_ROOT)
        log.close()
        self.state.add_process(self._controller.pid, expect="controllers")

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
        host, port = self.controller_address
        controller = net.addController("c0", controller=RemoteController, ip=host, port=port)
        self.state.add_process(controller.pid, expect="mininet:c0")
        datapath = "user" if self.report.datapath == "user" else "kernel"
        for sw in fg.switches(self.graph):
            switch = net.addSwitch(sw, dpid=self.graph.nodes[sw]["dpid"], datapath=datapath,
                                   protocols=OPENFLOW_PROTOCOLS, failMode="secure",
                                   fabric_run=self.state.run_id)
            self.state.add_process(switch.pid, expect=f"mininet:{sw}")
        for ep in fg.endpoints(self.graph):
            host = net.addHost(ep, ip=None)
            self.state.add_process(host.pid, expect=f"mininet:{ep}")
            self.state.netns_inodes.append(os.stat(f"/proc/{host.pid}/ns/net").st_ino)
        self.state.save()
        for a, b, data in self.graph.edges(data=True):
            pa, pb = data["ports"][a], data["ports"][b]
            net.addLink(a, b, port1=pa, port2=pb,
                        intfName1=fg.intf_name(a, pa), intfName2=fg.intf_name(b, pb))
        net.build()
        net.start()

    def _configure_hosts_and_shaping(self) -> None:
        shaping_args = (self.report.rate_plan.link_mbps, self.options.queue_pkts,
                        self.options.lanes)
        fc = self.options.flow_control
        procs = []
        for ep in fg.endpoints(self.graph):
            ip_file = self.workdir / f"{ep}.ip"
            tc_file = self.workdir / f"{ep}.tc"
            ip_file.write_text(hostconfig.host_ip_batch(self.graph, ep))
            tc_file.write_text(hostconfig.endpoint_tc_batch(self.graph, ep, *shaping_args,
                                                            fc, self._frame_bytes))
            devs = [fg.intf_name(ep, nic["port"]) for nic in self.graph.nodes[ep]["nics"]]
            procs.append((ep, self.host(ep).popen(
                ["sh", "-ec", HOST_SETUP_SCRIPT, "sh", str(ip_file), str(tc_file),
                 self.options.tcp_cc, *devs],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
        root_tc = self.workdir / "switches.tc"
        root_tc.write_text("".join(hostconfig.switch_tc_batch(self.graph, sw, *shaping_args,
                                                              self._markers, fc,
                                                              self._frame_bytes)
                                   for sw in fg.switches(self.graph)))
        system.run(["tc", "-batch", str(root_tc)], timeout=60)
        system.run(["sh", "-ec", SWITCH_PORTS_SCRIPT, "sh", str(shaping.LINK_MTU),
                    *self.state.root_intfs], timeout=60)
        for ep, proc in procs:
            out, _ = proc.communicate(timeout=60)
            if proc.returncode != 0:
                raise EmulationError(f"configuring host {ep} failed: {out.decode().strip()}")
            if self._markers and not fc:  # under flow control the switch port marks
                marker_file = self.workdir / f"{ep}-ecn.tc"
                marker_file.write_text(hostconfig.endpoint_marker_batch(
                    self.graph, ep, self.report.rate_plan.link_mbps, self._markers))
                self._tc_in_root_mounts(ep, marker_file)
            self._describe_nics(ep)

    def _start_flow_control(self) -> None:
        """Attach the flow-control accounting and start its daemon."""
        plan = self.report.rate_plan
        config = flowcontrol.daemon_config(
            self.graph, {ep: self.host(ep).pid for ep in fg.endpoints(self.graph)},
            plan.link_mbps, self.options.flow_control, self.options.lanes,
            self.options.queue_pkts, self._frame_bytes, self._pfc_object,
            self.workdir / "pfc-events.csv")
        self._pfc, status, warnings = flowcontrol.start_daemon(
            config, self.workdir, ovs.agent_cpus(self.report.datapath))
        self.report.warnings += warnings
        self.state.add_process(self._pfc.pid, expect="pfc_daemon")
        self.pfc_counters = flowcontrol.Counters(status, len(config["links"]))
        self._pfc_map_ids = status["maps"]
        self._pfc_links = config["links"]

    def _start_adaptive_routing(self) -> None:
        """Attach the switches' per-packet choice (after flow control: it reads its gates)."""
        shared = ({name: libbpf.map_by_id(self._pfc_map_ids[name])
                   for name in adaptive_routing.PFC_MAPS} if self._pfc_map_ids else {})
        try:
            self.adaptive_routing = AdaptiveRouting(
                self.graph, self.report.rate_plan.link_mbps, self.options.queue_pkts,
                self._frame_bytes, self.options.adaptive_routing, self._ar_object, shared)
        finally:
            for fd in shared.values():  # the object holds its own copies
                os.close(fd)

    def flow_control_pid(self) -> int | None:
        """The flow-control daemon's process id (None without flow control)."""
        return self._pfc.pid if self._pfc is not None else None

    def flow_control_running(self) -> bool:
        """True while the flow-control daemon serves (false without flow control)."""
        return self._pfc is not None and self._pfc.poll() is None

    def lossless_lanes(self) -> list[int]:
        """The lanes flow control keeps lossless (none without flow control)."""
        return lossless_lanes(self.options.lanes) if self.options.flow_control else []

    def pause_lateness(self, since_ns: int) -> dict[tuple[str, int], float]:
        """(link name, lane) -> the most any of its pauses since ``since_ns``
        (``time.monotonic_ns``) took effect after the modelled reaction, in packet times
        of its link (:func:`flowcontrol.pause_lateness`; empty without flow control)."""
        if self._pfc is None or self.workdir is None:
            return {}
        with open(self.workdir / "pfc-events.csv", newline="") as handle:
            return flowcontrol.pause_lateness(csv.DictReader(handle), self._pfc_links,
                                              since_ns)

    def lossless_queue_drops(self) -> dict[tuple[str, int], int]:
        """(device, lane) -> packets every egress queue of a lossless lane dropped so far,
        switch ports and endpoint NICs (empty without flow control)."""
        lanes = self.lossless_lanes()
        if not lanes:
            return {}
        stats = system.run(["tc", "-s", "qdisc", "show"]).stdout
        stats += "".join(self.host(ep).cmd("tc -s qdisc show") for ep in fg.endpoints(self.graph))
        return flowcontrol.lane_drops(stats, lanes)

    def _stop_flow_control(self) -> None:
        if self.pfc_counters is not None:
            self.pfc_counters.close()
            self.pfc_counters = None
        if self._pfc is not None:
            self._pfc.terminate()
            try:
                self._pfc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._pfc.kill()
                self._pfc.wait()
            self._pfc = None
        self._pfc_links = []
        self._pfc_map_ids = {}

    def _tc_in_root_mounts(self, endpoint: str, batch: Path) -> None:
        """Run a ``tc -batch`` file in ``endpoint``'s network namespace with this
        process's mounts (BPF loading needs the bpf filesystem)."""
        system.run(["nsenter", "-t", str(self.host(endpoint).pid), "-n",
                    "tc", "-batch", str(batch)], timeout=60)

    def _describe_nics(self, endpoint: str) -> None:
        """Tell Mininet's interface objects the addresses the host batch gave them, so
        its CLI (pingall, iperf, dump) knows them; nothing is run."""
        host = self.host(endpoint)
        for nic in self.graph.nodes[endpoint]["nics"]:
            intf = host.intf(fg.intf_name(endpoint, nic["port"]))
            intf.ip, intf.mac = nic["ip"], nic["mac"]
            intf.prefixLen = int(nic["prefix"].split("/")[1])

    def save_controller_log(self, path: Path) -> bool:
        """Copy the log of the controller this emulation started to ``path`` (the
        scratch copy goes at teardown); False when it started none (remote)."""
        log = self.workdir / "controller.log" if self.workdir else None
        if log is None or not log.exists():
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, path)
        return True

    @property
    def controller_address(self) -> tuple[str, int]:
        """Where the switches connect: the remote controller's, or ours on loopback."""
        if self.options.remote_controller:
            return ports.parse_remote_controller(self.options.remote_controller)
        return "127.0.0.1", self.options.controller_port

    def wait_until_routed(self, timeout_s: float = CONTROLLER_READY_TIMEOUT_S) -> None:
        """Block until the controller has confirmed every switch's routes.

        An app that cannot say when its routes are in (your own, not built on
        :class:`controllers.base.PolicyApp`: its status says
        ``"reports_ready": false``) is waited for until every switch's
        controller connection is up.
        """
        switches = fg.switches(self.graph)
        deadline = time.monotonic() + timeout_s
        done, reports = 0, True
        while time.monotonic() < deadline:
            if self._controller is not None and self._controller.poll() is not None:
                raise EmulationError(f"the controller exited ({self._controller.returncode}): "
                                     f"{_tail(self.workdir / 'controller.log')}")
            status = self.controller_status()
            if status.get("errors"):
                raise EmulationError(f"the controller reported: {status['errors'][0]}")
            # a remote controller writes no status: connections are all there is to see
            reports = status.get("reports_ready", self._controller is not None)
            done = (len(status.get("ready", [])) if reports
                    else len(ovs.connected_bridges(switches)))
            if done == len(switches):
                return
            time.sleep(0.02 if reports else 0.2)
        what = "had their routes confirmed" if reports else "connected"
        raise EmulationError(f"only {done} of {len(switches)} switches {what} within "
                             f"{timeout_s:.0f} s; controller log: "
                             f"{_tail(self.workdir / 'controller.log')}")

    # -- teardown -------------------------------------------------------------

    def stop(self) -> list[str]:
        """Remove everything this run made and restore sysctls; idempotent.

        Signals are held off while this runs so a second Ctrl-C cannot leave
        half a fabric behind.
        """
        done: list[str] = []
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            self._stop_flow_control()  # first: it opens its gates while the links exist
            if self.adaptive_routing is not None:
                self.adaptive_routing.close()
                self.adaptive_routing = None
            if self.net is not None:
                ours = {p["pid"] for p in self.state.processes}
                system.kill_trees([(pid, None) for pid in runstate.stray_processes(self.state)
                                   if pid not in ours], grace=1.0)  # daemons started in hosts
                try:
                    self.net.stop()
                except Exception as exc:  # the undo log below removes the rest
                    done.append(f"mininet stop failed: {exc}")
                self.net = None
            if self._controller is not None:
                system.kill_tree(self._controller.pid, expect="controllers")
                self._controller.wait(timeout=10)
                self._controller = None
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


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextmanager
def _phase(report: BringUpReport, name: str) -> Iterator[None]:
    start = time.monotonic()
    try:
        yield
    finally:
        report.phases_s[name] = time.monotonic() - start
