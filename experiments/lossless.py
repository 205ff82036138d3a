"""Lossless fabrics (Fire-Flyer 2): does spreading traffic over every path spread a
storage incast's pauses to more of the fabric, and which congestion control serves
mixed traffic best on lossless lanes?

Every bring-up is lossless (link-level flow control, :mod:`fabric.model.flowcontrol`)
and every sender runs the roce transport. The endpoints of one leaf are the **hot
leaf**: its first endpoint is the client of a striped read from servers on every
other leaf (``SERVERS_PER_LEAF`` each), which pauses the links into the hot leaf
and, hop by hop, the links feeding them (a congestion tree). A ring all-reduce
runs over the remaining endpoints, its ranks taken leaf by leaf in turn, so every
ring step crosses the spines and some enter the hot leaf.

Part ``routing`` (head-of-line blocking): one lossless lane for everything, no
congestion control (Fire-Flyer's choice) and each routing policy in turn: the subnet
manager's planned static routes (``static``, Fire-Flyer's), the switches' own
adaptive routing (``ar``: each packet to the least occupied of its ports, a paused
one last, as InfiniBand AR and Spectrum-X switches route), per-flow hashing
(``ecmp``), packet spraying and telemetry-weighted spraying (``adaptive``). Spreading
packets over every path gives the incast every spine too, so its pauses can reach
every path the ring has; per-flow paths confine them to the spines the incast's
flows hashed onto. Fire-Flyer chose static routing because adaptive routing
spread congestion this way.

Part ``cc``: three lossless lanes (collective, storage, the rest), the planned
static routes, and mixed traffic (the ring, the striped read and a latency probe: one
small message at a time across the hot leaf's downlinks, in the default lane)
under each roce congestion control: none (Fire-Flyer disabled DCQCN), dcqcn and
swift.

Each setting's ``baseline`` iterations run the ring (and, in part ``cc``, the
probe) alone in the same bring-up; ``ring_slowdown`` is a storage iteration's
ring time over their median.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Mapping

import networkx as nx

import topologies
from fabric.analysis import plotstyle
from fabric.emulation import capacity
from fabric.emulation.machine_speed import default_host_mbps
from fabric.experiment import Experiment, Measured, Mode, RunContext, RunData, Runner, Scheduled
from fabric.experiment.measures import mean_or_none, pause_summary, span_s, truthy
from fabric.experiment.options import ROCE_MTU, SPRAY_ENTROPY
from fabric.model import graph as fg
from fabric.model.flowcontrol import FlowControl
from fabric.model.lanes import DSCP_COLLECTIVE, DSCP_STORAGE, SINGLE_LANE, THREE_LANES
from fabric.routing.policies import sprays
from fabric.traffic import collectives, metrics, sizing, storage
from fabric.traffic.ideal import transport_overhead
from fabric.traffic.model import SPRAY_ENTROPY_PORTS, ScheduleError, Transfer, TransportSpec
from fabric.traffic.result import RunResult

NAME = "lossless"
QUESTION = ("On a lossless fabric, does spreading traffic over every path spread a storage "
            "incast's pauses to a collective, and which congestion control serves mixed "
            "traffic best?")
DEFAULT_TOPO = "rail-clos"
POLICIES = ("static", "ar", "ecmp", "spray", "adaptive")  # part "routing"; Fire-Flyer's first
CCS = ("none", "dcqcn", "swift")  # part "cc"
ROUTING_CC = "none"  # Fire-Flyer runs without congestion control
PHASES = ("baseline", "storage")
RING_RANKS = 8
MIN_RING_RANKS = 4
SERVERS_PER_LEAF = 2
MAX_SERVERS = 8
# In packets of the roce transport, the same at every rate (fabric.traffic.sizing)
RING_PACKETS = 400  # the ring alone, at line rate: packet times per rank
# The read's packets, in one round: every stripe at once, so the servers (line rate
# without congestion control) hold more than the client's leaf can buffer for most of
# the ring's run. In 4 rounds of ~280 packets the stripes were ~10 packets each and the
# leaf held every round below its Xoff: no pause.
READ_PACKETS = 400
PROBES = 30  # one-packet messages, each sent when the previous one is acknowledged
PROBE_BYTES = 64
RING_TAG, READ_TAG, PROBE_TAG = "ring", "read", "probe"
DEADLINE_S = 60.0

# Time budget: as experiments.isolation, plus an idle check and warm-up per congestion
# control in part "cc" (one run loop each)
BRINGUP_S = 4.0
TEARDOWN_S = 3.0
RUN_OVERHEAD_S = 2.5
STORAGE_SLOWDOWN_BUDGET = 2.5
FIRE_FLYER = ("An et al., Fire-Flyer AI-HPC, SC 2024: static routing, because adaptive "
              "routing spread congestion (head-of-line blocking); DCQCN disabled, no "
              "parameter set did better on mixed traffic")


@dataclass(frozen=True)
class LosslessMode(Mode):
    """Iterations per phase, setting and seed."""

    iterations: int


QUICK = LosslessMode(seeds=1, iterations=2)
FULL = LosslessMode(seeds=2, iterations=5)


@dataclass(frozen=True)
class Roles:
    """Who plays what: the read's client and servers, the ring, the probe."""

    client: str
    servers: tuple[str, ...]
    ranks: tuple[str, ...]
    probe_src: str
    probe_dst: str


