"""FakeFabric: every switch of a fabric graph as a fake, driving os-ken apps.

The harness plays both os-ken's connection layer
(:mod:`fabric.testing.connection`) and the switches
(:mod:`fabric.testing.fakeswitch`): it hands an app one
:class:`~fabric.testing.datapath.FakeDatapath` per switch, runs the OpenFlow
handshake, applies what the app sends, answers barriers and statistics
requests, reports port changes, and traces packets through the resulting
tables. Everything runs synchronously in the calling thread; no socket, no
root, no Open vSwitch.
"""

from __future__ import annotations

import functools
import ipaddress
from collections import deque
from typing import Any

import networkx as nx
from os_ken.controller import ofp_event
from os_ken.ofproto import ofproto_v1_5 as ofp

from fabric.model import graph as fg
from fabric.testing import of13
from fabric.testing.connection import AppConnection, HarnessError, port_descs
from fabric.testing.datapath import FakeDatapath
from fabric.testing.fakeswitch import FakeSwitch, PortCounters
from fabric.testing.packets import arp_reply_mac, arp_request, ip_packet, packet_fields
from fabric.testing.tables import OpenFlowError, UnsupportedFeature, normalise
from fabric.testing.tracing import DEFAULT_HOP_LIMIT, Exchange, Trace, walk

ERROR_MODES = ("raise", "reply")
MAX_PACKET_INS = 10_000
HANDSHAKE_ORDERS = ("os-ken-first", "app-first")


