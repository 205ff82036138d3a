"""Incast (Fire-Flyer 3FS, Meta storage): when does a striped read collapse, and do a
small minimum RTO or request admission get the goodput back?

One client reads blocks striped over ``senders`` storage servers (one stripe
each per round; a round starts when the previous one is complete). Sweeps:
the fan-in ``senders``, the egress buffer ``buffer_pkts`` (set at bring-up:
one fabric per buffer size), the per-route minimum RTO ``rto_min_ms`` (200,
the Linux default, vs 10; set on every endpoint before each run) and
``admission`` (none vs at most W=4 stripes outstanding at the client, as
3FS's request-to-send). Each seed changes the source ports (the ECMP paths).

The stripe scales with the emulated link rate (DESIGN.md section 3):
``64 KiB * host_mbps / 100`` (at least one segment), so a round lasts as
long, in seconds, as a 64 KiB stripe at 100 Mbit/s. Only the client's link
is busy, so the fabric runs at 12 Mbit/s per host (``DEFAULT_HOST_MBPS``),
where a stripe is 6 segments and a round's first flights overflow a
32-packet buffer from 6 senders on.

Published anchor (DESIGN.md, 64 KB blocks, 32-packet buffer, 200 ms RTO,
100 Mbit/s): 92 -> 42 -> 44 -> 21 -> 25 -> 29 Mbit/s at 1/2/4/8/12/16
senders; a per-route rto_min of 1 ms (the kernel's ~8 ms floor) recovered 8
senders to 83 Mbit/s.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import networkx as nx

import topologies
from fabric.analysis import plotstyle
from fabric.analysis.report import metric_rows, summarize
from fabric.emulation.traffic import set_rto_min
from fabric.experiment import Experiment, Measured, Mode, RunContext, RunData, Runner, Scheduled
from fabric.experiment.checks import run_checks
from fabric.experiment.measures import mean_or_none, truthy
from fabric.model import graph as fg
from fabric.traffic import metrics
from fabric.traffic.model import Transfer, TransportSpec
from fabric.traffic.patterns import PatternSpec, make_transfers
from fabric.traffic.storage import incast_rounds

NAME = "incast"
QUESTION = ("When does a striped read collapse under incast, and do a small minimum RTO or "
            "request admission recover it?")
DEFAULT_TOPO = "leaf-spine,leaves=5,hosts_per_leaf=4"  # 20 hosts: 16 senders + client fit
BASE_STRIPE_BYTES = 64 * 1024  # at 100 Mbit/s (DESIGN.md's measurement)
MIN_STRIPE_BYTES = 1448  # one full TCP segment
DEFAULT_RTO_MS = 200  # Linux's TCP_RTO_MIN
ANCHOR_BUFFER_PKTS = 32  # the buffer of the published curve
# Only the client's link is busy (the senders share its rate), so the
# capacity check sizes the load from one link, not the whole fabric...
BUSY_LINKS = 1
# ...but each round starts with every sender's first flight at once: OVS
# sees senders x the host rate for a moment. With 16 senders the mean input
# delay reached 0.86 ms at 20 Mbit/s (threshold 1 ms) and 0.84 ms at 15.
DEFAULT_HOST_MBPS = 12.0
SEGMENT_BYTES = 1448
INITIAL_WINDOW = 10  # segments a new (or idle-restarted) TCP connection sends at once
IDLE_BYTES = 1_000_000  # what the runner's idle-path check sends

# Time budget model: ~3 s bring-up, ~2.5 s runner overhead per traffic run, ~2.5 s
# teardown (DESIGN.md section 3; not re-measured for these fabrics).
BRINGUP_S = 3.0
TEARDOWN_S = 2.5
RUN_OVERHEAD_S = 2.5  # agents' start lead, monitors, reports
RTO_SET_S = 0.2  # ip route change on every endpoint
RTT_S = 0.005  # request + first byte, per round
QUICK_BUDGET_S = 120.0


@dataclass(frozen=True)
class Grid(Mode):
    """The parameter grid of one mode, and its default number of seeds."""

    senders: tuple[int, ...]
    buffers: tuple[int, ...]
    rtos: tuple[int, ...]
    admissions: tuple[int | None, ...]
    rounds: int


# The OVS input-delay check averages over a run: 5-round runs put it at 0.3-0.9 ms (one
# CI run in several crossed 1 ms), 15 rounds at 0.2-0.6 ms, as the full runs.
QUICK = Grid(seeds=1, senders=(1, 4, 8, 16), buffers=(32,), rtos=(200, 10),
             admissions=(None, 4), rounds=15)
FULL = Grid(seeds=3, senders=(1, 2, 4, 8, 12, 16), buffers=(16, 32, 64), rtos=(200, 10),
            admissions=(None, 4), rounds=20)


@dataclass(frozen=True)
class RunConfig:
    """One traffic run."""

    senders: int
    buffer_pkts: int
    rto_min_ms: int
    admission: int | None
    seed: int


def host_rate(host_mbps: float | None) -> float:
    """The host rate a bring-up will use: the requested one or the experiment's default."""
    return host_mbps or DEFAULT_HOST_MBPS


