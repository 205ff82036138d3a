"""Collisions (xAI Colossus): how much does per-flow ECMP lose to hash collisions,
and do packet spraying and adaptive routing get it back?

Patterns: a stride permutation across the spines, a ring all-reduce with
random rank placement, and all-to-all; policies ``ecmp`` (one UDP source
port per flow), ``spray`` and ``adaptive`` (a new source port per packet;
by default recycling the ports whose packets the receiver saw arrive without
queueing, ``--spray-entropy packet`` takes them in turn) and ``ar`` (one source
port per flow; the switches move each packet to the least occupied of its
equal-cost ports, as Spectrum-X switches do), all on the same RoCEv2-like
transport. Each seed changes the source ports (hence every ECMP hash) and the
ring's placement.

Published anchors: ECMP reaches about 60-68 % of line rate, spraying 90 %
or more (vendor claim for Spectrum-X's adaptive routing: 95 % vs 60 %); the
balls-into-bins expectation of
the share of N paths that N flows hit is 1-(1-1/N)^N (68 % for N=4).
``--policies`` adds ``static``, InfiniBand's planned routes: a shift (the stride)
shares no link (OpenSM's design goal), random permutations reach 55-60 % of the
bisection (Hoefler, Schneider, Lumsdaine, Cluster 2008).
"""


from __future__ import annotations

import argparse
import statistics
from typing import Any, Iterator, Mapping

import topologies
from fabric.analysis import plotstyle
from fabric.analysis.report import flow_collisions, ideal_transfers, uplink_shares
from fabric.emulation import Emulation, capacity
from fabric.emulation.machine_speed import default_host_mbps
from fabric.experiment import (Experiment, Measured, Mode, Option, RunContext, RunData, Runner,
                               Scheduled, simulated)
from fabric.experiment.measures import (as_float, steady_measures, steady_window,
                                        transport_losses)
from fabric.experiment.options import (POLICIES_OPTION, ROCE_OPTIONS, SPRAY_ENTROPY,
                                       chosen_policies)
from fabric.model import graph as fg
from fabric.model.lanes import DSCP_COLLECTIVE
from fabric.routing.policies import POLICIES as ROUTING_POLICIES, multipath, sprays
from fabric.routing.static import static_route_tables
from fabric.traffic import collectives
from fabric.traffic.metrics import balls_into_bins_expected_utilisation
from fabric.traffic import sizing
from fabric.traffic.model import ENTROPY, SPRAY_ENTROPY_PORTS, ScheduleError, TransportSpec
from fabric.traffic.result import records, span_s, timings
from fabric.traffic.workloads import (BUFFER_PACKETS, FLOW_PACKETS, ONE_FLOW_PATTERNS,
                                      norm_throughput, pattern_transfers)

NAME = "collisions"
QUESTION = "How much line rate does per-flow ECMP lose to collisions, vs spraying and adaptive?"
POLICIES = ("ecmp", "spray", "adaptive", "ar")  # the default (--policies: any of routing's)
PATTERNS = ("stride", "permutation", "ring-allreduce", "all-to-all")
ABLATION_PATTERNS = ("stride", "permutation")  # the transport ablation: the main patterns
ABLATION_CCS = ("swift", "dcqcn", "loss")  # on lossy Ethernet: "none" would only drop
# The ablation's two efficiencies (1: the ideal; higher is better), each with what its
# panels' titles and axis say it divides: rates measured over ideal, times ideal over
# measured.
ABLATION_METRICS = (("efficiency", "rate efficiency", "measured mean rate\n/ ideal mean rate"),
                    ("span_efficiency", "last-byte efficiency",
                     "ideal / measured time\nof the last byte"))
