"""Collisions (xAI Colossus): how much does per-flow ECMP lose to hash collisions,
and do packet spraying and adaptive routing get it back?

Patterns: a stride permutation across the spines, a ring all-reduce with
random rank placement, and all-to-all; policies ``ecmp`` (one UDP source
port per flow), ``spray`` and ``adaptive`` (a new source port per packet;
by default recycling the ports whose packets the receiver saw arrive without
queueing, ``--spray-entropy packet`` takes them in turn), all on the same
RoCEv2-like transport. Each seed changes the source ports
(hence every ECMP hash) and the ring's placement.

Published anchors: ECMP reaches about 60-68 % of line rate, spraying 90 %
or more (vendor claim: 95 % vs 60 %); the balls-into-bins expectation of
the share of N paths that N flows hit is 1-(1-1/N)^N (68 % for N=4).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Iterator

import topologies
from experiments.common import (Progress, RunContext, RunLog, Scheduled, as_float, load_run,
                                run_schedules, transport_losses)
from fabric.analysis import plotstyle, results
from fabric.analysis.report import flow_collisions
from fabric.analysis.report import ideal_spans as report_ideal
from fabric.emulation import Emulation, capacity
from fabric.emulation.machine_speed import default_host_mbps
from fabric.model import graph as fg
from fabric.traffic import collectives, synthetic
from fabric.traffic.metrics import balls_into_bins_expected_utilisation
from fabric.traffic.model import CONGESTION_CONTROLS, ScheduleError, Transfer
from fabric.traffic.placement import rank_hosts

NAME = "collisions"
QUESTION = "How much line rate does per-flow ECMP lose to collisions, vs spraying and adaptive?"
POLICIES = ("ecmp", "spray", "adaptive")
PATTERNS = ("stride", "permutation", "ring-allreduce", "all-to-all")
ONE_FLOW_PATTERNS = ("stride", "permutation")  # one flow per host, measured by mean rate
ABLATION_PATTERNS = ONE_FLOW_PATTERNS  # the transport ablation
ABLATION_METRICS = (("efficiency", "mean rate / ideal"),
                    ("span_efficiency", "ideal / measured\ntime of the last byte"))
# One-flow patterns: each flow's bytes, in seconds of its link at line rate. A
# sprayed flow needs some round trips before the receiver's echoes have steered
# it off its queueing paths: `benchmarks/busbw.py --pattern permutation` on the
# k=4 fat-tree (4.5 Mbit/s) gave 0.93 / 0.95 / 0.96 of line rate at 1.5 / 3 /
# 6 s (rail-clos stride: 0.95 / 0.96 / 0.96).
FLOW_S = 3.0
# Many entropy values even out the hash: 64 split one flow 17-31 % over 4 paths.
ENTROPY_PORTS = 256
# Per-rank buffer of the collectives, in seconds of the host link at line
# rate. A ring all-reduce moves it in 2(N-1) dependent steps of 1/N of it
# each, and each step waits for the previous one's last packet: busbw is only
# read off nccl-tests' plateau once the steps are long against that latency.
# `benchmarks/busbw.py` on rail-clos, sprayed (7.5 Mbit/s): the ideal busbw
# (perfect transport) is 0.76 / 0.86 / 0.89 / 0.935 / 0.945 of line rate at
# 0.75 / 1.5 / 3 / 6 / 12 s (the bandwidth bound: 0.984), so at 6 s a step is
# ~90 packets and the ring measures mostly bandwidth; an all-to-all then runs
# long against the agents' start and exit.
BUFFER_S = 6.0
# Host rate of each pattern, as a share of the fabric's full-load rate. An
# all-to-all keeps 15 queue pairs busy in every agent and sends to every peer at
# once. With a set of entropy sockets per peer (61 k sockets, four agent
# processes) the agents could not keep up even at half the rate (benchmarks/
# busbw.py, sprayed, rail-clos: the agents' lost link time 10-13 % at 12.5 Mbit/s
# on a fast machine, 3-11 % at 4 on one running at 0.65 of its speed). With one
# set per host (4 k sockets, one process) the same slow machine was valid at
# 4 and 6 (busbw 0.94-0.95) and at its full rate of 8 in 2 of 3 sprayed runs,
# but OVS's input delay, not the agents, then fails adaptive runs (1.12-1.14 ms
# at 6 and 8): the share stays.
RATE_SHARE = {"stride": 1.0, "permutation": 1.0, "ring-allreduce": 1.0, "all-to-all": 0.5}


TAKES_CONTROLLER_APP = True  # `fabric run collisions --controller-app` adds a policy
TAKES_SPRAY_ENTROPY = True   # `--spray-entropy packet`: spraying senders take ports in turn
TAKES_ROCE_MTU = True        # `--roce-mtu`: its senders are roce


def app_policy(spec: str) -> str:
    """The policy name of a user's app: its class name."""
    return spec.rpartition(":")[2]


