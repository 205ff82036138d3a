"""The scaling experiment: its ladder, backends, table and a simulated run (no root)."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import EXPERIMENTS, scaling
from fabric.experiment import RunContext
from fabric.simulation import build

ROOT = Path(__file__).resolve().parents[2]


def test_scaling_is_registered_and_simulates() -> None:
    assert EXPERIMENTS["scaling"] == "experiments.scaling"
    assert scaling.EXPERIMENT.simulates


def test_the_ladder_spans_16_to_1024_endpoints() -> None:
    sizes = [scaling.endpoints(spec) for spec in scaling.LADDERS["full"]]
    assert sizes == sorted(sizes) and sizes[0] == 16 and sizes[-1] == 1024
    assert {16, 64, 128, 1024} <= set(sizes)
    assert scaling.endpoints(scaling.RAIL_1024) == 1024


def test_the_emulator_runs_only_what_it_can_and_the_simulator_everything(tmp_path) -> None:
    emulated = RunContext(tmp_path)
    assert scaling.backends(emulated, "fat-tree") == ["emulator", "ns3"]
    assert scaling.backends(emulated, "fat-tree,k=8") == ["ns3"]
    assert scaling.backends(RunContext(tmp_path, backend="ns3"), "fat-tree") == ["ns3"]
    ctx = RunContext(tmp_path, quick=True)
    # quick: k=4 on both backends, k=8 simulated; three policies, one seed
    assert scaling.EXPERIMENT.run_count(ctx) == (2 + 1) * 3


def test_htsim_anchors_are_read_against_the_right_policy() -> None:
    assert scaling.htsim_text("fat-tree", "ecmp") == "0.52"
    assert scaling.htsim_text("fat-tree,k=16", "ecmp") == "0.37-0.38"
    assert scaling.htsim_text("fat-tree,k=8", "adaptive") == "0.91-0.98"
    assert scaling.htsim_text("rail-clos", "spray") is None


def test_the_table_orders_by_size_and_averages_the_seeds() -> None:
    rows = [{"topology": t, "endpoints": n, "backend": "ns3", "policy": p, "seed": s,
             "norm_throughput": v, "ideal": 0.5, "steady": v, "htsim": None, "wall_s": 1.0,
             "memory_mb": 40.0}
            for t, n in (("fat-tree,k=8", 128), ("fat-tree", 16))
            for p in ("spray", "ecmp") for s, v in ((0, 0.6), (1, 0.8))]
    table = scaling.table_of(rows)
    assert [(r["endpoints"], r["policy"]) for r in table] == [
        (16, "ecmp"), (16, "spray"), (128, "ecmp"), (128, "spray")]
    assert all(r["norm_throughput"] == 0.7 and r["runs"] == 2 for r in table)


@pytest.mark.skipif(not build.NS3_HEADER.exists() or shutil.which("g++") is None,
                    reason="ns-3 not installed (scripts/setup.sh --ns3)")
def test_a_simulated_quick_run_on_one_fabric(tmp_path: Path) -> None:
    """k=4 at physical rates: every policy beside its ideal and htsim's figure, ECMP's
    steady state below spraying's as htsim's is, and the figure drawn."""
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "fabric.cli", "run", "scaling", "--quick",
                          "--backend", "ns3", "--topo", "fat-tree", "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    with (out / "runs.csv").open() as f:
        rows = {r["policy"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"ecmp", "spray", "adaptive"}
    assert {r["backend"] for r in rows.values()} == {"ns3"}
    assert all(r["endpoints"] == "16" and float(r["ideal"]) > 0 for r in rows.values())
    assert float(rows["ecmp"]["steady"]) < float(rows["spray"]["steady"])
    assert rows["ecmp"]["htsim"] == "0.52"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["valid"] and len(summary["table"]) == 3
    assert (out / "scaling.png").exists() and (out / "scaling.pdf").exists()
    assert "telemetry rounds" in res.stderr