def _endpoints_by_leaf(graph: nx.Graph) -> list[list[str]]:
    """The endpoints of every leaf, leaves in name order; a dual-homed endpoint (a
    storage node) counts under its first leaf only."""
    home = {e: min(graph[e]) for e in fg.endpoints(graph)}
    return [sorted(e for e in home if home[e] == leaf) for leaf in sorted(set(home.values()))]


def roles(graph: nx.Graph) -> Roles:
    """The hot leaf's first endpoint reads from ``SERVERS_PER_LEAF`` endpoints of every
    other leaf (keeping one there; at most ``MAX_SERVERS`` in all); the ring takes the
    rest leaf by leaf in turn (up to ``RING_RANKS``); the probe goes from the last server
    to a ring rank of the hot leaf (so it crosses the links the read congests, in another
    lane).

    Raises
    ------
    ScheduleError
        When the fabric has fewer than 3 leaves, or too few endpoints for the roles.
    """
    by_leaf = _endpoints_by_leaf(graph)
    if len(by_leaf) < 3 or len(by_leaf[0]) < 2 or all(len(leaf) < 2 for leaf in by_leaf[1:]):
        raise ScheduleError(f"{NAME} needs 3 leaves with endpoints, 2 on the first and "
                            f"2 on another; the fabric has {len(by_leaf)} leaves")
    hot, others = by_leaf[0], by_leaf[1:]
    # every other leaf keeps an endpoint for the ring
    per_leaf = [min(SERVERS_PER_LEAF, len(leaf) - 1) for leaf in others]
    servers = [e for leaf, n in zip(others, per_leaf) for e in leaf[:n]][:MAX_SERVERS]
    pools = [hot[1:]] + [[e for e in leaf if e not in servers] for leaf in others]
    order = [e for row in _interleave(pools) for e in row]
    ranks = order[:RING_RANKS]
    if len(ranks) < MIN_RING_RANKS:
        raise ScheduleError(f"{NAME} needs {MIN_RING_RANKS} ring ranks beside the read's "
                            f"client and {len(servers)} servers; the fabric has "
                            f"{len(ranks)} endpoints left")
    return Roles(hot[0], tuple(servers), tuple(ranks), servers[-1], hot[1])


def _interleave(pools: list[list[str]]) -> list[list[str]]:
    """Rows of one endpoint per pool: the first of each, then the second of each..."""
    depth = max(len(p) for p in pools)
    return [[p[i] for p in pools if i < len(p)] for i in range(depth)]


def ring_bytes(transport: TransportSpec, ranks: int) -> int:
    """nccl-tests size whose ring all-reduce takes ``RING_PACKETS`` packet times of
    ``transport`` at line rate."""
    return int(sizing.bytes_of(RING_PACKETS, transport)
               / collectives.busbw_factor("ring_allreduce", ranks))


