"""The failures experiment without root: scenarios and their timelines, the
measurements on hand-worked arrival records, the ideal slowdown, and run() with
its figures against a fake fabric that records what was done to it."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

import topologies
from experiments import EXPERIMENTS, failures
from fabric.experiment import RunContext, faults
from fabric.analysis import disruption, results
from fabric.cli.run import format_table
from fabric.emulation import fidelity
from fabric.model import graph as fg
from fabric.traffic import ideal
from fabric.traffic.model import Plan, ScheduleError, Transfer
from tests import fake_emulation

PACKET_S = 0.0025  # a packet time of the host link: flaps every 0.5 s


@pytest.fixture(scope="module")
def rail():
    return topologies.build("rail-clos")


def test_registered():
    assert EXPERIMENTS["failures"] == "experiments.failures"


# --- scenarios -----------------------------------------------------------------------

def test_each_scenario_touches_an_uplink_of_the_first_ranks_leaf(rail):
    ranks = failures.ring_ranks(rail, 0)
    leaf = next(iter(rail.neighbors(ranks[0])))
    link = failures.victim_link(rail, ranks)
    assert link[0] == leaf and rail.nodes[link[1]]["role"] == "spine"
    down = failures.make_scenario("link-down", rail, ranks, t_line=4.0, horizon_s=40.0,
                                  packet_s=PACKET_S)
    assert [(a.at, a.up, a.links) for a in down.actions] == [
        (1.0, False, (link,)), (pytest.approx(2.6), True, (link,))]
    slow = failures.make_scenario("degraded", rail, ranks, 4.0, 40.0, PACKET_S)
    assert slow.actions == () and slow.slow == (link,) and slow.links == (link,)
    assert failures.make_scenario("healthy", rail, ranks, 4.0, 40.0, PACKET_S).links == ()


def test_flapping_alternates_every_half_period_until_the_horizon(rail):
    ranks = failures.ring_ranks(rail, 0)
    flap = failures.make_scenario("flapping", rail, ranks, t_line=4.0, horizon_s=5.0,
                                  packet_s=PACKET_S)
    assert [a.up for a in flap.actions] == [False, True] * 4
    gaps = [b.at - a.at for a, b in zip(flap.actions, flap.actions[1:])]
    assert gaps == pytest.approx([failures.FLAP_PERIOD_PACKETS * PACKET_S / 2] * 7)
    assert flap.actions[0].at == pytest.approx(1.0)


def test_spine_down_cuts_every_link_of_one_spine_at_once(rail):
    ranks = failures.ring_ranks(rail, 0)
    lost = failures.make_scenario("spine-down", rail, ranks, 4.0, 40.0, PACKET_S)
    (action,) = lost.actions
    assert not action.up and {a for a, _ in action.links} == {lost.target}
    assert {b for _, b in action.links} == set(rail.neighbors(lost.target))


def test_a_fat_tree_loses_a_core(rail):
    graph = topologies.build("fat-tree")
    lost = failures.make_scenario("spine-down", graph, failures.ring_ranks(graph, 0), 4.0, 40.0,
                                  PACKET_S)
    assert graph.nodes[lost.target]["role"] == "core"


def test_unknown_scenario_and_fabrics_without_a_second_path_are_refused(rail, tmp_path):
    with pytest.raises(ValueError, match="unknown scenario"):
        failures.make_scenario("meteor", rail, failures.ring_ranks(rail, 0), 4.0, 40.0, PACKET_S)
    with pytest.raises(ScheduleError, match="top-tier"):
        failures.EXPERIMENT.check(RunContext(tmp_path, topo="leaf-spine,spines=1"))
    failures.EXPERIMENT.check(RunContext(tmp_path))  # the default fabric is fine


# --- measurements ----------------------------------------------------------------------

def _row(tid, start, end, arrivals, nbytes=3000, received=None):
    return {"id": tid, "bytes": nbytes, "send_start": start, "recv_end": end,
            "recv_bytes": nbytes if received is None else received,
            "fct_s": None if end is None else end - start,
            "recv_arrivals": [[a, s] for a, s in arrivals]}


def test_reroute_is_the_first_packet_sent_after_the_cut_that_arrived():
    cut = 10.0
    rows = [
        # on the cut path: what it sent at 10.00-10.10 was lost; 10.15 got through
        _row("a", 9.0, 11.0, [(9.9, 9.89), (10.2, 10.15), (10.3, 10.25)]),
        # on another path: its next packet after the cut went straight through
        _row("b", 9.5, 11.0, [(10.01, 10.004), (10.05, 10.04)]),
        _row("done", 8.0, 9.5, [(9.4, 9.3)]),          # finished before the cut
        _row("later", 10.5, 11.0, [(10.9, 10.8)]),     # started after it
    ]
    assert disruption.reroute_ms(rows, cut) == pytest.approx(150.0)
    assert disruption.reroute_ms(rows, None) is None
    assert disruption.reroute_ms(rows[2:], cut) is None


def test_stall_is_the_longest_gap_in_any_transfers_delivery():
    rows = [_row("a", 1.0, 2.0, [(1.05, 1.0), (1.1, 1.05), (1.6, 1.55), (2.0, 1.95)]),
            _row("b", 1.0, 1.5, [(1.3, 1.2), (1.5, 1.45)])]   # 300 ms to its first packet
    assert disruption.stall_ms(rows) == pytest.approx(500.0)
    assert disruption.stall_ms([{"send_start": 1.0}]) is None


def test_a_transfer_queued_behind_another_on_its_connection_is_not_stalled():
    # b is ready at 1.0 but its connection sends a until 2.0: b's first packet at 2.1 is
    # 100 ms after the connection's last arrival, not 1.1 s after b became ready
    rows = [_row("a", 1.0, 2.0, [(1.2, 1.1), (1.6, 1.5), (2.0, 1.9)]),
            _row("b", 1.0, 2.5, [(2.1, 2.0), (2.5, 2.4)])]
    same = {"a": "qp", "b": "qp"}
    assert disruption.stall_ms(rows, same) == pytest.approx(400.0)
    assert disruption.stall_ms(rows) == pytest.approx(1100.0)  # each transfer alone
    # an idle connection that gets a transfer waits from its start
    idle = [_row("a", 1.0, 1.2, [(1.2, 1.1)]), _row("b", 3.0, 3.5, [(3.5, 3.4)])]
    assert disruption.stall_ms(idle, {"a": "qp", "b": "qp"}) == pytest.approx(500.0)


def test_reroute_counts_a_connection_once_with_its_queued_transfers():
    cut = 10.0
    # a is sending at the cut; b, queued behind it, sends only from 10.6 on
    rows = [_row("a", 9.0, 10.5, [(9.9, 9.8), (10.2, 10.05), (10.5, 10.4)]),
            _row("b", 9.5, 11.0, [(10.7, 10.6), (11.0, 10.9)])]
    assert disruption.reroute_ms(rows, cut, {"a": "qp", "b": "qp"}) == pytest.approx(50.0)
    assert disruption.reroute_ms(rows, cut) == pytest.approx(600.0)


def test_lost_bytes_counts_what_never_arrived():
    rows = [_row("a", 1.0, 2.0, [], nbytes=3000), _row("b", 1.0, None, [], 3000, received=1000)]
    assert disruption.lost_bytes(rows) == 2000


def test_controller_reaction_is_its_first_route_update_for_a_port_down():
    events = [{"time": 9.0, "what": "r0l0 port 5 down: updated 3 switches"},
              {"time": 10.02, "what": "r0l0 weights: updated 1 switches"},
              {"time": 10.03, "what": "sp0 port 1 down: updated 5 switches"}]
    assert disruption.controller_ms(events, 10.0) == pytest.approx(30.0)
    assert disruption.controller_ms(events, None) is None
    assert disruption.controller_ms(events[:2], 10.0) is None


def test_delivery_timeline_bins_every_arrival_and_keeps_empty_bins():
    rows = [_row("a", 0.0, 1.0, [(10.01, 0), (10.02, 0), (10.16, 0)]),
            _row("b", 0.0, 1.0, [(9.97, 0)])]
    assert disruption.delivery_timeline(rows, origin=10.0, bin_s=0.05) == [
        (-0.05, 1), (0.0, 2), (0.05, 0), (0.1, 0), (0.15, 1)]


def test_slowdown_is_against_the_healthy_run_of_the_same_policy_and_seed():
    rows = [{"scenario": "healthy", "policy": "ecmp", "seed": 0, "time_s": 2.0},
            {"scenario": "link-down", "policy": "ecmp", "seed": 0, "time_s": 3.0},
            {"scenario": "healthy", "policy": "spray", "seed": 0, "time_s": 1.0},
            {"scenario": "link-down", "policy": "spray", "seed": 0, "time_s": 1.5},
            {"scenario": "link-down", "policy": "spray", "seed": 1, "time_s": 1.5},
            {"scenario": "degraded", "policy": "ecmp", "seed": 0, "time_s": None}]
    failures.add_slowdowns(rows)
    assert [r["slowdown"] for r in rows] == [1.0, 1.5, 1.0, 1.5, None, None]


# --- the ideal slowdown ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def small():
    # two leaves of one host each, two spines; every link 10 Mbit/s
    graph = topologies.build("leaf-spine,leaves=2,spines=2,hosts_per_leaf=1")
    return graph, ideal.link_capacity(graph, {frozenset(e): 10.0 for e in graph.edges})


def _ideal(graph, base, scenario=None, events=(), slow=None):
    transfers = [Transfer("x", "l0h0", "l1h0", 1_250_000)]   # 10 Mbit
    return faults.ideal_time_s(graph, transfers, base, ideal.Overhead(), scenario,
                                 list(events), slow)


def test_ideal_with_a_spare_path_is_bound_by_the_host_link(small):
    graph, base = small
    healthy = _ideal(graph, base)
    assert healthy == pytest.approx(1.0)
    cut = faults.Scenario("link-down", (), target="l0-s0")
    # one of two uplinks lost at 0.5 s: the other still carries the whole 10 Mbit/s
    assert _ideal(graph, base, cut, [(0.5, False, (("l0", "s0"),))]) == pytest.approx(1.0)


def test_ideal_slows_when_the_remaining_capacity_is_below_the_demand(small):
    graph, base = small
    half = dict(base)
    for a, b in graph.edges:
        if fg.is_switch(graph, a) and fg.is_switch(graph, b):
            half[(a, b)] = half[(b, a)] = 5.0   # two 5 Mbit/s paths: 10 in all
    assert _ideal(graph, half) == pytest.approx(1.0)
    # one path down at 0.5 s: the last 5 Mbit go at 5 Mbit/s, ending at 1.5 s
    cut = faults.Scenario("link-down")
    assert _ideal(graph, half, cut, [(0.5, False, (("l0", "s0"),))]) == pytest.approx(1.5)
    # one path at a quarter (1.25 Mbit/s) from the start: 6.25 Mbit/s, 1.6 s
    slow = faults.Scenario("degraded", slow=(("l0", "s0"),))
    assert _ideal(graph, half, slow, slow=1.25) == pytest.approx(1.6)


def test_the_injector_keeps_controller_events_the_status_window_dropped():
    link = (("r0l0", "sp0"),)

    class WindowOfOne:
        """A controller status that, like a busy real one, shows only its last event."""

        report = SimpleNamespace(rate_plan=SimpleNamespace(link_mbps={}))

        def __init__(self):
            self.events = []
            self.links = SimpleNamespace(set_state=self.set_state)
            self.controller = SimpleNamespace(wait_until_healed=lambda: None,
                                              status=lambda: {"events": self.events[-1:]})

        def set_state(self, links, up):
            self.events.append({"time": time.time() + 0.005,  # the controller reacts
                                "what": f"r0l0 port 5 {'up' if up else 'down'}: updated 1"})

    emu = WindowOfOne()
    scenario = faults.Scenario("flapping", tuple(
        faults.Action(0.02 * i, i % 2 == 1, link) for i in range(4)))
    injection = faults.Injection(scenario)
    plan = SimpleNamespace(start_at=time.time())
    with faults.inject(emu, plan, injection):
        time.sleep(0.2)
    acted = emu.events[:len(scenario.actions)]   # then the injector restores the link
    assert injection.controller_events == acted
    cut = faults.first_cut(injection)
    assert disruption.controller_ms(injection.controller_events, cut) < 10.0  # the first cut's
    assert faults.merge_events(emu.events[:2], emu.events[1:]) == emu.events


# --- run() against a fake fabric ------------------------------------------------------------

class FakeEmulation(fake_emulation.FakeEmulation):
    """Records link actions; no system is touched."""

    actions: list = []

    def __init__(self, graph, options):
        super().__init__(graph, options)
        actions = FakeEmulation.actions
        self.links = SimpleNamespace(
            set_state=lambda links, up: actions.append(("up" if up else "down", tuple(links))),
            set_rate=lambda a, b, mbps: actions.append(("rate", ((a, b),), mbps)))
        self.controller = SimpleNamespace(
            save_log=lambda path: False,
            wait_until_healed=lambda: actions.append(("healed",)),
            status=lambda: {"events": [{"time": time.time(),
                                        "what": "r0l0 port 5 down: updated 2 switches"}]})


def _fake_traffic(emu, transfers, transport, workdir, seed, deadline_s=120.0, during=None):
    assert transport.timeline, "failures needs the receivers' arrival records"
    hosts = {ep: [] for ep in fg.endpoints(emu.graph)}
    plan = Plan(list(transfers), hosts, transport, time.time() - 1.0)  # already started
    if during:  # (the unmeasured warm-up has none)
        with during(emu, plan):
            time.sleep(0.05)  # the injector acts on what is due
    t0 = plan.start_at
    rows = [{"id": t.id, "src": t.src, "dst": t.dst, "bytes": t.bytes, "recv_bytes": t.bytes,
             "send_start": t0, "recv_end": t0 + 2.0, "fct_s": 2.0, "send_rto_count": 0,
             "path": None,
             "send_packets_sent": 10, "recv_packets_received": 10,
             "recv_arrivals": [[t0 + 0.1 * k, t0 + 0.1 * k - 0.01] for k in range(1, 20)]}
            for t in transfers]
    return SimpleNamespace(transfer_rows=lambda: rows, errors=[], plan=plan, flow_control=[],
                           fidelity=[fidelity.Check("ovs_input_delay_ms", 0.1, 1.0, True)])


@pytest.mark.slow
def test_run_injects_restores_and_writes_rows_summary_and_figures(tmp_path, monkeypatch):
    FakeEmulation.actions = []
    monkeypatch.setattr(failures, "FAIL_AT", 0.0)   # every cut is due at once
    outcome = failures.EXPERIMENT.run(RunContext(tmp_path, quick=True),
                                      fake_emulation.backends(_fake_traffic,
                                                              emulation=FakeEmulation))
    assert outcome.fidelity["valid"] and outcome.seeds == [0]
    runs = results.read_csv(tmp_path / "runs.csv")
    assert [(r["scenario"], r["policy"]) for r in runs] == [
        (s, p) for p in failures.POLICIES for s in failures.SCENARIOS]
    assert all(r["valid"] == "True" and r["slowdown"] == "1.0" for r in runs)
    by = {(r["scenario"], r["policy"]): r for r in runs}
    assert by[("healthy", "ecmp")]["ideal_slowdown"] == "1.0"
    assert float(by[("spine-down", "ecmp")]["ideal_slowdown"]) > 1.0
    assert by[("link-down", "ecmp")]["cuts"] == "1" and by[("healthy", "ecmp")]["cuts"] == "0"
    assert by[("link-down", "spray")]["reroute_ms"] not in ("", None)
    # every cut link was restored, every slowed one set back, and the fabric healed
    downs = [a for a in FakeEmulation.actions if a[0] == "down"]
    ups = [a for a in FakeEmulation.actions if a[0] == "up"]
    assert downs and all(any(set(d[1]) <= set(u[1]) for u in ups) for d in downs)
    rates = [a[2] for a in FakeEmulation.actions if a[0] == "rate"]
    assert len(rates) == 2 * len(failures.POLICIES) and rates[0] == pytest.approx(rates[1] / 4)
    assert sum(a[0] == "healed" for a in FakeEmulation.actions) == len(runs)
    summary = results.read_json(tmp_path / "summary.json")
    assert summary["experiment"] == "failures" and summary["anchors"]
    assert "fidelity: valid" in format_table("failures", outcome)
    names = {p.name for p in failures.EXPERIMENT.plot(tmp_path)}
    assert {"slowdown.png", "timeline.png"} <= names


def test_quick_run_estimate_is_a_few_minutes(rail):
    assert 60 < failures.estimate_duration_s(rail, quick=True) < 600
    assert failures.estimate_duration_s(rail, quick=False) > failures.estimate_duration_s(
        rail, quick=True)


# --- the figures, from a synthetic run directory ----------------------------------------

def _failures_dir(run_dir, entropy):
    import json

    rows = [{"scenario": s, "policy": p, "seed": 0, "slowdown": 1.0 + i / 10,
             "ideal_slowdown": 1.05, "time_s": 3.0, "valid": True}
            for i, s in enumerate(failures.SCENARIOS) for p in failures.POLICIES]
    results.write_csv(run_dir / "runs.csv", rows)
    results.write_csv(run_dir / "timeline.csv", [
        {"scenario": s, "policy": p, "seed": 0, "t_s": t / 10, "mbps": 5.0}
        for s in failures.SCENARIOS for p in failures.POLICIES for t in range(-5, 30)])
    results.write_summary(run_dir, "failures", [], {"valid": True, "runs": len(rows),
                                                    "checks": []})
    (run_dir / "manifest.json").write_text(json.dumps({
        "experiment": "failures", "seeds": [0],
        "parameters": {"topology": "rail-clos", "transport": "roce", "roce_mtu": 4096,
                       "spray_entropy": entropy, "cc": "swift", "quick": True}}))


@pytest.mark.parametrize("entropy, says", [("packet", "entropy packet (not the default)"),
                                           ("recycle", "entropy recycle (the default)")])
def test_the_slowdown_figure_names_its_entropy_and_draws_the_rate_around_the_cut(
        tmp_path, entropy, says):
    from fabric.experiment import RunData

    _failures_dir(tmp_path, entropy)
    fig = failures.slowdown_figure(RunData.read(tmp_path))
    assert says in fig.get_suptitle() and "ecmp: one port per flow" in fig.get_suptitle()
    slowdown, rate = fig.axes
    assert [t.get_text() for t in slowdown.get_xticklabels()] == list(failures.SCENARIOS[1:])
    assert rate.get_title().startswith("link-down: delivered")   # the panel the text promises
    assert rate.get_xlabel() == "seconds since the first cut"
    assert {line.get_label() for line in rate.get_lines()} >= set(failures.POLICIES)
    paths = failures.EXPERIMENT.plot(tmp_path)
    assert {"slowdown.png", "timeline.png"} <= {p.name for p in paths}


def test_without_a_timeline_the_slowdown_figure_has_its_one_panel(tmp_path):
    from fabric.experiment import RunData

    _failures_dir(tmp_path, "recycle")
    (tmp_path / "timeline.csv").unlink()
    data = RunData.read(tmp_path)
    assert len(failures.slowdown_figure(data).axes) == 1
    assert failures.timeline_figure(data) is None
