"""Bus bandwidth of a collective against its buffer size, as nccl-tests reports it (root).

A ring all-reduce moves its buffer in 2(N-1) dependent steps: each waits for the
previous step's last packet to cross the fabric. Small buffers are therefore
latency-bound and large ones bandwidth-bound; nccl-tests users read busbw off the
plateau. This prints, per buffer size (in packets of the transport, the unit of
``fabric/traffic/workloads.py``'s ``BUFFER_PACKETS``), on one bring-up:

* busbw as a share of the host line rate, beside the per-run ideal (a perfect
  transport on the paths the run used, steps chained in the model) and the
  bandwidth bound (headers and ACKs, no latency);
* the time the run took beyond that bound, per dependent step for the ring, in
  milliseconds and in packet times;
* for collectives, where a step's time goes (medians over all transfers, in ms and
  packet times): the last packet's arrival beyond a line-rate transfer of the
  step's packets from its first (queueing and spraying's uneven split), the
  return of the last ACK (the sender's step ends only then, and the next one
  waits for it), and the agent's start after both were done;
* for steering sprayers (recycling), how far the achieved split missed the even
  one on the fabric links an even split fills (the most bytes one carried against
  its even share), and the ideal held to the split achieved instead;
* the fidelity verdict of the run.

The one-flow patterns of ``collisions`` (stride, permutation) run the same way:
the size is then each flow's length (the unit of its ``FLOW_PACKETS``) and the figure
its mean flow rate, so a sweep shows how much of a short flow is start-up and
how evenly a sprayed flow's packets spread.

Usage::

    sudo .venv/bin/python benchmarks/busbw.py [SPEC] [--policy spray] [--sizes 250,500,1000,2000]
    sudo .venv/bin/python benchmarks/busbw.py fat-tree --sizes 2000 --chunks 1,2,4,8 --slots 8
    sudo .venv/bin/python benchmarks/busbw.py fat-tree --pattern permutation --sizes 500,2000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import topologies
from fabric.analysis.report import ideal_spans, uplink_shares
from fabric.argtypes import integer, positive_number
from fabric.emulation import Emulation, EmulationOptions, capacity
from fabric.emulation.machine_speed import default_host_mbps
from fabric.emulation.traffic import build_plan, run_plan
from fabric.errors import UserError
from fabric.model import graph as fg
from fabric.routing.policies import POLICIES, multipath, sprays
from fabric.routing.switch_ar import MAX_FLOWLET_GAP_PKTS, MAX_THRESHOLD_PKTS, ArParams
from fabric.traffic import collectives, ideal, sizing
from fabric.traffic.model import CONGESTION_CONTROLS, SPRAY_ENTROPY_PORTS, TransportSpec
from fabric.traffic.placement import rank_hosts
from fabric.traffic.workloads import ONE_FLOW_PATTERNS, norm_throughput, pattern_transfers

COLLECTIVES = ("ring-allreduce", "all-gather", "reduce-scatter", "all-to-all")
PATTERNS = ONE_FLOW_PATTERNS + COLLECTIVES


def positive_sizes(text: str) -> list[float]:
    """``--sizes``: comma-separated finite numbers > 0."""
    return [positive_number()(part) for part in text.split(",")]


def counts(text: str) -> list[int]:
    """``--chunks``: comma-separated integers 1..64."""
    return [integer(1, 64)(part) for part in text.split(",")]


def one_size(emu: Emulation, pattern: str, seed: int, packets: float,
             transport: TransportSpec, spray: bool, workdir: Path, chunks: int = 1,
             slots: int = 8) -> None:
    """Run ``pattern`` with ``packets`` packets per flow or rank, each collective step
    split into ``chunks`` pieces with ``slots`` in flight per connection; print a line."""
    plan = emu.report.rate_plan
    if pattern in ONE_FLOW_PATTERNS:
        transfers, ranks, size = pattern_transfers(emu.graph, pattern, seed, transport,
                                                   packets)
        nbytes = transfers[0].bytes
    else:
        ranks = rank_hosts(emu.graph, placement="random", seed=seed)
        size = nbytes = sizing.bytes_of(packets, transport)
        transfers = collectives.generate(pattern, ranks, size, chunks=chunks, slots=slots)
    result = run_plan(emu, build_plan(emu, transfers, transport),
                      workdir / f"{pattern}-{packets:g}-{chunks}")
    rows = result.transfer_rows()
    spans = {r["id"]: (r["send_start"], r["recv_end"], r["bytes"]) for r in rows}
    measured = norm_throughput(pattern, spans, ranks, size, plan.host_mbps)
    best = ideal_spans(result, emu.graph, plan.link_mbps, spray)
    perfect = (norm_throughput(pattern, {r["id"]: (best[r["id"]].start, best[r["id"]].end,
                                                   r["bytes"]) for r in rows},
                               ranks, size, plan.host_mbps) if best else None)
    overhead = ideal.transport_overhead(transport.kind, transport.mtu_payload)
    bound = 1 / (overhead.data + overhead.ack)  # a link carries data and the peer's ACKs
    failed = [f"{c.name} {c.value:.3g}, limit {c.threshold:g}" for c in result.fidelity
              if not c.ok]
    verdict = ("ok" if not failed and result.complete
               else f"FAILED ({', '.join(failed) or 'incomplete'})")
    unit = "per flow" if size is None else "per rank"
    line = f"  {packets:6g} packets ({nbytes / 1e6:6.2f} MB {unit}"
    line += f", {chunks} chunk(s) per step): " if size is not None else "): "
    if measured is None:
        print(line + f"did not finish, fidelity {verdict}")
        return
    ideal_text = f"{perfect:.3f}" if perfect else "unknown"
    if size is None:
        print(line + f"mean flow rate {measured:.3f} of line rate (ideal {ideal_text}, "
              f"bound {bound:.3f}); {uplink_spread(emu.graph, result)}; fidelity {verdict}")
        return
    span = (collectives.busbw_factor(pattern, len(ranks)) * size * 8 / 1e6
            / plan.host_mbps / measured)
    excess = span - span * measured / bound  # beyond the bandwidth bound
    steps = 2 * (len(ranks) - 1) if pattern == "ring-allreduce" else 1
    per_step = excess / steps
    print(line + f"busbw {measured:.3f} of line rate (ideal {ideal_text}, bound {bound:.3f}); "
          f"{excess * 1e3:.0f} ms beyond the bound"
          + (f", {per_step * 1e3:.1f} ms = {per_step / plan.packet_s:.1f} packet times per "
             f"step" if steps > 1 else "")
          + f"; fidelity {verdict}")
    print("        " + step_breakdown(rows, transfers, plan.packet_s, transport.mtu_payload))
    print("        " + nic_time(result, len(ranks)))
    if spray and transport.entropy == "recycle":
        got = ideal_spans(result, emu.graph, plan.link_mbps, spray, achieved_split=True)
        achieved = norm_throughput(pattern, {r["id"]: (got[r["id"]].start, got[r["id"]].end,
                                                       r["bytes"]) for r in rows},
                                   ranks, size, plan.host_mbps)
        print("        " + split_excess(emu.graph, result, transfers, transport)
              + f"; ideal on the split the run achieved {achieved:.3f} (ratio "
              f"{measured / achieved:.3f})")


def split_excess(graph: Any, result: Any, transfers: list[Any], transport: TransportSpec
                 ) -> str:
    """How far the sprayed split missed the even one on the switch-to-switch links that
    an even split fills to a host link's rate: the most any carried against its share."""
    overhead = ideal.transport_overhead(transport.kind, transport.mtu_payload)
    even: dict[tuple[str, str], float] = defaultdict(float)
    for t in transfers:
        for link, load in ideal.spray_load(graph, t.src, t.dst, overhead).items():
            even[link] += load * t.bytes
    fabric = {k: v for k, v in even.items() if fg.is_switch(graph, k[0])
              and fg.is_switch(graph, k[1])}
    full = max(even.values())
    totals = result.links.totals()
    loaded = [(totals.get(k, 0) / v, k) for k, v in fabric.items() if v >= 0.99 * full]
    if not loaded:
        return "no fabric link is filled to a host link's rate by an even split"
    worst, link = max(loaded)
    return (f"the {len(loaded)} fabric links an even split fills carried up to {worst:.3f} "
            f"of their even share ({link[0]}>{link[1]})")


