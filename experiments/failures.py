"""Failures: which routing policy keeps a collective running when a link goes bad?

A ring all-reduce over every compute host, ranks placed at random (seeded),
so most ring hops cross the spines, runs on the RoCEv2-like transport under
``ecmp``, ``spray`` and ``adaptive``. Scenarios, on the uplink from the
first rank's leaf to the first top-tier switch (or on that switch):

``healthy``
    the baseline every slowdown is measured against (same policy and seed);
``link-down``
    the link is cut a quarter into the collective (in line-rate time) and
    restored 0.4 of it later;
``degraded``
    the link runs at a quarter of its rate, both ways, for the whole run (a
    gray failure: up, but slow);
``flapping``
    from the same instant, the link goes down and up every second
    (half a second each) until the collective ends;
``spine-down``
    the whole top-tier switch loses every link at that instant, for good.

Measured per run: ``slowdown`` (iteration time over the healthy run's),
``reroute_ms`` (from the cut to the send time of the first packet, sent after
it, that a receiver got: the first packet on a surviving path; the worst
connection in progress at the cut), ``stall_ms`` (the longest gap in any
connection's delivery while it owed data: a connection sends its transfers in
order, and one waiting behind another is not stalled), ``timeouts``
(retransmission timeouts) and
``lost_bytes`` (bytes never delivered; 0 when every byte arrived once).

Ideal: ``ideal_slowdown`` is what the remaining capacity allows, from the
fluid model (:mod:`fabric.traffic.ideal`) run with the measured failure times:
every transfer spread over its live shortest paths in proportion to their
bottleneck capacity, against the same model on the healthy fabric.

Published anchors: link flaps are a leading incident class of large training
fabrics (Fire-Flyer 2); per-packet spraying is as slow as its slowest path,
while adaptive and flowlet schemes route around it (DRILL, LetFlow, CONGA).
"""

from __future__ import annotations

import statistics
from typing import Any, Hashable, Iterator, Mapping

import networkx as nx

import topologies
from fabric.analysis import plotstyle
from fabric.analysis.disruption import (controller_ms, delivery_timeline, lost_bytes, reroute_ms,
                                        stall_ms)
from fabric.emulation import Emulation, capacity, fidelity
from fabric.emulation.machine_speed import default_host_mbps
from fabric.experiment import Experiment, Measured, Mode, RunContext, RunData, Runner, Scheduled
from fabric.experiment.faults import Action, Injection, Scenario, first_cut, ideal_time_s, inject
from fabric.experiment.measures import as_float, span_s, transport_losses
from fabric.experiment.options import (CC, POLICIES_OPTION, ROCE_MTU, ROCE_OPTIONS,
                                       SPRAY_ENTROPY, chosen_policies)
from fabric.model import graph as fg
from fabric.model.lanes import DSCP_COLLECTIVE
from fabric.routing.policies import POLICIES as ROUTING_POLICIES, sprays
from fabric.traffic import collectives, ideal, sizing
from fabric.traffic.model import ScheduleError, TransportSpec
from fabric.traffic.placement import rank_hosts

NAME = "failures"
QUESTION = "Which routing policy keeps a collective running when a link fails, flaps or slows?"
POLICIES = ("ecmp", "spray", "adaptive")  # the default comparison (--policies: any of routing's)
SCENARIOS = ("healthy", "link-down", "degraded", "flapping", "spine-down")
COLLECTIVE = "ring-allreduce"
# Per-rank buffer in packets (the same at every rate): the ring moves 2(N-1)/N of it,
# ~1,100 (quick) or ~2,300 (full) packet times at line rate.
BUFFER_PACKETS = {True: 600, False: 1_200}
FAIL_AT = 0.25     # the cut, as a share of the collective's line-rate time
DOWN_FOR = 0.4     # how long link-down lasts, same unit
FLAP_PERIOD_PACKETS = 400  # a flap's period, in packet times of the host link
DEGRADED_FRACTION = 0.25
DEADLINE_FACTOR = 20.0
TIMELINE_BIN_PACKETS = 20  # the delivery timeline's bins, in packet times
TIMELINE_SCENARIOS = ("link-down", "flapping", "spine-down")  # the ones with a cut
BRINGUP_S = 10.0
RUN_OVERHEAD_S = 5.0
ANCHORS = {"degraded": "spray as slow as its slowest path; adaptive routes around it "
                       "(DRILL, LetFlow, CONGA)",
           "link-down": "reroute within tens of ms, no connection broken",
           "flapping": "link flaps: a leading incident class (Fire-Flyer 2)",
           "spine-down": "reroute within tens of ms, no connection broken"}


