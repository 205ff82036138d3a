"""Rate scaling and the forwarding-budget check (pure code)."""

from __future__ import annotations

import re

import pytest

import topologies
from fabric.emulation import capacity
from fabric.emulation.capacity import CapacityError, plan_rates
from fabric.model import graph as fg


def test_default_rail_clos_fits_at_3_mbps():
    graph = topologies.build("rail-clos")
    plan = plan_rates(graph, 3.0)
    assert plan.headroom > 1
    assert plan.datapath == "user"
    assert plan.host_mbps == 3.0
    assert plan.scale_mbps_per_gbps == pytest.approx(3.0 / 400.0)
    assert set(plan.link_mbps) == {frozenset(e) for e in graph.edges}
    for att in fg.attachments(graph):
        assert plan.link_mbps[frozenset((att.endpoint, att.switch))] == pytest.approx(3.0)
    assert plan.switch_ports == sum(graph.degree(s) for s in fg.switches(graph))
    assert plan.budget_pkt_hops == pytest.approx(
        capacity.forwarding_budget(plan.switch_ports, "user"))
    assert plan.headroom == pytest.approx(plan.budget_pkt_hops / plan.demand_pkt_hops)


@pytest.mark.parametrize("spec", sorted(topologies.BUILDERS))
def test_default_host_rate_is_the_highest_step_that_fits(spec):
    graph = topologies.build(spec)
    plan = plan_rates(graph)
    assert plan.host_mbps == capacity.auto_host_mbps(graph)
    assert plan.headroom >= 1
    step = capacity.AUTO_RATE_STEP_MBPS
    if plan.host_mbps < capacity.MAX_AUTO_HOST_MBPS:
        with pytest.raises(CapacityError):
            plan_rates(graph, plan.host_mbps + step)


def test_default_rates_of_the_measured_fabrics():
    # benchmarks/traffic.py and the quick experiments (capacity's docstring): roce's
    # 4096-byte payloads are faithful on rail-clos (48 ports) at 12.5-13 Mbit/s, where
    # the agents' CPU binds first, on the k=4 fat-tree (80) at 6 with tcmalloc, on the
    # 64-endpoint rail-clos (192) at 0.7 but not 1.5
    def roce_rate(spec: str) -> float:
        return capacity.auto_host_mbps(topologies.build(spec), packet_bytes=4140,
                                       headroom=capacity.ROCE_RATE_HEADROOM)

    assert roce_rate("rail-clos") == 12.5
    assert roce_rate("fat-tree") == 6.0
    assert 0.7 <= roce_rate("rail-clos,servers=16,gpus=4,servers_per_leaf=4,spines=4") < 1.5


def test_the_budget_falls_with_the_switch_ports():
    small, rail, floor, fat, large = (capacity.forwarding_budget(p, "user")
                                      for p in (24, 48, capacity.MIN_BUDGET_PORTS, 80, 192))
    assert small == rail == floor  # flat below the ports where the agents bind first
    assert floor / fat == pytest.approx(80 / capacity.MIN_BUDGET_PORTS)
    assert fat / large == pytest.approx(192 / 80)


def test_the_kernel_budget_does_not_fall_with_the_ports():
    # the kernel datapath forwards in softirq: nothing sweeps the ports
    assert capacity.forwarding_budget(48, "kernel") == capacity.forwarding_budget(640, "kernel")


def test_large_fabrics_get_rates_in_finer_steps():
    graph = topologies.build("rail-clos,servers=16,gpus=4,servers_per_leaf=4,spines=4")
    rate = capacity.auto_host_mbps(graph)
    assert 0 < rate < 1 and rate == pytest.approx(round(rate, 1))
    assert plan_rates(graph, rate).headroom >= 1
    with pytest.raises(CapacityError):
        plan_rates(graph, rate + capacity.FINE_RATE_STEP_MBPS)


