"""One fake OpenFlow 1.5 switch: flow and group tables, ports, the pipeline.

OpenFlow 1.3 connections reach it through :mod:`fabric.testing.of13`.

The subset Open vSwitch implements and fabric's controllers use: any number
of tables (table 0 first), flow-mod add/modify/delete (strict and not,
``out_port``/``out_group``/cookie filters), instructions apply-actions,
write-actions, clear-actions and goto-table, actions output (ports,
``IN_PORT``, ``ALL``, ``FLOOD``, ``CONTROLLER``, ``TABLE`` in packet-outs),
group, set_queue and set_field; group-mod add/modify/delete (``OFPG_ALL``),
group types all, select (weights, watch ports, the hash of
:mod:`fabric.routing.hashing`), indirect and fast-failover. Anything else is
refused with :class:`~fabric.testing.tables.UnsupportedFeature` rather than
silently ignored.

Behaviour taken from Open vSwitch: a table miss drops; output to the input
port is skipped; output to a dead port is lost; deleting a group deletes the
flows that use it; ``out_port=0`` (os-ken's default) in a delete filters for
port 0 and so deletes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from os_ken.ofproto import ofproto_v1_5 as ofp
from os_ken.ofproto import ofproto_v1_5_parser as parser

from fabric.routing import hashing
from fabric.testing.pipeline import Emit, Pipeline, PipelineResult, ToController
from fabric.testing.tables import (BucketEntry, FlowEntry, GroupEntry, OpenFlowError,
                                   UnsupportedFeature, covers, norm_match)
from fabric.testing.validation import validate_actions, validate_instructions


@dataclass
class PortCounters:
    """The counters a port-stats reply reports."""

    rx_packets: int = 0
    tx_packets: int = 0
    rx_bytes: int = 0
    tx_bytes: int = 0
    rx_dropped: int = 0
    tx_dropped: int = 0
    rx_errors: int = 0
    tx_errors: int = 0


class FakeSwitch(Pipeline):
    """Tables, groups, ports and counters of one switch.

    Parameters
    ----------
    name : str
        Switch name in the fabric graph.
    dpid : int
        Datapath id.
    ports : dict
        ``{port number: neighbour node}``.
    speeds_kbps : dict, optional
        ``{port: speed}`` reported in port descriptions.
    """

    def __init__(self, name: str, dpid: int, ports: dict[int, str],
                 speeds_kbps: dict[int, int] | None = None):
        self.name, self.dpid = name, dpid
        self.ports = dict(ports)
        self.speeds_kbps = dict(speeds_kbps or {})
        self.live = {port: True for port in self.ports}
        self.counters = {port: PortCounters() for port in self.ports}
        self.flows: list[FlowEntry] = []
        self.groups: dict[int, GroupEntry] = {}
        self._index: dict[int, list[FlowEntry]] | None = None  # rebuilt after changes
        self.now = 0.0  # the harness clock: flow timeouts count in it
        # entries removed since the harness last looked, with the OFPRR_* reason
        self.removed: list[tuple[FlowEntry, int]] = []

    # -- tables --------------------------------------------------------------------

    def clear(self) -> None:
        """Forget every flow and group (an Open vSwitch restart)."""
        self.flows.clear()
        self.groups.clear()
        self.removed.clear()
        self._index = None

    def table(self, table_id: int) -> list[FlowEntry]:
        """Entries of one table, highest priority first (then in order of addition)."""
        if self._index is None:
            tables: dict[int, list[FlowEntry]] = {}
            for entry in self.flows:
                tables.setdefault(entry.table_id, []).append(entry)
            for entries in tables.values():
                entries.sort(key=lambda f: -f.priority)
            self._index = tables
        return self._index.get(table_id, [])

    def dump_flows(self) -> list[str]:
        """Every flow as text, sorted (compare two dumps to compare states)."""
        return sorted(str(f) for f in self.flows)

    def dump_groups(self) -> list[str]:
        """Every group as text, sorted by id."""
        return [str(self.groups[g]) for g in sorted(self.groups)]

    def flow_mod(self, msg: Any) -> None:
        """Apply an ``OFPFlowMod``; raise :class:`OpenFlowError` as OVS would refuse it."""
        self._index = None
        cmd = msg.command
        if cmd in (ofp.OFPFC_DELETE, ofp.OFPFC_DELETE_STRICT):
            doomed = self._selected(msg, strict=cmd == ofp.OFPFC_DELETE_STRICT)
            self._remove(doomed, ofp.OFPRR_DELETE)
            return
        if cmd not in (ofp.OFPFC_ADD, ofp.OFPFC_MODIFY, ofp.OFPFC_MODIFY_STRICT):
            raise OpenFlowError(ofp.OFPET_FLOW_MOD_FAILED, ofp.OFPFMFC_BAD_COMMAND,
                                f"flow-mod command {cmd}")
        if not 0 <= msg.table_id <= ofp.OFPTT_MAX:
            raise OpenFlowError(ofp.OFPET_FLOW_MOD_FAILED, ofp.OFPFMFC_BAD_TABLE_ID,
                                f"table {msg.table_id}")
        match = norm_match(msg.match)
        validate_instructions(msg.table_id, match, msg.instructions, self.groups)
        if cmd == ofp.OFPFC_ADD:
            self.flows = [f for f in self.flows
                          if (f.table_id, f.priority, f.match) != (msg.table_id, msg.priority,
                                                                   match)]
            self.flows.append(FlowEntry(msg.table_id, msg.priority, match,
                                        list(msg.instructions), msg.cookie, msg.match,
                                        idle_timeout=msg.idle_timeout,
                                        hard_timeout=msg.hard_timeout, flags=msg.flags,
                                        added_at=self.now, used_at=self.now))
            return
        for entry in self._selected(msg, strict=cmd == ofp.OFPFC_MODIFY_STRICT, filters=False):
            entry.instructions = list(msg.instructions)

    def _remove(self, doomed: list[FlowEntry], reason: int) -> None:
        if doomed:
            self._index = None
            self.flows = [f for f in self.flows if not any(f is d for d in doomed)]
            self.removed += [(f, reason) for f in doomed]

    def expire(self, now: float) -> None:
        """Move the clock to ``now`` and remove the entries whose timeout has passed."""
        self.now = now
        for reason in (ofp.OFPRR_HARD_TIMEOUT, ofp.OFPRR_IDLE_TIMEOUT):
            self._remove([f for f in self.flows if f.expired(now) == reason], reason)

    def _selected(self, msg: Any, strict: bool, filters: bool = True) -> list[FlowEntry]:
        match = norm_match(msg.match)
        chosen = []
        for entry in self.flows:
            if msg.table_id != ofp.OFPTT_ALL and entry.table_id != msg.table_id:
                continue
            if strict and (entry.priority != msg.priority or entry.match != match):
                continue
            if not strict and not covers(match, entry.match):
                continue
            if msg.cookie_mask and (entry.cookie ^ msg.cookie) & msg.cookie_mask:
                continue
            if filters and msg.out_port != ofp.OFPP_ANY and not entry.outputs_to(msg.out_port):
                continue
            if filters and msg.out_group != ofp.OFPG_ANY and not entry.uses_group(msg.out_group):
                continue
            chosen.append(entry)
        return chosen

    # -- groups --------------------------------------------------------------------

    def group_mod(self, msg: Any) -> None:
        """Apply an ``OFPGroupMod``; raise :class:`OpenFlowError` as OVS would refuse it."""
        self._index = None
        gid = msg.group_id
        if msg.command == ofp.OFPGC_DELETE:
            doomed = set(self.groups) if gid == ofp.OFPG_ALL else {gid} & set(self.groups)
            for group_id in doomed:
                del self.groups[group_id]
                self._remove([f for f in self.flows if f.uses_group(group_id)],
                             ofp.OFPRR_GROUP_DELETE)
            return
        if msg.command not in (ofp.OFPGC_ADD, ofp.OFPGC_MODIFY):
            raise UnsupportedFeature(f"group-mod command {msg.command}")
        if gid > ofp.OFPG_MAX:
            raise OpenFlowError(ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_INVALID_GROUP,
                                f"group id {gid:#x}")
        if msg.command == ofp.OFPGC_ADD and gid in self.groups:
            raise OpenFlowError(ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_GROUP_EXISTS,
                                f"group {gid} exists")
        if msg.command == ofp.OFPGC_MODIFY and gid not in self.groups:
            raise OpenFlowError(ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_UNKNOWN_GROUP,
                                f"group {gid} does not exist")
        self.groups[gid] = self._group_entry(msg)

    def _group_entry(self, msg: Any) -> GroupEntry:
        if msg.type not in (ofp.OFPGT_ALL, ofp.OFPGT_SELECT, ofp.OFPGT_INDIRECT, ofp.OFPGT_FF):
            raise OpenFlowError(ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_BAD_TYPE,
                                f"group type {msg.type}")
        if msg.type == ofp.OFPGT_INDIRECT and len(msg.buckets) != 1:
            raise OpenFlowError(ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_BAD_BUCKET,
                                "an indirect group has exactly one bucket")
        method, basis = hashing.selection_method(msg.properties)
        entry = GroupEntry(msg.group_id, msg.type, method=method, basis=basis)
        for index, bucket in enumerate(msg.buckets):
            validate_actions(list(bucket.actions), None, self.groups)
            for action in bucket.actions:
                if isinstance(action, parser.OFPActionGroup) and action.group_id == msg.group_id:
                    raise OpenFlowError(ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_LOOP,
                                        f"group {msg.group_id} chains to itself")
            b = BucketEntry(getattr(bucket, "bucket_id", index), list(bucket.actions))
            for prop in bucket.properties:
                if isinstance(prop, parser.OFPGroupBucketPropWeight):
                    if msg.type != ofp.OFPGT_SELECT:
                        raise OpenFlowError(ofp.OFPET_GROUP_MOD_FAILED,
                                            ofp.OFPGMFC_WEIGHT_UNSUPPORTED,
                                            "weights are for select groups")
                    b.weight = prop.weight
                elif isinstance(prop, parser.OFPGroupBucketPropWatch):
                    if prop.type == ofp.OFPGBPT_WATCH_PORT:
                        b.watch_port = None if prop.watch == ofp.OFPP_ANY else prop.watch
                    else:
                        b.watch_group = None if prop.watch == ofp.OFPG_ANY else prop.watch
            entry.buckets.append(b)
        return entry

    # -- ports ---------------------------------------------------------------------

    def set_live(self, port: int, up: bool) -> bool:
        """Set a port's liveness; return True when it changed."""
        if port not in self.live:
            raise KeyError(f"{self.name} has no port {port}")
        changed = self.live[port] != up
        self.live[port] = up
        return changed

    def port_desc(self, port: int) -> Any:
        """The ``OFPPort`` description of ``port`` (``OFPP_LOCAL`` included)."""
        local = port == ofp.OFPP_LOCAL
        up = local or self.live[port]
        speed = self.speeds_kbps.get(port, 0)
        mac = f"0e:{(self.dpid >> 16) & 0xFF:02x}:{(self.dpid >> 8) & 0xFF:02x}:" \
              f"{self.dpid & 0xFF:02x}:{(port >> 8) & 0xFF:02x}:{port & 0xFF:02x}"
        return parser.OFPPort(
            port_no=port, length=ofp.OFP_PORT_SIZE, hw_addr=mac,
            name=self.name if local else f"{self.name}-eth{port}", config=0,
            state=ofp.OFPPS_LIVE if up else ofp.OFPPS_LINK_DOWN,
            properties=[parser.OFPPortDescPropEthernet(
                type_=ofp.OFPPDPT_ETHERNET, curr=0, advertised=0, supported=0, peer=0,
                curr_speed=speed, max_speed=speed)])

    def port_descs(self, port_no: int = ofp.OFPP_ANY) -> list[Any]:
        """Descriptions of every port (and ``LOCAL``), or of one."""
        ports = sorted(self.ports) + [ofp.OFPP_LOCAL]
        return [self.port_desc(p) for p in ports if port_no in (ofp.OFPP_ANY, p)]

    def port_stats(self, port_no: int = ofp.OFPP_ANY) -> list[Any]:
        """``OFPPortStats`` entries from the counters."""
        stats = []
        for port in sorted(self.ports):
            if port_no not in (ofp.OFPP_ANY, port):
                continue
            c = self.counters[port]
            stats.append(parser.OFPPortStats(
                length=ofp.OFP_PORT_STATS_SIZE, port_no=port, duration_sec=0, duration_nsec=0,
                rx_packets=c.rx_packets, tx_packets=c.tx_packets, rx_bytes=c.rx_bytes,
                tx_bytes=c.tx_bytes, rx_dropped=c.rx_dropped, tx_dropped=c.tx_dropped,
                rx_errors=c.rx_errors, tx_errors=c.tx_errors, properties=[]))
        return stats


    def flows_in(self, table_id: int = ofp.OFPTT_ALL) -> list[FlowEntry]:
        """The flow entries of one table (``OFPTT_ALL``: every table), in order of addition."""
        return [f for f in self.flows if table_id in (ofp.OFPTT_ALL, f.table_id)]

    def groups_in(self, group_id: int = ofp.OFPG_ALL) -> list[GroupEntry]:
        """One group (``OFPG_ALL``: every group, by id)."""
        return [g for gid, g in sorted(self.groups.items()) if group_id in (ofp.OFPG_ALL, gid)]

    def flow_stats(self, table_id: int = ofp.OFPTT_ALL) -> list[Any]:
        """``OFPFlowStats`` entries (OpenFlow 1.5: match and counters, no instructions)."""
        return [parser.OFPFlowStats(table_id=f.table_id, reason=0, priority=f.priority,
                                    match=f.ofp_match or parser.OFPMatch(),
                                    stats=parser.OFPStats(duration=(0, 0), packet_count=f.packets,
                                                          byte_count=f.bytes))
                for f in self.flows_in(table_id)]

    def group_stats(self, group_id: int = ofp.OFPG_ALL) -> list[Any]:
        """``OFPGroupStats`` entries, with each bucket's counters."""
        stats = []
        for group in self.groups_in(group_id):
            gid = group.group_id
            buckets = [parser.OFPBucketCounter(b.packets, b.bytes) for b in group.buckets]
            stats.append(parser.OFPGroupStats(
                length=ofp.OFP_GROUP_STATS_SIZE + len(buckets) * ofp.OFP_BUCKET_COUNTER_SIZE,
                group_id=gid, ref_count=0, packet_count=sum(b.packets for b in group.buckets),
                byte_count=sum(b.bytes for b in group.buckets), duration_sec=0,
                duration_nsec=0, bucket_stats=buckets))
        return stats


__all__ = ["Emit", "FakeSwitch", "PipelineResult", "PortCounters", "ToController"]
