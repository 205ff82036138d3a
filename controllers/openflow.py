"""Translate :mod:`fabric.model.intents` into OpenFlow 1.5 messages (os-ken).

Select groups carry Open vSwitch's ``selection_method=dp_hash`` group
property (an NTR experimenter property), which hashes the full 5-tuple,
UDP ports included, in the datapath. Without it OVS's default select hash
ignores UDP ports. OpenFlow 1.3 group-mods would erase the property, so
every group message goes out over OpenFlow 1.5.
"""

from __future__ import annotations

import struct
from typing import Any

from fabric.model.intents import Flow, Group, Output, SetQueue, SwitchIntent, ToController, ToGroup

NTR_VENDOR_ID = 0x0000154D  # Nicira/NTR experimenter id used by OVS
NTR_GROUP_PROP_SELECTION_METHOD = 1
DP_HASH_L4 = 0  # hash algorithm in the parameter's upper 32 bits: 5-tuple L4


def selection_method_words(method: str, hash_basis: int = 0) -> list[int]:
    """Return the experimenter payload as 32-bit words.

    Layout: 4 pad bytes, the method name NUL-padded to 16 bytes, a 64-bit
    parameter: the hash algorithm (upper 32 bits, L4) and the hash basis
    (lower 32 bits).
    """
    name = method.encode()
    if len(name) > 15:
        raise ValueError(f"selection method name too long: {method!r}")
    param = (DP_HASH_L4 << 32) | (hash_basis & 0xFFFFFFFF)
    payload = bytes(4) + name.ljust(16, b"\0") + struct.pack("!Q", param)
    return list(struct.unpack(f"!{len(payload) // 4}I", payload))


def actions_for(parser: Any, ofp: Any, actions: tuple) -> list[Any]:
    """Translate intent actions to os-ken action objects."""
    out = []
    for action in actions:
        if isinstance(action, Output):
            out.append(parser.OFPActionOutput(action.port))
        elif isinstance(action, ToGroup):
            out.append(parser.OFPActionGroup(action.group_id))
        elif isinstance(action, ToController):
            out.append(parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER))
        elif isinstance(action, SetQueue):
            out.append(parser.OFPActionSetQueue(action.queue_id))
        else:
            raise TypeError(f"unknown action {action!r}")
    return out


def flow_mod(datapath: Any, flow: Flow, command: str = "add") -> Any:
    """Build an OFPFlowMod that adds (or strictly deletes) ``flow``."""
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    match = parser.OFPMatch(**dict(flow.match))
    if command == "delete":
        return parser.OFPFlowMod(datapath, table_id=flow.table_id, command=ofp.OFPFC_DELETE_STRICT,
                                 priority=flow.priority, match=match,
                                 out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY)
    acts = actions_for(parser, ofp, flow.actions)
    inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, acts)] if acts else []
    if flow.goto_table is not None:
        inst.append(parser.OFPInstructionGotoTable(flow.goto_table))
    return parser.OFPFlowMod(datapath, table_id=flow.table_id, command=ofp.OFPFC_ADD,
                             priority=flow.priority, match=match, instructions=inst)


def group_mod(datapath: Any, group: Group, command: str = "add") -> Any:
    """Build an OFPGroupMod for ``group`` (``add``, ``modify`` or ``delete``)."""
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    commands = {"add": ofp.OFPGC_ADD, "modify": ofp.OFPGC_MODIFY, "delete": ofp.OFPGC_DELETE}
    if command == "delete":
        return parser.OFPGroupMod(datapath, command=ofp.OFPGC_DELETE, group_id=group.group_id)
    kinds = {"select": ofp.OFPGT_SELECT, "ff": ofp.OFPGT_FF, "all": ofp.OFPGT_ALL}
    buckets = []
    for index, bucket in enumerate(group.buckets):
        props = []
        if group.kind == "select":
            props.append(parser.OFPGroupBucketPropWeight(type_=ofp.OFPGBPT_WEIGHT,
                                                         weight=bucket.weight))
        if bucket.watch_port is not None:
            props.append(parser.OFPGroupBucketPropWatch(type_=ofp.OFPGBPT_WATCH_PORT,
                                                        watch=bucket.watch_port))
        buckets.append(parser.OFPBucket(bucket_id=index,
                                        actions=[parser.OFPActionOutput(bucket.port)],
                                        properties=props))
    props = []
    if group.kind == "select" and group.selection:
        props.append(parser.OFPGroupPropExperimenter(
            type_=ofp.OFPGPT_EXPERIMENTER, experimenter=NTR_VENDOR_ID,
            exp_type=NTR_GROUP_PROP_SELECTION_METHOD,
            data=selection_method_words(group.selection, group.hash_basis)))
    return parser.OFPGroupMod(datapath, command=commands[command], type_=kinds[group.kind],
                              group_id=group.group_id, buckets=buckets, properties=props)


def full_state_messages(datapath: Any, intent: SwitchIntent) -> list[Any]:
    """Messages that replace whatever the switch holds with ``intent``.

    Flows are cleared before groups (a flow may point at a group); groups
    are added before the flows that use them.
    """
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    msgs = [
        parser.OFPFlowMod(datapath, table_id=ofp.OFPTT_ALL, command=ofp.OFPFC_DELETE,
                          out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY),
        parser.OFPGroupMod(datapath, command=ofp.OFPGC_DELETE, group_id=ofp.OFPG_ALL),
    ]
    msgs += [group_mod(datapath, g) for g in intent.groups]
    msgs += [flow_mod(datapath, f) for f in intent.flows]
    return msgs


def diff_messages(datapath: Any, old: SwitchIntent, new: SwitchIntent) -> list[Any]:
    """Messages that turn a switch holding ``old`` into one holding ``new``.

    Order keeps every packet routable: new and changed groups first, then
    flows, then removals of flows and finally of the groups they used.
    """
    old_groups = {g.group_id: g for g in old.groups}
    new_groups = {g.group_id: g for g in new.groups}
    old_flows = {f.key: f for f in old.flows}
    new_flows = {f.key: f for f in new.flows}
    msgs = []
    for gid, group in new_groups.items():
        if gid not in old_groups:
            msgs.append(group_mod(datapath, group, "add"))
        elif old_groups[gid] != group:
            msgs.append(group_mod(datapath, group, "modify"))
    msgs += [flow_mod(datapath, f) for k, f in new_flows.items() if old_flows.get(k) != f]
    msgs += [flow_mod(datapath, f, "delete") for k, f in old_flows.items() if k not in new_flows]
    msgs += [group_mod(datapath, g, "delete") for gid, g in old_groups.items()
             if gid not in new_groups]
    return msgs
