"""Planned static routes, as an InfiniBand subnet manager computes them (pure).

OpenSM's fat-tree engine gives every destination one route, chosen so that the
up-ports of each switch carry equal numbers of destinations: the destinations are
numbered leaf by leaf (those under one leaf consecutive), and at a switch of tier
``t`` (leaves are tier 1) destination ``d`` leaves by up-port
``d // (w_1 * ... * w_{t-1}) mod w_t`` of its equal-cost ports, ``w_u`` being how
many up-ports a switch of tier ``u`` has ("D-mod-k"). A shift permutation (every
source ``i`` to ``i + s``) then shares no link: the sources under a leaf send to
consecutive destinations, which leave by different up-ports, and so on up the tiers.
Going down there is one port, so the same rule installs it.

The routes are destination-based, one output port per destination and switch: no
select group and no hash, so the senders' entropy does not move a flow. Around a
down link they are recomputed from the links left, as the subnet manager reroutes
after a trap: the equal-cost ports shrink and the same rule picks among those left.
"""

from __future__ import annotations

from typing import Iterable

import networkx as nx

from fabric.model import graph as fg
from fabric.routing.tables import route_tables


class StaticRoutingError(ValueError):
    """A fabric the planned static routes cannot be computed for."""


def switch_tiers(graph: nx.Graph) -> dict[str, int]:
    """Each switch's tier (:func:`fabric.model.graph.switch_tiers`; a leaf is tier 1).

    Raises
    ------
    StaticRoutingError
        When a switch reaches no endpoint.
    """
    tiers = fg.switch_tiers(graph)
    lost = sorted(set(fg.switches(graph)) - set(tiers))
    if lost:
        raise StaticRoutingError(f"static routing: switch {lost[0]} reaches no endpoint")
    return tiers


def up_ports(graph: nx.Graph, tiers: dict[str, int]) -> dict[int, int]:
    """Tier -> the most up-ports (links to the tier above) a switch of that tier has."""
    most: dict[int, int] = {}
    for sw, t in tiers.items():
        most[t] = max(most.get(t, 0), len(fg.uplinks(graph, sw, tiers)))
    return most


def destination_order(graph: nx.Graph) -> list[str]:
    """Every endpoint NIC's address, numbered leaf by leaf and port by port within a leaf:
    the destination numbers of D-mod-k."""
    order = {sw: i for i, sw in enumerate(graph.nodes)}
    return [att.ip for att in sorted(fg.attachments(graph),
                                     key=lambda a: (order[a.switch], a.switch_port))]


def static_route_tables(graph: nx.Graph, down: Iterable[frozenset] = ()
                        ) -> dict[str, dict[str, tuple[int, ...]]]:
    """Return ``{switch: {destination ip: (its one output port,)}}`` (module docstring).

    Parameters
    ----------
    graph : networkx.Graph
        The fabric graph.
    down : iterable of frozenset
        Links to route around; a destination whose only link is down is absent.

    Raises
    ------
    StaticRoutingError
        When a switch reaches no endpoint (the graph has no tiers to plan by).
    """
    tiers = switch_tiers(graph)
    ups = up_ports(graph, tiers)
    divisor = {t: _product(ups.get(u, 1) or 1 for u in range(1, t)) for t in set(tiers.values())}
    number = {ip: d for d, ip in enumerate(destination_order(graph))}
    # the equal-cost ports of every switch and destination, one of them chosen by D-mod-k
    return {sw: {ip: (ports[(number[ip] // divisor[tiers[sw]]) % len(ports)],)
                 for ip, ports in table.items()}
            for sw, table in route_tables(graph, down).items()}


def _product(values: Iterable[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out
