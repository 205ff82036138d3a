"""The fake-fabric harness's own semantics, with hand-built os-ken messages.

The graph is a 2x2 leaf-spine: leaves l0, l1 (ports 1-2 hosts, 3 to s0,
4 to s1), spines s0, s1 (port 1 to l0, 2 to l1), hosts l0h0 10.0.0.1,
l0h1 10.0.0.2, l1h0 10.0.0.3, l1h1 10.0.0.4.
"""

from __future__ import annotations

import struct
import time
import zlib
from collections import Counter

import pytest

pytest.importorskip("os_ken")
pytest.importorskip("scapy")

from os_ken.base import app_manager  # noqa: E402
from os_ken.controller import ofp_event  # noqa: E402
from os_ken.controller.handler import (CONFIG_DISPATCHER, DEAD_DISPATCHER,  # noqa: E402
                                       MAIN_DISPATCHER, set_ev_cls)
from os_ken.ofproto import ofproto_v1_5 as ofp  # noqa: E402
from os_ken.ofproto import ofproto_v1_5_parser as parser  # noqa: E402
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402

import topologies  # noqa: E402
from controllers.openflow import selection_method_words  # noqa: E402
from fabric.testing import (FakeFabric, Hop, OpenFlowError, UnsupportedFeature,  # noqa: E402
                            arp_request, packet_fields, select_hash)
from fabric.routing import hashing  # noqa: E402
from fabric.testing.tables import normalise  # noqa: E402

IPV4 = 0x0800


@pytest.fixture
def graph():
    return topologies.build("leaf-spine,leaves=2,spines=2,hosts_per_leaf=2")


@pytest.fixture
def fabric(graph):
    return FakeFabric(graph)


def send(fabric, switch, msg_fn):
    dp = fabric.datapath(switch)
    msg = msg_fn(dp)
    dp.send_msg(msg)
    return msg


def add_flow(fabric, switch, priority, actions=(), table=0, goto=None, **match):
    def build(dp):
        inst = []
        if actions:
            inst.append(parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, list(actions)))
        if goto is not None:
            inst.append(parser.OFPInstructionGotoTable(goto))
        return parser.OFPFlowMod(dp, table_id=table, priority=priority, command=ofp.OFPFC_ADD,
                                 match=parser.OFPMatch(**match), instructions=inst)
    return send(fabric, switch, build)


def delete(fabric, switch, strict=False, table=0, priority=0, out_port=ofp.OFPP_ANY,
           out_group=ofp.OFPG_ANY, **match):
    cmd = ofp.OFPFC_DELETE_STRICT if strict else ofp.OFPFC_DELETE
    return send(fabric, switch, lambda dp: parser.OFPFlowMod(
        dp, table_id=table, command=cmd, priority=priority, out_port=out_port,
        out_group=out_group, match=parser.OFPMatch(**match)))


def out(port):
    return parser.OFPActionOutput(port)


def group_mod(fabric, switch, gid, buckets, type_=ofp.OFPGT_SELECT, command=ofp.OFPGC_ADD,
              basis=None):
    """``buckets``: list of (port, weight or None, watch port or None)."""
    def build(dp):
        obj = []
        for i, (port, weight, watch) in enumerate(buckets):
            props = []
            if weight is not None:
                props.append(parser.OFPGroupBucketPropWeight(type_=ofp.OFPGBPT_WEIGHT,
                                                             weight=weight))
            if watch is not None:
                props.append(parser.OFPGroupBucketPropWatch(type_=ofp.OFPGBPT_WATCH_PORT,
                                                            watch=watch))
            obj.append(parser.OFPBucket(bucket_id=i, actions=[out(port)], properties=props))
        props = [] if basis is None else [parser.OFPGroupPropExperimenter(
            type_=ofp.OFPGPT_EXPERIMENTER, experimenter=hashing.NTR_VENDOR_ID,
            exp_type=hashing.NTR_SELECTION_METHOD,
            data=selection_method_words("dp_hash", basis))]
        return parser.OFPGroupMod(dp, command=command, type_=type_, group_id=gid, buckets=obj,
                                  properties=props)
    return send(fabric, switch, build)


def tcp(fabric, sport=40000, src="l0h0", dst="l1h0", **kw):
    return fabric.packet(src, dst, "tcp", sport=sport, **kw)


def inject(fabric, packet, switch="l0", in_port=1):
    return fabric.trace(packet, switch=switch, in_port=in_port)


