"""ECMP routing intents, checked by tracing packets through the flow tables.

The tracer is deliberately independent of :mod:`fabric.routing.tables`: it applies
each switch's flows as a switch would (highest-priority matching flow wins;
``Output`` goes to the neighbour on that port, ``ToGroup`` to every bucket of
a select group) and compares the paths it finds with networkx's shortest paths
over the switch-only subgraph.
"""

from __future__ import annotations

from dataclasses import replace

import networkx as nx
import pytest

import topologies
from fabric.model import graph as fg
from fabric.model.intents import (ETH_TYPE_ARP, ETH_TYPE_IPV4, ETH_TYPE_IPV6, Output, SetQueue,
                                  SwitchIntent, ToController, ToGroup)
from fabric.routing.tables import PRIORITY_CONTROL, PRIORITY_ROUTE, ecmp_intents, next_hops

BUILDER_NAMES = sorted(topologies.BUILDERS)


@pytest.fixture(scope="module", params=BUILDER_NAMES)
def fabric(request):
    graph = topologies.build(request.param)
    return graph, ecmp_intents(graph)


# --- a small independent packet tracer ---------------------------------------

def lookup_in_table(intent: SwitchIntent, packet: dict, table: int):
    """Return the highest-priority flow of ``table`` that matches ``packet``."""
    matching = [f for f in intent.flows
                if f.table_id == table and all(packet.get(k) == v for k, v in f.match)]
    assert matching, f"{intent.name}: no flow in table {table} matches {packet}"
    top = max(f.priority for f in matching)
    best = [f for f in matching if f.priority == top]
    assert len(best) == 1, f"{intent.name}: ambiguous flows for {packet}: {best}"
    return best[0]


def lookup(intent: SwitchIntent, packet: dict):
    """Return the last flow ``packet`` hits, following goto-table from table 0.

    Actions of the earlier tables (e.g. set-queue) are kept on the returned
    flow, in order, as a switch applies them.
    """
    flow = lookup_in_table(intent, packet, 0)
    earlier: tuple = ()
    tables_seen = {0}
    while flow.goto_table is not None:
        assert flow.goto_table not in tables_seen, f"{intent.name}: goto loop"
        tables_seen.add(flow.goto_table)
        earlier += flow.actions
        flow = lookup_in_table(intent, packet, flow.goto_table)
    return replace(flow, actions=earlier + flow.actions) if earlier else flow


def out_ports(intent: SwitchIntent, flow) -> list[int]:
    """Ports a flow may send a packet out of (all buckets of a select group)."""
    groups = {g.group_id: g for g in intent.groups}
    ports = []
    for action in flow.actions:
        if isinstance(action, Output):
            ports.append(action.port)
        elif isinstance(action, ToGroup):
            group = groups.get(action.group_id)
            assert group is not None, f"{intent.name}: flow points at missing group {action}"
            assert group.kind == "select"
            assert group.buckets, f"{intent.name}: group {group.group_id} has no buckets"
            ports.extend(b.port for b in group.buckets)
        elif isinstance(action, SetQueue):
            continue  # picks the egress queue, not the port
        else:
            pytest.fail(f"{intent.name}: unexpected action {action!r} on a route")
    return ports


def port_map(graph: nx.Graph) -> dict[str, dict[int, str]]:
    return {sw: {fg.port(graph, sw, nbr): nbr for nbr in graph.neighbors(sw)}
            for sw in fg.switches(graph)}


