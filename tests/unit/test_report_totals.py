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