class Recorder(app_manager.OSKenApp):
    """A minimal user app: records what it is told, keeps datapaths by id."""

    OFP_VERSIONS = [ofp.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: list[tuple] = []
        self.dps: dict[int, object] = {}
        self.stamps: list[float] = []

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _features(self, ev):
        self.dps[ev.msg.datapath.id] = ev.msg.datapath
        self.seen.append(("features", ev.msg.datapath_id))

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _desc(self, ev):
        self.seen.append(("desc", ev.msg.datapath.state, ev.msg.xid,
                          {p.port_no: p.state for p in ev.msg.body}))

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def _state(self, ev):
        self.seen.append(("state", ev.datapath.id, ev.state))

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def _barrier(self, ev):
        self.seen.append(("barrier", ev.msg.datapath.id, ev.msg.xid))

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def _stats(self, ev):
        self.stamps.append(time.monotonic())
        body = {s.port_no: (s.tx_bytes, s.tx_packets, s.tx_dropped) for s in ev.msg.body}
        self.seen.append(("stats", ev.msg.datapath.id, body))

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _port(self, ev):
        self.seen.append(("port", ev.msg.datapath.id, ev.msg.reason, ev.msg.desc.port_no,
                          ev.msg.desc.state))

    @set_ev_cls(ofp_event.EventOFPFlowRemoved, MAIN_DISPATCHER)
    def _removed(self, ev):
        self.seen.append(("removed", ev.msg.datapath.id, ev.msg.reason, ev.msg.priority,
                          ev.msg.stats["packet_count"]))

    @set_ev_cls(ofp_event.EventOFPErrorMsg, MAIN_DISPATCHER)
    def _error(self, ev):
        self.seen.append(("error", ev.msg.type, ev.msg.code))

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _packet_in(self, ev):
        msg = ev.msg
        self.seen.append(("packet_in", msg.datapath.id, msg.match["in_port"]))
        dp = msg.datapath  # echo it back out of the port it came in on
        dp.send_msg(dp.ofproto_parser.OFPPacketOut(
            dp, buffer_id=ofp.OFP_NO_BUFFER, match=parser.OFPMatch(in_port=ofp.OFPP_CONTROLLER),
            actions=[out(msg.match["in_port"])], data=msg.data))

    def kinds(self):
        return [s[0] for s in self.seen]


# --- the datapath --------------------------------------------------------------------

def test_datapath_looks_like_an_os_ken_datapath(fabric, graph):
    dp = fabric.datapath("l0")
    assert dp.id == int(graph.nodes["l0"]["dpid"], 16)
    assert dp.ofproto is ofp and dp.ofproto_parser is parser
    assert isinstance(dp.address, tuple)
    msg = parser.OFPBarrierRequest(dp)
    assert dp.set_xid(msg) == msg.xid == 1
    msg2 = add_flow(fabric, "l0", 10, [out(3)], eth_type=IPV4)
    assert msg2.xid == 2 and msg2.buf  # serialized
    assert fabric.messages["l0"] == [msg2]
    assert fabric.flow_mods("l0") == 1 and fabric.group_mods("l0") == 0
    assert dp.flow_mods == 1


def test_send_msg_serializes_so_invalid_messages_fail(fabric):
    dp = fabric.datapath("l0")
    bad = parser.OFPFlowMod(dp, priority=70000, match=parser.OFPMatch(eth_type=IPV4),
                            out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY)
    with pytest.raises(struct.error):
        dp.send_msg(bad)
    assert fabric.messages["l0"] == [] and fabric.switches["l0"].flows == []


# --- flow tables -----------------------------------------------------------------------

def test_table_miss_drops(fabric):
    trace = inject(fabric, tcp(fabric))
    assert trace.hops == [] and trace.dropped_at == "l0" and trace.delivered_to is None
    assert "miss" in trace.drops[0][1]


def test_highest_priority_wins(fabric):
    add_flow(fabric, "l0", 10, [out(3)], eth_type=IPV4)
    add_flow(fabric, "l0", 20, [out(4)], eth_type=IPV4, ipv4_dst="10.0.0.3")
    add_flow(fabric, "l0", 30, [out(2)], eth_type=IPV4, ipv4_dst="10.0.0.9")
    trace = inject(fabric, tcp(fabric))
    assert trace.hops == [Hop("l0", 1, 4, None)]
    assert trace.hops[0].to == "s1" and trace.dropped_at == "s1"
    assert inject(fabric, tcp(fabric, dst="l0h1")).hops == [Hop("l0", 1, 3)]


def test_masked_match(fabric):
    add_flow(fabric, "l0", 10, [out(3)], eth_type=IPV4, ipv4_dst=("10.0.0.0", "255.255.255.252"))
    assert inject(fabric, tcp(fabric, dst="l0h1")).hops == [Hop("l0", 1, 3)]
    assert inject(fabric, tcp(fabric, dst="l1h1")).hops == []  # 10.0.0.4 outside /30


def test_goto_table_and_set_queue_carry_over(fabric):
    add_flow(fabric, "l0", 10, [parser.OFPActionSetQueue(2)], goto=3, eth_type=IPV4)
    add_flow(fabric, "l0", 10, [out(4)], table=3, eth_type=IPV4)
    trace = inject(fabric, tcp(fabric))
    assert trace.hops == [Hop("l0", 1, 4, 2)]
    assert [f.packets for f in fabric.switches["l0"].flows] == [1, 1]


def test_goto_must_go_forward(fabric):
    with pytest.raises(OpenFlowError) as err:
        add_flow(fabric, "l0", 10, [], table=2, goto=1, eth_type=IPV4)
    assert err.value.code == ofp.OFPBIC_BAD_TABLE_ID and err.value.switch == "l0"
    assert fabric.errors == [err.value]


def test_match_prerequisites_are_enforced(fabric):
    with pytest.raises(OpenFlowError) as err:
        add_flow(fabric, "l0", 10, [out(3)], ipv4_dst="10.0.0.3")
    assert (err.value.type, err.value.code) == (ofp.OFPET_BAD_MATCH, ofp.OFPBMC_BAD_PREREQ)
    with pytest.raises(OpenFlowError):
        add_flow(fabric, "l0", 10, [out(3)], eth_type=IPV4, tcp_dst=80)
    add_flow(fabric, "l0", 10, [out(3)], eth_type=IPV4, ip_proto=6, tcp_dst=5001)
    assert inject(fabric, tcp(fabric)).hops == [Hop("l0", 1, 3)]


def test_add_replaces_identical_entry(fabric):
    add_flow(fabric, "l0", 10, [out(3)], eth_type=IPV4)
    add_flow(fabric, "l0", 10, [out(4)], eth_type=IPV4)
    add_flow(fabric, "l0", 11, [out(3)], eth_type=IPV4, ipv4_dst="10.0.0.9")
    assert len(fabric.switches["l0"].flows) == 2
    assert inject(fabric, tcp(fabric)).hops == [Hop("l0", 1, 4)]


def test_output_to_input_port_is_skipped_and_in_port_works(fabric):
    add_flow(fabric, "l0", 10, [out(1)], eth_type=IPV4)
    trace = inject(fabric, tcp(fabric))
    assert trace.hops == [] and "input port" in trace.drops[0][1]
    add_flow(fabric, "l0", 10, [out(ofp.OFPP_IN_PORT)], eth_type=IPV4)
    trace = inject(fabric, tcp(fabric))
    assert trace.hops == [Hop("l0", 1, 1)] and trace.delivered_to == "l0h0"


def _three_flows(fabric):
    add_flow(fabric, "l0", 5, [out(3)], eth_type=IPV4)
    add_flow(fabric, "l0", 10, [out(3)], eth_type=IPV4, ipv4_dst="10.0.0.3")
    add_flow(fabric, "l0", 20, [out(4)], eth_type=IPV4, ipv4_dst="10.0.0.4")
    add_flow(fabric, "l0", 1, [out(4)], table=1)


def _priorities(fabric):
    return sorted((f.table_id, f.priority) for f in fabric.switches["l0"].flows)


def test_delete_non_strict_removes_more_specific_entries(fabric):
    _three_flows(fabric)
    delete(fabric, "l0", eth_type=IPV4, ipv4_dst="10.0.0.3")
    assert _priorities(fabric) == [(0, 5), (0, 20), (1, 1)]
    delete(fabric, "l0", eth_type=IPV4)  # priority is ignored, table 1 untouched
    assert _priorities(fabric) == [(1, 1)]


def test_delete_all_tables(fabric):
    _three_flows(fabric)
    delete(fabric, "l0", table=ofp.OFPTT_ALL)
    assert fabric.switches["l0"].flows == []


def test_delete_strict_needs_priority_and_exact_match(fabric):
    _three_flows(fabric)
    delete(fabric, "l0", strict=True, priority=11, eth_type=IPV4, ipv4_dst="10.0.0.3")
    delete(fabric, "l0", strict=True, priority=10, eth_type=IPV4)
    assert len(fabric.switches["l0"].flows) == 4
    delete(fabric, "l0", strict=True, priority=10, eth_type=IPV4, ipv4_dst="10.0.0.3")
    assert _priorities(fabric) == [(0, 5), (0, 20), (1, 1)]


def test_delete_out_port_filter_and_os_ken_default(fabric):
    _three_flows(fabric)
    delete(fabric, "l0", out_port=4)
    assert _priorities(fabric) == [(0, 5), (0, 10), (1, 1)]
    # os-ken's default out_port=0 filters for port 0, as in Open vSwitch: nothing goes.
    send(fabric, "l0", lambda dp: parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE))
    assert len(fabric.switches["l0"].flows) == 3