def nic_time(result: Any, nics: int) -> str:
    """Where a NIC's time went, mean over the NICs: sending, held by a full window,
    waiting with messages open (see RoceEngine.totals)."""
    totals = [agent.get("roce") or {} for agent in result.agents.values()]

    def mean(key: str) -> float:
        return sum(t.get(key, 0.0) for t in totals) / nics

    return (f"per NIC, mean s: sending {mean('pacer_busy_s'):.2f}, window full "
            f"{mean('pacer_window_s'):.2f}, waiting with messages open "
            f"{mean('pacer_waiting_s'):.2f}, late {mean('pacer_late_s'):.2f}")


def step_breakdown(rows: list[dict[str, Any]], transfers: list[Any], packet_s: float,
                   payload: int) -> str:
    """Medians over the transfers of what a step adds to a line-rate transfer."""
    by_id = {r["id"]: r for r in rows}
    done = [r for r in rows if None not in (r.get("recv_start"), r.get("recv_end"),
                                            r.get("send_end"), r.get("send_start"))]
    if not done:
        return "step breakdown: no complete transfer"
    spread = [r["recv_end"] - r["recv_start"] - (-(-r["bytes"] // payload) - 1) * packet_s
              for r in done]
    ack = [r["send_end"] - r["recv_end"] for r in done]
    lag = []
    for t in transfers:
        deps = [by_id[a] for a in t.after]
        times = [d["recv_end"] if d["dst"] == t.src else d["send_end"] for d in deps]
        if deps and None not in times and by_id[t.id].get("send_start") is not None:
            lag.append(by_id[t.id]["send_start"] - max(times))

    def text(name: str, values: list[float]) -> str:
        median = statistics.median(values)
        return f"{name} {median * 1e3:.1f} ms ({median / packet_s:.1f})"

    parts = [text("arrivals beyond line rate", spread), text("last ACK back", ack)]
    if lag:
        parts.append(text("start after the step's inputs", lag))
    return "per transfer, median ms (packet times): " + ", ".join(parts)


def uplink_spread(graph: Any, result: Any) -> str:
    """How unevenly the leaves split their bytes over their uplinks: the largest share of
    a leaf's uplink bytes on one uplink, against the even share."""
    shares: dict[str, list[float]] = {}
    for link, share in uplink_shares(graph, result).items():
        shares.setdefault(link.split(">")[0], []).append(share)
    busiest = max(((max(v), 1 / len(v)) for v in shares.values() if sum(v) > 0),
                  default=None)
    if busiest is None:
        return "no uplink traffic"
    return f"busiest uplink {busiest[0]:.3f} of its leaf's bytes (even {busiest[1]:.3f})"


def main() -> None:
    """Bring the fabric up once and run the pattern at every size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", default="rail-clos")
    parser.add_argument("--pattern", choices=PATTERNS, default="ring-allreduce")
    parser.add_argument("--policy", choices=POLICIES, default="spray")
    parser.add_argument("--cc", choices=CONGESTION_CONTROLS, default="swift")
    parser.add_argument("--sizes", type=positive_sizes, default=[250, 500, 1000, 2000],
                        help="buffer per rank (one-flow patterns: each flow), in packets")
    parser.add_argument("--chunks", type=counts, default=[1],
                        help="pieces per step, a comma-separated list to compare on one "
                             "bring-up: a rank forwards each piece as soon as it arrived "
                             "(default 1)")
    parser.add_argument("--slots", type=integer(1, 64), default=8,
                        help="pieces in flight per connection (NCCL_STEPS; default 8)")
    parser.add_argument("--seed", type=int, default=0, help="rank placement, permutation")
    parser.add_argument("--spray-entropy", choices=("packet", "recycle"), default="recycle",
                        help="how spraying senders pick source ports (as collisions)")
    parser.add_argument("--entropy-ports", type=integer(1, 1024), default=SPRAY_ENTROPY_PORTS,
                        help=f"source ports per spraying sender (default {SPRAY_ENTROPY_PORTS}, "
                             f"as collisions)")
    parser.add_argument("--host-mbps", type=positive_number(),
                        help="host link rate (default: what collisions would pick)")
    parser.add_argument("--ar-threshold", type=integer(0, MAX_THRESHOLD_PKTS), default=None,
                        help="--policy ar: keep the hashed port while it holds at most this "
                             "many packets (default: none)")
    parser.add_argument("--ar-flowlet-gap", type=positive_number(MAX_FLOWLET_GAP_PKTS),
                        default=None, help="--policy ar: flowlet gap in packet times "
                                           "(default: decide every packet)")
    args = parser.parse_args()
    if max(args.chunks) > 1 and args.pattern in ONE_FLOW_PATTERNS:
        parser.error(f"argument --chunks: {args.pattern} has no steps to split")
    graph = topologies.build(args.spec)
    transport = TransportSpec("roce", cc=args.cc,
                              entropy=args.spray_entropy if sprays(args.policy) else "flow",
                              entropy_ports=args.entropy_ports)
    rate = args.host_mbps or default_host_mbps(
        graph, packet_bytes=transport.packet_bytes, headroom=capacity.ROCE_RATE_HEADROOM)
    workdir = Path(tempfile.mkdtemp(prefix="fabric-busbw-"))
    with Emulation(graph, EmulationOptions(policy=args.policy, host_mbps=rate,
                                           packet_bytes=transport.packet_bytes,
                                           adaptive_routing=ArParams(args.ar_threshold,
                                                                     args.ar_flowlet_gap))
                   ) as emu:
        plan = emu.report.rate_plan
        steps = f", {args.slots} slot(s) per connection" if args.pattern in COLLECTIVES else ""
        print(f"{args.spec}, {args.pattern}{steps}, {args.policy}, "
              f"{args.cc}, {plan.host_mbps:g} Mbit/s per host (a packet takes "
              f"{plan.packet_s * 1e3:.1f} ms):")
        for packets in args.sizes:
            for chunks in args.chunks:
                one_size(emu, args.pattern, args.seed, packets, transport,
                         multipath(args.policy), workdir, chunks, args.slots)


if __name__ == "__main__":
    try:
        main()
    except UserError as exc:  # not root, a rate it cannot emulate, ...: no traceback
        raise SystemExit(f"busbw.py: {exc}")
