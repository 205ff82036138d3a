"""Pure routing logic: from the fabric graph to per-switch intents.

Routes are per destination NIC address (/32). Every switch forwards towards
the destination's attachment switch over all shortest switch-only paths;
endpoints are never transit (a dual-homed storage node does not bridge its
zones). Several next hops become one select group per distinct port set.
"""

from __future__ import annotations

from collections import deque
from typing import Iterable

import networkx as nx

from fabric import graph as fg
from fabric.intents import (ETH_TYPE_ARP, ETH_TYPE_IPV4, ETH_TYPE_IPV6, Bucket, Flow,
                            Group, Output, SwitchIntent, ToController, ToGroup)

PRIORITY_ROUTE = 100
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


def base_flows() -> tuple[Flow, ...]:
    """Flows every switch holds whatever the policy.

    IPv6 is dropped (the emulated fabric is IPv4 only and IPv6 neighbour
    discovery would otherwise flood), ARP goes to the controller, which
    answers from the graph, and anything unmatched is dropped rather than
    flooded: flooding loops in a multipath fabric.
    """
    return (
        Flow.make(0),
        Flow.make(PRIORITY_CONTROL, eth_type=ETH_TYPE_IPV6),
        Flow.make(PRIORITY_CONTROL, (ToController(),), eth_type=ETH_TYPE_ARP),
    )


def ecmp_intents(graph: nx.Graph, down: Iterable[frozenset] = ()) -> dict[str, SwitchIntent]:
    """Per-flow ECMP: one select group per distinct set of equal-cost ports.

    Parameters
    ----------
    graph : networkx.Graph
        The fabric graph.
    down : iterable of frozenset
        Links to route around.

    Returns
    -------
    dict
        ``{switch name: SwitchIntent}`` for every switch. Group ids are
        assigned in sorted order of port sets, so equal inputs give equal
        outputs.
    """
    down = frozenset(down)
    routes: dict[str, dict[str, tuple[int, ...]]] = {sw: {} for sw in fg.switches(graph)}
    for att in fg.attachments(graph):
        if frozenset((att.switch, att.endpoint)) in down:
            continue
        routes[att.switch][att.ip] = (att.switch_port,)
        for sw, ports in next_hops(graph, att.switch, down).items():
            routes[sw][att.ip] = ports
    return {sw: _switch_intent(graph, sw, table) for sw, table in routes.items()}


def _switch_intent(graph: nx.Graph, sw: str, table: dict[str, tuple[int, ...]]) -> SwitchIntent:
    port_sets = sorted({ports for ports in table.values() if len(ports) > 1})
    group_ids = {ports: i + 1 for i, ports in enumerate(port_sets)}
    groups = tuple(Group(gid, "select", tuple(Bucket(p) for p in ports))
                   for ports, gid in group_ids.items())
    flows = list(base_flows())
    for ip in sorted(table, key=_ip_key):
        ports = table[ip]
        action = ToGroup(group_ids[ports]) if len(ports) > 1 else Output(ports[0])
        flows.append(Flow.make(PRIORITY_ROUTE, (action,), eth_type=ETH_TYPE_IPV4, ipv4_dst=ip))
    return SwitchIntent(sw, fg.dpid_int(graph, sw), tuple(flows), groups)


def _ip_key(ip: str) -> tuple[int, ...]:
    return tuple(int(o) for o in ip.split("."))