def test_modify_replaces_instructions_keeps_counters(fabric):
    _three_flows(fabric)
    inject(fabric, tcp(fabric))
    send(fabric, "l0", lambda dp: parser.OFPFlowMod(
        dp, command=ofp.OFPFC_MODIFY_STRICT, priority=10,
        match=parser.OFPMatch(eth_type=IPV4, ipv4_dst="10.0.0.3"),
        instructions=[parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [out(4)])]))
    assert inject(fabric, tcp(fabric)).hops == [Hop("l0", 1, 4)]
    entry = next(f for f in fabric.switches["l0"].flows if f.priority == 10)
    assert entry.packets == 2
    send(fabric, "l0", lambda dp: parser.OFPFlowMod(  # non-strict: every IPv4 entry of table 0
        dp, command=ofp.OFPFC_MODIFY, match=parser.OFPMatch(eth_type=IPV4), instructions=[]))
    assert inject(fabric, tcp(fabric, dst="l1h1")).hops == []
    send(fabric, "l0", lambda dp: parser.OFPFlowMod(  # modify adds nothing (OpenFlow 1.1+)
        dp, command=ofp.OFPFC_MODIFY, match=parser.OFPMatch(eth_type=0x0806), instructions=[]))
    assert len(fabric.switches["l0"].flows) == 4


def test_write_actions_run_at_the_end_and_group_beats_output(fabric):
    group_mod(fabric, "l0", 1, [(4, None, None)], type_=ofp.OFPGT_INDIRECT)
    send(fabric, "l0", lambda dp: parser.OFPFlowMod(
        dp, priority=10, match=parser.OFPMatch(eth_type=IPV4), instructions=[
            parser.OFPInstructionActions(ofp.OFPIT_WRITE_ACTIONS,
                                         [out(3), parser.OFPActionGroup(1),
                                          parser.OFPActionSetQueue(1)])]))
    assert inject(fabric, tcp(fabric)).hops == [Hop("l0", 1, 4, 1)]


def test_unmodelled_features_raise(fabric):
    with pytest.raises(UnsupportedFeature):
        add_flow(fabric, "l0", 10, [parser.OFPActionPushVlan()], eth_type=IPV4)
    with pytest.raises(UnsupportedFeature):
        send(fabric, "l0", lambda dp: parser.OFPMeterMod(dp))


# --- groups ------------------------------------------------------------------------------

