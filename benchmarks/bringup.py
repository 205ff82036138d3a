"""Bring-up and teardown time of an emulated fabric (root).

Bring-up is measured from the first system change until the controller has
confirmed every switch's routes; reachability (all pairs, ping) and teardown
are timed separately. Usage::

    sudo .venv/bin/python benchmarks/bringup.py [SPEC] [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import topologies
from fabric.emulation import Emulation, EmulationOptions
from fabric.emulation.reachability import check_all_pairs
from fabric.errors import UserError


def main() -> None:
    """Print bring-up, reachability and teardown times over several runs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", default=topologies.DEFAULT_SPEC)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    graph = topologies.build(args.spec)
    rows: dict[str, list[float]] = {}
    for _ in range(args.runs):
        emu = Emulation(graph, EmulationOptions())
        emu.start()
        try:
            reach = check_all_pairs(graph, emu.host)
            assert reach.ok, reach.failed
        finally:
            t0 = time.monotonic()
            emu.stop()
            teardown = time.monotonic() - t0
        for phase, seconds in emu.report.phases_s.items():
            rows.setdefault(f"bring-up: {phase}", []).append(seconds)
        rows.setdefault("bring-up total", []).append(emu.report.total_s)
        rows.setdefault("reachability (all pairs)", []).append(reach.seconds)
        rows.setdefault("teardown", []).append(teardown)
    print(f"{args.spec}: {graph.number_of_nodes()} nodes, {args.runs} runs (seconds)")
    print(f"{'':28s} {'median':>8s} {'min':>8s} {'max':>8s}")
    for name, values in rows.items():
        print(f"{name:28s} {statistics.median(values):8.3f} {min(values):8.3f} {max(values):8.3f}")


if __name__ == "__main__":
    try:
        main()
    except UserError as exc:  # a rate it cannot emulate, not root, ...: no traceback
        raise SystemExit(f"bringup.py: {exc}")
