"""Incast (Fire-Flyer 3FS, Meta storage): when does a striped read collapse, and do a
small minimum RTO or request admission get the goodput back?

One client reads blocks striped over ``senders`` storage servers (one stripe
each per round; a round starts when the previous one is complete). Sweeps:
the fan-in ``senders``, the egress buffer ``buffer_pkts`` (set at bring-up:
one fabric per buffer size), the per-route minimum RTO ``rto_min_ms`` (200,
the Linux default, vs 10; set on every endpoint before each run) and
``admission`` (none vs at most W=4 stripes outstanding at the client, as
3FS's request-to-send). Each seed changes the source ports (the ECMP paths).

Every run also carries victim flows, from hosts on another leaf to hosts on the
client's leaf: they share the incast's links into that leaf but not the client's
port (one each spine's way, as their hashes fall). Lossless rows (link-level flow
control, :mod:`fabric.model.flowcontrol`) drop nothing: the incast pauses the links
into the client's leaf, then the spines' links from the senders' leaves, then the
senders' NICs (a congestion tree), and a victim waits behind those pauses when it
shares the incast's lane, not when it has a lane of its own. ``victim_slowdown`` is
a victim's time over its time alone on the same fabric (the mean of the victims, and
the worst).

The work is in TCP segments (:mod:`fabric.traffic.sizing`): a stripe is
``STRIPE_PACKETS`` segments and a victim ``VICTIM_PACKETS``, so a round's first
flights meet the buffers (in packets) the same way at every rate, and overflow a
32-packet buffer from 6 senders on. Only the client's link is busy, so the fabric
runs at 12 Mbit/s per host (``DEFAULT_HOST_MBPS``), where a round of 6-segment
stripes lasts about as long as the anchor's 64 KiB stripes at 100 Mbit/s
(docs/platform.md, "Incast anchor"). The minimum RTO is the kernel's, a time: at
another ``--host-mbps`` a timeout costs a different number of rounds, so the
goodput after a collapse (not where it starts) moves with the rate.

Published anchor (docs/platform.md, 64 KB blocks, 32-packet buffer, 200 ms RTO,
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
from fabric.experiment.measures import mean_or_none, pause_summary, truthy
from fabric.model import graph as fg
from fabric.model.flowcontrol import FlowControl
from fabric.model.lanes import DSCP_COLLECTIVE, SINGLE_LANE, THREE_LANES
from fabric.traffic import metrics, sizing
from fabric.traffic.model import ScheduleError, Transfer, TransportSpec
from fabric.traffic.patterns import PatternSpec, make_transfers
from fabric.traffic.storage import incast_rounds

NAME = "incast"
QUESTION = ("When does a striped read collapse under incast, and do a small minimum RTO or "
            "request admission recover it?")
# 25 hosts: the client, 16 senders, and beside them a victim flow's ends: one on a leaf
# with no sender (or one), one on the client's leaf
DEFAULT_TOPO = "leaf-spine,leaves=5,hosts_per_leaf=5"
STRIPE_PACKETS = 6  # TCP segments per stripe: ~64 KiB at 100 Mbit/s lasts as long at 12
DEFAULT_RTO_MS = 200  # Linux's TCP_RTO_MIN
ANCHOR_BUFFER_PKTS = 32  # the buffer of the published curve
# Only the client's link and the victims' are busy (the senders share the client's
# rate), so the capacity check sizes the load from them, not the whole fabric...
BUSY_LINKS = 5
# ...but each round starts with every sender's first flight at once: OVS
# sees senders x the host rate for a moment. With 16 senders the mean input
# delay reached 0.86 ms at 20 Mbit/s (threshold 1 ms) and 0.84 ms at 15.
DEFAULT_HOST_MBPS = 12.0
TCP = TransportSpec("tcp")
SEGMENT_BYTES = TCP.payload_bytes
INITIAL_WINDOW = 10  # segments a new (or idle-restarted) TCP connection sends at once
IDLE_BYTES = 1_000_000  # what the runner's idle-path check sends
VICTIM_TAG = "victim"

# Time budget model: ~3 s bring-up, ~2.5 s runner overhead per traffic run, ~2.5 s
# teardown (docs/platform.md, "Time budget"; not re-measured for these fabrics).
BRINGUP_S = 3.0
TEARDOWN_S = 2.5
RUN_OVERHEAD_S = 2.5  # agents' start lead, monitors, reports
RTO_SET_S = 0.2  # ip route change on every endpoint
RTT_S = 0.005  # request + first byte, per round
QUICK_BUDGET_S = 150.0
# Lossy Ethernet, and a lossless fabric (link-level flow control): the incast then drops
# nothing but pauses its upstream links; the victim flow, which shares an upstream link
# with the incast but not its hot port, waits behind those pauses when it shares the
# incast's lane ("shared") and not in a lane of its own ("separate").
FABRICS = {"lossy": None, "lossless": FlowControl()}
LANE_SETTINGS = {"shared": SINGLE_LANE, "separate": THREE_LANES}
VICTIM_DSCP = DSCP_COLLECTIVE  # the incast is storage (DSCP 10)
VICTIM_PACKETS = 1000  # each victim's TCP segments (~1 s at 12 Mbit/s)
VICTIMS = 4     # victim flows: as many as paths between two leaves of the default fabric


@dataclass(frozen=True)
class Grid(Mode):
    """The parameter grid of one mode, and its default number of seeds."""

    senders: tuple[int, ...]
    buffers: tuple[int, ...]
    rtos: tuple[int, ...]
    admissions: tuple[int | None, ...]
    rounds: int
    lossless_senders: tuple[int, ...]  # the fan-ins of the lossless rows


# The OVS input-delay check averages over a run: 5-round runs put it at 0.3-0.9 ms (one
# CI run in several crossed 1 ms), 15 rounds at 0.2-0.6 ms, as the full runs.
QUICK = Grid(seeds=1, senders=(1, 4, 8, 16), buffers=(32,), rtos=(200, 10),
             admissions=(None, 4), rounds=15, lossless_senders=(4, 16))
FULL = Grid(seeds=3, senders=(1, 2, 4, 8, 12, 16), buffers=(16, 32, 64), rtos=(200, 10),
            admissions=(None, 4), rounds=20, lossless_senders=(2, 4, 8, 16))


@dataclass(frozen=True)
class RunConfig:
    """One traffic run; ``senders`` 0 is the victim flow alone."""

    senders: int
    buffer_pkts: int
    rto_min_ms: int
    admission: int | None
    seed: int
    fabric: str = "lossy"
    lanes: str = "shared"

    @property
    def bring_up(self) -> tuple[str, str, int]:
        """What its fabric is brought up with: fabric, lanes, buffer."""
        return self.fabric, self.lanes, self.buffer_pkts


def host_rate(host_mbps: float | None) -> float:
    """The host rate a bring-up will use: the requested one or the experiment's default."""
    return host_mbps or DEFAULT_HOST_MBPS


