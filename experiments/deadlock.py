"""PFC deadlock: routes that go down and up again close a cycle of buffer dependencies;
does the lossless fabric stop for good, does the detector see it, and does the watchdog
break it?

One lossless lane, no congestion control, the subnet manager's static routes, and four
flows that load a cycle of four links (:func:`fabric.routing.deadlock.valley_routes`:
leaves ``a`` and ``b`` share the spines ``x`` and ``y`` with a third leaf ``c``; a flow
from under ``a`` to ``c`` goes ``a -> x -> b -> y``, one from under ``b`` goes
``b -> y -> a -> x``, and two from ``c`` enter the ring at the spines; every link of the
ring carries two flows, :func:`fabric.routing.deadlock.valley_flows`). Cases, one bring-up per case and seed (a deadlock outlives its run: the next run on
the same bring-up would start on a stopped fabric):

``up-down``
    the static routes alone (the reference: no cycle, the flows end at the speed of
    the links they share);
``valley``
    the two routes pinned over them, the watchdog as long as a real switch's (100 ms
    of the modelled fabric: longer than the run); the pauses close the ring and nothing
    moves until the run's deadline;
``valley-watchdog``
    the same with a watchdog of ``WATCHDOG_PKTS`` packet times: it breaks each pause
    that lasts that long and takes none for as long again, so the lanes drop what
    arrives, the transport retransmits, and the cycle forms again.

The static check (the bring-up's warning, :func:`fabric.routing.deadlock.dependency_cycle`)
flags the valley routes; the run-time detector
(:mod:`fabric.emulation.deadlock_watch`) reports each cycle of links held paused for
``deadlock_after_pkts`` (200) packet times, when it formed and when it cleared.

Published anchor: Guo et al., "RDMA over Commodity Ethernet at Scale" (SIGCOMM 2016)
saw a PFC deadlock in production and added the watchdog; Hu et al., "Deadlocks in
Datacenter Networks: Why Do They Form, and How to Avoid Them" (HotNets 2016): routes
that break up-down order close the cycle.
"""

from __future__ import annotations

import statistics
from typing import Any, Mapping

import networkx as nx

import topologies
from fabric.analysis import plotstyle
from fabric.emulation import capacity
from fabric.experiment import Experiment, Measured, Mode, RunContext, RunData, Runner, Scheduled
from fabric.experiment.measures import as_float, pause_summary, span_s, truthy
from fabric.experiment.options import ROCE_MTU
from fabric.model import graph as fg
from fabric.model.flowcontrol import FlowControl
from fabric.model.lanes import SINGLE_LANE
from fabric.routing.deadlock import (buffer_dependencies, describe_cycle, find_cycle,
                                     valley_flows, valley_routes)
from fabric.routing.static import static_route_tables
from fabric.routing.tables import pin_routes
from fabric.traffic import sizing
from fabric.traffic.ideal import transport_overhead
from fabric.traffic.model import Transfer, TransportSpec

NAME = "deadlock"
QUESTION = ("Do routes that go down and up again deadlock a lossless fabric, does the "
            "run-time detector see the cycle, and does the watchdog break it?")
DEFAULT_TOPO = "leaf-spine,leaves=3,spines=2,hosts_per_leaf=2"
CASES = ("up-down", "valley", "valley-watchdog")
FLOW_PACKETS = 300  # per flow, in packets of the roce transport: the same at every rate
WATCHDOG_PKTS = 600.0  # the short watchdog, in packet times: beyond the detector's 200
# The run ends here, in packet times of the line rate: ~7 times the valley routes' ideal
# (two flows on each link of the cycle: 600 packet times), so a deadlocked run ends
DEADLINE_PKTS = 4000
MIN_DEADLINE_S = 8.0
BRINGUP_S = 8.0
RUN_OVERHEAD_S = 4.0



def flow_control(case: str, frame_bytes: int, physical_gbps: float) -> FlowControl:
    """The lossless lane's settings of ``case``: the default watchdog (longer than any
    run), or ``WATCHDOG_PKTS`` packet times of a link of ``physical_gbps``."""
    if case != "valley-watchdog":
        return FlowControl()
    return FlowControl(watchdog_ms=WATCHDOG_PKTS * frame_bytes * 8 / (physical_gbps * 1e9) * 1e3)


