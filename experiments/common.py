"""What every experiment shares: run context, progress, one traffic run.

An experiment module defines ``NAME``, ``QUESTION``, ``fabric_specs(ctx)``
(pure: the topology specs it brings up), ``check(ctx)`` (pure: refuses a
topology it cannot run on, before anything changes), ``run(ctx)`` (needs
root: it builds fabrics) and ``plot(run_dir)`` (no root: reads the CSVs).
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator


from fabric.analysis import plotstyle, results
from fabric.analysis.report import ideal_spans
from fabric.emulation import Emulation, EmulationOptions, fidelity
from fabric.emulation.capture import DEFAULT_MAX_PACKETS, capture, capture_points
from fabric.emulation.traffic import TrafficResult, build_plan, idle_path_check, run_plan
from fabric.model import graph as fg
from fabric.traffic.model import DEFAULT_ROCE_MTU, Plan, Transfer, TransportSpec

WARM_UP_PACKETS = 16  # per transfer, before a bring-up's first measured run
# The fidelity checks that measure the machine's load at the time of a run, not the run
# itself: a run that fails only these was not emulated faithfully, but nothing in it
# went wrong, so it is tried again (up to ``attempts`` times, ``fabric run --attempts``).
RUN_CHECKS = ("ovs_input_delay_ms", "machine_cpu", "agent_late_share")
DEFAULT_ATTEMPTS = 3


@dataclass(frozen=True)
class CaptureSpec:
    """``fabric run --pcap``: packet captures of every traffic run.

    Each run writes ``out_dir/<bring-up>/<run>/<point>.pcap``, where
    ``<bring-up>`` is the run's work directory under ``work_root``.
    """

    out_dir: Path
    work_root: Path
    at: tuple[str, ...] = ()  # endpoints or links a-b; empty: the fabric's first endpoint
    max_packets: int = DEFAULT_MAX_PACKETS

    def points(self, graph: Any) -> list:
        """The capture points on ``graph`` (:func:`capture_points`; ValueError if unknown)."""
        return capture_points(graph, list(self.at) or sorted(fg.endpoints(graph))[:1])

    def run_dir(self, workdir: Path) -> Path:
        """Where the captures of the run whose work directory is ``workdir`` go."""
        return self.out_dir / workdir.relative_to(self.work_root)


@dataclass
class RunContext:
    """Arguments of ``fabric run`` and the new run directory."""

    run_dir: Path
    quick: bool = False
    seeds: int | None = None
    topo: str | None = None
    host_mbps: float | None = None
    cc: str = "swift"        # the roce transport's congestion control
    tcp_cc: str = "cubic"    # the emulated hosts' TCP congestion control
    controller_app: str | None = None  # your own app, run as one more policy
    app_entropy: str = "flow"          # what the senders do under it: flow, packet, recycle
    spray_entropy: str = "recycle"     # how spraying senders pick ports: recycle or packet
    capture: CaptureSpec | None = None  # --pcap: captures of every run
    roce_mtu: int = DEFAULT_ROCE_MTU   # payload bytes of a roce packet (the RoCE path MTU)
    attempts: int = DEFAULT_ATTEMPTS   # tries of a run the machine's load invalidated
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))

    def options(self, **kwargs: Any) -> EmulationOptions:
        """Emulation options of a bring-up, with this run's TCP congestion control."""
        return EmulationOptions(tcp_cc=self.tcp_cc, **kwargs)

    def roce(self, **kwargs: Any) -> TransportSpec:
        """The roce transport with this run's path MTU and congestion control
        (``kwargs`` may set another ``cc``)."""
        return TransportSpec("roce", **{"mtu_payload": self.roce_mtu, "cc": self.cc, **kwargs})

    def seed_list(self, quick_default: int, full_default: int) -> list[int]:
        """Seeds to run: ``--seeds`` or the experiment's default for the mode."""
        count = self.seeds or (quick_default if self.quick else full_default)
        return list(range(count))


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
    late: the runner may move it).
    """

    keys: dict[str, Any]
    transfers: list[Transfer]
    seed: int
    context: Any = None
    prepare: Callable[[Emulation], None] | None = None
    during: Callable[[Emulation, Plan], AbstractContextManager] | None = None

    @property
    def name(self) -> str:
        """The run's work directory name: its key values joined."""
        return "-".join(str(v) for v in self.keys.values())


