"""Storage (Meta's AI storage blueprint): do slow fetches stall training steps, and what
keeps a checkpoint-restore stampede off the storage links?

Two parts, both over TCP in the storage class (DSCP 10), on one fabric whose
storage nodes (or, on fabrics without them, the last ``STORAGE_SERVERS``
compute endpoints) serve the other compute endpoints, the training hosts.

``dataloading``: every training host runs a step loop. A step computes for
``COMPUTE_PACKET_TIMES`` packet times of its link and needs its batch, which the
host's data loader asked for when the previous step started (one prefetched
batch, striped over every storage server). A step that starts late waited for its batch: that wait is
the stall. The batch is sized so that, with every host fetching at once,
the storage links are ``STORAGE_LOAD`` busy. Conditions: ``alone`` (no other
traffic), ``shared`` (a ring all-reduce over the training hosts in the same
FIFO lane) and ``separate`` (the ring in its own lane: collective 50 %,
storage 30 %, default 20 % of every link).

``stampede``: after a simulated restart, ``clients`` training hosts read the
whole checkpoint (``SHARDS_PER_SERVER`` shards per storage server, one
client's checkpoint is ``RESTORE_PACKETS`` TCP segments) at once. Sources:
``storage`` (every shard from its storage server), ``cache`` (a peer cache:
``HIT_RATE`` of the shards held by the training hosts, each shard by one,
the rest from storage), ``admission`` (storage, with at most ``ADMISSION``
reads outstanding per client, as 3FS's request-to-send) and
``cache+admission`` (both: a cached read fans in from many peers at once).

Work is sized in TCP segments and packet times (:mod:`fabric.traffic.sizing`), so the
schedule is the same at every link rate; only its length in seconds follows from the
rate. Every figure stands beside its ideal: what the busiest endpoint link allows
at line rate (payload plus TCP/IP headers), with no contention in the core.

Anchors (Meta's AI storage blueprint): a distributed cache with an 80 %
average hit rate takes restore reads off storage; metadata access in 1-2 ms
(not modelled: a request is one 64-byte message); the aim is a low *maximum*
fetch latency (pMax), not a low mean.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import networkx as nx

import topologies
from fabric.analysis import plotstyle
from fabric.emulation.machine_speed import default_host_mbps
from fabric.experiment import Experiment, Measured, Mode, RunContext, RunData, Runner, Scheduled
from fabric.experiment.measures import mean_or_none, truthy
from fabric.model import graph as fg
from fabric.model.lanes import DSCP_COLLECTIVE, DSCP_STORAGE, SINGLE_LANE, THREE_LANES, LaneConfig
from fabric.traffic import collectives, metrics, sizing
from fabric.traffic.ideal import transport_overhead
from fabric.traffic.model import ScheduleError, Transfer, TransportSpec
from fabric.traffic.placement import rank_hosts
from fabric.traffic.storage import (cache_sources, checkpoint_restore, dataloader, step_times,
                                    storage_sources)

NAME = "storage"
QUESTION = ("Do slow storage fetches stall training steps, and does a peer cache or request "
            "admission keep a checkpoint-restore stampede off the storage links?")
DEFAULT_TOPO = "leaf-spine"
STORAGE_SERVERS = 4  # compute endpoints that stand in for storage on fabrics without any
LANES: dict[str, LaneConfig] = {"shared": SINGLE_LANE, "separate": THREE_LANES}
CONDITIONS = {"alone": ("shared", False), "shared": ("shared", True),
              "separate": ("separate", True)}  # condition -> (lanes, with the ring)
SOURCES = ("storage", "cache", "admission", "cache+admission")
# In TCP segments and packet times, the same at every rate (fabric.traffic.sizing);
# 432 packet times are ~1 s at 5 Mbit/s.
COMPUTE_PACKET_TIMES = 432  # one training step's compute, in packet times of a host link
STORAGE_LOAD = 0.7     # of the storage links, when every host fetches once per step
RESTORE_PACKETS = 432  # one client's checkpoint, in segments
SHARDS_PER_SERVER = 5  # with an 80 % hit rate, one shard per server misses the cache
HIT_RATE = 0.8         # Meta's average distributed-cache hit rate
ADMISSION = 4          # reads outstanding per client under request-to-send admission
LOAD_TAG, RING_TAG, RESTORE_TAG = "load", "ring", "restore"
TCP = TransportSpec("tcp")
TCP_WIRE = transport_overhead("tcp").data  # wire bytes per payload byte

# Time budget model: as experiments.incast (docs/platform.md, "Time budget").
BRINGUP_S = 3.0
TEARDOWN_S = 2.5
RUN_OVERHEAD_S = 2.5
IDLE_BYTES = 1_000_000
QUICK_BUDGET_S = 150.0


@dataclass(frozen=True)
class StorageMode(Mode):
    """Steps per dataloading run, stampede sizes (0: every training host), seeds."""

    steps: int
    clients: tuple[int, ...]


QUICK = StorageMode(seeds=1, steps=5, clients=(1, 4, 0))
FULL = StorageMode(seeds=3, steps=10, clients=(1, 2, 4, 8, 0))


@dataclass(frozen=True)
class Roles:
    """Training hosts (ranks, clients) and storage servers."""

    training: tuple[str, ...]
    servers: tuple[str, ...]


def roles(graph: nx.Graph) -> Roles:
    """The fabric's storage nodes serve the compute endpoints; without storage nodes the
    last ``STORAGE_SERVERS`` compute endpoints stand in.

    Raises
    ------
    ScheduleError
        When fewer than two training hosts would be left.
    """
    compute = rank_hosts(graph)
    servers = fg.nodes_with_role(graph, "storage") or list(reversed(compute))[:STORAGE_SERVERS]
    training = [h for h in compute if h not in servers]
    if len(training) < 2:
        raise ScheduleError(f"{NAME} needs 2 training hosts beside {len(servers)} storage "
                            f"servers; the fabric has {len(compute)} compute endpoints")
    return Roles(tuple(training), tuple(servers))


def storage_links(graph: nx.Graph, who: Roles) -> int:
    """Links of the storage servers (a dual-homed node has one per zone)."""
    return sum(len(graph.nodes[s]["nics"]) for s in who.servers)


def clients_of(mode: StorageMode, who: Roles) -> list[int]:
    """The stampede sizes of ``mode`` on this fabric (0 means every training host)."""
    n = len(who.training)
    return sorted({min(c or n, n) for c in mode.clients})


def _bytes_per_s(host_mbps: float) -> float:
    return host_mbps * 1e6 / 8


def compute_s(host_mbps: float) -> float:
    """Seconds of one step's compute (``COMPUTE_PACKET_TIMES``) at ``host_mbps``."""
    return sizing.seconds_of(COMPUTE_PACKET_TIMES, TCP, host_mbps)


