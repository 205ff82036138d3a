"""Summaries of a traffic run: nccl-tests figures, incast rounds, collisions.

Rates are reported at the emulated scale (Mbit/s) and as fractions of the
emulated host link rate, which is what transfers to the modelled cluster.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fabric.emulation import fidelity
from fabric.emulation.traffic import TrafficResult
from fabric.traffic import collectives, metrics
from fabric.traffic.patterns import PatternSpec
from fabric.traffic.storage import incast_rounds


def metric_rows(result: TrafficResult) -> list[dict[str, Any]]:
    """Rows ``{"id", "start", "end", "bytes"}`` (sender start, receiver end)."""
    return [{"id": r["id"], "start": r.get("send_start"), "end": r.get("recv_end"),
             "bytes": r["bytes"]} for r in result.transfer_rows()]


def flow_collisions(result: TrafficResult, min_bytes: int = 64 * 1024) -> metrics.Collisions:
    """Collisions among long transfers with a measured path."""
    flows = {}
    for row in result.transfer_rows():
        if row["path"] and row["fct_s"] is not None and row["bytes"] >= min_bytes:
            flows[row["id"]] = (row["send_start"], row["recv_end"],
                                metrics.links_of(row["path"]), row["bytes"])
    return metrics.collisions(flows)


def _totals(result: TrafficResult) -> dict[str, int]:
    totals = {"tcp_timeouts": 0, "tcp_retransmitted_segments": 0, "roce_retransmitted": 0}
    for agent in result.agents.values():
        netstat = agent.get("netstat", {})
        totals["tcp_timeouts"] += int(netstat.get("TCPTimeouts", 0))
        totals["tcp_retransmitted_segments"] += int(netstat.get("RetransSegs", 0))
        totals["roce_retransmitted"] += int(agent.get("roce", {}).get("retransmitted", 0))
    totals["ingress_drops"] = sum(result.ingress_drops.values())
    return totals


def summarize(result: TrafficResult, spec: PatternSpec, participants: list[str],
              host_mbps: float) -> dict[str, Any]:
    """Headline figures of one run, with its fidelity checks."""
    rows = metric_rows(result)
    starts = [r["start"] for r in rows if r["start"] is not None]
    ends = [r["end"] for r in rows if r["end"] is not None]
    elapsed = (max(ends) - min(starts)) if starts and ends else None
    coll = flow_collisions(result)
    summary: dict[str, Any] = {
        "pattern": spec.name, "transport": result.plan.transport.kind,
        "complete": result.complete, "time_s": elapsed,
        "transfers": len(rows), "bytes": sum(r["bytes"] for r in rows),
        "fct": asdict(metrics.fct_stats(rows)) if ends else None,
        "collisions": coll.count, "max_flows_per_link": coll.max_flows_per_link,
        "collision_time_share": coll.share_of_time_in_collision,
        **_totals(result), "errors": result.errors,
        "fidelity": fidelity.report(result.fidelity),
    }
    if spec.is_collective and elapsed:
        n = len(participants)
        algbw = collectives.algbw(spec.size_bytes, elapsed) * 8 / 1e6
        busbw = collectives.busbw(spec.name, n, spec.size_bytes, elapsed) * 8 / 1e6
        summary.update(ranks=n, size_bytes=spec.size_bytes, algbw_mbps=algbw,
                       busbw_mbps=busbw, busbw_frac=busbw / host_mbps)
    if spec.name == "striped-read":
        rounds = incast_rounds(result.plan.transfers)
        times = metrics.round_times(rows, rounds, spec.size_bytes)
        durations = [t.duration_s for t in times.values() if t.duration_s is not None]
        goodputs = [t.goodput_mbps for t in times.values() if t.goodput_mbps is not None]
        summary.update(
            senders=spec.servers, rounds=len(times),
            round_p50_ms=metrics.percentile(durations, 50) * 1e3 if durations else None,
            round_p99_ms=metrics.percentile(durations, 99) * 1e3 if durations else None,
            goodput_mbps=sum(goodputs) / len(goodputs) if goodputs else None,
            goodput_frac=(sum(goodputs) / len(goodputs) / host_mbps) if goodputs else None)
    return summary
