"""Placement (Meta RSC): does a collective's speed depend on where its ranks
sit, on a non-blocking Clos and on a 2:1 oversubscribed one?

A ring all-reduce over N ranks (default: the hosts of one leaf, 4 on the
default rail-clos) runs on ``rail-clos`` (non-blocking) and
``rail-clos,oversub=2`` (each leaf-spine link at half the rate; one
bring-up each, both at the same host rate: ``--host-mbps`` or the smaller of
the two automatic rates). Placements:

``packed``
    ranks fill servers under as few leaves as possible
    (:func:`~fabric.traffic.placement.rank_hosts` ``placement="rail"``
    order): with N = one leaf's hosts the whole ring stays under one leaf.
``scattered``
    ``placement="random"`` (seeded): ranks land on any leaf.

Share of ring neighbour pairs on different leaves
(:func:`spine_crossing_share`, i.e. ring traffic that crosses the spines),
on the default rail-clos (16 hosts, 4 leaves of 4): packed 0 for N=4
(0.25 for N=8: 2 of 8 hops change leaf); scattered ~0.8 on average for N=4
(a neighbour is on another leaf with probability 1 - 3/15), 0.5-1.0 over
seeds 0-9 (0.75 or 1.0 for 9 of them).

Theory: a ring runs at the speed of its slowest hop; with per-flow ECMP a
hop that crosses the spines takes one leaf-spine link, which runs at 1x the
host rate on the non-blocking fabric and 0.5x at 2:1 (``uplink_frac``), so
at 2:1 a scattered ring is capped at 0.5 of the host rate, a packed one that
stays under its leaf is not. On the non-blocking fabric two crossing hops
hashed onto the same spine link also halve the ring (ECMP collisions;
``max_flows_per_link`` shows them).

Transport: RSC is an InfiniBand fabric, so by default the ring runs on the
roce transport as ``--preset rsc`` (one lossless lane, no congestion control,
the subnet manager's static routes); ``--transport tcp`` runs the hosts'
kernel TCP over lossy Ethernet with ECMP, as before.

Published anchor: Meta's Research SuperCluster uses a non-blocking
two-layer Clos so that job performance does not depend on placement.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable, Mapping

import networkx as nx

import topologies
from fabric.analysis import plotstyle
from fabric.experiment import Experiment, Measured, Mode, RunContext, RunData, Runner, Scheduled
from fabric.experiment.measures import against_ideal, as_float, ideal_rows, span_s
from fabric.experiment.options import CC, ROCE_MTU, TRANSPORT
from fabric.model import graph as fg
from fabric.model.spec import parse_spec
from fabric.traffic import collectives, sizing
from fabric.traffic.model import ScheduleError, TransportSpec
from fabric.traffic.placement import rank_hosts

NAME = "placement"
QUESTION = ("Does a ring all-reduce's speed depend on rank placement on a non-blocking "
            "Clos, and on a 2:1 oversubscribed one?")
DEFAULT_TOPO = "rail-clos"
OVERSUBSCRIPTIONS = (1, 2)
PLACEMENTS = ("packed", "scattered")
COLLECTIVE = "ring-allreduce"
# A run's traffic per rank at line rate in packets of its transport (quick, full): the
# same at every rate; 432 TCP segments are 1 s at 5 Mbit/s
TARGET_PACKETS = {True: 432, False: 864}
TCP = TransportSpec("tcp")
ESTIMATE_MBPS = 5.0  # the rate the wall-clock estimate assumes (a 2-core machine's)
DEADLINE_FACTOR = 20.0
# Wall-clock cost estimates (see experiments.zones): bring-up + idle check +
# teardown, and one traffic run's fixed cost.
BRINGUP_S = 8.0
RUN_OVERHEAD_S = 4.0


# --- pure helpers ------------------------------------------------------------

def topology_specs(base: str | None) -> list[tuple[int, str]]:
    """``[(oversubscription, spec)]``: ``base`` (default rail-clos) without and with 2:1."""
    spec = parse_spec(base or DEFAULT_TOPO)
    kwargs = {k: v for k, v in spec.kwargs.items() if k != "oversub"}
    head = ",".join([spec.name, *spec.args, *(f"{k}={v}" for k, v in kwargs.items())])
    return [(o, head if o == 1 else f"{head},oversub={o}") for o in OVERSUBSCRIPTIONS]


def leaf_of(graph: nx.Graph, host: str) -> str:
    """The switch a single-homed endpoint is attached to."""
    return next(iter(graph.neighbors(host)))


def spine_crossing_share(graph: nx.Graph, ranks: list[str]) -> float:
    """Share of ring neighbour pairs (i, i+1 mod N) on different leaves.

    Each such pair's traffic crosses the spines; 0 when the ring stays
    under one leaf.
    """
    n = len(ranks)
    if n < 2:
        return 0.0
    return sum(leaf_of(graph, ranks[i]) != leaf_of(graph, ranks[(i + 1) % n])
               for i in range(n)) / n


def leaf_size(graph: nx.Graph) -> int:
    """Hosts under the leaf of the first packed rank (default job size)."""
    first = rank_hosts(graph, placement="rail")
    leaf = leaf_of(graph, first[0])
    return sum(1 for h in first if leaf_of(graph, h) == leaf)


def placement_ranks(graph: nx.Graph, placement: str, n: int, seed: int) -> list[str]:
    """Ranks (ring order): ``packed`` is rail order, ``scattered`` a seeded shuffle."""
    if placement == "packed":
        return rank_hosts(graph, n, placement="rail")
    if placement == "scattered":
        return rank_hosts(graph, n, placement="random", seed=seed)
    raise ValueError(f"unknown placement {placement!r} (known: {PLACEMENTS})")


def uplink_frac(graph: nx.Graph) -> float:
    """Slowest switch-to-switch link over the fastest host link: the most one
    ECMP flow crossing the spines gets, as a share of the host rate."""
    host = max(graph.edges[a.endpoint, a.switch]["gbps"] for a in fg.attachments(graph))
    core = [d["gbps"] for a, b, d in graph.edges(data=True)
            if fg.is_switch(graph, a) and fg.is_switch(graph, b)]
    return min(1.0, min(core) / host) if core else 1.0


def common_host_mbps(graphs: list[nx.Graph], rate_of: Callable[[nx.Graph], float]) -> float:
    """The host rate both fabrics can run: the smaller of their rates by ``rate_of``."""
    return min(rate_of(g) for g in graphs)


def oversubscription(graph: nx.Graph) -> int | float:
    """The graph's ``oversub`` parameter (an int when whole)."""
    value = float(graph.graph.get("params", {}).get("oversub", 1.0))
    return int(value) if value.is_integer() else value