# --- the scenario: where and when (pure) ---------------------------------------------

def top_tier(graph: nx.Graph) -> list[str]:
    """The switches at the top of the fabric: cores, or spines when there are none."""
    return fg.nodes_with_role(graph, "core") or fg.nodes_with_role(graph, "spine")


def victim_link(graph: nx.Graph, ranks: list[str]) -> tuple[str, str]:
    """The uplink from the first rank's switch to its first upper neighbour."""
    leaf = next(iter(graph.neighbors(ranks[0])))
    ups = fg.uplinks(graph, leaf)
    if len(ups) < 2:
        raise ScheduleError(f"{NAME}: {leaf} has {len(ups)} uplink(s); a failure needs another "
                            f"path to route around it")
    return (leaf, ups[0])


def line_rate_s(n: int, size: int, host_mbps: float) -> float:
    """Seconds the ring all-reduce takes at line rate (busbw = host rate)."""
    return size * collectives.busbw_factor(COLLECTIVE, n) * 8 / (host_mbps * 1e6)


def make_scenario(name: str, graph: nx.Graph, ranks: list[str], t_line: float,
                  horizon_s: float, packet_s: float) -> Scenario:
    """The scenario ``name`` for this ring: its links and timeline (pure).

    ``t_line`` is the collective's line-rate time; ``horizon_s`` bounds the
    flapping (the injector stops when the traffic ends anyway); ``packet_s`` is a
    packet time of the host link, the flaps' clock (:data:`FLAP_PERIOD_PACKETS`).
    """
    link = victim_link(graph, ranks)
    named = "-".join(link)
    fail = FAIL_AT * t_line
    if name == "healthy":
        return Scenario(name)
    if name == "link-down":
        return Scenario(name, (Action(fail, False, (link,)),
                               Action(fail + DOWN_FOR * t_line, True, (link,))), target=named)
    if name == "degraded":
        return Scenario(name, slow=(link,), target=named, slow_fraction=DEGRADED_FRACTION)
    if name == "flapping":
        half = FLAP_PERIOD_PACKETS * packet_s / 2
        count = max(2, int((horizon_s - fail) / half))
        return Scenario(name, tuple(Action(fail + i * half, i % 2 == 1, (link,))
                                    for i in range(count)), target=named)
    if name == "spine-down":
        top = link[1] if link[1] in top_tier(graph) else top_tier(graph)[0]
        links = tuple((top, n) for n in sorted(graph.neighbors(top), key=lambda n:
                                                fg.port(graph, top, n)))
        return Scenario(name, (Action(fail, False, links),), target=top)
    raise ValueError(f"unknown scenario {name!r} (known: {', '.join(SCENARIOS)})")


def run_row(scenario: Scenario, injection: Injection, rows: list[dict[str, Any]],
            size: int, ranks: list[str], host_mbps: float,
            connection_of: Mapping[str, Hashable] | None = None) -> dict[str, Any]:
    """The measured fields of one run's runs.csv row (pure); slowdowns are added
    once the healthy run of the same policy and seed is known. ``connection_of``:
    transfer id -> its connection, for the reroute and stall times."""
    starts = [r["send_start"] for r in rows if r.get("send_start") is not None]
    complete = bool(rows) and all(r.get("fct_s") is not None for r in rows)
    span = span_s(rows)
    busbw = (collectives.busbw(COLLECTIVE, len(ranks), size, span) * 8 / 1e6 / host_mbps
             if span else None)
    return {"time_s": round(span, 4) if span else None,
            "busbw_frac": round(busbw, 4) if busbw else None,
            "cut_at_s": (round(first_cut(injection) - min(starts), 3)
                         if first_cut(injection) is not None and starts else None),
            "controller_ms": controller_ms(injection.controller_events, first_cut(injection)),
            "reroute_ms": reroute_ms(rows, first_cut(injection), connection_of),
            "stall_ms": stall_ms(rows, connection_of),
            "timeouts": transport_losses(rows)["rto"],
            "lost_bytes": lost_bytes(rows),
            "drop_frac": transport_losses(rows)["drop_frac"],
            "cuts": sum(1 for _, up, _ in injection.events if not up),
            "complete": complete}