def read_bytes(transport: TransportSpec) -> int:
    """Bytes of the striped read (``READ_PACKETS`` packets of ``transport``)."""
    return sizing.bytes_of(READ_PACKETS, transport)


def probe_transfers(who: Roles) -> list[Transfer]:
    """``PROBES`` small messages in the default lane, each after the previous one."""
    ids = [f"{PROBE_TAG}/{i}" for i in range(PROBES)]
    return [Transfer(ident, who.probe_src, who.probe_dst, PROBE_BYTES,
                     (ids[i - 1],) if i else (), 0, PROBE_TAG) for i, ident in enumerate(ids)]


def iteration_transfers(who: Roles, transport: TransportSpec, with_storage: bool, probe: bool
                        ) -> list[Transfer]:
    """One iteration in packets of ``transport``: the ring, the striped read if
    ``with_storage``, the probe if asked."""
    out = collectives.ring_allreduce(list(who.ranks), ring_bytes(transport, len(who.ranks)),
                                     dscp=DSCP_COLLECTIVE, tag=RING_TAG)
    if with_storage:
        out += storage.striped_read(who.client, who.servers, read_bytes(transport), 1,
                                    dscp=DSCP_STORAGE, tag=READ_TAG)
    return out + (probe_transfers(who) if probe else [])


# --- measuring one run (pure over the run's rows) ---------------------------------------


def measure_rows(rows: list[dict[str, Any]], host_mbps: float) -> dict[str, Any]:
    """Ring time, the read's goodput over the client's line rate and the probe's latency
    percentiles, from a run's transfer rows (None: not run or not complete)."""
    by_tag: dict[str, list[dict[str, Any]]] = {}
    for r in rows:  # a ring step's tag is "ring/step3"
        by_tag.setdefault(r["tag"].split("/")[0], []).append(r)
    ring_s, read_s = span_s(by_tag.get(RING_TAG, [])), span_s(by_tag.get(READ_TAG, []))
    read = sum(r["bytes"] for r in by_tag.get(READ_TAG, []))
    probes = [r["fct_s"] * 1e3 for r in by_tag.get(PROBE_TAG, []) if r["fct_s"] is not None]
    return {"ring_ms": round(ring_s * 1e3, 2) if ring_s is not None else None,
            "storage_goodput_frac": (round(read * 8 / read_s / 1e6 / host_mbps, 4)
                                     if read and read_s else None),
            "probe_p50_ms": round(metrics.percentile(probes, 50), 3) if probes else None,
            "probe_p99_ms": round(metrics.percentile(probes, 99), 3) if probes else None}


def pause_link_seconds(result: RunResult) -> float | None:
    """Sum over link directions of the share of the run each was paused: how much of the
    fabric the pauses held, in links (None without flow control)."""
    if pause_summary(result)["paused_links"] is None:
        return None
    return round(sum(r["pause_share"] or 0.0 for r in result.flow_control if r["pauses"]), 3)


def ideals(mtu_payload: int, host_mbps: float) -> dict[str, float]:
    """A perfect transport's ring time at ``host_mbps`` (line rate less the roce headers
    and the ACKs sharing each link) and the read's goodput (less the headers)."""
    overhead = transport_overhead("roce", mtu_payload)
    line_s = RING_PACKETS * mtu_payload * 8 / (host_mbps * 1e6)
    return {"ring_ideal_ms": round(line_s * 1e3 * (overhead.data + overhead.ack), 2),
            "storage_goodput_ideal": round(1 / overhead.data, 4)}


def _row_of(run: Scheduled, result: RunResult, report: dict[str, Any]) -> dict[str, Any]:
    host_mbps, mtu_payload = run.context
    return {"host_mbps": host_mbps, **ideals(mtu_payload, host_mbps),
            **measure_rows(result.transfer_rows(), host_mbps), "ring_slowdown": None,
            **pause_summary(result), "pause_link_seconds": pause_link_seconds(result),
            "complete": bool(result.complete and not result.errors),
            "valid": bool(report["valid"])}


def _setting(row: Mapping[str, Any]) -> tuple[str, str]:
    return row["part"], row["setting"]