def run_configs(grid: Grid, seeds: Sequence[int]) -> list[RunConfig]:
    """Every run of ``grid``, grouped by bring-up (each starting with the victim alone):
    lossy per buffer and RTO; lossless on the anchor's buffer, its fan-ins with and
    without admission in one shared lane, its largest fan-in with the victim in a lane of
    its own (no RTO to sweep: nothing is lost)."""
    def alone(fabric: str, lanes: str, buffer: int) -> list[RunConfig]:
        return [RunConfig(0, buffer, DEFAULT_RTO_MS, None, seed, fabric, lanes)
                for seed in seeds]

    out = []
    for b in grid.buffers:
        out += alone("lossy", "shared", b) + [
            RunConfig(s, b, rto, adm, seed) for rto in grid.rtos for adm in grid.admissions
            for s in grid.senders for seed in seeds]
    b = ANCHOR_BUFFER_PKTS if ANCHOR_BUFFER_PKTS in grid.buffers else grid.buffers[0]
    out += alone("lossless", "shared", b) + [
        RunConfig(s, b, DEFAULT_RTO_MS, adm, seed, "lossless", "shared")
        for adm in grid.admissions for s in grid.lossless_senders for seed in seeds]
    out += alone("lossless", "separate", b) + [
        RunConfig(max(grid.senders), b, DEFAULT_RTO_MS, None, seed, "lossless", "separate")
        for seed in seeds]
    return out