# Host rate of each pattern, as a share of the fabric's full-load rate: an all-to-all
# keeps every queue pair of every agent busy at once, and at the full rate OVS's input
# delay fails adaptive runs (docs/benchmarks.md: "Sizing the collisions workloads").
RATE_SHARE = {"stride": 1.0, "permutation": 1.0, "ring-allreduce": 1.0, "all-to-all": 0.5}
ANCHORS = {"ecmp": "0.60-0.68", "spray": ">=0.90", "adaptive": ">=0.90", "ar": "0.95"}
ANCHOR_RANGES = {"ecmp": (0.60, 0.68), "spray": (0.90, 0.95), "adaptive": (0.90, 0.95),
                 "ar": (0.95, 0.95)}
# the planned static routes, by pattern: a shift meets no shared link (OpenSM's fat-tree
# engine's design goal), random permutations reach 55-60 % of a full-bisection fat-tree
# (Hoefler, Schneider, Lumsdaine, "Multistage switches are not crossbars", Cluster 2008)
STATIC_ANCHORS = {"stride": (1.0, 1.0), "permutation": (0.55, 0.60)}


def anchor_range(policy: str, pattern: str) -> tuple[float, float] | None:
    """The published range of ``policy``'s throughput on ``pattern`` (None: none)."""
    if policy == "static":
        return STATIC_ANCHORS.get(pattern)
    return ANCHOR_RANGES.get(policy)


def anchor_text(policy: str, pattern: str) -> str | None:
    """The anchor column of a table row."""
    if policy == "static":
        band = STATIC_ANCHORS.get(pattern)
        return None if band is None else (f"{band[0]:.2f}" if band[0] == band[1]
                                          else f"{band[0]:.2f}-{band[1]:.2f}")
    return ANCHORS.get(policy)
SPRAY_TEXT = {"packet": f"the next of {SPRAY_ENTROPY_PORTS} source ports per packet",
              "recycle": f"{SPRAY_ENTROPY_PORTS} source ports, the ones echoed as uncongested "
                         f"reused first (REPS)"}
# Wall-clock estimate: a bring-up with its idle check, warm-up and teardown, and one
# traffic run's fixed cost (the quick run measured 68 s for 3 bring-ups and 6 runs).
BRINGUP_S = 8.0
RUN_OVERHEAD_S = 4.0


# --- your own app as one more policy -----------------------------------------------


def app_spec(text: str) -> str:
    """``--controller-app``: an app that loads, under a name no built-in policy has."""
    from controllers import userapp

    spec = userapp.app_spec_argument(text)
    if app_policy(spec) in ROUTING_POLICIES:
        raise argparse.ArgumentTypeError(f"class {app_policy(spec)!r} has a built-in "
                                         f"policy's name; rename it")
    return spec


CONTROLLER_APP = Option("--controller-app", type=app_spec, metavar="MODULE:CLASS",
                        help="your own os-ken app as one more policy, named by its class "
                             "(MODULE:CLASS or path/to/app.py:CLASS)")
APP_ENTROPY = Option("--app-entropy", default="flow", choices=ENTROPY,
                     requires="--controller-app",
                     help="what the senders do under your app: one UDP source port per flow "
                          "(default), a new one per packet (spraying), or spraying that "
                          "recycles the ports that did not queue")


def app_policy(spec: str) -> str:
    """The policy name of a user's app: its class name."""
    return spec.rpartition(":")[2]


def run_policies(ctx: RunContext) -> tuple[str, ...]:
    """The policies compared (``--policies``, or :data:`POLICIES`), then the user's app
    if there is one."""
    app = ctx.get(CONTROLLER_APP)
    return chosen_policies(ctx, POLICIES) + ((app_policy(app),) if app else ())


def policies_in(rows: list[dict[str, Any]]) -> list[str]:
    """The policies of a run's rows: the built-in ones in order, then any other."""
    present = {r["policy"] for r in rows}
    return ([p for p in ROUTING_POLICIES if p in present]
            + sorted(present - set(ROUTING_POLICIES)))


# --- schedules and rows ------------------------------------------------------------