def add_slowdowns(rows: list[dict[str, Any]]) -> None:
    """``slowdown``: each run's time over the healthy run of its policy and seed."""
    healthy = {(r["policy"], r["seed"]): r["time_s"] for r in rows
               if r["scenario"] == "healthy"}
    for row in rows:
        base = healthy.get((row["policy"], row["seed"]))
        row["slowdown"] = (round(row["time_s"] / base, 4)
                           if row["time_s"] and base else None)


# --- run -----------------------------------------------------------------------------------

def ring_ranks(graph: nx.Graph, seed: int) -> list[str]:
    """Every compute host, in a seeded random ring order."""
    return rank_hosts(graph, placement="random", seed=seed)


def estimate_duration_s(graph: nx.Graph, quick: bool, seeds: int | None = None,
                        policies: tuple[str, ...] = POLICIES) -> float:
    """Wall-clock estimate (pure): a run at half the line rate, slower ones twice that."""
    count = seeds or (1 if quick else 5)
    ranks = len(fg.nodes_with_role(graph, "host"))
    mbps = default_host_mbps(graph)
    t_line = sizing.seconds_of(BUFFER_PACKETS[quick] * collectives.busbw_factor(COLLECTIVE, ranks),
                               TransportSpec("roce"), mbps)
    per_policy = BRINGUP_S + count * sum(RUN_OVERHEAD_S + (4 if s == "degraded" else 2) * t_line
                                         for s in SCENARIOS)
    return len(policies) * per_policy


def _schedules(graph: nx.Graph, policy: str, seeds: list[int], size: int, host_mbps: float,
               packet_s: float) -> Iterator[Scheduled]:
    """Per seed, every scenario of one policy's bring-up, each with its injector."""
    for seed in seeds:
        ranks = ring_ranks(graph, seed)
        # RDMA's service class, as RoCE deployments mark it: lossless under a preset
        transfers = collectives.generate(COLLECTIVE, ranks, size, dscp=DSCP_COLLECTIVE)
        t_line = line_rate_s(len(ranks), size, host_mbps)
        for name in SCENARIOS:
            scenario = make_scenario(name, graph, ranks, t_line, DEADLINE_FACTOR * t_line,
                                     packet_s)
            injection = Injection(scenario)
            yield Scheduled({"scenario": name, "policy": policy, "seed": seed}, transfers, seed,
                            {"injection": injection, "ranks": ranks, "transfers": transfers},
                            during=lambda e, plan, i=injection: inject(e, plan, i))


def _row_function(runner: Runner, graph: nx.Graph, emu: Emulation, spec: str, size: int,
                  payload: int, overhead: ideal.Overhead) -> Any:
    """The row of a run beside its ideal; its delivery timeline goes to timeline.csv."""
    used = emu.report.rate_plan.host_mbps
    base = ideal.link_capacity(graph, dict(emu.report.rate_plan.link_mbps))
    timeline = runner.table("timeline")

    def row_of(run: Scheduled, result: Any, report: dict[str, Any]) -> dict[str, Any]:
        c = run.context
        injection: Injection = c["injection"]
        rows = result.transfer_rows()
        row = run_row(injection.scenario, injection, rows, size, c["ranks"], used,
                      {t.id: t.connection for t in c["transfers"]})
        start = min((r["send_start"] for r in rows if r.get("send_start")),
                    default=result.plan.start_at)
        events = [(t - start, up, links) for t, up, links in injection.events]
        healthy = ideal_time_s(graph, c["transfers"], base, overhead)
        failed = ideal_time_s(graph, c["transfers"], base, overhead, injection.scenario,
                              events, injection.slow_mbps)
        cut = first_cut(injection)
        bin_s = TIMELINE_BIN_PACKETS * emu.report.rate_plan.packet_s
        timeline.extend({**run.keys, "t_s": t, "mbps": round(n * (payload * 8 / 1e6) / bin_s, 4)}
                        for t, n in delivery_timeline(rows, cut if cut is not None else start,
                                                      bin_s))
        return {"topology": spec, "host_mbps": used, "size_bytes": size,
                "target": injection.scenario.target, **row,
                "ideal_time_s": round(failed, 4), "ideal_slowdown": round(failed / healthy, 4),
                "injector_errors": "; ".join(injection.errors) or None,
                "valid": bool(report["valid"] and row["complete"] and not injection.errors)}

    return row_of


