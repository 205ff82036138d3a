"""What a perfect transport would achieve on the paths a run used (pure).

A fluid model: every transfer is a flow of bytes that, while active, gets its
max-min fair rate given the link capacities (progressive filling). Rates are
recomputed at every event, so a flow speeds up when the flows beside it
finish, and a transfer with dependencies starts the instant its last
dependency ends (a perfect transport has no per-step latency either).
Transfers on one connection (``queue``) are sent in order, one after the
other, as a queue pair sends its messages: they do not share its rate.

A transfer loads each directed link it crosses in proportion to its goodput:
``wire / payload`` on the links of its data (headers included) and
``ack / payload`` on the reverse links (its acknowledgements), so the header
ceiling and the ACK share of a link are part of the ideal. A flow's rate is
limited by the links its data crosses; its ACKs take their share of the links
they cross but never freeze it there (a queue delays an ACK, it does not set
its flow's rate), so the ACKs' capacity is set aside before the data is shared
out. Per-flow ECMP puts
all of a transfer on one observed path; a sprayed transfer splits at every
switch over its next hops towards the destination, evenly (a perfect spray)
or in the proportions the switch's hash really gave them in the run.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Hashable, Mapping, Sequence

import networkx as nx

from fabric.model import graph as fg
from fabric.traffic.model import DEFAULT_ROCE_MTU, ROCE_PACKET_OVERHEAD, TCP_SEGMENT_BYTES

Link = tuple[str, str]
_EPS = 1e-12
ACK_ROUNDS = 50  # of max_min_rates: the ACKs' share, well under 1 %, settles in a few


@dataclass(frozen=True)
class Overhead:
    """Wire bytes per payload byte: of the data, and of the ACKs on the way back."""

    data: float = 1.0
    ack: float = 0.0

    @classmethod
    def of_packets(cls, payload: int, data_overhead: int, ack_bytes: int = 0,
                   packets_per_ack: float = 1.0) -> "Overhead":
        """From packet sizes: ``payload`` and ``data_overhead`` bytes per data packet,
        one ``ack_bytes`` acknowledgement per ``packets_per_ack`` data packets."""
        return cls((payload + data_overhead) / payload,
                   ack_bytes / (packets_per_ack * payload) if ack_bytes else 0.0)


@dataclass(frozen=True)
class FluidTransfer:
    """One transfer of the fluid model.

    ``load`` maps each directed link to the capacity one unit of this
    transfer's goodput uses on it with its data, ``acks`` with its
    acknowledgements (:func:`ack_load`); ``start`` is the earliest start (a root's
    measured start); ``after`` the transfers it waits for; ``latency`` the
    seconds its last packet still travels once the fluid has finished
    (:func:`store_and_forward_s`): its end, and its dependents' start, come
    that much later.
    """

    id: str
    bytes: int
    load: Mapping[Link, float]
    start: float = 0.0
    after: tuple[str, ...] = ()
    latency: float = 0.0
    delay: float = 0.0  # after its dependencies ended (compute between collectives)
    queue: Hashable = None  # its connection: one transfer of a queue is sent at a time
    # (id, seconds): not before that long after the transfer ``id`` became ready
    after_start: tuple[str, float] | None = None
    acks: Mapping[Link, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Change:
    """From ``at`` on, the links run at ``capacity`` (every link; 0 for a link that
    is down) and the transfers in ``loads`` take those data loads, and those in
    ``acks`` those ACK loads (a failure, a repair)."""

    at: float
    capacity: Mapping[Link, float]
    loads: Mapping[str, Mapping[Link, float]] = field(default_factory=dict)
    acks: Mapping[str, Mapping[Link, float]] = field(default_factory=dict)


@dataclass
class IdealSpan:
    """A transfer's start and end in the fluid model (seconds)."""

    start: float
    end: float = math.inf

    @property
    def seconds(self) -> float:
        """How long it ran."""
        return self.end - self.start