def run_policies(ctx: RunContext) -> tuple[str, ...]:
    """The built-in policies, then the user's app if there is one."""
    return POLICIES + ((app_policy(ctx.controller_app),) if ctx.controller_app else ())


def policies_in(rows: list[dict[str, Any]]) -> list[str]:
    """The policies of a run's rows: the built-in ones in order, then any other."""
    present = {r["policy"] for r in rows}
    return [p for p in POLICIES if p in present] + sorted(present - set(POLICIES))


def fabric_specs(ctx: RunContext) -> list[str]:
    """The topology specs the run brings up."""
    if ctx.topo:
        return [ctx.topo]
    return ["rail-clos"] if ctx.quick else ["rail-clos", "fat-tree"]


def check(ctx: RunContext) -> None:
    """Refuse a topology the patterns cannot run on (pure; before anything changes)."""
    for spec in fabric_specs(ctx):
        graph = topologies.build(spec)
        for pattern in ("stride",) if ctx.quick else PATTERNS:
            if (len(fg.nodes_with_role(graph, "host")) < 2
                    or not pattern_transfers(graph, pattern, 0, 1.0)[0]):
                raise ScheduleError(f"{NAME}: {spec} has no two compute hosts under "
                                    f"different leaves for the {pattern}")


def pattern_transfers(graph: Any, pattern: str, seed: int, host_mbps: float,
                      seconds: float | None = None
                      ) -> tuple[list[Transfer], list[str], int | None]:
    """Schedule of one run, its ranks and its nccl-tests size (None for the one-flow
    patterns). ``seconds`` of line rate sets each flow's bytes or each rank's buffer
    (default :data:`FLOW_S`, :data:`BUFFER_S`)."""
    one_flow = pattern in ONE_FLOW_PATTERNS
    length = seconds if seconds is not None else FLOW_S if one_flow else BUFFER_S
    nbytes = int(host_mbps * 1e6 / 8 * length)
    if pattern == "stride":
        ranks = rank_hosts(graph, placement="rail")
        return synthetic.stride(graph, ranks, nbytes), ranks, None
    ranks = rank_hosts(graph, placement="random", seed=seed)
    if pattern == "permutation":
        return synthetic.permutation(ranks, nbytes, seed), ranks, None
    return collectives.generate(pattern, ranks, nbytes), ranks, nbytes


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


def uplink_shares(graph: Any, result: Any) -> dict[str, float]:
    """Bytes each leaf -> spine link carried, as a share of its leaf's uplink bytes."""
    totals = result.links.totals()
    loads = {}
    for leaf in fg.nodes_with_role(graph, "leaf"):
        ups = [(leaf, n) for n in graph.neighbors(leaf) if graph.nodes[n]["role"] == "spine"]
        sent = sum(totals.get(link, 0) for link in ups)
        for link in ups:
            loads[f"{link[0]}>{link[1]}"] = totals.get(link, 0) / sent if sent else 0.0
    return loads


