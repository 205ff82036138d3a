"""Flowlet switching: your own routing policy, from unit test to figure.

A flowlet is a burst of one flow's packets. Once a flow has been idle for
longer than the delay difference between its paths, its next packet can take
another path without overtaking the packets already on their way (FLARE,
CONGA, LetFlow). This app gives every new flowlet the next hop that carries
the fewest live flowlets at that switch (each weighed by its first packet's
size, so that a flow of acknowledgements counts for little), and lets the
switch say when a flowlet ends.

How it maps onto OpenFlow 1.3 and Open vSwitch:

- every switch gets one entry per destination address, from the fabric graph
  (:func:`fabric.routing.tables.route_tables`). A destination with one next
  hop is forwarded there; one with several goes to the controller;
- for such a packet the app picks a port (:class:`FlowletChooser`, plain
  Python, no OpenFlow), installs an exact 5-tuple entry with an idle timeout
  of the flowlet gap and ``OFPFF_SEND_FLOW_REM``, and sends the packet on;
- when that entry idles out, the switch sends ``OFPFlowRemoved``: the flowlet
  is over, and the flow's next packet asks again. The entry's cookie carries
  its port, so a late removal never ends the flowlet that replaced it;
- a port that goes down loses its flowlets (their entries are deleted, so
  their next packets ask again) and is not chosen until it is back.

The gap is :data:`GAP_PACKETS` full-size packet times of the host links,
read from the documented context (graph and rate scale), rounded up to whole
seconds because that is OpenFlow's unit: 1 s at any host rate from 1.6 Mbit/s
up (at 3 Mbit/s, 250 packet times: longer than a full 64-packet queue takes to
drain, and more at faster rates).

It needs one UDP source port per flow (``--app-entropy flow``, the default):
with a new port per packet every packet would be a new flowlet and go
through the controller.

Run it::

    sudo fabric up rail-clos --controller-app examples/flowlet_switching.py:FlowletSwitching
    sudo fabric run collisions --quick \\
        --controller-app examples/flowlet_switching.py:FlowletSwitching --out results/flowlet

Its unit tests, on fake switches and without root, are in
``examples/test_flowlet_switching.py``.
"""

from __future__ import annotations

import math
import zlib
from collections import Counter, defaultdict

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.lib.packet import ipv4, packet, tcp, udp
from os_ken.ofproto import ofproto_v1_3

from controllers import runtime
from fabric.model import graph as fg
from fabric.routing.tables import route_tables

GAP_PACKETS = 128          # flowlet gap, in full-size packet times of a host link
FULL_PACKET_BYTES = 1538   # 1500-byte MTU plus Ethernet header, FCS, preamble and gap
COOKIE_BASE = 0xF1E7 << 32  # flowlet entries: this plus the output port
COOKIE_MASK = 0xFFFFFFFF << 32
EXACT_COOKIE = 2**64 - 1
PRIORITY_FLOWLET, PRIORITY_ROUTE, PRIORITY_DROP = 20, 10, 100
ETH_IPV4, ETH_IPV6 = 0x0800, 0x86DD

FlowKey = tuple[str, str, int, int, int]  # ipv4 src, dst, protocol, L4 src, L4 dst ports


class FlowletChooser:
    """Which port a new flowlet takes: the one with the least live flowlet weight.

    A flowlet weighs its first packet's size against a full-size packet (at most
    1), so a flow of acknowledgements, which crosses the same uplinks the other
    way, counts for a few per cent of a flow of data, not as one more flow.
    Ties go to a hash of the flow (the same flow, the same choice), so that
    switches do not all pile onto their lowest port. One instance keeps the
    flowlets of every switch, by datapath id.
    """

    def __init__(self) -> None:
        self.port_of: dict[tuple[int, FlowKey], int] = {}
        self.weight_of: dict[tuple[int, FlowKey], float] = {}
        self.live: dict[int, Counter] = defaultdict(Counter)

    def choose(self, dpid: int, key: FlowKey, candidates: list[int], weight: float = 1.0
               ) -> int:
        """The port of ``key``'s flowlet at switch ``dpid``; a new one, of ``weight``,
        if it has none.

        A flow whose flowlet is still live keeps its port (its next packets
        may reach the controller before the switch has the entry).
        """
        current = self.port_of.get((dpid, key))
        if current in candidates:
            return current
        if current is not None:
            self.end(dpid, key, current)
        live = self.live[dpid]
        least = min(live[p] for p in candidates)
        ties = sorted(p for p in candidates if live[p] == least)
        port = ties[zlib.crc32(repr(key).encode()) % len(ties)]
        self.port_of[(dpid, key)] = port
        self.weight_of[(dpid, key)] = weight
        live[port] += weight
        return port

    def end(self, dpid: int, key: FlowKey, port: int) -> bool:
        """End ``key``'s flowlet on ``port`` (a no-op if it has moved on); True if ended."""
        if self.port_of.get((dpid, key)) != port:
            return False
        del self.port_of[(dpid, key)]
        self.live[dpid][port] -= self.weight_of.pop((dpid, key))
        return True


