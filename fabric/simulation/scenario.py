"""What the ns-3 simulator simulates, written as its scenario file (pure).

A scenario is a text file, one record per line, fields separated by spaces
(``#`` starts a comment line). Nodes are numbered by their ``node`` lines,
connections and transfers by their own index field:

``config KEY VALUE``
    A transport parameter in seconds or packets (see :func:`transport_config`),
    the steady-state window's edges, or the adaptive policy's telemetry interval
    and first bucket weight (:mod:`fabric.simulation.adaptive`).
``node NAME host|switch BASIS``
    A node; ``BASIS`` is a switch's select-hash basis.
``nic NODE PORT IP``
    An endpoint's NIC: its port and address.
``link A PORT_A B PORT_B RATE_BPS DELAY_S BUFFER``
    A full-duplex link; a switch port's buffer holds ``BUFFER`` packets and
    drops its oldest when full.
``route SWITCH IP PORT...``
    The equal-cost ports of ``SWITCH`` towards address ``IP``.
``connection INDEX SRC_IP DST_IP FIRST PORT...``
    A queue pair: its UDP source ports (one: per-flow ECMP; several: sprayed)
    and the index of the first in turn.
``pin CONNECTION SWITCH PORT...``
    The ports a connection's data leaves each listed switch by, whatever the
    hash says: a path given to the simulation (an emulated run's, replayed).
``transfer INDEX SRC DST DST_IP BYTES CONNECTION HOPS DELAY_S AFTER_START AFTER_START_S DEP...``
    A message and what it waits for (``AFTER_START`` -1: nothing).

Everything is decided here, from the same functions the emulator uses: the
routes (:func:`fabric.routing.tables.route_tables`, or the planned static ones of
:func:`fabric.routing.static.static_route_tables`), each switch's hash basis,
the source ports (:func:`fabric.traffic.model.source_ports`, seeded alike),
the transport's timers in packet times
(:class:`fabric.agent.roce.engine.RoceConfig`) and swift's parameters. One
difference is physics, not policy: an emulated link lets a lone packet
through at once (its token bucket holds a packet's worth), a simulated link
serialises it, so swift's largest believed base delay per link is one packet
time more here and its allowance for queueing stays the same.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, replace
from typing import Any, Iterable

import networkx as nx

from fabric.agent.roce import bth
from fabric.agent.roce.cc import SwiftParams
from fabric.agent.roce.engine import RoceConfig
from fabric.model import graph as fg
from fabric.routing.adaptive import AdaptiveParams
from fabric.routing.static import static_route_tables
from fabric.routing.switch_ar import ArParams
from fabric.routing.tables import hash_basis, route_tables
from fabric.traffic.model import (Plan, ScheduleError, Transfer, TransportSpec, source_ports,
                                  validate_schedule)

# what the simulator refuses rather than approximates, and why
NOT_MODELLED_CC = {"dcqcn": "dcqcn needs ECN marking in the switches, which the ns-3 backend "
                            "does not model; use swift, loss or none"}


@dataclass(frozen=True)
class Fabric:
    """The graph at the rates it is simulated at.

    ``host_mbps`` None runs every link at its physical rate (the graph's
    ``gbps``); a number scales all links alike so that the fastest endpoint
    link runs at it, as the emulator does. ``queue_pkts`` is every switch
    port's buffer; ``link_delay_s`` every link's propagation delay.
    ``static_routes`` installs the planned static routes (one port per destination,
    :mod:`fabric.routing.static`) instead of the equal-cost sets the switches hash over;
    ``adaptive_routing`` has the switches choose among those sets per packet by
    occupancy (:mod:`fabric.routing.switch_ar`).
    """

    graph: nx.Graph
    host_mbps: float | None = None
    queue_pkts: int = 64
    link_delay_s: float = 0.0
    static_routes: bool = False
    adaptive_routing: ArParams | None = None

    def __post_init__(self) -> None:
        if self.static_routes and self.adaptive_routing:
            raise ValueError("static routes leave a switch no port to choose among: "
                             "adaptive routing needs the equal-cost sets")

    def routes(self) -> dict[str, dict[str, tuple[int, ...]]]:
        """``{switch: {destination ip: its ports}}`` as the switches route."""
        return (static_route_tables(self.graph) if self.static_routes
                else route_tables(self.graph))

    @property
    def scale(self) -> float:
        """Simulated bit/s per physical Gbit/s."""
        if self.host_mbps is None:
            return 1e9
        fastest = max(self.graph.edges[a.endpoint, a.switch]["gbps"]
                      for a in fg.attachments(self.graph))
        return self.host_mbps * 1e6 / fastest

    @property
    def host_bps(self) -> float:
        """The fastest endpoint link's simulated rate."""
        return max(self.graph.edges[a.endpoint, a.switch]["gbps"]
                   for a in fg.attachments(self.graph)) * self.scale