def plan_grid(ctx: RunContext, specs: list[str]) -> dict[str, list[tuple[str, str]]]:
    """Topology -> the (pattern, cc) pairs it runs: every pattern with the run's cc, and
    in a full run the ablation (the other ccs on the one-flow patterns of the first
    topology; on the simulator those it models), so the figures can say how much of each
    number is the transport."""
    patterns = ("stride",) if ctx.quick else PATTERNS
    cc = ctx.roce().cc
    grid = {spec: [(p, cc) for p in patterns] for spec in specs}
    if not ctx.quick:  # the simulator models no ECN marking: no dcqcn there
        grid[specs[0]] += [(p, other) for other in ABLATION_CCS if other != cc
                           and not (ctx.backend == "ns3" and other in simulated.UNMODELLED_CC)
                           for p in ABLATION_PATTERNS]
    return grid


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def _routing(ctx: RunContext, policy: str) -> tuple[str, dict[str, Any]]:
    """The senders' entropy under ``policy`` and the bring-up's routing options."""
    if policy in ROUTING_POLICIES:
        return (ctx.get(SPRAY_ENTROPY) if sprays(policy) else "flow"), {"policy": policy}
    # the user's app routes; the senders do what its entropy says
    return ctx.get(APP_ENTROPY), {"controller_app": ctx.get(CONTROLLER_APP)}


def _schedules(graph: Any, spec: str, policy: str, cc: str, patterns: list[str],
               seeds: list[int], transport: TransportSpec, host_mbps: float
               ) -> Iterator[Scheduled]:
    for pattern in patterns:
        # the one-flow patterns' steady state (htsim's measure); a collective has none
        window = (steady_window(FLOW_PACKETS, transport, host_mbps)
                  if pattern in ONE_FLOW_PATTERNS else None)
        for seed in seeds:
            # RDMA's service class, as RoCE deployments mark it: lossless under a preset
            transfers, ranks, size = pattern_transfers(graph, pattern, seed, transport,
                                                       dscp=DSCP_COLLECTIVE)
            yield Scheduled({"topology": spec, "policy": policy, "pattern": pattern, "cc": cc,
                             "seed": seed}, transfers, seed, (pattern, ranks, size),
                            window=window)


def _row_function(runner: Runner, emu: Emulation, spray: bool) -> Any:
    """The row of a run: measured throughput beside its ideal, ECMP's collisions and the
    losses; each leaf uplink's share of bytes goes to uplinks.csv."""
    graph, plan = emu.graph, emu.report.rate_plan
    link_rows = runner.table("uplinks")

    def row_of(run: Scheduled, result: Any, report: dict[str, Any]) -> dict[str, Any]:
        pattern, ranks, size = run.context
        transfers = records(result.transfer_rows())
        measured = norm_throughput(pattern, timings(transfers), ranks, size, plan.host_mbps)
        ideal = ideal_transfers(result, graph, plan.link_mbps, spray)
        best = (norm_throughput(pattern, timings(ideal), ranks, size, plan.host_mbps)
                if ideal else None)
        coll = None if spray else flow_collisions(result)  # a spray has every path
        link_rows.extend({**run.keys, "link": link, "share": round(load, 4)}
                         for link, load in uplink_shares(graph, result).items())
        ideal_span = span_s(ideal) if ideal else None
        span = span_s(transfers)
        steady = steady_measures(result, graph, plan.link_mbps, spray, run.window,
                                 plan.host_mbps) if run.window else {}
        return {"host_mbps": plan.host_mbps, "norm_throughput": _round(measured),
                "ideal": _round(best),
                "steady": steady.get("steady"), "steady_ideal": steady.get("steady_ideal"),
                "efficiency": _round(measured / best if measured and best else None),
                # the last byte's time: unlike a mean of flow rates, unfairness cannot beat
                # the ideal here
                "span_efficiency": _round(ideal_span / span if span and ideal_span else None),
                "collisions": coll.count if coll else None,
                "max_flows_per_link": coll.max_flows_per_link if coll else None,
                **transport_losses(result.transfer_rows()), "complete": result.complete,
                "valid": report["valid"]}

    return row_of