def run_configs(grid: Grid, seeds: Sequence[int]) -> list[RunConfig]:
    """Every run of ``grid``, grouped by buffer (one bring-up each), then RTO."""
    return [RunConfig(s, b, rto, adm, seed) for b in grid.buffers for rto in grid.rtos
            for adm in grid.admissions for s in grid.senders for seed in seeds]


def stripe_bytes(host_mbps: float) -> int:
    """Bytes per stripe: 64 KiB at 100 Mbit/s, scaled with the link rate (>= 1 segment)."""
    if not host_mbps > 0:
        raise ValueError(f"host_mbps must be > 0, got {host_mbps}")
    return max(MIN_STRIPE_BYTES, int(BASE_STRIPE_BYTES * host_mbps / 100))


def burst_pkts(senders: int, stripe: int) -> int:
    """Packets that reach the client's link at once when a round starts.

    Each sender's first flight is its stripe or its initial window, whichever
    is smaller; overflow (and collapse with a 200 ms RTO) is expected once
    this exceeds the buffer.
    """
    return senders * min(math.ceil(stripe / SEGMENT_BYTES), INITIAL_WINDOW)


def pattern_spec(senders: int, stripe: int, rounds: int, admission: int | None) -> PatternSpec:
    """The striped read of one run: a block of ``stripe * senders`` bytes per round."""
    return PatternSpec("striped-read", size_bytes=stripe * senders, clients=1,
                       servers=senders, rounds=rounds, admission=admission)


def incast_transfers(graph: nx.Graph, spec: PatternSpec) -> tuple[list[Transfer], str, list[str]]:
    """The striped-read schedule of one run: (transfers, client, servers).

    The same schedule as ``fabric traffic --pattern striped-read`` (storage
    class, DSCP 10): the client is the first compute endpoint and the
    servers are taken from the far end of the fabric.
    """
    transfers, participants = make_transfers(graph, spec)
    return transfers, participants[0], participants[1:]


def estimate_s(configs: Sequence[RunConfig], host_mbps: float, rounds: int) -> float:
    """Pessimistic estimate of a run's wall time: bring-ups, idle checks, traffic runs.

    Each run pays the runner's overhead, setting the RTO, and per round the
    block at line rate plus a round trip plus (pessimistically) one minimum
    RTO whenever more than one sender takes part.
    """
    stripe = stripe_bytes(host_mbps)
    bringups = len({c.buffer_pkts for c in configs})
    total = bringups * (BRINGUP_S + TEARDOWN_S + RUN_OVERHEAD_S
                        + IDLE_BYTES * 8 / (host_mbps * 1e6))
    for c in configs:
        block_s = stripe * c.senders * 8 / (host_mbps * 1e6)
        rto_s = c.rto_min_ms / 1e3 if c.senders > 1 else 0.0
        total += RUN_OVERHEAD_S + RTO_SET_S + rounds * (block_s + RTT_S + rto_s)
    return total


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def run_keys(cfg: RunConfig) -> dict[str, Any]:
    """The fields that name one run in runs.csv and rounds.csv."""
    return {"senders": cfg.senders, "buffer_pkts": cfg.buffer_pkts,
            "rto_min_ms": cfg.rto_min_ms, "admission": cfg.admission or 0, "seed": cfg.seed}