def batch_bytes(clients: int, links: int) -> int:
    """One batch, so that every client fetching once per step loads the storage links'
    packets ``STORAGE_LOAD``."""
    return int(STORAGE_LOAD * links * sizing.bytes_of(COMPUTE_PACKET_TIMES, TCP) / clients)


def ring_bytes(ranks: int, steps: int) -> int:
    """nccl-tests size whose ring all-reduce lasts the step loop at line rate."""
    return int(sizing.bytes_of(steps * COMPUTE_PACKET_TIMES, TCP)
               / collectives.busbw_factor("ring_allreduce", ranks))


def shard_bytes(shards: int) -> int:
    """One checkpoint shard of a ``RESTORE_PACKETS`` checkpoint."""
    return max(1, sizing.bytes_of(RESTORE_PACKETS, TCP) // shards)


def loading_transfers(who: Roles, condition: str, host_mbps: float, steps: int,
                      links: int) -> list[Transfer]:
    """Every training host's step loop, plus the ring all-reduce if the condition has it
    (``host_mbps`` gives the compute its seconds; the bytes do not depend on it)."""
    if condition not in CONDITIONS:
        raise ValueError(f"unknown condition {condition!r}; one of {sorted(CONDITIONS)}")
    nbytes = batch_bytes(len(who.training), links)
    out: list[Transfer] = []
    for i, host in enumerate(who.training):
        out += dataloader(host, who.servers, nbytes, steps, compute_s(host_mbps),
                          dscp=DSCP_STORAGE, tag=f"{LOAD_TAG}/c{i}")
    if CONDITIONS[condition][1]:
        out += collectives.ring_allreduce(list(who.training),
                                          ring_bytes(len(who.training), steps),
                                          dscp=DSCP_COLLECTIVE, tag=RING_TAG)
    return out


def restore_transfers(who: Roles, source: str, clients: int) -> list[Transfer]:
    """The first ``clients`` training hosts restore the checkpoint from ``source``."""
    readers = list(who.training[:clients])
    shards = SHARDS_PER_SERVER * len(who.servers)
    if source in ("cache", "cache+admission"):
        sources = cache_sources(readers, who.servers, who.training, shards, HIT_RATE)
    elif source in ("storage", "admission"):
        sources = storage_sources(len(readers), who.servers, shards)
    else:
        raise ValueError(f"unknown source {source!r}; one of {SOURCES}")
    return checkpoint_restore(readers, sources, shard_bytes(shards),
                              admission=ADMISSION if source.endswith("admission") else None,
                              dscp=DSCP_STORAGE, tag=RESTORE_TAG)


def endpoint_bound_s(transfers: Sequence[Transfer], graph: nx.Graph, host_mbps: float
                     ) -> float:
    """Seconds the busiest endpoint link needs for these transfers at line rate.

    Each endpoint's sent and received bytes (with TCP/IP headers) over its
    links; the core is assumed uncontended, so this bounds from below.
    """
    sent: dict[str, int] = {}
    received: dict[str, int] = {}
    for t in transfers:
        sent[t.src] = sent.get(t.src, 0) + t.bytes
        received[t.dst] = received.get(t.dst, 0) + t.bytes
    worst = max(nbytes / len(graph.nodes[ep]["nics"])
                for side in (sent, received) for ep, nbytes in side.items())
    return worst * TCP_WIRE / _bytes_per_s(host_mbps)


def estimate_s(mode: StorageMode, seeds: int, who: Roles, host_mbps: float) -> float:
    """Pessimistic estimate of a run's wall time: bring-ups, idle checks, traffic runs.

    A dataloading run lasts its steps plus the warm-up batch, twice over
    (stalls); a stampede run its slowest link's bytes, twice over, plus one
    200 ms RTO.
    """
    step_s = compute_s(host_mbps)
    loading = len(CONDITIONS) * seeds * (RUN_OVERHEAD_S + 2 * (mode.steps + 1) * step_s)
    restore_s = sizing.seconds_of(RESTORE_PACKETS, TCP, host_mbps)
    stampede = 0.0
    for clients in clients_of(mode, who):
        slowest = max(restore_s, clients * restore_s / len(who.servers))
        stampede += len(SOURCES) * seeds * (RUN_OVERHEAD_S + 2 * slowest + 0.2)
    bringups = len(LANES) * (BRINGUP_S + TEARDOWN_S + RUN_OVERHEAD_S
                             + IDLE_BYTES * 8 / (host_mbps * 1e6))
    return bringups + loading + stampede


# --- measurement ---------------------------------------------------------------

def _counter(result: Any, name: str) -> int:
    return sum(int(a.get("netstat", {}).get(name, 0)) for a in result.agents.values())


def _losses(result: Any) -> dict[str, int]:
    """``drops`` at the endpoints' ingress buffers (exact); ``retransmits`` and
    ``timeouts`` from the hosts' TCP counters, which also see losses in the core."""
    return {"drops": int(sum(result.ingress_drops.values())),
            "retransmits": _counter(result, "RetransSegs"),
            "timeouts": _counter(result, "TCPTimeouts")}


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1e3, 1)


