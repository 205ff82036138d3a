"""Can flow control deadlock on these routes? The buffer dependency graph (pure).

On a lossless lane a packet held in a switch's buffer for the link it arrived on
waits for the output it is routed to; if that output's buffer downstream is full,
the link it arrived on is paused. A packet for destination ``d`` that arrives
over link ``u -> s`` and leaves over ``s -> v`` makes ``u -> s`` depend on
``s -> v``. A cycle of such dependencies can pause every link of the cycle for
good: a PFC deadlock (Hu et al., "Deadlocks in Datacenter Networks", HotNets
2016). Up-down routes (up to a turning tier, then down) have none; a route that
goes down and up again (a reroute around a failed link) can close one.

Only the dependencies a packet can really create count: for each destination,
from every endpoint's links into the fabric along the installed routes. Routes
are the same on every lane (they are per destination address), so one graph
serves every lossless lane.
"""

from __future__ import annotations

from collections import deque
from typing import Mapping

import networkx as nx

from fabric.model import graph as fg

Link = tuple[str, str]  # directed: (sender, receiver)
Tables = Mapping[str, Mapping[str, tuple[int, ...]]]  # switch -> destination ip -> ports


def buffer_dependencies(graph: nx.Graph, tables: Tables) -> nx.DiGraph:
    """The links packets may wait on, each pointing to the links it may wait for.

    Parameters
    ----------
    graph : networkx.Graph
        The fabric.
    tables : mapping
        The installed routes, ``{switch: {destination ip: output ports}}`` (as
        :func:`fabric.routing.tables.route_tables` or
        :func:`fabric.routing.static.static_route_tables` give them): every port of a
        destination's set may be taken.

    Returns
    -------
    networkx.DiGraph
        Nodes are directed links; an edge ``(u, s) -> (s, v)`` says a packet that
        arrived over ``u -> s`` may wait for ``s -> v``.
    """
    by_port = {sw: {fg.port(graph, sw, n): n for n in graph.neighbors(sw)}
               for sw in fg.switches(graph)}
    deps = nx.DiGraph()
    entries = [(att.endpoint, att.switch) for att in fg.attachments(graph)]
    for ip in {ip for table in tables.values() for ip in table}:
        seen = set(entries)
        queue = deque(entries)
        while queue:  # every link a packet for ``ip`` can cross, from any sender
            u, s = queue.popleft()
            for port in tables.get(s, {}).get(ip, ()):
                v = by_port[s][port]
                deps.add_edge((u, s), (s, v))
                if fg.is_switch(graph, v) and (s, v) not in seen:
                    seen.add((s, v))
                    queue.append((s, v))
    return deps


def dependency_cycle(graph: nx.Graph, tables: Tables) -> list[Link] | None:
    """A cycle of links each waiting for the next (the first one found), or None when
    the routes cannot deadlock."""
    deps = buffer_dependencies(graph, tables)
    try:
        edges = nx.find_cycle(deps)
    except nx.NetworkXNoCycle:
        return None
    return [edge[0] for edge in edges]


def describe_cycle(cycle: list[Link]) -> str:
    """``a -> b -> c -> a``: the switches a cycle of links runs through."""
    return " -> ".join([cycle[0][0]] + [link[1] for link in cycle])