def result_span(rows: list[dict[str, Any]]) -> float | None:
    """Seconds from the first send to the last byte received (None if incomplete)."""
    if not rows or any(r["recv_end"] is None or r["send_start"] is None for r in rows):
        return None
    return max(r["recv_end"] for r in rows) - min(r["send_start"] for r in rows)


def _one_bringup(ctx: RunContext, spec: str, graph: Any, policy: str, host_mbps: float,
                 grid: list[tuple[str, str]], seeds: list[int], progress: Progress,
                 log: RunLog, link_rows: list[dict[str, Any]]) -> None:
    """One fabric at one rate: the idle check, then every (pattern, cc) x seed run on it."""
    packet_bytes = ctx.roce().packet_bytes
    if policy in POLICIES:
        entropy = "flow" if policy == "ecmp" else ctx.spray_entropy
        options = ctx.options(policy=policy, host_mbps=host_mbps, packet_bytes=packet_bytes)
    else:  # the user's app routes; the senders do what its entropy says
        entropy = ctx.app_entropy
        options = ctx.options(host_mbps=host_mbps, controller_app=ctx.controller_app,
                              packet_bytes=packet_bytes)
    spray = entropy != "flow"
    with Emulation(graph, options) as emu:
        plan = emu.report.rate_plan
        host_mbps = plan.host_mbps

        def row_of(run: Scheduled, result: Any, report: dict[str, Any]) -> dict[str, Any]:
            pattern, ranks, size = run.context
            rows = result.transfer_rows()
            measured = norm_throughput(pattern, {r["id"]: (r["send_start"], r["recv_end"],
                                                           r["bytes"]) for r in rows},
                                       ranks, size, host_mbps)
            ideal_spans = report_ideal(result, graph, plan.link_mbps, spray)
            best = (norm_throughput(pattern, {r["id"]: (ideal_spans[r["id"]].start,
                                                        ideal_spans[r["id"]].end, r["bytes"])
                                              for r in rows}, ranks, size, host_mbps)
                    if ideal_spans else None)
            coll = None if spray else flow_collisions(result)  # a spray has every path
            link_rows.extend({**run.keys, "link": link, "share": round(load, 4)}
                             for link, load in uplink_shares(graph, result).items())
            ideal_span = (max(s.end for s in ideal_spans.values())
                          - min(s.start for s in ideal_spans.values())) if ideal_spans else None
            span = result_span(rows)
            return {"host_mbps": host_mbps, "norm_throughput": _round(measured),
                    "ideal": _round(best),
                    "efficiency": _round(measured / best if measured and best else None),
                    # the last byte's time: unlike a mean of flow rates, unfairness cannot
                    # beat the ideal here
                    "span_efficiency": _round(ideal_span / span if span and ideal_span
                                              else None),
                    "collisions": coll.count if coll else None,
                    "max_flows_per_link": coll.max_flows_per_link if coll else None,
                    **transport_losses(rows), "complete": result.complete,
                    "valid": report["valid"]}

        for cc in sorted({cc for _, cc in grid}):
            transport = ctx.roce(entropy=entropy, entropy_ports=ENTROPY_PORTS, cc=cc)

            def runs(cc: str = cc) -> Iterator[Scheduled]:
                for pattern in [p for p, c in grid if c == cc]:
                    for seed in seeds:
                        transfers, ranks, size = pattern_transfers(graph, pattern, seed, host_mbps)
                        yield Scheduled({"topology": spec, "policy": policy, "pattern": pattern,
                                         "cc": cc, "seed": seed}, transfers, seed,
                                        (pattern, ranks, size))

            run_schedules(emu, runs(), transport,
                          ctx.run_dir / "work" / f"{spec}-{policy}-{host_mbps:g}-{cc}",
                          progress, row_of, log, capture_spec=ctx.capture)


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def plan_grid(ctx: RunContext) -> dict[str, list[tuple[str, str]]]:
    """Topology -> the (pattern, cc) pairs it runs: every pattern with ``ctx.cc``, and in
    a full run the ablation (the other ccs on the one-flow patterns of the first
    topology), so the figures can say how much of each number is the transport."""
    patterns = ("stride",) if ctx.quick else PATTERNS
    topos = fabric_specs(ctx)
    grid = {spec: [(p, ctx.cc) for p in patterns] for spec in topos}
    if not ctx.quick:
        grid[topos[0]] += [(p, cc) for cc in CONGESTION_CONTROLS if cc != ctx.cc
                           for p in ABLATION_PATTERNS]
    return grid


