"""The ns-3 backend cross-checked against the emulator, run for run: the collisions
experiment's stride and random permutation under ECMP and spraying, on the default
rail-optimised Clos and the k=4 fat-tree (benchmarks/simulation.py crosscheck prints
the same table)."""

from __future__ import annotations

from pathlib import Path

import pytest

import topologies
from fabric.experiment.crosscheck import crosscheck
from fabric.simulation import build

TOLERANCE = 0.05  # percentage points of line rate between the backends, per run

pytestmark = pytest.mark.skipif(not build.NS3_HEADER.exists(),
                                reason="ns-3 not installed (scripts/setup.sh --ns3)")


@pytest.mark.parametrize("spec", ["rail-clos", "fat-tree"])
@pytest.mark.parametrize("policy", ["ecmp", "spray"])
def test_the_simulator_agrees_with_the_emulator_run_for_run(spec: str, policy: str,
                                                            tmp_path: Path) -> None:
    cells = crosscheck(topologies.build(spec), policy, ("stride", "permutation"), (0, 1),
                       tmp_path)
    table = "\n".join(f"{c.pattern} seed {c.seed}: emulated {c.emulated:.3f} "
                      f"(ideal {c.emulated_ideal:.3f}), simulated {c.simulated:.3f} "
                      f"(ideal {c.simulated_ideal:.3f}), valid {c.valid}" for c in cells)
    assert len(cells) == 4 and all(c.valid for c in cells), table
    # the same paths (ECMP: the emulated run's, pinned; spray: every path, split evenly)
    # give the same ideal
    assert all(c.simulated_ideal == pytest.approx(c.emulated_ideal, abs=1e-3)
               for c in cells), table
    assert all(abs(c.difference) <= TOLERANCE for c in cells), table
