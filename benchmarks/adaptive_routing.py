"""What the switches' adaptive routing costs in the emulator's datapath, and what it buys.

``sudo python benchmarks/adaptive_routing.py [--topo SPEC] [--rate MBPS] [--repeat N]``
brings the fabric up under ``ecmp`` and under ``ar`` in turn, at the same rate, and runs
the same stride permutation on each (roce, swift; 2,000 packets a flow: the same at every
rate). It prints, per policy, the throughput against line rate, the machine's CPU share
while the traffic ran and ovs-vswitchd's and softirq's cores (the fidelity checks'
figures) and, under ``ar``, the tc program's own cost as the kernel counts it
(``kernel.bpf_stats_enabled``, set for the run and restored): runs, nanoseconds a run
and the cores it used, and the share of packets it moved off their hashed port. Run it
alone: anything else on the machine is counted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import topologies
from fabric.emulation import Emulation, EmulationOptions
from fabric.errors import UserError
from fabric.experiment.emulated import traffic_run
from fabric.host import system
from fabric.traffic.model import TransportSpec
from fabric.traffic.workloads import norm_throughput, pattern_transfers

FLOW_PACKETS = 2_000
STATS_SYSCTL = "kernel.bpf_stats_enabled"


def measure(emu: Emulation, transport: TransportSpec, workdir: Path, seed: int
            ) -> dict[str, Any]:
    """One stride run: throughput, CPU checks and, under ar, the program's cost."""
    transfers, ranks, size = pattern_transfers(emu.graph, "stride", seed, transport,
                                               FLOW_PACKETS)
    ar = emu.adaptive_routing
    runs0, ns0 = ar.program_stats() if ar else (0, 0)
    moved0 = sum(c[1] for c in ar.counters().values()) if ar else 0
    result = traffic_run(emu, transfers, transport, workdir, seed=seed)
    rows = result.transfer_rows()
    checks = {c.name: c.value for c in result.fidelity}
    seconds = max(r["recv_end"] for r in rows) - min(r["send_start"] for r in rows)
    out = {"throughput": norm_throughput("stride", {r["id"]: (r["send_start"], r["recv_end"],
                                                             r["bytes"]) for r in rows},
                                         ranks, size, emu.report.rate_plan.host_mbps),
           "machine_cpu": checks.get("machine_cpu"), "ovs": checks.get("ovs_cpu_cores"),
           "softirq": checks.get("softirq_cores"), "complete": result.complete}
    if ar:
        runs, ns = (a - b for a, b in zip(ar.program_stats(), (runs0, ns0)))
        moved = sum(c[1] for c in ar.counters().values()) - moved0
        out.update(runs=runs, ns_per_run=ns / runs if runs else None, cores=ns / 1e9 / seconds,
                   moved=moved / runs if runs else None)
    return out


def summarize(rows: list[dict[str, Any]]) -> str:
    """Medians over the repeats."""
    def median(key: str) -> float | None:
        got = [r[key] for r in rows if r.get(key) is not None]
        return statistics.median(got) if got else None

    text = ", ".join(f"{name} {value:.3f}" for name, key in (
        ("throughput", "throughput"), ("machine_cpu", "machine_cpu"),
        ("ovs-vswitchd cores", "ovs"), ("softirq cores", "softirq"))
        if (value := median(key)) is not None)
    if median("runs"):
        text += (f"; program: {median('runs'):,.0f} runs, {median('ns_per_run'):.0f} ns a run, "
                 f"{median('cores'):.4f} cores, {median('moved'):.1%} of packets moved")
    return text + f"; complete {all(r['complete'] for r in rows)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topo", default="rail-clos")
    parser.add_argument("--rate", type=float, default=None,
                        help="host link rate, Mbit/s (default: the fabric's auto rate)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    try:
        graph = topologies.build(args.topo)
    except ValueError as exc:
        parser.error(str(exc))
    transport = TransportSpec("roce", cc="swift")
    before = system.read_sysctl(STATS_SYSCTL)
    system.write_sysctl(STATS_SYSCTL, "1")
    try:
        with tempfile.TemporaryDirectory(prefix="ar-bench-") as tmp:
            for policy in ("ecmp", "ar"):
                options = EmulationOptions(policy=policy, host_mbps=args.rate,
                                           packet_bytes=transport.packet_bytes)
                with Emulation(graph, options) as emu:
                    rows = [measure(emu, transport, Path(tmp) / f"{policy}-{i}", seed=i)
                            for i in range(args.repeat)]
                    print(f"{policy:>4} stride at {emu.report.rate_plan.host_mbps:g} Mbit/s "
                          f"({args.topo}, {args.repeat} seeds): {summarize(rows)}", flush=True)
    finally:
        system.write_sysctl(STATS_SYSCTL, before)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UserError as exc:  # a rate it cannot emulate, not root, ...: no traceback
        raise SystemExit(f"adaptive_routing.py: {exc}")
    except KeyboardInterrupt:  # the emulation has cleaned up on its way out
        print("adaptive_routing.py: interrupted; cleaned up", file=sys.stderr)
        raise SystemExit(130) from None
