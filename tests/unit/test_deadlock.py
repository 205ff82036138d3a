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
