"""The ns-3 backend: its figures beside the emulator's, and its cost at scale.

``crosscheck`` (root) runs the collisions experiment's one-flow patterns on both
backends, run for run (:mod:`fabric.experiment.crosscheck`), and prints each
cell: throughput over line rate on the emulator and in the simulator, each
beside its per-run ideal, and their difference.

``scale`` (no root) simulates a random permutation under ECMP and spraying on
fabrics of growing size at the graph's physical rates, flows of
``--flow-packets`` packets (default 12,000: htsim's 4 ms at 100 Gbit/s), and
prints the mean rate the flows delivered from 1/4 to 3/4 of a flow's line-rate
time (as htsim measures: every flow still running) beside htsim's published figures, the
mean rate by completion time (the collisions experiment's measure), simulated
time, wall time, memory and packets simulated per second.

Usage::

    sudo .venv/bin/python benchmarks/simulation.py crosscheck [--topo fat-tree] [--seeds 2]
    .venv/bin/python benchmarks/simulation.py scale [--topo fat-tree,k=4,fat-tree,k=8]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import topologies
from fabric.argtypes import integer
from fabric.experiment.measures import steady_window
from fabric.experiment.simulated import physical_host_mbps
from fabric.simulation import simulate, simulator_binary
from fabric.simulation.scenario import Fabric
from fabric.traffic.metrics import window_throughput
from fabric.traffic.model import SPRAY_ENTROPY_PORTS, TransportSpec
from fabric.traffic.workloads import norm_throughput, pattern_transfers

# htsim's random permutations on k-ary fat-trees (ECMP, spraying), as issue #40 cites them
HTSIM = {"fat-tree,k=4": ("0.52", "0.93-0.98"), "fat-tree,k=8": ("0.45", "0.91-0.98"),
         "fat-tree,k=16": ("0.37-0.38", "0.91-0.96")}
DEFAULT_SCALE = "fat-tree,k=4;fat-tree,k=8;fat-tree,k=16"
HTSIM_PACKETS = 12_000  # htsim's flows: 4 ms of 4 KiB packets at 100 Gbit/s
CROSSCHECK_POLICIES = ("ecmp", "spray", "adaptive", "static", "ar")


def crosscheck_table(specs: list[str], policies: list[str], seeds: int, workdir: Path) -> None:
    """Print the emulator and the simulator side by side, run for run."""
    from fabric.experiment.crosscheck import crosscheck

    print(f"{'topology':>10} {'policy':>8} {'pattern':>11} seed  emulated (ideal)  "
          f"simulated (ideal)  sim-emu  valid")
    for spec in specs:
        graph = topologies.build(spec)
        for policy in policies:
            cells = crosscheck(graph, policy, ("stride", "permutation"), range(seeds),
                               workdir / f"{spec}-{policy}")
            for c in cells:
                print(f"{spec:>10} {policy:>8} {c.pattern:>11} {c.seed:>4}  "
                      f"{c.emulated:.3f} ({c.emulated_ideal:.3f})     "
                      f"{c.simulated:.3f} ({c.simulated_ideal:.3f})    {c.difference:+.3f}  "
                      f"{c.valid}", flush=True)


def scale_table(specs: list[str], flow_packets: int, seed: int) -> None:
    """Print a permutation's throughput and cost per fabric size and policy; the two
    policies of a fabric are simulated at once, one per core."""
    print(f"{'topology':>16} {'hosts':>5} {'policy':>6} steady  htsim      by FCT  "
          f"simulated  wall     memory  packets/s  (both policies: wall s)")
    for spec in specs:
        graph = topologies.build(spec)
        mbps = physical_host_mbps(graph)
        roce = TransportSpec("roce", rate_mbps=mbps)
        transfers, ranks, _ = pattern_transfers(graph, "permutation", seed, roce, flow_packets)
        window = steady_window(flow_packets, roce, mbps)
        policies = (("ecmp", "flow"), ("spray", "recycle"))
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=len(policies)) as pool:
            futures = [pool.submit(simulate, Fabric(graph), transfers,
                                   TransportSpec("roce", entropy=entropy,
                                                 entropy_ports=SPRAY_ENTROPY_PORTS,
                                                 rate_mbps=mbps),
                                   seed=seed, deadline_s=1.0, window=window)
                       for _, entropy in policies]
            results = [f.result() for f in futures]
        both = time.monotonic() - started
        for (policy, _), result in zip(policies, results):
            rows = result.transfer_rows()
            steady = window_throughput(rows, window, mbps)
            value = norm_throughput("permutation", {r["id"]: (r["send_start"], r["recv_end"],
                                                              r["bytes"]) for r in rows},
                                    ranks, None, mbps)
            packets = sum(r["send_packets_sent"] for r in rows)
            anchor = HTSIM.get(spec, ("-", "-"))[policy == "spray"]
            print(f"{spec:>16} {len(ranks):>5} {policy:>6} {steady:>6.3f}  {anchor:<9}  "
                  f"{value:>6.3f}  "
                  f"{result.sim_s * 1e3:>6.2f} ms  {result.wall_s:>5.1f} s  "
                  f"{result.memory_mb:>4.0f} MB  {packets / result.wall_s:>9.0f}  {both:.0f}"
                  + ("" if result.complete else "  INCOMPLETE"), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    cross = sub.add_parser("crosscheck", help="emulator and simulator side by side (root)")
    cross.add_argument("--topo", default="rail-clos;fat-tree",
                       help="topology specs separated by ';' (default: rail-clos;fat-tree)")
    cross.add_argument("--seeds", type=integer(1, 10), default=2)
    cross.add_argument("--policies", default=",".join(CROSSCHECK_POLICIES),
                       help=f"comma-separated (default: {','.join(CROSSCHECK_POLICIES)})")
    scale = sub.add_parser("scale", help="the simulator's cost and figures by fabric size")
    scale.add_argument("--topo", default=DEFAULT_SCALE,
                       help=f"topology specs separated by ';' (default: {DEFAULT_SCALE})")
    scale.add_argument("--flow-packets", type=integer(100, 1_000_000), default=HTSIM_PACKETS,
                       help=f"each flow's packets (default: {HTSIM_PACKETS:,}, htsim's)")
    scale.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    specs = args.topo.split(";")
    if args.what == "crosscheck":
        policies = args.policies.split(",")
        unknown = [p for p in policies if p not in CROSSCHECK_POLICIES]
        if unknown:
            parser.error(f"argument --policies: unknown {', '.join(unknown)} (known: "
                         f"{', '.join(CROSSCHECK_POLICIES)})")
        with tempfile.TemporaryDirectory(prefix="fabric-crosscheck-") as tmp:
            crosscheck_table(specs, policies, args.seeds, Path(tmp))
    else:
        simulator_binary()  # built once, before the policies start side by side
        scale_table(specs, args.flow_packets, args.seed)


if __name__ == "__main__":
    main()
