"""OpenFlow 1.3 connections to the fake fabric: negotiation and translation.

The graph is a 2x2 leaf-spine: leaves l0, l1 (ports 1-2 hosts, 3 to s0,
4 to s1), spines s0, s1 (port 1 to l0, 2 to l1), hosts l0h0 10.0.0.1,
l0h1 10.0.0.2, l1h0 10.0.0.3, l1h1 10.0.0.4.
"""

from __future__ import annotations

import pytest

pytest.importorskip("os_ken")
pytest.importorskip("scapy")

from os_ken.base import app_manager  # noqa: E402
from os_ken.controller import ofp_event  # noqa: E402
from os_ken.controller.handler import MAIN_DISPATCHER, set_ev_cls  # noqa: E402
from os_ken.ofproto import ofproto_v1_0, ofproto_v1_3, ofproto_v1_5  # noqa: E402
from os_ken.ofproto import ofproto_v1_3_parser as p13  # noqa: E402

import topologies  # noqa: E402
from fabric.testing import FakeFabric, HarnessError, Hop, UnsupportedFeature  # noqa: E402
from fabric.testing.connection import negotiate  # noqa: E402

IPV4 = 0x0800


class App13(app_manager.OSKenApp):
    """Speaks only OpenFlow 1.3; keeps every reply it gets."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.replies = []

    @set_ev_cls([ofp_event.EventOFPPortStatsReply, ofp_event.EventOFPFlowStatsReply,
                 ofp_event.EventOFPGroupStatsReply, ofp_event.EventOFPPortDescStatsReply,
                 ofp_event.EventOFPPortStatus, ofp_event.EventOFPBarrierReply,
                 ofp_event.EventOFPPacketIn, ofp_event.EventOFPFlowRemoved], MAIN_DISPATCHER)
    def keep(self, ev):
        self.replies.append(ev.msg)


class AnyVersion(app_manager.OSKenApp):
    """Names no version: takes what the others agree on."""


class App10(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_0.OFP_VERSION]


@pytest.fixture
def fabric():
    return FakeFabric(topologies.build("leaf-spine,leaves=2,spines=2,hosts_per_leaf=2"))


@pytest.fixture
def app(fabric):
    return fabric.connect(App13())


def flow(dp, priority, actions, **match):
    inst = [p13.OFPInstructionActions(ofproto_v1_3.OFPIT_APPLY_ACTIONS, actions)]
    dp.send_msg(p13.OFPFlowMod(dp, priority=priority, match=p13.OFPMatch(**match),
                               instructions=inst, cookie=0x42))


def test_versions_are_negotiated_like_os_ken():
    assert negotiate([AnyVersion()]) == ofproto_v1_5.OFP_VERSION
    assert negotiate([App13(), AnyVersion()]) == ofproto_v1_3.OFP_VERSION
    with pytest.raises(HarnessError, match="no OpenFlow version common"):
        negotiate([App10()])
    with pytest.raises(HarnessError):
        negotiate([App13(), type("Only15", (app_manager.OSKenApp,),
                                 {"OFP_VERSIONS": [ofproto_v1_5.OFP_VERSION]})()])


def test_a_13_app_gets_13_datapaths_and_13_handshake_replies(fabric, app):
    dp = fabric.datapaths["l0"]
    assert dp.ofproto is ofproto_v1_3 and dp.ofproto_parser is p13
    assert isinstance(dp.ports[1], p13.OFPPort) and dp.ports[3].curr_speed > 0


def test_flow_mods_in_13_forward_and_are_reported_in_13(fabric, app):
    dp = fabric.datapaths["l0"]
    flow(dp, 10, [p13.OFPActionSetQueue(1), p13.OFPActionOutput(3)],
         eth_type=IPV4, ipv4_dst=("10.0.0.0", "255.255.255.252"))
    trace = fabric.trace(fabric.packet("l0h0", "l1h0"), "l0h0")
    assert trace.hops[0] == Hop("l0", 1, 3, 1)
    dp.send_msg(p13.OFPFlowStatsRequest(dp))
    fabric.flush()
    stats = [m for m in app.replies if isinstance(m, p13.OFPFlowStatsReply)][-1].body
    assert len(stats) == 1 and stats[0].cookie == 0x42 and stats[0].packet_count == 1
    assert stats[0].match["ipv4_dst"] == ("10.0.0.0", "255.255.255.252")
    assert [type(a).__name__ for a in stats[0].instructions[0].actions] == [
        "OFPActionSetQueue", "OFPActionOutput"]


def test_select_and_fast_failover_groups_in_13(fabric, app):
    dp = fabric.datapaths["l0"]
    buckets = [p13.OFPBucket(weight=w, actions=[p13.OFPActionOutput(port)])
               for port, w in ((3, 1), (4, 0))]
    dp.send_msg(p13.OFPGroupMod(dp, ofproto_v1_3.OFPGC_ADD, ofproto_v1_3.OFPGT_SELECT, 1,
                                buckets))
    ff = [p13.OFPBucket(watch_port=port, actions=[p13.OFPActionOutput(port)]) for port in (3, 4)]
    dp.send_msg(p13.OFPGroupMod(dp, ofproto_v1_3.OFPGC_ADD, ofproto_v1_3.OFPGT_FF, 2, ff))
    assert fabric.switches["l0"].groups[1].weights() == {3: 1, 4: 0}
    flow(dp, 10, [p13.OFPActionGroup(1)], eth_type=IPV4, ipv4_dst="10.0.0.3")
    flow(dp, 10, [p13.OFPActionGroup(2)], eth_type=IPV4, ipv4_dst="10.0.0.4")
    for sport in range(40000, 40020):  # weight 0 in 1.3: never chosen
        assert fabric.trace(fabric.packet("l0h0", "l1h0", sport=sport), "l0h0").hops[0].out_port == 3
    fabric.set_link("l0", "s0", False)
    assert fabric.trace(fabric.packet("l0h0", "l1h1"), "l0h0").hops[0].out_port == 4
    dp.send_msg(p13.OFPGroupStatsRequest(dp))
    fabric.flush()
    stats = [m for m in app.replies if isinstance(m, p13.OFPGroupStatsReply)][-1].body
    assert {s.group_id: s.packet_count for s in stats} == {1: 20, 2: 1}


def test_port_status_and_stats_in_13(fabric, app):
    fabric.set_link("l0", "s1", False)
    status = [m for m in app.replies if isinstance(m, p13.OFPPortStatus)]
    assert [(m.datapath.id, m.desc.port_no, m.desc.state) for m in status] == [
        (fabric.switches["l0"].dpid, 4, ofproto_v1_3.OFPPS_LINK_DOWN),
        (fabric.switches["s1"].dpid, 1, ofproto_v1_3.OFPPS_LINK_DOWN)]
    fabric.add_port_bytes("l0", 3, 1500, 1)
    fabric.poll_stats()
    reply = [m for m in app.replies if isinstance(m, p13.OFPPortStatsReply)
             and m.datapath.id == fabric.switches["l0"].dpid][-1]
    port3 = next(s for s in reply.body if s.port_no == 3)
    assert (port3.tx_bytes, port3.tx_packets, port3.collisions) == (1500, 1, 0)


def test_packet_in_and_packet_out_in_13(fabric, app):
    fabric.packet_in("l0", 1, bytes(fabric.packet("l0h0", "l1h0")))
    pin = [m for m in app.replies if isinstance(m, p13.OFPPacketIn)][-1]
    assert pin.match["in_port"] == 1
    dp = pin.datapath
    dp.send_msg(p13.OFPPacketOut(dp, buffer_id=ofproto_v1_3.OFP_NO_BUFFER, in_port=1,
                                 actions=[p13.OFPActionOutput(ofproto_v1_3.OFPP_FLOOD)],
                                 data=pin.data))
    _, sent, trace = fabric.packet_outs[-1]
    assert sorted(h.out_port for h in trace.hops) == [2, 3, 4]  # not back to port 1
    assert type(fabric.messages["l0"][-1]) is p13.OFPPacketOut  # what the app sent, kept


def test_unmodelled_13_actions_are_refused_as_on_15(fabric, app):
    dp = fabric.datapaths["l0"]
    with pytest.raises(UnsupportedFeature, match="OFPActionPushVlan"):
        flow(dp, 1, [p13.OFPActionPushVlan(0x8100), p13.OFPActionOutput(3)])
    with pytest.raises(UnsupportedFeature, match="OFPInstructionMeter"):
        dp.send_msg(p13.OFPFlowMod(dp, match=p13.OFPMatch(),
                                   instructions=[p13.OFPInstructionMeter(1)]))


def test_reactive_send_stops_a_loop_through_the_controller(fabric):
    class Flooder(App13):
        @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
        def flood(self, ev):
            dp, p = ev.msg.datapath, ev.msg.datapath.ofproto_parser
            dp.send_msg(p.OFPPacketOut(dp, buffer_id=dp.ofproto.OFP_NO_BUFFER,
                                       in_port=ev.msg.match["in_port"],
                                       actions=[p.OFPActionOutput(dp.ofproto.OFPP_FLOOD)],
                                       data=ev.msg.data))

    app = fabric.connect(Flooder())
    for name in fabric.switches:  # every miss to the controller: floods circle l0-s0-l1-s1
        flow(fabric.datapaths[name], 0, [p13.OFPActionOutput(ofproto_v1_3.OFPP_CONTROLLER)])
    with pytest.raises(HarnessError, match="loop through the controller"):
        fabric.send(fabric.packet("l0h0", "l1h0"), "l0h0", max_packet_ins=50)
    assert app.replies


def test_an_idle_flow_is_removed_with_a_13_flow_removed(fabric, app):
    dp = fabric.datapaths["l0"]
    inst = [p13.OFPInstructionActions(ofproto_v1_3.OFPIT_APPLY_ACTIONS,
                                      [p13.OFPActionOutput(3)])]
    dp.send_msg(p13.OFPFlowMod(dp, priority=5, idle_timeout=1, cookie=7,
                               flags=ofproto_v1_3.OFPFF_SEND_FLOW_REM,
                               match=p13.OFPMatch(eth_type=IPV4, ipv4_dst="10.0.0.3"),
                               instructions=inst))
    fabric.trace(fabric.packet("l0h0", "l1h0"), "l0h0")
    fabric.advance(1.0)
    removed = [m for m in app.replies if isinstance(m, p13.OFPFlowRemoved)]
    assert [(m.cookie, m.reason, m.packet_count, m.match["ipv4_dst"]) for m in removed] == [
        (7, ofproto_v1_3.OFPRR_IDLE_TIMEOUT, 1, "10.0.0.3")]