def _bring_up(ctx: RunContext, runner: Runner, spec: str, graph: Any, policy: str,
              host_mbps: float, grid: list[tuple[str, str]], seeds: list[int]) -> None:
    """One fabric at one rate: every (pattern, cc) x seed run on it."""
    entropy, routing = _routing(ctx, policy)
    with runner.bring_up(graph, host_mbps=host_mbps, packet_bytes=ctx.roce().packet_bytes,
                         **routing) as emu:
        rate = emu.report.rate_plan.host_mbps
        # a flow takes every path: its senders spray, or its switches move it (ar)
        spread = multipath(policy) if policy in ROUTING_POLICIES else entropy != "flow"
        row_of = _row_function(runner, emu, spray=spread)
        for cc in sorted({cc for _, cc in grid}):
            transport = ctx.roce(entropy=entropy, entropy_ports=SPRAY_ENTROPY_PORTS, cc=cc)
            patterns = [p for p, c in grid if c == cc]
            runner.run(emu, _schedules(graph, spec, policy, cc, patterns, seeds, transport,
                                       rate),
                       transport, f"{spec}-{policy}-{rate:g}-{cc}", row_of)


# --- theory and the summary's table -------------------------------------------------


def _packets_per_host(pattern: str) -> float:
    """Packets each host sends in one run of ``pattern`` (16 ranks for a collective)."""
    if pattern in ONE_FLOW_PATTERNS:
        return FLOW_PACKETS
    return BUFFER_PACKETS * collectives.busbw_factor(pattern, 16)


def top_tier_paths(graph: Any) -> int:
    """Equal-cost paths between two leaves in different pods: the top-tier switches."""
    cores = fg.nodes_with_role(graph, "core")
    return len(cores) if cores else len(fg.nodes_with_role(graph, "spine"))


def expected_throughput(policy: str, pattern: str, paths: int) -> float | None:
    """Theory for the stride: ECMP's flows hit 1-(1-1/N)^N of N paths on average
    (balls into bins); a perfect spray uses them all, and so do the planned static
    routes (the stride is a shift: no link shared). None for other patterns."""
    if pattern != "stride" or policy not in ROUTING_POLICIES:  # no theory for a user's app
        return None
    return round(balls_into_bins_expected_utilisation(paths), 4) if policy == "ecmp" else 1.0


