"""Scaling (htsim, Colossus): does what routing loses at 16 endpoints hold at 1,024?

htsim's random permutations under per-flow ECMP fall from 0.52 of line rate at
k=4 (16 hosts) to 0.45 at k=8 (128) and 0.37-0.38 at k=16 (1,024), while
packet spraying stays at 0.91-0.98: more flows meet on more links as the
fabric grows. This experiment runs the same random permutation (every endpoint
sends one flow to another, 4 s of line rate) under ECMP, spraying and adaptive
routing on fabrics of 16 to 1,024 endpoints: on the emulator where this
machine can emulate them (up to 64 endpoints), and on the ns-3 simulator at
every size, at the graph's physical rates (flows of 4 ms, htsim's length).

Two measures, each beside what it is compared with:

* ``norm_throughput``: the mean flow rate from first to last byte, over the
  line rate (the collisions experiment's measure), with the per-run ideal (a
  perfect transport on the paths the run used). Both backends report it: the
  emulator's points against the simulator's.
* ``steady``: the mean rate each flow got between a quarter and three
  quarters of its length (1-3 ms of 4 ms), htsim's measure of a steady state;
  the simulator reports it, against htsim's figures.

Options: ``--topo`` one fabric instead of the ladder; ``--backend ns3``
simulates only (no root); ``--host-mbps`` runs the simulator at the emulated
rate (the emulated runs' twins) rather than at physical rates.
"""

from __future__ import annotations

import statistics
from typing import Any, Iterator, Mapping

import topologies
from fabric.analysis import plotstyle
from fabric.analysis.report import ideal_spans
from fabric.emulation import capacity
from fabric.emulation.machine_speed import default_host_mbps
from fabric.experiment import (Experiment, Measured, Mode, RunContext, RunData, Runner,
                               Scheduled, simulated)
from fabric.experiment.measures import as_float, transport_losses
from fabric.experiment.options import ROCE_OPTIONS, SPRAY_ENTROPY
from fabric.model import graph as fg
from fabric.traffic.model import SPRAY_ENTROPY_PORTS
from fabric.traffic.workloads import norm_throughput, pattern_transfers

NAME = "scaling"
QUESTION = "Does each routing policy's throughput hold from 16 to 1,024 endpoints?"
POLICIES = ("ecmp", "spray", "adaptive")
PATTERN = "permutation"
FLOW_S = 4.0              # of line rate: 4 ms on the simulator at physical rates
WINDOW = (0.25, 0.75)     # of a flow's length: htsim's 1-3 ms of 4 ms
EMULATED_MAX_ENDPOINTS = 64  # what this machine emulates faithfully (docs/methodology.md)
RAIL_64 = "rail-clos,servers=16,gpus=4,servers_per_leaf=4,spines=4"
RAIL_1024 = "rail-clos,servers=128,gpus=8,servers_per_leaf=16,spines=16"
# The 1,024-NIC rail-clos (RAIL_1024) runs with --topo: at 400 Gbit/s its 4 ms flows are
# four times the k=16 fat-tree's packets, ~12 minutes a run on this machine.
LADDERS = {"quick": ["fat-tree", "fat-tree,k=8"],
           "full": ["fat-tree", "rail-clos", RAIL_64, "fat-tree,k=8", "fat-tree,k=16"]}
# htsim's permutations on k-ary fat-trees at 100 Gbit/s (low, high) of line rate
HTSIM = {"fat-tree": {"ecmp": (0.52, 0.52), "spray": (0.93, 0.98)},
         "fat-tree,k=8": {"ecmp": (0.45, 0.45), "spray": (0.91, 0.98)},
         "fat-tree,k=16": {"ecmp": (0.37, 0.38), "spray": (0.91, 0.96)}}
# Wall-clock estimate of an emulated bring-up and a run's fixed cost (as collisions')
BRINGUP_S = 8.0
RUN_OVERHEAD_S = 4.0


