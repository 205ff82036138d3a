"""The scaling experiment: its ladder, backends, table and a simulated run (no root)."""

from __future__ import annotations

import argparse
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
    # quick: k=4 on both backends, k=8 simulated; three policies, one seed, one pattern
    assert scaling.EXPERIMENT.run_count(ctx) == (2 + 1) * 3
    # full: the simulator runs both patterns, the emulator the inter-pod one
    assert scaling.patterns(RunContext(tmp_path), "ns3") == (scaling.INTERPOD, "permutation")
    assert scaling.patterns(RunContext(tmp_path), "emulator") == (scaling.INTERPOD,)


def test_htsim_anchors_are_read_against_the_right_policy_and_traffic() -> None:
    interpod = scaling.INTERPOD
    assert scaling.htsim_text("fat-tree", interpod, "ecmp") == "ndp 0.52, swift 0.45"
    assert scaling.htsim_text("fat-tree,k=16", interpod, "ecmp") == "ndp 0.37-0.38, swift 0.42"
    assert scaling.htsim_text("fat-tree,k=8", interpod, "adaptive") == "ndp 0.91-0.98"
    assert scaling.htsim_text("fat-tree,k=8", "permutation", "ecmp") == "swift 0.48"
    assert scaling.htsim_text("fat-tree,k=8", "permutation", "spray") is None
    assert scaling.htsim_text("rail-clos", interpod, "spray") is None


def test_flows_are_packets_whatever_the_mode_or_option(tmp_path) -> None:
    assert scaling.flow_packets(RunContext(tmp_path, quick=True)) == 1_000
    assert scaling.flow_packets(RunContext(tmp_path)) == 3_000
    given = RunContext(tmp_path, values={"flow_packets": 12_000})
    assert scaling.flow_packets(given) == 12_000
    with pytest.raises(argparse.ArgumentTypeError, match="100 to 1,000,000"):
        scaling.flow_packets_argument("99")
    with pytest.raises(argparse.ArgumentTypeError, match="whole number"):
        scaling.flow_packets_argument("1e3")


def test_the_table_orders_by_size_and_averages_the_seeds() -> None:
    rows = [{"topology": t, "endpoints": n, "backend": "ns3", "policy": p, "seed": s,
             "pattern": scaling.INTERPOD,
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
    """k=4 at physical rates: every policy beside its ideals and htsim's figures, ECMP's
    steady state below spraying's as htsim's is, the work in packets, and the figure."""
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
    assert all(r["pattern"] == scaling.INTERPOD and r["flow_packets"] == "1000"
               for r in rows.values())
    assert float(rows["ecmp"]["steady"]) < float(rows["spray"]["steady"])
    # the per-run ideal is not below the max-min rates of the run's own paths, but for the
    # store-and-forward latency it adds to each flow (a few packet times of 1,000)
    assert float(rows["ecmp"]["ideal"]) >= float(rows["ecmp"]["steady_ideal"]) - 0.005
    assert rows["ecmp"]["htsim"] == "ndp 0.52, swift 0.45"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["valid"] and len(summary["table"]) == 3
    assert summary["work"]["flow_packets"] == 1000
    assert summary["notes"][0].startswith("work, the same at every rate: 1,000-packet flows")
    assert (out / "scaling.png").exists() and (out / "scaling.pdf").exists()
    assert "telemetry rounds" in res.stderr
