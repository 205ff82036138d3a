"""The fluid ideal: hand-worked cases of max-min sharing, finishes and dependencies."""

from __future__ import annotations

import math
import random

import pytest

import topologies
from fabric.analysis.report import ideal_spans
from fabric.traffic.result import LinkSeries, TrafficResult
from fabric.traffic.ideal import (ROCE_DATA_OVERHEAD, Change, FluidTransfer, Overhead,
                                  ack_load, last_packet_bytes, link_capacity, max_min_rates,
                                  path_load, shortest_path, simulate, spray_load, store_and_forward_s,
                                  transport_overhead, weighted_multipath_load)
from fabric.traffic.model import Plan, Transfer, TransportSpec

MBIT = 125_000  # bytes


def _flow(fid, links, mbit, after=(), start=0.0, share=1.0, latency=0.0):
    return FluidTransfer(fid, int(mbit * MBIT), {link: share for link in links}, start, after,
                         latency)


def test_two_flows_on_one_link_share_it():
    spans = simulate([_flow("a", [("x", "y")], 10), _flow("b", [("x", "y")], 10)],
                     {("x", "y"): 10.0})
    assert spans["a"].end == pytest.approx(2.0) and spans["b"].end == pytest.approx(2.0)


def test_one_connections_transfers_go_in_order_not_side_by_side():
    # a and b on one queue pair: b waits for a's last byte, then has the link alone;
    # c, on another connection, shares the link with whichever is sending
    link = [("x", "y")]
    spans = simulate([FluidTransfer("a", 10 * MBIT, {link[0]: 1.0}, queue="q"),
                      FluidTransfer("b", 10 * MBIT, {link[0]: 1.0}, queue="q"),
                      FluidTransfer("c", 20 * MBIT, {link[0]: 1.0}, queue="other")],
                     {link[0]: 10.0})
    assert spans["a"].end == pytest.approx(2.0)
    assert spans["b"].start == pytest.approx(2.0) and spans["b"].end == pytest.approx(4.0)
    assert spans["c"].end == pytest.approx(4.0)


def test_a_delay_holds_a_dependent_back_after_its_dependency_ended():
    spans = simulate([_flow("a", [("x", "y")], 10),
                      FluidTransfer("b", 10 * MBIT, {("y", "x"): 1.0}, after=("a",),
                                    latency=0.0, delay=0.5)],
                     {("x", "y"): 10.0, ("y", "x"): 10.0})
    assert spans["b"].start == pytest.approx(1.5) and spans["b"].end == pytest.approx(2.5)


def test_after_start_holds_a_transfer_until_another_became_ready_and_the_seconds_passed():
    # b waits for a's end; c for b to be ready (a's end, 1 s) plus 0.25 s, and for d's end
    spans = simulate([_flow("a", [("x", "y")], 10),
                      _flow("b", [("y", "z")], 10, after=("a",)),
                      FluidTransfer("c", 10 * MBIT, {("z", "x"): 1.0}, after=("d",),
                                    after_start=("b", 0.25)),
                      _flow("d", [("w", "v")], 5)],
                     {("x", "y"): 10.0, ("y", "z"): 10.0, ("z", "x"): 10.0, ("w", "v"): 10.0})
    assert spans["b"].start == pytest.approx(1.0)
    assert spans["c"].start == pytest.approx(1.25) and spans["c"].end == pytest.approx(2.25)
    with pytest.raises(ValueError, match="unknown"):
        simulate([FluidTransfer("e", 1, {}, after_start=("nope", 0.0))], {})


def test_a_flow_with_two_bottlenecks_takes_the_tighter_and_leaves_the_rest():
    rates = max_min_rates({"a": {"l1": 1, "l2": 1}, "b": {"l1": 1}}, {"l1": 10.0, "l2": 4.0})
    assert rates == pytest.approx({"a": 4.0, "b": 6.0})