def check_supported(transport: TransportSpec) -> None:
    """Refuse, in one line, what the simulator does not model.

    Raises
    ------
    ScheduleError
        For kernel TCP, dcqcn or per-packet timelines.
    """
    if transport.kind != "roce":
        raise ScheduleError("the ns-3 backend models the roce transport only; kernel TCP "
                            f"({transport.kind}) is not modelled")
    if transport.cc in NOT_MODELLED_CC:
        raise ScheduleError(NOT_MODELLED_CC[transport.cc])
    if transport.timeline:
        raise ScheduleError("the ns-3 backend does not record delivery timelines")


def packet_time(fabric: Fabric, transport: TransportSpec) -> float:
    """Seconds a full-size data packet takes on the fastest endpoint link."""
    return (transport.mtu_payload + bth.DATA_OVERHEAD) * 8 / fabric.host_bps


def transport_config(fabric: Fabric, transport: TransportSpec, deadline_s: float,
                     config: RoceConfig = RoceConfig(),
                     swift: SwiftParams = SwiftParams()) -> dict[str, Any]:
    """The ``config`` records: the roce engine's timers at the simulated rate
    (as ``RoceEngine._scale_to_rate`` sets them) and swift's parameters."""
    pt = packet_time(fabric, transport)
    timers = config.timers
    ar = fabric.adaptive_routing
    routing = ({} if ar is None else {
        "ar": 1.0, "ar_keep": float(ar.keep),
        "ar_frame_bytes": float(transport.mtu_payload + bth.DATA_OVERHEAD),
        "ar_flowlet_gap": (ar.flowlet_gap_pkts or 0.0) * pt})
    min_rto, max_rto = timers.rto_packets(fabric.queue_pkts)  # no lossless lanes here
    cc = config.cc
    return {"cc": transport.cc, "entropy": transport.entropy, "mtu": transport.mtu_payload,
            "packet_time": pt, "ack_every": config.ack_every,
            "ack_delay": timers.ack_delay * pt, "init_cwnd": cc.init_cwnd,
            "max_cwnd": cc.max_cwnd, "min_rto": min_rto * pt, "init_rto": min_rto * pt,
            "max_rto": max_rto * pt, "rtt_factor": cc.rtt_factor,
            "min_reorder": timers.min_reorder * pt, "max_reorder_mult": cc.max_reorder_mult,
            "reorder_persist": cc.reorder_persist, "max_timeouts": cc.max_timeouts,
            "ai": swift.ai, "beta": swift.beta, "max_mdf": swift.max_mdf,
            "endpoint_allowance": swift.endpoint_allowance,
            "hop_allowance": swift.hop_allowance, "base_cap": swift.base_cap + 1.0,
            "min_cwnd": swift.min_cwnd, "end_time": deadline_s, **routing}


