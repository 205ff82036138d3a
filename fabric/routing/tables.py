"""Pure routing logic: from the fabric graph to per-switch intents.

Routes are per destination NIC address (/32). Every switch forwards towards
the destination's attachment switch over all shortest switch-only paths;
endpoints are never transit (a dual-homed storage node does not bridge its
zones). Several next hops become one select group per distinct port set.

Pipeline: table 0 handles control traffic and puts IPv4 into its lane's
queue by DSCP; table 1 routes on the destination address.
"""

from __future__ import annotations

import zlib
from collections import deque
from typing import Iterable

import networkx as nx

from fabric.model import graph as fg
from fabric.model.intents import (ETH_TYPE_ARP, ETH_TYPE_IPV4, ETH_TYPE_IPV6, Bucket, Flow, Group,
                                  Output, SetQueue, SwitchIntent, ToController, ToGroup)
from fabric.model.lanes import SINGLE_LANE, LaneConfig

TABLE_CLASSIFY = 0
TABLE_ROUTE = 1
PRIORITY_ROUTE = 100
PRIORITY_CLASSIFY = 100
PRIORITY_CONTROL = 1000


def next_hops(graph: nx.Graph, dest_switch: str,
              down: Iterable[frozenset] = ()) -> dict[str, tuple[int, ...]]:
    """Return, for every switch, its ports on shortest paths to ``dest_switch``.

    Parameters
    ----------
    graph : networkx.Graph
        The fabric graph.
    dest_switch : str
        The switch the destination is attached to.
    down : iterable of frozenset
        Links (as ``frozenset({a, b})``) to treat as absent.

    Returns
    -------
    dict
        ``{switch: sorted ports}``; ``dest_switch`` itself and switches with
        no path are absent.
    """
    down = set(down)
    dist = {dest_switch: 0}
    queue = deque([dest_switch])
    while queue:  # BFS over switches only: endpoints are never transit
        node = queue.popleft()
        for nbr in graph.neighbors(node):
            if nbr not in dist and fg.is_switch(graph, nbr) and frozenset((node, nbr)) not in down:
                dist[nbr] = dist[node] + 1
                queue.append(nbr)
    hops = {}
    for sw, d in dist.items():
        if d == 0:
            continue
        ports = sorted(fg.port(graph, sw, nbr) for nbr in graph.neighbors(sw)
                       if dist.get(nbr) == d - 1 and frozenset((sw, nbr)) not in down)
        hops[sw] = tuple(ports)
    return hops


def classify_flows(lanes: LaneConfig = SINGLE_LANE) -> tuple[Flow, ...]:
    """Table 0: control traffic, and the service level -> lane map.

    IPv6 is dropped (the emulated fabric is IPv4 only and IPv6 neighbour
    discovery would otherwise flood), ARP goes to the controller, which
    answers from the graph, and anything unmatched is dropped rather than
    flooded: flooding loops in a multipath fabric. IPv4 is put in its lane's
    queue by DSCP and continues to the routing table.
    """
    flows = [
        Flow.make(0),
        Flow.make(PRIORITY_CONTROL, eth_type=ETH_TYPE_IPV6),
        Flow.make(PRIORITY_CONTROL, (ToController(),), eth_type=ETH_TYPE_ARP),
        Flow.make(0, table_id=TABLE_ROUTE),
    ]
    if not lanes.isolating:
        flows.append(Flow.make(PRIORITY_CLASSIFY, goto_table=TABLE_ROUTE, eth_type=ETH_TYPE_IPV4))
        return tuple(flows)
    for queue, lane in enumerate(lanes.lanes):
        flows += [Flow.make(PRIORITY_CLASSIFY + 1, (SetQueue(queue),), goto_table=TABLE_ROUTE,
                            eth_type=ETH_TYPE_IPV4, ip_dscp=dscp) for dscp in lane.dscp]
    flows.append(Flow.make(PRIORITY_CLASSIFY, (SetQueue(lanes.default_queue),),
                           goto_table=TABLE_ROUTE, eth_type=ETH_TYPE_IPV4))
    return tuple(flows)


def route_tables(graph: nx.Graph, down: Iterable[frozenset] = ()
                 ) -> dict[str, dict[str, tuple[int, ...]]]:
    """Return ``{switch: {destination ip: equal-cost ports}}``.

    Parameters
    ----------
    graph : networkx.Graph
        The fabric graph.
    down : iterable of frozenset
        Links to route around; a destination whose only link is down is
        absent from every table.
    """
    down = frozenset(down)
    tables: dict[str, dict[str, tuple[int, ...]]] = {sw: {} for sw in fg.switches(graph)}
    for att in fg.attachments(graph):
        if frozenset((att.switch, att.endpoint)) in down:
            continue
        tables[att.switch][att.ip] = (att.switch_port,)
        for sw, ports in next_hops(graph, att.switch, down).items():
            tables[sw][att.ip] = ports
    return tables


def pin_routes(tables: dict[str, dict[str, tuple[int, ...]]],
               pinned: dict[str, dict[str, tuple[int, ...]]]
               ) -> dict[str, dict[str, tuple[int, ...]]]:
    """``tables`` with the ``pinned`` routes in place of the policy's (pure)."""
    out = {sw: dict(table) for sw, table in tables.items()}
    for sw, routes in pinned.items():
        out.setdefault(sw, {}).update({ip: tuple(ports) for ip, ports in routes.items()})
    return out