# --- plot ------------------------------------------------------------------------------------

def _present(runs: list[dict]) -> tuple[list[str], list[str]]:
    """The failure scenarios and the policies of a run directory."""
    return ([s for s in SCENARIOS[1:] if any(r["scenario"] == s for r in runs)],
            [p for p in ROUTING_POLICIES if any(r["policy"] == p for r in runs)])


ENTROPY_WORDS = {"recycle": "recycling the ports echoed as uncongested",
                 "packet": "the next port per packet (ports in turn)"}


def entropy_label(mode: str | None) -> str:
    """What the figure says of the spraying senders' entropy mode (empty: not recorded)."""
    if not mode:
        return ""
    default = " (the default)" if mode == SPRAY_ENTROPY.default else " (not the default)"
    return (f"spray, adaptive: entropy {mode}{default}, "
            f"{ENTROPY_WORDS.get(mode, 'as named')}; ecmp: one port per flow")


def _timeline(data: RunData) -> list[dict[str, str]]:
    """timeline.csv's rows (none in a directory without it)."""
    return data.csv("timeline") if (data.run_dir / "timeline.csv").exists() else []


def slowdown_figure(data: RunData) -> Any:
    """Slowdown per scenario and policy with spread and the ideal (left) and, when the
    run recorded its delivery timeline, the delivered rate around the first cut of a
    link-down run (right); the title names the spraying senders' entropy mode."""
    runs = data.runs
    scenarios, policies = _present(runs)
    timeline = _timeline(data)
    shown = next((s for s in TIMELINE_SCENARIOS if s in scenarios
                  and any(r["scenario"] == s for r in timeline)), None)
    bars_width = 1.6 + 1.2 * len(scenarios)
    if shown:
        fig, (ax, rate) = data.plt.subplots(1, 2, figsize=(bars_width + 3.4, 2.9),
                                            width_ratios=[bars_width, 3.4])
        _timeline_panel(rate, timeline, shown, policies)
    else:
        fig, ax = data.plt.subplots(figsize=(bars_width, 2.9))
    _slowdown_panel(ax, runs, scenarios, policies)
    note = entropy_label(data.provenance.entropy)
    fig.suptitle("ring all-reduce under a failure" + (f"\n{note}" if note else ""),
                 fontsize=8)
    # one legend for both panels (the policies' colours are the same), beside them
    (rate if shown else ax).legend(*ax.get_legend_handles_labels(), loc="upper left",
                                   bbox_to_anchor=(1.0, 1.0))
    return fig


def _slowdown_panel(ax: Any, runs: list[dict], scenarios: list[str], policies: list[str]
                    ) -> None:
    """Each policy's slowdown per scenario: spread bars, each run's ideal as a tick."""
    width = 0.8 / max(1, len(policies))
    for j, policy in enumerate(policies):
        for i, scenario in enumerate(scenarios):
            mine = [r for r in runs if r["scenario"] == scenario and r["policy"] == policy]
            values = [v for v in (as_float(r.get("slowdown")) for r in mine) if v is not None]
            x = i + (j - (len(policies) - 1) / 2) * width
            if values:
                plotstyle.spread_bar(ax, x, values, plotstyle.colour(policy, j),
                                     width=width * 0.9, label=policy if i == 0 else None)
            ideals = [v for v in (as_float(r.get("ideal_slowdown")) for r in mine)
                      if v is not None]
            plotstyle.ideal_ticks(ax, x + width * 0.3, ideals,
                                  "ideal (capacity left)" if i == j == 0 else None)
            plotstyle.mark_incomplete(ax, x, len(mine) - len(values), rotation=90)
    ax.axhline(1.0, color="black", linewidth=0.6)
    ax.set_xticks(range(len(scenarios)), scenarios)
    ax.set_ylabel("iteration time / healthy")
    ax.set_ylim(bottom=0)
    ax.set_title("slowdown per scenario (bars: mean, dots: seeds)")