def host_addresses(graph: nx.Graph) -> dict[str, list[str]]:
    """Endpoint -> its NICs as ``ip/prefixlen``, the first the default (as a plan has)."""
    return {ep: [f"{nic['ip']}/{nic['prefix'].split('/')[1]}" for nic in graph.nodes[ep]["nics"]]
            for ep in fg.endpoints(graph)}


def prepare(graph: nx.Graph, transfers: Iterable[Transfer]) -> list[Transfer]:
    """Transfers with their destination address and hop count filled in, as the
    emulator's plan has them."""
    out = []
    for t in transfers:
        if t.dst_ip is None:
            t = replace(t, dst_ip=fg.nearest_nic_ip(graph, t.src, t.dst))
        if not t.hops:
            t = replace(t, hops=fg.path_links(graph, t.src, t.dst))
        out.append(t)
    return out


def _source_ip(graph: nx.Graph, src: str, dst_ip: str) -> str:
    """The sender's address: its NIC on the destination's side (its only one, mostly)."""
    nics = graph.nodes[src]["nics"]
    if len(nics) == 1:
        return nics[0]["ip"]
    dst = next(ep for ep in fg.endpoints(graph)
               if any(n["ip"] == dst_ip for n in graph.nodes[ep]["nics"]))
    return fg.nearest_nic_ip(graph, dst, src)


def _pins(graph: nx.Graph, index: dict[str, int], t: Transfer, path: list[str]) -> str:
    """``SWITCH PORT`` pairs of ``path``, checked to lead from ``t.src`` to ``t.dst``."""
    if len(path) < 3 or path[0] != t.src or path[-1] != t.dst or any(
            not graph.has_edge(a, b) for a, b in zip(path, path[1:])):
        raise ScheduleError(f"{t.id}: path {'/'.join(path)} is not a path of the fabric "
                            f"from {t.src} to {t.dst}")
    return " ".join(f"{index[a]} {fg.port(graph, a, b)}" for a, b in zip(path[1:-1], path[2:]))


@dataclass
class Scenario:
    """A written scenario and what reading its answer needs."""

    text: str
    nodes: list[str]
    edges: list[tuple[str, str]]          # by link index, (a, b) as written
    transfers: list[Transfer]             # by transfer index, prepared
    connections: list[tuple[str, str, tuple[int, ...]]]  # src ip, dst ip, ports
    connection_of: list[int]              # by transfer index
    pins: dict[int, list[str]]            # connection -> the path its data is pinned to


def _write_fabric(out: io.StringIO, fabric: Fabric) -> tuple[dict[str, int],
                                                              list[tuple[str, str]]]:
    """The ``node``, ``nic``, ``link`` and ``route`` records; the node numbers and the
    links in their order."""
    graph = fabric.graph
    index = {name: i for i, name in enumerate(sorted(graph.nodes))}
    for name in index:
        role = "switch" if fg.is_switch(graph, name) else "host"
        basis = hash_basis(name) & 0xFFFFFFFF if role == "switch" else 0
        out.write(f"node {name} {role} {basis}\n")
    for ep in fg.endpoints(graph):
        for nic in graph.nodes[ep]["nics"]:
            out.write(f"nic {index[ep]} {nic['port']} {nic['ip']}\n")
    edges = sorted((tuple(sorted(e)) for e in graph.edges), key=lambda e: (index[e[0]], index[e[1]]))
    for a, b in edges:
        bps = graph.edges[a, b]["gbps"] * fabric.scale
        out.write(f"link {index[a]} {fg.port(graph, a, b)} {index[b]} {fg.port(graph, b, a)} "
                  f"{bps:.0f} {fabric.link_delay_s!r} {fabric.queue_pkts}\n")
    for sw, table in fabric.routes().items():
        for ip, ports in sorted(table.items()):
            out.write(f"route {index[sw]} {ip} {' '.join(map(str, ports))}\n")
    return index, edges