def endpoints(spec: str) -> int:
    """Endpoint NICs of a fabric: its size on the figure's axis."""
    graph = topologies.build(spec)
    return sum(len(graph.nodes[ep]["nics"]) for ep in fg.endpoints(graph))


def family(spec: str) -> str:
    """The topology's builder name (fat-tree, rail-clos, ...): one line per family."""
    return spec.split(",")[0]


def htsim_text(spec: str, policy: str) -> str | None:
    """htsim's figure for ``spec`` and ``policy`` (adaptive is read against spraying)."""
    anchor = HTSIM.get(spec, {}).get("spray" if policy == "adaptive" else policy)
    if anchor is None:
        return None
    low, high = anchor
    return f"{low:.2f}" if low == high else f"{low:.2f}-{high:.2f}"


def backends(ctx: RunContext, spec: str) -> list[str]:
    """The backends a fabric runs on: the emulator where it can, the simulator always."""
    emulated = ctx.backend == "emulator" and endpoints(spec) <= EMULATED_MAX_ENDPOINTS
    return (["emulator"] if emulated else []) + ["ns3"]


def _schedules(graph: Any, spec: str, policy: str, backend: str, seeds: list[int],
               host_mbps: float, seconds: float) -> Iterator[Scheduled]:
    for seed in seeds:
        transfers, ranks, _ = pattern_transfers(graph, PATTERN, seed, host_mbps, seconds)
        yield Scheduled({"topology": spec, "backend": backend, "policy": policy,
                         "seed": seed}, transfers, seed, (ranks, seconds))