def test_a_flow_speeds_up_when_its_neighbour_finishes():
    # both at 5 until a (5 Mbit) ends at 1 s; b's last 10 Mbit then go at 10
    spans = simulate([_flow("a", [("x", "y")], 5), _flow("b", [("x", "y")], 15)],
                     {("x", "y"): 10.0})
    assert spans["a"].end == pytest.approx(1.0)
    assert spans["b"].end == pytest.approx(2.0)


def test_staggered_starts_and_dependencies():
    spans = simulate([_flow("a", [("x", "y")], 10), _flow("b", [("x", "y")], 10, after=("a",)),
                      _flow("c", [("y", "z")], 10, start=0.5)],
                     {("x", "y"): 10.0, ("y", "z"): 10.0})
    assert (spans["a"].start, spans["a"].end) == pytest.approx((0.0, 1.0))
    assert (spans["b"].start, spans["b"].end) == pytest.approx((1.0, 2.0))
    assert (spans["c"].start, spans["c"].end) == pytest.approx((0.5, 1.5))


def _instance(seed):
    """Flows over 2-4 of 12 links, with whole shares and capacities so that links fill
    at the same level (ties) as well as apart."""
    rng = random.Random(seed)
    links = [f"l{i}" for i in range(12)]
    capacity = {link: float(rng.randint(1, 6)) for link in links}
    loads = {f"f{i}": {link: float(rng.choice((1, 1, 2)))
                       for link in rng.sample(links, rng.randint(2, 4))}
             for i in range(30)}
    return loads, capacity


@pytest.mark.parametrize("seed", range(25))
def test_max_min_rates_are_feasible_and_every_flow_has_a_bottleneck(seed):
    # the definition of max-min fairness, checked without the algorithm: no link over
    # its capacity, and every flow crosses a full link on which no flow gets more
    loads, capacity = _instance(seed)
    rates = max_min_rates(loads, capacity)
    used = {link: sum(rates[f] * load.get(link, 0.0) for f, load in loads.items())
            for link in capacity}
    assert all(used[link] <= capacity[link] * (1 + 1e-9) for link in capacity)
    for fid, load in loads.items():
        assert any(used[link] >= capacity[link] * (1 - 1e-9)
                   and all(rates[fid] >= rates[other] * (1 - 1e-9)
                           for other, theirs in loads.items() if link in theirs)
                   for link in load), fid


def test_headers_and_acks_take_their_share():
    over = Overhead(data=1.1, ack=0.05)
    load = path_load(["h0", "s", "h1"], over)
    assert load == pytest.approx({("h0", "s"): 1.1, ("s", "h1"): 1.1})
    assert ack_load(load, over) == pytest.approx({("s", "h0"): 0.05, ("h1", "s"): 0.05})
    # h1 sends back to h0 while h0 sends to h1: each link carries data and ACKs
    back = path_load(["h1", "s", "h0"], over)
    cap = {link: 11.5 for link in [*load, *back]}
    rates = max_min_rates({"fwd": load, "back": back}, cap,
                          {"fwd": ack_load(load, over), "back": ack_load(back, over)})
    assert rates["fwd"] == pytest.approx(11.5 / 1.15)


def test_a_flow_is_not_held_back_where_only_its_acks_go():
    # "slow" shares link (x, y) with two others; "fast"'s ACKs cross that link. Its data
    # has a link of its own, so it runs at that link's rate less nothing: its ACKs take
    # their share of (x, y), and the two data flows there share what is left
    over = Overhead(data=1.0, ack=0.01)
    loads = {"a": {("x", "y"): 1.0}, "b": {("x", "y"): 1.0}, "fast": {("y", "x"): 1.0}}
    cap = {("x", "y"): 10.0, ("y", "x"): 100.0}
    acks = {fid: ack_load(load, over) for fid, load in loads.items()}
    rates = max_min_rates(loads, cap, acks)
    # fast = 100 - 0.01 (a + b) and a + b = 10 - 0.01 fast
    assert rates["fast"] == pytest.approx(99.9 / 0.9999, rel=1e-9)
    assert rates["a"] == rates["b"] == pytest.approx((10.0 - 0.01 * rates["fast"]) / 2,
                                                     rel=1e-9)