def pinned_of(case: str, graph: nx.Graph) -> dict[str, dict[str, tuple[int, ...]]] | None:
    """The routes ``case`` pins over the static ones (None: up-down)."""
    return None if case == "up-down" else valley_routes(graph)


def static_cycle(graph: nx.Graph, case: str) -> str | None:
    """The cycle the static check finds in ``case``'s routes (None: none)."""
    pinned = pinned_of(case, graph)
    tables = static_route_tables(graph)
    cycle = find_cycle(buffer_dependencies(graph, pin_routes(tables, pinned) if pinned
                                           else tables))
    return describe_cycle(cycle) if cycle else None


def transfers(graph: nx.Graph, transport: TransportSpec) -> list[Transfer]:
    """The four flows that load the valley routes' cycle, ``FLOW_PACKETS`` each."""
    nbytes = sizing.bytes_of(FLOW_PACKETS, transport)
    return [Transfer(f"flow/{i}", src, dst, nbytes, tag="flow")
            for i, (src, dst) in enumerate(valley_flows(graph), start=1)]


def flow_paths(graph: nx.Graph, case: str) -> list[list[str]]:
    """Each flow's nodes along ``case``'s routes (one port per destination: static)."""
    pinned = pinned_of(case, graph)
    tables = static_route_tables(graph)
    tables = pin_routes(tables, pinned) if pinned else tables
    ip = {att.endpoint: att.ip for att in fg.attachments(graph)}
    by_port = {sw: {fg.port(graph, sw, n): n for n in graph.neighbors(sw)}
               for sw in fg.switches(graph)}
    paths = []
    for src, dst in valley_flows(graph):
        path = [src, next(iter(graph.neighbors(src)))]
        while path[-1] != dst and len(path) <= graph.number_of_nodes():
            path.append(by_port[path[-1]][tables[path[-1]][ip[dst]][0]])
        paths.append(path)
    return paths


def most_flows_per_link(paths: list[list[str]]) -> int:
    """The most flows any directed link carries."""
    load: dict[tuple[str, str], int] = {}
    for path in paths:
        for link in zip(path, path[1:]):
            load[link] = load.get(link, 0) + 1
    return max(load.values(), default=1)


def ideal_s(graph: nx.Graph, case: str, transport: TransportSpec, host_mbps: float) -> float:
    """Every flow's time at best on ``case``'s routes: the busiest link shared evenly by
    its flows, at line rate less the roce headers and the ACKs."""
    overhead = transport_overhead("roce", transport.mtu_payload)
    share = most_flows_per_link(flow_paths(graph, case))
    return (share * FLOW_PACKETS * transport.mtu_payload * 8 / (host_mbps * 1e6)
            * (overhead.data + overhead.ack))


def run_row(case: str, rows: list[dict[str, Any]], result: Any, cycle: str | None,
            ideal: float, valid: bool) -> dict[str, Any]:
    """The runs.csv row of one run (pure over its transfer rows and result)."""
    span = span_s(rows) if all(r["fct_s"] is not None for r in rows) else None
    sent = sum(r["bytes"] for r in rows)
    got = sum(r.get("recv_bytes") or 0 for r in rows)
    found = result.deadlocks
    released = [r for r in result.flow_control if r["watchdog_trips"]]
    return {"case": case, "static_cycle": cycle or "",
            "deadlocks": len(found),
            "first_detected_s": found[0]["detected_s"] if found else None,
            "detected_cycle": found[0]["cycle"] if found else "",
            "held_at_end": sum(1 for f in found if f["cleared_s"] is None),
            "watchdog_trips": sum(r["watchdog_trips"] for r in result.flow_control),
            "watchdog_drops": sum(r["drops"] for r in released),
            "delivered_frac": round(got / sent, 4) if sent else None,
            "time_s": round(span, 4) if span else None, "ideal_s": round(ideal, 4),
            "efficiency": round(ideal / span, 4) if span else None,
            **pause_summary(result), "complete": span is not None, "valid": bool(valid)}


def _row_of(run: Scheduled, result: Any, report: dict[str, Any]) -> dict[str, Any]:
    case, cycle, ideal = run.context
    return run_row(case, result.transfer_rows(), result, cycle, ideal, report["valid"])