def ring_size(n: int, packets: int, transport: TransportSpec = TCP) -> int:
    """nccl-tests size whose ring all-reduce has each rank send ``packets`` packets."""
    per_rank = sizing.bytes_of(packets, transport)
    return max(n, int(per_rank / collectives.busbw_factor(COLLECTIVE, n)))


def schedules(graph: nx.Graph, seed: int, packets: int, n: int | None = None,
              transport: TransportSpec = TCP) -> list[dict[str, Any]]:
    """Every run of one seed on one fabric: ``{"placement", "ranks", "size", "transfers"}``."""
    n = n or leaf_size(graph)
    size = ring_size(n, packets, transport)
    out = []
    for placement in PLACEMENTS:
        ranks = placement_ranks(graph, placement, n, seed)
        out.append({"placement": placement, "ranks": ranks, "size": size,
                    "transfers": collectives.generate(COLLECTIVE, ranks, size,
                                                      tag=f"{placement}-ring")})
    return out


def estimate_duration_s(graphs: list[nx.Graph], quick: bool, seeds: int | None = None) -> float:
    """Wall-clock estimate of ``run`` (pure). A ring that crosses the spines is
    costed at half its uplink share (one ECMP collision), the worst seen case."""
    count = seeds or (2 if quick else 10)
    target = sizing.seconds_of(TARGET_PACKETS[quick], TCP, ESTIMATE_MBPS)
    total = 0.0
    for graph in graphs:
        total += BRINGUP_S
        for seed in range(count):
            for run in schedules(graph, seed, TARGET_PACKETS[quick]):
                crossing = spine_crossing_share(graph, run["ranks"]) > 0
                speed = uplink_frac(graph) / 2 if crossing else 1.0
                total += RUN_OVERHEAD_S + target / speed
    return total