def trace(graph, intents, start: str, dst_ip: str, dst_endpoint: str) -> set[tuple[str, ...]]:
    """Every switch path a packet to ``dst_ip`` may take from switch ``start``.

    Fails on a loop, a dead end (a drop), or delivery to any endpoint other
    than ``dst_endpoint`` on the NIC that owns ``dst_ip``.
    """
    ports_of = port_map(graph)
    packet = {"eth_type": ETH_TYPE_IPV4, "ipv4_dst": dst_ip}
    paths: set[tuple[str, ...]] = set()

    def walk(sw: str, path: tuple[str, ...]) -> None:
        assert sw not in path, f"loop towards {dst_ip}: {path + (sw,)}"
        path += (sw,)
        flow = lookup(intents[sw], packet)
        ports = out_ports(intents[sw], flow)
        assert ports, f"{sw} drops packets to {dst_ip} (flow {flow})"
        assert len(set(ports)) == len(ports), f"{sw}: duplicate next hops {ports}"
        for p in ports:
            assert p in ports_of[sw], f"{sw} forwards to {dst_ip} out of non-existent port {p}"
            nbr = ports_of[sw][p]
            if fg.is_endpoint(graph, nbr):
                assert nbr == dst_endpoint, (
                    f"packet to {dst_ip} ({dst_endpoint}) delivered to {nbr} via {path}")
                nic_port = fg.port(graph, nbr, sw)
                nic = next(n for n in graph.nodes[nbr]["nics"] if n["port"] == nic_port)
                assert nic["ip"] == dst_ip, f"{dst_ip} delivered to {nbr}'s NIC {nic['ip']}"
                paths.add(path)
            else:
                walk(nbr, path)

    walk(start, ())
    return paths


def switch_core(graph: nx.Graph, down=()) -> nx.Graph:
    core = nx.Graph(graph.subgraph(fg.switches(graph)))
    core.remove_edges_from(tuple(link) for link in down if all(n in core for n in link))
    return core


def check_all_pairs(graph, intents, down=()):
    core = switch_core(graph, down)
    atts = fg.attachments(graph)
    starts = sorted({a.switch for a in atts})
    for dst in atts:
        for start in starts:
            paths = trace(graph, intents, start, dst.ip, dst.endpoint)
            expected = {tuple(p) for p in nx.all_shortest_paths(core, start, dst.switch)}
            shortest = nx.shortest_path_length(core, start, dst.switch)
            assert all(len(p) - 1 == shortest for p in paths), (
                f"{start} -> {dst.ip}: non-shortest path among {paths}")
            assert paths == expected, (
                f"{start} -> {dst.ip}: ECMP should use all shortest paths {expected}, got {paths}")


# --- routes -------------------------------------------------------------------

def test_every_switch_has_an_intent(fabric):
    graph, intents = fabric
    assert set(intents) == set(fg.switches(graph))
    for sw, intent in intents.items():
        assert intent.name == sw
        assert intent.dpid == fg.dpid_int(graph, sw)


def test_every_switch_routes_every_nic(fabric):
    graph, intents = fabric
    ips = [a.ip for a in fg.attachments(graph)]
    for sw, intent in intents.items():
        routed = {dict(f.match).get("ipv4_dst") for f in intent.flows
                  if dict(f.match).get("eth_type") == ETH_TYPE_IPV4}
        missing = set(ips) - routed
        assert not missing, f"{sw} has no route to {sorted(missing)}"
        for ip in ips:
            flow = lookup(intent, {"eth_type": ETH_TYPE_IPV4, "ipv4_dst": ip})
            assert flow.priority == PRIORITY_ROUTE
            assert dict(flow.match) == {"eth_type": ETH_TYPE_IPV4, "ipv4_dst": ip}
            assert flow.actions


def test_group_ids_unique_and_all_used(fabric):
    _, intents = fabric
    for sw, intent in intents.items():
        ids = [g.group_id for g in intent.groups]
        assert len(ids) == len(set(ids)), sw
        used = {a.group_id for f in intent.flows for a in f.actions if isinstance(a, ToGroup)}
        assert used == set(ids), f"{sw}: groups {ids}, used {used}"
        assert len({tuple(b.port for b in g.buckets) for g in intent.groups}) == len(ids)


def test_all_pairs_follow_all_shortest_switch_paths(fabric):
    graph, intents = fabric
    check_all_pairs(graph, intents)


