"""Builder invariants for every topology (no root, no Mininet)."""

import ipaddress
import json
import math

import pytest

import topologies
from fabric.model import graph as fg
from fabric.model.graph import TopologyError

SPECS = [
    "rail-clos",
    "rail-clos,servers=6,gpus=4,servers_per_leaf=4,spines=2",
    "rail-clos,servers=256,gpus=2,servers_per_leaf=32,spines=16",
    "two-zone",
    "two-zone,hosts_per_leaf=4,leaves=3,spines=4,interzone_links=4,storage=5",
    "two-zone,storage=0",
    "fat-tree",
    "fat-tree,k=2",
    "fat-tree,k=6",
    "fat-tree,k=12",
    "leaf-spine",
    "leaf-spine,leaves=1,spines=1,hosts_per_leaf=1",
]


def hosts(g):
    return fg.nodes_with_role(g, "host")


def nbrs(g, node, role):
    return [n for n in g.neighbors(node) if g.nodes[n]["role"] == role]


# --- invariants shared by every builder -------------------------------------

@pytest.mark.parametrize("spec", SPECS)
def test_common_invariants(spec):
    g = topologies.build(spec)
    fg.validate(g)
    for node in g.nodes:
        for nbr in g.neighbors(node):
            assert len(fg.intf_name(node, fg.port(g, node, nbr))) <= fg.MAX_IFNAME
    dpids = [g.nodes[s]["dpid"] for s in fg.switches(g)]
    nics = [nic for e in fg.endpoints(g) for nic in g.nodes[e]["nics"]]
    assert len(set(dpids)) == len(dpids)
    assert len({n["ip"] for n in nics}) == len(nics)
    assert len({n["mac"] for n in nics}) == len(nics)
    assert all(len(d) == 16 for d in dpids)
    # Endpoints hang off leaves only.
    for e in fg.endpoints(g):
        assert all(g.nodes[n]["role"] == "leaf" for n in g.neighbors(e))


# --- rail-clos --------------------------------------------------------------

def test_rail_clos_default_counts():
    g = topologies.build("rail-clos")
    assert len(hosts(g)) == 16
    assert len(fg.nodes_with_role(g, "leaf")) == 4
    assert len(fg.nodes_with_role(g, "spine")) == 4
    assert {"h0g0", "h7g1", "r0l0", "r1l1", "sp3"} <= set(g.nodes)


@pytest.mark.parametrize("spec", ["rail-clos", "rail-clos,servers=6,gpus=4,spines=2"])
def test_rail_property(spec):
    g = topologies.build(spec)
    spl = g.graph["params"]["servers_per_leaf"]
    for h in hosts(g):
        (leaf,) = g.neighbors(h)
        data = g.nodes[h]
        assert g.nodes[leaf]["rail"] == data["rail"]
        assert g.nodes[leaf]["index"] == data["server"] // spl
        assert g.nodes[h]["nics"][0]["ip"].startswith(f"10.{data['rail']}.")


def test_rail_clos_every_leaf_to_every_spine():
    g = topologies.build("rail-clos,servers=6,gpus=4,servers_per_leaf=4,spines=2")
    spines = fg.nodes_with_role(g, "spine")
    leaves = fg.nodes_with_role(g, "leaf")
    assert len(leaves) == 4 * math.ceil(6 / 4)
    for leaf in leaves:
        assert sorted(nbrs(g, leaf, "spine")) == sorted(spines)


def test_rail_clos_partial_leaf_sized_for_full_leaf():
    g = topologies.build("rail-clos,servers=6,gpus=1,servers_per_leaf=4,spines=2,gbps=100")
    assert len(nbrs(g, "r0l1", "host")) == 2
    assert g.edges["r0l1", "sp0"]["gbps"] == pytest.approx(4 * 100 / 2)


def test_rail_clos_uplink_rate_and_oversub():
    g = topologies.build("rail-clos,oversub=2")
    assert g.edges["r0l0", "sp0"]["gbps"] == pytest.approx(4 * 400 / 4 / 2)


# --- two-zone ---------------------------------------------------------------

def test_two_zone_structure():
    g = topologies.build("two-zone,hosts_per_leaf=4,leaves=3,spines=4,interzone_links=3,storage=5")
    zone = lambda n: g.nodes[n].get("zone")  # noqa: E731
    assert len(hosts(g)) == 2 * 3 * 4
    assert len(fg.nodes_with_role(g, "storage")) == 5
    for h in hosts(g):
        assert all(zone(n) == zone(h) for n in g.neighbors(h))
        assert g.nodes[h]["nics"][0]["ip"].startswith(f"10.{zone(h)}.")
    for leaf in fg.nodes_with_role(g, "leaf"):
        zone_spines = [s for s in fg.nodes_with_role(g, "spine") if zone(s) == zone(leaf)]
        assert sorted(nbrs(g, leaf, "spine")) == sorted(zone_spines)
    cross = [(a, b) for a, b in g.edges
             if zone(a) is not None and zone(b) is not None and zone(a) != zone(b)]
    assert len(cross) == 3
    assert all(g.nodes[a]["role"] == g.nodes[b]["role"] == "spine" for a, b in cross)