def verdict(row: Mapping[str, Any]) -> str:
    """One word for a run: ``flowed``, ``deadlocked`` (held to the end), ``broken``
    (the watchdog released it and the flows ended), or ``stalled`` (incomplete, no
    deadlock seen)."""
    if truthy(row["complete"]) and not int(row["deadlocks"]):
        return "flowed"
    if int(row["held_at_end"]):
        return "deadlocked"
    if int(row["deadlocks"]):
        return "broken" if truthy(row["complete"]) else "stalled"
    return "stalled"


# --- figures (no root: read the run directory only) ---------------------------


def delivered_figure(data: RunData) -> Any:
    """Per case: the share of the flows' bytes delivered by the deadline, and when the
    detector saw the cycle."""
    cases = [c for c in CASES if any(r["case"] == c for r in data.runs)]
    fig, (left, right) = data.plt.subplots(1, 2, figsize=(6.4, 2.6))
    for i, case in enumerate(cases):
        mine = [r for r in data.runs if r["case"] == case]
        frac = [v for v in (as_float(r["delivered_frac"]) for r in mine) if v is not None]
        if frac:
            plotstyle.spread_bar(left, i, frac, plotstyle.colour(case, i))
        seen = [v for v in (as_float(r["first_detected_s"]) for r in mine) if v is not None]
        if seen:
            plotstyle.spread_bar(right, i, seen, plotstyle.colour(case, i))
    for ax in (left, right):
        ax.set_xticks(range(len(cases)), cases, rotation=15)
        ax.set_ylim(bottom=0)
    left.axhline(1.0, ls="--", color="grey", lw=1, label=plotstyle.IDEAL_LABEL)
    left.set_ylim(0, 1.1)
    left.set_ylabel("bytes delivered / sent")
    left.legend(loc="lower left", fontsize=7)
    right.set_ylabel("deadlock detected after (s)")
    return fig


# --- the experiment ------------------------------------------------------------