def max_flows_per_link(graph: nx.Graph, transfer_rows: list[dict[str, Any]]) -> int | None:
    """Most ring connections (distinct src -> dst pairs) on one directed
    switch-to-switch link, from measured paths (None when no path was measured)."""
    pairs: dict[tuple[str, str], set] = {}
    measured = False
    for row in transfer_rows:
        path = row.get("path")
        if not path:
            continue
        measured = True
        for a, b in zip(path, path[1:]):
            if fg.is_switch(graph, a) and fg.is_switch(graph, b):
                pairs.setdefault((a, b), set()).add((row["src"], row["dst"]))
    if not measured:
        return None
    return max((len(p) for p in pairs.values()), default=0)



def run_row(graph: nx.Graph, spec: str, run: dict[str, Any], seed: int, host_mbps: float,
            transfer_rows: list[dict[str, Any]], valid: bool) -> dict[str, Any]:
    """The runs.csv row of one run (pure)."""
    span = span_s(transfer_rows)
    frac = (collectives.busbw(COLLECTIVE, len(run["ranks"]), run["size"], span) * 8 / 1e6
            / host_mbps) if span else None
    return {"topology": spec, "oversubscription": oversubscription(graph),
            "placement": run["placement"], "seed": seed, "ranks": len(run["ranks"]),
            "host_mbps": host_mbps, "size_bytes": run["size"],
            "spine_crossing_share": round(spine_crossing_share(graph, run["ranks"]), 4),
            "uplink_frac": round(uplink_frac(graph), 4),
            "max_flows_per_link": max_flows_per_link(graph, transfer_rows),
            "time_s": round(span, 4) if span else None,
            "busbw_frac": round(frac, 4) if frac is not None else None,
            "valid": bool(valid and span)}


def _row_of(run: Scheduled, result: Any, report: dict[str, Any]) -> dict[str, Any]:
    c = run.context
    row = run_row(c["graph"], c["spec"], c, run.seed, c["host_mbps"], result.transfer_rows(),
                  report["valid"])
    best = ideal_rows(result, c["graph"], c["link_mbps"])
    ideal = (run_row(c["graph"], c["spec"], c, run.seed, c["host_mbps"], best,
                     True)["busbw_frac"] if best else None)
    return {**row, **against_ideal(row["busbw_frac"], ideal)}


# --- figures (no root: read the run directory only) ---------------------------

def _groups(runs: list[dict]) -> tuple[list[float], list[str]]:
    """The oversubscriptions and placements of a run directory."""
    overs = sorted({float(r["oversubscription"]) for r in runs})
    return overs, [p for p in PLACEMENTS if any(r["placement"] == p for r in runs)]


