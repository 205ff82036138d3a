"""Which fabric endpoint plays which rank of a trace (pure).

Trace ranks are numbered server-major, as ``torchrun`` numbers them: rank
``g`` of server ``s`` is global rank ``s * G + g`` with ``G`` GPUs (NICs)
per server. Placements:

``rail``
    On a rail-optimised fabric (endpoints with ``server`` and ``rail``
    attributes) rank ``s * G + g`` is NIC ``g`` of the ``s``-th server: each
    GPU talks through the NIC of its own rail, and a tensor-parallel group of
    ranks ``s*G .. s*G+G-1`` stays inside one server. Elsewhere: ``packed``.
``packed``
    The builder's endpoint order.
``scattered``
    That order shuffled with ``random.Random(seed)``.
"""

from __future__ import annotations

import random
from typing import Hashable, Iterable

import networkx as nx

from fabric.errors import UserError
from fabric.model.graph import nodes_with_role
from fabric.traffic.placement import server_of

PLACEMENTS = ("rail", "packed", "scattered")


class PlacementError(UserError, ValueError):
    """Ranks that cannot be placed on the fabric."""


def _rail_order(graph: nx.Graph, hosts: list[str]) -> list[str]:
    """Server-major, NIC (rail) within the server, when every host has both."""
    if not all("server" in graph.nodes[h] and "rail" in graph.nodes[h] for h in hosts):
        return hosts
    return sorted(hosts, key=lambda h: (graph.nodes[h]["server"], graph.nodes[h]["rail"]))


def place_ranks(graph: nx.Graph, ranks: int, placement: str = "rail",
                seed: int = 0, exclude: Iterable[str] = ()) -> list[str]:
    """Return the endpoint of every trace rank, rank 0 first.

    Parameters
    ----------
    graph : networkx.Graph
        The fabric; its endpoints of role ``host`` are the candidates.
    ranks : int
        Ranks of the trace.
    placement : {"rail", "packed", "scattered"}
        See the module docstring.
    seed : int
        Seed of ``scattered``.
    exclude : iterable of str
        Endpoints already taken (by another job): the order skips them.

    Raises
    ------
    PlacementError
        On an unknown placement or more ranks than the fabric has endpoints.
    """
    if placement not in PLACEMENTS:
        raise PlacementError(f"placement must be one of {', '.join(PLACEMENTS)}, "
                             f"got {placement!r}")
    taken = set(exclude)
    hosts = [h for h in nodes_with_role(graph, "host") if h not in taken]
    if not 1 <= ranks <= len(hosts):
        free = f" free ({len(taken)} taken)" if taken else ""
        raise PlacementError(f"the trace has {ranks} ranks but the fabric has {len(hosts)} "
                             f"host endpoints{free}")
    if placement == "rail":
        order = _rail_order(graph, hosts)
    else:
        order = list(hosts)
        if placement == "scattered":
            random.Random(seed).shuffle(order)
    return order[:ranks]


def endpoint_servers(graph: nx.Graph, endpoints: Iterable[str]) -> dict[str, Hashable]:
    """The server of each endpoint (an endpoint without one is its own server)."""
    return {e: server_of(graph, e) for e in endpoints}
