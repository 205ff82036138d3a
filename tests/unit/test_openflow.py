"""Intents to OpenFlow 1.5 messages, serialized and parsed without a switch."""

from __future__ import annotations

import struct

import pytest

pytest.importorskip("os_ken")

from os_ken.ofproto import ofproto_protocol, ofproto_v1_5  # noqa: E402
from os_ken.ofproto import ofproto_v1_5_parser as parser  # noqa: E402

import topologies  # noqa: E402
from controllers import openflow as of  # noqa: E402
from fabric.model.intents import (Bucket, Flow, Group, Output, SetQueue, SwitchIntent,  # noqa: E402
                                  ToController, ToGroup)
from fabric.routing.tables import ecmp_intents  # noqa: E402

ofp = ofproto_v1_5


@pytest.fixture
def dp():
    return ofproto_protocol.ProtocolDesc(ofp.OFP_VERSION)


def serialize(msg) -> bytes:
    msg.xid = 1
    msg.serialize()
    data = bytes(msg.buf)
    version, msg_type, length, _ = struct.unpack_from("!BBHI", data, 0)
    assert version == ofp.OFP_VERSION == 6
    assert msg_type == msg.msg_type
    assert length == len(data)
    return data


def parse_group_mod(dp, msg):
    """Parse a serialized OFPGroupMod back.

    os-ken 4.2.2's ``OFPBucket.parser`` reads a bucket's properties up to
    ``offset + len`` *after* advancing ``offset`` past the actions, so with
    several buckets it runs into the next bucket and ``OFPGroupMod.parser``
    raises ``ValueError``. Handing it one bucket at a time keeps the
    over-read inside that bucket; a single-bucket group goes through the
    stock ``OFPGroupMod.parser``.
    """
    data = serialize(msg)
    if len(msg.buckets) <= 1:
        return parser.OFPGroupMod.parser(dp, msg.version, msg.msg_type, msg.msg_len, msg.xid,
                                         data)
    command, type_, group_id, bucket_len, cmd_bucket = struct.unpack_from(
        ofp.OFP_GROUP_MOD_PACK_STR, data, ofp.OFP_HEADER_SIZE)
    parsed = parser.OFPGroupMod(dp, command=command, type_=type_, group_id=group_id,
                                command_bucket_id=cmd_bucket)
    offset, end = ofp.OFP_GROUP_MOD_SIZE, ofp.OFP_GROUP_MOD_SIZE + bucket_len
    parsed.buckets = []
    while offset < end:
        (length,) = struct.unpack_from("!H", data, offset)
        assert length > 0
        parsed.buckets.append(parser.OFPBucket.parser(data[offset:offset + length], 0))
        offset += length
    assert offset == end
    rest = data[end:]
    parsed.properties = []
    while rest:
        prop, rest = parser.OFPGroupProp.parse(rest)
        parsed.properties.append(prop)
    return parsed


def parse_flow_mod(dp, msg):
    data = serialize(msg)
    return parser.OFPFlowMod.parser(dp, msg.version, msg.msg_type, msg.msg_len, msg.xid, data)


# --- selection method property ---------------------------------------------------

def test_selection_method_words_dp_hash():
    words = of.selection_method_words("dp_hash")
    assert len(words) == 7
    assert words[0] == 0
    assert all(0 <= w < 2 ** 32 for w in words)
    raw = struct.pack("!7I", *words)
    assert raw[4:20].rstrip(b"\0") == b"dp_hash"
    assert raw[4:20] == b"dp_hash".ljust(16, b"\0")
    assert struct.unpack("!Q", raw[20:28]) == (of.DP_HASH_L4,) == (0,)


def test_selection_method_param_and_limits():
    words = of.selection_method_words("dp_hash", hash_basis=0x05060708)
    # Upper 32 bits: the L4 hash algorithm (0); lower 32 bits: the basis.
    assert words[-2:] == [of.DP_HASH_L4, 0x05060708]
    assert len(of.selection_method_words("x" * 15)) == 7  # 15 chars + NUL
    with pytest.raises(ValueError):
        of.selection_method_words("x" * 16)