def measure(cfg: RunConfig, spec: PatternSpec, result: Any, client: str, servers: list[str],
            host_mbps: float, report: dict[str, Any]) -> tuple[dict, list[dict]]:
    """The runs.csv row and the rounds.csv rows of one traffic run.

    Headline figures come from :func:`fabric.analysis.report.summarize`:
    ``goodput_frac`` is the mean per-round goodput (block bits over the
    round's duration) over the host rate. It is None, and the row invalid,
    when any transfer did not complete (a failed run is never averaged away);
    its rounds that did complete keep their durations in rounds.csv.
    """
    complete = bool(result.complete and not result.errors)
    # summarize needs every transfer started: only a complete run is summarised
    summary = summarize(result, spec, [client, *servers], host_mbps) if complete else {}
    started = [r for r in metric_rows(result) if r["start"] is not None]
    times = metrics.round_times(started, incast_rounds(result.plan.transfers), spec.size_bytes)
    counters = {"TCPTimeouts": 0, "RetransSegs": 0}
    for agent in result.agents.values():
        for key in counters:
            counters[key] += int(agent.get("netstat", {}).get(key, 0))
    stripe = spec.size_bytes // cfg.senders
    keys = run_keys(cfg)
    row = {**keys, "host_mbps": host_mbps, "stripe_bytes": stripe,
           "burst_pkts": burst_pkts(cfg.senders, stripe), "rounds": spec.rounds,
           "goodput_frac": _rounded(summary.get("goodput_frac"), 4),
           "round_p50_ms": _rounded(summary.get("round_p50_ms"), 3),
           "round_p99_ms": _rounded(summary.get("round_p99_ms"), 3),
           "timeouts": counters["TCPTimeouts"], "retransmits": counters["RetransSegs"],
           "drops": int(result.ingress_drops.get(client, 0)),
           "complete": complete, "valid": bool(report["valid"] and complete),
           **run_checks(report)}
    round_rows = [{**keys, "round": k,
                   "duration_ms": _rounded(t.duration_s * 1e3, 3) if t.duration_s else None,
                   "goodput_frac": (round(t.goodput_mbps / host_mbps, 4)
                                    if t.goodput_mbps else None)}
                  for k, t in times.items()]
    return row, round_rows


def notes_for(host_mbps: float, stripe: int, grid: Grid) -> list[str]:
    """Where the collapse should start at this rate and buffer, and the anchor."""
    pkts = math.ceil(stripe / SEGMENT_BYTES)
    first = min(grid.buffers)
    collapse = next((n for n in range(1, 65) if burst_pkts(n, stripe) > first), None)
    where = f"from {collapse} senders on" if collapse else "at no fan-in up to 64"
    return [
        f"stripe {stripe} B ({pkts} segments) at {host_mbps:g} Mbit/s; a round's first flight "
        f"is senders x min(stripe, initial window {INITIAL_WINDOW}) segments: it overflows a "
        f"{first}-packet buffer {where}, where a 200 ms RTO should collapse goodput (a lost "
        f"tail costs a whole RTO); rto_min 10 ms or admission W=4 should recover it",
        "anchor (DESIGN.md, 100 Mbit/s, 32-packet buffer, 200 ms RTO): 92 -> 42 -> 44 -> 21 "
        "-> 25 -> 29 Mbit/s at 1/2/4/8/12/16 senders; rto_min 1 ms (rounded up to the "
        "kernel's ~8 ms floor at HZ=250) recovered 8 senders to 83 Mbit/s",
    ]


# --- figures (no root: read the run directory only) ---------------------------


def _num(value: Any) -> float | None:
    return None if value in (None, "") else float(value)


def _variants(runs: list[dict]) -> list[tuple[int, int]]:
    return sorted({(int(r["rto_min_ms"]), int(r["admission"])) for r in runs},
                  key=lambda v: (-v[0], v[1]))


def _style(variants: list[tuple[int, int]], variant: tuple[int, int]) -> dict[str, Any]:
    rto, admission = variant
    return {**plotstyle.series_style("", variants.index(variant)),
            "ls": "--" if admission else "-",
            "label": f"rto_min {rto} ms, " + (f"admission W={admission}" if admission
                                                else "no admission")}


def _by_senders(runs: list[dict], buffer_pkts: int, variant: tuple[int, int],
                field: str) -> tuple[list[int], list[float], list[float], list[float]]:
    """Senders and the mean, min and max of ``field`` over seeds (missing values skipped)."""
    values: dict[int, list[float]] = {}
    for r in runs:
        if (int(r["buffer_pkts"]) == buffer_pkts
                and (int(r["rto_min_ms"]), int(r["admission"])) == variant):
            v = _num(r[field])
            if v is not None:
                values.setdefault(int(r["senders"]), []).append(v)
    xs = sorted(values)
    return (xs, [statistics.fmean(values[x]) for x in xs], [min(values[x]) for x in xs],
            [max(values[x]) for x in xs])


