"""Traffic analysis: flow collisions, link flow counts, FCT, goodput, fairness (pure).

Times are seconds on any common clock; a flow is active on the half-open
interval ``[start, end)``, so a flow ending when another starts does not
overlap it. Links are directed: ``(a, b)`` is the a-to-b direction.

Result rows are the agents' reports (:func:`fabric.traffic.model.result_dict`):
mappings with ``id``, ``start``, ``end`` (None when unfinished) and ``bytes``.
A transfer may have several rows (sender and receiver): a transfer spans from
the earliest start to the latest end of its rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence, Union

Link = tuple[str, str]
Path = list[Link]  # one flow's directed links, in order


@dataclass(frozen=True)
class FlowSpan:
    """One flow's activity: ``[start, end)`` on ``path``; ``bytes`` for the long-flow filter."""

    start: float
    end: float
    path: tuple[Link, ...]
    bytes: int | None = None


FlowLike = Union[FlowSpan, tuple]  # FlowSpan or (start, end, path[, bytes])


def links_of(nodes: Sequence[str]) -> Path:
    """Return the directed links of a node path ``[h0, leaf, spine, ...]``."""
    return list(zip(nodes[:-1], nodes[1:]))


def _span(value: FlowLike) -> FlowSpan:
    if isinstance(value, FlowSpan):
        start, end, path, nbytes = value.start, value.end, value.path, value.bytes
    elif len(value) in (3, 4):
        start, end, path = value[:3]
        nbytes = value[3] if len(value) == 4 else None
    else:
        raise ValueError(f"a flow is (start, end, path[, bytes]), got {value!r}")
    # Links become hashable tuples whatever sequence type the caller used.
    span = FlowSpan(float(start), float(end), tuple((a, b) for a, b in path), nbytes)
    if span.end < span.start:
        raise ValueError(f"flow ends before it starts: {span}")
    return span


def _long_flows(flows: Mapping[str, FlowLike], min_bytes: int | None,
                min_seconds: float | None) -> dict[str, FlowSpan]:
    """Keep the flows that count as long (all of them when no filter is set)."""
    kept = {}
    for fid, value in flows.items():
        span = _span(value)
        if min_bytes is not None:
            if span.bytes is None:
                raise ValueError(f"flow {fid} has no byte count for the min_bytes filter")
            if span.bytes < min_bytes:
                continue
        if min_seconds is not None and span.end - span.start < min_seconds:
            continue
        kept[fid] = span
    return kept


def link_flow_counts(flows: Mapping[str, FlowLike], *, min_bytes: int | None = None,
                     min_seconds: float | None = None) -> dict[Link, list[tuple[float, int]]]:
    """Return the number of active flows on each directed link over time.

    Parameters
    ----------
    flows : mapping
        Flow id -> :class:`FlowSpan` or ``(start, end, path[, bytes])``.
    min_bytes, min_seconds : optional
        Count only flows with at least this many bytes / this duration.

    Returns
    -------
    dict
        Link -> step function as ``[(time, count), ...]``: ``count`` flows
        are active from ``time`` until the next sample; the last sample has
        count 0. Links no counted flow crosses are absent.
    """
    events: dict[Link, list[tuple[float, int]]] = {}
    for span in _long_flows(flows, min_bytes, min_seconds).values():
        if span.end == span.start:
            continue  # no time on the link
        for link in dict.fromkeys(span.path):  # a link listed twice is one flow
            events.setdefault(link, []).extend(((span.start, 1), (span.end, -1)))
    counts: dict[Link, list[tuple[float, int]]] = {}
    for link, evs in events.items():
        evs.sort()
        samples: list[tuple[float, int]] = []
        active = 0
        i = 0
        while i < len(evs):
            t = evs[i][0]
            while i < len(evs) and evs[i][0] == t:  # all changes at one instant together
                active += evs[i][1]
                i += 1
            if not samples or samples[-1][1] != active:
                samples.append((t, active))
        counts[link] = samples
    return counts