def _timeline_panel(ax: Any, timeline: list[dict[str, str]], scenario: str,
                    policies: list[str]) -> None:
    """Every policy's delivered rate around the first cut of ``scenario`` (the lowest
    seed's run): the cut at 0."""
    seed = min(int(r["seed"]) for r in timeline if r["scenario"] == scenario)
    for j, policy in enumerate(policies):
        pts = [(float(r["t_s"]), float(r["mbps"])) for r in timeline
               if r["scenario"] == scenario and r["policy"] == policy and int(r["seed"]) == seed]
        if pts:
            ax.plot([t for t, _ in pts], [m for _, m in pts], linewidth=0.9,
                    color=plotstyle.colour(policy, j), label=policy)
    ax.axvline(0.0, color="black", linewidth=0.6, linestyle="--")
    ax.set_ylim(bottom=0)
    ax.set_ylabel("delivered (Mbit/s)")
    ax.set_xlabel("seconds since the first cut")
    ax.set_title(f"{scenario}: delivered, all receivers (seed {seed})", fontsize=8)


def timeline_figure(data: RunData) -> Any:
    """Delivered rate of every policy around the first cut of each failure scenario
    (nothing to draw without a timeline or a cut)."""
    scenarios, policies = _present(data.runs)
    timeline = _timeline(data)
    shown = [s for s in TIMELINE_SCENARIOS if s in scenarios
             and any(r["scenario"] == s for r in timeline)]
    if not shown:
        return None
    fig, axes = data.plt.subplots(len(shown), 1, figsize=(4.6, 1.5 * len(shown) + 0.6),
                                  sharex=True, squeeze=False)
    for ax, scenario in zip(axes[:, 0], shown):
        _timeline_panel(ax, timeline, scenario, policies)
        ax.set_xlabel("")
        ax.set_ylabel("Mbit/s")
    axes[-1, 0].set_xlabel("seconds since the first cut")
    axes[0, 0].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    note = entropy_label(data.provenance.entropy)
    if note:
        fig.suptitle(note.replace("; ", "\n"), fontsize=7)
    return fig


# --- the experiment --------------------------------------------------------------------------