# --- group mods ---------------------------------------------------------------------

def test_select_group_mod_bytes(dp):
    group = Group(7, "select", (Bucket(1), Bucket(2), Bucket(3), Bucket(4)))
    data = serialize(of.group_mod(dp, group))
    assert b"dp_hash" in data
    # OFPGPT_EXPERIMENTER (0xffff), length 40, NTR experimenter, exp_type 1
    header = struct.pack("!HHII", 0xFFFF, 40, 0x0000154D, 1)
    assert header in data
    prop = data[data.index(header):]
    assert len(prop) == 40  # the property is last and not truncated
    assert prop[12:16] == bytes(4)
    assert prop[16:32] == b"dp_hash".ljust(16, b"\0")
    assert prop[32:40] == bytes(8)
    assert of.NTR_VENDOR_ID == 0x154D and of.NTR_GROUP_PROP_SELECTION_METHOD == 1


def test_select_group_mod_round_trip(dp):
    group = Group(3, "select", (Bucket(1, weight=5), Bucket(2, weight=7), Bucket(4)))
    parsed = parse_group_mod(dp, of.group_mod(dp, group))
    assert parsed.command == ofp.OFPGC_ADD
    assert parsed.type == ofp.OFPGT_SELECT
    assert parsed.group_id == 3
    assert len(parsed.buckets) == 3
    weights, ports = [], []
    for bucket in parsed.buckets:
        (weight,) = [p for p in bucket.properties
                     if isinstance(p, parser.OFPGroupBucketPropWeight)]
        weights.append(weight.weight)
        (action,) = bucket.actions
        assert isinstance(action, parser.OFPActionOutput)
        ports.append(action.port)
    assert weights == [5, 7, 1]
    assert ports == [1, 2, 4]
    assert [b.bucket_id for b in parsed.buckets] == [0, 1, 2]
    (prop,) = parsed.properties
    assert isinstance(prop, parser.OFPGroupPropExperimenter)
    assert prop.experimenter == 0x154D and prop.exp_type == 1
    assert list(prop.data) == of.selection_method_words("dp_hash", group.hash_basis)


def test_single_bucket_select_group_parses_with_stock_parser(dp):
    group = Group(1, "select", (Bucket(9, weight=3),))
    parsed = parse_group_mod(dp, of.group_mod(dp, group))
    assert isinstance(parsed, parser.OFPGroupMod)
    assert len(parsed.buckets) == 1
    assert parsed.buckets[0].properties[0].weight == 3
    assert parsed.properties[0].experimenter == 0x154D


def test_fast_failover_group(dp):
    group = Group(2, "ff", (Bucket(1, watch_port=1), Bucket(2, watch_port=2)))
    parsed = parse_group_mod(dp, of.group_mod(dp, group))
    assert parsed.type == ofp.OFPGT_FF
    assert parsed.properties == []  # no selection method on a failover group
    for bucket, port in zip(parsed.buckets, (1, 2)):
        assert not any(isinstance(p, parser.OFPGroupBucketPropWeight) for p in bucket.properties)
        (watch,) = [p for p in bucket.properties if isinstance(p, parser.OFPGroupBucketPropWatch)]
        assert watch.type == ofp.OFPGBPT_WATCH_PORT and watch.watch == port


def test_modify_and_delete_group(dp):
    group = Group(4, "select", (Bucket(1), Bucket(2)))
    assert parse_group_mod(dp, of.group_mod(dp, group, "modify")).command == ofp.OFPGC_MODIFY
    delete = of.group_mod(dp, group, "delete")
    assert delete.command == ofp.OFPGC_DELETE and delete.group_id == 4
    serialize(delete)


# --- flow mods ------------------------------------------------------------------------