def max_min_rates(loads: Mapping[str, Mapping[Link, float]],
                  capacity: Mapping[Link, float],
                  acks: Mapping[str, Mapping[Link, float]] | None = None) -> dict[str, float]:
    """Max-min fair rates of the flows' data, their ACKs' capacity set aside.

    ``acks`` (flow id -> {link: capacity per unit of its rate}) take capacity in
    proportion to their flows' rates but never limit them: the data is shared
    out by :func:`data_max_min_rates` on what the ACKs leave, and again with the
    ACKs of those rates, until the rates settle (each round changes them by the
    ACKs' share of the last change, well under 1 %).
    """
    rates = data_max_min_rates(loads, capacity)
    if not acks:
        return rates
    for _ in range(ACK_ROUNDS):
        reserved: dict[Link, float] = defaultdict(float)
        for fid, load in acks.items():
            if fid in rates and not math.isinf(rates[fid]):
                for link, share in load.items():
                    reserved[link] += share * rates[fid]
        left = {link: max(0.0, cap - reserved.get(link, 0.0)) for link, cap in capacity.items()}
        settled, rates = rates, data_max_min_rates(loads, left)
        if all(math.isinf(r) or abs(r - settled[f]) <= 1e-12 * max(1.0, r)
               for f, r in rates.items()):
            break
    return rates


def data_max_min_rates(loads: Mapping[str, Mapping[Link, float]],
                       capacity: Mapping[Link, float]) -> dict[str, float]:
    """Max-min fair rates by progressive filling.

    Every unfrozen flow's rate grows alike until a link fills; the flows on it
    freeze; the rest go on. A flow that loads no capacitated link is unbounded
    (``inf``).

    The common rate of the unfrozen flows is the *level*. A link fills at the
    level where its frozen flows' load plus the level times its unfrozen flows'
    load meets its capacity; that level changes only when one of its flows
    freezes, so the links wait in a heap by it and only a frozen flow's links are
    looked at again (a thousand flows take milliseconds, not seconds).

    Parameters
    ----------
    loads : mapping
        Flow id -> {link: capacity used per unit of the flow's rate}.
    capacity : mapping
        Link -> capacity (the unit of the rates).
    """
    rates: dict[str, float] = {}
    users: dict[Link, list[tuple[str, float]]] = defaultdict(list)
    for fid, load in loads.items():
        for link, share in load.items():
            if share > 0 and link in capacity:
                users[link].append((fid, share))
    demand = {link: sum(share for _, share in fids) for link, fids in users.items()}
    fixed = dict.fromkeys(users, 0.0)  # load of the link's frozen flows
    version = dict.fromkeys(users, 0)
    order = {link: i for i, link in enumerate(users)}  # breaks ties without comparing links

    def fill_level(link: Link, level: float) -> float:
        return max(level, max(0.0, capacity[link] - fixed[link]) / demand[link])

    heap = [(fill_level(link, 0.0), 0, order[link], link) for link in users]
    heapq.heapify(heap)
    level = 0.0
    while heap:
        at, seen, _, link = heapq.heappop(heap)
        if seen != version[link] or demand[link] <= _EPS:
            continue  # stale (a flow on it froze since), or all its flows are frozen
        level = max(level, at)
        changed: set[Link] = set()
        for fid, _ in users[link]:
            if fid not in rates:
                rates[fid] = level
                for other, share in loads[fid].items():
                    if share > 0 and other in users:
                        demand[other] -= share
                        fixed[other] += share * level
                        changed.add(other)
        for other in changed:
            version[other] += 1
            if demand[other] > _EPS:
                heapq.heappush(heap, (fill_level(other, level), version[other], order[other],
                                      other))
    for fid in loads:
        rates.setdefault(fid, math.inf)
    return {fid: rates[fid] for fid in loads}


class _Queues:
    """Start transfers, one at a time per connection (``FluidTransfer.queue``)."""

    def __init__(self, by_id: Mapping[str, FluidTransfer], spans: dict[str, IdealSpan],
                 active: set[str]) -> None:
        self.by_id, self.spans, self.active = by_id, spans, active
        self.sending: dict[Hashable, str] = {}                    # queue -> its transfer
        self.waiting: dict[Hashable, list[str]] = defaultdict(list)  # ready, in order

    def begin(self, fid: str, now: float) -> None:
        """``fid`` is ready at ``now``: it starts, or waits for its connection."""
        queue = self.by_id[fid].queue
        if queue is not None:
            if queue in self.sending:
                self.waiting[queue].append(fid)
                return
            self.sending[queue] = fid
        self.spans[fid] = IdealSpan(now)
        self.active.add(fid)

    def sent(self, fid: str, now: float) -> None:
        """``fid`` sent its last byte at ``now``: its connection goes on with the next."""
        queue = self.by_id[fid].queue
        if queue is not None:
            del self.sending[queue]
            if self.waiting[queue]:
                self.begin(self.waiting[queue].pop(0), now)