class Failures(Experiment):
    """A ring all-reduce under each policy while a link fails, flaps or slows."""

    name = NAME
    question = QUESTION
    default_topology = "rail-clos"
    modes = {"quick": Mode(seeds=1), "full": Mode(seeds=5)}
    options = ROCE_OPTIONS + (POLICIES_OPTION,)
    anchors = ANCHORS

    def check(self, ctx: RunContext) -> None:
        """Refuse a fabric without a second path around the failed link (pure)."""
        spec = self.topologies(ctx)[0]
        graph = topologies.build(spec)
        if len(fg.nodes_with_role(graph, "host")) < 2:
            raise ScheduleError(f"{NAME}: {spec} has fewer than two compute hosts")
        if len(top_tier(graph)) < 2:
            raise ScheduleError(f"{NAME}: {spec} has {len(top_tier(graph))} top-tier "
                                f"switch(es); losing one needs another")
        for seed in range(ctx.seeds or 1):
            ranks = ring_ranks(graph, seed)
            for name in SCENARIOS:
                make_scenario(name, graph, ranks, 1.0, 2.0, 1e-3)

    def run_count(self, ctx: RunContext) -> int:
        return len(chosen_policies(ctx, POLICIES)) * len(self.seeds(ctx)) * len(SCENARIOS)

    def estimate_s(self, ctx: RunContext) -> float:
        return estimate_duration_s(self.graph(ctx), ctx.quick, len(self.seeds(ctx)),
                                   chosen_policies(ctx, POLICIES))

    def measure(self, ctx: RunContext, runner: Runner) -> Measured:
        """One bring-up per policy; per seed, the healthy run and every scenario."""
        spec = self.topologies(ctx)[0]
        graph = topologies.build(spec)
        packet_bytes = ctx.roce().packet_bytes
        host_mbps = ctx.host_mbps or default_host_mbps(
            graph, packet_bytes=packet_bytes, headroom=capacity.ROCE_RATE_HEADROOM)
        overhead = ideal.transport_overhead("roce", ctx.get(ROCE_MTU))
        for policy in chosen_policies(ctx, POLICIES):
            with runner.bring_up(graph, policy=policy, host_mbps=host_mbps,
                                 packet_bytes=packet_bytes) as emu:
                used = emu.report.rate_plan.host_mbps
                transport = ctx.roce(entropy=ctx.get(SPRAY_ENTROPY) if sprays(policy)
                                     else "flow", entropy_ports=256, timeline=True)
                size = sizing.bytes_of(BUFFER_PACKETS[ctx.quick], transport)
                runner.run(emu, _schedules(graph, policy, self.seeds(ctx), size, used,
                                           emu.report.rate_plan.packet_s),
                           transport, policy,
                           _row_function(runner, graph, emu, spec, size, transport.mtu_payload,
                                         overhead),
                           deadline_s=DEADLINE_FACTOR * line_rate_s(
                               len(ring_ranks(graph, 0)), size, used))
        return Measured(
            {"topology": spec, "policies": chosen_policies(ctx, POLICIES),
             "scenarios": SCENARIOS,
             "collective": COLLECTIVE, "placement": "random", "transport": "roce",
             "cc": ctx.get(CC), "roce_mtu": ctx.get(ROCE_MTU),
             "spray_entropy": ctx.get(SPRAY_ENTROPY),
             "work": {"buffer_packets": BUFFER_PACKETS[ctx.quick],
                      "flap_period_packet_times": FLAP_PERIOD_PACKETS,
                      "timeline_bin_packet_times": TIMELINE_BIN_PACKETS,
                      "payload_bytes": ctx.roce().payload_bytes},
             "fail_at": FAIL_AT, "down_for": DOWN_FOR,
             "degraded_fraction": DEGRADED_FRACTION, "host_mbps": ctx.host_mbps or "auto"},
            {"topology": spec})

    def finish(self, rows: list[dict[str, Any]]) -> None:
        add_slowdowns(rows)

    def table(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Per scenario and policy: mean and spread of the slowdown beside the ideal, the
        worst reroute and stall, and every timeout and lost byte."""
        table = []
        for scenario in SCENARIOS:
            for policy in ROUTING_POLICIES:
                group = [r for r in rows if r["scenario"] == scenario and r["policy"] == policy]
                if not group:
                    continue

                def values(name: str) -> list[float]:
                    return [float(r[name]) for r in group if r.get(name) not in (None, "")]

                slow, ideal_slow = values("slowdown"), values("ideal_slowdown")
                reroute, stall = values("reroute_ms"), values("stall_ms")
                table.append({"scenario": scenario, "policy": policy, "seeds": len(group),
                              "slowdown": round(statistics.fmean(slow), 3) if slow else None,
                              "slowdown_max": max(slow, default=None),
                              "ideal_slowdown": (round(statistics.fmean(ideal_slow), 3)
                                                 if ideal_slow else None),
                              "busbw_frac": (round(statistics.fmean(values("busbw_frac")), 3)
                                             if values("busbw_frac") else None),
                              "reroute_ms": max(reroute, default=None),
                              "stall_ms": max(stall, default=None),
                              "timeouts": int(sum(values("timeouts"))),
                              "lost_bytes": int(sum(values("lost_bytes"))),
                              "incomplete": len(group) - len(values("time_s"))})
        return table

    def notes(self, ctx: RunContext, rows: list[dict[str, Any]], measured: Measured
              ) -> list[str]:
        return ["slowdown: iteration time over the healthy run of the same policy and seed; "
                "ideal_slowdown: a perfect transport routing over the live paths in proportion "
                "to their capacity, with the measured failure times",
                "reroute_ms: cut to the first packet sent after it that arrived (worst "
                "connection in progress); stall_ms: longest gap in a connection's delivery "
                "while it owed data"]

    def checks(self, rows: list[dict[str, Any]]) -> list[fidelity.Check]:
        """The injector changed every link on time, in every run."""
        failed = [r for r in rows if r.get("injector_errors")]
        return [fidelity.Check("injector_ok", len(failed), 0, not failed,
                               "; ".join(str(r["injector_errors"]) for r in failed[:3])
                               or "every action applied")]

    def figures(self) -> Mapping[str, Any]:
        return {"slowdown": slowdown_figure, "timeline": timeline_figure}


EXPERIMENT = Failures()