def run(ctx: RunContext) -> dict[str, Any]:
    """Run every topology x policy x (pattern, cc) x seed; write CSVs and the summary."""
    seeds = ctx.seed_list(quick_default=2, full_default=10)
    grid = plan_grid(ctx)
    topos = list(grid)
    policies = run_policies(ctx)
    progress = Progress(sum(len(g) for g in grid.values()) * len(policies) * len(seeds), NAME)
    log, link_rows = RunLog(attempts=ctx.attempts), []
    for spec in topos:
        graph = topologies.build(spec)
        base_mbps = ctx.host_mbps or default_host_mbps(
            graph, packet_bytes=ctx.roce().packet_bytes,
            headroom=capacity.ROCE_RATE_HEADROOM)
        for policy in policies:
            for share in sorted({RATE_SHARE[p] for p, _ in grid[spec]}, reverse=True):
                mine = [(p, cc) for p, cc in grid[spec] if RATE_SHARE[p] == share]
                _one_bringup(ctx, spec, graph, policy, base_mbps * share, mine, seeds,
                             progress, log, link_rows)
    rows = log.rows
    fid = log.write(ctx.run_dir)
    results.write_csv(ctx.run_dir / "uplinks.csv", link_rows)
    paths = {spec: top_tier_paths(topologies.build(spec)) for spec in topos}
    table = _table(rows, paths)
    spines = paths[topos[0]]
    expected = balls_into_bins_expected_utilisation(spines)
    results.write_summary(ctx.run_dir, NAME, table, fid,
                          {"question": QUESTION,
                           "balls_into_bins_expectation": round(expected, 4),
                           "anchors": {"ecmp": "60-68 % of line rate",
                                       "spray": ">= 90 % (vendor: 95 % vs 60 %)"}})
    return {"table": table, "fidelity": fid, "seeds": seeds,
            "parameters": {"topologies": topos, "grid": grid, "policies": policies,
                           "controller_app": ctx.controller_app,
                           "app_entropy": ctx.app_entropy if ctx.controller_app else None,
                           "spray_entropy": ctx.spray_entropy,
                           "transport": "roce", "cc": ctx.cc, "roce_mtu": ctx.roce_mtu,
                           "host_mbps": ctx.host_mbps or "auto",
                           "rate_share": RATE_SHARE, "flow_s": FLOW_S, "buffer_s": BUFFER_S},
            "notes": [f"balls-into-bins expectation 1-(1-1/N)^N for N={spines} paths: "
                      f"{expected:.3f}",
                      f"spraying senders: {SPRAY_TEXT[ctx.spray_entropy]}",
                      "ideal: a perfect transport on the paths the run used (max-min fair "
                      "fluid model, headers, ACKs and store-and-forward latency included, steps "
                      "chained in the model; sprayed flows split as the switches' hash split "
                      "them, or evenly where the senders steer by echoes); "
                      "efficiency = measured / ideal"]}


ANCHORS = {"ecmp": "0.60-0.68", "spray": ">=0.90", "adaptive": ">=0.90"}
SPRAY_TEXT = {"packet": f"the next of {ENTROPY_PORTS} source ports per packet",
              "recycle": f"{ENTROPY_PORTS} source ports, the ones echoed as uncongested "
                         f"reused first (REPS)"}
ANCHOR_RANGES = {"ecmp": (0.60, 0.68), "spray": (0.90, 0.95), "adaptive": (0.90, 0.95)}


def top_tier_paths(graph: Any) -> int:
    """Equal-cost paths between two leaves in different pods: the top-tier switches."""
    cores = fg.nodes_with_role(graph, "core")
    return len(cores) if cores else len(fg.nodes_with_role(graph, "spine"))


