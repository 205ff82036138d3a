"""Whether the fake switch accepts a flow-mod's instructions and actions.

The checks Open vSwitch makes before it installs a flow (or a group bucket,
or runs a packet-out): match prerequisites, one instruction of each type,
goto-table forward only, the actions fabric's controllers use, output ports
and groups that exist, set_field consistent with the match. A refusal is an
:class:`~fabric.testing.tables.OpenFlowError` (what OVS answers) or an
:class:`~fabric.testing.tables.UnsupportedFeature` (what the fake does not model).
"""

from __future__ import annotations

from typing import Any, Mapping

from os_ken.ofproto import ofproto_v1_5 as ofp
from os_ken.ofproto import ofproto_v1_5_parser as parser

from fabric.testing.tables import (OpenFlowError, UnsupportedFeature, actions_of,
                                   check_prerequisites, norm_value)

_RESERVED_OUT = {ofp.OFPP_CONTROLLER, ofp.OFPP_IN_PORT, ofp.OFPP_ALL, ofp.OFPP_FLOOD,
                 ofp.OFPP_TABLE}
_ACTIONS = (parser.OFPActionOutput, parser.OFPActionGroup, parser.OFPActionSetQueue,
            parser.OFPActionSetField)


def validate_instructions(table_id: int, match: dict, instructions: list,
                          groups: Mapping[int, Any]) -> None:
    """Refuse a flow-mod's match and instructions as Open vSwitch would.

    Parameters
    ----------
    table_id : int
        The table the flow goes into (a goto-table must go further).
    match : dict
        The flow's match, normalised (:func:`~fabric.testing.tables.norm_match`).
    instructions : list
        The flow-mod's instructions.
    groups : mapping
        The switch's groups by id (a group action must name one).

    Raises
    ------
    OpenFlowError
        What the switch answers with an error message.
    UnsupportedFeature
        For what the fake switch does not model.
    """
    bad = check_prerequisites(match)
    if bad:
        raise OpenFlowError(ofp.OFPET_BAD_MATCH, ofp.OFPBMC_BAD_PREREQ, bad)
    seen = set()
    for inst in instructions:
        if inst.type in seen:
            raise OpenFlowError(ofp.OFPET_BAD_INSTRUCTION, ofp.OFPBIC_DUP_INST,
                                f"instruction type {inst.type} twice")
        seen.add(inst.type)
        if isinstance(inst, parser.OFPInstructionGotoTable):
            if not table_id < inst.table_id <= ofp.OFPTT_MAX:
                raise OpenFlowError(ofp.OFPET_BAD_INSTRUCTION, ofp.OFPBIC_BAD_TABLE_ID,
                                    f"goto table {inst.table_id} from table {table_id}")
        elif inst.type not in (ofp.OFPIT_APPLY_ACTIONS, ofp.OFPIT_WRITE_ACTIONS,
                               ofp.OFPIT_CLEAR_ACTIONS):
            raise UnsupportedFeature(f"instruction {type(inst).__name__} type {inst.type}")
    validate_actions(list(actions_of(instructions)), match, groups)


def validate_actions(actions: list, match: dict | None, groups: Mapping[int, Any],
                     packet_out: bool = False) -> None:
    """Refuse an action list as Open vSwitch would.

    Parameters
    ----------
    actions : list
        The actions (of a flow, a group bucket or a packet-out).
    match : dict or None
        The flow's normalised match, whose prerequisites a set_field must keep;
        None: not a flow's.
    groups : mapping
        The switch's groups by id (a group action must name one).
    packet_out : bool
        Whether they are a packet-out's (output to ``TABLE`` is allowed).

    Raises
    ------
    OpenFlowError
        What the switch answers with an error message.
    UnsupportedFeature
        For what the fake switch does not model.
    """
    for action in actions:
        if not isinstance(action, _ACTIONS):
            raise UnsupportedFeature(f"action {type(action).__name__}")
        if isinstance(action, parser.OFPActionOutput):
            port = action.port
            if port in (0, ofp.OFPP_ANY) or (port == ofp.OFPP_TABLE and not packet_out):
                raise OpenFlowError(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_OUT_PORT,
                                    f"output to port {port:#x}")
            if port > ofp.OFPP_MAX and port not in _RESERVED_OUT:
                raise UnsupportedFeature(f"output to port {port:#x}")
        elif isinstance(action, parser.OFPActionGroup) and action.group_id not in groups:
            raise OpenFlowError(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_OUT_GROUP,
                                f"group {action.group_id} does not exist")
        elif isinstance(action, parser.OFPActionSetField):
            norm_value(action.key, action.value)
            bad = match is not None and check_prerequisites(match, [action.key])
            if bad:
                raise OpenFlowError(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_MATCH_INCONSISTENT, bad)