def test_packet_overhead():
    over = Overhead.of_packets(payload=1000, data_overhead=100, ack_bytes=80, packets_per_ack=8)
    assert over.data == pytest.approx(1.1) and over.ack == pytest.approx(0.01)


def test_unbounded_flow_and_cycle():
    assert max_min_rates({"a": {"nolink": 1.0}}, {}) == {"a": math.inf}
    with pytest.raises(ValueError, match="cycle"):
        simulate([_flow("a", [("x", "y")], 1, after=("b",)),
                  _flow("b", [("x", "y")], 1, after=("a",))], {("x", "y"): 1.0})


def test_spray_splits_evenly_over_the_spines():
    graph = topologies.build("leaf-spine,leaves=2,spines=2,hosts_per_leaf=2")
    load = spray_load(graph, "l0h0", "l1h1", Overhead())
    assert load[("l0h0", "l0")] == pytest.approx(1.0)
    assert load[("l0", "s0")] == load[("l0", "s1")] == pytest.approx(0.5)
    assert load[("s0", "l1")] == load[("s1", "l1")] == pytest.approx(0.5)
    assert load[("l1", "l1h1")] == pytest.approx(1.0)
    # a flow within one leaf never reaches a spine
    local = spray_load(graph, "l0h0", "l0h1", Overhead())
    assert set(local) == {("l0h0", "l0"), ("l0", "l0h1")}


def test_spray_over_a_fat_tree_conserves_the_flow():
    graph = topologies.build("fat-tree")
    load = spray_load(graph, "p0e0h0", "p3e1h1", Overhead())
    cores = [link for link in load if link[0].startswith("p0a") and link[1].startswith("c")]
    assert len(cores) == 4 and sum(load[link] for link in cores) == pytest.approx(1.0)
    assert load[("p3e1", "p3e1h1")] == pytest.approx(1.0)


def test_spray_leaves_a_dual_homed_storage_node_by_the_nic_in_the_clients_zone():
    graph = topologies.build("two-zone")
    load = spray_load(graph, "st0", "z1h0", Overhead())
    assert ("st0", "z1l0") in load and ("st0", "z0l0") not in load
    assert not any(a.startswith("z0") or b.startswith("z0") for a, b in load)


def test_spray_follows_the_measured_split_when_given():
    graph = topologies.build("leaf-spine,leaves=2,spines=2,hosts_per_leaf=2")
    measured = {("l0", "s0"): 3000.0, ("l0", "s1"): 1000.0}
    load = spray_load(graph, "l0h0", "l1h1", Overhead(), measured)
    assert load[("l0", "s0")] == pytest.approx(0.75) and load[("l0", "s1")] == pytest.approx(0.25)
    assert load[("s0", "l1")] == pytest.approx(0.75)


def test_a_link_that_fails_halfway_stops_its_flow_until_it_is_repaired():
    # 10 Mbit at 10 Mbit/s; down from 0.5 s to 1.5 s: the last half starts again at 1.5
    up, down = {("x", "y"): 10.0}, {("x", "y"): 0.0}
    spans = simulate([_flow("a", [("x", "y")], 10)], up,
                     changes=[Change(1.5, up), Change(0.5, down)])
    assert spans["a"].end == pytest.approx(2.0)


def test_a_failure_moves_a_flow_to_the_other_path_and_it_shares_it():
    # a on x->y, b on x->z, both 10 Mbit at 10 Mbit/s; x->y fails at 0.5 s and a moves
    # onto x->z: a has 5 Mbit left and b 5, sharing 10 Mbit/s they end at 1.5 s
    cap = {("x", "y"): 10.0, ("x", "z"): 10.0}
    spans = simulate([_flow("a", [("x", "y")], 10), _flow("b", [("x", "z")], 10)], cap,
                     changes=[Change(0.5, {**cap, ("x", "y"): 0.0}, {"a": {("x", "z"): 1.0}})])
    assert spans["a"].end == pytest.approx(1.5) and spans["b"].end == pytest.approx(1.5)


