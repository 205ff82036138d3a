"""The run loop: bring a fabric up, check its idle path, warm it up, run every
scheduled traffic run (repeating the ones the machine's load invalidated), and
log rows, flows and fidelity. Experiments and benchmarks both run traffic here.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from fabric.analysis import results
from fabric.emulation import Emulation, fidelity
from fabric.emulation.capture import capture
from fabric.emulation.traffic import TrafficResult, build_plan, idle_path_check, run_plan
from fabric.experiment.checks import fidelity_of, overload_text, overloaded, run_checks
from fabric.experiment.context import DEFAULT_ATTEMPTS, CaptureSpec, RunContext
from fabric.experiment.simulated import SimulatedFabric, run_simulated, simulated_fabric
from fabric.traffic.model import Plan, Transfer, TransportSpec

WARM_UP_PACKETS = 16  # per transfer, before a bring-up's first measured run
# The idle-path flow is the first traffic of a fresh bring-up: it pays for ovs-vswitchd's
# flow caches and, under adaptive routing, the controller's first rounds. On a machine
# running at 0.51 of its speed one such flow (failures --quick, adaptive) reached 0.865 of
# its rate with a 91 ms RTT on an idle path, where the other bring-ups' read 0.98-0.99. A
# path that really runs slow falls short on every try.
IDLE_TRIES = 2


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
    prepare: Callable[[Emulation], None] | None = None
    during: Callable[[Emulation, Plan], AbstractContextManager] | None = None
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


RowFunction = Callable[[Scheduled, TrafficResult, dict[str, Any]], dict[str, Any]]


class Runner:
    """One experiment run's bring-ups and traffic runs: the run context's emulation
    options, progress on stderr, attempts and the run log.

    Parameters
    ----------
    ctx : RunContext
        The run (its directory, ``--attempts``, ``--pcap``, the hosts' TCP).
    name : str
        The experiment's name, leading every progress line.
    total_runs : int
        How many traffic runs the experiment will schedule (for the estimate).
    """

    def __init__(self, ctx: RunContext, name: str, total_runs: int):
        self.ctx = ctx
        self.progress = Progress(total_runs, name)
        self.log = RunLog(attempts=ctx.attempts)

    @property
    def simulated(self) -> bool:
        """True when the runs are simulated (``--backend ns3``), not emulated."""
        return self.ctx.backend == "ns3"

    @contextmanager
    def bring_up(self, graph: Any, backend: str | None = None,
                 **options: Any) -> Iterator[Emulation | SimulatedFabric]:
        """The fabric of ``graph`` running with ``options`` (:class:`EmulationOptions`
        fields) and the run context's, torn down on leaving; simulated under
        ``--backend ns3``, or when ``backend`` says so (an option it does not model is
        refused)."""
        backend = backend or self.ctx.backend
        if backend == "ns3":
            yield simulated_fabric(graph, self.ctx.time_scale_of(backend), **options)
            return
        with Emulation(graph, self.ctx.options(**options)) as emu:
            yield emu

    def run(self, emu: Emulation | SimulatedFabric, runs: Iterable[Scheduled],
            transport: TransportSpec, workdir: str, row_of: RowFunction,
            deadline_s: float = 120.0) -> None:
        """:func:`run_schedules` on ``emu`` (or the simulator's runs on a simulated
        fabric) into ``work/<workdir>`` of the run directory."""
        where = self.ctx.run_dir / "work" / workdir
        if isinstance(emu, SimulatedFabric):
            run_simulated(emu, runs, transport, where, self.progress, row_of, self.log,
                          deadline_s)
            return
        run_schedules(emu, runs, transport, where, self.progress, row_of, self.log,
                      deadline_s, self.ctx.capture)

    def table(self, name: str) -> list[dict[str, Any]]:
        """The rows of the experiment's own ``name.csv`` (appended to by the caller)."""
        return self.log.tables.setdefault(name, [])


def run_schedules(emu: Emulation, runs: Iterable[Scheduled], transport: TransportSpec,
                  workdir: Path, progress: Progress, row_of: RowFunction, log: RunLog,
                  deadline_s: float = 120.0, capture_spec: CaptureSpec | None = None) -> None:
    """The idle-path check, then every run on one bring-up, logged with its fidelity.

    Parameters
    ----------
    emu : Emulation
        The running fabric.
    runs : iterable of Scheduled
        Consumed lazily, so schedules can depend on the bring-up's rate.
    transport : TransportSpec
        Of every run (and of the idle check).
    workdir : Path
        This bring-up's work directory: ``idle/`` and one directory per run.
    progress : Progress
        Stepped once per run.
    row_of : callable
        ``(run, result, fidelity report) -> runs.csv fields`` beyond the keys
        and the per-run fidelity values.
    log : RunLog
        Receives the rows, the flows and the fidelity reports.
    deadline_s : float
        A run that has not finished by then fails.
    capture_spec : CaptureSpec, optional
        Capture packets during every run (``fabric run --pcap``).

    The controller's log is copied to ``workdir/controller.log`` at the end,
    also when a run fails.
    """
    try:
        idle = idle_check(emu, transport, workdir / "idle")
        runs = iter(runs)
        first = next(runs, None)
        if first is None:
            return
        warm_up(emu, first, transport, workdir / "warm-up")
        for run in itertools.chain([first], runs):
            progress.step(" ".join(f"{k} {v}" for k, v in run.keys.items()))
            _run_logged(emu, run, transport, workdir, progress, row_of, log, deadline_s,
                        capture_spec, idle)
    finally:  # the controller's log goes with the run, whatever happened
        emu.save_controller_log(workdir / "controller.log")


def _run_logged(emu: Emulation, run: Scheduled, transport: TransportSpec, workdir: Path,
                progress: Progress, row_of: RowFunction, log: RunLog, deadline_s: float,
                capture_spec: CaptureSpec | None, idle: fidelity.Check) -> None:
    """Run ``run`` until an attempt is not invalidated by the machine's load alone (or
    the attempts are spent); log its row, flows and fidelity."""
    for attempt in range(1, log.attempts + 1):
        # a repeat gets its own directory: the discarded attempt stays to be read
        name = run.name if attempt == 1 else f"{run.name}-attempt{attempt}"
        result = _attempt(emu, run, transport, workdir / name, deadline_s, capture_spec)
        report = fidelity_of(result, [idle])
        # every attempt's checks with their details, beside its agents' reports
        (workdir / name).mkdir(parents=True, exist_ok=True)
        (workdir / name / "fidelity.json").write_text(json.dumps(report, indent=1))
        if attempt == log.attempts or not overloaded(report):
            break
        log.discarded.append({**run.keys, "attempt": attempt, "workdir": name,
                              **run_checks(report)})
        progress.say(f"repeating it (attempt {attempt + 1} of {log.attempts}): "
                     f"{overload_text(report)}")
    log.reports.append(report)
    log.rows.append({**run.keys, **row_of(run, result, report), **run_checks(report),
                     "attempts": attempt, "backend": "emulator"})
    log.flows += [{**run.keys, "id": r["id"], "src": r["src"], "dst": r["dst"],
                   "bytes": r["bytes"], "fct_s": r["fct_s"],
                   "path": "/".join(r["path"] or [])} for r in result.transfer_rows()]
    if getattr(result, "flow_control", None):  # under flow control: what each link paused
        log.tables.setdefault("pfc", []).extend({**run.keys, **row}
                                                for row in result.flow_control)


def _attempt(emu: Emulation, run: Scheduled, transport: TransportSpec, workdir: Path,
             deadline_s: float, capture_spec: CaptureSpec | None) -> TrafficResult:
    """One attempt at ``run``, its traffic written under ``workdir``."""
    if run.prepare:
        run.prepare(emu)
    during = run.during
    if capture_spec is not None:
        during = _captured(capture_spec, capture_spec.run_dir(workdir), during)
    extra = {**({"during": during} if during else {}),
             **({"window": run.window} if run.window else {})}
    return traffic_run(emu, run.transfers, transport, workdir, run.seed,
                       deadline_s=deadline_s, **extra)


def _captured(spec: CaptureSpec, out_dir: Path,
              inner: Callable[[Emulation, Plan], AbstractContextManager] | None
              ) -> Callable[[Emulation, Plan], AbstractContextManager]:
    """A ``during`` that captures packets around ``inner`` (the run's own, if any)."""

    @contextmanager
    def during(emu: Emulation, plan: Plan) -> Iterator[None]:
        with capture(spec.points(emu.graph), out_dir, emu.state, spec.max_packets):
            with inner(emu, plan) if inner else nullcontext():
                yield

    return during


def traffic_run(emu: Emulation, transfers: list[Transfer], transport: TransportSpec,
                workdir: Path, seed: int, deadline_s: float = 120.0,
                during: Callable[[Emulation, Plan], AbstractContextManager] | None = None,
                window: tuple[float, float] | None = None) -> TrafficResult:
    """Run one schedule on a running fabric (source ports seeded by ``seed``), inside
    ``during(emu, plan)`` when given, counting delivered bytes at ``window``'s edges."""
    plan = build_plan(emu, transfers, transport, deadline_s=deadline_s, port_seed=seed,
                      window=window)
    with during(emu, plan) if during else nullcontext():
        return run_plan(emu, plan, workdir)


def warm_up(emu: Emulation, run: Scheduled, transport: TransportSpec, workdir: Path) -> None:
    """Send a few packets of every transfer of ``run``, unmeasured.

    The first traffic on a fresh fabric makes ovs-vswitchd build its flow
    caches while it forwards (measured on 64 hosts: every first run waited
    longer in its sockets than the next two, by 0.2-1.4 ms). The result is not
    kept: whatever went wrong shows again in the measured run.
    """
    transfers = [replace(t, bytes=min(t.bytes, WARM_UP_PACKETS * transport.mtu_payload))
                 for t in run.transfers]
    traffic_run(emu, transfers, transport, workdir, run.seed)


def idle_check(emu: Emulation, transport: TransportSpec, workdir: Path) -> fidelity.Check:
    """The idle-path rate check, run once per bring-up: tried once more (in
    ``<workdir>-again``) when it falls short, keeping the better try."""
    best: fidelity.Check | None = None
    for attempt in range(IDLE_TRIES):
        where = workdir if attempt == 0 else workdir.with_name(f"{workdir.name}-again")
        check = idle_path_check(emu, transport, where)
        if best is None or check.value > best.value:
            best = check
        if best.ok:
            break
    assert best is not None
    return best
