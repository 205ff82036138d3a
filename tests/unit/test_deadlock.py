"""The buffer dependency check: no shipped fabric's routes can deadlock its lossless lanes,
with every link up or any one down; routes that go down and up again on purpose can."""

from __future__ import annotations

import pytest

import topologies
from fabric.model import graph as fg
from fabric.routing.deadlock import buffer_dependencies, dependency_cycle, describe_cycle
from fabric.routing.policies import POLICIES, policy_route_tables
from fabric.routing.tables import route_tables

SHIPPED = ("rail-clos", "two-zone", "fat-tree", "leaf-spine",
           "rail-clos,servers=8,gpus=2,spines=4", "leaf-spine,leaves=3,spines=2,hosts_per_leaf=2")


@pytest.mark.parametrize("spec", SHIPPED)
@pytest.mark.parametrize("policy", POLICIES)
def test_no_shipped_fabric_s_routes_can_deadlock(spec, policy):
    graph = topologies.build(spec)
    assert dependency_cycle(graph, policy_route_tables(policy, graph)) is None


@pytest.mark.parametrize("spec", ("fat-tree", "leaf-spine", "rail-clos"))
def test_a_reroute_around_any_one_link_cannot_deadlock_either(spec):
    graph = topologies.build(spec)
    for a, b in graph.edges:
        if fg.is_switch(graph, a) and fg.is_switch(graph, b):
            assert dependency_cycle(graph, route_tables(graph, [frozenset((a, b))])) is None


def _valleys(graph, both: bool) -> dict:
    """Leaf-spine, 3 leaves: l2h0 reached from l0 by s0 -> l1 -> s1 (down and up again)
    and, with ``both``, l2h1 from l1 by s1 -> l0 -> s0."""
    tables = route_tables(graph)
    ip = {att.endpoint: att.ip for att in fg.attachments(graph)}
    tables["s0"][ip["l2h0"]] = (fg.port(graph, "s0", "l1"),)
    tables["l1"][ip["l2h0"]] = (fg.port(graph, "l1", "s1"),)  # on, not back to s0
    if both:
        tables["s1"][ip["l2h1"]] = (fg.port(graph, "s1", "l0"),)
        tables["l0"][ip["l2h1"]] = (fg.port(graph, "l0", "s0"),)
    return tables


def test_two_routes_down_and_up_again_close_a_cycle_of_four_links():
    graph = topologies.build("leaf-spine,leaves=3,spines=2,hosts_per_leaf=2")
    cycle = dependency_cycle(graph, _valleys(graph, both=True))
    assert cycle is not None and len(cycle) == 4
    assert set(cycle) == {("l0", "s0"), ("s0", "l1"), ("l1", "s1"), ("s1", "l0")}
    assert describe_cycle(cycle).count("->") == 4
    # one valley alone makes no cycle: nothing closes it
    assert dependency_cycle(graph, _valleys(graph, both=False)) is None


def test_only_dependencies_a_packet_can_create_count():
    graph = topologies.build("leaf-spine,leaves=2,spines=2,hosts_per_leaf=1")
    deps = buffer_dependencies(graph, route_tables(graph))
    # a packet from l0h0 to l1h0 goes l0h0 -> l0 -> s0|s1 -> l1 -> l1h0, and back
    assert deps.has_edge(("l0h0", "l0"), ("l0", "s0"))
    assert deps.has_edge(("l0", "s1"), ("s1", "l1"))
    assert deps.has_edge(("s0", "l1"), ("l1", "l1h0"))
    # a spine never sends a packet back up to where it came from
    assert not deps.has_edge(("l0", "s0"), ("s0", "l0"))


def test_valley_routes_close_a_cycle_of_four_links_that_the_static_check_flags():
    from fabric.routing.deadlock import find_valley, valley_flows, valley_routes
    from fabric.routing.static import static_route_tables
    from fabric.routing.tables import check_pinned, pin_routes

    graph = topologies.build("leaf-spine,leaves=3,spines=2,hosts_per_leaf=2")
    pinned = valley_routes(graph)
    check_pinned(graph, pinned)
    v = find_valley(graph)
    cycle = dependency_cycle(graph, pin_routes(static_route_tables(graph), pinned))
    assert set(cycle) == {(v.a, v.x), (v.x, v.b), (v.b, v.y), (v.y, v.a)}
    # every flow's endpoints are distinct hosts; two of them leave the cycle for c
    flows = valley_flows(graph)
    assert len(flows) == 4 and all(src != dst for src, dst in flows)