def check_pinned(graph: nx.Graph, pinned: dict[str, dict[str, tuple[int, ...]]]) -> None:
    """Refuse pinned routes that name a switch, address or port the graph lacks.

    Raises
    ------
    ValueError
        Naming the first such route.
    """
    ips = {att.ip for att in fg.attachments(graph)}
    for sw, table in pinned.items():
        if sw not in graph or not fg.is_switch(graph, sw):
            raise ValueError(f"pinned routes: {sw!r} is not a switch of this fabric")
        ports = {fg.port(graph, sw, nbr) for nbr in graph.neighbors(sw)}
        for ip, out in table.items():
            if ip not in ips:
                raise ValueError(f"pinned routes: {sw} {ip}: no endpoint has that address")
            if not out:
                raise ValueError(f"pinned routes: {sw} {ip}: no output port given")
            wrong = [p for p in out if p not in ports]
            if wrong:
                raise ValueError(f"pinned routes: {sw} {ip}: {sw} has no port {wrong[0]} "
                                 f"(its ports: {min(ports)}-{max(ports)})")


def hash_basis(switch: str) -> int:
    """A fixed per-switch seed for the select hash (CRC-32 of the name)."""
    return zlib.crc32(switch.encode())


def assign_group_ids(port_sets: Iterable[tuple[int, ...]],
                     previous: dict[tuple[int, ...], int] | None = None
                     ) -> dict[tuple[int, ...], int]:
    """Give each port set a group id, keeping the ids of ``previous`` sets.

    Stable ids let a recomputation (after a failure) modify groups in place
    instead of renumbering every group on the switch.
    """
    previous = previous or {}
    ids = {ports: previous[ports] for ports in port_sets if ports in previous}
    used = set(ids.values())
    next_id = 1
    for ports in sorted(set(port_sets) - set(ids)):
        while next_id in used:
            next_id += 1
        ids[ports] = next_id
        used.add(next_id)
    return ids


def group_ids_of(intent: SwitchIntent | None) -> dict[tuple[int, ...], int]:
    """Port set -> group id of an installed intent (for :func:`assign_group_ids`)."""
    if intent is None:
        return {}
    return {tuple(b.port for b in g.buckets): g.group_id for g in intent.groups}


Weights = dict[tuple[int, ...], dict[int, int]]  # per switch: port set -> port -> weight


def build_intents(graph: nx.Graph, tables: dict[str, dict[str, tuple[int, ...]]],
                  lanes: LaneConfig = SINGLE_LANE,
                  weights: dict[str, Weights] | None = None,
                  previous: dict[str, SwitchIntent] | None = None,
                  default_weight: int = 1) -> dict[str, SwitchIntent]:
    """Turn route tables into switch intents.

    Each multi-port next-hop set becomes one select group (OVS ``dp_hash``
    over the 5-tuple, a per-switch hash basis, buckets watching their own
    port so the switch skips a dead link before the controller reacts).

    Parameters
    ----------
    graph : networkx.Graph
        The fabric graph.
    tables : dict
        From :func:`route_tables`.
    lanes : LaneConfig
        Service level -> lane map for table 0.
    weights : dict, optional
        ``{switch: {port set: {port: weight}}}``.
    previous : dict, optional
        The intents installed now, whose group ids are kept.
    default_weight : int
        Weight of buckets ``weights`` does not name.
    """
    weights = weights or {}
    previous = previous or {}
    classify = classify_flows(lanes)
    intents = {}
    for sw, table in tables.items():
        port_sets = {ports for ports in table.values() if len(ports) > 1}
        ids = assign_group_ids(port_sets, group_ids_of(previous.get(sw)))
        sw_weights = weights.get(sw, {})
        groups = tuple(sorted(
            (Group(gid, "select",
                   tuple(Bucket(p, sw_weights.get(ports, {}).get(p, default_weight),
                                watch_port=p)
                         for p in ports), hash_basis=hash_basis(sw))
             for ports, gid in ids.items()), key=lambda g: g.group_id))
        flows = list(classify)
        for ip in sorted(table, key=_ip_key):
            ports = table[ip]
            action = ToGroup(ids[ports]) if len(ports) > 1 else Output(ports[0])
            flows.append(Flow.make(PRIORITY_ROUTE, (action,), table_id=TABLE_ROUTE,
                                   eth_type=ETH_TYPE_IPV4, ipv4_dst=ip))
        intents[sw] = SwitchIntent(sw, fg.dpid_int(graph, sw), tuple(flows), groups)
    return intents


def ecmp_intents(graph: nx.Graph, down: Iterable[frozenset] = (),
                 lanes: LaneConfig = SINGLE_LANE,
                 previous: dict[str, SwitchIntent] | None = None) -> dict[str, SwitchIntent]:
    """Per-flow ECMP: equal weights over every equal-cost next hop.

    Parameters
    ----------
    graph : networkx.Graph
        The fabric graph.
    down : iterable of frozenset
        Links to route around.
    lanes : LaneConfig
        Service level -> lane map.
    previous : dict, optional
        Installed intents whose group ids are kept.

    Returns
    -------
    dict
        ``{switch name: SwitchIntent}`` for every switch; equal inputs give
        equal outputs.
    """
    return build_intents(graph, route_tables(graph, down), lanes, previous=previous)


def _ip_key(ip: str) -> tuple[int, ...]:
    return tuple(int(o) for o in ip.split("."))
