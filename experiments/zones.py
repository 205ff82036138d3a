"""Zones (DeepSeek Fire-Flyer 2): what does a job lose when it spans the two
zones, and do storage reads stay inside a client's zone?

A ring all-reduce of N ranks (default: one zone's hosts, 8) runs three ways
on one two-zone fabric (two leaf-spine zones joined by ``interzone_links``
spine-to-spine links at the host rate):

``one-zone``
    all ranks in zone 0 (ring order seeded): the zone is non-blocking.
``cross-zone``
    half the ranks in each zone, ring order seeded and zone-unaware (as a
    scheduler that ignores zones would place them): every ring hop between
    zones is one flow over the few inter-zone links.
``cross-zone-contiguous``
    the same ranks, the ring ordered zone by zone (what a topology-aware ring
    builder does): the ring crosses the boundary once in each direction.

Storage reads (``storage-zone0``, ``storage-zone1``): one client per zone
(seeded) reads striped blocks from every dual-homed storage node; the
runner addresses each storage node by its NIC in the client's zone, and the
run checks it: bytes on inter-zone links, and the switches each stripe's
measured path crossed.

Theory: a ring runs at the speed of its slowest hop. With ``c`` ring hops
between zones, ``c/2`` flows go each way over inter-zone capacity ``L``
(in host rates: ``interzone_links`` here), so busbw / host rate is at most
``min(1, L / (c/2))`` (``bound_frac``; per-flow ECMP can only do worse when
``L > 1``). A contiguous ring has ``c = 2`` and is not limited when
``L >= 1``; a zone-unaware one has ``c`` ~ N/2 and more (up to N when the
zones alternate: ``2/N``).

Transport: Fire-Flyer 2 is an InfiniBand fabric (HFReduce and 3FS are RDMA), so by
default the runs are on the roce transport as ``--preset fire-flyer`` (three lossless
lanes, no congestion control, the subnet manager's static routes); ``--transport tcp``
runs the hosts' kernel TCP over lossy Ethernet with ECMP.

Published anchor: Fire-Flyer 2 keeps a job inside one zone; the two zones
share only a few links, so cross-zone traffic is limited by them, and its
storage nodes sit in both zones so that reads never cross.
"""

from __future__ import annotations

import statistics
from typing import Any, Mapping

import networkx as nx

import topologies
from fabric.analysis import plotstyle
from fabric.experiment import Experiment, Measured, Mode, RunContext, RunData, Runner, Scheduled
from fabric.experiment.measures import against_ideal, as_float, ideal_rows, span_s
from fabric.experiment.options import CC, ROCE_MTU, TRANSPORT
from fabric.model import graph as fg
from fabric.traffic import collectives, sizing, storage
from fabric.traffic.model import ScheduleError, TransportSpec
from fabric.traffic.placement import rank_hosts

NAME = "zones"
QUESTION = ("How much does a ring all-reduce lose when it spans the two zones of a "
            "Fire-Flyer-2-style fabric, and do storage reads stay in the client's zone?")
DEFAULT_TOPO = "two-zone,hosts_per_leaf=4,leaves=2,spines=2,interzone_links=1,storage=2"
JOB_PLACEMENTS = ("one-zone", "cross-zone", "cross-zone-contiguous")
STORAGE_PLACEMENTS = ("storage-zone0", "storage-zone1")
PLACEMENTS = JOB_PLACEMENTS + STORAGE_PLACEMENTS
COLLECTIVE = "ring-allreduce"
# A run's traffic per endpoint at line rate in packets of its transport (quick, full):
# the same at every rate; 432 TCP segments are 1 s at 5 Mbit/s
TARGET_PACKETS = {True: 432, False: 864}
TCP = TransportSpec("tcp")
ESTIMATE_MBPS = 5.0  # the rate the wall-clock estimate assumes (a 2-core machine's)
STORAGE_ROUNDS = 4
# A stalled run fails after this many times its line-rate duration (at least 30 s).
DEADLINE_FACTOR = 20.0
# Wall-clock cost estimates, from the collisions experiment's quick runs (~50 s):
# bring-up + idle-path check + teardown, and one traffic run's fixed cost
# (1.5 s agent start lead, path monitors, counters, agent reports).
BRINGUP_S = 8.0
RUN_OVERHEAD_S = 4.0
CONTIGUOUS_NOTE = ("cross-zone-contiguous orders the ring zone by zone: it crosses once "
                   "each way, so one inter-zone link at the host rate carries it at full speed")


# --- pure helpers ------------------------------------------------------------

