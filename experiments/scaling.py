"""Scaling (htsim, Colossus): does what routing loses at 16 endpoints hold at 1,024?

htsim's inter-pod permutations under per-flow ECMP fall from 0.52 of line rate
at k=4 (16 hosts) to 0.45 at k=8 (128) and 0.37-0.38 at k=16 (1,024) with
NDP, while packet spraying stays at 0.91-0.98: more flows meet on more links
as the fabric grows. This experiment runs random permutations (every endpoint
sends one flow of the same number of packets to another) under ECMP, spraying
and adaptive routing on fabrics of 16 to 1,024 endpoints: on the emulator
where this machine can emulate them (up to 64 endpoints), and on the ns-3
simulator at every size, at the graph's physical rates. The work is the same
on both backends and at every rate: :data:`FLOW_PACKETS` packets per flow.

Two patterns: ``permutation-interpod`` (every destination in another pod, or
under another leaf: htsim's published traffic) and, in the full run on the
simulator, ``permutation`` (any derangement: some flows stay in their pod and
collide less). Two measures, each beside what it is compared with:

* ``norm_throughput``: the mean flow rate from first to last byte, over the
  line rate (the collisions experiment's measure), with ``ideal``, a perfect
  transport on the paths the run used; unfairness raises it (a flow that
  finishes early leaves its links to the rest).
* ``steady``: each flow's mean rate between a quarter and three quarters of
  its line-rate time, while no flow can have finished (htsim's measure of a
  steady state), with ``steady_ideal``, the max-min fair rates of the same
  paths, and htsim's figures for the same traffic: NDP as published, swift as
  measured on csg-htsim (:data:`HTSIM`).

Options: ``--topo`` one fabric instead of the ladder; ``--backend ns3``
simulates only (no root); ``--host-mbps`` runs the simulator at the emulated
rate rather than at physical rates (the same packets: the same figures);
``--flow-packets`` another length (htsim's anchors are 12,000 packets: 4 ms of
4 KiB packets at 100 Gbit/s).
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any, Iterator, Mapping

import topologies
from fabric.analysis import plotstyle
from fabric.analysis.report import ideal_transfers
from fabric.emulation import capacity
from fabric.emulation.machine_speed import default_host_mbps
from fabric.experiment import (Experiment, Measured, Mode, Option, RunContext, RunData, Runner,
                               Scheduled, simulated)
from fabric.experiment.measures import (STEADY_WINDOW, as_float, steady_measures,
                                        steady_window, transport_losses)
from fabric.experiment.options import (POLICIES_OPTION, ROCE_OPTIONS, SPRAY_ENTROPY,
                                       chosen_policies)
from fabric.model import graph as fg
from fabric.routing.policies import POLICIES as ROUTING_POLICIES, multipath, sprays
from fabric.traffic import sizing
from fabric.traffic.model import SPRAY_ENTROPY_PORTS
from fabric.traffic.result import records, timings
from fabric.traffic.workloads import norm_throughput, pattern_transfers

NAME = "scaling"
QUESTION = "Does each routing policy's throughput hold from 16 to 1,024 endpoints?"
POLICIES = ("ecmp", "spray", "adaptive")  # the default comparison (--policies: any of routing's)
INTERPOD = "permutation-interpod"
PATTERNS = {"quick": (INTERPOD,), "full": (INTERPOD, "permutation")}
EMULATED_PATTERNS = (INTERPOD,)  # a 64-endpoint fabric emulates at ~1 Mbit/s: one pattern
# Packets per flow, on both backends and at every rate (the quick run's are shorter)
FLOW_PACKETS = {"quick": 1_000, "full": 3_000}
HTSIM_PACKETS = 12_000  # htsim's flows: 4 ms of 4 KiB packets at 100 Gbit/s
EMULATED_MAX_ENDPOINTS = 64  # what this machine emulates faithfully (docs/methodology.md)
RAIL_64 = "rail-clos,servers=16,gpus=4,servers_per_leaf=4,spines=4"
RAIL_1024 = "rail-clos,servers=128,gpus=8,servers_per_leaf=16,spines=16"
# The 1,024-NIC rail-clos (RAIL_1024) runs with --topo: at 400 Gbit/s and as many
# packets its run is four times the k=16 fat-tree's.
LADDERS = {"quick": ["fat-tree", "fat-tree,k=8"],
           "full": ["fat-tree", "rail-clos", RAIL_64, "fat-tree,k=8", "fat-tree,k=16"]}
# htsim's steady-state rates (low, high) of line rate on k-ary fat-trees at 100 Gbit/s,
# 64-packet queues, flows of HTSIM_PACKETS: by traffic, fabric, policy and transport.
# NDP: the published figures (inter-pod permutations); swift: csg-htsim's swift run on
# both kinds of traffic, one random path per flow, the mean of each flow's rate from 1
# to 3 ms (k=4 3 seeds, k=8 3 seeds, k=16 2 seeds).
HTSIM = {INTERPOD: {"fat-tree": {"ecmp": {"ndp": (0.52, 0.52), "swift": (0.448, 0.448)},
                                 "spray": {"ndp": (0.93, 0.98)}},
                    "fat-tree,k=8": {"ecmp": {"ndp": (0.45, 0.45), "swift": (0.404, 0.404)},
                                     "spray": {"ndp": (0.91, 0.98)}},
                    "fat-tree,k=16": {"ecmp": {"ndp": (0.37, 0.38),
                                               "swift": (0.417, 0.417)},
                                      "spray": {"ndp": (0.91, 0.96)}}},
         "permutation": {"fat-tree": {"ecmp": {"swift": (0.575, 0.575)}},
                         "fat-tree,k=8": {"ecmp": {"swift": (0.484, 0.484)}},
                         "fat-tree,k=16": {"ecmp": {"swift": (0.430, 0.430)}}}}
# Wall-clock estimate of an emulated bring-up and a run's fixed cost (as collisions')
BRINGUP_S = 8.0
RUN_OVERHEAD_S = 4.0
DEADLINE_FACTOR = 50  # a run's deadline, in line-rate times of its flows


def flow_packets_argument(text: str) -> int:
    """``--flow-packets``: a whole number of packets, at least 100 (a steady state)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of packets: {text!r}") from None
    if not 100 <= value <= 1_000_000:
        raise argparse.ArgumentTypeError(f"flows need 100 to 1,000,000 packets, got {value}")
    return value