def test_fewer_busy_links_allow_a_higher_rate():
    graph = topologies.build("leaf-spine,leaves=5,hosts_per_leaf=4")
    with pytest.raises(CapacityError, match="full load"):
        plan_rates(graph, 10.0)
    plan = plan_rates(graph, 10.0, busy_links=1)
    assert plan.demand_pkt_hops == pytest.approx(
        10e6 / (1500 * 8) * capacity.mean_switch_hops(graph))
    assert capacity.auto_host_mbps(graph, busy_links=1) > capacity.auto_host_mbps(graph)
    with pytest.raises(CapacityError, match="busy_links"):
        plan_rates(graph, 1.0, busy_links=0)


def test_demand_is_injected_packets_times_mean_hops():
    graph = topologies.build("leaf-spine")
    plan = plan_rates(graph, 3.0)
    nics = len(fg.attachments(graph))
    expected = nics * 3e6 / (1500 * 8) * capacity.mean_switch_hops(graph)
    assert plan.demand_pkt_hops == pytest.approx(expected)


@pytest.mark.parametrize("spec", ["rail-clos,oversub=2", "two-zone,oversub=3,spines=3",
                                  "leaf-spine,oversub=4", "rail-clos,spines=3"])
def test_links_keep_their_ratio(spec):
    graph = topologies.build(spec)
    plan = plan_rates(graph, 2.0)
    rates = {frozenset((a, b)): d["gbps"] for a, b, d in graph.edges(data=True)}
    assert len(set(rates.values())) > 1, "spec should mix link rates"
    for key, gbps in rates.items():
        assert plan.link_mbps[key] == pytest.approx(gbps * plan.scale_mbps_per_gbps)
    # the fastest endpoint link runs at the host rate
    fastest = max(plan.link_mbps[frozenset((a.endpoint, a.switch))]
                  for a in fg.attachments(graph))
    assert fastest == pytest.approx(2.0)


def _suggested(message: str) -> float:
    match = re.search(r"at most ([0-9]+(?:\.[0-9]+)?) Mbit/s", message)
    assert match, f"no suggested maximum in: {message}"
    return float(match.group(1))


def test_large_fabric_too_big_at_20_mbps_and_suggestion_fits():
    graph = topologies.build("leaf-spine,leaves=8,spines=4,hosts_per_leaf=8")
    with pytest.raises(CapacityError) as info:
        plan_rates(graph, 20.0)
    fits = _suggested(str(info.value))
    assert 0 < fits < 20.0
    # "at most X" is a promise: X itself, and anything slightly below, passes.
    assert plan_rates(graph, fits).headroom >= 1
    assert plan_rates(graph, fits * 0.99).headroom > 1


@pytest.mark.parametrize("spec", ["fat-tree,k=6",
                                  "leaf-spine,leaves=8,spines=4,hosts_per_leaf=8",
                                  "rail-clos,servers=64,gpus=2,servers_per_leaf=16,spines=8",
                                  "two-zone,hosts_per_leaf=4,leaves=3,spines=4,"
                                  "interzone_links=4,storage=5"])
def test_suggested_maximum_is_safe_and_tight(spec):
    graph = topologies.build(spec)
    with pytest.raises(CapacityError) as info:
        plan_rates(graph, 20.0)
    fits = _suggested(str(info.value))
    plan_rates(graph, fits)  # must not raise
    with pytest.raises(CapacityError):  # and is within one printed step of the limit
        plan_rates(graph, fits + 0.1)


def test_a_benchmark_may_go_beyond_the_budget():
    graph = topologies.build("rail-clos")
    plan = plan_rates(graph, 6.0, enforce_budget=False)
    assert plan.headroom < 1
    with pytest.raises(CapacityError, match="Mbit/s"):  # shaping limits still hold
        plan_rates(graph, 5000.0, enforce_budget=False)


def test_a_fabric_too_large_for_any_rate_says_so():
    graph = topologies.build("rail-clos,servers=256,gpus=2,servers_per_leaf=32,spines=16")
    with pytest.raises(CapacityError, match="smaller fabric") as info:
        plan_rates(graph, 1.0)
    assert "at most" not in str(info.value)


