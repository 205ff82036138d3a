"""What a backend runs and what it logs: the scheduled traffic runs of an experiment,
their progress lines and the run log, the same for the emulator and the simulator."""

from __future__ import annotations

import sys
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from fabric.analysis import results
from fabric.traffic.model import Plan, Transfer
from fabric.traffic.result import RunResult

DEFAULT_ATTEMPTS = 3  # tries of a run the machine's load invalidated (``--attempts``)


class Progress:
    """One line per step on stderr, with the elapsed time and an estimate."""

    def __init__(self, total: int, name: str):
        self.total, self.name, self.done = total, name, 0
        self.start = time.monotonic()

    def step(self, what: str) -> None:
        """Report that the next step starts."""
        elapsed = time.monotonic() - self.start
        # no estimate before the first step has finished
        left = (f", ~{elapsed / self.done * (self.total - self.done):.0f} s left"
                if self.done else "")
        self.done += 1
        print(f"[{self.name} {self.done}/{self.total}] {what}  ({elapsed:.0f} s elapsed{left})",
              file=sys.stderr, flush=True)

    def say(self, what: str) -> None:
        """Report something about the current step."""
        print(f"[{self.name} {self.done}/{self.total}]   {what}", file=sys.stderr, flush=True)


@dataclass
class Scheduled:
    """One traffic run of an experiment on a running fabric.

    ``keys`` name the run: they lead its runs.csv and flows.csv rows, its
    progress line and its work directory. ``context`` carries what the
    experiment's row function needs; ``prepare`` runs on the fabric first
    (e.g. a per-route RTO); ``during`` is entered with the fabric and the
    traffic's plan just before the agents start, and left when they have
    finished (e.g. failures injected on a timeline; read ``plan.start_at``
    late: the runner may move it); ``window`` (seconds after the start) has
    the receivers count each transfer's delivered bytes at its edges
    (``recv_bytes_at_window_start``/``_end``), on either backend.
    """

    keys: dict[str, Any]
    transfers: list[Transfer]
    seed: int
    context: Any = None
    prepare: Callable[[Any], None] | None = None  # called with the running fabric
    during: Callable[[Any, Plan], AbstractContextManager] | None = None
    window: tuple[float, float] | None = None

    @property
    def name(self) -> str:
        """The run's work directory name: its key values joined."""
        return "-".join(str(v) for v in self.keys.values())


@dataclass
class RunLog:
    """What an experiment's runs produced, over all its bring-ups.

    ``attempts`` is how often a run is tried when only the load-dependent checks
    (:data:`~fabric.experiment.checks.RUN_CHECKS`) failed; ``discarded`` lists the
    attempts given up that way. ``tables`` are the experiment's own CSVs
    (name -> rows), written beside runs.csv.
    """

    rows: list[dict[str, Any]] = field(default_factory=list)
    flows: list[dict[str, Any]] = field(default_factory=list)
    reports: list[dict[str, Any]] = field(default_factory=list)
    discarded: list[dict[str, Any]] = field(default_factory=list)
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    attempts: int = DEFAULT_ATTEMPTS

    def add(self, run: Scheduled, result: RunResult, report: dict[str, Any],
            row: dict[str, Any], extra: dict[str, Any]) -> None:
        """Log one run: its runs.csv row (its keys, the experiment's ``row``, then the
        backend's ``extra``), its flows, its fidelity ``report`` and, under flow control,
        what each link paused."""
        self.reports.append(report)
        self.rows.append({**run.keys, **row, **extra})
        self.flows += [{**run.keys, "id": r["id"], "src": r["src"], "dst": r["dst"],
                        "bytes": r["bytes"], "fct_s": r["fct_s"],
                        "path": "/".join(r["path"] or [])} for r in result.transfer_rows()]
        if result.flow_control:
            self.tables.setdefault("pfc", []).extend({**run.keys, **r}
                                                     for r in result.flow_control)

    def write(self, run_dir: Path) -> dict[str, Any]:
        """Write runs.csv, flows.csv, the experiment's tables and (if any attempt was
        discarded) discarded.csv; return the merged fidelity report, with how many runs
        were repeated."""
        results.write_csv(run_dir / "runs.csv", self.rows)
        results.write_csv(run_dir / "flows.csv", self.flows)
        for name, rows in self.tables.items():
            results.write_csv(run_dir / f"{name}.csv", rows)
        if self.discarded:
            results.write_csv(run_dir / "discarded.csv", self.discarded)
        return {**results.merge_fidelity(self.reports), "attempts": self.attempts,
                "repeated_runs": sum(1 for row in self.rows if row.get("attempts", 1) > 1),
                "discarded_attempts": len(self.discarded)}


RowFunction = Callable[[Scheduled, RunResult, dict[str, Any]], dict[str, Any]]