def _sweep_figure(plt: Any, runs: list[dict], field: str, ylabel: str,
                  log: bool = False) -> tuple[Any, Any]:
    buffers = sorted({int(r["buffer_pkts"]) for r in runs})
    variants = _variants(runs)
    fig, axes = plt.subplots(1, len(buffers), figsize=(3.3 * len(buffers), 2.6),
                             squeeze=False, sharey=True)
    for ax, buffer_pkts in zip(axes[0], buffers):
        for variant in variants:
            xs, mean, lo, hi = _by_senders(runs, buffer_pkts, variant, field)
            if not xs:
                continue
            ax.errorbar(xs, mean, yerr=[[m - a for m, a in zip(mean, lo)],
                                        [b - m for m, b in zip(mean, hi)]],
                        capsize=2, ms=3, **_style(variants, variant))
        ax.set_xticks(sorted({int(r["senders"]) for r in runs}))
        ax.set_xlabel("senders (fan-in)")
        ax.set_title(f"buffer {buffer_pkts} packets")
        if log:
            ax.set_yscale("symlog" if field == "timeouts" else "log")
    axes[0][0].set_ylabel(ylabel)
    if axes[0][0].get_legend_handles_labels()[0]:
        axes[0][0].legend(loc="best", fontsize=6)
    return fig, axes


def _draw_anchor(ax: Any, anchors: dict[str, Any]) -> None:
    """The published curve (Mbit/s at 100 Mbit/s) as a fraction of line rate."""
    curve = anchors["rto_200ms_mbps_at_100"]
    xs = sorted(int(k) for k in curve)
    handles = ax.plot(xs, [curve[str(x)] / 100 for x in xs], ls=":", marker="x", ms=4,
                      color="grey", label="anchor, rto_min 200 ms")
    handles += ax.plot([8], [anchors["rto_min_1ms_8_senders_mbps_at_100"] / 100], ls="none",
                       marker="+", ms=6, color="black", label="anchor, rto_min 1 ms")
    ax.legend(handles=handles, loc="center right", fontsize=6)


def goodput_figure(data: RunData) -> Any:
    """Goodput against senders, per buffer, with the published anchor on its buffer."""
    fig, axes = _sweep_figure(data.plt, data.runs, "goodput_frac", "goodput / line rate")
    buffers = sorted({int(r["buffer_pkts"]) for r in data.runs})
    for ax, buffer_pkts in zip(axes[0], buffers):
        ax.set_ylim(0, 1.05)
        if buffer_pkts == ANCHOR_BUFFER_PKTS and "anchors" in data.summary:
            _draw_anchor(ax, data.summary["anchors"])
    return fig


def round_p99_figure(data: RunData) -> Any:
    """The 99th percentile of the round time against senders."""
    return _sweep_figure(data.plt, data.runs, "round_p99_ms", "p99 round time (ms)",
                         log=True)[0]


def timeouts_figure(data: RunData) -> Any:
    """TCP timeouts per run against senders."""
    return _sweep_figure(data.plt, data.runs, "timeouts", "TCP timeouts per run", log=True)[0]


# --- the experiment ------------------------------------------------------------

ANCHORS = {"rto_200ms_mbps_at_100": {"1": 92, "2": 42, "4": 44, "8": 21, "12": 25, "16": 29},
           "rto_min_1ms_8_senders_mbps_at_100": 83,
           "source": "DESIGN.md section 3, 64 KB blocks, 32-packet buffer, 100 Mbit/s"}


