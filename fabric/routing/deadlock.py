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

At run time a deadlock shows as a cycle of links each *held* paused, continuously,
by the next: :func:`held_cycle` restricts the dependency graph to the links held
longer than a threshold and looks for a cycle there (a ring of paused links that
is not a dependency cycle, e.g. two congestion trees side by side, is not one).
:func:`valley_routes` builds a deadlock on purpose: two routes that go down and up
again and close a cycle of four links.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import combinations
from typing import Iterable, Mapping

import networkx as nx

from fabric.errors import UserError
from fabric.model import graph as fg

Link = tuple[str, str]  # directed: (sender, receiver)
Tables = Mapping[str, Mapping[str, tuple[int, ...]]]  # switch -> destination ip -> ports
Routes = dict[str, dict[str, tuple[int, ...]]]


class DeadlockCaseError(UserError, ValueError):
    """A fabric on which :func:`valley_routes` cannot close a cycle."""


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
    return find_cycle(buffer_dependencies(graph, tables))


def find_cycle(deps: nx.DiGraph) -> list[Link] | None:
    """The first cycle of a dependency graph, as its links in order, or None."""
    try:
        edges = nx.find_cycle(deps)
    except nx.NetworkXNoCycle:
        return None
    return [edge[0] for edge in edges]


def describe_cycle(cycle: list[Link]) -> str:
    """``a -> b -> c -> a``: the switches a cycle of links runs through."""
    return " -> ".join([cycle[0][0]] + [link[1] for link in cycle])


def held_cycle(deps: nx.DiGraph, held: Iterable[Link]) -> list[Link] | None:
    """A cycle of dependencies among the ``held`` links only (each held paused longer
    than a threshold, on one lane), or None.

    Parameters
    ----------
    deps : networkx.DiGraph
        :func:`buffer_dependencies` of the installed routes.
    held : iterable of (str, str)
        Directed links whose pause has lasted longer than the threshold.
    """
    return find_cycle(deps.subgraph(set(held) & set(deps.nodes)))


@dataclass(frozen=True)
class Valley:
    """Where :func:`valley_routes` closes its cycle: leaves ``a`` and ``b``, spines ``x``
    and ``y``, and the leaf ``c`` the traffic leaves the cycle for."""

    a: str
    b: str
    c: str
    x: str
    y: str


def find_valley(graph: nx.Graph) -> Valley:
    """Three leaves sharing two spines, the third with two endpoint addresses (pure).

    Raises
    ------
    DeadlockCaseError
        When the fabric has no such set (e.g. a fat-tree's pods have two edge
        switches).
    """
    tiers = fg.switch_tiers(graph)
    under = _under(graph)
    leaves = sorted(sw for sw, tier in tiers.items() if tier == 1 and sw in under)
    spines = sorted(sw for sw, tier in tiers.items() if tier == 2)
    for x, y in combinations(spines, 2):
        shared = [sw for sw in leaves if graph.has_edge(sw, x) and graph.has_edge(sw, y)]
        dest = next((c for c in shared if len(under[c]) >= 2), None)
        sources = [sw for sw in shared if sw != dest]
        if dest is not None and len(sources) >= 2:
            return Valley(sources[0], sources[1], dest, x, y)
    raise DeadlockCaseError(
        f"a deadlock case needs three leaves that share two spines, with two endpoint "
        f"addresses under one of them; {graph.graph.get('spec', 'this fabric')} has "
        f"{len(leaves)} leaves and {len(spines)} spines without such a set")


def _under(graph: nx.Graph) -> dict[str, list[fg.Attachment]]:
    out: dict[str, list[fg.Attachment]] = {}
    for att in fg.attachments(graph):
        out.setdefault(att.switch, []).append(att)
    return out


def valley_routes(graph: nx.Graph) -> Routes:
    """Routes that go down and up again and close a cycle of four links (pure).

    With :func:`find_valley`'s leaves and spines: packets for ``c``'s first address go
    ``a -> x -> b -> y -> c`` and for its second ``b -> y -> a -> x -> c``, so ``a>x``
    waits for ``x>b``, which waits for ``b>y``, which waits for ``y>a``, which waits for
    ``a>x``. From ``c``, packets for ``b``'s first address go up by ``x`` and for
    ``a``'s by ``y``: the traffic of :func:`valley_flows` then loads every link of the
    cycle with two flows, each backlogged behind the one before, so every link of the
    ring pauses and the ring can close (Hu et al., HotNets 2016, Fig. 1).

    Returns
    -------
    dict
        ``{switch: {destination ip: (port,)}}``, to pin over a policy's tables
        (:func:`fabric.routing.tables.pin_routes`; ``ControllerConfig.routes``).

    Raises
    ------
    DeadlockCaseError
        As :func:`find_valley`.
    """
    v = find_valley(graph)
    under = _under(graph)
    d1, d2 = under[v.c][0].ip, under[v.c][1].ip
    to_a, to_b = under[v.a][0].ip, under[v.b][0].ip

    def port(sw: str, nbr: str) -> tuple[int, ...]:
        return (fg.port(graph, sw, nbr),)

    return {v.a: {d1: port(v.a, v.x), d2: port(v.a, v.x)}, v.x: {d1: port(v.x, v.b)},
            v.b: {d1: port(v.b, v.y), d2: port(v.b, v.y)}, v.y: {d2: port(v.y, v.a)},
            v.c: {to_b: port(v.c, v.x), to_a: port(v.c, v.y)}}


def valley_flows(graph: nx.Graph) -> list[tuple[str, str]]:
    """``[(src, dst)]``: the four flows that load :func:`valley_routes`' cycle, two on
    each of its links: ``a`` to ``c``'s first address and ``b`` to its second (three
    links of the ring each), ``c`` to ``b`` by ``x`` and ``c`` to ``a`` by ``y`` (one)."""
    v = find_valley(graph)
    under = _under(graph)
    a, b, c = under[v.a][0], under[v.b][0], under[v.c]
    return [(a.endpoint, c[0].endpoint), (b.endpoint, c[1].endpoint),
            (c[0].endpoint, b.endpoint), (c[1].endpoint, a.endpoint)]