def expected_throughput(policy: str, pattern: str, paths: int) -> float | None:
    """Theory for the stride: ECMP's flows hit 1-(1-1/N)^N of N paths on average
    (balls into bins); a perfect spray uses them all. None for other patterns."""
    if pattern != "stride" or policy not in POLICIES:  # no theory for a user's app
        return None
    return round(balls_into_bins_expected_utilisation(paths), 4) if policy == "ecmp" else 1.0


def _table(rows: list[dict[str, Any]], paths: dict[str, int]) -> list[dict[str, Any]]:
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
            got = [r[field] for r in group if r[field] is not None]
            return round(statistics.fmean(got), digits) if got else None

        maxes = [r["max_flows_per_link"] for r in group if r["max_flows_per_link"] is not None]
        table.append({"topology": topo, "policy": policy, "pattern": pattern, "cc": cc,
                      "seeds": len(group),
                      "norm_throughput": round(statistics.fmean(values), 4) if values else None,
                      "norm_throughput_min": min(values, default=None),
                      "norm_throughput_max": max(values, default=None),
                      "theory": expected_throughput(policy, pattern, paths[topo]),
                      "ideal": mean("ideal"), "efficiency": mean("efficiency"),
                      "span_efficiency": mean("span_efficiency"),
                      "anchor": ANCHORS.get(policy), "collisions": mean("collisions", 2),
                      "max_flows_per_link": max(maxes) if maxes else None,
                      "drop_frac": mean("drop_frac", 5),
                      "rto": sum(r["rto"] for r in group),
                      "incomplete": len(group) - len(values)})
    return table


def _main_cc(runs: list[dict[str, Any]]) -> str:
    """The congestion control every pattern ran with (the ablation adds the others)."""
    patterns = {r["pattern"] for r in runs}
    return next(cc for cc in sorted({r["cc"] for r in runs})
                if {r["pattern"] for r in runs if r["cc"] == cc} == patterns)


def _ablation_figure(plt: Any, runs: list[dict[str, Any]], ccs: list[str], run_dir: Path,
                     mark: str) -> list[Path]:
    """Efficiency per policy and congestion control, by mean rate and by the time of the
    last byte: how much of each figure is the transport."""
    topo = sorted({r["topology"] for r in runs}, reverse=True)[0]
    patterns = [p for p in ABLATION_PATTERNS
                if all(any(r["pattern"] == p and r["cc"] == cc and r["topology"] == topo
                           for r in runs) for cc in ccs)]
    fig, axes = plt.subplots(len(ABLATION_METRICS), len(patterns),
                             figsize=(3.2 * len(patterns), 4.6), squeeze=False, sharey=True)
    width = 0.8 / len(ccs)
    top = 1.1
    policies = policies_in(runs)
    for row, (metric, label) in zip(axes, ABLATION_METRICS):
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
            ax.set_title(f"{pattern} on {topo}")
        row[0].set_ylabel(label)
    axes[0][0].set_ylim(0, top)
    axes[-1][0].legend(title="congestion control", loc="lower right", fontsize=7)
    return plotstyle.save(fig, run_dir, "transport_ablation", mark)


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