def zone_hosts(graph: nx.Graph, zone: int) -> list[str]:
    """Compute endpoints (role ``host``) of ``zone``, in builder order."""
    return [h for h in fg.nodes_with_role(graph, "host") if graph.nodes[h].get("zone") == zone]


def job_size(graph: nx.Graph) -> int:
    """Default ranks: the hosts of the smaller zone, rounded down to even (>= 2)."""
    n = min(len(zone_hosts(graph, 0)), len(zone_hosts(graph, 1)))
    n -= n % 2
    if n < 2:
        raise ScheduleError(f"{NAME}: each of the two zones needs at least two compute hosts "
                            f"(a two-zone fabric)")
    return n


def job_ranks(graph: nx.Graph, placement: str, n: int, seed: int) -> list[str]:
    """Ranks (ring order) of one job placement; hosts and order seeded by ``seed``."""
    if placement == "one-zone":
        return rank_hosts(graph, n, placement="random", seed=seed, hosts=zone_hosts(graph, 0))
    if placement not in ("cross-zone", "cross-zone-contiguous"):
        raise ValueError(f"unknown job placement {placement!r} (known: {JOB_PLACEMENTS})")
    if n % 2:
        raise ValueError(f"a cross-zone job needs an even number of ranks, got {n}")
    halves = [rank_hosts(graph, n // 2, placement="random", seed=seed,
                         hosts=zone_hosts(graph, z)) for z in (0, 1)]
    if placement == "cross-zone-contiguous":
        return halves[0] + halves[1]
    # Zone-unaware ring order: the chosen hosts shuffled together.
    return rank_hosts(graph, placement="random", seed=seed, hosts=halves[0] + halves[1])


def storage_client(graph: nx.Graph, zone: int, seed: int) -> str:
    """The reading client of ``zone`` (a seeded choice among its hosts)."""
    return rank_hosts(graph, 1, placement="random", seed=seed, hosts=zone_hosts(graph, zone))[0]


def interzone_link_set(graph: nx.Graph) -> set[frozenset]:
    """Links between switches of different zones."""
    return {frozenset((a, b)) for a, b in graph.edges
            if fg.is_switch(graph, a) and fg.is_switch(graph, b)
            and graph.nodes[a].get("zone") != graph.nodes[b].get("zone")}


def interzone_bytes(graph: nx.Graph, totals: dict[tuple[str, str], int]) -> int:
    """Bytes carried (both directions) by inter-zone links, from per-link totals."""
    links = interzone_link_set(graph)
    return int(sum(b for link, b in totals.items() if frozenset(link) in links))


def zone_crossing_pairs(graph: nx.Graph, ranks: list[str]) -> int:
    """Ring neighbour pairs (i, i+1 mod N) whose ranks are in different zones."""
    n = len(ranks)
    if n < 2:
        return 0
    return sum(graph.nodes[ranks[i]].get("zone") != graph.nodes[ranks[(i + 1) % n]].get("zone")
               for i in range(n))


def ring_bound_frac(graph: nx.Graph, ranks: list[str]) -> float:
    """Upper bound of busbw / host rate set by the inter-zone capacity.

    ``c`` crossing ring hops put ``c/2`` flows on each direction of the
    inter-zone links; their capacity is counted in host-link rates.
    """
    crossings = zone_crossing_pairs(graph, ranks)
    if crossings == 0:
        return 1.0
    host_gbps = max(graph.edges[r, next(iter(graph.neighbors(r)))]["gbps"] for r in ranks)
    capacity = sum(graph.edges[tuple(link)]["gbps"] for link in interzone_link_set(graph))
    return min(1.0, capacity / host_gbps / (crossings / 2))


def zone_switches(graph: nx.Graph, zone: int) -> set[str]:
    """Switches of ``zone``."""
    return {s for s in fg.switches(graph) if graph.nodes[s].get("zone") == zone}


def stripe_path_check(graph: nx.Graph, paths: dict[str, list[str] | None],
                      stripe_ids: list[str], zone: int) -> tuple[int, int]:
    """``(stripes whose measured path left the client's zone, stripes with no path)``.

    A stripe path is the node sequence the runner's flow monitors recorded;
    any switch outside ``zone`` means the stripe crossed zones.
    """
    mine = zone_switches(graph, zone)
    off, unmeasured = 0, 0
    for sid in stripe_ids:
        path = paths.get(sid)
        if not path:
            unmeasured += 1
        elif any(fg.is_switch(graph, n) and n not in mine for n in path):
            off += 1
    return off, unmeasured