class _Readiness:
    """When each transfer may start: every dependency ended (plus its ``delay``), the
    transfer its ``after_start`` names became ready (plus those seconds), and its own
    ``start`` passed."""

    def __init__(self, by_id: Mapping[str, FluidTransfer]) -> None:
        self.by_id = by_id
        self.waiting: dict[str, set] = {}
        self.earliest = {fid: t.start for fid, t in by_id.items()}
        self.on_end: dict[str, list[str]] = defaultdict(list)
        self.on_start: dict[str, list[tuple[str, float]]] = defaultdict(list)
        for fid, t in by_id.items():
            refs = list(t.after) + ([t.after_start[0]] if t.after_start else [])
            unknown = [d for d in refs if d not in by_id]
            if unknown:
                raise ValueError(f"{fid} waits for unknown transfers {unknown}")
            self.waiting[fid] = set(t.after)
            for dep in t.after:
                self.on_end[dep].append(fid)
            if t.after_start:
                self.waiting[fid].add(("start", t.after_start[0]))
                self.on_start[t.after_start[0]].append((fid, t.after_start[1]))
        self.ready_at = {fid: t.start for fid, t in by_id.items() if not self.waiting[fid]}

    def _met(self, fid: str, condition: Hashable, at: float) -> None:
        self.waiting[fid].discard(condition)
        self.earliest[fid] = max(self.earliest[fid], at)
        if not self.waiting[fid]:
            self.ready_at[fid] = self.earliest[fid]

    def started(self, fid: str, now: float) -> None:
        """``fid`` became ready at ``now``."""
        for child, seconds in self.on_start[fid]:
            self._met(child, ("start", fid), now + seconds)

    def ended(self, fid: str, end: float) -> None:
        """``fid``'s last packet arrived at ``end``."""
        for child in self.on_end[fid]:
            self._met(child, fid, end + self.by_id[child].delay)


def simulate(transfers: Sequence[FluidTransfer], capacity: Mapping[Link, float],
             bits_per_unit: float = 8e-6, changes: Sequence[Change] = ()
             ) -> dict[str, IdealSpan]:
    """Event-driven fluid run of ``transfers``: each one's ideal start and end.

    Parameters
    ----------
    transfers : sequence of FluidTransfer
        Dependencies must name transfers of the sequence.
    capacity : mapping
        Link -> capacity in rate units (Mbit/s by default).
    bits_per_unit : float
        Converts bytes to the capacity's unit-seconds (8e-6: bytes -> Mbit).
    changes : sequence of Change
        Capacity and load changes during the run, in any order.

    Raises
    ------
    ValueError
        On an unknown dependency, a cycle, or a transfer that could never end.
    """
    by_id = {t.id: t for t in transfers}
    readiness = _Readiness(by_id)
    ready_at = readiness.ready_at
    remaining = {t.id: t.bytes * bits_per_unit for t in transfers}
    load = {t.id: t.load for t in transfers}
    acks = {t.id: t.acks for t in transfers}
    pending = sorted(changes, key=lambda c: c.at)
    spans: dict[str, IdealSpan] = {}
    active: set[str] = set()
    queues = _Queues(by_id, spans, active)
    now = min(ready_at.values(), default=0.0)
    while len(spans) < len(transfers) or active:
        while pending and pending[0].at <= now + _EPS:
            change = pending.pop(0)
            capacity = change.capacity
            load.update(change.loads)
            acks.update(change.acks)
        while any(at <= now + _EPS for at in ready_at.values()):
            for fid in [f for f, at in ready_at.items() if at <= now + _EPS]:
                del ready_at[fid]
                readiness.started(fid, now)  # may make others ready now
                queues.begin(fid, now)
        rates = max_min_rates({f: load[f] for f in active}, capacity,
                              {f: acks[f] for f in active if acks[f]})
        finish = [(remaining[f] / rates[f] if rates[f] > 0 else math.inf, f) for f in active]
        next_finish = min((dt for dt, _ in finish), default=math.inf)
        next_start = min(ready_at.values(), default=math.inf) - now
        next_change = pending[0].at - now if pending else math.inf
        step = min(next_finish, next_start, next_change)
        if math.isinf(step):
            raise ValueError("transfers that can never end: a dependency cycle, or a link "
                             "without capacity")
        for f in active:
            remaining[f] -= rates[f] * step if not math.isinf(rates[f]) else remaining[f]
        now += step
        for f in [f for f in active if remaining[f] <= _EPS * max(1.0, by_id[f].bytes)]:
            active.discard(f)  # its links are free; its last packet is still on the way
            queues.sent(f, now)
            spans[f].end = now + by_id[f].latency
            readiness.ended(f, spans[f].end)
    return spans