def test_drop_flow_has_no_instructions(dp):
    msg = of.flow_mod(dp, Flow.make(1000, eth_type=0x86DD))
    assert msg.instructions == []
    parsed = parse_flow_mod(dp, msg)
    assert parsed.instructions == []
    assert parsed.priority == 1000 and parsed.command == ofp.OFPFC_ADD
    assert parsed.match["eth_type"] == 0x86DD


def test_table_miss_matches_everything(dp):
    parsed = parse_flow_mod(dp, of.flow_mod(dp, Flow.make(0)))
    assert parsed.priority == 0
    assert dict(parsed.match.items()) == {}
    assert parsed.instructions == []


def test_route_flow_round_trip(dp):
    flow = Flow.make(100, (ToGroup(3),), eth_type=0x0800, ipv4_dst="10.1.0.5")
    parsed = parse_flow_mod(dp, of.flow_mod(dp, flow))
    assert parsed.match["eth_type"] == 0x0800
    assert parsed.match["ipv4_dst"] == "10.1.0.5"
    (inst,) = parsed.instructions
    assert inst.type == ofp.OFPIT_APPLY_ACTIONS
    (action,) = inst.actions
    assert isinstance(action, parser.OFPActionGroup) and action.group_id == 3


def test_actions_translate(dp):
    acts = of.actions_for(parser, ofp, (Output(5), ToController(), SetQueue(2), ToGroup(9)))
    assert isinstance(acts[0], parser.OFPActionOutput) and acts[0].port == 5
    assert acts[1].port == ofp.OFPP_CONTROLLER and acts[1].max_len == ofp.OFPCML_NO_BUFFER
    assert isinstance(acts[2], parser.OFPActionSetQueue) and acts[2].queue_id == 2
    assert isinstance(acts[3], parser.OFPActionGroup) and acts[3].group_id == 9
    with pytest.raises(TypeError):
        of.actions_for(parser, ofp, ("bogus",))


def test_strict_delete_flow(dp):
    msg = of.flow_mod(dp, Flow.make(100, (Output(1),), eth_type=0x0800, ipv4_dst="10.0.0.1"),
                      "delete")
    assert msg.command == ofp.OFPFC_DELETE_STRICT
    parsed = parse_flow_mod(dp, msg)
    assert parsed.priority == 100 and parsed.match["ipv4_dst"] == "10.0.0.1"


# --- full state ------------------------------------------------------------------------

def test_full_state_messages_order(dp):
    graph = topologies.build("rail-clos")
    intent = ecmp_intents(graph)["r0l0"]
    assert intent.groups, "a rail-clos leaf should have a select group"
    msgs = of.full_state_messages(dp, intent)
    assert len(msgs) == 2 + len(intent.groups) + len(intent.flows)
    first, second = msgs[0], msgs[1]
    assert isinstance(first, parser.OFPFlowMod)
    assert first.command == ofp.OFPFC_DELETE and first.table_id == ofp.OFPTT_ALL
    assert first.out_port == ofp.OFPP_ANY and first.out_group == ofp.OFPG_ANY
    assert isinstance(second, parser.OFPGroupMod)
    assert second.command == ofp.OFPGC_DELETE and second.group_id == ofp.OFPG_ALL
    kinds = ["group" if isinstance(m, parser.OFPGroupMod) else "flow" for m in msgs[2:]]
    assert kinds == ["group"] * len(intent.groups) + ["flow"] * len(intent.flows)
    assert all(m.command == ofp.OFPGC_ADD for m in msgs[2:2 + len(intent.groups)])
    assert [m.group_id for m in msgs[2:2 + len(intent.groups)]] == [
        g.group_id for g in intent.groups]
    for msg in msgs:
        serialize(msg)


def test_full_state_messages_empty_intent(dp):
    msgs = of.full_state_messages(dp, SwitchIntent("x", 1, (), ()))
    assert len(msgs) == 2
    for msg in msgs:
        serialize(msg)
