"""Plain data that routing logic returns and controller shims translate.

These frozen dataclasses are the whole contract between the pure routing
code (which never touches a switch) and the os-ken apps (which only translate
them into OpenFlow messages). Equality is value equality, so two rounds of a
policy can be diffed to send only what changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_ARP = 0x0806
ETH_TYPE_IPV6 = 0x86DD


@dataclass(frozen=True)
class Output:
    """Send the packet out of ``port``."""

    port: int


@dataclass(frozen=True)
class ToGroup:
    """Hand the packet to group ``group_id``."""

    group_id: int


@dataclass(frozen=True)
class ToController:
    """Send the packet to the controller (packet-in)."""


@dataclass(frozen=True)
class SetQueue:
    """Enqueue on egress queue ``queue_id`` of the chosen output port."""

    queue_id: int


Action = Union[Output, ToGroup, ToController, SetQueue]


@dataclass(frozen=True)
class Bucket:
    """One group bucket: an output port with a weight.

    ``watch_port`` is used by fast-failover groups; ``None`` watches nothing.
    """

    port: int
    weight: int = 1
    watch_port: int | None = None


@dataclass(frozen=True)
class Group:
    """A group entry.

    ``kind`` is ``"select"`` (hash over buckets, by ``selection``) or
    ``"ff"`` (fast failover: first live bucket). ``hash_basis`` seeds the
    select hash; a different basis per switch keeps successive tiers from
    making correlated choices (hash polarisation).
    """

    group_id: int
    kind: str
    buckets: tuple[Bucket, ...]
    selection: str = "dp_hash"
    hash_basis: int = 0


@dataclass(frozen=True)
class Flow:
    """A flow entry; ``match`` is a sorted tuple of (OXM field, value) pairs.

    ``actions`` are applied in order; then, if ``goto_table`` is set, the
    packet continues in that table. No actions and no goto drops it.
    """

    priority: int
    match: tuple[tuple[str, object], ...]
    actions: tuple[Action, ...]
    table_id: int = 0
    goto_table: int | None = None

    @staticmethod
    def make(priority: int, actions: tuple[Action, ...] = (), *, table_id: int = 0,
             goto_table: int | None = None, **match: object) -> "Flow":
        """Build a flow from keyword match fields (os-ken OXM names)."""
        return Flow(priority, tuple(sorted(match.items())), tuple(actions), table_id, goto_table)

    @property
    def key(self) -> tuple:
        """What identifies the entry in a switch: table, priority, match."""
        return (self.table_id, self.priority, self.match)


@dataclass(frozen=True)
class SwitchIntent:
    """Everything one switch should hold: its flows and groups."""

    name: str
    dpid: int
    flows: tuple[Flow, ...]
    groups: tuple[Group, ...]

    def group(self, group_id: int) -> Group:
        """Return the group with ``group_id``."""
        return next(g for g in self.groups if g.group_id == group_id)
