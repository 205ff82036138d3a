"""Workloads sized in packets, and their throughput over line rate (pure).

The collisions experiment and the benchmarks that explain its figures run the
same schedules: a stride or a random permutation (one flow per host, each of
:data:`FLOW_PACKETS` packets), or a collective whose per-rank buffer is
:data:`BUFFER_PACKETS` packets. In packets, so a schedule is the same at every
rate the machine picks (:mod:`fabric.traffic.sizing`); both lengths were
chosen by measurement (docs/benchmarks.md, "Sizing the collisions workloads").
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

from fabric.traffic import collectives, sizing, synthetic
from fabric.traffic.model import Transfer, TransportSpec
from fabric.traffic.placement import rank_hosts

ONE_FLOW_PATTERNS = synthetic.SYNTHETIC_PATTERNS  # one flow per host, measured by mean rate
# Long enough for a sprayed flow's echoes to steer it off queueing paths (docs/benchmarks.md:
# 0.93 / 0.95 / 0.96 of line rate at 206 / 412 / 824 packets on the k=4 fat-tree).
FLOW_PACKETS = 1000
# Long enough for a ring all-reduce's dependent steps to measure bandwidth, not latency
# (docs/benchmarks.md: the ideal busbw is 0.935 / 0.945 of line rate at 1,358 / 2,716
# packets on rail-clos).
BUFFER_PACKETS = 2000


def pattern_transfers(graph: Any, pattern: str, seed: int, transport: TransportSpec,
                      packets: float | None = None, dscp: int = 0
                      ) -> tuple[list[Transfer], list[str], int | None]:
    """Schedule of one run, its ranks and its nccl-tests size (None for the one-flow
    patterns). ``packets`` of ``transport`` set each flow's bytes or each rank's buffer
    (default :data:`FLOW_PACKETS`, :data:`BUFFER_PACKETS`); the permutations and the
    collectives place their ranks at random (seeded), the stride by rail. Every
    transfer is in service class ``dscp``."""
    one_flow = pattern in ONE_FLOW_PATTERNS
    length = packets if packets is not None else FLOW_PACKETS if one_flow else BUFFER_PACKETS
    nbytes = sizing.bytes_of(length, transport)
    if pattern == "stride":
        ranks = rank_hosts(graph, placement="rail")
        transfers, size = synthetic.stride(graph, ranks, nbytes), None
    else:
        ranks = rank_hosts(graph, placement="random", seed=seed)
        if pattern in ("permutation", "permutation-interpod"):
            groups = synthetic.pods(graph, ranks) if pattern == "permutation-interpod" else None
            transfers = synthetic.permutation(ranks, nbytes, seed, tag=pattern, groups=groups)
            size = None
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
