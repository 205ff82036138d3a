"""OpenFlow 1.3 connections to the fake switch: translation at the connection's edge.

The fake switch keeps one form of every table entry, OpenFlow 1.5's, as
Open vSwitch turns every wire version into one internal form. A connection
that negotiated 1.3 translates what the app sends (flow-mods, group-mods,
packet-outs) into 1.5 before the switch applies it, and turns the switch's
port descriptions and statistics back into 1.3 bodies for the replies.

Only what the switch models is translated: the actions output, group,
set_queue and set_field, and the instructions apply-, write- and
clear-actions and goto-table. Anything else raises
:class:`~fabric.testing.tables.UnsupportedFeature`, exactly as on a 1.5
connection.
"""

from __future__ import annotations

from typing import Any, Iterable

from os_ken.ofproto import ofproto_v1_3, ofproto_v1_3_parser, ofproto_v1_5, ofproto_v1_5_parser

from fabric.testing.tables import FlowEntry, GroupEntry, UnsupportedFeature

OF13 = ofproto_v1_3.OFP_VERSION
OF15 = ofproto_v1_5.OFP_VERSION
# wire version -> (ofproto, parser): what a connection of that version hands the apps
VERSIONS: dict[int, tuple[Any, Any]] = {
    OF13: (ofproto_v1_3, ofproto_v1_3_parser),
    OF15: (ofproto_v1_5, ofproto_v1_5_parser),
}
_p13, _p15 = ofproto_v1_3_parser, ofproto_v1_5_parser


def translate_actions(parser: Any, actions: Iterable[Any] | None) -> list[Any]:
    """The modelled actions rebuilt with ``parser`` (either version's)."""
    out = []
    for action in actions or []:
        kind = type(action).__name__
        if kind == "OFPActionOutput":
            out.append(parser.OFPActionOutput(action.port, action.max_len))
        elif kind == "OFPActionGroup":
            out.append(parser.OFPActionGroup(action.group_id))
        elif kind == "OFPActionSetQueue":
            out.append(parser.OFPActionSetQueue(action.queue_id))
        elif kind == "OFPActionSetField":
            out.append(parser.OFPActionSetField(**{action.key: action.value}))
        else:
            raise UnsupportedFeature(f"action {kind}")
    return out


def translate_instructions(parser: Any, instructions: Iterable[Any] | None) -> list[Any]:
    """The modelled instructions rebuilt with ``parser`` (either version's)."""
    out = []
    for inst in instructions or []:
        kind = type(inst).__name__
        if kind == "OFPInstructionGotoTable":
            out.append(parser.OFPInstructionGotoTable(inst.table_id))
        elif kind == "OFPInstructionActions":
            out.append(parser.OFPInstructionActions(inst.type,
                                                    translate_actions(parser, inst.actions)))
        else:
            raise UnsupportedFeature(f"instruction {kind}")
    return out


def translate_match(parser: Any, match: Any) -> Any:
    """An ``OFPMatch`` rebuilt with ``parser``; masked fields stay masked."""
    return parser.OFPMatch(**dict(match.items())) if match is not None else parser.OFPMatch()


def upgrade(msg: Any) -> Any:
    """The 1.5 form of a 1.3 message the switch applies; other 1.3 messages unchanged.

    Requests that only carry ids (barrier, echo, statistics, features) are
    answered from their attributes and need no translation.
    """
    kind = type(msg).__name__
    if kind == "OFPFlowMod":
        new = _p15.OFPFlowMod(
            msg.datapath, cookie=msg.cookie, cookie_mask=msg.cookie_mask,
            table_id=msg.table_id, command=msg.command, idle_timeout=msg.idle_timeout,
            hard_timeout=msg.hard_timeout, priority=msg.priority, buffer_id=msg.buffer_id,
            out_port=msg.out_port, out_group=msg.out_group, flags=msg.flags,
            match=translate_match(_p15, msg.match),
            instructions=translate_instructions(_p15, msg.instructions))
    elif kind == "OFPGroupMod":
        new = _p15.OFPGroupMod(msg.datapath, command=msg.command, type_=msg.type,
                               group_id=msg.group_id,
                               buckets=[_bucket15(msg.type, i, b)
                                        for i, b in enumerate(msg.buckets or [])])
    elif kind == "OFPPacketOut":
        new = _p15.OFPPacketOut(msg.datapath, buffer_id=msg.buffer_id,
                                match=_p15.OFPMatch(in_port=msg.in_port),
                                actions=translate_actions(_p15, msg.actions), data=msg.data)
    else:
        return msg
    new.xid = msg.xid
    return new