def test_group_add_modify_delete_and_errors(fabric):
    with pytest.raises(OpenFlowError) as err:
        add_flow(fabric, "l0", 10, [parser.OFPActionGroup(1)], eth_type=IPV4)
    assert err.value.code == ofp.OFPBAC_BAD_OUT_GROUP
    group_mod(fabric, "l0", 1, [(3, 1, 3), (4, 1, 4)])
    with pytest.raises(OpenFlowError) as err:
        group_mod(fabric, "l0", 1, [(3, 1, 3)])
    assert err.value.code == ofp.OFPGMFC_GROUP_EXISTS
    with pytest.raises(OpenFlowError) as err:
        group_mod(fabric, "l0", 2, [(3, 1, 3)], command=ofp.OFPGC_MODIFY)
    assert err.value.code == ofp.OFPGMFC_UNKNOWN_GROUP
    group_mod(fabric, "l0", 1, [(3, 5, 3), (4, 7, 4)], command=ofp.OFPGC_MODIFY)
    assert fabric.switches["l0"].groups[1].weights() == {3: 5, 4: 7}
    add_flow(fabric, "l0", 10, [parser.OFPActionGroup(1)], eth_type=IPV4)
    assert len(inject(fabric, tcp(fabric)).hops) == 1
    send(fabric, "l0", lambda dp: parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=1))
    sw = fabric.switches["l0"]
    assert sw.groups == {} and sw.flows == []  # the flow using the group went with it
    send(fabric, "l0", lambda dp: parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=9))
    assert fabric.group_mods("l0") == 6 and len(fabric.errors) == 3


def test_group_delete_all(fabric):
    group_mod(fabric, "l0", 1, [(3, 1, 3)])
    group_mod(fabric, "l0", 2, [(4, None, 4)], type_=ofp.OFPGT_FF)
    send(fabric, "l0", lambda dp: parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE,
                                                     group_id=ofp.OFPG_ALL))
    assert fabric.switches["l0"].groups == {}


def test_weights_only_on_select_groups(fabric):
    with pytest.raises(OpenFlowError) as err:
        group_mod(fabric, "l0", 1, [(3, 2, 3)], type_=ofp.OFPGT_FF)
    assert err.value.code == ofp.OFPGMFC_WEIGHT_UNSUPPORTED