@pytest.mark.parametrize("spec", ("fat-tree", "two-zone", "leaf-spine,leaves=2,spines=2"))
def test_a_fabric_without_three_leaves_on_two_spines_cannot_take_the_case(spec):
    from fabric.routing.deadlock import DeadlockCaseError, valley_routes

    with pytest.raises(DeadlockCaseError, match="three leaves that share two spines"):
        valley_routes(topologies.build(spec))


def test_pinned_routes_naming_what_the_fabric_lacks_are_refused():
    from fabric.routing.tables import check_pinned

    graph = topologies.build("leaf-spine,leaves=3,spines=2,hosts_per_leaf=2")
    ip = fg.attachments(graph)[0].ip
    for pinned, text in (({"zz": {ip: (1,)}}, "not a switch"),
                         ({"s0": {"10.9.9.9": (1,)}}, "no endpoint has"),
                         ({"s0": {ip: (99,)}}, "has no port 99"),
                         ({"s0": {ip: ()}}, "no output port")):
        with pytest.raises(ValueError, match=text):
            check_pinned(graph, pinned)


def test_only_a_dependency_cycle_of_held_links_is_a_deadlock():
    from fabric.routing.deadlock import held_cycle, valley_routes
    from fabric.routing.static import static_route_tables
    from fabric.routing.tables import pin_routes

    graph = topologies.build("leaf-spine,leaves=3,spines=2,hosts_per_leaf=2")
    deps = buffer_dependencies(graph, pin_routes(static_route_tables(graph),
                                                 valley_routes(graph)))
    ring = dependency_cycle(graph, pin_routes(static_route_tables(graph),
                                              valley_routes(graph)))
    assert set(held_cycle(deps, ring)) == set(ring)
    assert held_cycle(deps, ring[:3]) is None  # one link of the ring flows: no deadlock
    # the same four links under up-down routes depend on nothing in a ring
    updown = buffer_dependencies(graph, static_route_tables(graph))
    assert held_cycle(updown, ring) is None


def test_the_detector_records_a_held_ring_once_and_when_it_cleared():
    from fabric.emulation.deadlock_watch import DeadlockDetector
    from fabric.routing.deadlock import valley_routes
    from fabric.routing.static import static_route_tables
    from fabric.routing.tables import pin_routes

    graph = topologies.build("leaf-spine,leaves=3,spines=2,hosts_per_leaf=2")
    tables = pin_routes(static_route_tables(graph), valley_routes(graph))
    ring = dependency_cycle(graph, tables)
    links = {i: (link, 1e6) for i, link in enumerate(ring, start=1)}  # 1 ms packets
    closed: dict = {}
    detector = DeadlockDetector(lambda: dict(closed), links,
                                buffer_dependencies(graph, tables), 200, lambda: 0.0)
    closed.update({(i, 0): 0 for i in links})
    detector.step(100 * 1_000_000)  # held 100 packet times: not yet
    assert detector.formations == []
    detector.step(250 * 1_000_000)
    detector.step(300 * 1_000_000)  # the same ring: recorded once
    assert len(detector.formations) == 1 and detector.formations[0].cleared_s is None
    del closed[(1, 0)]  # the watchdog opens one link
    detector.step(400 * 1_000_000)
    (row,) = [f.row() for f in detector.formations]
    assert row["cleared_s"] is not None and len(row["links"]) == 4


def test_pinned_routes_replace_the_policy_s_and_survive_the_config_file():
    from fabric.routing.config import (ControllerConfig, controller_config_from_dict,
                                       controller_config_to_dict)
    from fabric.routing.policies import policy_route_tables

    graph = topologies.build("leaf-spine,leaves=3,spines=2,hosts_per_leaf=2")
    ip = fg.attachments(graph)[0].ip
    config = ControllerConfig(routes={"s0": {ip: (2,)}})
    again = controller_config_from_dict(controller_config_to_dict(config))
    assert again.routes == {"s0": {ip: (2,)}}
    assert policy_route_tables("ecmp", graph, pinned=again.routes)["s0"][ip] == (2,)
    with pytest.raises(ValueError, match="list of port numbers"):
        controller_config_from_dict({"routes": {"s0": {ip: "2"}}})