def busbw_figure(data: RunData) -> Any:
    """Grouped bars of busbw / host rate (oversubscription x placement) with spread."""
    runs = data.runs
    overs, placements = _groups(runs)
    width = 0.8 / max(1, len(placements))
    fig, ax = data.plt.subplots(figsize=(2.8 + 1.3 * len(overs), 2.7))
    for j, placement in enumerate(placements):
        for i, over in enumerate(overs):
            mine = [r for r in runs if float(r["oversubscription"]) == over
                    and r["placement"] == placement]
            values = [v for v in (as_float(r["busbw_frac"]) for r in mine) if v is not None]
            x = i + (j - (len(placements) - 1) / 2) * width
            if values:
                plotstyle.spread_bar(ax, x, values, plotstyle.colour(placement, j),
                                     width=width * 0.9, label=placement if i == 0 else None)
            ideals = [v for v in (as_float(r.get("ideal")) for r in mine) if v is not None]
            plotstyle.ideal_ticks(ax, x + width * 0.3, ideals,
                                  plotstyle.IDEAL_LABEL if i == j == 0 else None)
            plotstyle.mark_incomplete(ax, x, len(mine) - len(values), rotation=90)
    ax.set_xticks(range(len(overs)), [f"{o:g}:1" for o in overs])
    ax.set_xlabel("leaf oversubscription")
    ax.set_ylabel("busbw / host rate")
    ax.set_ylim(0, 1.1)
    ax.set_title(f"ring all-reduce of {data.summary.get('ranks', '?')} ranks")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def crossing_figure(data: RunData) -> Any:
    """busbw against the share of ring hops crossing the spines."""
    overs, placements = _groups(data.runs)
    fig, ax = data.plt.subplots(figsize=(3.4, 2.6))
    markers = ["o", "s", "^", "D"]
    for i, over in enumerate(overs):
        for j, placement in enumerate(placements):
            pts = [(float(r["spine_crossing_share"]), as_float(r["busbw_frac"]))
                   for r in data.runs
                   if float(r["oversubscription"]) == over and r["placement"] == placement]
            pts = [(x, y) for x, y in pts if y is not None]
            if pts:
                ax.scatter([x for x, _ in pts], [y for _, y in pts], s=16,
                           marker=markers[i % len(markers)],
                           color=plotstyle.colour(placement, j),
                           label=f"{placement}, {over:g}:1")
    ax.set_xlabel("share of ring hops crossing the spines")
    ax.set_ylabel("busbw / host rate")
    ax.set_xlim(-0.05, 1.05)
    ax.set_ylim(0, 1.1)
    ax.legend(loc="lower left", fontsize=7)
    return fig


# --- the experiment ------------------------------------------------------------