def _union_length(intervals: Iterable[tuple[float, float]]) -> float:
    total, current = 0.0, None  # the interval being merged
    for start, end in sorted(intervals):
        if current is None or start > current[1]:
            if current is not None:
                total += current[1] - current[0]
            current = (start, end)
        else:
            current = (current[0], max(current[1], end))
    if current is not None:
        total += current[1] - current[0]
    return total


@dataclass(frozen=True)
class Collisions:
    """Flow collisions: two or more concurrent long flows on one directed link.

    Attributes
    ----------
    count : int
        Directed links that ever carried >= 2 concurrent long flows.
    episodes : int
        Maximal (link, time interval) runs with >= 2 concurrent flows.
    max_flows_per_link : int
        Most flows ever active at once on one link (0 without flows).
    share_of_time_in_collision : float
        Time during which any link had >= 2 concurrent flows, over the time
        any counted flow was active (0.0 when nothing was active).
    collision_seconds, active_seconds : float
        Numerator and denominator of that share.
    links : tuple
        The colliding links, sorted.
    """

    count: int
    episodes: int
    max_flows_per_link: int
    share_of_time_in_collision: float
    collision_seconds: float
    active_seconds: float
    links: tuple[Link, ...]


def collisions(flows: Mapping[str, FlowLike], *, min_bytes: int | None = None,
               min_seconds: float | None = None) -> Collisions:
    """Sweep the flows' link events and report collisions (see :class:`Collisions`).

    Parameters
    ----------
    flows : mapping
        Flow id -> :class:`FlowSpan` or ``(start, end, path[, bytes])``.
    min_bytes, min_seconds : optional
        Long-flow filter: only flows with at least this many bytes (then every
        flow needs a byte count) / lasting at least this long count.
    """
    kept = _long_flows(flows, min_bytes, min_seconds)
    counts = link_flow_counts(kept)
    colliding: list[Link] = []
    episodes, peak = 0, 0
    hot: list[tuple[float, float]] = []
    for link, samples in counts.items():
        peak = max([peak] + [c for _, c in samples])
        run_start = None
        for (t, c), (t_next, _) in zip(samples, samples[1:] + [(math.inf, 0)]):
            if c >= 2:
                hot.append((t, t_next))
                if run_start is None:
                    run_start = t
                    episodes += 1
            else:
                run_start = None
        if any(c >= 2 for _, c in samples):
            colliding.append(link)
    active = _union_length((s.start, s.end) for s in kept.values())
    in_collision = _union_length(hot)
    return Collisions(len(colliding), episodes, peak,
                      in_collision / active if active > 0 else 0.0, in_collision, active,
                      tuple(sorted(colliding)))


def balls_into_bins_expected_utilisation(n: int) -> float:
    """Expected fraction of ``n`` bins hit by ``n`` balls: ``1 - (1 - 1/n)**n``.

    The ECMP expectation: ``n`` flows hashed onto ``n`` equal paths use only
    this share of them (about 63% for large ``n``), the rest collide.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return 1 - (1 - 1 / n) ** n


def percentile(values: Sequence[float], q: float) -> float:
    """Return the ``q``-th percentile (0..100), interpolating linearly as numpy's default."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in 0..100, got {q}")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _spans_by_id(results: Iterable[Mapping[str, Any]]) -> dict[str, tuple[float, float | None]]:
    """Transfer id -> (earliest start, latest end or None if any row is unfinished).

    A transfer that never started has no span.
    """
    spans: dict[str, tuple[float, float | None]] = {}
    for row in results:
        if row["start"] is None:
            continue
        start, end = float(row["start"]), row["end"]
        if row["id"] not in spans:
            spans[row["id"]] = (start, None if end is None else float(end))
            continue
        s0, e0 = spans[row["id"]]
        merged_end = None if end is None or e0 is None else max(e0, float(end))
        spans[row["id"]] = (min(s0, start), merged_end)
    return spans