def _row_function(fab: Any, spray: bool) -> Any:
    """A run's measures beside its ideal (both backends) and its steady-state rate (the
    simulator's)."""
    graph, plan = fab.graph, fab.report.rate_plan

    def row_of(run: Scheduled, result: Any, report: dict[str, Any]) -> dict[str, Any]:
        ranks, seconds = run.context
        rows = result.transfer_rows()
        measured = norm_throughput(PATTERN, {r["id"]: (r["send_start"], r["recv_end"],
                                                       r["bytes"]) for r in rows},
                                   ranks, None, plan.host_mbps)
        spans = ideal_spans(result, graph, plan.link_mbps, spray)
        best = (norm_throughput(PATTERN, {r["id"]: (spans[r["id"]].start, spans[r["id"]].end,
                                                    r["bytes"]) for r in rows},
                                ranks, None, plan.host_mbps) if spans else None)
        window = getattr(fab, "window", None)
        steady = (simulated.window_throughput(result, window, plan.host_mbps)
                  if window and result.complete else None)
        return {"endpoints": len(ranks), "family": family(run.keys["topology"]),
                "host_mbps": plan.host_mbps, "flow_s": seconds,
                "norm_throughput": _round(measured), "ideal": _round(best),
                "steady": _round(steady),
                "htsim": htsim_text(run.keys["topology"], run.keys["policy"]),
                **transport_losses(rows), "complete": result.complete,
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
    anchors = {"ecmp": "htsim 0.52 (k=4), 0.45 (k=8), 0.37-0.38 (k=16)",
               "spray": "htsim 0.93-0.98 (k=4), 0.91-0.98 (k=8), 0.91-0.96 (k=16)"}

    def topologies(self, ctx: RunContext) -> list[str]:
        return [ctx.topo] if ctx.topo else LADDERS["quick" if ctx.quick else "full"]

    def check(self, ctx: RunContext) -> None:
        """Refuse a fabric with too few endpoints for a permutation."""
        for spec in self.topologies(ctx):
            if endpoints(spec) < 2:
                raise ValueError(f"{NAME}: {spec} has fewer than two endpoints")

    def run_count(self, ctx: RunContext) -> int:
        return sum(len(backends(ctx, spec)) for spec in self.topologies(ctx)) \
            * len(POLICIES) * len(self.seeds(ctx))

    def estimate_s(self, ctx: RunContext) -> float:
        """Emulated bring-ups and runs at twice their flows' length; simulated runs by
        the packets they send."""
        seeds, total = len(self.seeds(ctx)), 0.0
        for spec in self.topologies(ctx):
            graph = topologies.build(spec)
            for backend in backends(ctx, spec):
                if backend == "emulator":
                    total += len(POLICIES) * (BRINGUP_S + seeds * (RUN_OVERHEAD_S + 2 * FLOW_S))
                    continue
                mbps = ctx.host_mbps or simulated.physical_host_mbps(graph)
                total += len(POLICIES) * seeds * simulated.estimate_s(
                    graph, mbps, FLOW_S * ctx.time_scale_of(backend), ctx.roce().packet_bytes)
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
        return Measured({"topologies": self.topologies(ctx), "policies": POLICIES,
                         "pattern": PATTERN, "flow_s": FLOW_S, "window": WINDOW,
                         "spray_entropy": ctx.get(SPRAY_ENTROPY), "transport": "roce",
                         "cc": ctx.roce().cc, "roce_mtu": ctx.roce().mtu_payload,
                         "host_mbps": ctx.host_mbps or "auto (emulator), physical (ns3)",
                         "backend": ctx.backend}, {"skipped": skipped})

    def _fabric(self, ctx: RunContext, runner: Runner, spec: str, graph: Any, backend: str,
                seeds: list[int]) -> None:
        """One fabric on one backend: each policy's bring-up and its seeds' runs."""
        packet_bytes = ctx.roce().packet_bytes
        scale = ctx.time_scale_of(backend)
        if backend == "emulator":
            mbps = ctx.host_mbps or default_host_mbps(graph, packet_bytes=packet_bytes,
                                                      headroom=capacity.ROCE_RATE_HEADROOM)
            extra: dict[str, Any] = {}
        else:
            mbps = ctx.host_mbps or simulated.physical_host_mbps(graph)
            extra = {"window": (WINDOW[0] * FLOW_S * scale, WINDOW[1] * FLOW_S * scale)}
        for policy in POLICIES:
            entropy = "flow" if policy == "ecmp" else ctx.get(SPRAY_ENTROPY)
            transport = ctx.roce(entropy=entropy, entropy_ports=SPRAY_ENTROPY_PORTS)
            with runner.bring_up(graph, backend=backend, host_mbps=mbps,
                                 packet_bytes=packet_bytes, policy=policy, **extra) as fab:
                rate = fab.report.rate_plan.host_mbps
                runner.run(fab, _schedules(graph, spec, policy, backend, seeds, rate,
                                           FLOW_S * scale),
                           transport, f"{spec}-{backend}-{policy}",
                           _row_function(fab, spray=entropy != "flow"))

    def table(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return table_of(rows)

    def notes(self, ctx: RunContext, rows: list[dict[str, Any]], measured: Measured
              ) -> list[str]:
        return measured.summary.get("skipped", []) + [
            f"pattern: a random permutation, flows of {FLOW_S:g} s of line rate on the "
            f"emulator and {FLOW_S * 1e3 * simulated.SIM_TIME_SCALE:g} ms at physical rates "
            f"on the simulator",
            "norm_throughput: mean flow rate first to last byte / line rate; ideal: a perfect "
            "transport on the paths the run used",
            f"steady: mean rate between {WINDOW[0]:g} and {WINDOW[1]:g} of a flow's length "
            f"(htsim's 1-3 ms of 4 ms), simulator only; htsim: its published permutations "
            f"(adaptive read against spraying)"]

    def figures(self) -> Mapping[str, Any]:
        return {"scaling": scaling_figure}


def table_of(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per fabric, backend and policy: the seeds' means, smallest fabric first."""
    keys = sorted({(r["topology"], r["backend"], r["policy"]) for r in rows},
                  key=lambda k: (_size(rows, k[0]), k[0], k[1], POLICIES.index(k[2])
                                 if k[2] in POLICIES else 9))
    table = []
    for topo, backend, policy in keys:
        mine = [r for r in rows if (r["topology"], r["backend"], r["policy"])
                == (topo, backend, policy)]

        def mean(name: str, digits: int = 3) -> float | None:
            values = [v for v in (as_float(r.get(name)) for r in mine) if v is not None]
            return round(statistics.fmean(values), digits) if values else None

        table.append({"topology": topo, "endpoints": _size(rows, topo), "backend": backend,
                      "policy": policy, "norm_throughput": mean("norm_throughput"),
                      "ideal": mean("ideal"), "steady": mean("steady"),
                      "htsim": mine[0].get("htsim"), "runs": len(mine),
                      "wall_s": mean("wall_s", 1), "memory_mb": mean("memory_mb", 0)})
    return table


def _size(rows: list[dict[str, Any]], topo: str) -> int:
    return int(next(as_float(r["endpoints"]) for r in rows if r["topology"] == topo))


def _series(runs: list[dict[str, Any]], fam: str, backend: str, policy: str, field: str
            ) -> tuple[list[int], list[float]]:
    """Sizes and mean ``field`` of one family, backend and policy, by size."""
    points: dict[int, list[float]] = {}
    for r in runs:
        value = as_float(r.get(field))
        if (r["family"], r["backend"], r["policy"]) == (fam, backend, policy) and value is not None:
            points.setdefault(int(as_float(r["endpoints"])), []).append(value)
    sizes = sorted(points)
    return sizes, [statistics.fmean(points[s]) for s in sizes]


def _htsim_bars(ax: Any) -> None:
    """htsim's published ranges at their fat-tree sizes, as grey bars."""
    for i, (spec, anchors) in enumerate(HTSIM.items()):
        size = endpoints(spec)
        for policy, (low, high) in anchors.items():
            ax.vlines(size, low - 0.005, high + 0.005, color="grey", lw=5, alpha=0.45,
                      label="htsim (fat-tree)" if i == 0 and policy == "ecmp" else None)


def scaling_figure(data: RunData) -> Any:
    """Throughput against fabric size: the emulator's and the simulator's mean rate by
    completion beside the per-run ideal (left), and the simulator's steady state beside
    htsim's (right)."""
    runs = data.runs
    policies = [p for p in POLICIES if any(r["policy"] == p for r in runs)]
    families = sorted({r["family"] for r in runs})
    fig, (left, right) = data.plt.subplots(1, 2, figsize=(7.0, 2.9), sharey=True)
    styles = {fam: ls for fam, ls in zip(families, ("-", "--", ":", "-."))}
    labelled = set()
    for policy in policies:
        colour, marker = plotstyle.colour(policy), plotstyle.marker(policy)
        for fam in families:
            sizes, values = _series(runs, fam, "ns3", policy, "norm_throughput")
            left.plot(sizes, values, styles[fam], color=colour, marker=marker, ms=4,
                      label=f"{policy}, {fam}")
            sizes, values = _series(runs, fam, "ns3", policy, "ideal")
            left.scatter(sizes, values, s=14, marker="_", color=colour, zorder=3,
                         label=_once(labelled, "ideal (per run)"))
            sizes, values = _series(runs, fam, "emulator", policy, "norm_throughput")
            if sizes:
                left.scatter(sizes, values, s=40, facecolors="none", edgecolors=colour,
                             marker=marker, zorder=3, label=_once(labelled, "emulated"))
            sizes, values = _series(runs, fam, "ns3", policy, "steady")
            right.plot(sizes, values, styles[fam], color=colour, marker=marker, ms=4)
    _htsim_bars(right)
    ticks = sorted({int(as_float(r["endpoints"])) for r in runs} | {endpoints(s) for s in HTSIM})
    for ax, title in ((left, "mean rate, first to last byte\n(lines: simulated)"),
                      (right, "steady state, 1-3 ms of 4 ms\n(simulated; grey: htsim)")):
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


def _once(seen: set[str], label: str) -> str | None:
    """``label`` the first time it is asked for, then None (one legend entry)."""
    if label in seen:
        return None
    seen.add(label)
    return label


EXPERIMENT = Scaling()