def stripe_bytes() -> int:
    """Bytes per stripe: ``STRIPE_PACKETS`` full TCP segments, at every rate."""
    return sizing.bytes_of(STRIPE_PACKETS, TCP)


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


def victim_pairs(graph: nx.Graph, grid: Grid) -> list[tuple[str, str]]:
    """The victim flows' ends (up to :data:`VICTIMS`): hosts on other leaves than the
    client's to hosts on the client's leaf, none of them the client or a sender of the
    largest fan-in, so they share the incast's links into the client's leaf but not
    the client's port.

    Raises
    ------
    ScheduleError
        When the fabric has no such pair.
    """
    spec = pattern_spec(max(grid.senders + grid.lossless_senders), 1, grid.rounds, None)
    _, client, servers = incast_transfers(graph, spec)
    leaf = next(iter(graph.neighbors(client)))
    free = [h for h in fg.nodes_with_role(graph, "host") if h != client and h not in servers]
    dsts = [h for h in free if leaf in graph.neighbors(h)]
    srcs = [h for h in free if leaf not in graph.neighbors(h)]
    if not srcs or not dsts:
        raise ScheduleError(f"{NAME}: no victim flow beside the incast (needs a host outside "
                            f"the incast on the client's leaf and one on another leaf)")
    return list(zip(srcs, dsts))[:VICTIMS]


def victim_transfers(graph: nx.Graph, grid: Grid) -> list[Transfer]:
    """The victims: ``VICTIM_PACKETS`` segments each, in the collective class."""
    return [Transfer(f"{VICTIM_TAG}/{i}", src, dst, sizing.bytes_of(VICTIM_PACKETS, TCP),
                     dscp=VICTIM_DSCP, tag=VICTIM_TAG)
            for i, (src, dst) in enumerate(victim_pairs(graph, grid))]


def estimate_s(configs: Sequence[RunConfig], host_mbps: float, rounds: int) -> float:
    """Pessimistic estimate of a run's wall time: bring-ups, idle checks, traffic runs.

    Each run pays the runner's overhead, setting the RTO, and per round the
    block at line rate plus a round trip plus (pessimistically) one minimum
    RTO whenever more than one sender takes part.
    """
    stripe = stripe_bytes()
    victim_s = sizing.seconds_of(VICTIM_PACKETS, TCP, host_mbps)
    bringups = len({c.bring_up for c in configs})
    total = bringups * (BRINGUP_S + TEARDOWN_S + RUN_OVERHEAD_S
                        + IDLE_BYTES * 8 / (host_mbps * 1e6))
    for c in configs:
        block_s = stripe * c.senders * 8 / (host_mbps * 1e6)
        rto_s = c.rto_min_ms / 1e3 if c.senders > 1 and c.fabric == "lossy" else 0.0
        total += RUN_OVERHEAD_S + RTO_SET_S + max(victim_s,
                                                  rounds * (block_s + RTT_S + rto_s))
    return total


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def run_keys(cfg: RunConfig) -> dict[str, Any]:
    """The fields that name one run in runs.csv and rounds.csv."""
    return {"fabric": cfg.fabric, "lanes": cfg.lanes, "senders": cfg.senders,
            "buffer_pkts": cfg.buffer_pkts, "rto_min_ms": cfg.rto_min_ms,
            "admission": cfg.admission or 0, "seed": cfg.seed}