@dataclass(frozen=True)
class FctStats:
    """Flow completion times in seconds (NaN when no flow finished)."""

    count: int
    unfinished: int
    mean: float
    p50: float
    p90: float
    p99: float
    min: float
    max: float


def fct_stats(results: Iterable[Mapping[str, Any]]) -> FctStats:
    """Summarise flow completion times of result rows (grouped by transfer id)."""
    spans = _spans_by_id(results)
    fcts = [end - start for start, end in spans.values() if end is not None]
    unfinished = len(spans) - len(fcts)
    if not fcts:
        return FctStats(0, unfinished, *([math.nan] * 6))
    return FctStats(len(fcts), unfinished, sum(fcts) / len(fcts), percentile(fcts, 50),
                    percentile(fcts, 90), percentile(fcts, 99), min(fcts), max(fcts))


def goodput_mbps(nbytes: float, seconds: float) -> float:
    """Return ``nbytes`` over ``seconds`` in Mbit/s (10^6 bit/s)."""
    if not seconds > 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    return nbytes * 8 / seconds / 1e6


def jain_fairness(rates: Sequence[float]) -> float:
    """Return Jain's index ``(sum x)^2 / (n * sum x^2)``: 1 is fair, 1/n is one-takes-all.

    All-zero rates count as fair (1.0).
    """
    if not rates:
        raise ValueError("jain_fairness of no rates")
    if any(r < 0 for r in rates):
        raise ValueError(f"rates must be >= 0, got {list(rates)}")
    squares = sum(r * r for r in rates)
    return 1.0 if squares == 0 else sum(rates) ** 2 / (len(rates) * squares)


@dataclass(frozen=True)
class RoundTime:
    """One striped-read round: first request start to last stripe end (None if unfinished)."""

    start: float | None
    end: float | None
    duration_s: float | None
    goodput_mbps: float | None


def round_times(results: Iterable[Mapping[str, Any]], rounds: Mapping[int, Sequence[str]],
                block_bytes: int) -> dict[int, RoundTime]:
    """Return each round's duration and goodput ``block_bytes * 8 / duration``.

    Parameters
    ----------
    results : iterable of mapping
        Result rows of the run.
    rounds : mapping
        Round -> transfer ids, as :func:`fabric.traffic.storage.incast_rounds`.
    block_bytes : int
        Bytes the client reads per round.

    Returns
    -------
    dict
        Round -> :class:`RoundTime`; a round with a missing or unfinished
        transfer has no end, duration or goodput.
    """
    spans = _spans_by_id(results)
    out: dict[int, RoundTime] = {}
    for k, ids in sorted(rounds.items()):
        mine = [spans[i] for i in ids if i in spans]
        start = min((s for s, _ in mine), default=None)
        ends = [e for _, e in mine if e is not None]
        if start is None or len(mine) < len(ids) or len(ends) < len(mine):
            out[k] = RoundTime(start, None, None, None)
            continue
        end = max(ends)
        duration = end - start
        out[k] = RoundTime(start, end, duration,
                           goodput_mbps(block_bytes, duration) if duration > 0 else None)
    return out


def window_throughput(rows: Iterable[Mapping[str, Any]], window: tuple[float, float],
                      host_mbps: float) -> float | None:
    """Mean over transfers of the rate each delivered within ``window`` (seconds after
    the start), over ``host_mbps``: htsim's steady-state measure, fair only while every
    transfer is still running through the window.

    ``rows`` are a run's transfer rows with the receivers' counts at the window's edges
    (``recv_bytes_at_window_start``/``_end``, on either backend); None when a row has
    none (the run counted no window, or a receiver never reported).
    """
    seconds = window[1] - window[0]
    if not seconds > 0:
        raise ValueError(f"a window must end after it starts, got {window}")
    rates = []
    for row in rows:
        start, end = row.get("recv_bytes_at_window_start"), row.get("recv_bytes_at_window_end")
        if start is None or end is None:
            return None
        rates.append((end - start) * 8 / seconds / (host_mbps * 1e6))
    return sum(rates) / len(rates) if rates else None