def table_of(rows: list[dict[str, Any]], paths: dict[str, int]) -> list[dict[str, Any]]:
    """Per topology, policy, pattern and cc: the mean and spread of the normalised
    throughput beside the theory (stride only), the per-run ideal and the anchor, the
    efficiency (transport loss), ECMP's collisions and the packet loss."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["topology"], row["policy"], row["pattern"], row["cc"]),
                          []).append(row)
    table = []
    for (topo, policy, pattern, cc), group in groups.items():
        values = [r["norm_throughput"] for r in group if r["norm_throughput"] is not None]

        def mean(field: str, digits: int = 4) -> float | None:
            got = [r[field] for r in group if r.get(field) is not None]
            return round(statistics.fmean(got), digits) if got else None

        maxes = [r["max_flows_per_link"] for r in group if r["max_flows_per_link"] is not None]
        table.append({"topology": topo, "policy": policy, "pattern": pattern, "cc": cc,
                      "seeds": len(group),
                      "norm_throughput": round(statistics.fmean(values), 4) if values else None,
                      "norm_throughput_min": min(values, default=None),
                      "norm_throughput_max": max(values, default=None),
                      "theory": expected_throughput(policy, pattern, paths[topo]),
                      "ideal": mean("ideal"), "steady": mean("steady"),
                      "steady_ideal": mean("steady_ideal"), "efficiency": mean("efficiency"),
                      "span_efficiency": mean("span_efficiency"),
                      "anchor": anchor_text(policy, pattern),
                      "collisions": mean("collisions", 2),
                      "max_flows_per_link": max(maxes) if maxes else None,
                      "drop_frac": mean("drop_frac", 5),
                      "rto": sum(r["rto"] for r in group),
                      "incomplete": len(group) - len(values)})
    return table


# --- figures (no root: read the run directory only) ---------------------------------


def _main_cc(runs: list[dict[str, Any]]) -> str:
    """The congestion control every pattern ran with (the ablation adds the others)."""
    patterns = {r["pattern"] for r in runs}
    return next(cc for cc in sorted({r["cc"] for r in runs})
                if {r["pattern"] for r in runs if r["cc"] == cc} == patterns)


def _main_rows(data: RunData, name: str) -> list[dict[str, Any]]:
    """The rows of ``name.csv`` of the main runs (the ablation has its own figure)."""
    main_cc = _main_cc(data.runs)
    return [r for r in data.csv(name) if r.get("cc", main_cc) == main_cc]


def _throughput_panel(ax: Any, runs: list[dict[str, Any]], topo: str, pattern: str,
                      policies: list[str], balls_into_bins: float) -> None:
    """One topology and pattern: each policy's runs beside their ideals and the anchors."""
    for i, policy in enumerate(policies):
        mine = [r for r in runs if r["topology"] == topo and r["pattern"] == pattern
                and r["policy"] == policy]
        values = [v for v in (as_float(r["norm_throughput"]) for r in mine) if v is not None]
        ideals = [v for v in (as_float(r["ideal"]) for r in mine) if v is not None]
        if values:
            ax.boxplot(values, positions=[i], widths=0.5, showfliers=False)
            ax.scatter([i] * len(values), values, s=12, zorder=3, label=policy,
                       **plotstyle.series_style(policy, i))
        plotstyle.ideal_ticks(ax, i + 0.32, ideals, plotstyle.IDEAL_LABEL if i == 0 else None)
    if pattern in ONE_FLOW_PATTERNS:  # the anchors are one flow per host
        bands = [(i, anchor_range(p, pattern)) for i, p in enumerate(policies)]
        for k, (i, (low, high)) in enumerate((i, b) for i, b in bands if b is not None):
            ax.fill_between([i - 0.3, i + 0.3], low, high, color="grey", alpha=0.2, lw=0,
                            label="published anchor" if k == 0 else None)
    if pattern == "stride":  # the balls-into-bins theory is for the stride
        ax.axhline(balls_into_bins, ls="--", color="grey", lw=1,
                   label="ECMP theory 1-(1-1/N)$^N$")
    ax.set_xticks(range(len(policies)), policies)
    ax.set_ylim(0, 1.05)
    ax.set_title(f"{pattern} on {topo}")


def throughput_figure(data: RunData) -> Any:
    """Throughput per policy with spread, the per-run ideal, theory and anchors."""
    main_cc = _main_cc(data.runs)
    runs = [r for r in data.runs if r["cc"] == main_cc]
    topos = sorted({r["topology"] for r in runs}, reverse=True)  # rail-clos first
    patterns = [p for p in PATTERNS if any(r["pattern"] == p for r in runs)]
    policies = policies_in(runs)
    fig, axes = data.plt.subplots(len(topos), len(patterns),
                                  figsize=(3.0 * len(patterns), 2.4 * len(topos)),
                                  squeeze=False, sharey=True)
    for row, topo in zip(axes, topos):
        for ax, pattern in zip(row, patterns):
            _throughput_panel(ax, runs, topo, pattern, policies,
                              data.summary["balls_into_bins_expectation"])
        row[0].set_ylabel("throughput / line rate")
    axes[0][0].legend(loc="lower right", fontsize=6, title=f"roce, {main_cc} cc",
                      title_fontsize=6)
    return fig