def tree_reach(graph: nx.Graph, client: str, servers: list[str],
               flow_control: list[dict[str, Any]]) -> dict[str, float]:
    """How far the pauses reached, hop by hop from the client's port: the largest share
    of the run a link was paused, into the client's leaf (hop 1), into the other switches
    (hop 2) and on the senders' own NICs (hop 3; the victims' NICs are not counted)."""
    leaf = next(iter(graph.neighbors(client)))
    reach = {"pause_hop1": 0.0, "pause_hop2": 0.0, "pause_hop3": 0.0}
    for row in flow_control:
        src, dst = row["link"].split(">")
        if fg.is_endpoint(graph, src) and src not in servers:
            continue
        hop = 3 if fg.is_endpoint(graph, src) else 1 if dst == leaf else 2
        key = f"pause_hop{hop}"
        reach[key] = max(reach[key], row["pause_share"] or 0.0)
    return reach


def measure(cfg: RunConfig, spec: PatternSpec, result: Any, client: str, servers: list[str],
            host_mbps: float, report: dict[str, Any], graph: nx.Graph
            ) -> tuple[dict, list[dict]]:
    """The runs.csv row and the rounds.csv rows of one traffic run.

    Headline figures come from :func:`fabric.analysis.report.summarize`:
    ``goodput_frac`` is the mean per-round goodput (block bits over the
    round's duration) over the host rate. It is None, and the row invalid,
    when any transfer did not complete (a failed run is never averaged away);
    its rounds that did complete keep their durations in rounds.csv.
    """
    complete = bool(result.complete and not result.errors)
    # summarize needs every transfer started: only a complete run is summarised
    summary = (summarize(result, spec, [client, *servers], host_mbps)
               if complete and cfg.senders else {})
    started = [r for r in metric_rows(result) if r["start"] is not None]
    times = (metrics.round_times(started, incast_rounds(result.plan.transfers),
                                 spec.size_bytes) if cfg.senders else {})
    counters = {"TCPTimeouts": 0, "RetransSegs": 0}
    for agent in result.agents.values():
        for key in counters:
            counters[key] += int(agent.get("netstat", {}).get(key, 0))
    stripe = spec.size_bytes // max(cfg.senders, 1)
    keys = run_keys(cfg)
    victims = [r["fct_s"] for r in result.transfer_rows() if r.get("tag") == VICTIM_TAG]
    lossless = cfg.fabric == "lossless"
    row = {**keys, "host_mbps": host_mbps, "stripe_bytes": stripe,
           "burst_pkts": burst_pkts(cfg.senders, stripe), "rounds": spec.rounds,
           "victim_fct_s": [_rounded(fct, 4) for fct in victims], "victim_slowdown": None,
           "victim_slowdown_max": None,
           **pause_summary(result),
           **(tree_reach(graph, client, servers, result.flow_control) if lossless else
              dict.fromkeys(("pause_hop1", "pause_hop2", "pause_hop3"))),
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
        f"lossless rows: link-level flow control on the {ANCHOR_BUFFER_PKTS}-packet buffer; "
        f"nothing is dropped, the incast pauses its upstream links (pause_hop1: into the "
        f"client's leaf, 2: into the spines, 3: the senders' NICs); the {VICTIMS} victim "
        f"flows ({VICTIM_PACKETS:,} segments each, from another leaf to the client's) share "
        f"those links but not the client's port: victim_slowdown is a victim's time over "
        f"its time alone (mean, and the worst), in the incast's lane (shared) and in its "
        f"own (separate)",
        "anchor (docs/platform.md, 100 Mbit/s, 32-packet buffer, 200 ms RTO): 92 -> 42 -> 44 -> 21 "
        "-> 25 -> 29 Mbit/s at 1/2/4/8/12/16 senders; rto_min 1 ms (rounded up to the "
        "kernel's ~8 ms floor at HZ=250) recovered 8 senders to 83 Mbit/s",
    ]


# --- figures (no root: read the run directory only) ---------------------------


def _num(value: Any) -> float | None:
    return None if value in (None, "") else float(value)


Variant = tuple[str, str, int, int]  # fabric, lanes, rto_min_ms, admission


def _variant(row: dict) -> Variant:
    # rows written before flow control were lossy, with one lane
    return (row.get("fabric") or "lossy", row.get("lanes") or "shared",
            int(row["rto_min_ms"]), int(row["admission"]))


