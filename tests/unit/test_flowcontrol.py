"""Link-level flow control's pure parts: settings, the daemon's config, gates' netlink
messages, shaping with gates, and reading what a run did (no root)."""

from __future__ import annotations

import socket
import struct

import pytest

import topologies
from fabric.emulation import flowcontrol, hostconfig, shaping
from fabric.host.tcgate import CLOSED_BYTES_PER_S, Gate, GateError, ack_error
from fabric.model.flowcontrol import (FlowControl, FlowControlError, leaf_limits,
                                      lossless_lanes, mmu_bytes, spare_headroom_pkts,
                                      watchdog_packets)
from fabric.model.lanes import THREE_LANES, LaneConfigError, lane_config_from_dict


@pytest.mark.parametrize("kwargs, message", [
    ({"headroom_pkts": 1}, "the reaction"), ({"reserve_pkts": -1}, "reserve_pkts"),
    ({"headroom_pkts": 8, "reaction_pkts": 6}, r"reaction \(6 packets\) and the 3 frames"),
    ({"reaction_pkts": -1}, "reaction_pkts"),
    ({"alpha_shift": 11}, "alpha_shift"), ({"buffer_pkts_per_port": 0}, "buffer_pkts"),
    ({"watchdog_ms": 0}, "watchdog_ms")])
def test_settings_that_cannot_work_are_refused(kwargs, message):
    with pytest.raises(FlowControlError, match=message):
        FlowControl(**kwargs)


def test_a_buffer_all_reserve_and_headroom_is_refused():
    with pytest.raises(FlowControlError, match="nothing of a 8-packet-per-port buffer"):
        mmu_bytes(FlowControl(buffer_pkts_per_port=8), 4154, ports=6, lossless_count=1,
                  queue_pkts=64)


def test_the_watchdog_is_100_ms_of_the_modelled_link():
    # 100 ms of 400 Gbit/s in 4154-byte frames: about 1.2 million packet times
    assert watchdog_packets(FlowControl(), 400, 4154) == pytest.approx(1.2037e6, rel=1e-3)


def test_lanes_say_whether_they_are_lossless():
    lanes = lane_config_from_dict({"lanes": [
        {"name": "rdma", "dscp": [26], "share": 0.6},
        {"name": "rest", "share": 0.4, "default": True, "lossless": False}]})
    assert lossless_lanes(lanes) == [0]
    assert lossless_lanes(THREE_LANES) == [0, 1, 2]
    with pytest.raises(LaneConfigError, match="true or false"):
        lane_config_from_dict({"lanes": [{"share": 1, "default": True, "lossless": "no"}]})


def test_every_link_into_a_switch_gets_an_id_and_its_sender_a_gate():
    graph = topologies.build("leaf-spine,leaves=2,spines=2,hosts_per_leaf=2")
    links = flowcontrol.directed_links(graph)
    into_switches = sum(graph.degree(sw) for sw in ("l0", "l1", "s0", "s1"))
    assert len(links) == into_switches == 12
    config = flowcontrol.daemon_config(
        graph, {ep: 100 + i for i, ep in enumerate(("l0h0", "l0h1", "l1h0", "l1h1"))},
        {frozenset(e): 6.0 for e in graph.edges}, FlowControl(), THREE_LANES, 64, 4154,
        "obj.o", "events.csv")
    by_id = {link["id"]: link for link in config["links"]}
    assert sorted(by_id) == list(range(1, 13))
    from_host = next(link for link in config["links"] if link["upstream"]["pid"] == 100)
    nic = graph.nodes["l0h0"]["nics"][0]["port"]
    assert from_host["upstream"]["dev"] == f"l0h0-eth{nic}"
    assert all(link["upstream"]["pid"] is None for link in config["links"]
               if not link["upstream"]["dev"].startswith(("l0h", "l1h")))
    ports = {p["dev"]: p for p in config["switch_ports"]}
    assert len(ports) == 12 and sum(p["from_switch"] for p in ports.values()) == 8
    assert config["lossless_mask"] == 0b111 and config["dscp_lane"][26] == 0
    assert config["dscp_lane"][10] == 1 and config["dscp_lane"][0] == 2
    assert [lane["handle"] >> 16 for lane in config["lanes"]] == [0x20, 0x21, 0x22]
    assert {s["index"] for s in config["switches"]} == {0, 1, 2, 3}
    # the reaction: 3 packet times of 4154 bytes at 6 Mbit/s
    assert [link["reaction_ns"] / 1e6 for link in config["links"]] == pytest.approx(
        [3 * 4154 * 8 / 6e6 * 1e3] * 12, abs=1e-6)


