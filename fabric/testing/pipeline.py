"""The packet pipeline of the fake switch: tables, action lists, groups.

:class:`Pipeline` is mixed into :class:`~fabric.testing.fakeswitch.FakeSwitch`
and reads its ``flows`` (through ``table()``), ``groups``, ``ports`` and
``live``. A packet runs from table 0 through goto-table instructions;
apply-actions act at once, write-actions accumulate in the action set,
which runs at the end (set_field, set_queue, then group or else output).
Each group bucket works on its own copy of the packet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from os_ken.ofproto import ofproto_v1_5 as ofp
from os_ken.ofproto import ofproto_v1_5_parser as parser

from fabric.routing import hashing
from fabric.testing.tables import (BucketEntry, FlowEntry, GroupEntry, UnsupportedFeature,
                                   norm_value, packet_matches)
from fabric.testing.validation import validate_actions

MAX_GROUP_DEPTH = 8


@dataclass
class Emit:
    """One copy of a packet leaving a switch."""

    port: int
    queue: int | None
    fields: dict[str, int]


@dataclass
class ToController:
    """One packet-in the pipeline produced."""

    table_id: int
    cookie: int
    reason: int


@dataclass
class PipelineResult:
    """What one switch did with one packet."""

    emits: list[Emit] = field(default_factory=list)
    controller: list[ToController] = field(default_factory=list)
    drops: list[str] = field(default_factory=list)


@dataclass
class _State:
    fields: dict[str, int]
    in_port: int
    queue: int | None = None
    table_id: int = 0
    cookie: int = 0
    nbytes: int | None = None  # frame length to count (None: do not count)


class Pipeline:
    """Packet processing for a switch that has ``table()``, ``groups``, ``ports``, ``live``."""

    groups: dict[int, GroupEntry]
    ports: dict[int, str]
    live: dict[int, bool]
    now: float

    def table(self, table_id: int) -> list[FlowEntry]:
        """Entries of one table, highest priority first (provided by the switch)."""
        raise NotImplementedError

    def bucket_live(self, bucket: BucketEntry, depth: int = 0) -> bool:
        """A bucket is live when its watched port is up and its watched group is live."""
        if bucket.watch_port is not None and not self.live.get(bucket.watch_port, False):
            return False
        if bucket.watch_group is not None:
            group = self.groups.get(bucket.watch_group)
            if group is None or depth > MAX_GROUP_DEPTH:
                return False
            return any(self.bucket_live(b, depth + 1) for b in group.buckets)
        return True

    def choose_bucket(self, group: GroupEntry, fields: dict[str, int]) -> BucketEntry | None:
        """The bucket a select group gives these packet fields, or None (no live bucket)."""
        weights = [b.weight if self.bucket_live(b) else 0 for b in group.buckets]
        h = hashing.select_hash(fields, group.basis, full_l4=group.method is not None)
        index = hashing.pick_weighted(h, weights)
        return None if index is None else group.buckets[index]

    def process(self, fields: dict[str, int], in_port: int,
                nbytes: int | None = None) -> PipelineResult:
        """Run a packet arriving on ``in_port`` through the tables from table 0.

        ``nbytes`` (the frame length) updates the matched flows' counters;
        None leaves them alone.
        """
        result = PipelineResult()
        state = _State(dict(fields, in_port=in_port), in_port, nbytes=nbytes)
        self._pipeline(state, result, nbytes, 0)
        return result

    def execute(self, actions: list[Any], fields: dict[str, int], in_port: int) -> PipelineResult:
        """Apply a packet-out's ``actions`` (``OFPP_TABLE`` runs the pipeline)."""
        validate_actions(actions, None, self.groups, packet_out=True)
        result = PipelineResult()
        state = _State(dict(fields, in_port=in_port), in_port)
        self._run_actions(actions, state, result, 0, packet_out=True)
        return result

    def _pipeline(self, state: _State, result: PipelineResult, nbytes: int | None,
                  table_id: int) -> None:
        action_set: dict[type, Any] = {}
        next_table: int | None = table_id
        while next_table is not None:
            entry = next((f for f in self.table(next_table)
                          if packet_matches(f.match, state.fields)), None)
            if entry is None:
                result.drops.append(f"table {next_table} miss")
                return
            if nbytes is not None:
                entry.packets += 1
                entry.bytes += nbytes
                entry.used_at = self.now  # a counted packet keeps the entry alive
            state.table_id, state.cookie = entry.table_id, entry.cookie
            next_table = None
            for inst in entry.instructions:
                if isinstance(inst, parser.OFPInstructionGotoTable):
                    next_table = inst.table_id
                elif inst.type == ofp.OFPIT_APPLY_ACTIONS:
                    self._run_actions(inst.actions, state, result, 0)
                elif inst.type == ofp.OFPIT_CLEAR_ACTIONS:
                    action_set.clear()
                elif inst.type == ofp.OFPIT_WRITE_ACTIONS:
                    for action in inst.actions:
                        action_set[type(action)] = action
        # The action set runs in the spec's order; a group action wins over output.
        ordered = [action_set[t] for t in (parser.OFPActionSetField, parser.OFPActionSetQueue)
                   if t in action_set]
        if parser.OFPActionGroup in action_set:
            ordered.append(action_set[parser.OFPActionGroup])
        elif parser.OFPActionOutput in action_set:
            ordered.append(action_set[parser.OFPActionOutput])
        self._run_actions(ordered, state, result, 0)
        if not result.emits and not result.controller and not result.drops:
            assert entry is not None  # the loop ran at least once and returns on a miss
            result.drops.append(f"no output (table {state.table_id}, "
                                f"priority {entry.priority})")

    def _run_actions(self, actions: list[Any], state: _State, result: PipelineResult,
                     depth: int, packet_out: bool = False) -> None:
        for action in actions:
            if isinstance(action, parser.OFPActionOutput):
                self._output(action.port, state, result, packet_out)
            elif isinstance(action, parser.OFPActionGroup):
                self._group(action.group_id, state, result, depth)
            elif isinstance(action, parser.OFPActionSetQueue):
                state.queue = action.queue_id
            elif isinstance(action, parser.OFPActionSetField):
                state.fields[action.key] = norm_value(action.key, action.value)
            else:
                raise UnsupportedFeature(f"action {type(action).__name__}")

    def _output(self, port: int, state: _State, result: PipelineResult, packet_out: bool) -> None:
        if port == ofp.OFPP_CONTROLLER:
            reason = ofp.OFPR_PACKET_OUT if packet_out else ofp.OFPR_APPLY_ACTION
            result.controller.append(ToController(state.table_id, state.cookie, reason))
        elif port == ofp.OFPP_TABLE and packet_out:
            self._pipeline(_State(dict(state.fields), state.in_port, state.queue), result, None,
                           0)
        elif port in (ofp.OFPP_ALL, ofp.OFPP_FLOOD):
            for other in sorted(self.ports):
                if other != state.in_port and self.live[other]:
                    result.emits.append(Emit(other, state.queue, dict(state.fields)))
        else:
            if port == ofp.OFPP_IN_PORT:
                port = state.in_port
            elif port == state.in_port:
                result.drops.append(f"output to input port {port} skipped")
                return
            if port not in self.ports:
                result.drops.append(f"output to unknown port {port}")
            elif not self.live[port]:
                result.drops.append(f"output port {port} is down")
            else:
                result.emits.append(Emit(port, state.queue, dict(state.fields)))

    def _group(self, group_id: int, state: _State, result: PipelineResult, depth: int) -> None:
        group = self.groups.get(group_id)
        if group is None or depth >= MAX_GROUP_DEPTH:
            result.drops.append(f"group {group_id} missing or chained too deep")
            return
        if group.type == ofp.OFPGT_ALL:
            chosen = group.buckets
        elif group.type == ofp.OFPGT_SELECT:
            chosen = [b for b in [self.choose_bucket(group, state.fields)] if b is not None]
        elif group.type == ofp.OFPGT_FF:
            chosen = [b for b in group.buckets if self.bucket_live(b)][:1]
        else:
            chosen = group.buckets[:1]
        if not chosen:
            result.drops.append(f"group {group_id} has no live bucket")
        for bucket in chosen:  # every bucket works on its own copy of the packet
            if state.nbytes is not None:
                bucket.packets += 1
                bucket.bytes += state.nbytes
            copy = _State(dict(state.fields), state.in_port, state.queue, state.table_id,
                          state.cookie, state.nbytes)
            self._run_actions(bucket.actions, copy, result, depth + 1)
