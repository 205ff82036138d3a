"""How a fault disrupted a run's traffic, from its transfer rows (pure): how long
until packets found a surviving path, the longest stall of any connection, what
was never delivered, and deliveries over time."""

from __future__ import annotations

from typing import Any, Hashable, Mapping


def reroute_ms(rows: list[dict[str, Any]], cut: float | None,
               connection_of: Mapping[str, Hashable] | None = None) -> float | None:
    """From ``cut`` to the send time of the first packet sent at or after it that
    arrived, for the worst connection in progress at the cut (ms).

    A packet sent after the cut that arrived took a surviving path. A connection
    (``connection_of``: transfer id -> its connection; default, each transfer its
    own) sends its transfers in order, so a transfer queued behind another is not
    waiting for a path. None without a cut, or when no connection with arrivals was
    in progress.
    """
    if cut is None:
        return None
    worst = None
    for group in _by_connection(rows, connection_of):
        if not any(start is not None and start <= cut and (end is None or end > cut)
                   for start, end in _spans(group)):
            continue
        sent = [s for row in group for _, s in row.get("recv_arrivals") or () if s >= cut]
        if not sent:
            continue
        delay = (min(sent) - cut) * 1e3
        worst = delay if worst is None else max(worst, delay)
    return None if worst is None else round(worst, 1)


def controller_ms(events: list[dict[str, Any]], cut: float | None) -> float | None:
    """From ``cut`` to the controller's first route update for a port that went down
    (ms; None without a cut, or when the controller's status did not show one)."""
    if cut is None:
        return None
    after = [e["time"] for e in events if e.get("time", 0) >= cut and " down:" in e.get("what", "")]
    return round((min(after) - cut) * 1e3, 1) if after else None


def stall_ms(rows: list[dict[str, Any]],
             connection_of: Mapping[str, Hashable] | None = None) -> float | None:
    """The longest gap in any connection's delivery (ms) while it owed data: between
    a transfer's start and the connection's next arrival, or between two arrivals.
    ``connection_of`` as for :func:`reroute_ms`: a transfer waiting behind another on
    its connection is not stalled while the other arrives. None without arrival
    records."""
    longest = None
    for group in _by_connection(rows, connection_of):
        spans = [(start, end) for start, end in _spans(group) if start is not None]
        arrivals = [a for row in group for a, _ in row.get("recv_arrivals") or ()]
        if not spans or not arrivals:
            continue
        points = sorted(set(arrivals) | {start for start, _ in spans})
        for a, b in zip(points, points[1:]):
            middle = (a + b) / 2
            if any(start <= middle and (end is None or middle <= end) for start, end in spans):
                longest = b - a if longest is None else max(longest, b - a)
    return None if longest is None else round(longest * 1e3, 1)


def _by_connection(rows: list[dict[str, Any]],
                   connection_of: Mapping[str, Hashable] | None) -> list[list[dict[str, Any]]]:
    """``rows`` grouped by their transfers' connection (each alone without a map)."""
    if connection_of is None:
        return [[row] for row in rows]
    groups: dict[Hashable, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(connection_of.get(row["id"], row["id"]), []).append(row)
    return list(groups.values())


def _spans(rows: list[dict[str, Any]]) -> list[tuple[float | None, float | None]]:
    """Each transfer's (start, last arrival)."""
    return [(row.get("send_start"), row.get("recv_end")) for row in rows]


def lost_bytes(rows: list[dict[str, Any]]) -> int:
    """Bytes a receiver never got (every transfer's size minus what arrived once)."""
    return sum(max(0, r["bytes"] - (r.get("recv_bytes") or 0)) for r in rows)


def delivery_timeline(rows: list[dict[str, Any]], origin: float,
                      bin_s: float) -> list[tuple[float, int]]:
    """Newly delivered packets per bin, ``(bin start after origin, packets)``, over
    every transfer; empty bins inside the run included."""
    counts: dict[int, int] = {}
    for row in rows:
        for arrived, _ in row.get("recv_arrivals") or ():
            index = int((arrived - origin) // bin_s)
            counts[index] = counts.get(index, 0) + 1
    if not counts:
        return []
    return [(round(i * bin_s, 4), counts.get(i, 0)) for i in range(min(counts), max(counts) + 1)]