def test_a_switch_with_too_many_ports_is_refused():
    graph = topologies.build("leaf-spine,leaves=1,spines=1,hosts_per_leaf=40")
    with pytest.raises(FlowControlError, match="ports"):
        flowcontrol.directed_links(graph)


def test_leaves_of_lossless_lanes_hold_the_whole_buffer():
    graph = topologies.build("leaf-spine,leaves=2,spines=2,hosts_per_leaf=2")
    assert leaf_limits(graph, "l0", FlowControl(), 64, THREE_LANES) == {0: 256, 1: 256, 2: 256}
    assert leaf_limits(graph, "l0h0", FlowControl(), 64, THREE_LANES)[0] == 1024


def test_a_gate_closes_and_opens_by_one_netlink_message():
    gate = Gate(ifindex=7, parent=(1 << 16) | 1, handle=0x20 << 16, open_bytes_per_s=7_500_000,
                burst_bytes=9014, leaf_limit=256)
    closed, opened = gate.message(closed=True), gate.message(closed=False)
    length, kind, flags, _, _ = struct.unpack_from("=IHHII", closed)
    assert length == len(closed) and kind == 36 and flags == 0x5  # NEWQDISC, REQUEST|ACK
    # struct tcmsg: family and three bytes of padding, then ifindex, handle, parent, info
    assert closed[16] == socket.AF_UNSPEC and closed[17:20] == bytes(3)
    assert struct.unpack_from("=iIII", closed, 20) == (7, 0x20 << 16, 0x10001, 0)
    assert b"tbf\0" in closed
    # TCA_TBF_PARMS: the rate is the last field of the first tc_ratespec, then the limit
    rate_at = closed.index(b"tbf\0") + 4 + 4 + 4 + 8
    assert struct.unpack_from("=I", closed, rate_at)[0] == CLOSED_BYTES_PER_S
    assert struct.unpack_from("=I", opened, rate_at)[0] == 7_500_000
    assert struct.unpack_from("=I", closed, rate_at + 16)[0] == 256
    assert closed.endswith(struct.pack("=HHI", 8, 6, 9014))  # TCA_TBF_BURST


def test_netlink_acks_and_errors_are_read():
    ack = struct.pack("=IHHII", 36, 2, 0, 0, 0) + struct.pack("=i", 0) + bytes(16)
    refused = struct.pack("=IHHII", 36, 2, 0, 0, 0) + struct.pack("=i", -22) + bytes(16)
    assert ack_error(ack) == 0 and ack_error(refused) == 22
    with pytest.raises(GateError, match="type"):
        ack_error(struct.pack("=IHHII", 20, 3, 0, 0, 0) + bytes(4))


def test_lossless_lanes_are_gated_and_their_leaves_sized():
    lines = shaping.shape_lines("s0-eth1", 6.0, 64, THREE_LANES, {0: 256})
    assert "qdisc add dev s0-eth1 parent 1:1 handle 20: tbf rate 7500000bps burst 9014 " \
           "limit 9014" in lines
    assert "qdisc add dev s0-eth1 parent 20:1 handle a: pfifo_head_drop limit 256" in lines
    assert "qdisc add dev s0-eth1 parent 1:2 handle b: pfifo_head_drop limit 64" in lines


