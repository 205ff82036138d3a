"""Bus bandwidth of a collective against its buffer size, as nccl-tests reports it (root).

A ring all-reduce moves its buffer in 2(N-1) dependent steps: each waits for the
previous step's last packet to cross the fabric. Small buffers are therefore
latency-bound and large ones bandwidth-bound; nccl-tests users read busbw off the
plateau. This prints, per buffer size (in seconds of the host link at line rate,
the unit of ``experiments/collisions.py``'s ``BUFFER_S``), on one bring-up:

* busbw as a share of the host line rate, beside the per-run ideal (a perfect
  transport on the paths the run used, from each step's measured start) and the
  bandwidth bound (headers and ACKs, no latency);
* the time the run took beyond that bound, per dependent step for the ring, in
  milliseconds and in packet times;
* the fidelity verdict of the run.

Usage::

    sudo .venv/bin/python benchmarks/busbw.py [SPEC] [--policy spray] [--sizes 0.75,1.5,3,6]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import topologies
from experiments.collisions import ENTROPY_PORTS, norm_throughput
from fabric.analysis.report import ideal_spans
from fabric.argtypes import integer, positive_number
from fabric.cli import user_errors
from fabric.emulation import Emulation, EmulationOptions, capacity
from fabric.emulation.traffic import build_plan, run_plan
from fabric.traffic import collectives, ideal
from fabric.traffic.model import CONGESTION_CONTROLS, TransportSpec
from fabric.traffic.placement import rank_hosts

COLLECTIVES = ("ring-allreduce", "all-gather", "reduce-scatter", "all-to-all")


def positive_sizes(text: str) -> list[float]:
    """``--sizes``: comma-separated finite numbers > 0."""
    return [positive_number()(part) for part in text.split(",")]


def one_size(emu: Emulation, pattern: str, ranks: list[str], seconds: float,
             transport: TransportSpec, spray: bool, workdir: Path, chunks: int = 1) -> None:
    """Run ``pattern`` with a buffer of ``seconds`` at line rate per rank, each step split
    into ``chunks`` pieces; print a line."""
    plan = emu.report.rate_plan
    size = int(plan.host_mbps * 1e6 / 8 * seconds)
    transfers = collectives.generate(pattern, ranks, size, chunks=chunks)
    result = run_plan(emu, build_plan(emu, transfers, transport),
                      workdir / f"{pattern}-{seconds:g}")
    rows = result.transfer_rows()
    spans = {r["id"]: (r["send_start"], r["recv_end"], r["bytes"]) for r in rows}
    measured = norm_throughput(pattern, spans, ranks, size, plan.host_mbps)
    best = ideal_spans(result, emu.graph, plan.link_mbps, spray)
    perfect = (norm_throughput(pattern, {r["id"]: (best[r["id"]].start, best[r["id"]].end,
                                                   r["bytes"]) for r in rows},
                               ranks, size, plan.host_mbps) if best else None)
    overhead = ideal.transport_overhead(transport.kind, transport.mtu_payload)
    bound = 1 / (overhead.data + overhead.ack)  # a link carries data and the peer's ACKs
    failed = [c.name for c in result.fidelity if not c.ok]
    verdict = ("ok" if not failed and result.complete
               else f"FAILED ({', '.join(failed) or 'incomplete'})")
    line = f"  {seconds:5g} s ({size / 1e6:6.2f} MB per rank): "
    if measured is None:
        print(line + f"did not finish, fidelity {verdict}")
        return
    span = (collectives.busbw_factor(pattern, len(ranks)) * size * 8 / 1e6
            / plan.host_mbps / measured)
    excess = span - span * measured / bound  # beyond the bandwidth bound
    steps = 2 * (len(ranks) - 1) if pattern == "ring-allreduce" else 1
    per_step = excess / steps
    ideal_text = f"{perfect:.3f}" if perfect else "unknown"
    print(line + f"busbw {measured:.3f} of line rate (ideal {ideal_text}, bound {bound:.3f}); "
          f"{excess * 1e3:.0f} ms beyond the bound"
          + (f", {per_step * 1e3:.1f} ms = {per_step / plan.packet_s:.1f} packet times per "
             f"step" if steps > 1 else "")
          + f"; fidelity {verdict}")


def main() -> None:
    """Bring the fabric up once and run the collective at every size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", default="rail-clos")
    parser.add_argument("--pattern", choices=COLLECTIVES, default="ring-allreduce")
    parser.add_argument("--policy", choices=("ecmp", "spray", "adaptive"), default="spray")
    parser.add_argument("--cc", choices=CONGESTION_CONTROLS, default="swift")
    parser.add_argument("--sizes", type=positive_sizes, default=[0.75, 1.5, 3.0, 6.0],
                        help="buffer per rank, seconds of the host link at line rate")
    parser.add_argument("--chunks", type=integer(1, 64), default=1,
                        help="pieces per step: a rank sends the next piece while the "
                             "previous one is still unacknowledged (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="rank placement")
    parser.add_argument("--host-mbps", type=positive_number(),
                        help="host link rate (default: what collisions would pick)")
    args = parser.parse_args()
    graph = topologies.build(args.spec)
    transport = TransportSpec("roce", cc=args.cc,
                              entropy="flow" if args.policy == "ecmp" else "recycle",
                              entropy_ports=ENTROPY_PORTS)
    rate = args.host_mbps or capacity.auto_host_mbps(
        graph, packet_bytes=transport.packet_bytes, headroom=capacity.ROCE_RATE_HEADROOM)
    ranks = rank_hosts(graph, placement="random", seed=args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="fabric-busbw-"))
    with Emulation(graph, EmulationOptions(policy=args.policy, host_mbps=rate,
                                           packet_bytes=transport.packet_bytes)) as emu:
        plan = emu.report.rate_plan
        print(f"{args.spec}, {args.pattern} over {len(ranks)} ranks in {args.chunks} "
              f"chunk(s) per step, {args.policy}, "
              f"{args.cc}, {plan.host_mbps:g} Mbit/s per host (a packet takes "
              f"{plan.packet_s * 1e3:.1f} ms):")
        for seconds in args.sizes:
            one_size(emu, args.pattern, ranks, seconds, transport, args.policy != "ecmp",
                     workdir, args.chunks)


if __name__ == "__main__":
    try:
        main()
    except user_errors() as exc:  # not root, a rate it cannot emulate, ...: no traceback
        raise SystemExit(f"busbw.py: {exc}")
