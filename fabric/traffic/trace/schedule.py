"""A :class:`~fabric.traffic.trace.schema.Workload` as a transfer schedule (pure).

Every collective instance (the ``k``-th collective of a group, or the
``k``-th message from rank ``a`` to rank ``b``) becomes the transfers of
:func:`fabric.traffic.collectives.generate` among its ranks' endpoints,
tagged ``{tag_prefix}/step{s}/{name}-{group}-{k}`` (a message:
``{name}-{a}to{b}-{k}``) so a report finds each collective's transfers by
that prefix. Each rank replays its program in order:

- its first transfers of a collective (those that wait for no other send of
  the rank in it) wait for the rank's completion of its previous collective:
  every transfer of it the rank sent or received that no later send of the
  rank already waited for (``after``: local to the sender, as
  :func:`~fabric.traffic.model.validate_schedule` wants), then ``delay_s`` =
  the compute between the two, times ``time_scale``. Sends that forward
  received pieces start no earlier than the rank's first send of the
  collective (``after_start``); where a rank has no send that waits for
  nothing (an interior node of ``tree_allreduce``) they take the delay
  themselves, counted from the pieces' arrival, which overstates the gap:
  replay traces with compute gaps on the ring;
- a collective whose ranks all sit in one server (same ``servers`` value:
  tensor parallelism over NVLink) or that has one rank does not cross the
  fabric: it has no transfers and takes no time, and its compute gap carries
  over to the rank's next collective. It does not synchronise the server's
  ranks either (nothing on the fabric could);
- compute before a rank's first fabric collective and after its last is not
  replayed (a delay needs a completed transfer to count from); compute before
  a receive, which the sender drives, is replayed before the rank's next
  collective.

**Byte scale.** The emulator runs links about 1e5 times slower than the
cluster it models (a 400 Gbit/s NIC is emulated at a few Mbit/s). Replaying
the trace's bytes times ``emulated rate / physical rate``
(:func:`emulated_byte_scale`) keeps each collective's time in real seconds,
so the compute gaps replay as recorded and the ratio of communication to
compute is the cluster's. Any other scale is the caller's choice (with
``time_scale`` to stretch the gaps alike). Every size is raised to the
generator's minimum (one byte per transfer: ranks x chunks x channels, two
halves for the tree) so no transfer is empty.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any, Hashable, Mapping, Sequence

from fabric.traffic import collectives
from fabric.traffic.model import ScheduleError, Transfer, validate_schedule
from fabric.traffic.trace.schema import Collective, Compute, TraceError, Workload, validate

ALLREDUCE_ALGORITHMS = ("ring_allreduce", "tree_allreduce")


@dataclass(frozen=True)
class ReplayedCollective:
    """One collective instance of the replay: its ranks, sizes and transfers' tag prefix."""

    key: str  # the tag (and id) prefix of its transfers
    name: str
    ranks: tuple[int, ...]
    step: int
    bytes: int  # the trace's nccl-tests size
    replayed_bytes: int  # the size replayed (0 when skipped)
    skipped: bool  # inside one server (or one rank): not on the fabric
    group: str | None = None


@dataclass(frozen=True)
class Replay:
    """The schedule of a workload and what a report needs to read its timings."""

    transfers: list[Transfer]
    collectives: list[ReplayedCollective]
    endpoints: tuple[str, ...]  # endpoint of each rank
    compute_s: dict[tuple[int, int], float] = field(default_factory=dict)  # replayed


def emulated_byte_scale(emulated_mbps: float, physical_gbps: float) -> float:
    """Return ``emulated rate / physical rate``: the byte scale that keeps real seconds."""
    if not (emulated_mbps > 0 and physical_gbps > 0):
        raise ValueError(f"rates must be > 0, got {emulated_mbps} Mbit/s, {physical_gbps} Gbit/s")
    return emulated_mbps * 1e6 / (physical_gbps * 1e9)


def _instance_keys(workload: Workload) -> list[list[tuple[int, tuple]]]:
    """Per rank, ``(op index, instance key)`` of each communication operation."""
    out = []
    for rank, program in enumerate(workload.programs):
        counts: dict[tuple, int] = defaultdict(int)
        mine = []
        for index, op in enumerate(program):
            if not isinstance(op, Collective):
                continue
            if op.group is not None:
                base: tuple = ("group", op.group)
            else:  # a message is keyed by (sender, receiver)
                base = ("p2p", rank, op.peer) if op.name == "send" else ("p2p", op.peer, rank)
            mine.append((index, base + (counts[base],)))
            counts[base] += 1
        out.append(mine)
    return out


