"""A run's loss and congestion counters, summed over its agents' reports."""

from __future__ import annotations

from types import SimpleNamespace

from fabric.analysis.report import _totals


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
