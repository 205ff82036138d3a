"""Switch-local adaptive routing in the emulator's datapath (``switch_ar.bpf.c``).

Open vSwitch's select groups choose a port by hash only; the per-packet choice by
occupancy is a tc program on the egress hook of every switch port that leads to
another switch, which may redirect the packet to a less occupied sibling port of
its route (the choice is :func:`fabric.routing.switch_ar.choose_port`'s, in C). One
object is loaded for the fabric, so its maps are shared by every port: the ports'
rates and virtual queues, each switch's equal-cost routes (recomputed around links
that go down, as the controller's are), the flowlets and the settings. Under flow
control it shares the accounting's gate and lane maps (``pfc.bpf.c``), so that a
port paused on the packet's lane loses to one that is not. The programs stay
attached until their interfaces are removed at teardown.
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from typing import Iterable, Mapping

import networkx as nx

from fabric.emulation import bpf_build
from fabric.emulation.flowcontrol import HEADER as PFC_HEADER, link_directions
from fabric.emulation.ovs import STATE_DIR
from fabric.errors import UserError
from fabric.host import libbpf
from fabric.model import graph as fg
from fabric.routing.switch_ar import HEADER, MAX_PORTS, ArParams
from fabric.routing.tables import route_tables

SOURCE = Path(__file__).with_name("switch_ar.bpf.c")
CACHE_DIR = STATE_DIR / "ar"
PORT = struct.Struct("=IIQQQQQQQ")  # struct port
ROUTE_KEY = struct.Struct("=II")    # struct route_key
ROUTE = struct.Struct(f"=I{MAX_PORTS}I")  # struct route
SETTINGS = struct.Struct("=qQQQ")   # struct settings
PFC_MAPS = ("gate_stats", "dscp_lane")  # shared with the flow-control accounting


class AdaptiveRoutingError(UserError, RuntimeError):
    """The adaptive-routing datapath cannot be built or attached here."""


def build_object(cache_dir: Path = CACHE_DIR) -> Path:
    """The compiled program (cached by source), built before anything changes."""
    libbpf.lib()  # raises when libbpf is missing
    return bpf_build.compile_object(SOURCE, cache_dir, "ar", AdaptiveRoutingError,
                                    (HEADER, PFC_HEADER))


def fabric_ports(graph: nx.Graph) -> dict[str, tuple[int, str, int]]:
    """``{interface: (switch index, neighbour, link id)}`` of every switch port whose far
    end is a switch: the ports a route may choose among, each with the flow-control id
    of the link it sends on (:func:`~fabric.emulation.flowcontrol.link_directions`, from
    1) (pure)."""
    index = {sw: i for i, sw in enumerate(fg.switches(graph))}
    link_id = {(d.src, d.dst): i for i, d in enumerate(link_directions(graph), start=1)}
    return {fg.intf_name(sw, fg.port(graph, sw, nbr)): (index[sw], nbr, link_id[sw, nbr])
            for sw in index for nbr in sorted(graph.neighbors(sw)) if fg.is_switch(graph, nbr)}


def route_entries(graph: nx.Graph, down: Iterable[frozenset] = ()
                  ) -> dict[tuple[int, str], tuple[str, ...]]:
    """``{(switch index, destination ip): its equal-cost interfaces}`` for every route
    with a choice, around the links ``down`` (pure)."""
    index = {sw: i for i, sw in enumerate(fg.switches(graph))}
    return {(index[sw], ip): tuple(fg.intf_name(sw, p) for p in ports)
            for sw, table in route_tables(graph, down).items()
            for ip, ports in table.items() if len(ports) > 1}


class AdaptiveRouting:
    """The loaded program, attached to every fabric port; root only.

    Parameters
    ----------
    graph : networkx.Graph
        The running fabric's graph.
    link_mbps : mapping
        Each link's emulated rate.
    queue_pkts : int
        Every port's buffer, in full-size frames.
    frame_bytes : int
        Wire bytes of a full-size frame.
    params : ArParams
        Threshold and flowlet gap, in packets of a host link.
    obj : Path
        From :func:`build_object`.
    pfc_maps : mapping, optional
        Under flow control: the accounting's :data:`PFC_MAPS` by name, as map fds.
    """

    def __init__(self, graph: nx.Graph, link_mbps: Mapping[frozenset, float], queue_pkts: int,
                 frame_bytes: int, params: ArParams, obj: Path,
                 pfc_maps: Mapping[str, int] | None = None) -> None:
        self.graph = graph
        self._obj = libbpf.BpfObject(obj, dict(pfc_maps or {}))
        self._flow_control = bool(pfc_maps)
        self._maps = {name: self._obj.map_fd(name) for name in ("ports", "routes", "settings")}
        self._ports = fabric_ports(graph)
        self._ifindex = {dev: socket.if_nametoindex(dev) for dev in self._ports}
        self._buffer_bytes = queue_pkts * frame_bytes
        self._routes: set[bytes] = set()
        self._down: set[frozenset] = set()
        try:
            self._fill(link_mbps, frame_bytes, params)
            prog = self._obj.program_fd("route")
            for ifindex in self._ifindex.values():
                libbpf.tc_egress_attach(ifindex, prog)
        except BaseException:
            self.close()
            raise

    def _fill(self, link_mbps: Mapping[frozenset, float], frame_bytes: int,
              params: ArParams) -> None:
        host_mbps = max(link_mbps[frozenset((a.endpoint, a.switch))]
                        for a in fg.attachments(self.graph))
        packet_ns = frame_bytes * 8e3 / host_mbps
        gap_ns = round((params.flowlet_gap_pkts or 0) * packet_ns)
        libbpf.map_update(self._maps["settings"], struct.pack("=I", 0),
                          SETTINGS.pack(params.keep, frame_bytes, gap_ns, self._flow_control))
        switches = fg.switches(self.graph)
        for dev, (sw_index, nbr, link) in self._ports.items():
            rate = self._rate_fields(link_mbps[frozenset((switches[sw_index], nbr))])
            libbpf.map_update(self._maps["ports"], struct.pack("=I", self._ifindex[dev]),
                              PORT.pack(sw_index, link, *rate, 0, 0, 0, 0, 0))
        self._write_routes()

    def _rate_fields(self, mbps: float) -> tuple[int, int]:
        """A port's ``ns_per_kbyte`` and ``cap_ns`` at ``mbps``."""
        ns_per_kbyte = round(8e6 / mbps)
        return ns_per_kbyte, round(self._buffer_bytes * ns_per_kbyte / 1000)

    def set_rate(self, a: str, b: str, mbps: float) -> None:
        """Link ``a``-``b`` now runs at ``mbps``: its ports' queues drain at that rate."""
        for node, other in ((a, b), (b, a)):
            dev = fg.intf_name(node, fg.port(self.graph, node, other))
            if dev not in self._ports:
                continue  # not a switch-to-switch port: never chosen among
            key = struct.pack("=I", self._ifindex[dev])
            raw = libbpf.map_lookup(self._maps["ports"], key, PORT.size)
            if raw is None:
                continue
            fields = list(PORT.unpack(raw))
            fields[2:4] = self._rate_fields(mbps)
            # read-modify-write: a packet accounted meanwhile is the worst error
            libbpf.map_update(self._maps["ports"], key, PORT.pack(*fields))

    def _write_routes(self) -> None:
        entries = {}
        for (sw_index, ip), devs in route_entries(self.graph, self._down).items():
            key = ROUTE_KEY.pack(sw_index, struct.unpack("=I", socket.inet_aton(ip))[0])
            ifindexes = [self._ifindex[dev] for dev in devs]
            entries[key] = ROUTE.pack(len(ifindexes),
                                       *ifindexes, *[0] * (MAX_PORTS - len(ifindexes)))
        for key in self._routes - entries.keys():  # routes left with one port (or none)
            libbpf.map_delete(self._maps["routes"], key)
        for key, value in entries.items():
            libbpf.map_update(self._maps["routes"], key, value)
        self._routes = set(entries)

    def set_links(self, links: Iterable[tuple[str, str]], up: bool) -> None:
        """Links went down (or up): route among the ports left, as the controller does."""
        for a, b in links:
            (self._down.discard if up else self._down.add)(frozenset((a, b)))
        self._write_routes()

    def counters(self) -> dict[str, tuple[int, int, int]]:
        """``{interface: (kept, moved out, moved in)}``: packets the hash routed to the
        port that left by it, those moved to a sibling, and those moved here."""
        out = {}
        for dev, ifindex in self._ifindex.items():
            raw = libbpf.map_lookup(self._maps["ports"], struct.pack("=I", ifindex), PORT.size)
            if raw is not None:
                out[dev] = PORT.unpack(raw)[5:8]
        return out

    def program_stats(self) -> tuple[int, int]:
        """``(runs, ns)``: how often the program ran and its total run time, as the
        kernel counts them while ``kernel.bpf_stats_enabled`` is 1 (0, 0 before)."""
        fd = self._obj.program_fd("route")
        info = dict(line.split(":", 1) for line in
                    Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines() if ":" in line)
        return int(info.get("run_cnt", 0)), int(info.get("run_time_ns", 0))

    def close(self) -> None:
        """Release the object (the attached programs stay until their interfaces go)."""
        self._obj.close()
