"""One fabric's flow control while it runs: its accounting and daemon, their counters,
and what a traffic run's lossless lanes did (the verdicts beside its results).

The mechanism (accounting program, daemon config, counters) is
:mod:`fabric.emulation.flowcontrol`'s; this object owns one running instance.
"""

from __future__ import annotations

import csv
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import networkx as nx

from fabric.emulation import fidelity, flowcontrol, runstate
from fabric.emulation.deadlock_watch import DeadlockDetector
from fabric.host import system
from fabric.model import graph as fg
from fabric.model.flowcontrol import FlowControl, lossless_lanes, spare_headroom_pkts
from fabric.model.lanes import LaneConfig
from fabric.traffic.model import Plan


@dataclass
class LosslessWatch:
    """What flow control did during a run: rows per link and lane, its checks, and the
    deadlocks the detector saw form (:class:`~fabric.emulation.deadlock_watch.Formation`
    rows)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    checks: list[fidelity.Check] = field(default_factory=list)
    deadlocks: list[dict[str, Any]] = field(default_factory=list)


class FlowControlSession:
    """Flow control on one fabric: checked, started, read and stopped.

    Parameters
    ----------
    graph : networkx.Graph
        The fabric.
    flow_control : FlowControl
        Headroom, thresholds and reaction of the lossless lanes.
    lanes : LaneConfig
        The lanes (which are lossless, their shares).
    queue_pkts : int
        Every egress queue's bound, in packets.
    frame_bytes : int
        Wire bytes of the workload's full-size packets.
    """

    def __init__(self, graph: nx.Graph, flow_control: FlowControl, lanes: LaneConfig,
                 queue_pkts: int, frame_bytes: int):
        self.graph = graph
        self.flow_control = flow_control
        self.lanes = lossless_lanes(lanes)
        self._lane_config = lanes
        self.queue_pkts = queue_pkts
        self.frame_bytes = frame_bytes
        self.counters: flowcontrol.Counters | None = None
        self.map_ids: dict[str, int] = {}  # the accounting's maps, by name
        self._object: Path | None = None
        self._daemon: subprocess.Popen | None = None
        self._links: list[dict[str, Any]] = []  # the daemon's links (ids, reactions)
        self._host_pids: dict[str, int] = {}
        self._events: Path | None = None
        # the installed routes' buffer dependencies, when fabric's own policy routes
        # (the bring-up sets them): without them the deadlock detector does not run
        self.dependencies: nx.DiGraph | None = None

    def check(self) -> None:
        """Before any change: the fabric can take it and its accounting builds."""
        flowcontrol.check(self.graph, self._lane_config)
        self._object = flowcontrol.build_object()

    def start(self, host_pids: dict[str, int], link_mbps: dict[frozenset, float],
              workdir: Path, state: runstate.RunState, cpus: set[int] | None) -> list[str]:
        """Attach the accounting and start the daemon (recorded in the undo log);
        return warnings (no real-time priority)."""
        self._host_pids = host_pids
        self._events = workdir / "pfc-events.csv"
        assert self._object is not None  # check() built it before any change
        config = flowcontrol.daemon_config(
            self.graph, host_pids, link_mbps, self.flow_control, self._lane_config,
            self.queue_pkts, self.frame_bytes, self._object, self._events)
        self._daemon, status, warnings = flowcontrol.start_daemon(config, workdir, cpus)
        state.add_process(self._daemon.pid, expect="pfc_daemon")
        self.counters = flowcontrol.Counters(status, len(config["links"]))
        self.map_ids = status["maps"]
        self._links = config["links"]
        return warnings

    @property
    def pid(self) -> int | None:
        """The daemon's process id (None before it starts)."""
        return self._daemon.pid if self._daemon is not None else None

    def running(self) -> bool:
        """True while the daemon serves."""
        return self._daemon is not None and self._daemon.poll() is None

    def pause_lateness(self, since_ns: int) -> dict[tuple[str, int], float]:
        """(link name, lane) -> the most any of its pauses since ``since_ns``
        (``time.monotonic_ns``) took effect after the modelled reaction, in packet times
        of its link (:func:`flowcontrol.pause_lateness`)."""
        if self._events is None:
            return {}
        with open(self._events, newline="") as handle:
            return flowcontrol.pause_lateness(csv.DictReader(handle), self._links, since_ns)

    def queue_drops(self) -> dict[tuple[str, int], int]:
        """(device, lane) -> packets every egress queue of a lossless lane dropped so far,
        switch ports and endpoint NICs."""
        stats = system.run(["tc", "-s", "qdisc", "show"]).stdout
        for ep in fg.endpoints(self.graph):
            stats += system.run(["nsenter", "-t", str(self._host_pids[ep]), "-n",
                                 "tc", "-s", "qdisc", "show"]).stdout
        return flowcontrol.lane_drops(stats, self.lanes)

    @contextmanager
    def watch(self, plan: Plan) -> Iterator[LosslessWatch]:
        """Measure flow control around the body: every link direction's pauses (their
        share of the time from ``plan.start_at``, read when the body ends: the agents'
        common start is only set inside it), deepest buffer and drops; the check that
        no lossless lane dropped a packet, at a switch's admission or in any egress
        queue; drops behind a pause that came later than the headroom covers are the
        machine's load (it ran the daemon late), counted in a check of their own."""
        watch = LosslessWatch()
        assert self.counters is not None  # set by start(); a run watches a started session
        before, queues_before = self.counters.read(self.lanes), self.queue_drops()
        self.counters.reset_max_held(self.lanes)
        since = time.monotonic_ns()
        detector = self._detector(plan)
        if detector:
            detector.start()
        try:
            yield watch
        finally:
            watch.deadlocks = detector.stop() if detector else []
        after, queues_after = self.counters.read(self.lanes), self.queue_drops()
        watch.rows = flowcontrol.link_rows(self.graph, before, after,
                                           time.time() - plan.start_at, self.frame_bytes)
        late = self.pause_lateness(since)
        spare = spare_headroom_pkts(self.flow_control)
        # a lane the watchdog released takes no pause for a while: what it then drops
        # is the watchdog's (the fabric's), not the emulator's
        released = [r for r in watch.rows if r["watchdog_trips"]]
        by_watchdog = sum(r["drops"] for r in released)
        admission = sum(r["drops"] for r in watch.rows) - by_watchdog
        behind_late = flowcontrol.drops_behind_late_pauses(
            [r for r in watch.rows if not r["watchdog_trips"]], late, spare)
        queued = sum(v - queues_before.get(k, 0) for k, v in queues_after.items())
        dropped = admission - behind_late + queued
        worst = max(late.values(), default=0.0)
        running = self.running()
        watch.checks += [
            fidelity.Check("lossless_drops", dropped, 0, dropped == 0,
                           f"{admission} at a full headroom ({behind_late} of them behind a "
                           f"pause that came late: see late_pause_drops), {queued} in egress "
                           f"queues of lossless lanes; not counted: {by_watchdog} on "
                           f"{len(released)} link lanes the watchdog released"),
            # the fabric's, not the emulator's: reported, never a defect of the run
            fidelity.Check("watchdog_drops", by_watchdog, None, True,
                           f"drops on {len(released)} link lanes after the watchdog "
                           f"released their pause"),
            fidelity.Check("pfc_deadlocks", len(watch.deadlocks), None, True,
                           "; ".join(f"{d['cycle']} (lane {d['lane']}) at {d['detected_s']} s"
                                     + ("" if d["cleared_s"] is None
                                        else f", cleared at {d['cleared_s']} s")
                                     for d in watch.deadlocks) or "none formed"),
            fidelity.Check("late_pause_drops", behind_late, 0, behind_late == 0,
                           f"pauses took effect up to {worst:.2f} packet times after the "
                           f"modelled reaction; the headroom leaves {spare:g} spare"),
            fidelity.Check("flow_control_daemon", float(running), 1.0, running,
                           "serving" if running else "it exited: see pfc.log")]

    def _detector(self, plan: Plan) -> DeadlockDetector | None:
        """The run's deadlock detector (None without the routes' dependencies)."""
        if self.dependencies is None or self.counters is None:
            return None
        counters, lanes = self.counters, self.lanes
        directions = flowcontrol.link_directions(self.graph)
        links = {int(link["id"]): ((directions[int(link["id"]) - 1].src,
                                    directions[int(link["id"]) - 1].dst), link["packet_ns"])
                 for link in self._links}
        return DeadlockDetector(lambda: counters.closed_since(lanes), links, self.dependencies,
                                self.flow_control.deadlock_after_pkts, lambda: plan.start_at)

    def stop(self) -> None:
        """Stop the daemon (it opens its gates while the links exist); idempotent."""
        if self.counters is not None:
            self.counters.close()
            self.counters = None
        if self._daemon is not None:
            self._daemon.terminate()
            try:
                self._daemon.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._daemon.kill()
                self._daemon.wait()
            self._daemon = None
        self._links = []
        self.map_ids = {}
