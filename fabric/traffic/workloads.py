"""Workloads sized in seconds of line rate, and their throughput over line rate (pure).

The collisions experiment and the benchmarks that explain its figures run the
same schedules: a stride or a random permutation (one flow per host, each of
:data:`FLOW_S` seconds of its link), or a collective whose per-rank buffer
takes :data:`BUFFER_S` seconds of the host link. Both lengths were chosen by
measurement: see "Sizing the collisions workloads" in docs/benchmarks.md.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

from fabric.traffic import collectives, synthetic
from fabric.traffic.model import Transfer
from fabric.traffic.placement import rank_hosts

ONE_FLOW_PATTERNS = synthetic.SYNTHETIC_PATTERNS  # one flow per host, measured by mean rate
# Long enough for a sprayed flow's echoes to steer it off queueing paths (docs/benchmarks.md:
# 0.93 / 0.95 / 0.96 of line rate at 1.5 / 3 / 6 s on the k=4 fat-tree).
FLOW_S = 3.0
# Long enough for a ring all-reduce's dependent steps to measure bandwidth, not latency
# (docs/benchmarks.md: the ideal busbw is 0.935 of line rate at 6 s on rail-clos).
BUFFER_S = 6.0


def pattern_transfers(graph: Any, pattern: str, seed: int, host_mbps: float,
                      seconds: float | None = None, dscp: int = 0
                      ) -> tuple[list[Transfer], list[str], int | None]:
    """Schedule of one run, its ranks and its nccl-tests size (None for the one-flow
    patterns). ``seconds`` of line rate sets each flow's bytes or each rank's buffer
    (default :data:`FLOW_S`, :data:`BUFFER_S`); the permutation and the collectives
    place their ranks at random (seeded), the stride by rail. Every transfer is in
    service class ``dscp``."""
    one_flow = pattern in ONE_FLOW_PATTERNS
    length = seconds if seconds is not None else FLOW_S if one_flow else BUFFER_S
    nbytes = int(host_mbps * 1e6 / 8 * length)
    if pattern == "stride":
        ranks = rank_hosts(graph, placement="rail")
        transfers, size = synthetic.stride(graph, ranks, nbytes), None
    else:
        ranks = rank_hosts(graph, placement="random", seed=seed)
        if pattern == "permutation":
            transfers, size = synthetic.permutation(ranks, nbytes, seed), None
        else:
            transfers, size = collectives.generate(pattern, ranks, nbytes), nbytes
    return [replace(t, dscp=dscp) for t in transfers], ranks, size


def norm_throughput(pattern: str, spans: dict[str, tuple[float, float, int]],
                    ranks: list[str], size: int | None, host_mbps: float) -> float | None:
    """Throughput over the host rate from ``{id: (start, end, bytes)}``: the mean flow
    goodput for the one-flow patterns, busbw for collectives (None if incomplete)."""
    if not spans or any(end is None or start is None for start, end, _ in spans.values()):
        return None
    if size is None:
        rates = [b * 8 / 1e6 / (end - start) for start, end, b in spans.values() if end > start]
        return statistics.fmean(rates) / host_mbps if rates else None
    start = min(s for s, _, _ in spans.values())
    end = max(e for _, e, _ in spans.values())
    return collectives.busbw(pattern, len(ranks), size, end - start) * 8 / 1e6 / host_mbps