class Deadlock(Experiment):
    """Up-down routes, then valley routes without and with a short watchdog."""

    name = NAME
    question = QUESTION
    default_topology = DEFAULT_TOPO
    modes = {"quick": Mode(seeds=1), "full": Mode(seeds=3)}
    options = (ROCE_MTU,)
    sets_flow_control = True  # one lossless lane, the watchdog per case
    anchors = {"guo-2016": "a PFC deadlock in production; the watchdog breaks it "
                           "(Guo et al., SIGCOMM 2016)",
               "hu-2016": "routes that break up-down order close a cyclic buffer "
                          "dependency (Hu et al., HotNets 2016)"}

    def check(self, ctx: RunContext) -> None:
        """Refuse a fabric where no valley closes a cycle (one line), or whose up-down
        routes already have one."""
        graph = self.graph(ctx)
        valley_routes(graph)
        if static_cycle(graph, "up-down"):
            raise ValueError(f"{NAME}: the static routes of {ctx.topo} already close a "
                             f"cycle; the up-down reference needs a fabric without one")

    def run_count(self, ctx: RunContext) -> int:
        return len(CASES) * len(self.seeds(ctx))

    def estimate_s(self, ctx: RunContext) -> float:
        mbps = ctx.host_mbps or 8.0
        deadline = max(MIN_DEADLINE_S, sizing.seconds_of(DEADLINE_PKTS, ctx.roce(), mbps))
        return len(CASES) * len(self.seeds(ctx)) * (BRINGUP_S + RUN_OVERHEAD_S + deadline)

    def measure(self, ctx: RunContext, runner: Runner) -> Measured:
        """One bring-up per case and seed, each running the four flows once."""
        topo = self.topologies(ctx)[0]
        graph = topologies.build(topo)
        transport = ctx.roce(cc="none", entropy="flow")
        packet_bytes = transport.packet_bytes
        host_mbps = runner.host_mbps(graph, packet_bytes, capacity.ROCE_RATE_HEADROOM)
        frame = packet_bytes + 14
        gbps = min(d["gbps"] for _, _, d in graph.edges(data=True))
        for case in CASES:
            fc = flow_control(case, frame, gbps)
            for seed in self.seeds(ctx):  # a bring-up each: a deadlock outlives its run
                with runner.bring_up(graph, policy="static", lanes=SINGLE_LANE,
                                     flow_control=fc, host_mbps=host_mbps,
                                     packet_bytes=packet_bytes,
                                     pinned_routes=pinned_of(case, graph)) as emu:
                    used = emu.report.rate_plan.host_mbps
                    context = (case, static_cycle(graph, case),
                               ideal_s(graph, case, transport, used))
                    deadline = max(MIN_DEADLINE_S,
                                   sizing.seconds_of(DEADLINE_PKTS, transport, used))
                    runner.run(emu, [Scheduled({"case": case, "seed": seed},
                                               transfers(graph, transport), seed, context)],
                               transport, f"{case}-{seed}", _row_of, deadline_s=deadline)
        return Measured(
            {"topology": topo, "cases": CASES, "policy": "static", "transport": "roce",
             "cc": "none", "roce_mtu": transport.mtu_payload, "flow_control": "pfc",
             "watchdog_pkts": WATCHDOG_PKTS,
             "deadlock_after_pkts": FlowControl().deadlock_after_pkts,
             "work": {"flow_packets": FLOW_PACKETS, "deadline_packets": DEADLINE_PKTS,
                      "payload_bytes": transport.payload_bytes},
             "host_mbps": ctx.host_mbps or "auto"},
            {"topology": topo, "host_mbps": host_mbps,
             "flows": [f"{src} -> {dst}" for src, dst in valley_flows(graph)],
             "valley_routes": {sw: {ip: list(p) for ip, p in t.items()}
                               for sw, t in valley_routes(graph).items()}})

    def table(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Per case: the verdicts, what the static check and the detector saw, what the
        watchdog did, and the flows' time beside their ideal."""
        out = []
        for case in CASES:
            mine = [r for r in rows if r["case"] == case]
            if not mine:
                continue
            times = [r["time_s"] for r in mine if r["time_s"] is not None]
            seen = [r["first_detected_s"] for r in mine if r["first_detected_s"] is not None]
            out.append({
                "case": case, "runs": len(mine),
                "verdicts": ",".join(sorted({verdict(r) for r in mine})),
                "static_cycle": mine[0]["static_cycle"] or None,
                "detected_cycle": next((r["detected_cycle"] for r in mine
                                        if r["detected_cycle"]), None),
                "runs_deadlocked": sum(1 for r in mine if r["deadlocks"]),
                "first_detected_s": round(statistics.median(seen), 3) if seen else None,
                "watchdog_trips": sum(r["watchdog_trips"] for r in mine),
                "watchdog_drops": sum(r["watchdog_drops"] for r in mine),
                "delivered_frac": round(statistics.fmean(r["delivered_frac"] or 0.0
                                                         for r in mine), 4),
                "time_s": round(statistics.fmean(times), 3) if times else None,
                "ideal_s": mine[0]["ideal_s"],
                "complete": sum(1 for r in mine if r["complete"]),
                "valid": all(truthy(r["valid"]) for r in mine)})
        return out

    def notes(self, ctx: RunContext, rows: list[dict[str, Any]], measured: Measured
              ) -> list[str]:
        summary = measured.summary
        return [f"flows {', '.join(summary['flows'])}, {FLOW_PACKETS} packets each, one "
                f"lossless lane, no congestion control, static routes; the run ends after "
                f"{DEADLINE_PKTS} packet times (a deadlock cannot hang it)",
                f"valley routes pinned over the static ones: {summary['valley_routes']}",
                f"detector: a cycle of buffer dependencies among links paused for "
                f"{FlowControl().deadlock_after_pkts:g} packet times; valley-watchdog's "
                f"watchdog {WATCHDOG_PKTS:g} packet times (the default's is 100 ms of the "
                f"modelled fabric, longer than the run)",
                "ideal_s: the busiest link of the case's routes shared evenly by its flows "
                "(valley: two on each link of the cycle), less the roce headers and ACKs",
                f"anchors: {self.anchors['guo-2016']}; {self.anchors['hu-2016']}"]

    def figures(self) -> Mapping[str, Any]:
        return {"delivered": delivered_figure}


EXPERIMENT = Deadlock()