class Placement(Experiment):
    """A packed and a scattered ring all-reduce on a non-blocking and a 2:1
    oversubscribed Clos, at one host rate."""

    name = NAME
    question = QUESTION
    default_topology = DEFAULT_TOPO
    modes = {"quick": Mode(seeds=2), "full": Mode(seeds=10)}
    options = (TRANSPORT, CC, ROCE_MTU)
    seed_preset = "rsc"
    anchors = {"meta-rsc": "non-blocking two-layer Clos: job performance independent of "
                           "placement",
               "oversubscribed": "2:1 penalises jobs whose traffic crosses the spines"}

    def topologies(self, ctx: RunContext) -> list[str]:
        return [spec for _, spec in topology_specs(ctx.topo)]

    def check(self, ctx: RunContext) -> None:
        """Refuse a topology without leaf oversubscription or two hosts under a leaf."""
        for spec in self.topologies(ctx):
            graph = topologies.build(spec)
            if leaf_size(graph) < 2:
                raise ScheduleError(f"{NAME}: {spec} has fewer than two hosts under a leaf; "
                                    f"a packed ring needs two")
            schedules(graph, 0, TARGET_PACKETS[ctx.quick], transport=ctx.transport())

    def run_count(self, ctx: RunContext) -> int:
        return len(self.topologies(ctx)) * len(self.seeds(ctx)) * len(PLACEMENTS)

    def estimate_s(self, ctx: RunContext) -> float:
        return estimate_duration_s([topologies.build(s) for s in self.topologies(ctx)],
                                   ctx.quick, len(self.seeds(ctx)))

    def measure(self, ctx: RunContext, runner: Runner) -> Measured:
        """Two bring-ups (1:1 and 2:1) at one rate; per seed, packed and scattered."""
        specs = topology_specs(ctx.topo)
        graphs = {spec: topologies.build(spec) for _, spec in specs}
        n = leaf_size(graphs[specs[0][1]])
        packets = TARGET_PACKETS[ctx.quick]
        transport = ctx.transport()
        host_mbps = common_host_mbps(list(graphs.values()),
                                     lambda g: runner.host_mbps(g, transport.packet_bytes))
        for over, spec in specs:
            graph = graphs[spec]
            with runner.bring_up(graph, host_mbps=host_mbps,
                                 packet_bytes=transport.packet_bytes) as emu:
                used = emu.report.rate_plan.host_mbps
                target = sizing.seconds_of(packets, transport, used)
                runs = (Scheduled({"oversubscription": over, "placement": sched["placement"],
                                   "seed": seed}, sched["transfers"], seed,
                                  {**sched, "graph": graph, "spec": spec, "host_mbps": used,
                                   "link_mbps": emu.report.rate_plan.link_mbps})
                        for seed in self.seeds(ctx)
                        for sched in schedules(graph, seed, packets, n, transport))
                runner.run(emu, runs, transport, f"over{over}", _row_of,
                           deadline_s=max(30.0, DEADLINE_FACTOR * target))
        return Measured(
            {"topologies": [s for _, s in specs], "ranks": n, "collective": COLLECTIVE,
             "placements": PLACEMENTS, **ctx.transport_parameters(transport),
             "work": {"target_packets": packets, "payload_bytes": transport.payload_bytes},
             "host_mbps": ctx.host_mbps or "auto (min of both fabrics)",
             "host_mbps_used": host_mbps},
            {"topologies": [s for _, s in specs], "ranks": n, "host_mbps": host_mbps,
             "uplink_frac": {str(o): uplink_frac(graphs[s]) for o, s in specs}})

    def table(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """busbw_frac mean/min/max per (oversubscription, placement); incomplete runs counted."""
        groups: dict[tuple, list[dict]] = {}
        for row in rows:
            groups.setdefault((float(row["oversubscription"]), row["placement"]), []).append(row)
        table = []
        for (over, placement), group in sorted(groups.items(),
                                               key=lambda kv: (kv[0][0], PLACEMENTS.index(kv[0][1])
                                                               if kv[0][1] in PLACEMENTS else 99)):
            values = [float(r["busbw_frac"]) for r in group if r["busbw_frac"] not in (None, "")]
            shares = [float(r["spine_crossing_share"]) for r in group]
            ideals = [float(r["ideal"]) for r in group if r.get("ideal") not in (None, "")]
            effs = [float(r["efficiency"]) for r in group if r.get("efficiency") not in (None, "")]
            table.append({"oversubscription": int(over) if over.is_integer() else over,
                          "placement": placement, "seeds": len(group),
                          "busbw_frac": round(statistics.fmean(values), 4) if values else None,
                          "busbw_frac_min": min(values) if values else None,
                          "busbw_frac_max": max(values) if values else None,
                          "ideal": round(statistics.fmean(ideals), 4) if ideals else None,
                          "efficiency": round(statistics.fmean(effs), 4) if effs else None,
                          "spine_crossing_share": round(statistics.fmean(shares), 4),
                          "incomplete": len(group) - len(values)})
        return table

    def notes(self, ctx: RunContext, rows: list[dict[str, Any]], measured: Measured
              ) -> list[str]:
        """The most one flow across the spines gets, and how many ring hops cross."""
        notes = [f"{spec}: one flow across the spines gets at most "
                 f"{uplink_frac(topologies.build(spec)):.2f} of the host rate"
                 for spec in self.topologies(ctx)]
        n = measured.summary["ranks"]
        for placement in PLACEMENTS:
            shares = [r["spine_crossing_share"] for r in rows if r["placement"] == placement]
            if shares:
                notes.append(f"{placement}: share of the {n} ring hops crossing the spines "
                             f"{min(shares):.2f}-{max(shares):.2f}")
        return notes

    def figures(self) -> Mapping[str, Any]:
        return {"busbw": busbw_figure, "busbw_vs_crossing": crossing_figure}


EXPERIMENT = Placement()