def _select_counts(fabric, n, **kw):
    counts = Counter()
    for i in range(n):
        trace = inject(fabric, fabric.packet("l0h0", "l1h0", "tcp", sport=1024 + i % 50000,
                                             dport=5001 + i // 50000, **kw))
        counts[trace.hops[0].out_port] += 1
    return counts


def test_select_weights_are_proportional(fabric):
    group_mod(fabric, "l0", 1, [(3, 3, 3), (4, 1, 4)], basis=0x1234)
    add_flow(fabric, "l0", 10, [parser.OFPActionGroup(1)], eth_type=IPV4)
    counts = _select_counts(fabric, 4000)
    assert abs(counts[3] / 4000 - 0.75) < 0.05 and abs(counts[4] / 4000 - 0.25) < 0.05


def test_select_is_deterministic_per_five_tuple(fabric):
    group_mod(fabric, "l0", 1, [(3, 1, 3), (4, 1, 4)], basis=7)
    add_flow(fabric, "l0", 10, [parser.OFPActionGroup(1)], eth_type=IPV4)
    for sport in range(1000, 1020):
        first = inject(fabric, tcp(fabric, sport=sport)).hops
        assert all(inject(fabric, tcp(fabric, sport=sport)).hops == first for _ in range(5))
    assert set(_select_counts(fabric, 64)) == {3, 4}


def test_default_select_hash_ignores_udp_ports(fabric):
    """Without a selection method OVS's hash ignores UDP ports; with dp_hash they count."""
    group_mod(fabric, "l0", 1, [(3, 1, 3), (4, 1, 4)])
    add_flow(fabric, "l0", 10, [parser.OFPActionGroup(1)], eth_type=IPV4)
    udp = {inject(fabric, fabric.packet("l0h0", "l1h0", "udp", sport=s)).hops[0].out_port
           for s in range(1000, 1064)}
    assert len(udp) == 1
    group_mod(fabric, "l0", 1, [(3, 1, 3), (4, 1, 4)], command=ofp.OFPGC_MODIFY, basis=0)
    udp = {inject(fabric, fabric.packet("l0h0", "l1h0", "udp", sport=s)).hops[0].out_port
           for s in range(1000, 1064)}
    assert udp == {3, 4}


def test_dead_and_zero_weight_select_buckets_are_skipped(fabric):
    group_mod(fabric, "l0", 1, [(3, 1, 3), (4, 1, 4)], basis=1)
    add_flow(fabric, "l0", 10, [parser.OFPActionGroup(1)], eth_type=IPV4)
    fabric.set_link("l0", "s1", False)
    assert set(_select_counts(fabric, 200)) == {3}
    fabric.set_link("l0", "s1", True)
    group_mod(fabric, "l0", 1, [(3, 0, 3), (4, 1, 4)], command=ofp.OFPGC_MODIFY, basis=1)
    assert set(_select_counts(fabric, 200)) == {4}
    fabric.set_link("l0", "s1", False)
    trace = inject(fabric, tcp(fabric))
    assert trace.hops == [] and "no live bucket" in trace.drops[0][1]


def test_fast_failover_uses_first_live_bucket(fabric):
    group_mod(fabric, "l0", 1, [(3, None, 3), (4, None, 4)], type_=ofp.OFPGT_FF)
    add_flow(fabric, "l0", 10, [parser.OFPActionGroup(1)], eth_type=IPV4)
    assert {inject(fabric, tcp(fabric, sport=s)).hops[0].out_port for s in range(50)} == {3}
    fabric.set_link("s0", "l0", False)
    assert inject(fabric, tcp(fabric)).hops == [Hop("l0", 1, 4)]
    fabric.set_link("l0", "s1", False)
    assert inject(fabric, tcp(fabric)).dropped_at == "l0"
    fabric.set_link("l0", "s0", True)
    assert inject(fabric, tcp(fabric)).hops == [Hop("l0", 1, 3)]


def test_all_group_copies(fabric):
    group_mod(fabric, "l0", 1, [(3, None, None), (4, None, None), (2, None, None)],
              type_=ofp.OFPGT_ALL)
    add_flow(fabric, "l0", 10, [parser.OFPActionSetQueue(1), parser.OFPActionGroup(1)],
             eth_type=IPV4)
    trace = inject(fabric, tcp(fabric))
    assert trace.hops == [Hop("l0", 1, 3, 1), Hop("l0", 1, 4, 1), Hop("l0", 1, 2, 1)]
    assert trace.delivered == ["l0h1"] and sorted(n for n, _ in trace.drops) == ["s0", "s1"]


# --- tracing -------------------------------------------------------------------------------

def _route_everything(fabric):
    """Static routes: leaves to the destination's leaf over s0, spines down."""
    for leaf, hosts in (("l0", ("10.0.0.1", "10.0.0.2")), ("l1", ("10.0.0.3", "10.0.0.4"))):
        for port, ip in enumerate(hosts, start=1):
            add_flow(fabric, leaf, 20, [out(port)], eth_type=IPV4, ipv4_dst=ip)
        add_flow(fabric, leaf, 10, [parser.OFPActionSetQueue(1), out(3)], eth_type=IPV4)
    add_flow(fabric, "s0", 10, [out(1)], eth_type=IPV4, ipv4_dst=("10.0.0.0", "255.255.255.254"))
    add_flow(fabric, "s0", 10, [out(1)], eth_type=IPV4, ipv4_dst="10.0.0.2")
    add_flow(fabric, "s0", 5, [out(2)], eth_type=IPV4)


def test_trace_from_an_endpoint_to_an_endpoint(fabric):
    _route_everything(fabric)
    trace = fabric.trace(tcp(fabric), src="l0h0")
    assert trace.hops == [Hop("l0", 1, 3, 1), Hop("s0", 1, 2), Hop("l1", 3, 1)]
    assert [h.to for h in trace.hops] == ["s0", "l1", "l1h0"]
    assert trace.delivered_to == "l1h0" and trace.dropped_at is None
    assert not trace.to_controller and not trace.loop
    assert trace.links[0] == frozenset(("l0", "s0"))


def test_trace_counts_bytes_on_ports(fabric):
    _route_everything(fabric)
    pkt = tcp(fabric)
    fabric.trace(pkt, src="l0h0")
    fabric.trace(pkt, src="l0h0", count=False)
    assert fabric.counters("l0", "s0").tx_packets == 1
    assert fabric.counters("l0", 3).tx_bytes == len(bytes(pkt))
    assert fabric.counters("s0", "l0").rx_packets == 1


def test_loop_is_detected_not_raised(graph):
    fabric = FakeFabric(graph, hop_limit=20)
    for switch, port in (("l0", 3), ("s0", 2), ("l1", 4), ("s1", 1)):
        add_flow(fabric, switch, 1, [out(port)])
    trace = inject(fabric, tcp(fabric))
    assert trace.loop and len(trace.hops) == 20 and trace.delivered_to is None
    assert trace.switches[:5] == ["l0", "s0", "l1", "s1", "l0"]


def test_down_access_link_drops_at_the_sender(fabric):
    _route_everything(fabric)
    fabric.set_link("l0h0", "l0", False)
    trace = fabric.trace(tcp(fabric), src="l0h0")
    assert trace.hops == [] and trace.dropped_at == "l0h0"
    assert fabric.trace(tcp(fabric, src="l1h0", dst="l0h0"), src="l1h0").dropped_at == "l0"


def test_packet_fields_of_roce_ipv6_and_arp(fabric):
    roce = fabric.packet("l0h0", "l1h0", "roce", sport=50000, dscp=26)
    fields = packet_fields(roce)
    assert fields["udp_dst"] == 4791 and fields["udp_src"] == 50000
    assert fields["ip_dscp"] == 26 and fields["ip_proto"] == 17
    assert fields["ipv4_src"] == "10.0.0.1" and fields["eth_type"] == IPV4
    assert packet_fields(bytes(roce))["udp_dst"] == 4791
    v6 = packet_fields(Ether() / IPv6(src="fe80::1", dst="fe80::2", tc=10 << 2))
    assert v6["eth_type"] == 0x86DD and v6["ip_dscp"] == 10 and v6["ipv6_dst"] == "fe80::2"
    arp = packet_fields(arp_request("02:00:0a:00:00:01", "10.0.0.1", "10.0.0.3"))
    assert arp["eth_type"] == 0x0806 and arp["arp_tpa"] == "10.0.0.3" and arp["arp_op"] == 1


# --- the hash ---------------------------------------------------------------------------

def test_select_hash_is_documented_function():
    fields = normalise({"ipv4_src": "10.0.0.1", "ipv4_dst": "10.0.0.3", "ip_proto": 6,
                        "tcp_src": 40000, "tcp_dst": 5001})
    key = struct.pack("!IIBHHI", 0x0A000001, 0x0A000003, 6, 40000, 5001, 99)
    assert select_hash(fields, 99) == hashing.fmix32(zlib.crc32(key))
    assert select_hash(fields, 99) != select_hash(fields, 100)
    swapped = dict(fields, ipv4_src=fields["ipv4_dst"], ipv4_dst=fields["ipv4_src"],
                   tcp_src=5001, tcp_dst=40000)
    assert select_hash(fields, 1, full_l4=False) == select_hash(swapped, 1, full_l4=False)


def test_pick_weighted_and_selection_method():
    assert hashing.pick_weighted(0, [0, 0]) is None
    assert [hashing.pick_weighted(h, [3, 0, 1]) for h in range(4)] == [0, 0, 0, 2]
    prop = parser.OFPGroupPropExperimenter(type_=ofp.OFPGPT_EXPERIMENTER,
                                           experimenter=hashing.NTR_VENDOR_ID, exp_type=1,
                                           data=selection_method_words("dp_hash", 0xABCD))
    assert hashing.selection_method([prop]) == ("dp_hash", 0xABCD)
    assert hashing.selection_method([]) == (None, 0)


def test_select_hash_does_not_polarise_across_bases():
    """Two tiers with different bases choose independently (CRC-32 alone would not)."""
    pairs = Counter()
    for sport in range(2000):
        f = {"ipv4_src": 1, "ipv4_dst": 2, "ip_proto": 6, "tcp_src": sport, "tcp_dst": 80}
        pairs[(select_hash(f, 11) % 2, select_hash(f, 22) % 2)] += 1
    assert len(pairs) == 4 and min(pairs.values()) > 400


# --- an app on the other end ----------------------------------------------------------------

def test_handshake_order_and_state(fabric, graph):
    app = fabric.connect(Recorder())
    assert len(app.dps) == 4
    l0 = int(graph.nodes["l0"]["dpid"], 16)
    assert app.seen[0] == ("features", l0)
    assert app.seen[1][0] == "desc" and app.seen[1][1] == CONFIG_DISPATCHER
    assert app.seen[1][3][3] == ofp.OFPPS_LIVE and ofp.OFPP_LOCAL in app.seen[1][3]
    assert app.seen[2] == ("state", l0, MAIN_DISPATCHER)
    assert fabric.datapaths["l0"].state == MAIN_DISPATCHER
    assert app.kinds().count("features") == 4


class FeaturesBarrier(Recorder):
    """Sends a barrier from its features handler."""

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _features(self, ev):
        super()._features(ev)
        dp = ev.msg.datapath
        dp.send_msg(dp.ofproto_parser.OFPBarrierRequest(dp))


@pytest.mark.parametrize("order, barriers", [("os-ken-first", 4), ("app-first", 0)])
def test_handshake_order_decides_the_state_replies_arrive_in(graph, order, barriers):
    fabric = FakeFabric(graph, handshake=order)
    app = fabric.connect(FeaturesBarrier())
    # The barrier handler listens in MAIN_DISPATCHER only: with "app-first"
    # every reply arrives in CONFIG_DISPATCHER and is missed, as in os-ken.
    assert app.kinds().count("barrier") == barriers
    assert all(dp.state == MAIN_DISPATCHER for dp in fabric.datapaths.values())


def test_barrier_and_port_desc_replies(fabric):
    app = fabric.connect(Recorder())
    dp = fabric.datapaths["l1"]
    barrier = parser.OFPBarrierRequest(dp)
    dp.send_msg(barrier)
    fabric.flush()
    assert app.seen[-1] == ("barrier", dp.id, barrier.xid)
    fabric.set_link("l1", "s1", False)
    request = parser.OFPPortDescStatsRequest(dp, 0)
    dp.send_msg(request)
    fabric.flush()
    kind, state, xid, ports = app.seen[-1]
    assert (kind, state, xid) == ("desc", MAIN_DISPATCHER, request.xid)
    assert ports[4] == ofp.OFPPS_LINK_DOWN and ports[3] == ofp.OFPPS_LIVE


def test_port_status_on_link_change(fabric, graph):
    app = fabric.connect(Recorder())
    fabric.set_link("l0", "s1", False)
    fabric.set_link("l0", "s1", False)  # no change, no event
    ports = [s for s in app.seen if s[0] == "port"]
    l0, s1 = (int(graph.nodes[n]["dpid"], 16) for n in ("l0", "s1"))
    assert sorted(ports) == sorted([("port", l0, ofp.OFPPR_MODIFY, 4, ofp.OFPPS_LINK_DOWN),
                                    ("port", s1, ofp.OFPPR_MODIFY, 1, ofp.OFPPS_LINK_DOWN)])
    fabric.set_link("l0h0", "l0", False)  # only the switch end reports
    assert [s for s in app.seen if s[0] == "port"][-1] == ("port", l0, ofp.OFPPR_MODIFY, 1,
                                                            ofp.OFPPS_LINK_DOWN)
    fabric.set_link("s1", "l0", True)
    assert [s[4] for s in app.seen if s[0] == "port"][-2:] == [ofp.OFPPS_LIVE] * 2


def test_port_stats_from_counters_and_frozen_clock(fabric, graph):
    app = fabric.connect(Recorder())
    fabric.set_port_counters("l0", "s0", tx_bytes=1000, tx_dropped=3)
    fabric.add_port_bytes("l0", 3, 500, tx_packets=2)
    fabric.poll_stats(app, now=12.5)
    assert app.stamps == [12.5] * 4
    assert time.monotonic() != 12.5 and time.monotonic is not None
    l0 = int(graph.nodes["l0"]["dpid"], 16)
    (stats,) = [s[2] for s in app.seen if s[0] == "stats" and s[1] == l0]
    assert stats[3] == (1500, 2, 3) and set(stats) == {1, 2, 3, 4}
    fabric.poll_stats()
    assert len(app.stamps) == 8 and app.stamps[-1] != 12.5
    with pytest.raises(KeyError):
        fabric.set_port_counters("l0", 3, tx_bits=1)


class StatsRecorder(app_manager.OSKenApp):
    """Asks for flow and group statistics and keeps the replies."""

    OFP_VERSIONS = [ofp.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.flows: list = []
        self.groups: list = []

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def _flows(self, ev):
        self.flows += ev.msg.body

    @set_ev_cls(ofp_event.EventOFPGroupStatsReply, MAIN_DISPATCHER)
    def _groups(self, ev):
        self.groups += ev.msg.body


def test_flow_and_group_statistics_count_traced_packets(fabric):
    app = fabric.connect(StatsRecorder())
    group_mod(fabric, "l0", 1, [(3, 1, 3), (4, 1, 4)], basis=7)
    add_flow(fabric, "l0", 10, [parser.OFPActionGroup(1)], eth_type=IPV4)
    chosen = Counter(inject(fabric, tcp(fabric, sport=sport)).hops[0].out_port
                     for sport in range(2000, 2100))
    inject(fabric, tcp(fabric, sport=3000))  # counted once more below
    dp = fabric.datapath("l0")
    dp.send_msg(parser.OFPFlowStatsRequest(dp, 0, ofp.OFPTT_ALL))
    dp.send_msg(parser.OFPGroupStatsRequest(dp, 0, ofp.OFPG_ALL))
    fabric.flush()
    (flow,) = [f for f in app.flows if f.priority == 10]
    assert flow.stats["packet_count"] == 101 and flow.match["eth_type"] == IPV4
    (group,) = app.groups
    buckets = [b.packet_count for b in group.bucket_stats]
    assert group.group_id == 1 and sum(buckets) == group.packet_count == 101
    assert buckets[0] >= chosen[3] and buckets[1] >= chosen[4]  # sport 3000 went one way
    # a traced packet that is not counted leaves the statistics alone
    fabric.trace(tcp(fabric, sport=3001), switch="l0", in_port=1, count=False)
    app.groups.clear()
    dp.send_msg(parser.OFPGroupStatsRequest(dp, 0, ofp.OFPG_ALL))
    fabric.flush()
    assert app.groups[0].packet_count == 101


def test_errors_as_replies(graph):
    fabric = FakeFabric(graph, errors="reply")
    app = fabric.connect(Recorder())
    group_mod(fabric, "l0", 1, [(3, 1, 3)], command=ofp.OFPGC_MODIFY)
    fabric.flush()  # sent outside a handler: replies wait for the next harness call
    assert app.seen[-1] == ("error", ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_UNKNOWN_GROUP)
    assert len(fabric.errors) == 1 and fabric.errors[0].switch == "l0"


def test_packet_in_and_packet_out(fabric):
    app = fabric.connect(Recorder())
    add_flow(fabric, "l0", 10, [out(ofp.OFPP_CONTROLLER)], eth_type=IPV4)
    trace = fabric.trace(tcp(fabric), src="l0h0")
    assert trace.to_controller and trace.hops == [] and trace.packet_ins[0].in_port == 1
    pin = trace.packet_ins[0]
    fabric.packet_in(pin.switch, pin.in_port, pin.data)
    assert app.seen[-1][0] == "packet_in" and app.seen[-1][2] == 1
    (switch, msg, out_trace) = fabric.packet_outs[-1]
    assert switch == "l0" and out_trace.delivered == ["l0h0"]
    assert out_trace.hops == [Hop("l0", ofp.OFPP_CONTROLLER, 1)]


def test_reconnect_keeps_or_clears_tables(fabric, graph):
    app = fabric.connect(Recorder())
    old = fabric.datapaths["l0"]
    add_flow(fabric, "l0", 10, [out(3)], eth_type=IPV4)
    new = fabric.reconnect("l0")
    assert new is not old and new.state == MAIN_DISPATCHER
    assert not old.send_msg(parser.OFPBarrierRequest(old))
    l0 = int(graph.nodes["l0"]["dpid"], 16)
    assert ("state", l0, DEAD_DISPATCHER) in app.seen
    assert app.kinds().count("features") == 5
    assert len(fabric.switches["l0"].flows) == 1
    fabric.reconnect("l0", restart=True)
    assert fabric.switches["l0"].flows == []


def test_connect_twice_is_refused(fabric):
    fabric.connect(Recorder())
    with pytest.raises(Exception):
        fabric.connect(Recorder())


def test_bad_error_mode_and_trace_arguments(graph):
    with pytest.raises(ValueError):
        FakeFabric(graph, errors="ignore")
    with pytest.raises(ValueError):
        FakeFabric(graph, handshake="random")
    fabric = FakeFabric(graph)
    with pytest.raises(ValueError):
        fabric.trace(tcp(fabric))
    with pytest.raises(KeyError):
        fabric.set_link("l0", "l1", False)


# --- the README example: a user's own app ------------------------------------------------

class TinyRouter(app_manager.OSKenApp):
    """A user's app: routes by destination, spreading over uplinks with a select group."""

    OFP_VERSIONS = [ofp.OFP_VERSION]
    ROUTES = {  # dpid -> {destination ip: port}; leaves send the rest up
        0x0001000000000001: {"10.0.0.1": 1, "10.0.0.2": 2},
        0x0001000000000002: {"10.0.0.3": 1, "10.0.0.4": 2},
        0x0002000000000001: {"10.0.0.1": 1, "10.0.0.2": 1, "10.0.0.3": 2, "10.0.0.4": 2},
        0x0002000000000002: {"10.0.0.1": 1, "10.0.0.2": 1, "10.0.0.3": 2, "10.0.0.4": 2},
    }

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _features(self, ev):
        dp = ev.msg.datapath
        ofp_, p = dp.ofproto, dp.ofproto_parser
        routes = self.ROUTES[dp.id]
        if len(routes) == 2:  # a leaf: group 1 spreads over the two uplinks
            buckets = [p.OFPBucket(actions=[p.OFPActionOutput(port)], properties=[
                p.OFPGroupBucketPropWeight(type_=ofp_.OFPGBPT_WEIGHT, weight=1),
                p.OFPGroupBucketPropWatch(type_=ofp_.OFPGBPT_WATCH_PORT, watch=port)])
                for port in (3, 4)]
            dp.send_msg(p.OFPGroupMod(dp, ofp_.OFPGC_ADD, ofp_.OFPGT_SELECT, 1, buckets=buckets))
            self._flow(dp, 1, eth_type=IPV4, actions=[p.OFPActionSetQueue(0),
                                                       p.OFPActionGroup(1)])
        for ip, port in routes.items():
            self._flow(dp, 10, eth_type=IPV4, ipv4_dst=ip,
                       actions=[p.OFPActionSetQueue(0), p.OFPActionOutput(port)])

    @staticmethod
    def _flow(dp, priority, actions, **match):
        p = dp.ofproto_parser
        dp.send_msg(p.OFPFlowMod(dp, priority=priority, match=p.OFPMatch(**match), instructions=[
            p.OFPInstructionActions(dp.ofproto.OFPIT_APPLY_ACTIONS, actions)]))


def test_readme_example_a_users_own_app(graph):
    fabric = FakeFabric(graph)
    fabric.connect(TinyRouter())
    pkt = fabric.packet("l0h0", "l1h1", "udp", sport=49152)
    trace = fabric.trace(pkt, src="l0h0")
    assert trace.delivered_to == "l1h1"
    assert trace.hops[0].switch == "l0" and trace.hops[-1] == Hop("l1", trace.hops[-1].in_port,
                                                                  2, queue=0)
    fabric.set_link("l0", trace.hops[0].to, up=False)  # the watch port steers around it
    detour = fabric.trace(pkt, src="l0h0")
    assert detour.delivered_to == "l1h1" and trace.hops[0].to not in detour.switches


def test_traces_are_written_as_a_pcap_that_decodes_as_rocev2(tmp_path):
    from scapy.contrib.roce import BTH
    from scapy.utils import rdpcap

    from controllers.ecmp import EcmpApp
    from fabric.testing import write_pcap

    fabric = FakeFabric(topologies.build("leaf-spine"))
    fabric.connect(fabric.make_app(EcmpApp))
    roce = fabric.packet("l0h0", "l1h0", "roce")
    traces = [fabric.trace(roce, src="l0h0"), fabric.trace(fabric.packet("l0h0", "l2h0"),
                                                           src="l0h0")]
    path = write_pcap(tmp_path / "trace.pcap", traces + [bytes(roce)])
    packets = rdpcap(str(path))
    assert [bytes(p) for p in packets] == [t.data for t in traces] + [bytes(roce)]
    assert packets[0].haslayer(BTH) and not packets[1].haslayer(BTH)
    assert packets[0].time < packets[1].time < packets[2].time


def test_flow_timeouts_run_on_the_harness_clock_and_report_removals(fabric):
    app = fabric.connect(Recorder())
    dpid = fabric.switches["l0"].dpid

    def timed(priority, idle=0, hard=0, notify=True, **match):
        send(fabric, "l0", lambda dp: parser.OFPFlowMod(
            dp, priority=priority, idle_timeout=idle, hard_timeout=hard,
            flags=ofp.OFPFF_SEND_FLOW_REM if notify else 0, match=parser.OFPMatch(**match),
            instructions=[parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [out(3)])]))

    timed(30, idle=2, eth_type=IPV4, ipv4_dst="10.0.0.3")
    timed(20, hard=3, notify=False, eth_type=IPV4, ipv4_dst="10.0.0.4")
    timed(10, eth_type=IPV4)  # no timeout: stays
    fabric.advance(1.5)
    fabric.trace(tcp(fabric), "l0h0")  # keeps the idle entry alive until 3.5
    fabric.trace(tcp(fabric), "l0h0", count=False)  # a peek does not
    fabric.advance(1.5)
    assert [f.priority for f in fabric.switches["l0"].flows] == [30, 10]  # hard one gone
    assert "removed" not in app.kinds()  # it did not ask to be told
    fabric.advance(0.5)
    assert [f.priority for f in fabric.switches["l0"].flows] == [10]
    assert app.seen[-1] == ("removed", dpid, ofp.OFPRR_IDLE_TIMEOUT, 30, 1)
    delete(fabric, "l0", eth_type=IPV4)  # asked for nothing: no message
    timed(40, eth_type=IPV4, ipv4_dst="10.0.0.3")
    delete(fabric, "l0", eth_type=IPV4)
    fabric.flush()
    assert app.seen[-1] == ("removed", dpid, ofp.OFPRR_DELETE, 40, 0)
    with pytest.raises(ValueError):
        fabric.advance(-1)


def test_a_timed_out_flow_of_a_detached_datapath_is_removed_without_a_message(fabric):
    dp = fabric.datapath("l0")  # no app connected: nothing to tell
    dp.send_msg(parser.OFPFlowMod(
        dp, priority=30, hard_timeout=1, flags=ofp.OFPFF_SEND_FLOW_REM,
        match=parser.OFPMatch(eth_type=IPV4),
        instructions=[parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [out(3)])]))
    assert [f.priority for f in fabric.switches["l0"].flows] == [30]
    fabric.advance(2)
    assert fabric.switches["l0"].flows == []


def test_a_packet_in_has_the_length_a_switch_would_give_it():
    """Ryu's tutorial switch compares ``msg_len`` with ``total_len`` on every packet-in."""
    from os_ken.controller import ofp_event
    from os_ken.controller.handler import MAIN_DISPATCHER, set_ev_cls
    from os_ken.base.app_manager import OSKenApp

    import topologies
    from fabric.testing import FakeFabric

    class Recorder(OSKenApp):
        seen: list = []

        @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
        def on_packet_in(self, ev):
            self.seen.append(ev.msg)

    fabric = FakeFabric(topologies.build("leaf-spine,spines=1"))
    fabric.connect(Recorder())
    frame = bytes(fabric.packet("l0h0", "l1h1"))
    fabric.packet_in("l0", 1, frame)
    (msg,) = Recorder.seen
    assert msg.total_len == len(frame) and msg.msg_len >= msg.total_len + 24