@pytest.mark.parametrize("rate", [0, 0.0, -1, -20.0, float("nan")])
def test_non_positive_host_rate_raises(rate):
    with pytest.raises(CapacityError, match="positive"):
        plan_rates(topologies.build("rail-clos"), rate)


def test_rate_below_shapable_minimum_names_the_link():
    # Uplinks at 400*1/16/64 Gbit/s: 1/1024 of a host link.
    graph = topologies.build("rail-clos,servers_per_leaf=1,spines=16,oversub=64")
    with pytest.raises(CapacityError) as info:
        plan_rates(graph, 20.0)
    message = str(info.value)
    match = re.search(r"link (\S+)-(\S+) would run at", message)
    assert match, message
    a, b = match.groups()
    assert graph.has_edge(a, b)
    assert {graph.nodes[a]["role"], graph.nodes[b]["role"]} == {"leaf", "spine"}
    assert str(capacity.MIN_SHAPED_MBPS) in message


def test_host_rate_below_minimum_names_a_host_link():
    graph = topologies.build("leaf-spine")
    with pytest.raises(CapacityError) as info:
        plan_rates(graph, capacity.MIN_SHAPED_MBPS / 2)
    a, b = re.search(r"link (\S+)-(\S+) would run at", str(info.value)).groups()
    assert graph.has_edge(a, b)


def test_minimum_rate_itself_is_accepted():
    plan = plan_rates(topologies.build("leaf-spine"), capacity.MIN_SHAPED_MBPS)
    assert min(plan.link_mbps.values()) == pytest.approx(capacity.MIN_SHAPED_MBPS)


def test_rate_above_maximum_raises():
    with pytest.raises(CapacityError, match="would run at"):
        plan_rates(topologies.build("leaf-spine"), capacity.MAX_SHAPED_MBPS * 2)


def test_mean_switch_hops_leaf_spine_by_hand():
    # 4 leaves x 4 hosts: of a host's 15 peers, 3 share its leaf (1 switch)
    # and 12 are under other leaves (leaf-spine-leaf: 3 switches).
    graph = topologies.build("leaf-spine")
    assert capacity.mean_switch_hops(graph) == pytest.approx((3 * 1 + 12 * 3) / 15)
    assert capacity.mean_switch_hops(graph) == pytest.approx(2.6)


def test_mean_switch_hops_single_switch():
    graph = topologies.build("leaf-spine,leaves=1,spines=1,hosts_per_leaf=3")
    assert capacity.mean_switch_hops(graph) == pytest.approx(1.0)


def test_mean_switch_hops_ignores_pairs_within_one_storage_node():
    # Storage st0 has two NICs; its NIC pair must not count as a path.
    graph = topologies.build("two-zone,hosts_per_leaf=1,leaves=1,spines=1,storage=1")
    # NICs: z0h0 (z0l0), z1h0 (z1l0), st0/0 (z0l0), st0/1 (z1l0).
    # Same-leaf pairs (1 switch): z0h0<->st0/0, z1h0<->st0/1: 4 ordered pairs.
    # Cross-zone (z0l0-z0s0-z1s0-z1l0: 4 switches): z0h0<->z1h0, z0h0<->st0/1,
    # z1h0<->st0/0: 6 ordered pairs.  st0/0<->st0/1 excluded.
    assert capacity.mean_switch_hops(graph) == pytest.approx((4 * 1 + 6 * 4) / 10)


@pytest.mark.parametrize("ports", [1, 48, 80, 640, 1024])
def test_kernel_budget_exceeds_user_budget(ports):
    user = capacity.forwarding_budget(ports, "user")
    kernel = capacity.forwarding_budget(ports, "kernel")
    assert kernel > user > 0


def test_kernel_datapath_plan_has_more_headroom():
    graph = topologies.build("fat-tree")
    user = plan_rates(graph, 1.5, datapath="user")
    kernel = plan_rates(graph, 1.5, datapath="kernel")
    assert kernel.headroom > user.headroom
    assert kernel.datapath == "kernel"