def flow_key(match) -> FlowKey:
    """The 5-tuple of a packet's or an entry's match fields (ports 0 when absent)."""
    proto = match.get("ip_proto", 0)
    name = {6: "tcp", 17: "udp"}.get(proto)
    return (match["ipv4_src"], match["ipv4_dst"], proto,
            match.get(f"{name}_src", 0) if name else 0,
            match.get(f"{name}_dst", 0) if name else 0)


def gap_seconds(graph, scale_mbps_per_gbps: float) -> int:
    """:data:`GAP_PACKETS` packet times of the slowest host link, in whole seconds."""
    slowest = min(graph.edges[e]["gbps"] for e in graph.edges
                  if fg.is_endpoint(graph, e[0]) or fg.is_endpoint(graph, e[1]))
    packet_s = FULL_PACKET_BYTES * 8 / (slowest * scale_mbps_per_gbps * 1e6)
    return max(1, math.ceil(GAP_PACKETS * packet_s))


class FlowletSwitching(app_manager.OSKenApp):
    """Flowlet switching over the graph's shortest paths (OpenFlow 1.3)."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        context = runtime.current()  # the fabric graph and the emulation's rate scale
        graph = context.graph
        self.routes = {fg.dpid_int(graph, sw): table
                       for sw, table in route_tables(graph).items()}
        self.gap_s = gap_seconds(graph, context.config.scale_mbps_per_gbps)
        self.chooser = FlowletChooser()
        self.down: dict[int, set[int]] = defaultdict(set)

    # -- helpers ----------------------------------------------------------------------

    @staticmethod
    def _flow(dp, priority, match, actions, **kwargs):
        ofp, parser = dp.ofproto, dp.ofproto_parser
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)] if actions else []
        dp.send_msg(parser.OFPFlowMod(dp, priority=priority, match=match, instructions=inst,
                                      **kwargs))

    # -- events -----------------------------------------------------------------------

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, ev):
        """A switch connected: routes for every destination, the multipath ones via us."""
        dp = ev.msg.datapath
        ofp, parser = dp.ofproto, dp.ofproto_parser
        dp.send_msg(parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL,
                                      out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY))
        self._flow(dp, PRIORITY_DROP, parser.OFPMatch(eth_type=ETH_IPV6), [])
        to_us = parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)
        for ip, ports in self.routes.get(dp.id, {}).items():
            action = parser.OFPActionOutput(ports[0]) if len(ports) == 1 else to_us
            self._flow(dp, PRIORITY_ROUTE, parser.OFPMatch(eth_type=ETH_IPV4, ipv4_dst=ip),
                       [action])

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, ev):
        """A packet with several next hops and no flowlet entry: choose, install, send."""
        msg = ev.msg
        dp = msg.datapath
        ofp, parser = dp.ofproto, dp.ofproto_parser
        pkt = packet.Packet(msg.data)
        ip = pkt.get_protocol(ipv4.ipv4)
        if ip is None:
            return
        candidates = [p for p in self.routes.get(dp.id, {}).get(ip.dst, ())
                      if p not in self.down[dp.id]]
        if not candidates:
            return
        fields = {"eth_type": ETH_IPV4, "ipv4_src": ip.src, "ipv4_dst": ip.dst,
                  "ip_proto": ip.proto}
        l4 = pkt.get_protocol(udp.udp) or pkt.get_protocol(tcp.tcp)
        if l4 is not None:
            name = "udp" if isinstance(l4, udp.udp) else "tcp"
            fields.update({f"{name}_src": l4.src_port, f"{name}_dst": l4.dst_port})
        weight = min(1.0, len(msg.data) / FULL_PACKET_BYTES)  # an ACK's flowlet weighs little
        port = self.chooser.choose(dp.id, flow_key(fields), candidates, weight)
        self._flow(dp, PRIORITY_FLOWLET, parser.OFPMatch(**fields),
                   [parser.OFPActionOutput(port)], idle_timeout=self.gap_s,
                   flags=ofp.OFPFF_SEND_FLOW_REM, cookie=COOKIE_BASE | port)
        dp.send_msg(parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER,
                                        in_port=msg.match["in_port"],
                                        actions=[parser.OFPActionOutput(port)], data=msg.data))

    @set_ev_cls(ofp_event.EventOFPFlowRemoved, MAIN_DISPATCHER)
    def flow_removed(self, ev):
        """A flowlet entry idled out (or was deleted): that flowlet is over."""
        msg = ev.msg
        if msg.cookie & COOKIE_MASK == COOKIE_BASE:
            port = msg.cookie & ~COOKIE_MASK
            self.chooser.end(msg.datapath.id, flow_key(msg.match), port)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def port_status(self, ev):
        """A port went down: its flowlets move (entries deleted); back up: choosable."""
        msg = ev.msg
        dp = msg.datapath
        ofp, parser = dp.ofproto, dp.ofproto_parser
        port = msg.desc.port_no
        if msg.desc.state & ofp.OFPPS_LINK_DOWN:
            self.down[dp.id].add(port)
            dp.send_msg(parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=0,
                                          cookie=COOKIE_BASE | port, cookie_mask=EXACT_COOKIE,
                                          out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY))
        else:
            self.down[dp.id].discard(port)