def test_a_failure_that_leaves_no_capacity_forever_never_ends():
    with pytest.raises(ValueError, match="never end"):
        simulate([_flow("a", [("x", "y")], 10)], {("x", "y"): 10.0},
                 changes=[Change(0.5, {("x", "y"): 0.0})])


def test_weighted_multipath_is_an_even_spray_on_a_healthy_fabric():
    graph = topologies.build("leaf-spine,leaves=2,spines=2,hosts_per_leaf=2")
    cap = link_capacity(graph, {frozenset(e): 10.0 for e in graph.edges})
    assert weighted_multipath_load(graph, "l0h0", "l1h1", Overhead(), cap) == pytest.approx(
        spray_load(graph, "l0h0", "l1h1", Overhead()))


def test_weighted_multipath_avoids_a_failed_link_and_weights_a_slow_one():
    graph = topologies.build("leaf-spine,leaves=2,spines=4,hosts_per_leaf=2")
    cap = link_capacity(graph, {frozenset(e): 12.0 for e in graph.edges})
    cap[("l0", "s0")] = cap[("s0", "l0")] = 0.0      # cut
    cap[("s1", "l1")] = 3.0                          # a quarter of the rate, one way
    load = weighted_multipath_load(graph, "l0h0", "l1h1", Overhead(1.0, 0.5), cap)
    # paths via s1 (bottleneck 3), s2 and s3 (12): shares 3/27, 12/27, 12/27
    assert ("l0", "s0") not in load and ("s0", "l1") not in load
    assert load[("l0", "s1")] == pytest.approx(3 / 27) and load[("s2", "l1")] == pytest.approx(12 / 27)
    # its ACKs come back that way
    assert ack_load(load, Overhead(1.0, 0.5))[("l1", "s1")] == pytest.approx(0.5 * 3 / 27)
    assert load[("l1", "l1h1")] == pytest.approx(1.0)


def test_weighted_multipath_without_a_live_path_is_an_error():
    graph = topologies.build("leaf-spine,leaves=2,spines=1,hosts_per_leaf=2")
    cap = link_capacity(graph, {frozenset(e): 10.0 for e in graph.edges})
    cap[("l0", "s0")] = 0.0
    with pytest.raises(ValueError, match="no live path"):
        weighted_multipath_load(graph, "l0h0", "l1h0", Overhead(), cap)


def test_the_last_packet_crosses_every_link_but_the_slowest_once_more():
    # 1250 bytes take 1 ms at 10 Mbit/s and 2 ms at 5: the fluid counts the slowest link
    assert store_and_forward_s([10.0, 10.0, 10.0], 1250) == pytest.approx(0.002)
    assert store_and_forward_s([10.0, 5.0, 10.0], 1250) == pytest.approx(0.002)
    assert store_and_forward_s([10.0], 1250) == 0.0  # one link: nothing to forward


def test_the_last_packet_carries_what_is_left_of_the_message():
    assert last_packet_bytes("roce", 4096, 3 * 4096 + 100) == 100 + ROCE_DATA_OVERHEAD
    assert last_packet_bytes("roce", 4096, 2 * 4096) == 4096 + ROCE_DATA_OVERHEAD
    with pytest.raises(ValueError, match="unknown transport"):
        last_packet_bytes("udp", 4096, 1)


def test_a_dependent_starts_when_its_dependencys_last_packet_arrived():
    # a's fluid ends at 1 s and its last packet lands 0.25 s later: then b starts
    spans = simulate([_flow("a", [("x", "y")], 10, latency=0.25),
                      _flow("b", [("x", "y")], 10, after=("a",), latency=0.25)],
                     {("x", "y"): 10.0})
    assert (spans["a"].start, spans["a"].end) == pytest.approx((0.0, 1.25))
    assert (spans["b"].start, spans["b"].end) == pytest.approx((1.25, 2.5))


def test_a_shortest_path_runs_through_switches_only():
    graph = topologies.build("leaf-spine,leaves=2,spines=2,hosts_per_leaf=2")
    path = shortest_path(graph, "l0h0", "l1h1")
    assert path[0] == "l0h0" and path[-1] == "l1h1" and len(path) == 5
    assert shortest_path(graph, "l0h0", "l0h1") == ["l0h0", "l0", "l0h1"]