def ablation_figure(data: RunData) -> Any:
    """Efficiency per policy and congestion control, by mean rate and by the time of the
    last byte: how much of each figure is the transport (None without an ablation)."""
    runs = data.runs
    ccs = sorted({r["cc"] for r in runs})
    if len(ccs) < 2:
        return None
    topo = sorted({r["topology"] for r in runs}, reverse=True)[0]
    patterns = [p for p in ABLATION_PATTERNS
                if all(any(r["pattern"] == p and r["cc"] == cc and r["topology"] == topo
                           for r in runs) for cc in ccs)]
    fig, axes = data.plt.subplots(len(ABLATION_METRICS), len(patterns),
                                  figsize=(3.2 * len(patterns) + 1.2, 5.0), squeeze=False,
                                  sharey=True)
    width, top, policies = 0.8 / len(ccs), 1.1, policies_in(runs)
    for row, (metric, name, ratio) in zip(axes, ABLATION_METRICS):
        for ax, pattern in zip(row, patterns):
            for j, cc in enumerate(ccs):
                for i, policy in enumerate(policies):
                    values = [v for v in (as_float(r[metric]) for r in runs
                                          if r["topology"] == topo and r["pattern"] == pattern
                                          and r["policy"] == policy and r["cc"] == cc)
                              if v is not None]
                    if values:
                        top = max(top, 1.05 * max(values))
                        plotstyle.spread_bar(ax, i + (j - (len(ccs) - 1) / 2) * width, values,
                                             plotstyle.colour("", j + 4), width=width * 0.9,
                                             label=cc if i == 0 else None)
            ax.axhline(1.0, ls="--", color="grey", lw=1)
            ax.set_xticks(range(len(policies)), policies)
            ax.set_title(f"{pattern} on {topo}:\n{name}")
        row[0].set_ylabel(f"{name} =\n{ratio}")
    axes[0][0].set_ylim(0, top)
    fig.suptitle("transport ablation: both rows are efficiencies (1 = the ideal, higher "
                 "is better)", fontsize=8)
    axes[0][-1].legend(title="congestion control", loc="upper left", bbox_to_anchor=(1.0, 1.0),
                       fontsize=7)  # beside the panels: over them it hid bars
    return fig


def flows_per_link(flows: list[dict[str, Any]]) -> dict[tuple[str, str, str], int]:
    """(pattern, seed, "a>b") -> how many ECMP flows' measured paths cross link a -> b."""
    counts: dict[tuple[str, str, str], int] = {}
    for row in flows:
        if row["policy"] != "ecmp" or not row["path"]:
            continue
        hops = row["path"].split("/")
        for a, b in zip(hops, hops[1:]):
            key = (row["pattern"], row["seed"], f"{a}>{b}")
            counts[key] = counts.get(key, 0) + 1
    return counts


def uplink_figure(data: RunData) -> Any:
    """Each leaf uplink's share of its leaf's bytes, per policy and run (a heatmap);
    ECMP's cells say how many flows crossed the link."""
    uplinks, flows = _main_rows(data, "uplinks"), _main_rows(data, "flows")
    policies = policies_in(data.runs)
    links = sorted({r["link"] for r in uplinks})
    fig, axes = data.plt.subplots(1, len(policies),
                                  figsize=(3.3 * len(policies), 0.9 + 0.12 * len(links)),
                                  squeeze=False, sharey=True)
    for ax, policy in zip(axes[0], policies):
        mine = [r for r in uplinks if r["policy"] == policy]
        keys = sorted({(r["pattern"], r["seed"]) for r in mine})
        grid = [[next((float(r["share"]) for r in mine if r["link"] == link
                       and (r["pattern"], r["seed"]) == key), 0.0) for key in keys]
                for link in links]
        image = ax.imshow(grid, aspect="auto", cmap="viridis", vmin=0, vmax=1)
        ax.grid(False)
        ax.set_title(policy)
        if policy in ROUTING_POLICIES and not multipath(policy):  # one path per flow: write
            _write_counts(ax, flows_per_link(flows), links, keys, grid)  # each link's count
            ax.set_title(f"{policy} (number: flows on the link)")
        ax.set_xticks(range(len(keys)), [f"{p[:6]} {s}" for p, s in keys], rotation=90,
                      fontsize=6)
        ax.set_xlabel("run (pattern, seed)")
        ax.set_yticks(range(len(links)), links, fontsize=6)
    fig.colorbar(image, ax=axes[0].tolist(), label="share of the leaf's uplink bytes")
    return fig