def test_under_flow_control_the_way_into_an_endpoint_is_shaped_at_the_switch():
    graph = topologies.build("leaf-spine,leaves=2,spines=2,hosts_per_leaf=2")
    rates = {frozenset(e): 6.0 for e in graph.edges}
    lossy = hostconfig.switch_tc_batch(graph, "l0", rates, 64, THREE_LANES)
    lossless = hostconfig.switch_tc_batch(graph, "l0", rates, 64, THREE_LANES,
                                          flow_control=FlowControl())
    assert "l0-eth1 root" not in lossy and "dev l0-eth1 root" in lossless
    assert "tbf" in lossless and "tbf" not in lossy
    host = hostconfig.endpoint_tc_batch(graph, "l0h0", rates, 64, THREE_LANES,
                                        flow_control=FlowControl())
    assert "ifb" not in host and "tbf" in host


def test_lossless_leaf_drops_are_read_from_tc():
    stats = ("qdisc htb 1: dev s0-eth1 root refcnt 2\n Sent 1 bytes (dropped 9, overlimits 0)\n"
             "qdisc tbf 20: dev s0-eth1 parent 1:1 rate 60Mbit\n Sent 1 bytes (dropped 0)\n"
             "qdisc pfifo_head_drop a: dev s0-eth1 parent 20:1 limit 256p\n"
             " Sent 5 bytes 1 pkt (dropped 3, overlimits 0 requeues 0)\n"
             "qdisc pfifo_head_drop b: dev s0-eth1 parent 1:2 limit 64p\n"
             " Sent 5 bytes 1 pkt (dropped 4, overlimits 0 requeues 0)\n")
    assert flowcontrol.lane_drops(stats, [0]) == {("s0-eth1", 0): 3}
    # an endpoint's NIC: the lane's ACK-first leaf holds a control FIFO beside the data's
    nic = ("qdisc tbf 20: dev h0-eth0 parent 1:1 rate 60Mbit\n Sent 1 bytes (dropped 0)\n"
           "qdisc htb 40: dev h0-eth0 parent 20:1 r2q 10 default 0x2\n"
           " Sent 9 bytes 2 pkt (dropped 7, overlimits 0 requeues 0)\n"
           "qdisc pfifo_head_drop 50: dev h0-eth0 parent 40:1 limit 256p\n"
           " Sent 1 bytes 1 pkt (dropped 2, overlimits 0 requeues 0)\n"
           "qdisc pfifo_head_drop a: dev h0-eth0 parent 40:2 limit 256p\n"
           " Sent 8 bytes 1 pkt (dropped 5, overlimits 0 requeues 0)\n")
    assert flowcontrol.lane_drops(nic, [0]) == {("h0-eth0", 0): 7}


def test_a_run_s_rows_are_the_links_that_paused_held_or_dropped():
    graph = topologies.build("leaf-spine,leaves=2,spines=2,hosts_per_leaf=2")
    zero = {"max_held_bytes": 0, "drops": 0, "drop_bytes": 0, "pause_events": 0, "pauses": 0,
            "paused_ns": 0, "watchdog_trips": 0, "reactions": 0, "reaction_sum_ns": 0,
            "reaction_max_ns": 0}
    before = {(1, 0): dict(zero), (2, 0): dict(zero)}
    after = {(1, 0): {**zero, "pauses": 2, "paused_ns": 500_000_000, "max_held_bytes": 41540,
                      "reactions": 2, "reaction_sum_ns": 3_000_000,
                      "reaction_max_ns": 2_000_000},
             (2, 0): dict(zero)}
    (row,) = flowcontrol.link_rows(graph, before, after, seconds=2.0, frame_bytes=4154)
    link = flowcontrol.directed_links(graph)[0]
    assert row == {"link": f"{link.src}>{link.dst}", "lane": 0, "pauses": 2,
                   "pause_share": 0.25, "max_held_pkts": 10.0, "drops": 0,
                   "watchdog_trips": 0, "reaction_mean_ms": 1.5, "reaction_max_ms": 2.0}


