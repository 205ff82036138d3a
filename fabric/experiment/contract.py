"""The experiment contract: what every experiment declares and implements.

An experiment is one module under ``experiments/`` holding one subclass of
:class:`Experiment`:

- **declared**: ``name``, ``question``, ``modes`` (``quick`` and ``full``, each
  a :class:`Mode` with at least its default number of seeds), ``options`` (its
  own command-line :class:`~fabric.experiment.options.Option` s), ``anchors``
  (the published figures it is read against), ``sets_flow_control`` (true when
  it chooses each fabric's flow control and lanes itself, e.g. to compare lossy
  and lossless: ``--flow-control`` and ``--preset`` are then refused),
  ``simulates`` (true when its runs also take the ns-3 backend, ``--backend ns3``:
  :mod:`fabric.experiment.simulated`), ``seed_preset`` (the preset of the seed
  system it asks about: a run on the roce transport, the default, takes it unless
  ``--preset``, ``--flow-control`` or ``--transport tcp`` is given);
- **pure**, before anything changes on the system: :meth:`~Experiment.topologies`,
  :meth:`~Experiment.check`, :meth:`~Experiment.run_count`,
  :meth:`~Experiment.estimate_s`;
- **the measurement** (root): :meth:`~Experiment.measure` brings fabrics up and
  runs traffic through a :class:`~fabric.experiment.loop.Runner`;
- **the results**: :meth:`~Experiment.finish` (rows that compare runs),
  :meth:`~Experiment.table` (the summary's headline rows),
  :meth:`~Experiment.notes`, :meth:`~Experiment.checks` (its own validity
  checks beyond every run's fidelity);
- **the figures** (no root): :meth:`~Experiment.figures`, one function per
  figure, each drawn from the run directory alone.

:meth:`Experiment.run` and :meth:`Experiment.plot` are the same for every
experiment: they call the above in that order.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping

import topologies
from fabric.analysis import plotstyle, results
from fabric.analysis.provenance import Provenance, read as read_provenance, work_text
from fabric.emulation import fidelity
from fabric.experiment.backend import Backend
from fabric.experiment.context import RunContext
from fabric.experiment.loop import Runner
from fabric.experiment.options import Option


@dataclass(frozen=True)
class Mode:
    """One variant of an experiment: ``quick`` (a few minutes, in the test suite) or
    ``full``. Experiments subclass it with their own grid (iterations, senders...)."""

    seeds: int


@dataclass
class Measured:
    """What :meth:`Experiment.measure` found beyond the run log's rows: the run's
    ``parameters`` (for the manifest) and fields for ``summary.json``."""

    parameters: dict[str, Any]
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass
class Outcome:
    """A finished run: the summary's table and notes, the merged fidelity report, the
    seeds and the parameters (the command line prints and records them)."""

    table: list[dict[str, Any]]
    fidelity: dict[str, Any]
    seeds: list[int]
    parameters: dict[str, Any]
    notes: list[str]

    @property
    def valid(self) -> bool:
        """True when every run passed every fidelity check."""
        return bool(self.fidelity["valid"])


@dataclass
class RunData:
    """What a figure is drawn from: pyplot in the paper style, ``summary.json``,
    ``runs.csv``, the run's :class:`~fabric.analysis.provenance.Provenance` (from
    ``manifest.json``; empty without one) and, by name, any other CSV of the run
    directory."""

    run_dir: Path
    plt: Any
    summary: dict[str, Any]
    runs: list[dict[str, str]]
    provenance: Provenance = field(default_factory=Provenance)
    _tables: dict[str, list[dict[str, str]]] = field(default_factory=dict)

    @classmethod
    def read(cls, run_dir: Path) -> RunData:
        """Read a run directory (no root needed)."""
        return cls(run_dir, plotstyle.pyplot(), results.read_json(run_dir / "summary.json"),
                   results.read_csv(run_dir / "runs.csv"), read_provenance(run_dir))

    def csv(self, name: str) -> list[dict[str, str]]:
        """The rows of ``name.csv``, read once."""
        if name not in self._tables:
            self._tables[name] = results.read_csv(self.run_dir / f"{name}.csv")
        return self._tables[name]


FigureFunction = Callable[[RunData], Any]  # a matplotlib figure, or None: nothing to draw


class Experiment(ABC):
    """One question, asked of emulated fabrics (see the module docstring)."""

    name: ClassVar[str]
    question: ClassVar[str]
    default_topology: ClassVar[str] = "rail-clos"
    modes: ClassVar[Mapping[str, Mode]]
    options: ClassVar[tuple[Option, ...]] = ()
    anchors: ClassVar[Mapping[str, Any]] = {}
    sets_flow_control: ClassVar[bool] = False  # True: --flow-control and --preset refused
    simulates: ClassVar[bool] = False  # True: it also runs on the ns-3 backend (--backend)
    seed_preset: ClassVar[str | None] = None  # its seed system's preset (needs --transport)

    # --- declared and pure ------------------------------------------------------------

    def mode(self, ctx: RunContext) -> Any:
        """The :class:`Mode` of this run (``--quick`` or not)."""
        return self.modes["quick" if ctx.quick else "full"]

    def seeds(self, ctx: RunContext) -> list[int]:
        """The seeds to run: ``--seeds N`` or the mode's default."""
        return ctx.seed_list(self.mode(ctx).seeds)

    def topologies(self, ctx: RunContext) -> list[str]:
        """The topology specs the run brings up (``--topo`` or the default)."""
        return [ctx.topo or self.default_topology]

    def graph(self, ctx: RunContext) -> Any:
        """The fabric of the run's first (often only) topology."""
        return topologies.build(self.topologies(ctx)[0])

    def check(self, ctx: RunContext) -> None:
        """Refuse what cannot run (a topology without the roles it needs, an option
        that does not apply) with a ``ValueError``, before anything changes. By
        default: every topology must build."""
        for spec in self.topologies(ctx):
            topologies.build(spec)

    @abstractmethod
    def run_count(self, ctx: RunContext) -> int:
        """How many traffic runs :meth:`measure` schedules."""

    @abstractmethod
    def estimate_s(self, ctx: RunContext) -> float:
        """A pessimistic estimate of the run's wall time, in seconds."""

    # --- the measurement --------------------------------------------------------------

    @abstractmethod
    def measure(self, ctx: RunContext, runner: Runner) -> Measured:
        """Bring the fabrics up and run every schedule through ``runner`` (root)."""

    # --- the results --------------------------------------------------------------------

    def finish(self, rows: list[dict[str, Any]]) -> None:
        """Fill in fields that compare runs (e.g. a slowdown against a baseline)."""

    @abstractmethod
    def table(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The summary's headline rows, from the runs' rows."""

    def notes(self, ctx: RunContext, rows: list[dict[str, Any]], measured: Measured
              ) -> list[str]:
        """Lines printed under the table: the theory, the ideal, how to read it."""
        return []

    def checks(self, rows: list[dict[str, Any]]) -> list[fidelity.Check]:
        """The experiment's own validity checks over all its rows, beyond every run's
        fidelity report (a failed one makes the whole run invalid)."""
        return []

    @abstractmethod
    def figures(self) -> Mapping[str, FigureFunction]:
        """Figure name -> the function that draws it (no root: the run directory only)."""

    # --- the same for every experiment ------------------------------------------------

    def run(self, ctx: RunContext, backends: Mapping[str, Backend] | None = None) -> Outcome:
        """Measure, then write runs.csv, flows.csv, the experiment's tables and
        summary.json into ``ctx.run_dir``; ``backends`` (name -> backend) replace the
        emulator and the simulator, e.g. with stand-ins in a test."""
        total = self.run_count(ctx)
        print(f"[{self.name}] {total} runs, estimated ~{self.estimate_s(ctx):.0f} s",
              file=sys.stderr, flush=True)
        runner = Runner(ctx, self.name, total, backends)
        measured = self.measure(ctx, runner)
        rows = runner.log.rows
        self.finish(rows)
        fid = with_checks(runner.log.write(ctx.run_dir), self.checks(rows))
        table = self.table(rows)
        notes = self.notes(ctx, rows, measured)
        work = work_text(measured.parameters.get("work"))
        if work:
            notes = [f"work, the same at every rate: {work}"] + notes
        results.write_summary(ctx.run_dir, self.name, table, fid,
                              {"question": self.question, "anchors": dict(self.anchors),
                               "flow_control": ("per fabric, as the table says"
                                                if self.sets_flow_control else
                                                "pfc" if ctx.flow_control else "none"),
                               # the work in packets: the same at every rate
                               **({"work": measured.parameters["work"]}
                                  if "work" in measured.parameters else {}),
                               **measured.summary, "notes": notes})
        return Outcome(table, fid, self.seeds(ctx), measured.parameters, notes)

    def plot(self, run_dir: Path, show_provenance: bool = True) -> list[Path]:
        """Draw every figure of a run directory (PNG and PDF); an invalid run's figures
        say so in their headline. Each carries the run's provenance line in its
        metadata and, unless ``show_provenance`` is false, as a footer."""
        data = RunData.read(run_dir)
        mark = plotstyle.validity_mark(data.summary, data.runs)
        line = data.provenance.line()
        written: list[Path] = []
        for name, draw in self.figures().items():
            fig = draw(data)
            if fig is not None:
                written += plotstyle.save(fig, run_dir, name, mark, line, show_provenance)
        return written


def with_checks(report: dict[str, Any], checks: list[fidelity.Check]) -> dict[str, Any]:
    """A merged fidelity report with an experiment's own checks added; it is valid only
    when they pass too."""
    if not checks:
        return report
    extra = [{"name": c.name, "failed_runs": 0 if c.ok else 1, "threshold": c.threshold,
              "min": c.value, "max": c.value, "ok": c.ok, "detail": c.detail} for c in checks]
    return {**report, "valid": report["valid"] and all(c.ok for c in checks),
            "checks": report["checks"] + extra}