FLOW_PACKETS_OPTION = Option("--flow-packets", type=flow_packets_argument, metavar="N",
                             help=f"packets per flow (default {FLOW_PACKETS['quick']:,} quick, "
                                  f"{FLOW_PACKETS['full']:,} full; htsim's anchors: "
                                  f"{HTSIM_PACKETS:,})")


def flow_packets(ctx: RunContext) -> int:
    """Packets per flow of this run: ``--flow-packets``, or the mode's length."""
    return ctx.get(FLOW_PACKETS_OPTION) or FLOW_PACKETS["quick" if ctx.quick else "full"]


def endpoints(spec: str) -> int:
    """Endpoint NICs of a fabric: its size on the figure's axis."""
    graph = topologies.build(spec)
    return sum(len(graph.nodes[ep]["nics"]) for ep in fg.endpoints(graph))


def family(spec: str) -> str:
    """The topology's builder name (fat-tree, rail-clos, ...): one line per family."""
    return spec.split(",")[0]


def htsim_text(spec: str, pattern: str, policy: str) -> str | None:
    """htsim's figures for ``spec``, ``pattern`` and ``policy`` by transport, e.g.
    ``"ndp 0.45, swift 0.40"`` (adaptive is read against spraying); None if none."""
    anchors = HTSIM.get(pattern, {}).get(spec, {}).get(
        "spray" if policy == "adaptive" else policy)
    if not anchors:
        return None
    return ", ".join(f"{cc} {low:.2f}" if low == high else f"{cc} {low:.2f}-{high:.2f}"
                     for cc, (low, high) in anchors.items())


def backends(ctx: RunContext, spec: str) -> list[str]:
    """The backends a fabric runs on: the emulator where it can, the simulator always."""
    emulated = ctx.backend == "emulator" and endpoints(spec) <= EMULATED_MAX_ENDPOINTS
    return (["emulator"] if emulated else []) + ["ns3"]


def patterns(ctx: RunContext, backend: str) -> tuple[str, ...]:
    """The permutations a backend runs: the emulator htsim's inter-pod traffic only."""
    mine = PATTERNS["quick" if ctx.quick else "full"]
    return tuple(p for p in mine if backend == "ns3" or p in EMULATED_PATTERNS)


def _schedules(graph: Any, spec: str, policy: str, backend: str, pattern: str,
               seeds: list[int], transport: Any, packets: int, host_mbps: float
               ) -> Iterator[Scheduled]:
    window = steady_window(packets, transport, host_mbps)
    for seed in seeds:
        transfers, ranks, _ = pattern_transfers(graph, pattern, seed, transport, packets)
        yield Scheduled({"topology": spec, "backend": backend, "policy": policy,
                         "pattern": pattern, "seed": seed}, transfers, seed,
                        (ranks, packets), window=window)