def store_and_forward_s(link_mbps: Sequence[float], last_packet_bytes: int) -> float:
    """Seconds a transfer's last packet takes beyond the fluid model's finish.

    The fluid crosses all links of a path at once; a real packet is received
    whole at every switch before it goes on. So the last packet crosses every
    link once more but the slowest, whose time the fluid already counts.
    Queueing and processing are not included: a perfect transport would not
    have them.

    Parameters
    ----------
    link_mbps : sequence of float
        The rates of the links of the path, in order (Mbit/s).
    last_packet_bytes : int
        Wire bytes of the transfer's last packet.
    """
    times = [last_packet_bytes * 8 / (mbps * 1e6) for mbps in link_mbps]
    return sum(times) - max(times, default=0.0)


def shortest_path(graph: nx.Graph, src: str, dst: str) -> list[str]:
    """One shortest node path from ``src`` to ``dst`` through switches only (a
    sprayed transfer takes all such paths; they have the same length)."""
    core = graph.subgraph(fg.switches(graph))
    first = _attachment_nearest(graph, core, src, dst)
    last = _attachment_nearest(graph, core, dst, src)
    return [src, *nx.shortest_path(core, first, last), dst]


def path_load(path: Sequence[str], overhead: Overhead) -> dict[Link, float]:
    """Data load of a transfer that takes one node path (per-flow ECMP)."""
    load: dict[Link, float] = defaultdict(float)
    for a, b in zip(path, path[1:]):
        load[(a, b)] += overhead.data
    return dict(load)


def ack_load(load: Mapping[Link, float], overhead: Overhead) -> dict[Link, float]:
    """Load of the ACKs of a transfer whose data loads ``load``: the reverse links, in
    the same proportions."""
    if not overhead.ack:
        return {}
    acks: dict[Link, float] = defaultdict(float)
    for (a, b), value in load.items():
        acks[(b, a)] += value / overhead.data * overhead.ack
    return dict(acks)


def spray_load(graph: nx.Graph, src: str, dst: str, overhead: Overhead,
               link_bytes: Mapping[Link, float] | None = None) -> dict[Link, float]:
    """Data load of a transfer sprayed at every switch over its shortest next hops.

    The split at a switch is even, or, given ``link_bytes`` (bytes each directed
    link carried in the run), in proportion to what the switch really sent on
    each next hop: a per-packet hash spreads the packets unevenly, and the
    ideal of a sprayed run is taken on the paths as they were used. Endpoints
    never carry transit traffic; a multi-homed endpoint sends from, and is
    reached on, its NIC nearest the other end (as the traffic runner addresses
    it). Its ACKs take the reverse links in the same proportions (:func:`ack_load`).
    """
    core = graph.subgraph(fg.switches(graph))
    first = _attachment_nearest(graph, core, src, dst)
    last = _attachment_nearest(graph, core, dst, src)
    hops = nx.single_source_shortest_path_length(core, last)
    share: dict[str, float] = defaultdict(float)
    share[first] = 1.0
    load: dict[Link, float] = defaultdict(float)
    load[(src, first)] = overhead.data
    # farthest first: a switch has all its inflow before it splits it
    for sw in sorted(hops, key=lambda s: -hops[s]):
        frac = share.get(sw, 0.0)
        if frac <= 0:
            continue
        if sw == last:
            load[(sw, dst)] += overhead.data * frac
            continue
        nxt = [n for n in core.neighbors(sw) if hops.get(n) == hops[sw] - 1]
        weights = [link_bytes.get((sw, n), 0.0) for n in nxt] if link_bytes else []
        if sum(weights) <= 0:
            weights = [1.0] * len(nxt)
        for n, weight in zip(nxt, weights):
            part = frac * weight / sum(weights)
            share[n] += part
            load[(sw, n)] += overhead.data * part
    return dict(load)


