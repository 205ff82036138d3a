"""Walk a packet across fake switches: hops, deliveries, drops, packet-ins."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

import networkx as nx

from fabric.model import graph as fg
from fabric.testing.fakeswitch import Emit, FakeSwitch, PipelineResult

DEFAULT_HOP_LIMIT = 64
MAX_COPIES = 10_000


@dataclass(frozen=True)
class Hop:
    """A packet leaving ``switch`` by ``out_port`` after arriving on ``in_port``.

    ``queue`` is the egress queue a ``set_queue`` action chose (None: none
    did). ``to`` names the node on the other end of the link; it does not
    take part in equality, so ``Hop("r0l0", 1, 5, None)`` compares equal to
    a traced hop.
    """

    switch: str
    in_port: int
    out_port: int
    queue: int | None = None
    to: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class PacketIn:
    """A packet a switch sent to the controller."""

    switch: str
    in_port: int
    table_id: int
    cookie: int
    reason: int
    data: bytes


@dataclass
class Trace:
    """Where one packet (and any copies of it) went.

    Attributes
    ----------
    hops : list of Hop
        Every switch output, in the order the walk made them (breadth first
        when a packet is copied).
    delivered : list of str
        Endpoints that received a copy.
    drops : list of (str, str)
        ``(node, reason)`` for every copy that was lost.
    packet_ins : list of PacketIn
        Copies sent to the controller (not delivered to the app by
        :meth:`FakeFabric.trace`; see :meth:`FakeFabric.packet_in`).
    loop : bool
        True when a copy exceeded the hop limit.
    data : bytes
        The frame.
    """

    hops: list[Hop] = field(default_factory=list)
    delivered: list[str] = field(default_factory=list)
    drops: list[tuple[str, str]] = field(default_factory=list)
    packet_ins: list[PacketIn] = field(default_factory=list)
    loop: bool = False
    data: bytes = b""

    @property
    def delivered_to(self) -> str | None:
        """The (first) endpoint that received the packet, or None."""
        return self.delivered[0] if self.delivered else None

    @property
    def dropped_at(self) -> str | None:
        """The node where the (first) copy was lost, or None."""
        return self.drops[0][0] if self.drops else None

    @property
    def to_controller(self) -> bool:
        """True when a switch sent the packet to the controller."""
        return bool(self.packet_ins)

    @property
    def links(self) -> list[frozenset]:
        """The links the packet crossed, as ``frozenset({node, node})``."""
        return [frozenset((h.switch, h.to)) for h in self.hops]

    @property
    def switches(self) -> list[str]:
        """The switches the packet left, in order."""
        return [h.switch for h in self.hops]


@dataclass
class Exchange:
    """A packet sent with the controller in the loop (:meth:`FakeFabric.send`).

    Attributes
    ----------
    trace : Trace
        The packet's own walk through the tables.
    packet_outs : list of Trace
        The walks of every packet-out the apps sent while handling the
        packet-ins, in the order they were sent.
    packet_ins : int
        Packet-ins delivered to the apps.
    """

    trace: Trace
    packet_outs: list[Trace] = field(default_factory=list)
    packet_ins: int = 0

    @property
    def delivered(self) -> list[str]:
        """Every endpoint a copy reached, by the tables or by a packet-out."""
        return self.trace.delivered + [e for t in self.packet_outs for e in t.delivered]


class _Fabric(Protocol):
    graph: nx.Graph
    switches: dict[str, FakeSwitch]
    hop_limit: int


def walk(fabric: _Fabric, switch: str, in_port: int, fields: dict[str, int], data: bytes,
         actions: list[Any] | None = None, count: bool = True) -> Trace:
    """Follow a packet from ``switch`` until every copy is delivered or lost.

    Parameters
    ----------
    fabric : FakeFabric
        Provides ``graph``, ``switches`` and ``hop_limit``.
    switch : str
        Where the packet enters.
    in_port : int
        Its ingress port (``OFPP_CONTROLLER`` for a packet-out).
    fields : dict
        Normalised packet fields.
    data : bytes
        The frame (its length updates the counters).
    actions : list, optional
        Packet-out actions to apply at ``switch`` instead of its tables.
    count : bool
        Update port and flow counters.
    """
    trace = Trace(data=bytes(data))
    todo: deque = deque([(switch, in_port, fields, 0, actions)])
    copies = 0
    while todo:
        name, port, pkt, depth, acts = todo.popleft()
        copies += 1
        if depth >= fabric.hop_limit or copies > MAX_COPIES:
            trace.loop = True
            trace.drops.append((name, f"hop limit {fabric.hop_limit} reached (loop?)"))
            continue
        sw = fabric.switches[name]
        if acts is None:
            if count and port in sw.counters:
                sw.counters[port].rx_packets += 1
                sw.counters[port].rx_bytes += len(data)
            result = sw.process(pkt, port, len(data) if count else None)
        else:
            result = sw.execute(acts, pkt, port)
        _record(fabric, trace, name, port, result, count)
        for emit in result.emits:
            nbr = sw.ports[emit.port]
            if fg.is_switch(fabric.graph, nbr):
                todo.append((nbr, fg.port(fabric.graph, nbr, name), emit.fields, depth + 1, None))
            else:
                trace.delivered.append(nbr)
    return trace


def _record(fabric: _Fabric, trace: Trace, name: str, in_port: int, result: PipelineResult,
            count: bool) -> None:
    sw = fabric.switches[name]
    for reason in result.drops:
        trace.drops.append((name, reason))
    for pin in result.controller:
        trace.packet_ins.append(PacketIn(name, in_port, pin.table_id, pin.cookie, pin.reason,
                                         trace.data))
    for emit in result.emits:
        trace.hops.append(Hop(name, in_port, emit.port, emit.queue, to=sw.ports[emit.port]))
        if count:
            _count_tx(sw, emit, len(trace.data))


def _count_tx(sw: FakeSwitch, emit: Emit, nbytes: int) -> None:
    counters = sw.counters[emit.port]
    counters.tx_packets += 1
    counters.tx_bytes += nbytes


__all__ = ["DEFAULT_HOP_LIMIT", "Exchange", "Hop", "PacketIn", "Trace", "walk"]