def _min_bytes(generator: str, n: int, options: Mapping[str, Any]) -> int:
    pieces = int(options.get("chunks", 1)) * int(options.get("channels", 1))
    return pieces * (2 if generator == "tree_allreduce" else n)


def _instance(workload: Workload, op: Collective, key: tuple, prefix: str) -> tuple:
    """``(ReplayedCollective without sizes, its ranks)`` of an instance key."""
    if key[0] == "group":
        ranks = workload.groups[key[1]]
        tag = f"{prefix}/step{op.step}/{op.name}-{key[1]}-{key[2]}"
    else:
        ranks = (key[1], key[2])
        tag = f"{prefix}/step{op.step}/send-{key[1]}to{key[2]}-{key[3]}"
    return tag, tuple(ranks)


def _generate(op: Collective, tag: str, eps: list[str], size: int, dscp: int,
              allreduce: str, options: Mapping[str, Any]) -> list[Transfer]:
    if op.group is None:
        return [Transfer(f"{tag}/msg", eps[0], eps[1], size, (), dscp, tag)]
    name = allreduce if op.name == "all_reduce" else op.name
    try:
        return collectives.generate(name, eps, size, tag=tag, dscp=dscp, **options)
    except (TypeError, ValueError) as exc:
        raise TraceError(f"{op.where or tag}: cannot generate {name}: {exc}") from None


def _all_instances(workload: Workload, endpoints: Sequence[str], byte_scale: float,
                   servers: Mapping[str, Hashable] | None, dscp: int, prefix: str,
                   allreduce: str, options: Mapping[str, Any]) -> tuple[dict, dict]:
    """Instance key -> :class:`ReplayedCollective`, and -> its transfers."""
    keys = _instance_keys(workload)
    replayed: dict[tuple, ReplayedCollective] = {}
    transfers: dict[tuple, list[Transfer]] = {}
    for rank, mine in enumerate(keys):
        for index, key in mine:
            if key in replayed:
                continue
            op = workload.programs[rank][index]
            assert isinstance(op, Collective)  # the instance keys index collectives only
            tag, ranks = _instance(workload, op, key, prefix)
            eps = [endpoints[r] for r in ranks]
            local = len(ranks) < 2 or (servers is not None
                                       and len({servers[e] for e in eps}) == 1)
            generator = allreduce if op.name == "all_reduce" else op.name
            size = 0 if local else max(_min_bytes(generator, len(ranks), options),
                                       round(op.bytes * byte_scale))
            replayed[key] = ReplayedCollective(tag, op.name if op.group else "send", ranks,
                                               op.step, op.bytes, size, local, op.group)
            transfers[key] = [] if local else _generate(op, tag, eps, size, dscp, allreduce,
                                                        options)
    return replayed, transfers


def _frontier(touched: list[Transfer], sent_by_rank: list[Transfer]) -> tuple[str, ...]:
    """The transfers whose completion (at the rank) implies every touched one's."""
    covered = {dep for t in sent_by_rank for dep in t.after}
    return tuple(t.id for t in touched if t.id not in covered)


def _hold_back(sent: list[Transfer], previous: tuple[str, ...], gap: float,
               changed: dict[str, Transfer]) -> None:
    """Make a rank's first sends of a collective wait for its previous one and the gap.

    Starters (sends that wait for nothing) get ``after=previous`` and
    ``delay_s=gap``. A send that waits only for received pieces also waits
    for ``previous`` and, through ``after_start``, for a starter to have
    started, so the gap is not counted again from the pieces' arrival; a rank
    without starters (an interior node of a tree) delays those sends by the
    gap itself.
    """
    own = {t.id for t in sent}
    starters = [t for t in sent if not t.after]
    delay = gap if previous else 0.0
    for t in sent:
        if own.intersection(t.after):
            continue  # follows one of the rank's own sends
        after = tuple(dict.fromkeys(t.after + previous))
        if not t.after or not starters:
            changed[t.id] = replace(t, after=after, delay_s=delay)
        else:
            changed[t.id] = replace(t, after=after, after_start=(starters[0].id, 0.0))