@dataclass
class RunLog:
    """What an experiment's runs produced, over all its bring-ups.

    ``attempts`` is how often a run is tried when only the load-dependent checks
    (``RUN_CHECKS``) failed; ``discarded`` lists the attempts given up that way.
    """

    rows: list[dict[str, Any]] = field(default_factory=list)
    flows: list[dict[str, Any]] = field(default_factory=list)
    reports: list[dict[str, Any]] = field(default_factory=list)
    discarded: list[dict[str, Any]] = field(default_factory=list)
    attempts: int = DEFAULT_ATTEMPTS

    def write(self, run_dir: Path) -> dict[str, Any]:
        """Write runs.csv, flows.csv and (if any attempt was discarded) discarded.csv;
        return the merged fidelity report, with how many runs were repeated."""
        results.write_csv(run_dir / "runs.csv", self.rows)
        results.write_csv(run_dir / "flows.csv", self.flows)
        if self.discarded:
            results.write_csv(run_dir / "discarded.csv", self.discarded)
        return {**results.merge_fidelity(self.reports), "attempts": self.attempts,
                "repeated_runs": sum(1 for row in self.rows if row.get("attempts", 1) > 1),
                "discarded_attempts": len(self.discarded)}


RowFunction = Callable[[Scheduled, TrafficResult, dict[str, Any]], dict[str, Any]]


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
        _run_all(emu, runs, transport, workdir, progress, row_of, log, deadline_s,
                 capture_spec)
    finally:  # the controller's log goes with the run, whatever happened
        emu.save_controller_log(workdir / "controller.log")


def _run_all(emu: Emulation, runs: Iterable[Scheduled], transport: TransportSpec,
             workdir: Path, progress: Progress, row_of: RowFunction, log: RunLog,
             deadline_s: float, capture_spec: CaptureSpec | None) -> None:
    idle = idle_check(emu, transport, workdir / "idle")
    runs = iter(runs)
    first = next(runs, None)
    if first is None:
        return
    warm_up(emu, first, transport, workdir / "warm-up")
    for run in itertools.chain([first], runs):
        progress.step(" ".join(f"{k} {v}" for k, v in run.keys.items()))
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
                         "attempts": attempt})
        log.flows += [{**run.keys, "id": r["id"], "src": r["src"], "dst": r["dst"],
                       "bytes": r["bytes"], "fct_s": r["fct_s"],
                       "path": "/".join(r["path"] or [])} for r in result.transfer_rows()]


def _attempt(emu: Emulation, run: Scheduled, transport: TransportSpec, workdir: Path,
             deadline_s: float, capture_spec: CaptureSpec | None) -> TrafficResult:
    """One attempt at ``run``, its traffic written under ``workdir``."""
    if run.prepare:
        run.prepare(emu)
    during = run.during
    if capture_spec is not None:
        during = _captured(capture_spec, capture_spec.run_dir(workdir), during)
    return traffic_run(emu, run.transfers, transport, workdir, run.seed,
                       deadline_s=deadline_s, **({"during": during} if during else {}))


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
                during: Callable[[Emulation, Plan], AbstractContextManager] | None = None
                ) -> TrafficResult:
    """Run one schedule on a running fabric (source ports seeded by ``seed``), inside
    ``during(emu, plan)`` when given."""
    plan = build_plan(emu, transfers, transport, deadline_s=deadline_s, port_seed=seed)
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


# The idle-path flow is the first traffic of a fresh bring-up: it pays for ovs-vswitchd's
# flow caches and, under adaptive routing, the controller's first rounds. On a machine
# running at 0.51 of its speed one such flow (failures --quick, adaptive) reached 0.865 of
# its rate with a 91 ms RTT on an idle path, where the other bring-ups' read 0.98-0.99. A
# path that really runs slow falls short on every try.
IDLE_TRIES = 2


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