def _write_connections(out: io.StringIO, graph: nx.Graph, index: dict[str, int],
                       plan: Plan, paths: dict[str, list[str]] | None
                       ) -> tuple[list[tuple[str, str, tuple[int, ...]]], list[int],
                                  dict[int, list[str]]]:
    """The ``connection`` and ``pin`` records: the connections, each transfer's, the pins."""
    ports = source_ports(plan)
    conn_of: dict[tuple, int] = {}
    connections: list[tuple[str, str, tuple[int, ...]]] = []
    connection_of: list[int] = []
    pool_next: dict[tuple, int] = {}  # a sprayed pool's next first port, per sender
    pins: dict[int, list[str]] = {}
    for t in plan.transfers:
        dst_ip = t.dst_ip
        assert dst_ip is not None  # prepare() filled in every destination address
        src_ip = _source_ip(graph, t.src, dst_ip)
        key = (src_ip, dst_ip, t.dscp, t.channel)
        if key not in conn_of:
            conn_ports = ports[t.src][("roce", t.id)]
            first = pool_next.get((src_ip, conn_ports), 0)
            pool_next[(src_ip, conn_ports)] = first + 1
            conn_of[key] = len(connections)
            connections.append((src_ip, dst_ip, conn_ports))
            out.write(f"connection {conn_of[key]} {src_ip} {dst_ip} {first} "
                      f"{' '.join(map(str, conn_ports))}\n")
            if paths and paths.get(t.id):
                pins[conn_of[key]] = paths[t.id]
                out.write(f"pin {conn_of[key]} {_pins(graph, index, t, paths[t.id])}\n")
        connection_of.append(conn_of[key])
    return connections, connection_of, pins


def write(fabric: Fabric, transfers: Iterable[Transfer], transport: TransportSpec,
          seed: int = 0, deadline_s: float = 120.0,
          paths: dict[str, list[str]] | None = None,
          window: tuple[float, float] | None = None,
          adaptive: AdaptiveParams | None = None) -> Scenario:
    """The scenario of ``transfers`` on ``fabric`` with ``transport``; ``paths`` pins
    the data of a transfer's connection to the nodes given for it (its first transfer's);
    ``window`` (simulated seconds) has each transfer's delivered bytes counted at its
    edges; ``adaptive`` has the simulation stop for telemetry every ``interval_s`` with
    every bucket at ``max_weight`` to begin with, as the adaptive policy installs them.

    Raises
    ------
    ScheduleError
        For a schedule the emulator would refuse too, or what is not modelled.
    """
    check_supported(transport)
    graph = fabric.graph
    hosts = host_addresses(graph)
    transfers = list(transfers)
    validate_schedule(transfers, hosts)
    transfers = prepare(graph, transfers)
    out = io.StringIO()
    config = transport_config(fabric, transport, deadline_s)
    if window:
        config.update(window_start=float(window[0]), window_end=float(window[1]))
    if adaptive:
        config.update(telemetry_interval=float(adaptive.interval_s),
                      default_weight=float(adaptive.max_weight))
    for key, value in config.items():
        out.write(f"config {key} {value!r}\n" if isinstance(value, float)
                  else f"config {key} {value}\n")
    index, edges = _write_fabric(out, fabric)
    plan = Plan(transfers, hosts, transport, port_seed=seed)
    connections, connection_of, pins = _write_connections(out, graph, index, plan, paths)
    tindex = {t.id: i for i, t in enumerate(transfers)}
    for i, (t, conn) in enumerate(zip(transfers, connection_of)):
        start_dep, start_s = ((tindex[t.after_start[0]], t.after_start[1]) if t.after_start
                              else (-1, 0.0))
        deps = " ".join(str(tindex[d]) for d in t.after)
        out.write(f"transfer {i} {index[t.src]} {index[t.dst]} {t.dst_ip} {t.bytes} {conn} "
                  f"{t.hops} {t.delay_s!r} {start_dep} {start_s!r} {deps}\n")
    return Scenario(out.getvalue(), sorted(graph.nodes), edges, transfers, connections,
                    connection_of, pins)
