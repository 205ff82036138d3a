"""Isolation (Fire-Flyer SL/VL): does a separate virtual lane keep a collective at its
baseline speed while storage bursts share its links?

Each iteration is one traffic run of a ring all-reduce over 8 ranks (rail
placement) in the collective class (DSCP 26). In the storage iterations the
same plan also holds storage traffic in the storage class (DSCP 10), started
with the ring: a striped read whose client is a ring rank (the stripes
converge on the link that also brings the rank its ring predecessor's data)
and a checkpoint write from a ring rank on the other leaf (sharing the link
it sends its ring successor's data on), with servers on the hosts outside
the ring, so storage crosses the ring's leaves. Baseline iterations run the
ring alone, in the same bring-up. Lanes: ``shared`` (one FIFO lane for
everything) vs ``separate`` (three lanes: collective 50 %, storage 30 %,
default 20 % of every link, HTB with head-drop leaves). Fabrics: ``lossy``
Ethernet (a full queue drops) vs ``lossless`` (link-level flow control on
every lane, :mod:`fabric.model.flowcontrol`): there storage's incast pauses the
links it congests, and in a shared lane that pause stops the ring's packets
queued behind it (head-of-line blocking across classes), whereas a lane of
its own has its own pause.

``collective_slowdown`` is an iteration's ring time over the median
baseline ring time of the same bring-up.

Published anchor (docs/platform.md, "Head-drop leaves"): with head-drop leaves the
collective class held 59.7-59.9 of its 60 Mbit/s against competing traffic.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import networkx as nx

import topologies
from fabric.analysis import plotstyle
from fabric.emulation.machine_speed import default_host_mbps
from fabric.experiment import Experiment, Measured, Mode, RunContext, RunData, Runner, Scheduled
from fabric.experiment.measures import mean_or_none, pause_summary, span_s, truthy
from fabric.model import graph as fg
from fabric.model.flowcontrol import FlowControl
from fabric.model.lanes import DSCP_COLLECTIVE, DSCP_STORAGE, SINGLE_LANE, THREE_LANES, LaneConfig
from fabric.traffic import collectives, metrics, sizing, storage
from fabric.traffic.model import ScheduleError, Transfer, TransportSpec
from fabric.traffic.placement import rank_hosts

NAME = "isolation"
QUESTION = ("Does a separate virtual lane keep a ring all-reduce at its baseline speed while "
            "storage bursts share its links?")
DEFAULT_TOPO = "rail-clos"
LANES: dict[str, LaneConfig] = {"shared": SINGLE_LANE, "separate": THREE_LANES}
# lossy Ethernet, and a lossless fabric (PFC on every lane): storage's incast then pauses
# links instead of dropping, and in a shared lane the pause stops the ring too
FABRICS: dict[str, FlowControl | None] = {"lossy": None, "lossless": FlowControl()}
RING_LANE = 0  # the ring's lane in both settings: the one lane, or "collective" first
PHASES = ("baseline", "storage")
RING_RANKS = 8
# In TCP segments, the same at every rate (fabric.traffic.sizing)
RING_PACKETS = 450  # a baseline iteration at line rate (busbw = host rate), per rank
STORAGE_PACKETS = 330  # each storage endpoint's bytes
TCP = TransportSpec("tcp")
# The striped read in one burst: in 4 rounds its stripes (18 segments each) never filled
# a lossless switch's buffer to Xoff, so the lossless rows paused nothing
READ_ROUNDS = 1
MAX_SERVERS = 4  # storage servers per operation
RING_TAG, READ_TAG, WRITE_TAG = "ring", "read", "checkpoint"
IDLE_BYTES = 1_000_000

# Time budget model: as experiments.incast (docs/platform.md, "Time budget").
BRINGUP_S = 3.0
TEARDOWN_S = 2.5
RUN_OVERHEAD_S = 2.5
STORAGE_SLOWDOWN_BUDGET = 2.5  # a storage iteration may take this many baselines
QUICK_BUDGET_S = 120.0


@dataclass(frozen=True)
class IsolationMode(Mode):
    """Iterations per phase and seed, and the default number of seeds."""

    iterations: int


QUICK = IsolationMode(seeds=1, iterations=2)
FULL = IsolationMode(seeds=3, iterations=10)


@dataclass(frozen=True)
class Roles:
    """Who plays what in an iteration."""

    ranks: tuple[str, ...]
    read_client: str
    read_servers: tuple[str, ...]
    writer: str
    write_targets: tuple[str, ...]

    @property
    def storage_endpoints_on_ring(self) -> int:
        """Ring-side links storage loads: the read client's downlink, the writer's uplink."""
        return 2


def roles(graph: nx.Graph, ranks: int = RING_RANKS) -> Roles:
    """Ring ranks (rail placement) and storage endpoints that share the ring's links.

    The read client is rank 1 and the writer rank ``n/2 + 1`` (on rail-clos
    they sit under the two leaves of the ring's rail); storage servers are
    the fabric's storage nodes, then the compute hosts outside the ring,
    split between the read and the write.

    Raises
    ------
    ScheduleError
        When the fabric has too few endpoints.
    """
    hosts = fg.nodes_with_role(graph, "host")
    if len(hosts) < ranks + 2:
        raise ScheduleError(f"{NAME} needs {ranks} ring ranks and 2 storage servers; the "
                            f"fabric has {len(hosts)} compute endpoints")
    ring = rank_hosts(graph, ranks, "rail")
    others = fg.nodes_with_role(graph, "storage") + [h for h in rank_hosts(graph)
                                                     if h not in ring]
    half = max(1, min(MAX_SERVERS, len(others) // 2))
    return Roles(tuple(ring), ring[1], tuple(others[:half]), ring[ranks // 2 + 1],
                 tuple(others[half:half * 2]))


def ring_bytes(ranks: int = RING_RANKS) -> int:
    """nccl-tests size whose ring all-reduce takes ``RING_PACKETS`` packet times at line
    rate."""
    return int(sizing.bytes_of(RING_PACKETS, TCP)
               / collectives.busbw_factor("ring_allreduce", ranks))


def storage_bytes() -> int:
    """Bytes each storage operation moves (``STORAGE_PACKETS`` segments)."""
    return sizing.bytes_of(STORAGE_PACKETS, TCP)


def iteration_transfers(graph: nx.Graph, with_storage: bool,
                        who: Roles | None = None) -> list[Transfer]:
    """One iteration's plan: the ring all-reduce, plus the storage bursts if asked."""
    who = who or roles(graph)
    out = collectives.ring_allreduce(list(who.ranks), ring_bytes(len(who.ranks)),
                                     dscp=DSCP_COLLECTIVE, tag=RING_TAG)
    if with_storage:
        nbytes = storage_bytes()
        out += storage.striped_read(who.read_client, who.read_servers, nbytes // READ_ROUNDS,
                                    READ_ROUNDS, dscp=DSCP_STORAGE, tag=READ_TAG)
        out += storage.checkpoint_write([who.writer], who.write_targets, nbytes,
                                        dscp=DSCP_STORAGE, tag=WRITE_TAG)
    return out


def run_count(mode: IsolationMode, seeds: int) -> int:
    """Traffic runs per bring-up (baseline and storage iterations)."""
    return seeds * mode.iterations * len(PHASES)


def estimate_s(mode: IsolationMode, seeds: int, host_mbps: float) -> float:
    """Pessimistic estimate of a run's wall time: bring-ups, idle checks, iterations."""
    per_bringup = (BRINGUP_S + TEARDOWN_S + RUN_OVERHEAD_S + IDLE_BYTES * 8 / (host_mbps * 1e6)
                   + seeds * mode.iterations * (
                       2 * RUN_OVERHEAD_S + sizing.seconds_of(RING_PACKETS, TCP, host_mbps)
                       * (1 + STORAGE_SLOWDOWN_BUDGET)))
    return len(FABRICS) * len(LANES) * per_bringup


def measure_iteration(result: Any, host_mbps: float, storage_links: int) -> dict[str, Any]:
    """Ring time (ms) and storage goodput of one iteration, by traffic class.

    ``storage_goodput_frac``: storage bytes delivered x 8 over the storage
    completion time (first send to last byte), over the host rate times the
    ring-side links storage loads. Either is None when a transfer of its
    class did not complete.
    """
    dscp = {t.id: t.dscp for t in result.plan.transfers}
    rows = result.transfer_rows()
    ring = [r for r in rows if dscp[r["id"]] == DSCP_COLLECTIVE]
    stor = [r for r in rows if dscp[r["id"]] == DSCP_STORAGE]
    ring_s = span_s(ring)
    stor_s = span_s(stor)
    stor_bytes = sum(r["bytes"] for r in stor)
    goodput = (stor_bytes * 8 / stor_s / 1e6 / host_mbps / storage_links
               if stor and stor_s else None)
    return {"collective_ms": round(ring_s * 1e3, 2) if ring_s is not None else None,
            "storage_goodput_frac": round(goodput, 4) if goodput is not None else None,
            "storage_bytes": stor_bytes}


def add_slowdowns(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Set ``collective_slowdown`` against the median baseline of the same fabric and
    lanes."""
    for setting in {_setting(r) for r in rows}:
        base = [r["collective_ms"] for r in rows if _setting(r) == setting
                and r["phase"] == "baseline" and r["collective_ms"] is not None]
        median = statistics.median(base) if base else None
        for r in rows:
            if _setting(r) == setting:
                r["collective_slowdown"] = (round(r["collective_ms"] / median, 4)
                                            if median and r["collective_ms"] is not None
                                            else None)
    return rows


def _row_of(run: Scheduled, result: Any, report: dict[str, Any]) -> dict[str, Any]:
    host_mbps, who = run.context
    measured = measure_iteration(result, host_mbps, who.storage_endpoints_on_ring)
    return {"host_mbps": host_mbps, "collective_ms": measured["collective_ms"],
            "collective_slowdown": None,
            "storage_goodput_frac": measured["storage_goodput_frac"],
            "storage_bytes": measured["storage_bytes"],
            **pause_summary(result), **{f"ring_lane_{k}": v for k, v in pause_summary(
                result, (RING_LANE,)).items() if k != "host_links_paused"},
            "complete": bool(result.complete and not result.errors),
            "valid": bool(report["valid"])}


def notes_for(who: Roles, host_mbps: float) -> list[str]:
    """What the run set up, what to expect and the anchor."""
    return [
        f"ring all-reduce over {len(who.ranks)} ranks, {ring_bytes():,} B "
        f"(~{sizing.seconds_of(RING_PACKETS, TCP, host_mbps):.2g} s at {host_mbps:g} Mbit/s); "
        f"storage: striped read to rank {who.read_client} from {len(who.read_servers)} "
        f"servers and a checkpoint write from rank {who.writer}, {storage_bytes():,} B each",
        "expected: separate lanes keep the collective near its baseline (its lane is "
        "guaranteed 50 % of every link and has priority for spare capacity); one shared lane "
        "lets the storage bursts' flows take most of the shared links, slowing every ring step",
        "lossless: storage pauses the links it congests instead of dropping; in one shared "
        "lane the ring waits behind those pauses (head-of-line blocking), in its own lane "
        "it is paused only for its own traffic (ring_lane_pause_share: the largest share of "
        "an iteration one link's ring lane was paused)",
        "storage_goodput_frac is over the host rate times the 2 ring-side links storage loads",
        "anchor (docs/platform.md): with head-drop leaves the collective class held 59.7-59.9 "
        "of its 60 Mbit/s",
    ]


# --- figures (no root: read the run directory only) ---------------------------


def _values(runs: list[dict], setting: tuple[str, str], phase: str, field: str
            ) -> list[float]:
    return [float(r[field]) for r in runs if _setting(r) == setting and r["phase"] == phase
            and r.get(field) not in (None, "")]


def _setting(row: dict) -> tuple[str, str]:
    """A row's fabric (lossy or lossless: rows before flow control were lossy) and lanes."""
    return row.get("fabric") or "lossy", row["lanes"]


def _bars(ax: Any, settings: Sequence[tuple[str, str]], values: list[list[float]]) -> None:
    for i, (setting, vals) in enumerate(zip(settings, values)):
        if vals:
            plotstyle.spread_bar(ax, i, vals, plotstyle.colour(setting[1], i))
    ax.set_xticks(range(len(settings)), [f"{lanes}\n{fabric}" for fabric, lanes in settings],
                  fontsize=7)
    ax.set_xlabel("lanes, fabric")


def _settings(runs: list[dict]) -> list[tuple[str, str]]:
    return [(fabric, lanes) for fabric in FABRICS for lanes in LANES
            if any(_setting(r) == (fabric, lanes) for r in runs)]


def slowdown_figure(data: RunData) -> Any:
    """Collective slowdown and storage goodput per lanes setting."""
    runs, names = data.runs, _settings(data.runs)
    fig, (left, right) = data.plt.subplots(1, 2, figsize=(3.2 + 1.6 * len(names), 2.8))
    _bars(left, names, [_values(runs, n, "storage", "collective_slowdown") for n in names])
    left.axhline(1.0, ls="--", color="grey", lw=1, label="baseline (ring alone)")
    left.set_ylim(bottom=0)
    left.set_ylabel("ring time / baseline")
    left.set_title("collective slowdown under storage")
    left.legend(loc="lower right")
    _bars(right, names, [_values(runs, n, "storage", "storage_goodput_frac") for n in names])
    share = next(lane.share for lane in LANES["separate"].lanes if lane.name == "storage")
    label = "storage lane's guaranteed share"
    for x, (_, lanes) in enumerate(names):  # what the storage lane is guaranteed
        if lanes == "separate":
            right.hlines(share, x - 0.4, x + 0.4, ls="--", color="grey", lw=1, label=label)
            label = None
    if label is None:
        right.legend(loc="upper right", fontsize=7)
    right.set_ylim(bottom=0)
    right.set_ylabel("storage goodput / line rate")
    right.set_title("storage goodput")
    return fig


def iteration_time_figure(data: RunData) -> Any:
    """Ring all-reduce times per lanes setting and phase."""
    runs, names = data.runs, _settings(data.runs)
    fig, ax = data.plt.subplots(figsize=(1.6 + 1.4 * len(names), 2.8))
    positions, labels = [], []
    for i, (fabric, lanes) in enumerate(names):
        for j, phase in enumerate(PHASES):
            vals = _values(runs, (fabric, lanes), phase, "collective_ms")
            pos = i * (len(PHASES) + 1) + j
            positions.append(pos)
            labels.append(f"{lanes} {fabric}\n{phase}")
            if not vals:
                continue
            ax.boxplot(vals, positions=[pos], widths=0.6, showfliers=False)
            ax.scatter([pos] * len(vals), vals, s=10, color=plotstyle.colour(lanes, i),
                       zorder=3)
    ax.set_xticks(positions, labels, fontsize=6, rotation=90)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("ring all-reduce time (ms)")
    return fig


# --- the experiment ------------------------------------------------------------


class Isolation(Experiment):
    """Baseline and storage iterations of a ring all-reduce, in one shared lane and in
    separate lanes."""

    name = NAME
    question = QUESTION
    default_topology = DEFAULT_TOPO
    modes = {"quick": QUICK, "full": FULL}
    sets_flow_control = True  # lossy and lossless rows, each fabric as it says
    anchors = {"separate": "collective class held 59.7-59.9 of its 60 Mbit/s with head-drop "
                           "leaves (docs/platform.md)"}

    def check(self, ctx: RunContext) -> None:
        """Refuse a topology without the ring's ranks and its storage servers."""
        roles(self.graph(ctx))

    def run_count(self, ctx: RunContext) -> int:
        return len(FABRICS) * len(LANES) * run_count(self.mode(ctx), len(self.seeds(ctx)))

    def estimate_s(self, ctx: RunContext) -> float:
        graph = self.graph(ctx)
        expected = ctx.host_mbps or default_host_mbps(graph, "user")
        return estimate_s(self.mode(ctx), len(self.seeds(ctx)), expected)

    def measure(self, ctx: RunContext, runner: Runner) -> Measured:
        """One bring-up per fabric and lanes setting; baseline and storage iterations
        interleaved (drift hits both alike)."""
        topo = self.topologies(ctx)[0]
        graph = topologies.build(topo)
        mode, seeds, who = self.mode(ctx), self.seeds(ctx), roles(graph)
        rates = set()
        for (fabric, fc), (lanes_name, lanes) in itertools.product(FABRICS.items(),
                                                                   LANES.items()):
            with runner.bring_up(graph, host_mbps=ctx.host_mbps, lanes=lanes,
                                 flow_control=fc) as emu:
                host_mbps = emu.report.rate_plan.host_mbps
                rates.add(host_mbps)
                runs = (Scheduled({"fabric": fabric, "lanes": lanes_name, "seed": seed,
                                   "iteration": iteration, "phase": phase},
                                  iteration_transfers(graph, phase == "storage", who),
                                  seed, (host_mbps, who))
                        for seed in seeds for iteration in range(mode.iterations)
                        for phase in PHASES)
                runner.run(emu, runs, TCP, f"{fabric}-{lanes_name}",
                           _row_of, deadline_s=60.0)
        host_mbps = min(rates)
        return Measured(
            {"topology": topo, "fabrics": list(FABRICS), "lanes": list(LANES),
             "ranks": RING_RANKS,
             "iterations": mode.iterations, "transport": "tcp", "tcp_cc": ctx.tcp_cc,
             "ring_bytes": ring_bytes(), "storage_bytes": storage_bytes(),
             "work": {"ring_packets": RING_PACKETS, "storage_packets": STORAGE_PACKETS,
                      "payload_bytes": TCP.payload_bytes},
             "read_rounds": READ_ROUNDS, "host_mbps": ctx.host_mbps or "auto",
             "estimated_s": round(self.estimate_s(ctx), 1)},
            {"topology": topo, "host_mbps": host_mbps,
             "roles": {"ranks": list(who.ranks), "read_client": who.read_client,
                       "read_servers": list(who.read_servers), "writer": who.writer,
                       "write_targets": list(who.write_targets)}})

    def finish(self, rows: list[dict[str, Any]]) -> None:
        add_slowdowns(rows)

    def table(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Per lanes setting: baseline, slowdown (mean, spread), p99 ring time, storage goodput.

        Storage iterations only (baseline rows give ``baseline_ms``, the median);
        ``valid`` is true only when every iteration of the setting was valid.
        """
        table = []
        for fabric, lanes in _settings(rows):
            mine = [r for r in rows if _setting(r) == (fabric, lanes)]
            base = [r["collective_ms"] for r in mine
                    if r["phase"] == "baseline" and r["collective_ms"] is not None]
            loaded = [r for r in mine if r["phase"] == "storage"]
            times = [r["collective_ms"] for r in loaded if r["collective_ms"] is not None]
            slow = [r["collective_slowdown"] for r in loaded
                    if r["collective_slowdown"] is not None]
            table.append({"fabric": fabric, "lanes": lanes, "iterations": len(loaded),
                          "baseline_ms": round(statistics.median(base), 2) if base else None,
                          "collective_ms": mean_or_none(times, 2),
                          "collective_slowdown": mean_or_none(slow),
                          "slowdown_min": min(slow) if slow else None,
                          "slowdown_max": max(slow) if slow else None,
                          "collective_p99_ms": (round(metrics.percentile(times, 99), 2)
                                                if times else None),
                          "storage_goodput_frac": mean_or_none([r["storage_goodput_frac"]
                                                         for r in loaded]),
                          "paused_links": mean_or_none([r.get("paused_links")
                                                        for r in loaded], 1),
                          "ring_lane_pause_share": mean_or_none(
                              [r.get("ring_lane_pause_share_max") for r in loaded], 3),
                          "valid": all(truthy(r["valid"]) for r in mine)})
        return table

    def notes(self, ctx: RunContext, rows: list[dict[str, Any]], measured: Measured
              ) -> list[str]:
        graph = self.graph(ctx)
        return notes_for(roles(graph), measured.summary["host_mbps"])

    def figures(self) -> Mapping[str, Any]:
        return {"slowdown": slowdown_figure, "iteration_time": iteration_time_figure}


EXPERIMENT = Isolation()