def _walk_rank(rank: int, workload: Workload, keys: list[tuple[int, tuple]],
               transfers: dict[tuple, list[Transfer]], endpoints: Sequence[str],
               time_scale: float, changed: dict[str, Transfer],
               compute_s: dict[tuple[int, int], float]) -> None:
    """Chain ``rank``'s collectives in program order (see the module docstring)."""
    me = endpoints[rank]
    key_at = dict(keys)
    previous: tuple[str, ...] = ()
    gap = 0.0
    pending: dict[int, float] = defaultdict(float)  # step -> compute not yet replayed
    for index, op in enumerate(workload.programs[rank]):
        if isinstance(op, Compute):
            gap += op.seconds * time_scale
            pending[op.step] += op.seconds * time_scale
            continue
        instance = transfers[key_at[index]]
        touched = [t for t in instance if me in (t.src, t.dst)]
        sent = [t for t in touched if t.src == me]
        if not sent and not touched:
            continue  # not on the fabric: its gap carries over
        if not sent:  # a receive: the sender drives it, the gap waits
            previous = previous + _frontier(touched, [])
            continue
        _hold_back(sent, previous, gap, changed)
        if previous:
            for step, seconds in pending.items():
                compute_s[(rank, step)] = compute_s.get((rank, step), 0.0) + seconds
        previous, gap, pending = _frontier(touched, sent), 0.0, defaultdict(float)


def replay(workload: Workload, endpoints: Sequence[str], *, byte_scale: float = 1.0,
           time_scale: float = 1.0, servers: Mapping[str, Hashable] | None = None,
           dscp: int = 0, tag_prefix: str = "trace", allreduce: str = "ring_allreduce",
           **collective_options: Any) -> Replay:
    """Turn a workload into a transfer schedule (see the module docstring).

    Parameters
    ----------
    workload : Workload
        The trace (validated again here).
    endpoints : sequence of str
        The endpoint of each rank (:func:`~fabric.traffic.trace.place.place_ranks`).
    byte_scale : float
        Factor on every size (:func:`emulated_byte_scale`), > 0.
    time_scale : float
        Factor on every compute gap, >= 0.
    servers : mapping, optional
        Endpoint -> server (:func:`~fabric.traffic.trace.place.endpoint_servers`);
        collectives inside one server are skipped. None: none is.
    dscp, tag_prefix
        Traffic class of every transfer; first part of every id and tag (no ``/``).
    allreduce : {"ring_allreduce", "tree_allreduce"}
        The generator all-reduces use.
    **collective_options
        Passed to every generator (``chunks``, ``channels``, ``slots``...).

    Returns
    -------
    Replay
        Transfers, the collective instances in order of first appearance, and
        the compute replayed per ``(rank, step)``.

    Raises
    ------
    TraceError
        On a bad argument, a generator that refuses its options, or a trace
        whose replay would deadlock (ranks issuing two groups' collectives in
        opposite orders).
    """
    _check_arguments(workload, endpoints, byte_scale, time_scale, tag_prefix, allreduce)
    replayed, transfers = _all_instances(workload, endpoints, byte_scale, servers, dscp,
                                         tag_prefix, allreduce, collective_options)
    keys = _instance_keys(workload)
    changed: dict[str, Transfer] = {}
    compute_s: dict[tuple[int, int], float] = {}
    for rank in range(workload.ranks):
        _walk_rank(rank, workload, keys[rank], transfers, endpoints, time_scale, changed,
                   compute_s)
    out = [changed.get(t.id, t) for group in transfers.values() for t in group]
    try:
        validate_schedule(out, endpoints)
    except ScheduleError as exc:
        raise TraceError(f"{workload.source or 'trace'}: the replay cannot run ({exc}): do "
                         f"ranks issue two groups' collectives in opposite orders?") from None
    return Replay(out, list(replayed.values()), tuple(endpoints), compute_s)


def _check_arguments(workload: Workload, endpoints: Sequence[str], byte_scale: float,
                     time_scale: float, tag_prefix: str, allreduce: str) -> None:
    validate(workload)
    if len(endpoints) != workload.ranks or len(set(endpoints)) != len(endpoints):
        raise TraceError(f"need {workload.ranks} distinct endpoints, one per rank, "
                         f"got {len(endpoints)}")
    if not byte_scale > 0 or not 0 <= time_scale < float("inf"):
        raise TraceError(f"byte_scale must be > 0 and time_scale >= 0, got {byte_scale}, "
                         f"{time_scale}")
    if not tag_prefix or "/" in tag_prefix:
        raise TraceError(f"tag_prefix must be non-empty without '/', got {tag_prefix!r}")
    if allreduce not in ALLREDUCE_ALGORITHMS:
        raise TraceError(f"allreduce must be one of {', '.join(ALLREDUCE_ALGORITHMS)}, "
                         f"got {allreduce!r}")


def workload_transfers(workload: Workload, endpoints: Sequence[str], **options: Any
                       ) -> list[Transfer]:
    """The transfers of :func:`replay` (same arguments)."""
    return replay(workload, endpoints, **options).transfers