def add_slowdowns(rows: list[dict[str, Any]]) -> None:
    """``ring_slowdown``: ring time over the median baseline of the same part and setting."""
    for setting in {_setting(r) for r in rows}:
        mine = [r for r in rows if _setting(r) == setting]
        base = [r["ring_ms"] for r in mine if r["phase"] == "baseline" and r["ring_ms"]]
        median = statistics.median(base) if base else None
        for r in mine:
            r["ring_slowdown"] = (round(r["ring_ms"] / median, 4)
                                  if median and r["ring_ms"] is not None else None)


def table_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per part and setting: the storage iterations' means beside the baselines' means
    (``ring_slowdown`` is against their median); ``valid`` only if every run was."""
    out = []
    for part, setting in dict.fromkeys(_setting(r) for r in rows):
        mine = [r for r in rows if _setting(r) == (part, setting)]
        base = [r for r in mine if r["phase"] == "baseline"]
        loaded = [r for r in mine if r["phase"] == "storage"]
        slow = [r["ring_slowdown"] for r in loaded if r["ring_slowdown"] is not None]

        def mean(field: str, of: list[dict[str, Any]] = loaded, digits: int = 4) -> Any:
            return mean_or_none([r.get(field) for r in of], digits)

        out.append({"part": part, "setting": setting, "iterations": len(loaded),
                    "ring_ideal_ms": mean("ring_ideal_ms", mine, 2),
                    "baseline_ms": mean("ring_ms", base, 2), "ring_ms": mean("ring_ms", digits=2),
                    "ring_slowdown": mean_or_none(slow),
                    "slowdown_max": max(slow) if slow else None,
                    "storage_goodput_frac": mean("storage_goodput_frac"),
                    "storage_goodput_ideal": mean("storage_goodput_ideal", mine),
                    "probe_alone_p99_ms": mean("probe_p99_ms", base, 3),
                    "probe_p50_ms": mean("probe_p50_ms", digits=3),
                    "probe_p99_ms": mean("probe_p99_ms", digits=3),
                    "paused_links": mean("paused_links", digits=1),
                    "pause_link_seconds": mean("pause_link_seconds", digits=3),
                    "host_links_paused": mean("host_links_paused", digits=1),
                    "valid": all(truthy(r["valid"]) for r in mine)})
    return out


def estimate_s(mode: LosslessMode, seeds: int, host_mbps: float) -> float:
    """Pessimistic wall time at ``host_mbps``: a bring-up per policy and one for the
    congestion controls, a run loop per policy and congestion control, every
    iteration."""
    ring_s = sizing.seconds_of(RING_PACKETS, TransportSpec("roce"), host_mbps)
    per_iteration = 2 * RUN_OVERHEAD_S + ring_s * (2 + STORAGE_SLOWDOWN_BUDGET)
    loops = len(POLICIES) + len(CCS)
    return ((len(POLICIES) + 1) * (BRINGUP_S + TEARDOWN_S) + loops * 2 * RUN_OVERHEAD_S
            + loops * seeds * mode.iterations * per_iteration)


# --- figures (no root: read the run directory only) ---------------------------


def _values(runs: list[dict], part: str, setting: str, field: str, phase: str = "storage"
            ) -> list[float]:
    return [float(r[field]) for r in runs if r["part"] == part and r["setting"] == setting
            and r["phase"] == phase and r.get(field) not in (None, "")]


def _panel(ax: Any, runs: list[dict], part: str, settings: list[str], field: str,
           label: str) -> None:
    for i, setting in enumerate(settings):
        vals = _values(runs, part, setting, field)
        if vals:
            plotstyle.spread_bar(ax, i, vals, plotstyle.colour(setting, i))
    ax.set_xticks(range(len(settings)), settings)
    ax.set_ylim(bottom=0)
    ax.set_ylabel(label)


def _ring_panel(ax: Any, runs: list[dict], part: str, settings: list[str]) -> None:
    """Ring time under storage (bars), alone (black ticks) and a perfect transport's."""
    _panel(ax, runs, part, settings, "ring_ms", "ring all-reduce time (ms)")
    label = "ring alone (median)"
    for i, setting in enumerate(settings):
        alone = _values(runs, part, setting, "ring_ms", "baseline")
        if alone:
            ax.hlines(statistics.median(alone), i - 0.4, i + 0.4, color="black", lw=2,
                      label=label)
            label = None
    ideal = [float(r["ring_ideal_ms"]) for r in runs if r.get("ring_ideal_ms")]
    if ideal:
        ax.axhline(ideal[0], ls="--", color="grey", lw=1, label="ideal (line rate)")
    ax.legend(loc="lower right", fontsize=7)


