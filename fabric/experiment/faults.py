"""Faults injected into a running fabric: links cut, restored, flapping or slow, on a
timeline counted from a traffic run's start, and the ideal that the fabric left allows.

A :class:`Scenario` says what happens and when (pure); :func:`inject` makes it happen
on an :class:`~fabric.emulation.Emulation` while its traffic runs (in a thread, on
time) and restores everything afterwards; :func:`ideal_time_s` is what a perfect
transport could do through the same events. How the traffic fared is measured by
:mod:`fabric.analysis.disruption`.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import networkx as nx

from fabric.emulation import Emulation
from fabric.traffic import ideal
from fabric.traffic.model import Plan, Transfer

POLL_S = 0.01      # the injector's clock: how late an action may fall


@dataclass(frozen=True)
class Action:
    """At ``at`` seconds after the traffic's start, ``links`` go up or down."""

    at: float
    up: bool
    links: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Scenario:
    """What a run does to the fabric: link actions on a timeline, slow links."""

    name: str
    actions: tuple[Action, ...] = ()
    slow: tuple[tuple[str, str], ...] = ()   # links at slow_fraction of their rate
    target: str | None = None                # what fails: "leaf-spine" link or a switch
    slow_fraction: float = 0.25              # a slow link's share of its rate

    @property
    def links(self) -> tuple[tuple[str, str], ...]:
        """Every link the scenario touches (restored after the run)."""
        seen = dict.fromkeys(link for a in self.actions for link in a.links)
        return tuple(seen) + tuple(self.slow)


@dataclass
class Injection:
    """What the injector did: ``events`` are ``(wall time, up, links)``; ``slow_mbps``
    the degraded rate of the scenario's slow links (None: none)."""

    scenario: Scenario
    events: list[tuple[float, bool, tuple[tuple[str, str], ...]]] = field(default_factory=list)
    slow_mbps: float | None = None
    errors: list[str] = field(default_factory=list)
    controller_events: list[dict[str, Any]] = field(default_factory=list)


@contextmanager
def inject(emu: Emulation, plan: Plan, injection: Injection) -> Iterator[Injection]:
    """Slow the scenario's slow links now, run its actions on time in a thread while
    the traffic runs, then restore every link and wait until the controller has
    routed the healed fabric. Times count from ``plan.start_at``, read as the
    actions fall due (the runner may move it while it sets up)."""
    scenario = injection.scenario
    rate_plan, links = emu.report.rate_plan, emu.links
    # both are set once the fabric is up, which is when faults are injected
    assert rate_plan is not None and links is not None, "inject on a running emulation"
    rates = {link: rate_plan.link_mbps[frozenset(link)] for link in scenario.slow}
    stop = threading.Event()

    def act() -> None:
        try:
            for action in scenario.actions:
                while (left := plan.start_at + action.at - time.time()) > 0:
                    if stop.wait(min(left, POLL_S)):
                        return
                injection.controller_events = merge_events(
                    injection.controller_events, emu.controller.status().get("events", []))
                links.set_state(action.links, action.up)
                injection.events.append((time.time(), action.up, action.links))
        except Exception as exc:  # the run is reported invalid; links restored below
            injection.errors.append(f"{type(exc).__name__}: {exc}")

    for link, mbps in rates.items():
        injection.slow_mbps = mbps * scenario.slow_fraction
        links.set_rate(*link, injection.slow_mbps)
    thread = threading.Thread(target=act, name="failure-injector", daemon=True)
    thread.start()
    try:
        yield injection
    finally:
        stop.set()
        thread.join()
        injection.controller_events = merge_events(
            injection.controller_events, emu.controller.status().get("events", []))
        links.set_state([link for a in scenario.actions for link in a.links], True)
        for link, mbps in rates.items():
            links.set_rate(*link, mbps)
        emu.controller.wait_until_healed()


def merge_events(known: list[dict[str, Any]], latest: list[dict[str, Any]]
                 ) -> list[dict[str, Any]]:
    """``known`` plus the controller events of ``latest`` it lacks.

    The status file keeps only the controller's last events; the injector
    reads it before every action, so a long flapping run keeps the events of
    its first cut.
    """
    seen = {(e.get("time"), e.get("what")) for e in known}
    return known + [e for e in latest if (e.get("time"), e.get("what")) not in seen]


def first_cut(injection: Injection) -> float | None:
    """Wall time of the first link cut (None: nothing was cut)."""
    return next((t for t, up, _ in injection.events if not up), None)


def capacity_at(base: dict[tuple[str, str], float], scenario: Scenario, down: set,
                slow_mbps: float | None) -> dict[tuple[str, str], float]:
    """Directed link capacities with the scenario's slow links and ``down`` links
    (undirected pairs) applied."""
    cap = dict(base)
    for a, b in scenario.slow:
        if slow_mbps is not None:
            cap[(a, b)] = cap[(b, a)] = slow_mbps
    for link in down:
        a, b = tuple(link)
        cap[(a, b)] = cap[(b, a)] = 0.0
    return cap


def ideal_time_s(graph: nx.Graph, transfers: list[Transfer], base: dict[tuple[str, str], float],
                 overhead: ideal.Overhead, scenario: Scenario | None = None,
                 events: Sequence[tuple[float, bool, tuple]] = (), slow_mbps: float | None = None
                 ) -> float:
    """Seconds a perfect transport with capacity-weighted multipath routing needs for
    ``transfers`` when the scenario's events happen at their times (seconds after
    the start); without a scenario, on the healthy fabric."""
    scenario = scenario or Scenario("healthy")

    def loads(cap: dict) -> dict[str, dict]:
        pairs = {(t.src, t.dst) for t in transfers}  # a ring has few: route each once
        routed = {pair: ideal.weighted_multipath_load(graph, *pair, overhead, cap)
                  for pair in pairs}
        return {t.id: routed[(t.src, t.dst)] for t in transfers}

    def acks(data: dict[str, dict]) -> dict[str, dict]:
        return {fid: ideal.ack_load(load, overhead) for fid, load in data.items()}

    down: set = set()
    cap = capacity_at(base, scenario, down, slow_mbps)
    initial = loads(cap)
    fluid = [ideal.FluidTransfer(t.id, t.bytes, initial[t.id], 0.0, t.after,
                                 queue=t.connection, acks=ideal.ack_load(initial[t.id], overhead))
             for t in transfers]
    changes = []
    for at, up, links in sorted(events):
        for link in links:
            (down.discard if up else down.add)(frozenset(link))
        cap = capacity_at(base, scenario, down, slow_mbps)
        data = loads(cap)
        changes.append(ideal.Change(max(0.0, at), cap, data, acks(data)))
    spans = ideal.simulate(fluid, capacity_at(base, scenario, set(), slow_mbps),
                           changes=changes)
    return max(s.end for s in spans.values()) - min(s.start for s in spans.values())