def _row_function(fab: Any, spray: bool) -> Any:
    """A run's measures beside their ideals and htsim's figures (both backends)."""
    graph, plan = fab.graph, fab.report.rate_plan

    def row_of(run: Scheduled, result: Any, report: dict[str, Any]) -> dict[str, Any]:
        ranks, packets = run.context
        pattern = run.keys["pattern"]
        measured = norm_throughput(pattern, timings(records(result.transfer_rows())), ranks, None,
                                   plan.host_mbps)
        ideal = ideal_transfers(result, graph, plan.link_mbps, spray)
        best = (norm_throughput(pattern, timings(ideal), ranks, None, plan.host_mbps)
                if ideal else None)
        steady = steady_measures(result, graph, plan.link_mbps, spray, run.window,
                                 plan.host_mbps)
        return {"endpoints": len(ranks), "family": family(run.keys["topology"]),
                "host_mbps": plan.host_mbps, "flow_packets": packets,
                "norm_throughput": _round(measured), "ideal": _round(best), **steady,
                "htsim": htsim_text(run.keys["topology"], pattern, run.keys["policy"]),
                **transport_losses(result.transfer_rows()), "complete": result.complete,
                "valid": report["valid"]}

    return row_of


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


class Scaling(Experiment):
    """Throughput by fabric size, policy and backend."""

    name = NAME
    question = QUESTION
    default_topology = "fat-tree"
    modes = {"quick": Mode(seeds=1), "full": Mode(seeds=2)}
    options = ROCE_OPTIONS
    simulates = True
    options = ROCE_OPTIONS + (FLOW_PACKETS_OPTION, POLICIES_OPTION)
    simulates = True
    anchors = {"ecmp": "htsim inter-pod, NDP 0.52 (k=4), 0.45 (k=8), 0.37-0.38 (k=16); "
                       "swift 0.45, 0.40, 0.42",
               "spray": "htsim inter-pod, NDP 0.93-0.98 (k=4), 0.91-0.98 (k=8), "
                        "0.91-0.96 (k=16)"}

    def topologies(self, ctx: RunContext) -> list[str]:
        return [ctx.topo] if ctx.topo else LADDERS["quick" if ctx.quick else "full"]

    def check(self, ctx: RunContext) -> None:
        """Refuse a fabric with too few endpoints for a permutation, or one whose pods
        cannot all send out of their pod."""
        for spec in self.topologies(ctx):
            if endpoints(spec) < 2:
                raise ValueError(f"{NAME}: {spec} has fewer than two endpoints")
            pattern_transfers(topologies.build(spec), INTERPOD, 0, ctx.roce(), 1)

    def run_count(self, ctx: RunContext) -> int:
        runs = sum(len(patterns(ctx, backend)) for spec in self.topologies(ctx)
                   for backend in backends(ctx, spec))
        return runs * len(chosen_policies(ctx, POLICIES)) * len(self.seeds(ctx))

    def estimate_s(self, ctx: RunContext) -> float:
        """Emulated bring-ups and runs at twice their flows' line-rate time; simulated
        runs by the packets they send."""
        seeds, packets, total = len(self.seeds(ctx)), flow_packets(ctx), 0.0
        for spec in self.topologies(ctx):
            graph = topologies.build(spec)
            for backend in backends(ctx, spec):
                runs = len(chosen_policies(ctx, POLICIES)) * seeds * len(patterns(ctx, backend))
                if backend == "emulator":
                    mbps = ctx.host_mbps or default_host_mbps(graph)
                    total += len(chosen_policies(ctx, POLICIES)) * BRINGUP_S + runs * (
                        RUN_OVERHEAD_S + 2 * sizing.seconds_of(packets, ctx.roce(), mbps))
                else:
                    total += runs * simulated.estimate_s(graph, packets)
        return total

    def measure(self, ctx: RunContext, runner: Runner) -> Measured:
        """Every fabric of the ladder on each of its backends, under every policy."""
        seeds, skipped = self.seeds(ctx), []
        for spec in self.topologies(ctx):
            graph = topologies.build(spec)
            for backend in backends(ctx, spec):
                try:
                    self._fabric(ctx, runner, spec, graph, backend, seeds)
                except capacity.CapacityError as exc:  # the emulator's budget said no
                    skipped.append(f"{spec} not emulated: {exc}")
        return Measured({"topologies": self.topologies(ctx),
                         "policies": chosen_policies(ctx, POLICIES),
                         "patterns": PATTERNS["quick" if ctx.quick else "full"],
                         "emulated_patterns": EMULATED_PATTERNS,
                         "window": list(STEADY_WINDOW),
                         "spray_entropy": ctx.get(SPRAY_ENTROPY), "transport": "roce",
                         "cc": ctx.roce().cc, "roce_mtu": ctx.roce().mtu_payload,
                         "host_mbps": ctx.host_mbps or "auto (emulator), physical (ns3)",
                         "backend": ctx.backend,
                         "work": {"flow_packets": flow_packets(ctx),
                                  "payload_bytes": ctx.roce().payload_bytes,
                                  "htsim_flow_packets": HTSIM_PACKETS}},
                        {"skipped": skipped})

    def _fabric(self, ctx: RunContext, runner: Runner, spec: str, graph: Any, backend: str,
                seeds: list[int]) -> None:
        """One fabric on one backend: each policy's bring-up and its seeds' runs."""
        packet_bytes, packets = ctx.roce().packet_bytes, flow_packets(ctx)
        mbps = runner.host_mbps(graph, packet_bytes, capacity.ROCE_RATE_HEADROOM, backend)
        for policy in chosen_policies(ctx, POLICIES):
            entropy = ctx.get(SPRAY_ENTROPY) if sprays(policy) else "flow"
            transport = ctx.roce(entropy=entropy, entropy_ports=SPRAY_ENTROPY_PORTS)
            with runner.bring_up(graph, backend=backend, host_mbps=mbps,
                                 packet_bytes=packet_bytes, policy=policy) as fab:
                rate = fab.report.rate_plan.host_mbps
                # the simulator scales a deadline by its time scale: give it unscaled
                deadline = (DEADLINE_FACTOR * sizing.seconds_of(packets, transport, rate)
                            / getattr(fab, "time_scale", 1.0))
                for pattern in patterns(ctx, backend):
                    runner.run(fab, _schedules(graph, spec, policy, backend, pattern, seeds,
                                               transport, packets, rate),
                               transport, f"{spec}-{backend}-{policy}-{pattern}",
                               _row_function(fab, spray=multipath(policy)),
                               deadline_s=deadline)

    def table(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return table_of(rows)

    def notes(self, ctx: RunContext, rows: list[dict[str, Any]], measured: Measured
              ) -> list[str]:
        packets = measured.parameters["work"]["flow_packets"]
        length = ("htsim's length" if packets == HTSIM_PACKETS else
                  f"htsim's anchors are at {HTSIM_PACKETS:,}: ECMP's steady rate rises "
                  f"~3 points from 1,000 to 12,000 packets (docs/methodology.md)")
        return measured.summary.get("skipped", []) + [
            f"flows of {packets:,} packets on both backends ({length})",
            f"patterns: {INTERPOD} (every destination in another pod, or under another "
            f"leaf: htsim's traffic) and permutation (any derangement, simulator only)",
            "norm_throughput: mean flow rate first to last byte / line rate; ideal: a perfect "
            "transport on the paths the run used",
            f"steady: mean rate between {STEADY_WINDOW[0]:g} and {STEADY_WINDOW[1]:g} of a "
            f"flow's line-rate time (htsim's 1-3 ms of 4 ms); steady_ideal: max-min fair "
            f"rates on the run's paths; htsim: by transport, NDP published, swift run on "
            f"csg-htsim (adaptive read against spraying)"]

    def figures(self) -> Mapping[str, Any]:
        return {"scaling": scaling_figure}


def table_of(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per fabric, pattern, backend and policy: the seeds' means, smallest
    fabric first."""
    def key(r: dict[str, Any]) -> tuple:
        return (r["topology"], r.get("pattern", INTERPOD), r["backend"], r["policy"])

    keys = sorted({key(r) for r in rows},
                  key=lambda k: (_size(rows, k[0]), k[0], k[1], k[2],
                                 ROUTING_POLICIES.index(k[3]) if k[3] in ROUTING_POLICIES
                                 else 9))
    table = []
    for topo, pattern, backend, policy in keys:
        mine = [r for r in rows if key(r) == (topo, pattern, backend, policy)]

        def mean(name: str, digits: int = 3) -> float | None:
            values = [v for v in (as_float(r.get(name)) for r in mine) if v is not None]
            return round(statistics.fmean(values), digits) if values else None

        table.append({"topology": topo, "endpoints": _size(rows, topo), "pattern": pattern,
                      "backend": backend, "policy": policy,
                      "norm_throughput": mean("norm_throughput"), "ideal": mean("ideal"),
                      "steady": mean("steady"), "steady_ideal": mean("steady_ideal"),
                      "htsim": mine[0].get("htsim"), "runs": len(mine),
                      "wall_s": mean("wall_s", 1), "memory_mb": mean("memory_mb", 0)})
    return table


def _size(rows: list[dict[str, Any]], topo: str) -> int:
    return int(next(as_float(r["endpoints"]) for r in rows if r["topology"] == topo))


def _series(runs: list[dict[str, Any]], fam: str, backend: str, policy: str, field: str,
            pattern: str = INTERPOD) -> tuple[list[int], list[float]]:
    """Sizes and mean ``field`` of one family, backend, policy and pattern, by size."""
    points: dict[int, list[float]] = {}
    for r in runs:
        value = as_float(r.get(field))
        if ((r["family"], r["backend"], r["policy"], r.get("pattern", INTERPOD))
                == (fam, backend, policy, pattern) and value is not None):
            points.setdefault(int(as_float(r["endpoints"])), []).append(value)
    sizes = sorted(points)
    return sizes, [statistics.fmean(points[s]) for s in sizes]


def _htsim_marks(ax: Any) -> None:
    """htsim's inter-pod figures at their fat-tree sizes: NDP's published ranges as grey
    bars, swift's as grey crosses."""
    for i, (spec, anchors) in enumerate(HTSIM[INTERPOD].items()):
        size = endpoints(spec)
        for policy, by_cc in anchors.items():
            for cc, (low, high) in by_cc.items():
                if cc == "ndp":
                    ax.vlines(size, low - 0.005, high + 0.005, color="grey", lw=5, alpha=0.45,
                              label="htsim NDP" if i == 0 and policy == "ecmp" else None)
                else:
                    ax.scatter([size], [low], marker="x", s=22, color="grey", zorder=4,
                               label=f"htsim {cc}" if i == 0 else None)


def scaling_figure(data: RunData) -> Any:
    """Throughput against fabric size on htsim's inter-pod traffic: the emulator's and
    the simulator's mean rate by completion beside the per-run ideal (left), and their
    steady state beside its max-min ideal and htsim's figures (right)."""
    runs = data.runs
    present = [p for p in ROUTING_POLICIES if any(r["policy"] == p for r in runs)]
    families = sorted({r["family"] for r in runs})
    fig, (left, right) = data.plt.subplots(1, 2, figsize=(7.0, 2.9), sharey=True)
    styles = {fam: ls for fam, ls in zip(families, ("-", "--", ":", "-."))}
    labelled: set[str] = set()
    for policy in present:
        colour, marker = plotstyle.colour(policy), plotstyle.marker(policy)
        for ax, field, ideal in ((left, "norm_throughput", "ideal"),
                                 (right, "steady", "steady_ideal")):
            for fam in families:
                sizes, values = _series(runs, fam, "ns3", policy, field)
                ax.plot(sizes, values, styles[fam], color=colour, marker=marker, ms=4,
                        label=f"{policy}, {fam}" if ax is left else None)
                sizes, values = _series(runs, fam, "ns3", policy, ideal)
                ax.scatter(sizes, values, s=14, marker="_", color=colour, zorder=3,
                           label=_once(labelled, f"{ax is left}ideal", "ideal (per run)"))
                sizes, values = _series(runs, fam, "emulator", policy, field)
                if sizes:
                    ax.scatter(sizes, values, s=40, facecolors="none", edgecolors=colour,
                               marker=marker, zorder=3,
                               label=_once(labelled, f"{ax is left}emu", "emulated"))
    _htsim_marks(right)
    ticks = sorted({int(as_float(r["endpoints"])) for r in runs}
                   | {endpoints(s) for s in HTSIM[INTERPOD]})
    packets = (data.summary.get("work") or {}).get("flow_packets")
    length = f"{packets:,}-packet flows" if packets else "flows"
    for ax, title in ((left, f"mean rate, first to last byte\n({length}, inter-pod)"),
                      (right, "steady state, 1/4-3/4 of a flow\n(grey: htsim, "
                              f"{HTSIM_PACKETS:,} packets)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("endpoints")
        ax.set_ylim(0, 1.05)
        ax.set_title(title, fontsize=8)
    left.set_ylabel("throughput / line rate")
    left.legend(loc="lower left", fontsize=5.5, ncol=2)
    right.legend(loc="lower left", fontsize=6)
    return fig


def _once(seen: set[str], key: str, label: str) -> str | None:
    """``label`` the first time ``key`` is asked for, then None (one legend entry)."""
    if key in seen:
        return None
    seen.add(key)
    return label


EXPERIMENT = Scaling()