def fetch_records(result: Any, who: Roles, steps: int, step_s: float
                  ) -> list[dict[str, Any]]:
    """One row per client and batch: when it was asked for, arrived, and the step's stall
    (``step_s``: one step's compute, in seconds).

    ``fetch_ms`` is None for a batch that did not fully arrive; the stall of
    a step is None from the first missing batch on.
    """
    rows = {r["id"]: r for r in result.transfer_rows()}
    out = []
    for i, host in enumerate(who.training):
        issued, arrived = [], []
        for k in range(steps):
            batch = f"{LOAD_TAG}/c{i}/batch{k}"
            reqs = [rows[f"{batch}/req{j}"].get("send_start") for j in range(len(who.servers))]
            ends = [rows[f"{batch}/stripe{j}"].get("recv_end") for j in range(len(who.servers))]
            issued.append(min(reqs) if None not in reqs else None)
            arrived.append(max(ends) if None not in ends else None)
        known = next((k for k, a in enumerate(arrived) if a is None), steps)
        starts = step_times(arrived[:known], step_s)
        for k in range(steps):
            fetch = (arrived[k] - issued[k] if arrived[k] is not None and issued[k] is not None
                     else None)
            stall = starts[k] - starts[k - 1] - step_s if 0 < k < known else None
            out.append({"client": host, "batch": k, "fetch_ms": _ms(fetch),
                        "stall_ms": _ms(stall)})
    return out


