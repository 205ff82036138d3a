"""Path monitors: entries that only count, whatever pipeline the controller built."""

from __future__ import annotations

import pytest

import topologies
from fabric.emulation.flowmon import (COOKIE_PREFIX, FlowKey, monitor_flow,
                                      parse_monitor_counts, path_from_switches)


def test_a_monitor_counts_marks_and_hands_the_packet_back_to_table_0():
    line = monitor_flow(5, FlowKey("10.0.0.1", "10.0.0.3", 17, 49152, 4791, dscp=26))
    match, actions = line.strip().split(",actions=")
    assert f"cookie={COOKIE_PREFIX | 5:#x}" in match and "table=0" in match
    assert "reg7=0" in match  # a marked packet does not match again
    assert {"udp", "nw_src=10.0.0.1", "nw_dst=10.0.0.3", "tp_src=49152", "tp_dst=4791",
            "ip_dscp=26"} <= set(match.split(","))
    # no routing or lane of its own: the controller's table 0 decides, as without it
    assert actions == "load:1->NXM_NX_REG7[],resubmit(,0)"
    assert "tp_src" not in monitor_flow(0, FlowKey("10.0.0.1", "10.0.0.3", 6, None, 5001))


def test_counts_and_paths_are_read_back():
    dump = (f" cookie={COOKIE_PREFIX | 3:#x}, duration=1s, table=0, n_packets=7, n_bytes=9\n"
            " cookie=0x0, duration=1s, table=0, n_packets=99, n_bytes=9\n")
    assert parse_monitor_counts(dump) == {3: 7}
    graph = topologies.build("leaf-spine,leaves=2,spines=2,hosts_per_leaf=2")
    assert path_from_switches(graph, "l0h0", "l1h0", {"l0", "s1", "l1"}) == [
        "l0h0", "l0", "s1", "l1", "l1h0"]
    with pytest.raises(ValueError):
        path_from_switches(graph, "l0h0", "l1h0", {"l0"})
    with pytest.raises(ValueError, match="more than one path"):  # split by the switches
        path_from_switches(graph, "l0h0", "l1h0", {"l0", "s0", "s1", "l1"})
