"""Flow and group table entries of the fake switch, and match arithmetic.

Match values are normalised to ``(value, mask)`` integer pairs so exact,
masked and wildcard matches compare with one rule: a packet field ``v``
matches ``(value, mask)`` when ``v & mask == value``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping

from os_ken.ofproto import ofproto_v1_5 as ofp
from os_ken.ofproto import ofproto_v1_5_parser as parser

EXACT = (1 << 128) - 1
_MAC = {"eth_src", "eth_dst", "arp_sha", "arp_tha", "ipv6_nd_sll", "ipv6_nd_tll"}
_IP = {"ipv4_src", "ipv4_dst", "arp_spa", "arp_tpa", "ipv6_src", "ipv6_dst", "ipv6_nd_target"}
_IPV4_TYPES = {0x0800}
_IP_TYPES = {0x0800, 0x86DD}
# field -> (field it needs, the values that field must have): OVS rejects
# a match without its prerequisites (OFPBMC_BAD_PREREQ).
PREREQUISITES: dict[str, tuple[str, set[int]]] = {
    **{f: ("eth_type", _IPV4_TYPES) for f in ("ipv4_src", "ipv4_dst", "icmpv4_type",
                                               "icmpv4_code")},
    **{f: ("eth_type", _IP_TYPES) for f in ("ip_proto", "ip_dscp", "ip_ecn")},
    **{f: ("eth_type", {0x86DD}) for f in ("ipv6_src", "ipv6_dst", "ipv6_flabel")},
    **{f: ("eth_type", {0x0806}) for f in ("arp_op", "arp_spa", "arp_tpa", "arp_sha",
                                            "arp_tha")},
    "tcp_src": ("ip_proto", {6}), "tcp_dst": ("ip_proto", {6}),
    "udp_src": ("ip_proto", {17}), "udp_dst": ("ip_proto", {17}),
    "sctp_src": ("ip_proto", {132}), "sctp_dst": ("ip_proto", {132}),
}
PREREQUISITES.update({f: ("ip_proto", {1}) for f in ("icmpv4_type", "icmpv4_code")})

Match = dict[str, tuple[int, int]]


class OpenFlowError(Exception):
    """What a real switch answers with an OFPT_ERROR message.

    Attributes
    ----------
    type, code : int
        The OpenFlow error type and code (``ofproto_v1_5.OFPET_*``).
    switch : str
        The switch that refused the message (set by the harness).
    """

    def __init__(self, type_: int, code: int, text: str):
        super().__init__(f"{_const_name('OFPET_', type_)}/{code}: {text}")
        self.type, self.code, self.text = type_, code, text
        self.switch: str | None = None


class UnsupportedFeature(NotImplementedError):
    """A message, instruction or action the fake switch does not model."""


def _const_name(prefix: str, value: int) -> str:
    names = [n for n in dir(ofp) if n.startswith(prefix) and getattr(ofp, n) == value]
    return names[0] if names else f"{prefix}{value}"


def norm_value(name: str, value: Any) -> int:
    """A match or packet field value as an integer (addresses included)."""
    if isinstance(value, int):
        return value
    if name in _MAC:
        return int(str(value).replace(":", "").replace("-", ""), 16)
    if name in _IP:
        return int(ipaddress.ip_address(value))
    raise UnsupportedFeature(f"cannot interpret {name}={value!r}")


def normalise(fields: Mapping[str, Any]) -> dict[str, int]:
    """Packet fields (OXM name -> value) with integer values."""
    return {k: norm_value(k, v) for k, v in fields.items()}


def norm_match(match: Any) -> Match:
    """An ``OFPMatch`` (or a mapping) as ``{field: (value, mask)}``."""
    items = match.items() if hasattr(match, "items") else match
    out: Match = {}
    for name, value in items:
        if isinstance(value, tuple):
            val, mask = norm_value(name, value[0]), norm_value(name, value[1])
        else:
            val, mask = norm_value(name, value), EXACT
        out[name] = (val & mask, mask)
    return out


def check_prerequisites(match: Match, extra: Iterable[str] = ()) -> str | None:
    """Name the first field of ``match`` (or ``extra``) missing a prerequisite, or None."""
    for name in list(match) + list(extra):
        need = PREREQUISITES.get(name)
        if need is None:
            continue
        have = match.get(need[0])
        if have is None or have[1] != EXACT or have[0] not in need[1]:
            return f"{name} needs {need[0]} in {sorted(need[1])}"
    return None


def packet_matches(match: Match, fields: Mapping[str, int]) -> bool:
    """True when normalised packet ``fields`` satisfy ``match``."""
    for name, (value, mask) in match.items():
        have = fields.get(name)
        if have is None or have & mask != value:
            return False
    return True


def covers(criteria: Match, match: Match) -> bool:
    """True when ``match`` is at least as specific as ``criteria`` and agrees with it."""
    for name, (value, mask) in criteria.items():
        have = match.get(name)
        if have is None or have[1] & mask != mask or have[0] & mask != value:
            return False
    return True


def actions_of(instructions: Iterable[Any]) -> Iterator[Any]:
    """Every action in apply- and write-actions instructions."""
    for inst in instructions:
        yield from getattr(inst, "actions", None) or []


@dataclass
class FlowEntry:
    """One flow entry; counters count traced packets.

    Times are the harness clock's (:meth:`FakeFabric.advance`): when the
    entry was added and when a counted packet last matched it.
    """

    table_id: int
    priority: int
    match: Match
    instructions: list[Any]
    cookie: int = 0
    ofp_match: Any = None
    packets: int = 0
    bytes: int = 0
    idle_timeout: int = 0
    hard_timeout: int = 0
    flags: int = 0
    added_at: float = 0.0
    used_at: float = 0.0

    def expired(self, now: float) -> int | None:
        """``OFPRR_IDLE_TIMEOUT`` or ``OFPRR_HARD_TIMEOUT`` if the entry has timed out at
        ``now``, else None (a timeout of 0 never expires)."""
        if self.hard_timeout and now - self.added_at >= self.hard_timeout:
            return ofp.OFPRR_HARD_TIMEOUT
        if self.idle_timeout and now - self.used_at >= self.idle_timeout:
            return ofp.OFPRR_IDLE_TIMEOUT
        return None

    def outputs_to(self, port: int) -> bool:
        """True when an action outputs to ``port`` (the flow-mod ``out_port`` filter)."""
        return any(isinstance(a, parser.OFPActionOutput) and a.port == port
                   for a in actions_of(self.instructions))

    def uses_group(self, group_id: int) -> bool:
        """True when an action hands packets to ``group_id``."""
        return any(isinstance(a, parser.OFPActionGroup) and a.group_id == group_id
                   for a in actions_of(self.instructions))

    def __str__(self) -> str:
        match = ",".join(f"{k}={_show(v)}" for k, v in sorted(self.match.items()))
        return (f"table={self.table_id} priority={self.priority} {match or '*'} "
                f"-> {describe_instructions(self.instructions)}")


@dataclass
class BucketEntry:
    """One group bucket: its actions, weight and liveness watches."""

    bucket_id: int
    actions: list[Any]
    weight: int = 1
    watch_port: int | None = None
    watch_group: int | None = None
    packets: int = 0   # what the group handed this bucket (group statistics)
    bytes: int = 0

    @property
    def ports(self) -> tuple[int, ...]:
        """The ports this bucket outputs to."""
        return tuple(a.port for a in self.actions if isinstance(a, parser.OFPActionOutput))


@dataclass
class GroupEntry:
    """One group; ``method``/``basis`` come from the selection method property."""

    group_id: int
    type: int
    buckets: list[BucketEntry] = field(default_factory=list)
    method: str | None = None
    basis: int = 0

    @property
    def kind(self) -> str:
        """``"all"``, ``"select"``, ``"indirect"`` or ``"ff"``."""
        return {ofp.OFPGT_ALL: "all", ofp.OFPGT_SELECT: "select", ofp.OFPGT_INDIRECT: "indirect",
                ofp.OFPGT_FF: "ff"}[self.type]

    def weights(self) -> dict[int, int]:
        """``{output port: weight}`` of single-output buckets."""
        return {b.ports[0]: b.weight for b in self.buckets if len(b.ports) == 1}

    def __str__(self) -> str:
        buckets = " ".join(f"[w={b.weight} watch={b.watch_port} {describe_actions(b.actions)}]"
                           for b in self.buckets)
        extra = f" method={self.method} basis={self.basis:#x}" if self.method else ""
        return f"group_id={self.group_id} type={self.kind}{extra} {buckets}"


def _show(value: tuple[int, int]) -> str:
    val, mask = value
    return f"{val:#x}" if mask == EXACT else f"{val:#x}/{mask:#x}"


def describe_actions(actions: Iterable[Any]) -> str:
    """Short text for a list of os-ken actions (for dumps and error messages)."""
    parts = []
    for a in actions:
        if isinstance(a, parser.OFPActionOutput):
            parts.append(f"output:{_port_name(a.port)}")
        elif isinstance(a, parser.OFPActionGroup):
            parts.append(f"group:{a.group_id}")
        elif isinstance(a, parser.OFPActionSetQueue):
            parts.append(f"set_queue:{a.queue_id}")
        elif isinstance(a, parser.OFPActionSetField):
            parts.append(f"set_field:{a.key}={a.value}")
        else:
            parts.append(type(a).__name__)
    return ",".join(parts) or "drop"


def describe_instructions(instructions: Iterable[Any]) -> str:
    """Short text for a flow's instructions."""
    parts = []
    for inst in instructions:
        if isinstance(inst, parser.OFPInstructionGotoTable):
            parts.append(f"goto:{inst.table_id}")
        elif inst.type == ofp.OFPIT_CLEAR_ACTIONS:
            parts.append("clear")
        else:
            kind = "write" if inst.type == ofp.OFPIT_WRITE_ACTIONS else "apply"
            parts.append(f"{kind}({describe_actions(inst.actions)})")
    return " ".join(parts) or "drop"


def _port_name(port: int) -> str:
    names = {ofp.OFPP_CONTROLLER: "CONTROLLER", ofp.OFPP_IN_PORT: "IN_PORT",
             ofp.OFPP_ALL: "ALL", ofp.OFPP_FLOOD: "FLOOD", ofp.OFPP_TABLE: "TABLE",
             ofp.OFPP_LOCAL: "LOCAL", ofp.OFPP_NORMAL: "NORMAL"}
    return names.get(port, str(port))