def weighted_multipath_load(graph: nx.Graph, src: str, dst: str, overhead: Overhead,
                            capacity: Mapping[Link, float]) -> dict[Link, float]:
    """Data load of a transfer spread over its live shortest paths in proportion to each
    path's bottleneck capacity (weighted multipath, as WCMP would route it).

    What a router that knows every link's rate makes of a fabric with failed
    (capacity 0) or slow links: with all links alike it is an even spray. Not
    the multi-commodity optimum in general, but on a two-tier Clos with one slow
    or failed link it moves each transfer's traffic off that link in proportion
    to what the link can carry.

    Raises
    ------
    ValueError
        When no live path joins ``src`` and ``dst``.
    """
    def up(a: str, b: str) -> bool:
        return capacity.get((a, b), 0) > 0 and capacity.get((b, a), 0) > 0

    core = nx.subgraph_view(graph.subgraph(fg.switches(graph)), filter_edge=up)
    first = _attachment_nearest(graph, core, src, dst)
    last = _attachment_nearest(graph, core, dst, src)
    try:
        paths = [[src, *path, dst] for path in nx.all_shortest_paths(core, first, last)]
    except nx.NetworkXNoPath:
        raise ValueError(f"no live path from {src} to {dst}") from None
    weights = [min(capacity[(a, b)] for a, b in zip(path, path[1:])) for path in paths]
    load: dict[Link, float] = defaultdict(float)
    for path, weight in zip(paths, weights):
        share = weight / sum(weights)
        for a, b in zip(path, path[1:]):
            load[(a, b)] += overhead.data * share
    return dict(load)


def _attachment_nearest(graph: nx.Graph, core: nx.Graph, endpoint: str, other: str) -> str:
    """The switch ``endpoint`` attaches to nearest ``other`` (ties: lowest port)."""
    targets = set(graph.neighbors(other))

    def distance(sw: str) -> tuple[int, int]:
        lengths = nx.single_source_shortest_path_length(core, sw)
        return (min(lengths.get(t, 1 << 30) for t in targets), fg.port(graph, endpoint, sw))

    return min(graph.neighbors(endpoint), key=distance)


def link_capacity(graph: nx.Graph, link_mbps: Mapping[frozenset, float]) -> dict[Link, float]:
    """Both directions of every link at its emulated rate."""
    cap = {}
    for a, b in graph.edges:
        mbps = link_mbps[frozenset((a, b))]
        cap[(a, b)] = cap[(b, a)] = mbps
    return cap




# Wire bytes of the transports' packets, as HTB counts them (Ethernet header, no FCS).
ROCE_DATA_OVERHEAD = 14 + ROCE_PACKET_OVERHEAD  # Ethernet, IPv4, UDP, BTH, ICRC
ROCE_ACK_BYTES = 14 + 20 + 8 + 32 + 4         # the same around BTH+AETH+AckExt, no SACK bits
ROCE_PACKETS_PER_ACK = 8                      # the agent's ACK coalescing
TCP_MSS = TCP_SEGMENT_BYTES
TCP_OVERHEAD = 14 + 20 + 32
TCP_SEGMENTS_PER_ACK = 2                      # delayed ACKs


def last_packet_bytes(kind: str, mtu_payload: int, nbytes: int) -> int:
    """Wire bytes of the last packet of an ``nbytes`` message of the ``roce`` or ``tcp``
    transport (``mtu_payload``: a full roce packet's payload)."""
    if kind not in ("roce", "tcp"):
        raise ValueError(f"unknown transport {kind!r}")
    payload, header = (mtu_payload, ROCE_DATA_OVERHEAD) if kind == "roce" else (TCP_MSS,
                                                                               TCP_OVERHEAD)
    return (nbytes % payload or payload) + header


def transport_overhead(kind: str, mtu_payload: int = DEFAULT_ROCE_MTU) -> Overhead:
    """Headers and ACKs of the ``roce`` or ``tcp`` transport per payload byte."""
    if kind == "roce":
        return Overhead.of_packets(mtu_payload, ROCE_DATA_OVERHEAD, ROCE_ACK_BYTES,
                                   ROCE_PACKETS_PER_ACK)
    if kind == "tcp":
        return Overhead.of_packets(TCP_MSS, TCP_OVERHEAD, TCP_OVERHEAD, TCP_SEGMENTS_PER_ACK)
    raise ValueError(f"unknown transport {kind!r}")