def measure_loading(result: Any, who: Roles, steps: int, graph: nx.Graph, host_mbps: float,
                    links: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The runs.csv fields of a dataloading run and its per-batch rows.

    Fetch latencies are of batches 1.. (batch 0 is the warm-up, read before
    training starts); stalls of steps 1.. ; ``step_slowdown`` is the loop's
    time over ``steps`` computes. Figures are None unless every batch of
    every client arrived.
    """
    step_s = compute_s(host_mbps)
    fetches = fetch_records(result, who, steps, step_s)
    steady = [f["fetch_ms"] for f in fetches if f["batch"] > 0]
    stalls = [f["stall_ms"] for f in fetches if f["batch"] > 0]
    complete = None not in steady and None not in stalls
    per_step = statistics.fmean(stalls) if complete and stalls else None
    nbytes = batch_bytes(len(who.training), links)
    one_batch = [t for t in loading_transfers(who, "alone", host_mbps, 2, links)
                 if t.id.split("/")[2] == "batch0"]
    ring = [r for r in result.transfer_rows() if r["id"].startswith(RING_TAG + "/")]
    ring_ends = [r.get("recv_end") for r in ring]
    ring_starts = [r.get("send_start") for r in ring]
    ring_ms = (_ms(max(ring_ends) - min(ring_starts))
               if ring and None not in ring_ends and None not in ring_starts else None)
    row = {"steps": steps, "compute_ms": _ms(step_s), "batch_bytes": nbytes,
           "fetch_ideal_ms": _ms(endpoint_bound_s(one_batch, graph, host_mbps)),
           "fetch_p50_ms": round(metrics.percentile(steady, 50), 1) if complete else None,
           "fetch_p99_ms": round(metrics.percentile(steady, 99), 1) if complete else None,
           "fetch_max_ms": max(steady) if complete else None,
           "stall_ms_per_step": round(per_step, 1) if per_step is not None else None,
           "step_slowdown": (round(1 + per_step * (steps - 1) / (steps * step_s * 1e3), 4)
                             if per_step is not None else None),
           "collective_ms": ring_ms, **_losses(result)}
    return row, fetches


def measure_restore(result: Any, transfers: Sequence[Transfer], who: Roles, graph: nx.Graph,
                    host_mbps: float) -> dict[str, Any]:
    """The runs.csv fields of a stampede run.

    ``restore_s``: from the first request to the last shard at the last
    client; ``restore_p99_s``: the 99th percentile of the clients' own
    restore times (from the same first request); ``storage_link_util``: the
    payload the storage servers sent over ``restore_s`` times their links'
    capacity. None when a read did not complete.
    """
    rows = result.transfer_rows()
    starts = [r.get("send_start") for r in rows]
    ends: dict[str, list[float | None]] = {}
    for r in rows:
        if "/shard" in r["id"]:
            ends.setdefault(r["dst"], []).append(r.get("recv_end"))
    complete = bool(rows) and None not in starts and all(None not in e for e in ends.values())
    stored = sum(t.bytes for t in transfers if t.src in who.servers)
    links = storage_links(graph, who)
    row: dict[str, Any] = {"ideal_restore_s": round(endpoint_bound_s(transfers, graph,
                                                                      host_mbps), 3),
                           "storage_bytes": stored, "restore_s": None, "restore_p99_s": None,
                           "storage_link_util": None}
    if complete:
        t0 = min(starts)
        per_client = [max(e) - t0 for e in ends.values()]  # type: ignore[type-var]
        restore = max(per_client)
        row.update(restore_s=round(restore, 3),
                   restore_p99_s=round(metrics.percentile(per_client, 99), 3),
                   storage_link_util=round(stored / restore / (links * _bytes_per_s(host_mbps)),
                                           4))
    return {**row, **_losses(result)}


# --- the run -------------------------------------------------------------------

def _schedules(who: Roles, mode: StorageMode, seeds: list[int], lanes_name: str,
               host_mbps: float, links: int) -> Iterator[Scheduled]:
    """The runs of one bring-up: the dataloading conditions of its lanes, and on the
    one-lane fabric the stampede sweep."""
    for seed in seeds:
        for condition, (lane_set, _) in CONDITIONS.items():
            if lane_set == lanes_name:
                yield Scheduled({"part": "dataloading", "condition": condition, "source": "",
                                 "clients": len(who.training), "seed": seed},
                                loading_transfers(who, condition, host_mbps, mode.steps,
                                                  links), seed)
        if lanes_name != "shared":
            continue  # the stampede runs on the one-lane fabric
        for source in SOURCES:
            for clients in clients_of(mode, who):
                yield Scheduled({"part": "stampede", "condition": "", "source": source,
                                 "clients": clients, "seed": seed},
                                restore_transfers(who, source, clients), seed)


def _row_function(runner: Runner, who: Roles, graph: nx.Graph, steps: int, links: int,
                  host_mbps: float) -> Any:
    """The row of a run; a dataloading run's batches go to fetches.csv."""
    fetch_rows = runner.table("fetches")

    def row_of(run: Scheduled, result: Any, report: dict[str, Any]) -> dict[str, Any]:
        complete = bool(result.complete and not result.errors)
        base = {"host_mbps": host_mbps, "complete": complete,
                "valid": bool(report["valid"] and complete)}
        if run.keys["part"] == "dataloading":
            row, fetches = measure_loading(result, who, steps, graph, host_mbps, links)
            fetch_rows.extend({**run.keys, **f} for f in fetches)
            return {**base, **row}
        return {**base, **measure_restore(result, run.transfers, who, graph, host_mbps)}

    return row_of


def notes_for(who: Roles, host_mbps: float, links: int, mode: StorageMode) -> list[str]:
    """What each part set up and what to expect of it."""
    n = len(who.training)
    shards = SHARDS_PER_SERVER * len(who.servers)
    return [
        f"{n} training hosts, {len(who.servers)} storage servers ({links} links), TCP at "
        f"{host_mbps:g} Mbit/s",
        f"dataloading: {mode.steps} steps of {COMPUTE_PACKET_TIMES} packet times of compute "
        f"({compute_s(host_mbps) * 1e3:.0f} ms), a "
        f"{batch_bytes(n, links)} B batch per step and host (storage links "
        f"{STORAGE_LOAD:.0%} busy); expected: no stall alone (the ideal fetch is well under "
        f"the step); the ring's standing queue in a shared lane delays fetches, its own lane "
        f"takes that queue away",
        f"stampede: a checkpoint of {shards} shards, {shard_bytes(shards)} B each "
        f"({RESTORE_PACKETS} segments); expected: restore time grows with the clients when "
        f"every read goes to storage, the cache ({HIT_RATE:.0%} hits) flattens it, admission "
        f"(W={ADMISSION}) removes the timeouts",
        "ideal: the busiest endpoint link at line rate (TCP/IP headers counted, core "
        "uncontended); for a fetch, with every host fetching at once (hosts whose loops "
        "drift apart fetch faster); anchor: Meta's 80 % cache hit rate, 1-2 ms metadata "
        "access, low pMax",
        "drops: the endpoints' ingress buffers only; retransmits and timeouts (the hosts' TCP "
        "counters) also see losses in the core",
    ]



def _summed_losses(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {k: sum(r[k] for r in rows) for k in ("drops", "retransmits", "timeouts")}


# --- figures (no root: read the run directory only) -----------------------------

def storage_figure(data: RunData) -> Any:
    """One figure, both parts: fetch-latency CDFs with the step budget (left), restore
    time against clients per source with each source's ideal (right)."""
    fetches = data.csv("fetches") if (data.run_dir / "fetches.csv").exists() else []
    fig, (left, right) = data.plt.subplots(1, 2, figsize=(8.8, 2.8))
    _fetch_cdf(left, fetches, data.runs, data.summary.get("compute_ms"))
    _restore_curves(right, [r for r in data.runs if r["part"] == "stampede"])
    return fig


def _fetch_cdf(ax: Any, fetches: list[dict[str, str]], runs: list[dict[str, str]],
               compute_ms: float | None) -> None:
    for i, condition in enumerate(CONDITIONS):
        values = sorted(float(f["fetch_ms"]) for f in fetches if f["condition"] == condition
                        and int(f["batch"]) > 0 and f["fetch_ms"] not in ("", None))
        if values:
            ax.step(values, [(k + 1) / len(values) for k in range(len(values))], where="post",
                    label=condition, markevery=max(1, len(values) // 8),
                    **plotstyle.series_style(condition, i))
    if compute_ms is not None:
        ax.axvline(float(compute_ms), ls="--", color="grey", lw=1,
                   label="step budget (compute)")
    ideals = [float(r["fetch_ideal_ms"]) for r in runs if r["part"] == "dataloading"
              and r.get("fetch_ideal_ms") not in ("", None)]
    if ideals:
        ax.axvline(ideals[0], ls=":", color="black", lw=1, label="ideal fetch")
    ax.set_xlim(left=0)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("batch fetch latency (ms)")
    ax.set_ylabel("fraction of fetches")
    ax.set_title("dataloading")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right", fontsize=7)  # the tail runs along the top


# Measured restore curves: a line style each, and markers that nest (largest first,
# the later ones hollow), so a curve that lies on another (admission on storage: the
# same reads, the same links) stays visible.
RESTORE_LINES = ("-", "--", "-.", (0, (6, 1.5, 1, 1.5, 1, 1.5)))
IDEAL_DASH = (0, (1.5, 3.0))   # an ideal line: sparse dots, offset per source (below)


def _restore_means(mine: list[dict[str, str]], sizes: list[int]
                   ) -> tuple[list[float], list[float]]:
    """The mean restore time and the ideal at each number of clients."""
    means, ideal = [], []
    for n in sizes:
        values = [float(r["restore_s"]) for r in mine if int(r["clients"]) == n
                  and r["restore_s"] not in ("", None)]
        means.append(statistics.fmean(values) if values else float("nan"))
        ideal.append(float(next(r["ideal_restore_s"] for r in mine if int(r["clients"]) == n)))
    return means, ideal


def _restore_curves(ax: Any, stampede: list[dict[str, str]]) -> None:
    """Restore time per source against clients; each source's ideal as a dotted line in
    its colour. Sources with the same ideal (admission changes no capacity) share one
    line, their colours' dots interleaved, and one legend entry that names them."""
    from matplotlib.legend_handler import HandlerTuple

    ideals: dict[tuple, list[tuple[str, dict[str, Any]]]] = {}
    present = [s for s in SOURCES if any(r["source"] == s for r in stampede)]
    for i, source in enumerate(present):
        mine = [r for r in stampede if r["source"] == source]
        sizes = sorted({int(r["clients"]) for r in mine})
        means, ideal = _restore_means(mine, sizes)
        style = plotstyle.series_style(source, i)
        ax.plot(sizes, means, label=source, ls=RESTORE_LINES[i % len(RESTORE_LINES)],
                ms=7 - 1.2 * i, mfc=style["color"] if i % 2 == 0 else "white",
                zorder=3 + i, **style)
        ideals.setdefault((tuple(sizes), tuple(ideal)), []).append((source, style))
        ax.set_xticks(sizes)
    handles, labels = ax.get_legend_handles_labels()
    for (sizes, ideal), group in ideals.items():
        lines = []
        for k, (source, style) in enumerate(group):
            offset = sum(IDEAL_DASH[1]) * k / len(group)  # interleave coinciding sources
            lines += ax.plot(sizes, ideal, color=style["color"], lw=1.2,
                             ls=(offset, IDEAL_DASH[1]))
        handles.append(tuple(lines))
        labels.append("ideal (busiest link):\n" + ", ".join(s for s, _ in group))
    ax.set_ylim(bottom=0)
    ax.set_xlabel("clients restoring at once")
    ax.set_ylabel("restore time (s)")
    ax.set_title("checkpoint-restore stampede")
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7,
              handler_map={tuple: HandlerTuple(ndivide=1)})


# --- the experiment ------------------------------------------------------------


class Storage(Experiment):
    """Dataloading under a collective, and a checkpoint-restore stampede by source."""

    name = NAME
    question = QUESTION
    default_topology = DEFAULT_TOPO
    modes = {"quick": QUICK, "full": FULL}
    anchors = {"cache_hit_rate": HIT_RATE, "metadata_access_ms": [1, 2],
               "source": "Meta's AI storage blueprint: distributed cache with 80 % average "
                         "hit rate for restore reads; 1-2 ms metadata access; low pMax"}

    def check(self, ctx: RunContext) -> None:
        """Refuse a fabric without two training hosts beside its storage servers."""
        roles(self.graph(ctx))

    def run_count(self, ctx: RunContext) -> int:
        who = roles(self.graph(ctx))
        return len(self.seeds(ctx)) * (len(CONDITIONS) + len(SOURCES)
                                       * len(clients_of(self.mode(ctx), who)))

    def estimate_s(self, ctx: RunContext) -> float:
        graph = self.graph(ctx)
        return estimate_s(self.mode(ctx), len(self.seeds(ctx)), roles(graph),
                          ctx.host_mbps or default_host_mbps(graph, "user"))

    def measure(self, ctx: RunContext, runner: Runner) -> Measured:
        """One bring-up per lanes setting: dataloading under each condition, and the
        stampede sweep on the one-lane fabric."""
        topo = self.topologies(ctx)[0]
        graph = topologies.build(topo)
        mode, seeds = self.mode(ctx), self.seeds(ctx)
        who = roles(graph)
        links = storage_links(graph, who)
        rates = set()
        for lanes_name, lanes in LANES.items():
            with runner.bring_up(graph, host_mbps=ctx.host_mbps, lanes=lanes) as emu:
                host_mbps = emu.report.rate_plan.host_mbps
                rates.add(host_mbps)
                runner.run(emu, _schedules(who, mode, seeds, lanes_name, host_mbps, links),
                           TCP, lanes_name,
                           _row_function(runner, who, graph, mode.steps, links, host_mbps),
                           deadline_s=60.0 if ctx.quick else 120.0)
        return Measured(
            {"topology": topo, "conditions": list(CONDITIONS), "sources": list(SOURCES),
             "clients": clients_of(mode, who), "steps": mode.steps,
             "work": {"step_packet_times": COMPUTE_PACKET_TIMES,
                      "checkpoint_packets": RESTORE_PACKETS,
                      "payload_bytes": TCP.payload_bytes},
             "storage_load": STORAGE_LOAD, "hit_rate": HIT_RATE, "admission": ADMISSION,
             "shards": SHARDS_PER_SERVER * len(who.servers), "transport": "tcp",
             "tcp_cc": ctx.tcp_cc, "host_mbps": ctx.host_mbps or "auto",
             "estimated_s": round(self.estimate_s(ctx), 1)},
            {"topology": topo, "host_mbps": min(rates),
             "roles": {"training": list(who.training), "servers": list(who.servers)},
             "compute_ms": _ms(compute_s(min(rates)))})

    def table(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Dataloading per condition, then the stampede per source and clients (mean over
        seeds; fetch_max is the maximum; losses are summed). ``valid`` only when every run of
        the row was."""
        table = []
        loading = [r for r in rows if r["part"] == "dataloading"]
        for condition in [c for c in CONDITIONS if any(r["condition"] == c for r in loading)]:
            mine = [r for r in loading if r["condition"] == condition]
            maxima = [r["fetch_max_ms"] for r in mine if r["fetch_max_ms"] is not None]
            table.append({"part": "dataloading", "condition": condition, "runs": len(mine),
                          "fetch_ideal_ms": mine[0]["fetch_ideal_ms"],
                          **{k: mean_or_none([r[k] for r in mine], 1)
                             for k in ("fetch_p50_ms", "fetch_p99_ms")},
                          "fetch_max_ms": max(maxima) if len(maxima) == len(mine) else None,
                          "stall_ms_per_step": mean_or_none([r["stall_ms_per_step"] for r in mine],
                                                            1),
                          "step_slowdown": mean_or_none([r["step_slowdown"] for r in mine]),
                          "collective_ms": mean_or_none([r["collective_ms"] for r in mine], 1),
                          **_summed_losses(mine),
                          "valid": all(truthy(r["valid"]) for r in mine)})
        stampede = [r for r in rows if r["part"] == "stampede"]
        for source in [s for s in SOURCES if any(r["source"] == s for r in stampede)]:
            for clients in sorted({r["clients"] for r in stampede if r["source"] == source}):
                mine = [r for r in stampede if r["source"] == source and r["clients"] == clients]
                table.append({"part": "stampede", "source": source, "clients": clients,
                              "runs": len(mine), "ideal_restore_s": mine[0]["ideal_restore_s"],
                              "restore_s": mean_or_none([r["restore_s"] for r in mine], 3),
                              "restore_p99_s": mean_or_none([r["restore_p99_s"] for r in mine], 3),
                              "storage_link_util": mean_or_none([r["storage_link_util"]
                                                                 for r in mine]),
                              **_summed_losses(mine),
                              "valid": all(truthy(r["valid"]) for r in mine)})
        return table

    def notes(self, ctx: RunContext, rows: list[dict[str, Any]], measured: Measured
              ) -> list[str]:
        graph = self.graph(ctx)
        who = roles(graph)
        return notes_for(who, measured.summary["host_mbps"], storage_links(graph, who),
                         self.mode(ctx))

    def figures(self) -> Mapping[str, Any]:
        return {"storage": storage_figure}


EXPERIMENT = Storage()