def _settings(runs: list[dict], part: str) -> list[str]:
    return list(dict.fromkeys(r["setting"] for r in runs if r["part"] == part))


def routing_figure(data: RunData) -> Any:
    """Part routing: ring time and how much of the fabric was paused, per policy."""
    names = _settings(data.runs, "routing")
    if not names:
        return None
    fig, (left, right) = data.plt.subplots(1, 2, figsize=(6.4, 2.8))
    _ring_panel(left, data.runs, "routing", names)
    left.set_title("ring under a storage incast")
    _panel(right, data.runs, "routing", names, "pause_link_seconds",
           "paused link-seconds per second")
    right.set_title("pauses (one lossless lane)")
    return fig


def cc_figure(data: RunData) -> Any:
    """Part cc: ring time, storage goodput and probe p99 per congestion control."""
    names = _settings(data.runs, "cc")
    if not names:
        return None
    fig, axes = data.plt.subplots(1, 3, figsize=(8.4, 2.8))
    _ring_panel(axes[0], data.runs, "cc", names)
    _panel(axes[1], data.runs, "cc", names, "storage_goodput_frac",
           "read goodput / client line rate")
    ideal = [float(r["storage_goodput_ideal"]) for r in data.runs if r.get("storage_goodput_ideal")]
    if ideal:
        axes[1].axhline(ideal[0], ls="--", color="grey", lw=1)
    _panel(axes[2], data.runs, "cc", names, "probe_p99_ms", "probe p99 latency (ms)")
    for ax, title in zip(axes, ("ring", "storage", "latency probe")):
        ax.set_title(title)
        ax.set_xlabel("congestion control")
    return fig


# --- the experiment ------------------------------------------------------------


