"""The planned static routes (D-mod-k): balanced up-ports, a shift permutation that shares
no link, determinism, rerouting around a down link, and the fabrics it refuses (pure)."""

from __future__ import annotations

from collections import Counter

import networkx as nx
import pytest

import topologies
from fabric.model import graph as fg
from fabric.routing.policies import compute_intents
from fabric.routing.static import (StaticRoutingError, destination_order, static_route_tables,
                                   switch_tiers)
from fabric.routing.tables import route_tables
from fabric.traffic import synthetic
from fabric.traffic.placement import rank_hosts

# full-bisection fabrics: a shift must share no link on them
FULL_BISECTION = ("fat-tree", "fat-tree,k=8", "rail-clos", "leaf-spine",
                  "leaf-spine,leaves=4,spines=4,hosts_per_leaf=4")


def walk(graph, tables, src, dst_ip):
    """The directed links from endpoint ``src`` to the NIC ``dst_ip``, hop by hop."""
    att = next(a for a in fg.attachments(graph) if a.endpoint == src)
    links, sw = [(src, att.switch)], att.switch
    for _ in range(len(graph)):
        nxt = fg._neighbour_on_port(graph, sw, tables[sw][dst_ip][0])
        links.append((sw, nxt))
        if not fg.is_switch(graph, nxt):
            assert nxt == next(a.endpoint for a in fg.attachments(graph) if a.ip == dst_ip)
            return links
        sw = nxt
    raise AssertionError(f"{src} -> {dst_ip} loops")


def owner(graph):
    return {a.ip: a.endpoint for a in fg.attachments(graph)}


@pytest.mark.slow
@pytest.mark.parametrize("spec", FULL_BISECTION)
def test_every_shift_permutation_shares_no_link(spec):
    graph = topologies.build(spec)
    tables, order, who = static_route_tables(graph), destination_order(graph), owner(graph)
    n = len(order)
    for shift in range(1, n):
        used = Counter(link for i, ip in enumerate(order)
                       for link in walk(graph, tables, who[ip], order[(i + shift) % n]))
        assert max(used.values()) == 1, (shift, used.most_common(2))


@pytest.mark.parametrize("spec", FULL_BISECTION)
def test_the_stride_pattern_shares_no_link(spec):
    graph = topologies.build(spec)
    tables = static_route_tables(graph)
    used = Counter(link for t in synthetic.stride(graph, rank_hosts(graph), 1000)
                   for link in walk(graph, tables, t.src, fg.nearest_nic_ip(graph, t.src, t.dst)))
    assert max(used.values()) == 1


@pytest.mark.parametrize("spec", FULL_BISECTION + ("two-zone",))
def test_every_choice_of_ports_is_shared_out_evenly(spec):
    graph = topologies.build(spec)
    static, equal_cost = static_route_tables(graph), route_tables(graph)
    for sw, table in equal_cost.items():
        chosen: dict[tuple, Counter] = {}
        for ip, ports in table.items():
            if len(ports) > 1:
                chosen.setdefault(ports, Counter())[static[sw][ip][0]] += 1
        for ports, counts in chosen.items():   # e.g. a leaf's uplinks, for whom they reach
            assert set(counts) == set(ports), (sw, ports, counts)
            assert max(counts.values()) - min(counts.values()) <= 1, (sw, counts)


def test_one_port_per_destination_no_group_and_deterministic():
    graph = topologies.build("fat-tree")
    intents = compute_intents("static", graph)
    assert all(not intent.groups for intent in intents.values())
    assert intents == compute_intents("static", topologies.build("fat-tree"))
    assert all(len(ports) == 1 for t in static_route_tables(graph).values()
               for ports in t.values())


def test_tiers_count_hops_from_the_endpoints():
    tiers = switch_tiers(topologies.build("fat-tree"))
    assert {t for sw, t in tiers.items() if "e" in sw and sw.startswith("p")} == {1}
    assert sorted(Counter(tiers.values()).items()) == [(1, 8), (2, 8), (3, 4)]


def test_a_down_link_is_routed_around_and_every_destination_still_reached():
    graph = topologies.build("fat-tree")
    leaf = next(a.switch for a in fg.attachments(graph))
    agg = next(n for n in graph.neighbors(leaf) if fg.is_switch(graph, n))
    down = {frozenset((leaf, agg))}
    tables, who = static_route_tables(graph, down), owner(graph)
    cut = {(leaf, agg), (agg, leaf)}
    for src in fg.endpoints(graph):
        for ip, dst in who.items():
            if dst != src:
                assert not cut & set(walk(graph, tables, src, ip))
    assert tables == static_route_tables(graph, down)


def test_a_switch_that_reaches_no_endpoint_is_refused():
    graph = topologies.build("leaf-spine,leaves=2,spines=1,hosts_per_leaf=2")
    g = nx.Graph(graph)
    g.add_node("stray", **{**graph.nodes["s0"], "dpid": "00ff000000000099"})
    with pytest.raises(StaticRoutingError, match="stray reaches no endpoint"):
        static_route_tables(g)


def test_uplinks_are_the_neighbours_one_tier_up_in_port_order():
    graph = topologies.build("fat-tree")
    edge = next(a.switch for a in fg.attachments(graph))
    ups = fg.uplinks(graph, edge)
    assert len(ups) == 2 and all(graph.nodes[n]["role"] == "spine" for n in ups)
    assert [fg.port(graph, edge, n) for n in ups] == sorted(fg.port(graph, edge, n) for n in ups)
    core = fg.nodes_with_role(graph, "core")[0]
    assert fg.uplinks(graph, core) == []