def _bucket15(group_type: int, index: int, bucket: Any) -> Any:
    """A 1.3 bucket as a 1.5 one: weight (select groups only) and watches become properties."""
    props: list[Any] = []
    if group_type == ofproto_v1_3.OFPGT_SELECT:
        props.append(_p15.OFPGroupBucketPropWeight(weight=bucket.weight))
    if bucket.watch_port != ofproto_v1_3.OFPP_ANY:
        props.append(_p15.OFPGroupBucketPropWatch(type_=ofproto_v1_5.OFPGBPT_WATCH_PORT,
                                                  watch=bucket.watch_port))
    if bucket.watch_group != ofproto_v1_3.OFPG_ANY:
        props.append(_p15.OFPGroupBucketPropWatch(type_=ofproto_v1_5.OFPGBPT_WATCH_GROUP,
                                                  watch=bucket.watch_group))
    return _p15.OFPBucket(bucket_id=index, actions=translate_actions(_p15, bucket.actions),
                          properties=props)


def port_desc(desc: Any) -> Any:
    """A 1.5 ``OFPPort`` as 1.3's (the Ethernet property's speeds become fields)."""
    eth = next((p for p in desc.properties if hasattr(p, "curr_speed")), None)
    return _p13.OFPPort(port_no=desc.port_no, hw_addr=desc.hw_addr, name=desc.name,
                        config=desc.config, state=desc.state, curr=0, advertised=0,
                        supported=0, peer=0, curr_speed=eth.curr_speed if eth else 0,
                        max_speed=eth.max_speed if eth else 0)


def port_stats(stats: Any) -> Any:
    """A 1.5 ``OFPPortStats`` as 1.3's (no error breakdown is modelled: zeros)."""
    return _p13.OFPPortStats(
        port_no=stats.port_no, rx_packets=stats.rx_packets, tx_packets=stats.tx_packets,
        rx_bytes=stats.rx_bytes, tx_bytes=stats.tx_bytes, rx_dropped=stats.rx_dropped,
        tx_dropped=stats.tx_dropped, rx_errors=stats.rx_errors, tx_errors=stats.tx_errors,
        rx_frame_err=0, rx_over_err=0, rx_crc_err=0, collisions=0,
        duration_sec=stats.duration_sec, duration_nsec=stats.duration_nsec)


def flow_stats(flows: Iterable[FlowEntry]) -> list[Any]:
    """1.3 ``OFPFlowStats`` of flow entries (1.3 reports cookie and instructions too)."""
    return [_p13.OFPFlowStats(table_id=f.table_id, duration_sec=0, duration_nsec=0,
                              priority=f.priority, idle_timeout=0, hard_timeout=0, flags=0,
                              cookie=f.cookie, packet_count=f.packets, byte_count=f.bytes,
                              match=translate_match(_p13, f.ofp_match),
                              instructions=translate_instructions(_p13, f.instructions))
            for f in flows]


def group_stats(groups: Iterable[GroupEntry]) -> list[Any]:
    """1.3 ``OFPGroupStats`` of group entries, with each bucket's counters."""
    stats = []
    for group in groups:
        buckets = [_p13.OFPBucketCounter(b.packets, b.bytes) for b in group.buckets]
        stats.append(_p13.OFPGroupStats(
            length=ofproto_v1_3.OFP_GROUP_STATS_SIZE
            + len(buckets) * ofproto_v1_3.OFP_BUCKET_COUNTER_SIZE,
            group_id=group.group_id, ref_count=0,
            packet_count=sum(b.packets for b in group.buckets),
            byte_count=sum(b.bytes for b in group.buckets), duration_sec=0, duration_nsec=0,
            bucket_stats=buckets))
    return stats


def flow_removed(dp: Any, entry: FlowEntry, reason: int) -> Any:
    """The 1.3 ``OFPFlowRemoved`` of an entry that left the table for ``reason``."""
    return _p13.OFPFlowRemoved(dp, cookie=entry.cookie, priority=entry.priority, reason=reason,
                               table_id=entry.table_id, duration_sec=0, duration_nsec=0,
                               idle_timeout=entry.idle_timeout,
                               hard_timeout=entry.hard_timeout, packet_count=entry.packets,
                               byte_count=entry.bytes,
                               match=translate_match(_p13, entry.ofp_match))