@pytest.mark.parametrize("storage", [0, 1, 5])
def test_two_zone_storage_dual_homed(storage):
    g = topologies.build(f"two-zone,storage={storage}")
    for st in fg.nodes_with_role(g, "storage"):
        zones = sorted(g.nodes[n]["zone"] for n in g.neighbors(st))
        assert zones == [0, 1]
        nics = g.nodes[st]["nics"]
        assert len(nics) == 2
        prefixes = [ipaddress.ip_network(n["prefix"]) for n in nics]
        assert prefixes[0] != prefixes[1] and all(p.prefixlen == 16 for p in prefixes)
        for nic in nics:
            assert ipaddress.ip_address(nic["ip"]) in ipaddress.ip_network(nic["prefix"])
            leaf = fg._neighbour_on_port(g, st, nic["port"])
            assert nic["ip"].startswith(f"10.{g.nodes[leaf]['zone']}.")


# --- fat-tree ---------------------------------------------------------------

@pytest.mark.parametrize("k", [2, 4, 6])
def test_fat_tree_counts_and_degrees(k):
    g = topologies.build(f"fat-tree,k={k}")
    assert len(hosts(g)) == k ** 3 // 4
    assert len(fg.switches(g)) == 5 * k * k // 4
    assert len(fg.nodes_with_role(g, "core")) == (k // 2) ** 2
    assert all(g.degree(s) == k for s in fg.switches(g))
    assert all(g.nodes[h]["nics"][0]["ip"].startswith(f"10.{g.nodes[h]['pod']}.")
               for h in hosts(g))


def test_fat_tree_wiring():
    k, half = 4, 2
    g = topologies.build(f"fat-tree,k={k}")
    for pod in range(k):
        aggs = [f"p{pod}a{j}" for j in range(half)]
        for i in range(half):
            assert sorted(nbrs(g, f"p{pod}e{i}", "spine")) == aggs
        for j, agg in enumerate(aggs):
            assert sorted(nbrs(g, agg, "core")) == sorted(
                f"c{c}" for c in range(j * half, (j + 1) * half))


# --- leaf-spine -------------------------------------------------------------

def test_leaf_spine():
    g = topologies.build("leaf-spine,leaves=3,spines=2,hosts_per_leaf=5,gbps=10")
    assert len(hosts(g)) == 15
    for leaf in fg.nodes_with_role(g, "leaf"):
        assert sorted(nbrs(g, leaf, "spine")) == ["s0", "s1"]
        assert g.edges[leaf, "s0"]["gbps"] == pytest.approx(5 * 10 / 2)


# --- JSON -------------------------------------------------------------------

def test_to_json_dict_rail_clos():
    g = topologies.build("rail-clos,servers=8,gpus=2,servers_per_leaf=4,spines=4")
    d = fg.to_json_dict(g)
    json.dumps(d)
    roles = {}
    for node in d["nodes"]:
        roles.setdefault(node["role"], []).append(node)
    assert len(roles["host"]) == 16
    assert len(roles["leaf"]) == 4 and len(roles["spine"]) == 4
    assert sorted(n["rail"] for n in roles["leaf"]) == [0, 0, 1, 1]
    linked = {frozenset((link["a"], link["b"])) for link in d["links"]}
    for leaf in roles["leaf"]:
        for spine in roles["spine"]:
            assert frozenset((leaf["name"], spine["name"])) in linked


# --- rejected parameters ----------------------------------------------------

@pytest.mark.parametrize("spec, message", [
    ("rail-clos,servers=0", "rail-clos: servers must be >= 1, got 0"),
    ("rail-clos,gpus=-1", "rail-clos: gpus must be >= 1, got -1"),
    ("rail-clos,spines=0", "rail-clos: spines must be >= 1, got 0"),
    ("rail-clos,gbps=-400", r"rail-clos: gbps must be a finite number > 0, got -400.0"),
    ("rail-clos,gbps=0", "rail-clos: gbps must be a finite number > 0"),
    ("rail-clos,gbps=nan", "rail-clos: gbps must be a finite number > 0"),
    ("rail-clos,oversub=0", "rail-clos: oversub must be a finite number > 0"),
    ("rail-clos,oversub=65", "rail-clos: oversub must be <= 64, got 65.0"),
    ("rail-clos,servers=5000", "rail-clos: .* 10000 endpoints, above the limit of 8192"),
    ("rail-clos,servers=8,servers_per_leaf=1,spines=2040",
     "rail-clos: .* 2056 switches, above the limit of 2048"),
    ("two-zone,spines=0", "two-zone: spines must be >= 1, got 0"),
    ("two-zone,storage=-1", "two-zone: storage must be >= 0, got -1"),
    ("two-zone,interzone_links=0", "two-zone: interzone_links must be >= 1, got 0"),
    ("two-zone,interzone_links=3", r"two-zone: interzone_links must be <= spines \(2\), got 3"),
    ("two-zone,storage=9000", "two-zone: .* above the limit of 8192"),
    ("fat-tree,k=5", "fat-tree: k must be even, got 5"),
    ("fat-tree,k=0", "fat-tree: k must be >= 2, got 0"),
    ("fat-tree,k=34", "fat-tree: k=34 gives 9826 endpoints, above the limit of 8192"),
    ("fat-tree,gbps=-1", "fat-tree: gbps must be a finite number > 0"),
    ("leaf-spine,leaves=0", "leaf-spine: leaves must be >= 1, got 0"),
    ("leaf-spine,hosts_per_leaf=10000", "leaf-spine: .* above the limit of 8192"),
])
def test_rejected_parameters(spec, message):
    with pytest.raises(TopologyError, match=message):
        topologies.build(spec)


def test_direct_call_rejects_non_integer_count():
    with pytest.raises(TopologyError, match="rail-clos: servers must be an integer, got 2.5"):
        topologies.rail_clos(servers=2.5)