def _variants(runs: list[dict]) -> list[Variant]:
    return sorted({_variant(r) for r in runs if int(r["senders"])},
                  key=lambda v: (list(FABRICS).index(v[0]), v[1], -v[2], v[3]))


def _style(variants: list[Variant], variant: Variant) -> dict[str, Any]:
    fabric, lanes, rto, admission = variant
    what = (f"rto_min {rto} ms" if fabric == "lossy"
            else "lossless" + (", victim's own lane" if lanes == "separate" else ""))
    return {**plotstyle.series_style("", variants.index(variant)),
            "ls": "--" if admission else "-",
            "label": f"{what}, " + (f"admission W={admission}" if admission
                                    else "no admission")}


def _by_senders(runs: list[dict], buffer_pkts: int, variant: Variant,
                field: str) -> tuple[list[int], list[float], list[float], list[float]]:
    """Senders and the mean, min and max of ``field`` over seeds (missing values skipped)."""
    values: dict[int, list[float]] = {}
    for r in runs:
        if (int(r["buffer_pkts"]) == buffer_pkts and _variant(r) == variant
                and int(r["senders"])):
            v = _num(r.get(field))
            if v is not None:
                values.setdefault(int(r["senders"]), []).append(v)
    xs = sorted(values)
    return (xs, [statistics.fmean(values[x]) for x in xs], [min(values[x]) for x in xs],
            [max(values[x]) for x in xs])


def _sweep_figure(plt: Any, runs: list[dict], field: str, ylabel: str,
                  log: bool = False, variants: list[Variant] | None = None
                  ) -> tuple[Any, Any]:
    buffers = sorted({int(r["buffer_pkts"]) for r in runs
                      if variants is None or _variant(r) in variants})
    variants = variants or _variants(runs)
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
        ax.set_xticks(sorted({int(r["senders"]) for r in runs if int(r["senders"])}))
        ax.set_xlabel("senders (fan-in)")
        ax.set_title(f"buffer {buffer_pkts} packets")
        if log:
            ax.set_yscale("symlog" if field == "timeouts" else "log")
    axes[0][0].set_ylabel(ylabel)
    # one legend for every panel's series: some variants run on one buffer only
    series: dict[str, Any] = {}
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            series.setdefault(label, handle)
    if series:
        axes[0][0].legend(list(series.values()), list(series), loc="best", fontsize=6)
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


def victim_figure(data: RunData) -> Any:
    """The victim flow's slowdown against senders: lossy, lossless in the incast's lane,
    lossless in its own lane (nothing to draw before flow control)."""
    variants = [v for v in _variants(data.runs) if v[3] == 0 and v[2] == DEFAULT_RTO_MS]
    if not any(v[0] == "lossless" for v in variants):
        return None
    fig, axes = _sweep_figure(data.plt, data.runs, "victim_slowdown",
                              "victim's time / alone", variants=variants)
    for ax in axes[0]:
        ax.axhline(1.0, ls="--", color="grey", lw=1)
        ax.set_ylim(bottom=0)
    return fig


def tree_figure(data: RunData) -> Any:
    """How far a lossless incast's pauses reach: the largest share of the run a link was
    paused, by hops from the client's port (nothing to draw without lossless runs)."""
    rows = [r for r in data.runs if r.get("fabric") == "lossless" and int(r["senders"])
            and r.get("lanes") == "shared" and int(r["admission"]) == 0]
    if not rows:
        return None
    fig, ax = data.plt.subplots(figsize=(3.6, 2.6))
    senders = sorted({int(r["senders"]) for r in rows})
    for i, (hop, what) in enumerate((("pause_hop1", "into the client's leaf"),
                                     ("pause_hop2", "into the spines"),
                                     ("pause_hop3", "senders' NICs"))):
        means = [statistics.fmean(_num(r[hop]) or 0.0 for r in rows if int(r["senders"]) == n)
                 for n in senders]
        ax.plot(senders, means, label=what, **plotstyle.series_style("", i))
    ax.set_xticks(senders)
    ax.set_xlabel("senders (fan-in)")
    ax.set_ylabel("largest pause share of a link")
    ax.set_ylim(0, 1.05)
    ax.legend(loc="best", fontsize=6, title="congestion tree, hop", title_fontsize=6)
    return fig


