"""How evenly a sprayed flow splits over the spines, by entropy pool and mode (root).

Spraying sends each packet with the next UDP source port of a pool of N
values; the switches' hash maps each value to one uplink, so with a finite
pool the split is as uneven as the hash's mapping of those N values, and the
busiest uplink limits the flow. ``recycle`` (after REPS) reuses the ports
whose packets arrived with no more queueing than swift aims for on their
path, which should even the split out. On the default rail-clos under the
spray policy, the stride permutation of the collisions experiment (every
flow crosses the spines), for each pool size in ``--pools`` and each seed
it prints the busiest leaf uplink's share of its leaf's uplink bytes
(1/spines is even), the mean flow throughput over line rate, the per-run
ideal (on the split the switches made for ports in turn, on an even split
for recycling senders, which steer), and the OVS input delay (the
fidelity check, at most 1 ms).

Usage::

    sudo .venv/bin/python benchmarks/entropy.py [--pools 64,256,1024] [--seeds 3]
        [--entropy packet,recycle] [--cc swift|dcqcn|loss]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import topologies
from fabric import argtypes
from fabric.analysis.report import ideal_spans, uplink_shares
from fabric.emulation import Emulation, EmulationOptions, capacity
from fabric.emulation.machine_speed import default_host_mbps
from fabric.errors import UserError
from fabric.experiment.checks import fidelity_of
from fabric.experiment.emulated import idle_check, traffic_run
from fabric.traffic.model import CONGESTION_CONTROLS, ScheduleError, TransportSpec
from fabric.traffic.workloads import norm_throughput, pattern_transfers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="64,256,1024",
                        help="entropy pool sizes, comma-separated")
    parser.add_argument("--seeds", type=argtypes.integer(1, 1000), default=3,
                        help="stride runs per pool (default: 3)")
    parser.add_argument("--spec", default="rail-clos", help="topology (default: rail-clos)")
    parser.add_argument("--entropy", default="packet",
                        help="spraying modes, comma-separated: packet, recycle "
                             "(default: packet)")
    parser.add_argument("--cc", choices=CONGESTION_CONTROLS, default="swift",
                        help="roce congestion control (default: swift)")
    args = parser.parse_args()
    try:  # every pool and mode checked before anything is set up
        transports = {(mode, int(pool)): TransportSpec("roce", entropy=mode,
                                                       entropy_ports=int(pool), cc=args.cc)
                      for mode in args.entropy.split(",") for pool in args.pools.split(",")}
    except (ValueError, ScheduleError) as exc:
        parser.error(f"--pools/--entropy: {exc}")
    if not all(t.sprays for t in transports.values()):
        parser.error("--entropy: spraying modes only (packet, recycle)")
    try:
        graph = topologies.build(args.spec)
    except ValueError as exc:
        parser.error(f"--spec: {exc}")
    packet_bytes = next(iter(transports.values())).packet_bytes
    rate = default_host_mbps(graph, packet_bytes=packet_bytes,
                                   headroom=capacity.ROCE_RATE_HEADROOM)  # as collisions
    workdir = Path(tempfile.mkdtemp(prefix="fabric-entropy-"))
    with Emulation(graph, EmulationOptions(policy="spray", host_mbps=rate,
                                           packet_bytes=packet_bytes)) as emu:
        plan = emu.report.rate_plan
        print(f"{args.spec} at {plan.host_mbps:g} Mbit/s per host, spray, stride, "
              f"{args.cc}, {args.seeds} seeds per pool")
        for (mode, pool), transport in transports.items():
            idle = idle_check(emu, transport, workdir / f"{mode}-{pool}-idle")
            busiest, measured, best, delay = [], [], [], []
            for seed in range(args.seeds):
                transfers, ranks, size = pattern_transfers(graph, "stride", seed, transport)
                result = traffic_run(emu, transfers, transport,
                                     workdir / f"{mode}-{pool}-{seed}", seed)
                rows = result.transfer_rows()
                busiest.append(max(uplink_shares(graph, result).values()))
                measured.append(norm_throughput(
                    "stride", {r["id"]: (r["send_start"], r["recv_end"], r["bytes"])
                               for r in rows}, ranks, size, plan.host_mbps))
                spans = ideal_spans(result, graph, plan.link_mbps, spray=True)
                best.append(norm_throughput(
                    "stride", {r["id"]: (spans[r["id"]].start, spans[r["id"]].end, r["bytes"])
                               for r in rows}, ranks, size, plan.host_mbps)
                    if spans else float("nan"))
                checks = {c["name"]: c for c in fidelity_of(result, [idle])["checks"]}
                if checks["ovs_input_delay_ms"]["value"] is not None:
                    delay.append(checks["ovs_input_delay_ms"]["value"])
            print(f"  {mode:7s} pool {pool:5d}: busiest uplink {statistics.fmean(busiest):.3f} "
                  f"(max {max(busiest):.3f}); throughput {statistics.fmean(measured):.3f} "
                  f"(ideal {statistics.fmean(best):.3f}); OVS input delay "
                  f"max {max(delay, default=float('nan')):.2f} ms")


if __name__ == "__main__":
    try:
        main()
    except UserError as exc:  # a rate it cannot emulate, not root, ...: no traceback
        raise SystemExit(f"entropy.py: {exc}")