def test_the_ideal_of_a_dependent_transfer_does_not_wait_for_its_real_start():
    # b waits for a; in the run b started a whole second after a's last byte: the ideal
    # starts b when a ends in the model, plus a's last packet's store-and-forward
    graph = topologies.build("leaf-spine,leaves=2,spines=2,hosts_per_leaf=2")
    nbytes = 10 * 4096
    plan = Plan([Transfer("a", "l0h0", "l1h1", nbytes),
                 Transfer("b", "l1h1", "l0h0", nbytes, after=("a",))],
                {}, TransportSpec("roce", mtu_payload=4096), start_at=100.0)
    agents = {"x": {"transfers": [
        {"id": "a", "role": "send", "start": 100.0}, {"id": "a", "role": "recv", "end": 101.0},
        {"id": "b", "role": "send", "start": 102.0}, {"id": "b", "role": "recv", "end": 103.0}]}}
    result = TrafficResult(plan, agents, LinkSeries(), paths={}, ingress_drops={}, fidelity=[])
    mbps = {frozenset(e): 1.0 for e in graph.edges}
    spans = ideal_spans(result, graph, mbps, spray=True)
    fluid_s = nbytes * transport_overhead("roce", 4096).data * 8 / 1e6
    hop_s = (4096 + ROCE_DATA_OVERHEAD) * 8 / 1e6  # a full last packet on one 1 Mbit/s link
    assert spans["a"].start == pytest.approx(100.0)
    assert spans["a"].end == pytest.approx(100.0 + fluid_s + 3 * hop_s)  # 4 links, 3 more
    assert spans["b"].start == pytest.approx(spans["a"].end)
    assert spans["b"].end == pytest.approx(spans["b"].start + fluid_s + 3 * hop_s)


def test_only_steering_senders_are_held_to_an_even_split():
    # the run's switches sent 3/4 of l0's uplink bytes to s0, and each spine link has
    # half the host rate: senders taking their ports in turn are stuck with that hash
    # (s0's links carry 3/4 of the flow: 2/3 of line rate); senders that steer by
    # echoes could have split evenly (line rate), so their ideal does
    graph = topologies.build("leaf-spine,leaves=2,spines=2,hosts_per_leaf=1")
    nbytes = 100 * 4096
    agents = {"x": {"transfers": [{"id": "a", "role": "send", "start": 0.0},
                                  {"id": "a", "role": "recv", "end": 9.0}]}}
    uneven = {("l0", "s0"): 3000, ("l0", "s1"): 1000, ("s0", "l1"): 3000, ("s1", "l1"): 1000}
    links = LinkSeries(times=[0.0, 9.0], bytes=[{k: 0 for k in uneven}, uneven])
    mbps = {frozenset(e): 0.5 if "s0" in e or "s1" in e else 1.0 for e in graph.edges}
    fluid = {}
    for entropy, achieved in (("packet", False), ("recycle", False), ("recycle", True)):
        plan = Plan([Transfer("a", "l0h0", "l1h0", nbytes)], {},
                    TransportSpec("roce", mtu_payload=4096, entropy=entropy), start_at=0.0)
        result = TrafficResult(plan, agents, links, paths={}, ingress_drops={}, fidelity=[])
        span = ideal_spans(result, graph, mbps, spray=True, achieved_split=achieved)["a"]
        fluid[entropy, achieved] = span.end - span.start
    line_s = nbytes * transport_overhead("roce", 4096).data * 8 / 1e6
    latency = store_and_forward_s([1.0, 0.5, 0.5, 1.0], 4096 + ROCE_DATA_OVERHEAD)
    assert fluid["recycle", False] == pytest.approx(line_s + latency)
    assert fluid["packet", False] == pytest.approx(1.5 * line_s + latency)
    # asked for, a steering sender is held to the split it achieved (benchmarks/busbw.py)
    assert fluid["recycle", True] == pytest.approx(fluid["packet", False])