# --- the experiment ------------------------------------------------------------

ANCHORS = {"rto_200ms_mbps_at_100": {"1": 92, "2": 42, "4": 44, "8": 21, "12": 25, "16": 29},
           "rto_min_1ms_8_senders_mbps_at_100": 83,
           "source": "docs/platform.md, 64 KB blocks, 32-packet buffer, 100 Mbit/s"}


class Incast(Experiment):
    """A striped read's goodput against its fan-in, per buffer, minimum RTO and
    admission."""

    name = NAME
    question = QUESTION
    default_topology = DEFAULT_TOPO
    modes = {"quick": QUICK, "full": FULL}
    sets_flow_control = True  # lossy and lossless rows, each fabric as it says
    anchors = ANCHORS

    def check(self, ctx: RunContext) -> None:
        """Refuse a topology without a client, enough servers for the largest fan-in and
        a victim flow beside them."""
        grid = self.mode(ctx)
        incast_transfers(self.graph(ctx), pattern_spec(max(grid.senders + grid.lossless_senders),
                                                       1, grid.rounds, None))
        victim_pairs(self.graph(ctx), grid)

    def run_count(self, ctx: RunContext) -> int:
        return len(run_configs(self.mode(ctx), self.seeds(ctx)))

    def estimate_s(self, ctx: RunContext) -> float:
        grid = self.mode(ctx)
        return estimate_s(run_configs(grid, self.seeds(ctx)), host_rate(ctx.host_mbps),
                          grid.rounds)

    def measure(self, ctx: RunContext, runner: Runner) -> Measured:
        """One bring-up per fabric, lanes and buffer; on it the victim alone, then every
        RTO x admission x senders x seed."""
        topo = self.topologies(ctx)[0]
        graph = topologies.build(topo)
        grid = self.mode(ctx)
        configs = run_configs(grid, self.seeds(ctx))
        rates = set()
        for fabric, lanes, buffer_pkts in dict.fromkeys(c.bring_up for c in configs):
            with runner.bring_up(graph, host_mbps=host_rate(ctx.host_mbps),
                                 queue_pkts=buffer_pkts, busy_links=BUSY_LINKS,
                                 flow_control=FABRICS[fabric],
                                 lanes=LANE_SETTINGS[lanes]) as emu:
                host_mbps = emu.report.rate_plan.host_mbps
                rates.add(host_mbps)
                mine = [c for c in configs if c.bring_up == (fabric, lanes, buffer_pkts)]
                runner.run(emu, _schedules(graph, grid, mine, host_mbps), TCP,
                           f"{fabric}-{lanes}-q{buffer_pkts}", _row_function(runner, graph),
                           deadline_s=30.0 if ctx.quick else 60.0)
                set_rto_min(emu, fg.endpoints(graph), DEFAULT_RTO_MS)
        host_mbps = min(rates)
        stripe = stripe_bytes()
        return Measured(
            {"topology": topo, "senders": grid.senders, "buffers_pkts": grid.buffers,
             "fabrics": list(FABRICS), "lossless_senders": grid.lossless_senders,
             "victims": victim_pairs(graph, grid),
             "work": {"stripe_packets": STRIPE_PACKETS, "victim_packets": VICTIM_PACKETS,
                      "payload_bytes": TCP.payload_bytes},
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
            if row["senders"]:  # the victim alone is the slowdowns' baseline
                key = (list(FABRICS).index(row.get("fabric", "lossy")),
                       row.get("lanes", "shared"), row["buffer_pkts"], -row["rto_min_ms"],
                       row["admission"], row["senders"])
                groups.setdefault(key, []).append(row)
        table = []
        for (_, lanes, buffer_pkts, rto, admission, senders), group in sorted(groups.items()):
            table.append({"fabric": group[0].get("fabric", "lossy"), "lanes": lanes,
                          "senders": senders,
                          "buffer_pkts": buffer_pkts, "rto_min_ms": -rto,
                          "admission": admission, "seeds": len(group),
                          "goodput_frac": mean_or_none([r["goodput_frac"] for r in group]),
                          "round_p50_ms": mean_or_none([r["round_p50_ms"] for r in group], 2),
                          "round_p99_ms": mean_or_none([r["round_p99_ms"] for r in group], 2),
                          "timeouts": mean_or_none([r["timeouts"] for r in group], 2),
                          "retransmits": mean_or_none([r["retransmits"] for r in group], 2),
                          "drops": mean_or_none([r["drops"] for r in group], 2),
                          "victim_slowdown": mean_or_none([r.get("victim_slowdown")
                                                           for r in group], 3),
                          "victim_slowdown_max": mean_or_none(
                              [r.get("victim_slowdown_max") for r in group], 3),
                          **{k: mean_or_none([r.get(k) for r in group], 3)
                             for k in ("pause_hop1", "pause_hop2", "pause_hop3")},
                          "valid": all(truthy(r["valid"]) for r in group)})
        return table

    def finish(self, rows: list[dict[str, Any]]) -> None:
        """Each victim's slowdown: its completion time over its time alone on the same
        fabric, lanes and buffer; their mean and the worst. The times go to runs.csv
        joined by "/"."""
        alone = {(r["fabric"], r["lanes"], r["buffer_pkts"]): r["victim_fct_s"]
                 for r in rows if not r["senders"]}
        for r in rows:
            base = alone.get((r["fabric"], r["lanes"], r["buffer_pkts"])) or []
            ratios = [fct / ref for fct, ref in zip(r["victim_fct_s"], base) if fct and ref]
            if ratios and len(ratios) == len(r["victim_fct_s"]):
                r["victim_slowdown"] = round(statistics.fmean(ratios), 4)
                r["victim_slowdown_max"] = round(max(ratios), 4)
        for r in rows:
            r["victim_fct_s"] = "/".join(str(fct) for fct in r["victim_fct_s"])

    def notes(self, ctx: RunContext, rows: list[dict[str, Any]], measured: Measured
              ) -> list[str]:
        return notes_for(measured.summary["host_mbps"], measured.summary["stripe_bytes"],
                         self.mode(ctx))

    def figures(self) -> Mapping[str, Any]:
        return {"goodput": goodput_figure, "round_p99": round_p99_figure,
                "timeouts": timeouts_figure, "victim": victim_figure,
                "congestion_tree": tree_figure}


def _schedules(graph: nx.Graph, grid: Grid, configs: list[RunConfig], host_mbps: float
               ) -> Iterator[Scheduled]:
    """The runs of one bring-up, each with the victim flow (alone when it has no
    sender). Every endpoint's minimum RTO is set before every run (200 explicitly):
    nothing is stale."""
    endpoints = fg.endpoints(graph)
    stripe = stripe_bytes()
    victims = victim_transfers(graph, grid)
    for cfg in configs:
        spec = pattern_spec(max(cfg.senders, 1), stripe, grid.rounds, cfg.admission)
        transfers, client, servers = incast_transfers(graph, spec)
        if not cfg.senders:
            transfers, servers = [], []
        yield Scheduled(run_keys(cfg), transfers + victims, cfg.seed,
                        (cfg, spec, client, servers, host_mbps),
                        prepare=lambda emu, ms=cfg.rto_min_ms: set_rto_min(emu, endpoints, ms))


def _row_function(runner: Runner, graph: nx.Graph) -> Any:
    """The row of a run, its rounds appended to rounds.csv."""
    rounds_csv = runner.table("rounds")

    def row_of(run: Scheduled, result: Any, report: dict[str, Any]) -> dict[str, Any]:
        cfg, spec, client, servers, rate = run.context
        row, rounds = measure(cfg, spec, result, client, servers, rate, report, graph)
        rounds_csv.extend(rounds)
        return row

    return row_of


EXPERIMENT = Incast()