class FakeFabric(AppConnection):
    """Fake switches for every switch of ``graph``, and the apps that drive them.

    Parameters
    ----------
    graph : networkx.Graph
        A fabric graph (:mod:`fabric.model.graph` schema).
    errors : str
        ``"raise"`` (default): a message a switch refuses raises
        :class:`~fabric.testing.tables.OpenFlowError` out of ``send_msg``, so
        the test fails where the app sent it. ``"reply"``: the error is
        delivered to the app as ``EventOFPErrorMsg``, as a switch would.
        Both keep it in :attr:`errors`.
    hop_limit : int
        Switch hops after which a trace reports a loop.
    handshake : str
        Which reaches the switch first when it connects: os-ken's own
        port-description request (``"os-ken-first"``, default) or what the
        apps send from their ``EventOFPSwitchFeatures`` handlers
        (``"app-first"``). In os-ken both orders happen (separate green
        threads); with ``"app-first"`` the replies to the apps' messages
        arrive while the datapath is still in ``CONFIG_DISPATCHER``, so
        ``MAIN_DISPATCHER``-only handlers miss them.
    """

    def __init__(self, graph: nx.Graph, errors: str = "raise",
                 hop_limit: int = DEFAULT_HOP_LIMIT, handshake: str = "os-ken-first"):
        if errors not in ERROR_MODES:
            raise ValueError(f"errors must be one of {ERROR_MODES}, got {errors!r}")
        if handshake not in HANDSHAKE_ORDERS:
            raise ValueError(f"handshake must be one of {HANDSHAKE_ORDERS}, got {handshake!r}")
        self.graph = graph
        self.error_mode = errors
        self.handshake_order = handshake
        self.hop_limit = hop_limit
        self.switches: dict[str, FakeSwitch] = {}
        for name in fg.switches(graph):
            ports = {fg.port(graph, name, nbr): nbr for nbr in graph.neighbors(name)}
            speeds = {p: int(graph.edges[name, nbr]["gbps"] * 1e6) for p, nbr in ports.items()}
            self.switches[name] = FakeSwitch(name, fg.dpid_int(graph, name), ports, speeds)
        self.apps: list[Any] = []
        self.datapaths: dict[str, FakeDatapath] = {}
        self.messages: dict[str, list[Any]] = {name: [] for name in self.switches}
        self.errors: list[OpenFlowError] = []
        self.packet_outs: list[tuple[str, Any, Trace]] = []
        self._detached: dict[str, FakeDatapath] = {}
        self._pending: deque = deque()
        self._draining = False
        self._connections = 0
        self.version = of13.OF15  # until connect() negotiates with the apps
        self.clock = 0.0  # seconds; only advance() moves it (flow timeouts)

    # -- the data plane ----------------------------------------------------------------

    def _packet_out(self, sw: FakeSwitch, msg: Any) -> None:
        """Send a packet-out's frame on its way; keep the trace in :attr:`packet_outs`."""
        if msg.buffer_id != ofp.OFP_NO_BUFFER or not msg.data:
            raise UnsupportedFeature("packet-out without data (the fake switch buffers nothing)")
        data = bytes(msg.data)
        fields = normalise(packet_fields(data))
        trace = walk(self, sw.name, msg.match["in_port"], fields, data, actions=msg.actions)
        self.packet_outs.append((sw.name, msg, trace))

    def trace(self, packet: Any, src: str | None = None, *, switch: str | None = None,
              in_port: int | None = None, count: bool = True) -> Trace:
        """Send ``packet`` from endpoint ``src`` (or into ``switch`` on ``in_port``).

        Parameters
        ----------
        packet : scapy.packet.Packet or bytes
            An Ethernet frame. Building a scapy packet costs more than the
            trace: pass ``bytes(packet)`` to trace the same frame often.
        src : str, optional
            The sending endpoint; a multi-NIC endpoint sends from the NIC
            whose prefix routes the destination (longest prefix).
        switch, in_port : optional
            Inject at a switch port instead of an endpoint.
        count : bool
            Update port and flow counters.

        Returns
        -------
        Trace
            Hops, deliveries, drops and packet-ins; nothing is raised for a
            drop or a loop. Packet-ins are not delivered to the apps (see
            :meth:`send`, :meth:`arp` and :meth:`packet_in`).
        """
        self.flush()
        if isinstance(packet, (bytes, bytearray)):
            data = bytes(packet)
            raw = dict(_parsed(data))
        else:
            data, raw = bytes(packet), packet_fields(packet)
        if src is not None:
            if switch is not None or in_port is not None:
                raise ValueError("give either src or switch and in_port")
            if src not in self.graph or not fg.is_endpoint(self.graph, src):
                raise ValueError(f"{src!r} is not an endpoint of the fabric")
            nic = self.nic_for(src, raw.get("ipv4_dst") or raw.get("arp_tpa"))
            if nic is None:
                return Trace(drops=[(src, "no NIC routes the destination")], data=data)
            switch = _neighbour_on_port(self.graph, src, nic["port"])
            in_port = fg.port(self.graph, switch, src)
            if not self.switches[switch].live[in_port]:
                return Trace(drops=[(src, "NIC link is down")], data=data)
        elif switch is None or in_port is None:
            raise ValueError("trace needs src, or switch and in_port")
        return walk(self, switch, in_port, normalise(raw), data, count=count)

    def nic_for(self, endpoint: str, ip: str | None = None) -> dict | None:
        """The NIC of ``endpoint`` whose prefix routes ``ip`` (longest prefix), or None.

        Without ``ip`` (a non-IP packet) the first NIC.
        """
        nics = self.graph.nodes[endpoint]["nics"]
        if ip is None:
            return nics[0]
        addr = ipaddress.ip_address(ip)
        matching = [n for n in nics if addr in ipaddress.ip_network(n["prefix"])]
        return max(matching, key=lambda n: ipaddress.ip_network(n["prefix"]).prefixlen,
                   default=None)

    def packet(self, src: str, dst: str, l4: str = "tcp", sport: int = 40000,
               dport: int = 5001, dscp: int = 0, payload: bytes = b"") -> Any:
        """A scapy packet from endpoint ``src`` to ``dst`` (endpoint name or NIC IP).

        Addresses come from the graph (static ARP); see
        :func:`fabric.testing.packets.ip_packet` for ``l4``.
        """
        dst_ip = self.graph.nodes[dst]["ip"] if dst in self.graph else dst
        dst_mac = next((a.mac for a in fg.attachments(self.graph) if a.ip == dst_ip),
                       "02:ff:ff:ff:ff:ff")
        nic = self.nic_for(src, dst_ip) or self.graph.nodes[src]["nics"][0]
        return ip_packet(nic["mac"], dst_mac, nic["ip"], dst_ip, l4, sport, dport, dscp, payload)

    def send(self, packet: Any, src: str, max_packet_ins: int = MAX_PACKET_INS) -> Exchange:
        """Send ``packet`` from endpoint ``src`` with the controller in the loop.

        Unlike :meth:`trace`, every packet-in is delivered to the apps, and
        so is every packet-in caused by a packet-out they send in answer
        (a flood that misses the next switch's table, say), until none is
        left. This is how a reactive app (a learning switch) is tested.

        Parameters
        ----------
        packet : scapy.packet.Packet or bytes
            An Ethernet frame.
        src : str
            The sending endpoint.
        max_packet_ins : int
            Packet-ins after which the exchange is taken for a loop through
            the controller (a flood on a fabric with cycles) and
            :class:`HarnessError` is raised.

        Returns
        -------
        Exchange
            The packet's own trace, the traces of the apps' packet-outs and
            every endpoint reached.
        """
        start = len(self.packet_outs)
        exchange = Exchange(self.trace(packet, src))
        waiting = deque(exchange.trace.packet_ins)
        while waiting:
            if exchange.packet_ins >= max_packet_ins:
                raise HarnessError(f"more than {max_packet_ins} packet-ins for one packet: "
                                   "a loop through the controller (flooding a fabric "
                                   "with cycles?)")
            pin = waiting.popleft()
            exchange.packet_ins += 1
            seen = len(self.packet_outs)
            self.packet_in(pin.switch, pin.in_port, pin.data, pin.reason, pin.table_id,
                           pin.cookie)
            for _, _, out in self.packet_outs[seen:]:
                waiting.extend(out.packet_ins)
        exchange.packet_outs = [out for _, _, out in self.packet_outs[start:]]
        return exchange

    def arp(self, src: str, target_ip: str) -> str | None:
        """Resolve ``target_ip`` from endpoint ``src`` through the fabric and the apps.

        Sends an ARP request with :meth:`send`; returns the MAC of an ARP
        reply for ``target_ip`` that an app's packet-out delivered back to
        ``src``, or None.
        """
        nic = self.nic_for(src, target_ip) or self.graph.nodes[src]["nics"][0]
        exchange = self.send(arp_request(nic["mac"], nic["ip"], target_ip), src)
        for out in exchange.packet_outs:
            if src in out.delivered:
                mac = arp_reply_mac(out.data, target_ip, nic["ip"])
                if mac is not None:
                    return mac
        return None

    def set_link(self, a: str, b: str, up: bool) -> None:
        """Bring the link ``a``-``b`` up or down.

        Both ends change liveness (watch ports, outputs); every switch end
        whose state changed sends ``EventOFPPortStatus`` (reason MODIFY,
        state ``LINK_DOWN`` or ``LIVE``) to the apps if it is connected.
        """
        if not self.graph.has_edge(a, b):
            raise KeyError(f"no link {a}-{b}")
        self.flush()
        for node, other in ((a, b), (b, a)):
            if node not in self.switches:
                continue
            port = fg.port(self.graph, node, other)
            sw = self.switches[node]
            if sw.set_live(port, up) and node in self.datapaths:
                dp = self.datapaths[node]
                desc = port_descs(dp, sw, port)[0]
                msg = dp.ofproto_parser.OFPPortStatus(dp, reason=ofp.OFPPR_MODIFY, desc=desc)
                dp.set_xid(msg)
                self._post(ofp_event.EventOFPPortStatus(msg))
        self.flush()

    # -- counters ---------------------------------------------------------------------

    def port_number(self, switch: str, port: int | str) -> int:
        """``port`` as a number (a neighbour's name is accepted)."""
        return port if isinstance(port, int) else fg.port(self.graph, switch, port)

    def counters(self, switch: str, port: int | str) -> PortCounters:
        """The counters of one port."""
        return self.switches[switch].counters[self.port_number(switch, port)]

    def set_port_counters(self, switch: str, port: int | str, **values: int) -> None:
        """Set counters of a port (``tx_bytes=...``, ``tx_dropped=...``, ...)."""
        counters = self.counters(switch, port)
        for key, value in values.items():
            if not hasattr(counters, key):
                raise KeyError(f"no counter {key!r} (see PortCounters)")
            setattr(counters, key, int(value))

    def add_port_bytes(self, switch: str, port: int | str, tx_bytes: int,
                       tx_packets: int = 0) -> None:
        """Add transmitted bytes (and packets) to a port, as if traffic had left it."""
        counters = self.counters(switch, port)
        counters.tx_bytes += int(tx_bytes)
        counters.tx_packets += int(tx_packets)

    def flow_mods(self, switch: str) -> int:
        """Flow-mods ``switch`` received over all its connections."""
        return sum(type(m).__name__ == "OFPFlowMod" for m in self.messages[switch])

    def group_mods(self, switch: str) -> int:
        """Group-mods ``switch`` received over all its connections."""
        return sum(type(m).__name__ == "OFPGroupMod" for m in self.messages[switch])


@functools.lru_cache(maxsize=4096)
def _parsed(data: bytes) -> tuple[tuple[str, Any], ...]:
    return tuple(packet_fields(data).items())


def _neighbour_on_port(graph: nx.Graph, node: str, port_no: int) -> str:
    return next(nbr for nbr in graph.neighbors(node)
                if graph.edges[node, nbr]["ports"][node] == port_no)
