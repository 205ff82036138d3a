"""What every experiment shares: run context, progress, one traffic run.

An experiment module defines ``NAME``, ``QUESTION``, ``run(ctx)`` (needs
root: it builds fabrics) and ``plot(run_dir)`` (no root: reads the CSVs).
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from fabric.emulation import Emulation, fidelity
from fabric.emulation.traffic import TrafficResult, build_plan, idle_path_check, run_plan
from fabric.traffic.model import Transfer, TransportSpec


@dataclass
class RunContext:
    """Arguments of ``fabric run`` and the new run directory."""

    run_dir: Path
    quick: bool = False
    seeds: int | None = None
    topo: str | None = None
    host_mbps: float | None = None
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))

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
        eta = elapsed / self.done * (self.total - self.done) if self.done else float("nan")
        self.done += 1
        print(f"[{self.name} {self.done}/{self.total}] {what}  "
              f"({elapsed:.0f} s elapsed, ~{eta:.0f} s left)", file=sys.stderr, flush=True)


def traffic_run(emu: Emulation, transfers: list[Transfer], transport: TransportSpec,
                workdir: Path, seed: int, deadline_s: float = 120.0) -> TrafficResult:
    """Run one schedule on a running fabric (source ports seeded by ``seed``)."""
    plan = build_plan(emu, transfers, transport, deadline_s=deadline_s, port_seed=seed)
    return run_plan(emu, plan, workdir)


def idle_check(emu: Emulation, transport: TransportSpec, workdir: Path) -> fidelity.Check:
    """The idle-path rate check, run once per bring-up."""
    return idle_path_check(emu, transport, workdir)


def flow_goodputs(result: TrafficResult) -> list[float]:
    """Mbit/s of every transfer (its bytes over its own completion time)."""
    return [r["bytes"] * 8 / r["fct_s"] / 1e6 for r in result.transfer_rows() if r["fct_s"]]


def stride_transfers(graph: nx.Graph, ranks: list[str], nbytes: int, tag: str = "stride"
                     ) -> list[Transfer]:
    """Every rank sends to the rank one leaf further on (a permutation across spines)."""
    leaf_of = {r: next(iter(graph.neighbors(r))) for r in ranks}
    per_leaf = max(sum(1 for r in ranks if leaf_of[r] == leaf) for leaf in set(leaf_of.values()))
    n = len(ranks)
    return [Transfer(f"{tag}/{i}", src, ranks[(i + per_leaf) % n], nbytes, tag=tag)
            for i, src in enumerate(ranks) if ranks[(i + per_leaf) % n] != src]


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


RUN_CHECKS = ("ovs_input_delay_ms", "machine_cpu")


def run_checks(report: dict[str, Any]) -> dict[str, Any]:
    """The per-run values of the load-dependent fidelity checks, for a runs.csv row."""
    values = {c["name"]: c["value"] for c in report.get("checks", [])}
    return {name: values.get(name) for name in RUN_CHECKS}


def mean_or_none(values: list[Any], digits: int = 4) -> float | None:
    """Rounded mean of the values that are not None (None if there are none)."""
    values = [v for v in values if v is not None]
    return round(statistics.fmean(values), digits) if values else None
