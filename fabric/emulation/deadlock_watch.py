"""The run-time PFC deadlock detector: a cycle of links each held paused by the next.

While a run's traffic flows, a thread reads the flow-control daemon's gates (when each
lane of each link closed, :class:`fabric.emulation.flowcontrol.Counters`) a few times a
threshold. A link whose gate has stayed closed for longer than the threshold, in packet
times of the link, is *held*; a cycle of the installed routes' buffer dependencies
(:func:`fabric.routing.deadlock.held_cycle`) among one lane's held links is a deadlock:
nothing in it can drain, whatever the traffic does next. The detector records when each
such cycle formed and when it cleared (the watchdog broke a pause, or the run ended).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import networkx as nx

from fabric.routing.deadlock import describe_cycle, held_cycle

MIN_POLL_S = 0.01
POLLS_PER_THRESHOLD = 4


@dataclass
class Formation:
    """One deadlock: the cycle, when it was seen (seconds after the run's start) and when
    it cleared (None: still held when the run ended)."""

    lane: int
    links: tuple[tuple[str, str], ...]
    detected_s: float
    cleared_s: float | None = None

    def row(self) -> dict[str, Any]:
        """The JSON form, as a run's result carries it."""
        return {"lane": self.lane, "cycle": describe_cycle(list(self.links)),
                "links": [f"{a}>{b}" for a, b in self.links],
                "detected_s": round(self.detected_s, 4),
                "cleared_s": None if self.cleared_s is None else round(self.cleared_s, 4)}


@dataclass
class DeadlockDetector:
    """Watches one run (start it, then stop it when the traffic is done).

    Parameters
    ----------
    closed_since : callable
        ``() -> {(link id, lane): monotonic ns its gate closed}`` for the gates closed now.
    links : dict
        Link id -> ``((src, dst), packet ns)``: which directed link it is, and its
        packet time.
    deps : networkx.DiGraph
        The installed routes' buffer dependencies.
    held_pkts : float
        How long, in packet times of its link, a pause must last before it counts.
    start_at : callable
        ``() -> wall time`` the run started (read late: the runner sets it as the
        agents start).
    """

    closed_since: Callable[[], dict[tuple[int, int], int]]
    links: dict[int, tuple[tuple[str, str], float]]
    deps: nx.DiGraph
    held_pkts: float
    start_at: Callable[[], float]
    formations: list[Formation] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @property
    def poll_s(self) -> float:
        """Seconds between reads: a few per threshold of the slowest link."""
        slowest = max((ns for _, ns in self.links.values()), default=0.0)
        return max(MIN_POLL_S, self.held_pkts * slowest / 1e9 / POLLS_PER_THRESHOLD)

    def start(self) -> None:
        """Start watching, in a thread of its own."""
        self._thread = threading.Thread(target=self._watch, name="deadlock-detector",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> list[dict[str, Any]]:
        """Stop watching; every formation, as rows (one still held ends uncleared)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return [f.row() for f in self.formations]

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.step(time.monotonic_ns())
            except (OSError, RuntimeError) as exc:  # the maps went away: teardown
                self.errors.append(str(exc))
                return

    def step(self, now_ns: int) -> None:
        """One read: record each lane's cycle of held links that is new, and clear the
        ones no longer held."""
        held: dict[int, set[tuple[str, str]]] = {}
        for (ident, lane), since in self.closed_since().items():
            link, packet_ns = self.links[ident]
            if now_ns - since >= self.held_pkts * packet_ns:
                held.setdefault(lane, set()).add(link)
        elapsed = time.time() - self.start_at()
        for formation in self.formations:
            if formation.cleared_s is None and not set(formation.links) <= held.get(
                    formation.lane, set()):
                formation.cleared_s = elapsed
        for lane, links in held.items():
            cycle = held_cycle(self.deps, links)
            if cycle and not any(f.cleared_s is None and f.lane == lane
                                 and set(f.links) <= links for f in self.formations):
                self.formations.append(Formation(lane, tuple(cycle), elapsed))