class Lossless(Experiment):
    """Part routing (head-of-line blocking per routing policy) and part cc (congestion
    controls on lossless lanes), both under a storage incast."""

    name = NAME
    question = QUESTION
    default_topology = DEFAULT_TOPO
    modes = {"quick": QUICK, "full": FULL}
    options = (ROCE_MTU, SPRAY_ENTROPY)
    sets_flow_control = True  # every fabric lossless, each part with its own lanes
    anchors = {"routing": "static routing: adaptive routing spread congestion (Fire-Flyer 2, "
                          "SC 2024)",
               "cc": "DCQCN disabled: no parameter set did better on mixed traffic "
                     "(Fire-Flyer 2, SC 2024)"}

    def check(self, ctx: RunContext) -> None:
        """Refuse a fabric without the roles (see :func:`roles`)."""
        roles(self.graph(ctx))

    def run_count(self, ctx: RunContext) -> int:
        runs = len(self.seeds(ctx)) * self.mode(ctx).iterations * len(PHASES)
        return (len(POLICIES) + len(CCS)) * runs

    def estimate_s(self, ctx: RunContext) -> float:
        mbps = ctx.host_mbps or default_host_mbps(
            self.graph(ctx), packet_bytes=ctx.roce().packet_bytes,
            headroom=capacity.ROCE_RATE_HEADROOM)
        return estimate_s(self.mode(ctx), len(self.seeds(ctx)), mbps)

    def measure(self, ctx: RunContext, runner: Runner) -> Measured:
        """One bring-up per routing policy (one lane), one for every congestion control
        (three lanes); baseline and storage iterations interleaved."""
        topo = self.topologies(ctx)[0]
        graph = topologies.build(topo)
        who, fc = roles(graph), FlowControl()
        packet_bytes = ctx.roce().packet_bytes
        host_mbps = ctx.host_mbps or default_host_mbps(
            graph, packet_bytes=packet_bytes, headroom=capacity.ROCE_RATE_HEADROOM)
        common = {"host_mbps": host_mbps, "packet_bytes": packet_bytes, "flow_control": fc}
        for policy in POLICIES:
            with runner.bring_up(graph, policy=policy, lanes=SINGLE_LANE, **common) as emu:
                entropy = ctx.get(SPRAY_ENTROPY) if sprays(policy) else "flow"
                self._loop(ctx, runner, emu, who, ("routing", policy), ctx.roce(
                    cc=ROUTING_CC, entropy=entropy, entropy_ports=SPRAY_ENTROPY_PORTS), False)
        with runner.bring_up(graph, policy="static", lanes=THREE_LANES, **common) as emu:
            for cc in CCS:
                self._loop(ctx, runner, emu, who, ("cc", cc), ctx.roce(cc=cc), True)
        return Measured(
            {"topology": topo, "policies": POLICIES, "ccs": CCS, "routing_cc": ROUTING_CC,
             "iterations": self.mode(ctx).iterations, "transport": "roce",
             "roce_mtu": ctx.get(ROCE_MTU), "spray_entropy": ctx.get(SPRAY_ENTROPY),
             "flow_control": "pfc", "host_mbps": ctx.host_mbps or "auto",
             "work": {"ring_packets": RING_PACKETS, "read_packets": READ_PACKETS,
                      "payload_bytes": ctx.roce().payload_bytes},
             "estimated_s": round(self.estimate_s(ctx), 1)},
            {"topology": topo, "host_mbps": host_mbps,
             "roles": {"client": who.client, "servers": list(who.servers),
                       "ranks": list(who.ranks), "probe": [who.probe_src, who.probe_dst]}})

    def _loop(self, ctx: RunContext, runner: Runner, emu: Any, who: Roles,
              setting: tuple[str, str], transport: TransportSpec, probe: bool) -> None:
        """Every seed's and iteration's baseline and storage runs of one setting."""
        host_mbps = emu.report.rate_plan.host_mbps
        part, name = setting
        runs = (Scheduled({"part": part, "setting": name, "seed": seed, "iteration": i,
                           "phase": phase},
                          iteration_transfers(who, transport, phase == "storage", probe),
                          seed, (host_mbps, transport.mtu_payload))
                for seed in self.seeds(ctx) for i in range(self.mode(ctx).iterations)
                for phase in PHASES)
        runner.run(emu, runs, transport, f"{part}-{name}", _row_of, deadline_s=DEADLINE_S)

    def finish(self, rows: list[dict[str, Any]]) -> None:
        add_slowdowns(rows)

    def table(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Per part and setting; ``valid`` only when every iteration of it was valid."""
        return table_rows(rows)

    def notes(self, ctx: RunContext, rows: list[dict[str, Any]], measured: Measured
              ) -> list[str]:
        who, host_mbps = roles(self.graph(ctx)), measured.summary["host_mbps"]
        return [
            f"ring all-reduce over {len(who.ranks)} ranks, "
            f"{ring_bytes(ctx.roce(), len(who.ranks)):,} B (~"
            f"{sizing.seconds_of(RING_PACKETS, ctx.roce(), host_mbps):.2g} s at {host_mbps:g} "
            f"Mbit/s; ring_ideal_ms: a perfect transport's, less the roce headers and ACKs); "
            f"striped read to {who.client} from {len(who.servers)} servers, "
            f"{read_bytes(ctx.roce()):,} B at once (storage_goodput_ideal: the client's line "
            "rate less the headers)",
            f"routing: one lossless lane, congestion control {ROUTING_CC}; "
            "pause_link_seconds sums every link direction's paused share of the run: how "
            "much of the fabric the congestion tree held",
            f"cc: three lossless lanes, static routing; the probe sends {PROBES} messages of "
            f"{PROBE_BYTES} B one at a time from {who.probe_src} to {who.probe_dst} in the "
            "default lane (probe_alone_p99_ms: with the ring only)",
            f"anchor: {FIRE_FLYER}",
        ]

    def figures(self) -> Mapping[str, Any]:
        return {"routing": routing_figure, "cc": cc_figure}


EXPERIMENT = Lossless()