def test_a_pause_s_lateness_is_counted_in_packet_times_of_its_link_from_the_run_on():
    graph = topologies.build("leaf-spine,leaves=2,spines=2,hosts_per_leaf=2")
    config = flowcontrol.daemon_config(
        graph, {ep: 100 + i for i, ep in enumerate(("l0h0", "l0h1", "l1h0", "l1h1"))},
        {frozenset(e): 6.0 for e in graph.edges}, FlowControl(), THREE_LANES, 64, 4154,
        "obj.o", "events.csv")
    first, second = config["links"][:2]
    packet_ns = 4154 * 8 / 6e6 * 1e9
    modelled = first["reaction_ns"]

    def event(ns: int, link: dict, what: str, reaction: float | None) -> dict[str, str]:
        return {"ns": str(ns), "link": str(link["id"]), "lane": "0", "event": what,
                "held_bytes": "9000", "reaction_ns": "" if reaction is None else str(
                    int(reaction))}

    events = [event(10, first, "pause", modelled + 9 * packet_ns),  # before the run
              event(200, first, "pause", modelled + 0.5 * packet_ns),
              event(300, first, "pause", modelled + 2.5 * packet_ns),
              event(400, first, "resume", modelled + 7 * packet_ns),  # resumes do not count
              event(500, second, "ignored", None),
              event(600, second, "pause", modelled - 0.2 * packet_ns)]  # early: not late
    late = flowcontrol.pause_lateness(events, config["links"], since_ns=100)
    assert late == pytest.approx({(first["name"], 0): 2.5, (second["name"], 0): 0.0},
                                 abs=1e-6)
    assert flowcontrol.pause_lateness(events, config["links"], since_ns=10**9) == {}


def test_only_drops_on_a_link_whose_pause_came_too_late_are_the_machine_s():
    rows = [{"link": "s0>l0", "lane": 0, "drops": 4}, {"link": "s0>l0", "lane": 1, "drops": 2},
            {"link": "l0h0>l0", "lane": 0, "drops": 9}]
    late = {("s0>l0", 0): 2.5, ("s0>l0", 1): 2.0, ("l0h0>l0", 1): 7.0}
    assert flowcontrol.drops_behind_late_pauses(rows, late, spare_pkts=2) == 4
    assert flowcontrol.drops_behind_late_pauses(rows, late, spare_pkts=3) == 0


def test_the_spare_headroom_is_what_the_reaction_and_frames_in_flight_leave():
    assert spare_headroom_pkts(FlowControl()) == 2  # 8 - 3 - 3
    assert spare_headroom_pkts(FlowControl(headroom_pkts=12, reaction_pkts=4)) == 5


def test_the_lossless_dscps_are_their_lanes_and_the_default_lanes():
    from fabric.model.flowcontrol import lossless_dscps
    from fabric.model.presets import ALL_LOSSLESS, RDMA_LOSSLESS

    assert lossless_dscps(RDMA_LOSSLESS) == (26,)  # the rest: the lossy default lane
    assert lossless_dscps(ALL_LOSSLESS) == tuple(range(64))


def test_a_path_holds_the_whole_buffer_of_each_of_its_switches():
    import networkx as nx

    import topologies
    from fabric.model import graph as fg
    from fabric.model.flowcontrol import FlowControl, path_hold_pkts

    graph = topologies.build("leaf-spine")
    src, dst = fg.endpoints(graph)[0], fg.endpoints(graph)[-1]
    path = nx.shortest_path(graph, src, dst)
    switches = [n for n in path if fg.is_switch(graph, n)]
    assert len(switches) == 3  # leaf, spine, leaf
    fc = FlowControl(buffer_pkts_per_port=100)
    assert path_hold_pkts(graph, path, fc, 64) == sum(100 * graph.degree(s) for s in switches)
    assert path_hold_pkts(graph, path, FlowControl(), 64) == sum(
        64 * graph.degree(s) for s in switches)
