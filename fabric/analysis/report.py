"""Summaries of a traffic run: nccl-tests figures, incast rounds, collisions.

Rates are reported at the emulated scale (Mbit/s) and as fractions of the
emulated host link rate, which is what transfers to the modelled cluster.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Mapping

from fabric.model import graph as fg
from fabric.traffic import collectives, ideal, metrics
from fabric.traffic.patterns import PatternSpec
from fabric.traffic.result import RunResult, TransferRecord, records, report
from fabric.traffic.storage import incast_rounds


def metric_rows(result: RunResult) -> list[dict[str, Any]]:
    """Rows ``{"id", "start", "end", "bytes"}`` (sender start, receiver end)."""
    return [{"id": r["id"], "start": r.get("send_start"), "end": r.get("recv_end"),
             "bytes": r["bytes"]} for r in result.transfer_rows()]


def flow_collisions(result: RunResult) -> metrics.Collisions | None:
    """Flows that shared a switch-to-switch link at the same moment, over every
    transfer with a measured path.

    A flow is one connection on one path: the transfers a connection carries in order
    (a collective's steps and pieces, several in flight) hash as one 5-tuple and share
    one window, so they are one flow from their first start to their last end, not
    one each. Links into and out of endpoints are left out: an endpoint's link carries
    all its flows by design, a collision is two flows hashed onto one fabric link.
    None when no transfer's path was measured: a count that was not measured is not
    zero.
    """
    endpoints = set(result.plan.hosts)
    by_id = {t.id: t for t in result.plan.transfers}
    flows: dict[tuple, tuple[float, float, list, int]] = {}
    for row in result.transfer_rows():
        if row["path"] and row["fct_s"] is not None:
            key = (by_id[row["id"]].connection, tuple(row["path"]))
            start, end, nbytes = row["send_start"], row["recv_end"], row["bytes"]
            if key in flows:
                first, last, links, total = flows[key]
                flows[key] = (min(first, start), max(last, end), links, total + nbytes)
            else:
                links = [link for link in metrics.links_of(row["path"])
                         if link[0] not in endpoints and link[1] not in endpoints]
                flows[key] = (start, end, links, nbytes)
    return metrics.collisions({str(k): v for k, v in flows.items()}) if flows else None


def uplink_shares(graph: Any, result: RunResult) -> dict[str, float]:
    """Bytes each leaf -> spine link carried, as a share of its leaf's uplink bytes
    (``"leaf>spine"`` -> share)."""
    totals = result.links.totals()
    loads = {}
    for leaf in fg.nodes_with_role(graph, "leaf"):
        ups = [(leaf, n) for n in graph.neighbors(leaf) if graph.nodes[n]["role"] == "spine"]
        sent = sum(totals.get(link, 0) for link in ups)
        for link in ups:
            loads[f"{link[0]}>{link[1]}"] = totals.get(link, 0) / sent if sent else 0.0
    return loads


def _totals(result: Any) -> dict[str, int]:
    """Loss and congestion counters of an emulated run, summed over its agents: TCP's from
    the kernel, roce's retransmissions, CE-marked data packets received and CNPs sent
    (dcqcn), and the endpoints' ingress drops."""
    totals = {"tcp_timeouts": 0, "tcp_retransmitted_segments": 0, "roce_retransmitted": 0,
              "roce_ce_marked": 0, "roce_cnps": 0}
    for agent in result.agents.values():
        netstat = agent.get("netstat", {})
        roce = agent.get("roce", {})
        totals["tcp_timeouts"] += int(netstat.get("TCPTimeouts", 0))
        totals["tcp_retransmitted_segments"] += int(netstat.get("RetransSegs", 0))
        totals["roce_retransmitted"] += int(roce.get("retransmitted", 0))
        totals["roce_ce_marked"] += int(roce.get("ce_packets", 0))
        totals["roce_cnps"] += int(roce.get("cnps_sent", 0))
    totals["ingress_drops"] = sum(result.ingress_drops.values())
    return totals


def flow_control_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What a run's pauses did, from its per link and lane rows
    (:attr:`RunResult.flow_control`): totals, and the rows of the links that paused."""
    paused = [r for r in rows if r["pauses"]]
    return {"paused_links": len({r["link"] for r in paused}),
            "pauses": sum(r["pauses"] for r in rows),
            "pause_share_max": max((r["pause_share"] or 0.0 for r in paused), default=0.0),
            "max_held_pkts": max((r["max_held_pkts"] for r in rows), default=0.0),
            "headroom_drops": sum(r["drops"] for r in rows), "links": paused}


def summarize(result: RunResult, spec: PatternSpec, participants: list[str],
              host_mbps: float) -> dict[str, Any]:
    """Headline figures of one run, with its fidelity checks."""
    summary = {**pattern_summary(result, spec, participants, host_mbps), **_totals(result),
               "errors": result.errors, "fidelity": report(result.fidelity)}
    if any(c.name == "lossless_drops" for c in result.fidelity):  # under flow control
        summary["flow_control"] = {**flow_control_summary(result.flow_control),
                                   "deadlocks": result.deadlocks}
    return summary


def pattern_summary(result: Any, spec: PatternSpec, participants: list[str],
                    host_mbps: float) -> dict[str, Any]:
    """The figures of one run that its transfer rows give, emulated or simulated: time,
    FCTs, ECMP's collisions, a collective's bus bandwidth, an incast's rounds."""
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
        "collisions": coll.count if coll else None,
        "max_flows_per_link": coll.max_flows_per_link if coll else None,
        "collision_time_share": coll.share_of_time_in_collision if coll else None,
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


def ideal_spans(result: RunResult, graph: Any, link_mbps: Mapping[frozenset, float],
                spray: bool, achieved_split: bool = False) -> dict[str, ideal.IdealSpan] | None:
    """What a perfect transport would have done with this run's transfers.

    Per-flow routing (``spray`` False) keeps each transfer on the path the run
    measured. Spraying splits it over its shortest paths: senders that take
    their source ports in turn (``entropy="packet"``) in the proportions the
    switches' hashes really gave (per-link byte counts), so the hash's
    unevenness belongs to the ideal; senders that steer (``"recycle"``) evenly,
    since how well they balance is their own doing (``achieved_split`` holds them, too,
    to the split they got: what their transport made of it). Independent
    transfers start when they really started; dependent ones (``after``,
    ``after_start``, with their ``delay_s``) the instant the model allows, not
    when they really started (that would hand the ideal every real step's delay).
    Every transfer ends when its last packet has crossed its path store-and-forward
    (:func:`ideal.store_and_forward_s`), and the transfers of one connection go in
    order (``Transfer.connection``).
    None when a transfer's path (needed for per-flow routing) was not measured.
    """
    routed = _routed(result, graph, spray, achieved_split)
    if routed is None:
        return None
    spec = result.plan.transport
    rows = {r["id"]: r for r in result.transfer_rows()}
    fluid = []
    for t in result.plan.transfers:
        load, acks, path = routed[t.id]
        modelled = t.after or t.after_start  # its start follows from the model
        start = 0.0 if modelled else rows[t.id].get("send_start") or result.plan.start_at
        latency = ideal.store_and_forward_s(
            [link_mbps[frozenset(link)] for link in zip(path, path[1:])],
            ideal.last_packet_bytes(spec.kind, spec.mtu_payload, t.bytes))
        fluid.append(ideal.FluidTransfer(t.id, t.bytes, load, start, t.after, latency,
                                         t.delay_s, t.connection, t.after_start, acks))
    return ideal.simulate(fluid, ideal.link_capacity(graph, link_mbps))


def ideal_transfers(result: RunResult, graph: Any, link_mbps: Mapping[frozenset, float],
                    spray: bool, achieved_split: bool = False) -> list[TransferRecord] | None:
    """The ideal of this run: its transfers with the times a perfect transport would
    have had (:func:`ideal_spans`), to measure exactly as the run is measured. None
    when a path (needed for per-flow routing) was not measured."""
    spans = ideal_spans(result, graph, link_mbps, spray, achieved_split)
    if spans is None:
        return None
    return [t.timed(spans[t.id].start, spans[t.id].end) for t in records(result.transfer_rows())]


def ideal_steady_rates(result: RunResult, graph: Any, link_mbps: Mapping[frozenset, float],
                       spray: bool) -> dict[str, float] | None:
    """Each transfer's max-min fair rate (Mbit/s of goodput) on the run's paths while
    all of them run at once: the ideal of a steady-state rate (htsim's measure), routed
    as :func:`ideal_spans` routes them. None when a path was not measured."""
    routed = _routed(result, graph, spray, achieved_split=False)
    if routed is None:
        return None
    return ideal.max_min_rates({fid: load for fid, (load, _, _) in routed.items()},
                               ideal.link_capacity(graph, link_mbps),
                               {fid: acks for fid, (_, acks, _) in routed.items()})


def _routed(result: RunResult, graph: Any, spray: bool, achieved_split: bool
            ) -> dict[str, tuple[dict, dict, list[str]]] | None:
    """Transfer id -> its data load, its ACKs' load and a node path (the one measured,
    or a shortest one for a spray), as :func:`ideal_spans` describes them."""
    spec = result.plan.transport
    overhead = ideal.transport_overhead(spec.kind, spec.mtu_payload)
    rows = {r["id"]: r for r in result.transfer_rows()}
    measured_split = spray and (spec.entropy == "packet" or achieved_split)
    link_bytes = result.links.totals() if measured_split else None
    routed = {}
    for t in result.plan.transfers:
        path = rows[t.id].get("path")
        if spray:
            load = ideal.spray_load(graph, t.src, t.dst, overhead, link_bytes)
            path = ideal.shortest_path(graph, t.src, t.dst)
        elif path:
            load = ideal.path_load(path, overhead)
        else:
            return None
        routed[t.id] = (load, ideal.ack_load(load, overhead), path)
    return routed