def test_two_zone_storage_is_never_transit():
    graph = topologies.build("two-zone")
    intents = ecmp_intents(graph)
    storage = fg.nodes_with_role(graph, "storage")
    assert storage
    # Storage is a shortcut in the full graph (it joins leaves of both zones),
    # but never on a route: the tracer fails on delivery to a non-destination.
    full_len = nx.shortest_path_length(graph, "z0l0", "z1l0")
    core_len = nx.shortest_path_length(switch_core(graph), "z0l0", "z1l0")
    assert full_len < core_len
    check_all_pairs(graph, intents)
    for sw, intent in intents.items():
        to_storage = {fg.port(graph, sw, st) for st in storage if graph.has_edge(sw, st)}
        for flow in intent.flows:
            dst = dict(flow.match).get("ipv4_dst")
            owners = {a.endpoint for a in fg.attachments(graph) if a.ip == dst}
            for p in out_ports(intent, flow) if dst else ():
                if p in to_storage:
                    assert owners <= set(storage), f"{sw} sends {dst} into a storage node"


def test_base_flows_on_every_switch(fabric):
    _, intents = fabric
    for sw, intent in intents.items():
        flows = set(intent.flows)
        ipv6 = [f for f in flows if dict(f.match).get("eth_type") == ETH_TYPE_IPV6]
        arp = [f for f in flows if dict(f.match).get("eth_type") == ETH_TYPE_ARP]
        miss = [f for f in flows if not f.match and f.table_id == 0]
        route_miss = [f for f in flows if not f.match and f.table_id == 1]
        assert len(ipv6) == 1 and ipv6[0].priority == PRIORITY_CONTROL == 1000
        assert ipv6[0].actions == () and dict(ipv6[0].match) == {"eth_type": ETH_TYPE_IPV6}
        assert len(arp) == 1 and arp[0].priority == 1000
        assert arp[0].actions == (ToController(),)
        assert len(miss) == 1 and miss[0].priority == 0 and miss[0].actions == ()
        # IPv6 and ARP win over everything; anything else falls to table-miss.
        assert lookup(intent, {"eth_type": ETH_TYPE_IPV6, "ipv4_dst": "10.0.0.1"}) == ipv6[0]
        assert lookup(intent, {"eth_type": ETH_TYPE_ARP}) == arp[0]
        assert route_miss and route_miss[0].actions == () and route_miss[0].goto_table is None
        assert lookup(intent, {"eth_type": ETH_TYPE_IPV4, "ipv4_dst": "10.250.0.1"}) == \
            route_miss[0]
        assert lookup(intent, {"eth_type": 0x88CC}) == miss[0]
        assert len(intent.flows) == len(flows), f"{sw}: duplicate flows"


# --- rail-clos specifics --------------------------------------------------------

@pytest.fixture(scope="module")
def rail():
    graph = topologies.build("rail-clos")
    return graph, ecmp_intents(graph)


def test_rail_clos_leaf_uses_one_group_of_four_spines(rail):
    graph, intents = rail
    leaf, far_host = "r0l0", "h4g0"  # server 4 hangs under r0l1
    assert fg.port(graph, far_host, "r0l1") == 0
    spines = fg.nodes_with_role(graph, "spine")
    assert len(spines) == 4
    intent = intents[leaf]
    ip = graph.nodes[far_host]["ip"]
    flow = lookup(intent, {"eth_type": ETH_TYPE_IPV4, "ipv4_dst": ip})
    (action,) = flow.actions
    assert isinstance(action, ToGroup)
    (group,) = [g for g in intent.groups if g.group_id == action.group_id]
    assert group.kind == "select"
    assert len(group.buckets) == 4
    assert sorted(b.port for b in group.buckets) == sorted(fg.port(graph, leaf, s) for s in spines)
    # Equal weights; each bucket watches its own port so the switch skips a dead link.
    assert all(b.weight == 1 and b.watch_port == b.port for b in group.buckets)
    # A host under the same leaf is a direct output.
    near = graph.nodes["h1g0"]["ip"]
    assert lookup(intent, {"eth_type": ETH_TYPE_IPV4, "ipv4_dst": near}).actions == (
        Output(fg.port(graph, leaf, "h1g0")),)