def ring_size(n: int, packets: int, transport: TransportSpec = TCP) -> int:
    """nccl-tests size whose ring all-reduce has each rank send ``packets`` packets."""
    per_rank = sizing.bytes_of(packets, transport)  # what each rank sends
    return max(n, int(per_rank / collectives.busbw_factor(COLLECTIVE, n)))


def schedules(graph: nx.Graph, seed: int, packets: int, n: int | None = None,
              transport: TransportSpec = TCP) -> list[dict[str, Any]]:
    """Every run of one seed: ``{"placement", "transfers", "ranks", "size", "client",
    "zone", "stripes"}`` (job runs: ranks and size; storage runs: client, zone, stripe ids)."""
    n = n or job_size(graph)
    size = ring_size(n, packets, transport)
    runs = []
    for placement in JOB_PLACEMENTS:
        ranks = job_ranks(graph, placement, n, seed)
        runs.append({"placement": placement, "ranks": ranks, "size": size, "client": None,
                     "zone": None, "stripes": [],
                     "transfers": collectives.generate(COLLECTIVE, ranks, size,
                                                       tag=f"{placement}-ring")})
    servers = fg.nodes_with_role(graph, "storage")
    if not servers:
        raise ScheduleError(f"{NAME}: the fabric has no storage nodes (two-zone,storage=...)")
    block = max(len(servers), sizing.bytes_of(packets, transport) // STORAGE_ROUNDS)
    for zone, placement in enumerate(STORAGE_PLACEMENTS):
        client = storage_client(graph, zone, seed)
        transfers = storage.striped_read(client, servers, block, STORAGE_ROUNDS,
                                         tag=f"read-z{zone}")
        runs.append({"placement": placement, "ranks": [], "size": block * STORAGE_ROUNDS,
                     "client": client, "zone": zone, "transfers": transfers,
                     "stripes": [t.id for t in transfers if t.src in servers]})
    return runs


def estimate_duration_s(graph: nx.Graph, quick: bool, seeds: int | None = None) -> float:
    """Wall-clock estimate of ``run`` (pure): bring-up plus every run's fixed cost
    and its traffic time at the inter-zone bound (the worst case)."""
    count = seeds or (2 if quick else 10)
    target = sizing.seconds_of(TARGET_PACKETS[quick], TCP, ESTIMATE_MBPS)
    total = BRINGUP_S
    for seed in range(count):
        for run in schedules(graph, seed, TARGET_PACKETS[quick]):
            bound = ring_bound_frac(graph, run["ranks"]) if run["ranks"] else 1.0
            total += RUN_OVERHEAD_S + target / bound
    return total



def run_row(graph: nx.Graph, run: dict[str, Any], seed: int, host_mbps: float,
            transfer_rows: list[dict[str, Any]], totals: dict, paths: dict,
            valid: bool) -> dict[str, Any]:
    """The runs.csv row of one run (pure: from the result's rows, link totals, paths)."""
    span = span_s(transfer_rows)
    row: dict[str, Any] = {"placement": run["placement"], "seed": seed,
                           "ranks": len(run["ranks"]) or None, "client": run["client"],
                           "host_mbps": host_mbps, "size_bytes": run["size"],
                           "time_s": round(span, 4) if span else None}
    if run["ranks"]:
        frac = (collectives.busbw(COLLECTIVE, len(run["ranks"]), run["size"], span) * 8 / 1e6
                / host_mbps) if span else None
        row.update(zone_crossing_pairs=zone_crossing_pairs(graph, run["ranks"]),
                   bound_frac=round(ring_bound_frac(graph, run["ranks"]), 4),
                   stripes_off_zone=None, stripes_unmeasured=None)
    else:
        stripe_bytes = sum(r["bytes"] for r in transfer_rows if r["id"] in set(run["stripes"]))
        frac = (stripe_bytes * 8 / 1e6 / span / host_mbps) if span else None
        off, unmeasured = stripe_path_check(graph, paths, run["stripes"], run["zone"])
        row.update(zone_crossing_pairs=None, bound_frac=1.0, stripes_off_zone=off,
                   stripes_unmeasured=unmeasured)
    row.update(busbw_frac=round(frac, 4) if frac is not None else None,
               interzone_bytes=interzone_bytes(graph, totals), valid=bool(valid and span))
    return row


def _row_of(run: Scheduled, result: Any, report: dict[str, Any]) -> dict[str, Any]:
    c = run.context
    row = run_row(c["graph"], c, run.seed, c["host_mbps"], result.transfer_rows(),
                  result.links.totals(), result.paths, report["valid"])
    best = ideal_rows(result, c["graph"], c["link_mbps"])
    ideal = (run_row(c["graph"], c, run.seed, c["host_mbps"], best, result.links.totals(),
                     result.paths, True)["busbw_frac"] if best else None)
    return {**row, **against_ideal(row["busbw_frac"], ideal)}


def notes_for(rows: list[dict[str, Any]]) -> list[str]:
    """How many ring hops cross zones, the bound that sets, and where the stripes went."""
    notes = []
    for placement in ("cross-zone", "cross-zone-contiguous"):
        mine = [r for r in rows if r["placement"] == placement]
        if mine:
            crossings = [r["zone_crossing_pairs"] for r in mine]
            notes.append(f"{placement}: {min(crossings)}-{max(crossings)} ring hops cross zones; "
                         f"inter-zone bound on busbw/host rate "
                         f"{min(r['bound_frac'] for r in mine):.2f}-"
                         f"{max(r['bound_frac'] for r in mine):.2f}")
    reads = [r for r in rows if r["placement"] in STORAGE_PLACEMENTS]
    if reads:
        off = sum(r["stripes_off_zone"] for r in reads)
        unmeasured = sum(r["stripes_unmeasured"] for r in reads)
        notes.append(f"storage: {off} stripes left the client's zone ({unmeasured} without a "
                     f"measured path); inter-zone bytes during reads: "
                     f"{max(r['interzone_bytes'] for r in reads)} at most")
    notes.append(CONTIGUOUS_NOTE)
    return notes


# --- figures (no root: read the run directory only) ---------------------------

# The placements in the words of docs/experiments/zones.md; each label ends with the
# placement's name in runs.csv and the summary's table, so figure and table match.
TERMS = {"one-zone": "one zone",
         "cross-zone": "both zones,\nzone-unaware ring",
         "cross-zone-contiguous": "both zones, ordered\nzone by zone",
         "storage-zone0": "storage reads,\nclient in zone 0",
         "storage-zone1": "storage reads,\nclient in zone 1"}


def label(placement: str) -> str:
    """A placement's axis label: the docs' words, then its name in the tables."""
    return f"{TERMS[placement]}\n({placement})" if placement in TERMS else placement


def _present(runs: list[dict]) -> tuple[list[str], list[str]]:
    """The placements of a run directory, and their axis labels."""
    present = [p for p in PLACEMENTS if any(r["placement"] == p for r in runs)]
    return present, [label(p) for p in present]


def busbw_figure(data: RunData) -> Any:
    """busbw / host rate per placement with spread, the bound and the ideal."""
    runs = data.runs
    present, labels = _present(runs)
    fig, ax = data.plt.subplots(figsize=(1.0 + 1.4 * len(present), 2.8))
    bound_label = "inter-zone bound"
    for i, placement in enumerate(present):
        mine = [r for r in runs if r["placement"] == placement]
        values = [v for v in (as_float(r["busbw_frac"]) for r in mine) if v is not None]
        failed = len(mine) - len(values)
        if values:
            ax.boxplot(values, positions=[i], widths=0.5, showfliers=False)
            ax.scatter([i] * len(values), values, s=12, zorder=3,
                       color=plotstyle.colour(placement, i))
        bounds = [v for v in (as_float(r["bound_frac"]) for r in mine) if v is not None]
        if bounds and placement in JOB_PLACEMENTS:
            ax.scatter([i + 0.32] * len(bounds), bounds, marker="v", s=14, color="black",
                       zorder=2, label=bound_label)
            bound_label = None  # one legend entry
        plotstyle.ideal_ticks(ax, i + 0.32,
                              [v for v in (as_float(r.get("ideal")) for r in mine)
                               if v is not None],
                              plotstyle.IDEAL_LABEL if i == 0 else None)
        plotstyle.mark_incomplete(ax, i, failed)
    ax.set_xticks(range(len(present)), labels, fontsize=7)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("busbw / host rate\n(storage: goodput / host rate)")
    ax.set_title(f"ring all-reduce of {data.summary.get('ranks', '?')} ranks and striped reads")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def interzone_figure(data: RunData) -> Any:
    """Bytes on the inter-zone links per placement."""
    present, labels = _present(data.runs)
    fig, ax = data.plt.subplots(figsize=(1.0 + 1.4 * len(present), 2.6))
    for i, placement in enumerate(present):
        values = [float(r["interzone_bytes"]) / 1e6 for r in data.runs
                  if r["placement"] == placement]
        plotstyle.spread_bar(ax, i, values, plotstyle.colour(placement, i))
    ax.set_xticks(range(len(present)), labels, fontsize=7)
    ax.set_ylabel("MB that crossed zones\n(on the inter-zone links)")
    ax.set_title("bytes that crossed zones, per run")
    return fig


# --- the experiment ------------------------------------------------------------


class Zones(Experiment):
    """A ring all-reduce placed in one zone or across both, and striped reads from the
    dual-homed storage, on one two-zone bring-up."""

    name = NAME
    question = QUESTION
    default_topology = DEFAULT_TOPO
    modes = {"quick": Mode(seeds=2), "full": Mode(seeds=10)}
    options = (TRANSPORT, CC, ROCE_MTU)
    seed_preset = "fire-flyer"
    anchors = {"fire-flyer-2": "jobs are kept inside one zone; the zones share few links, so "
                               "cross-zone traffic is limited by them",
               "storage": "storage nodes are dual-homed: reads stay in the client's zone"}

    def check(self, ctx: RunContext) -> None:
        """Refuse a topology without two zones of compute hosts and dual-homed storage."""
        schedules(self.graph(ctx), 0, TARGET_PACKETS[ctx.quick], transport=ctx.transport())

    def run_count(self, ctx: RunContext) -> int:
        return len(self.seeds(ctx)) * len(PLACEMENTS)

    def estimate_s(self, ctx: RunContext) -> float:
        return estimate_duration_s(self.graph(ctx), ctx.quick, len(self.seeds(ctx)))

    def measure(self, ctx: RunContext, runner: Runner) -> Measured:
        """One bring-up; per seed every job placement and both storage reads."""
        spec = self.topologies(ctx)[0]
        graph = topologies.build(spec)
        n = job_size(graph)
        packets = TARGET_PACKETS[ctx.quick]
        transport = ctx.transport()
        with runner.bring_up(graph, host_mbps=ctx.host_mbps,
                             packet_bytes=transport.packet_bytes) as emu:
            host_mbps = emu.report.rate_plan.host_mbps
            target = sizing.seconds_of(packets, transport, host_mbps)
            runs = (Scheduled({"placement": sched["placement"], "seed": seed},
                              sched["transfers"], seed,
                              {**sched, "graph": graph, "host_mbps": host_mbps,
                               "link_mbps": emu.report.rate_plan.link_mbps})
                    for seed in self.seeds(ctx)
                    for sched in schedules(graph, seed, packets, n, transport))
            runner.run(emu, runs, transport, "", _row_of,
                       deadline_s=max(30.0, DEADLINE_FACTOR * target))
        return Measured({"topology": spec, "ranks": n, "collective": COLLECTIVE,
                         "placements": PLACEMENTS, **ctx.transport_parameters(transport),
                         "work": {"target_packets": packets,
                                  "payload_bytes": transport.payload_bytes},
                         "storage_rounds": STORAGE_ROUNDS,
                         "host_mbps": ctx.host_mbps or "auto", "host_mbps_used": host_mbps},
                        {"topology": spec, "ranks": n})

    def table(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """busbw_frac mean/min/max, inter-zone bytes and the bound per placement.

        Incomplete runs (busbw_frac None) are counted, not averaged.
        """
        groups: dict[str, list[dict]] = {}
        for row in rows:
            groups.setdefault(row["placement"], []).append(row)
        table = []
        for placement in [p for p in PLACEMENTS if p in groups] + [p for p in groups
                                                                    if p not in PLACEMENTS]:
            group = groups[placement]
            values = [float(r["busbw_frac"]) for r in group if r["busbw_frac"] not in (None, "")]
            zbytes = [float(r["interzone_bytes"]) for r in group]
            bounds = [float(r["bound_frac"]) for r in group if r["bound_frac"] not in (None, "")]
            ideals = [float(r["ideal"]) for r in group if r.get("ideal") not in (None, "")]
            effs = [float(r["efficiency"]) for r in group if r.get("efficiency") not in (None, "")]
            table.append({"placement": placement, "seeds": len(group),
                          "busbw_frac": round(statistics.fmean(values), 4) if values else None,
                          "busbw_frac_min": min(values) if values else None,
                          "busbw_frac_max": max(values) if values else None,
                          "bound_frac": round(statistics.fmean(bounds), 4) if bounds else None,
                          "ideal": round(statistics.fmean(ideals), 4) if ideals else None,
                          "efficiency": round(statistics.fmean(effs), 4) if effs else None,
                          "interzone_mb": round(statistics.fmean(zbytes) / 1e6, 3),
                          "incomplete": len(group) - len(values)})
        return table

    def notes(self, ctx: RunContext, rows: list[dict[str, Any]], measured: Measured
              ) -> list[str]:
        return notes_for(rows)

    def figures(self) -> Mapping[str, Any]:
        return {"busbw": busbw_figure, "interzone_bytes": interzone_figure}


EXPERIMENT = Zones()