def test_too_many_ports_for_userspace():
    graph = topologies.build("rail-clos,servers=64,gpus=8,servers_per_leaf=8,spines=8,oversub=8")
    with pytest.raises(CapacityError, match="switch ports"):
        plan_rates(graph, 20.0)


def test_the_budget_counts_packets_not_bits():
    # a roce workload of 4140-byte packets sends 2.76 times fewer packets per Mbit/s
    graph = topologies.build("rail-clos")
    small, large = (plan_rates(graph, 3.0, packet_bytes=b) for b in (1500, 4140))
    assert small.demand_pkt_hops / large.demand_pkt_hops == pytest.approx(4140 / 1500)
    assert large.packet_bytes == 4140 and large.packet_s == pytest.approx(4140 * 8 / 3e6)
    fast = capacity.auto_host_mbps(graph, packet_bytes=4140)
    assert fast >= 2.5 * capacity.auto_host_mbps(graph)
    assert plan_rates(graph, packet_bytes=4140).host_mbps == fast
    with pytest.raises(CapacityError, match="full load"):
        plan_rates(graph, fast, packet_bytes=1500)


@pytest.mark.parametrize("size", [0, 299, 9001])
def test_packet_sizes_the_links_cannot_carry_are_refused(size):
    with pytest.raises(CapacityError, match="full-size packets"):
        plan_rates(topologies.build("leaf-spine"), 1.0, packet_bytes=size)


@pytest.mark.parametrize("spec", ["rail-clos", "fat-tree", "two-zone"])
def test_a_headroom_leaves_that_share_of_the_budget_spare(spec):
    graph = topologies.build(spec)
    full = capacity.auto_host_mbps(graph, packet_bytes=4140)
    spare = capacity.auto_host_mbps(graph, packet_bytes=4140,
                                    headroom=capacity.ROCE_RATE_HEADROOM)
    assert spare < full
    plan = plan_rates(graph, spare, packet_bytes=4140)
    assert plan.demand_pkt_hops <= capacity.ROCE_RATE_HEADROOM * plan.budget_pkt_hops
    # the largest such step: half a Mbit/s more would not fit within the headroom
    more = plan_rates(graph, spare + capacity.AUTO_RATE_STEP_MBPS, packet_bytes=4140)
    assert more.demand_pkt_hops > capacity.ROCE_RATE_HEADROOM * more.budget_pkt_hops


def test_a_slower_machine_gets_its_share_of_the_budget():
    graph = topologies.build("rail-clos")
    full = capacity.forwarding_budget(48, "user")
    assert capacity.forwarding_budget(48, "user", 0.5) == pytest.approx(full / 2)
    assert capacity.forwarding_budget(48, "kernel", 0.5) == pytest.approx(
        capacity.forwarding_budget(48, "kernel") / 2)
    roce = dict(packet_bytes=4140, headroom=capacity.ROCE_RATE_HEADROOM)
    assert capacity.auto_host_mbps(graph, **roce) == 12.5
    assert capacity.auto_host_mbps(graph, **roce, speed=0.65) == 8.0  # 12.5 x 0.65 = 8.1
    with pytest.raises(ValueError, match="speed"):
        capacity.forwarding_budget(48, "user", 0.0)
    with pytest.raises(ValueError, match="speed"):
        capacity.forwarding_budget(48, "user", 1.5)


def test_an_explicit_rate_is_checked_against_the_whole_budget_whatever_the_speed():
    graph = topologies.build("rail-clos")
    top = capacity.auto_host_mbps(graph)
    plan = plan_rates(graph, top, speed=0.5)  # a command line means the same everywhere
    assert plan.speed == 0.5
    assert plan.machine_headroom == pytest.approx(plan.headroom / 2) and plan.machine_headroom < 1
    slow_default = plan_rates(graph, speed=0.5)
    assert slow_default.host_mbps == capacity.auto_host_mbps(graph, speed=0.5) < top
    assert slow_default.machine_headroom >= 1