def test_spine_routes_are_single_outputs(rail):
    graph, intents = rail
    for spine in fg.nodes_with_role(graph, "spine"):
        assert intents[spine].groups == ()
        for att in fg.attachments(graph):
            flow = lookup(intents[spine], {"eth_type": ETH_TYPE_IPV4, "ipv4_dst": att.ip})
            assert flow.actions == (Output(fg.port(graph, spine, att.switch)),)


@pytest.mark.parametrize("name", BUILDER_NAMES)
def test_intents_are_deterministic(name):
    graph = topologies.build(name)
    first = ecmp_intents(graph)
    assert first == ecmp_intents(graph)
    assert first == ecmp_intents(topologies.build(name))
    for intent in first.values():
        assert [g.group_id for g in intent.groups] == list(range(1, len(intent.groups) + 1))


# --- failures -------------------------------------------------------------------

def _route_ports(intent: SwitchIntent) -> set[int]:
    return {p for f in intent.flows if dict(f.match).get("ipv4_dst")
            for p in out_ports(intent, f)}


def test_rail_clos_link_down_is_avoided(rail):
    graph, _ = rail
    leaf, spine = "r0l0", "sp0"
    down = [frozenset((leaf, spine))]
    intents = ecmp_intents(graph, down=down)
    assert fg.port(graph, leaf, spine) not in _route_ports(intents[leaf])
    assert fg.port(graph, spine, leaf) not in _route_ports(intents[spine])
    for g in intents[leaf].groups:
        assert fg.port(graph, leaf, spine) not in [b.port for b in g.buckets]
    far = lookup(intents[leaf], {"eth_type": ETH_TYPE_IPV4,
                                 "ipv4_dst": graph.nodes["h4g0"]["ip"]})
    assert len(out_ports(intents[leaf], far)) == 3
    check_all_pairs(graph, intents, down)


@pytest.mark.parametrize("name", BUILDER_NAMES)
def test_any_redundant_switch_link_down(name):
    graph = topologies.build(name)
    core = switch_core(graph)
    bridges = {frozenset(e) for e in nx.bridges(core)}
    link = next(frozenset(e) for e in core.edges if frozenset(e) not in bridges)
    intents = ecmp_intents(graph, down=[link])
    for sw in link:
        (other,) = link - {sw}
        assert fg.port(graph, sw, other) not in _route_ports(intents[sw])
    check_all_pairs(graph, intents, [link])


def test_host_link_down_removes_only_that_route(rail):
    graph, _ = rail
    host = "h0g0"
    ip = graph.nodes[host]["ip"]
    intents = ecmp_intents(graph, down=[frozenset((host, "r0l0"))])
    for intent in intents.values():
        assert lookup(intent, {"eth_type": ETH_TYPE_IPV4, "ipv4_dst": ip}).priority == 0
        routed = sum(1 for f in intent.flows if dict(f.match).get("ipv4_dst"))
        assert routed == len(fg.attachments(graph)) - 1


def test_next_hops_excludes_destination_and_unreachable():
    graph = topologies.build("two-zone")
    hops = next_hops(graph, "z0l0")
    assert "z0l0" not in hops
    assert set(hops) == set(fg.switches(graph)) - {"z0l0"}
    # Cutting the only inter-zone link leaves zone 1 without a route.
    cut = next_hops(graph, "z0l0", down=[frozenset(("z0s0", "z1s0"))])
    assert not any(sw.startswith("z1") for sw in cut)
    assert all(ports == tuple(sorted(ports)) for ports in hops.values())