def _write_counts(ax: Any, counts: dict[tuple[str, str, str], int], links: list[str],
                  keys: list[tuple[str, str]], grid: list[list[float]]) -> None:
    for i, link in enumerate(links):
        for j, (pattern, seed) in enumerate(keys):
            n = counts.get((pattern, seed, link))
            if n:
                ax.text(j, i, str(n), ha="center", va="center", fontsize=5,
                        color="black" if grid[i][j] > 0.6 else "white")


def fct_figure(data: RunData) -> Any:
    """The CDF of flow completion times per policy."""
    flows = _main_rows(data, "flows")
    fig, ax = data.plt.subplots(figsize=(3.4, 2.6))
    for policy in policies_in(data.runs):
        fcts = sorted(float(r["fct_s"]) for r in flows if r["policy"] == policy and r["fct_s"])
        if fcts:
            ax.plot(fcts, [(i + 1) / len(fcts) for i in range(len(fcts))], label=policy,
                    markevery=max(1, len(fcts) // 8), **plotstyle.series_style(policy))
    ax.set_xlabel("flow completion time (s)")
    ax.set_ylabel("CDF")
    ax.legend()
    return fig


# --- the experiment ----------------------------------------------------------------


class Collisions(Experiment):
    """Every topology x policy x (pattern, cc) x seed: throughput against theory, the
    per-run ideal and the published anchors."""

    name = NAME
    question = QUESTION
    modes = {"quick": Mode(seeds=2), "full": Mode(seeds=10)}
    options = ROCE_OPTIONS + (POLICIES_OPTION, CONTROLLER_APP, APP_ENTROPY)
    simulates = True
    anchors = {"ecmp": "60-68 % of line rate", "spray": ">= 90 % (vendor: 95 % vs 60 %)",
               "ar": "95 % vs 60 % for ECMP (Spectrum-X adaptive routing, the Colossus seed)",
               "static": "a shift: 100 % (OpenSM fat-tree engine); random permutations: "
                         "55-60 % of the bisection (Hoefler et al., Cluster 2008)"}

    def topologies(self, ctx: RunContext) -> list[str]:
        if ctx.topo:
            return [ctx.topo]
        return ["rail-clos"] if ctx.quick else ["rail-clos", "fat-tree"]

    def check(self, ctx: RunContext) -> None:
        """Refuse a topology the patterns, or the planned static routes, cannot run on."""
        for spec in self.topologies(ctx):
            graph = topologies.build(spec)
            if "static" in run_policies(ctx):
                static_route_tables(graph)  # StaticRoutingError: a graph without tiers
            for pattern in ("stride",) if ctx.quick else PATTERNS:
                if (len(fg.nodes_with_role(graph, "host")) < 2
                        or not pattern_transfers(graph, pattern, 0, ctx.roce())[0]):
                    raise ScheduleError(f"{NAME}: {spec} has no two compute hosts under "
                                        f"different leaves for the {pattern}")

    def run_count(self, ctx: RunContext) -> int:
        grid = plan_grid(ctx, self.topologies(ctx))
        return (sum(len(g) for g in grid.values()) * len(run_policies(ctx))
                * len(self.seeds(ctx)))

    def estimate_s(self, ctx: RunContext) -> float:
        """Every bring-up's fixed cost, and each run at half its line rate; on the ns-3
        backend, the packets every run sends."""
        grid = plan_grid(ctx, self.topologies(ctx))
        if ctx.backend == "ns3":
            total = 0.0
            for spec, runs in grid.items():
                graph = topologies.build(spec)
                for pattern, _ in runs:
                    total += simulated.estimate_s(graph, _packets_per_host(pattern))
            return total * len(self.seeds(ctx)) * len(run_policies(ctx))
        bring_ups = sum(len({RATE_SHARE[p] for p, _ in g}) for g in grid.values())
        mbps = ctx.host_mbps or default_host_mbps(self.graph(ctx))
        seconds = {p: 2 * sizing.seconds_of(_packets_per_host(p), ctx.roce(),
                                            mbps * RATE_SHARE[p]) for p in PATTERNS}
        per_policy = (bring_ups * BRINGUP_S
                      + sum(RUN_OVERHEAD_S + seconds[p] for g in grid.values() for p, _ in g)
                      * len(self.seeds(ctx)))
        return per_policy * len(run_policies(ctx))

    def measure(self, ctx: RunContext, runner: Runner) -> Measured:
        """Per topology and policy, one bring-up per rate share of the patterns."""
        seeds, specs = self.seeds(ctx), self.topologies(ctx)
        grid = plan_grid(ctx, specs)
        runner.table("uplinks")
        for spec in specs:
            graph = topologies.build(spec)
            base_mbps = runner.host_mbps(graph, ctx.roce().packet_bytes,
                                         capacity.ROCE_RATE_HEADROOM)
            for policy in run_policies(ctx):
                for share in sorted({RATE_SHARE[p] for p, _ in grid[spec]}, reverse=True):
                    mine = [(p, cc) for p, cc in grid[spec] if RATE_SHARE[p] == share]
                    _bring_up(ctx, runner, spec, graph, policy, base_mbps * share, mine, seeds)
        paths = top_tier_paths(topologies.build(specs[0]))
        return Measured(
            {"topologies": specs, "grid": grid, "policies": run_policies(ctx),
             "controller_app": ctx.get(CONTROLLER_APP),
             "app_entropy": ctx.get(APP_ENTROPY) if ctx.get(CONTROLLER_APP) else None,
             "spray_entropy": ctx.get(SPRAY_ENTROPY), "transport": "roce",
             "cc": ctx.roce().cc, "roce_mtu": ctx.roce().mtu_payload,
             "host_mbps": ctx.host_mbps or runner.backend().default_rates,
             "rate_share": RATE_SHARE, "backend": ctx.backend,
             "work": {"flow_packets": FLOW_PACKETS, "buffer_packets": BUFFER_PACKETS,
                      "payload_bytes": ctx.roce().payload_bytes}},
            {"balls_into_bins_expectation": round(balls_into_bins_expected_utilisation(paths),
                                                  4)})

    def table(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        specs = sorted({r["topology"] for r in rows})
        return table_of(rows, {spec: top_tier_paths(topologies.build(spec)) for spec in specs})

    def notes(self, ctx: RunContext, rows: list[dict[str, Any]], measured: Measured
              ) -> list[str]:
        paths = top_tier_paths(self.graph(ctx))
        backend = ([f"backend: ns-3 simulation, {measured.parameters['host_mbps']} rates; "
                    f"adaptive weights from its telemetry, every 100 packet times or 0.1 s "
                    f"(0.1 ms at physical rates), whichever is longer"]
                   if ctx.backend == "ns3" else [])
        return backend + [f"balls-into-bins expectation 1-(1-1/N)^N for N={paths} paths: "
                f"{balls_into_bins_expected_utilisation(paths):.3f}",
                f"spraying senders: {SPRAY_TEXT[ctx.get(SPRAY_ENTROPY)]}",
                "steady: the one-flow patterns' mean rate from 1/4 to 3/4 of a flow's "
                "line-rate time, while no flow can have finished (htsim's measure); "
                "steady_ideal: their max-min fair rates on the run's paths",
                "ideal: a perfect transport on the paths the run used (max-min fair fluid "
                "model, headers, ACKs and store-and-forward latency included, steps chained "
                "in the model; sprayed flows split as the switches' hash split them, or evenly "
                "where the senders steer by echoes); efficiency = measured / ideal"]

    def figures(self) -> Mapping[str, Any]:
        return {"throughput": throughput_figure, "transport_ablation": ablation_figure,
                "uplink_load": uplink_figure, "fct_cdf": fct_figure}


EXPERIMENT = Collisions()