def transport_losses(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Data packets lost on the way (sent minus received, exact), the share of all sent,
    and retransmission timeouts, from the merged transfer rows."""
    sent = sum(r.get("send_packets_sent") or 0 for r in rows)
    received = sum(r.get("recv_packets_received") or 0 for r in rows)
    return {"drop_frac": round((sent - received) / sent, 5) if sent else None,
            "rto": sum(r.get("send_rto_count") or 0 for r in rows)}


def flow_goodputs(result: TrafficResult) -> list[float]:
    """Mbit/s of every transfer (its bytes over its own completion time)."""
    return [r["bytes"] * 8 / r["fct_s"] / 1e6 for r in result.transfer_rows() if r["fct_s"]]


def completion_check(result: TrafficResult) -> fidelity.Check:
    """Every transfer's last byte arrived and no agent failed, or the run is invalid."""
    rows = result.transfer_rows()
    done = sum(1 for r in rows if r["fct_s"] is not None)
    ok = bool(rows) and done == len(rows) and not result.errors
    return fidelity.Check("transfers_complete", round(done / len(rows), 4) if rows else 0.0,
                          1.0, ok, "; ".join(result.errors[:3]) or f"{done}/{len(rows)} done")


def fidelity_of(result: TrafficResult, extra: list[fidelity.Check]) -> dict[str, Any]:
    """The fidelity report of one run: its checks, the bring-up's, and completion."""
    return fidelity.report(list(result.fidelity) + list(extra) + [completion_check(result)])


def overloaded(report: dict[str, Any]) -> bool:
    """True when ``report`` failed, and failed only load-dependent checks (``RUN_CHECKS``)."""
    failed = {c["name"] for c in report.get("checks", []) if not c["ok"]}
    return bool(failed) and failed <= set(RUN_CHECKS)


def overload_text(report: dict[str, Any]) -> str:
    """The failed load-dependent checks of ``report``, with their values and limits."""
    return ", ".join(f"{c['name']} {c['value']} > {c['threshold']}" if c["value"] is not None
                     else f"{c['name']} {c['detail']}" for c in report.get("checks", [])
                     if not c["ok"] and c["name"] in RUN_CHECKS)


def run_checks(report: dict[str, Any]) -> dict[str, Any]:
    """The per-run values of the load-dependent fidelity checks, for a runs.csv row."""
    values = {c["name"]: c["value"] for c in report.get("checks", [])}
    return {name: values.get(name) for name in RUN_CHECKS}


def ideal_rows(result: TrafficResult, graph: Any, link_mbps: Any, spray: bool = False
               ) -> list[dict[str, Any]] | None:
    """The run's transfer rows as a perfect transport would have made them on the same
    paths (:func:`fabric.analysis.report.ideal_spans`); None when a path is unknown."""
    spans = ideal_spans(result, graph, link_mbps, spray)
    if spans is None:
        return None
    return [{**r, "send_start": spans[r["id"]].start, "recv_end": spans[r["id"]].end,
             "fct_s": spans[r["id"]].seconds} for r in result.transfer_rows()]


def against_ideal(measured: float | None, ideal: float | None) -> dict[str, float | None]:
    """``ideal`` and ``efficiency`` (measured / ideal) fields of a runs.csv row."""
    return {"ideal": None if ideal is None else round(ideal, 4),
            "efficiency": round(measured / ideal, 4) if measured and ideal else None}


def load_run(run_dir: Path) -> tuple[Any, dict[str, Any], list[dict[str, str]]]:
    """What every ``plot`` starts from: pyplot in the paper style, the run's
    ``summary.json`` and its ``runs.csv`` rows."""
    return (plotstyle.pyplot(), results.read_json(run_dir / "summary.json"),
            results.read_csv(run_dir / "runs.csv"))


def truthy(value: Any) -> bool:
    """A ``valid`` cell as a bool: True itself or its CSV text ("True")."""
    return value is True or str(value).lower() == "true"


def as_float(value: Any) -> float | None:
    """A CSV cell as a float; None for an empty cell (a figure that was not measured)."""
    return None if value in (None, "") else float(value)


def mean_or_none(values: list[Any], digits: int = 4) -> float | None:
    """Rounded mean of the values that are not None (None if there are none)."""
    values = [v for v in values if v is not None]
    return round(statistics.fmean(values), digits) if values else None