def plot(run_dir: Path) -> list[Path]:
    """Throughput per policy with spread and the per-run ideal; the transport ablation
    (efficiency per congestion control); uplink load heatmap; FCT CDF."""
    plt, summary, runs = load_run(run_dir)
    mark = plotstyle.validity_mark(summary, runs)
    flows = results.read_csv(run_dir / "flows.csv")
    uplinks = results.read_csv(run_dir / "uplinks.csv")
    written = []
    main_cc = _main_cc(runs)
    # the heatmap and the CDF show the main runs (the ablation has its own figure)
    flows = [r for r in flows if r.get("cc", main_cc) == main_cc]
    uplinks = [r for r in uplinks if r.get("cc", main_cc) == main_cc]
    topos = sorted({r["topology"] for r in runs}, reverse=True)  # rail-clos first
    patterns = [p for p in PATTERNS if any(r["pattern"] == p for r in runs)]
    policies = policies_in(runs)
    fig, axes = plt.subplots(len(topos), len(patterns),
                             figsize=(3.0 * len(patterns), 2.4 * len(topos)), squeeze=False,
                             sharey=True)
    for row, topo in zip(axes, topos):
        for ax, pattern in zip(row, patterns):
            for i, policy in enumerate(policies):
                mine = [r for r in runs if r["topology"] == topo and r["pattern"] == pattern
                        and r["policy"] == policy and r["cc"] == main_cc]
                values = [v for v in (as_float(r["norm_throughput"]) for r in mine)
                          if v is not None]
                ideals = [v for v in (as_float(r["ideal"]) for r in mine) if v is not None]
                if values:
                    ax.boxplot(values, positions=[i], widths=0.5, showfliers=False)
                    ax.scatter([i] * len(values), values, s=12, zorder=3, label=policy,
                               **plotstyle.series_style(policy, i))
                plotstyle.ideal_ticks(ax, i + 0.32, ideals,
                                      plotstyle.IDEAL_LABEL if i == 0 else None)
            if pattern in ONE_FLOW_PATTERNS:  # the anchors are one flow per host
                for i, policy in enumerate(p for p in policies if p in ANCHOR_RANGES):
                    low, high = ANCHOR_RANGES[policy]
                    ax.fill_between([i - 0.3, i + 0.3], low, high, color="grey", alpha=0.2,
                                    lw=0, label="published anchor" if i == 0 else None)
            if pattern == "stride":  # the balls-into-bins theory is for the stride
                ax.axhline(summary["balls_into_bins_expectation"], ls="--", color="grey",
                           lw=1, label="ECMP theory 1-(1-1/N)$^N$")
            ax.set_xticks(range(len(policies)), policies)
            ax.set_ylim(0, 1.05)
            ax.set_title(f"{pattern} on {topo}")
        row[0].set_ylabel("throughput / line rate")
    axes[0][0].legend(loc="lower right", fontsize=6, title=f"roce, {main_cc} cc",
                      title_fontsize=6)
    written += plotstyle.save(fig, run_dir, "throughput", mark)

    ccs = sorted({r["cc"] for r in runs})
    if len(ccs) > 1:
        written += _ablation_figure(plt, runs, ccs, run_dir, mark)

    links = sorted({r["link"] for r in uplinks})
    fig, axes = plt.subplots(1, len(policies),
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
        if policy == "ecmp":  # one path per flow: write each link's flow count in its cell
            counts = flows_per_link(flows)
            for i, link in enumerate(links):
                for j, (pattern, seed) in enumerate(keys):
                    n = counts.get((pattern, seed, link))
                    if n:
                        ax.text(j, i, str(n), ha="center", va="center", fontsize=5,
                                color="black" if grid[i][j] > 0.6 else "white")
            ax.set_title("ecmp (number: flows on the link)")
        ax.set_xticks(range(len(keys)), [f"{p[:6]} {s}" for p, s in keys], rotation=90,
                      fontsize=6)
        ax.set_xlabel("run (pattern, seed)")
        ax.set_yticks(range(len(links)), links, fontsize=6)
    fig.colorbar(image, ax=axes[0].tolist(), label="share of the leaf's uplink bytes")
    written += plotstyle.save(fig, run_dir, "uplink_load", mark)

    fig, ax = plt.subplots(figsize=(3.4, 2.6))
    for policy in policies:
        fcts = sorted(float(r["fct_s"]) for r in flows if r["policy"] == policy and r["fct_s"])
        if fcts:
            ax.plot(fcts, [(i + 1) / len(fcts) for i in range(len(fcts))], label=policy,
                    markevery=max(1, len(fcts) // 8), **plotstyle.series_style(policy))
    ax.set_xlabel("flow completion time (s)")
    ax.set_ylabel("CDF")
    ax.legend()
    written += plotstyle.save(fig, run_dir, "fct_cdf", mark)
    return written