class Incast(Experiment):
    """A striped read's goodput against its fan-in, per buffer, minimum RTO and
    admission."""

    name = NAME
    question = QUESTION
    default_topology = DEFAULT_TOPO
    modes = {"quick": QUICK, "full": FULL}
    anchors = ANCHORS

    def check(self, ctx: RunContext) -> None:
        """Refuse a topology without a client and enough servers for the largest fan-in."""
        grid = self.mode(ctx)
        incast_transfers(self.graph(ctx),
                         pattern_spec(max(grid.senders), 1, grid.rounds, None))

    def run_count(self, ctx: RunContext) -> int:
        return len(run_configs(self.mode(ctx), self.seeds(ctx)))

    def estimate_s(self, ctx: RunContext) -> float:
        grid = self.mode(ctx)
        return estimate_s(run_configs(grid, self.seeds(ctx)), host_rate(ctx.host_mbps),
                          grid.rounds)

    def measure(self, ctx: RunContext, runner: Runner) -> Measured:
        """One bring-up per buffer size; every RTO x admission x senders x seed on it."""
        topo = self.topologies(ctx)[0]
        graph = topologies.build(topo)
        grid = self.mode(ctx)
        configs = run_configs(grid, self.seeds(ctx))
        rates = set()
        for buffer_pkts in grid.buffers:
            with runner.bring_up(graph, host_mbps=host_rate(ctx.host_mbps),
                                 queue_pkts=buffer_pkts, busy_links=BUSY_LINKS) as emu:
                host_mbps = emu.report.rate_plan.host_mbps
                rates.add(host_mbps)
                mine = [c for c in configs if c.buffer_pkts == buffer_pkts]
                runner.run(emu, _schedules(graph, mine, grid.rounds, host_mbps),
                           TransportSpec("tcp"), f"q{buffer_pkts}", _row_function(runner),
                           deadline_s=30.0 if ctx.quick else 60.0)
                set_rto_min(emu, fg.endpoints(graph), DEFAULT_RTO_MS)
        host_mbps = min(rates)
        stripe = stripe_bytes(host_mbps)
        return Measured(
            {"topology": topo, "senders": grid.senders, "buffers_pkts": grid.buffers,
             "rto_min_ms": grid.rtos, "admission": [a or 0 for a in grid.admissions],
             "rounds": grid.rounds, "transport": "tcp", "tcp_cc": ctx.tcp_cc,
             "host_mbps": host_mbps, "stripe_bytes": stripe,
             "estimated_s": round(self.estimate_s(ctx), 1)},
            {"topology": topo, "host_mbps": host_mbps, "stripe_bytes": stripe,
             "rounds": grid.rounds})

    def table(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One row per (senders, buffer, rto, admission): means over seeds.

        ``goodput_frac`` averages the seeds that completed; ``valid`` is true
        only when every seed's run was valid.
        """
        groups: dict[tuple, list[dict]] = {}
        for row in rows:
            key = (row["buffer_pkts"], row["rto_min_ms"], row["admission"], row["senders"])
            groups.setdefault(key, []).append(row)
        table = []
        for (buffer_pkts, rto, admission, senders), group in sorted(
                groups.items(), key=lambda item: (item[0][0], -item[0][1], item[0][2], item[0][3])):
            table.append({"senders": senders, "buffer_pkts": buffer_pkts, "rto_min_ms": rto,
                          "admission": admission, "seeds": len(group),
                          "goodput_frac": mean_or_none([r["goodput_frac"] for r in group]),
                          "round_p50_ms": mean_or_none([r["round_p50_ms"] for r in group], 2),
                          "round_p99_ms": mean_or_none([r["round_p99_ms"] for r in group], 2),
                          "timeouts": mean_or_none([r["timeouts"] for r in group], 2),
                          "retransmits": mean_or_none([r["retransmits"] for r in group], 2),
                          "drops": mean_or_none([r["drops"] for r in group], 2),
                          "valid": all(truthy(r["valid"]) for r in group)})
        return table

    def notes(self, ctx: RunContext, rows: list[dict[str, Any]], measured: Measured
              ) -> list[str]:
        return notes_for(measured.summary["host_mbps"], measured.summary["stripe_bytes"],
                         self.mode(ctx))

    def figures(self) -> Mapping[str, Any]:
        return {"goodput": goodput_figure, "round_p99": round_p99_figure,
                "timeouts": timeouts_figure}


def _schedules(graph: nx.Graph, configs: list[RunConfig], rounds: int, host_mbps: float
               ) -> Iterator[Scheduled]:
    """The runs of one bring-up. Every endpoint's minimum RTO is set before every run
    (200 explicitly): nothing is stale."""
    endpoints = fg.endpoints(graph)
    stripe = stripe_bytes(host_mbps)
    for cfg in configs:
        spec = pattern_spec(cfg.senders, stripe, rounds, cfg.admission)
        transfers, client, servers = incast_transfers(graph, spec)
        yield Scheduled(run_keys(cfg), transfers, cfg.seed,
                        (cfg, spec, client, servers, host_mbps),
                        prepare=lambda emu, ms=cfg.rto_min_ms: set_rto_min(emu, endpoints, ms))


def _row_function(runner: Runner) -> Any:
    """The row of a run, its rounds appended to rounds.csv."""
    rounds_csv = runner.table("rounds")

    def row_of(run: Scheduled, result: Any, report: dict[str, Any]) -> dict[str, Any]:
        cfg, spec, client, servers, rate = run.context
        row, rounds = measure(cfg, spec, result, client, servers, rate, report)
        rounds_csv.extend(rounds)
        return row

    return row_of


EXPERIMENT = Incast()
