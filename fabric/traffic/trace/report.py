"""Step and collective times of a replayed trace, from per-transfer timing rows (pure).

``rows`` maps a transfer id to ``(start, end, bytes)`` (sender start,
receiver end, in seconds of one clock; None for a transfer that did not
finish), as :func:`fabric.analysis.report.metric_rows` gives them.

Definitions, over the collectives that crossed the fabric:

- a collective runs from its first transfer's start to its last transfer's
  end; its bus bandwidth is nccl-tests' (:func:`fabric.traffic.collectives.busbw`)
  on the replayed size (a point-to-point message: bytes over seconds);
- a rank's step ``s`` ends with the last end of a transfer it sent or
  received in a collective of step ``s``; the step ends when its last rank
  does (that rank is the *critical* rank) and starts when the previous step
  ended (the first: at ``origin``, by default the earliest transfer start);
- the step's *exposed communication* is its time minus the compute the
  critical rank replayed in that step (:attr:`Replay.compute_s`), never below
  zero: the time that rank spent waiting for the network rather than
  computing.

Each figure sits beside an ideal the caller gives (an ideal bus bandwidth, an
ideal step time) and their ratio.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Tuple

from fabric.traffic import collectives
from fabric.traffic.trace.schedule import Replay, ReplayedCollective

Row = Tuple[Optional[float], Optional[float], int]


@dataclass(frozen=True)
class CollectiveTime:
    """One fabric collective's time and bus bandwidth (None when unfinished)."""

    key: str
    name: str
    group: str | None
    step: int
    ranks: int
    bytes: int  # replayed
    start: float | None
    end: float | None
    seconds: float | None
    busbw: float | None  # bytes per second
    ideal_busbw: float | None
    ratio: float | None  # busbw / ideal_busbw


@dataclass(frozen=True)
class StepTime:
    """One step's time, its critical rank's compute and exposed communication."""

    step: int
    start: float
    end: float
    seconds: float
    critical_rank: int
    compute_s: float
    exposed_s: float
    ideal_s: float | None
    ratio: float | None  # seconds / ideal_s


def key_of(transfer_id: str) -> str:
    """The collective key (``prefix/stepS/name-group-k``) a transfer id starts with."""
    return "/".join(transfer_id.split("/")[:3])


def _spans(replay: Replay, rows: Mapping[str, Row]) -> dict[str, list[tuple]]:
    """Collective key -> ``(transfer, row)`` of each of its transfers."""
    out: dict[str, list[tuple]] = {}
    for t in replay.transfers:
        out.setdefault(key_of(t.id), []).append((t, rows.get(t.id)))
    return out


def _busbw(c: ReplayedCollective, seconds: float) -> float:
    if c.group is None:
        return collectives.algbw(c.replayed_bytes, seconds)
    return collectives.busbw(c.name, len(c.ranks), c.replayed_bytes, seconds)


def collective_times(replay: Replay, rows: Mapping[str, Row],
                     ideal_busbw: float | None = None) -> list[CollectiveTime]:
    """Time and bus bandwidth of every collective that crossed the fabric, in replay order.

    Parameters
    ----------
    replay : Replay
        What :func:`~fabric.traffic.trace.schedule.replay` returned.
    rows : mapping
        Transfer id -> ``(start, end, bytes)``.
    ideal_busbw : float, optional
        The bus bandwidth (bytes per second) to compare with, e.g. the
        emulated link rate.
    """
    spans = _spans(replay, rows)
    out = []
    for c in replay.collectives:
        if c.skipped:
            continue
        got = [row for _, row in spans.get(c.key, [])]
        starts = [r[0] for r in got if r is not None and r[0] is not None]
        ends = [r[1] for r in got if r is not None and r[1] is not None]
        done = bool(got) and len(starts) == len(ends) == len(got)
        start = min(starts) if done else None
        end = max(ends) if done else None
        seconds = end - start if end is not None and start is not None else None
        bw = _busbw(c, seconds) if seconds else None
        ratio = bw / ideal_busbw if bw is not None and ideal_busbw else None
        out.append(CollectiveTime(c.key, c.name, c.group, c.step, len(c.ranks), c.replayed_bytes,
                                  start, end, seconds, bw, ideal_busbw, ratio))
    return out


def _rank_step_ends(replay: Replay, rows: Mapping[str, Row]) -> dict[int, dict[int, float]]:
    """Step -> rank -> the last end of a transfer the rank sent or received in it."""
    rank_of = {e: r for r, e in enumerate(replay.endpoints)}
    step_of = {c.key: c.step for c in replay.collectives}
    ends: dict[int, dict[int, float]] = {}
    for t in replay.transfers:
        row = rows.get(t.id)
        if row is None or row[1] is None:
            continue
        per_rank = ends.setdefault(step_of[key_of(t.id)], {})
        for ep in (t.src, t.dst):
            r = rank_of[ep]
            per_rank[r] = max(per_rank.get(r, row[1]), row[1])
    return ends


def step_times(replay: Replay, rows: Mapping[str, Row],
               ideal_s: float | Mapping[int, float] | None = None,
               origin: float | None = None) -> list[StepTime]:
    """Every step's time, critical rank, compute and exposed communication, by step.

    Parameters
    ----------
    replay, rows
        As for :func:`collective_times`.
    ideal_s : float or mapping, optional
        The ideal step time, for all steps or per step.
    origin : float, optional
        When the first step started (default: the earliest transfer start).
    """
    starts = [r[0] for r in rows.values() if r is not None and r[0] is not None]
    previous = origin if origin is not None else min(starts, default=0.0)
    out = []
    for step, per_rank in sorted(_rank_step_ends(replay, rows).items()):
        critical = max(sorted(per_rank), key=lambda r: per_rank[r])
        end = per_rank[critical]
        seconds = end - previous
        compute = replay.compute_s.get((critical, step), 0.0)
        ideal = ideal_s.get(step) if isinstance(ideal_s, Mapping) else ideal_s
        out.append(StepTime(step, previous, end, seconds, critical, compute,
                            max(0.0, seconds - compute), ideal,
                            seconds / ideal if ideal else None))
        previous = end
    return out
