"""A run's loss and congestion counters, summed over its agents' reports."""

from __future__ import annotations

from types import SimpleNamespace

from fabric.analysis.report import _totals, flow_control_summary


def test_totals_sum_kernel_tcp_roce_and_ecn_counters_over_agents():
    agents = {
        "a": {"netstat": {"TCPTimeouts": "2", "RetransSegs": "7"},
              "roce": {"retransmitted": 3, "ce_packets": 11, "cnps_sent": 4}},
        "b": {"netstat": {"RetransSegs": "1"}, "roce": {"ce_packets": 5, "cnps_sent": 2}},
        "c": {},  # an agent that wrote an empty report
    }
    result = SimpleNamespace(agents=agents, ingress_drops={"a": 6, "b": 0})
    assert _totals(result) == {"tcp_timeouts": 2, "tcp_retransmitted_segments": 8,
                               "roce_retransmitted": 3, "roce_ce_marked": 16,
                               "roce_cnps": 6, "ingress_drops": 6}


def test_flow_control_summary_totals_the_links_that_paused():
    rows = [{"link": "s0>l0", "lane": 0, "pauses": 3, "pause_share": 0.25, "max_held_pkts": 9.5,
             "drops": 0},
            {"link": "s0>l0", "lane": 1, "pauses": 1, "pause_share": 0.5, "max_held_pkts": 2.0,
             "drops": 0},
            {"link": "l1>s0", "lane": 0, "pauses": 0, "pause_share": 0.0, "max_held_pkts": 12.0,
             "drops": 1}]
    got = flow_control_summary(rows)
    assert (got["paused_links"], got["pauses"], got["pause_share_max"]) == (1, 4, 0.5)
    assert got["max_held_pkts"] == 12.0 and got["headroom_drops"] == 1
    assert got["links"] == rows[:2]
    assert flow_control_summary([])["paused_links"] == 0


def test_a_connections_pieces_in_flight_together_are_one_flow_not_a_collision():
    """Two pieces of one connection (a collective's steps, several in flight) on one path
    overlap in time but are one flow; a second connection on that link is a collision."""
    from fabric.analysis.report import flow_collisions
    from fabric.traffic.result import LinkSeries, TrafficResult
    from fabric.traffic.model import Plan, Transfer

    path = ["a", "l0", "s0", "l1", "b"]
    pieces = [Transfer("p0", "a", "b", 100), Transfer("p1", "a", "b", 100)]
    other = Transfer("q", "c", "d", 100)

    def run(transfers, spans, paths):
        agents = {"x": {"transfers": [
            rec for t in transfers for rec in (
                {"id": t.id, "role": "send", "start": spans[t.id][0]},
                {"id": t.id, "role": "recv", "end": spans[t.id][1]})]}}
        plan = Plan(transfers, {h: [] for h in "abcd"})
        return flow_collisions(TrafficResult(plan, agents, LinkSeries(), paths, {}, []))

    alone = run(pieces, {"p0": (0.0, 2.0), "p1": (1.0, 3.0)}, {"p0": path, "p1": path})
    assert (alone.count, alone.max_flows_per_link) == (0, 1)
    assert alone.active_seconds == 3.0
    shared = run(pieces + [other], {"p0": (0.0, 2.0), "p1": (1.0, 3.0), "q": (2.5, 4.0)},
                 {"p0": path, "p1": path, "q": ["c", "l0", "s0", "l1", "d"]})
    assert (shared.count, shared.max_flows_per_link) == (2, 2)  # l0>s0 and s0>l1
    assert shared.collision_seconds == 0.5
