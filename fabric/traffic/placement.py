"""Rank placement: which compute NIC plays which collective rank (pure).

A *rank* is one endpoint of role ``host`` (one GPU's NIC). The order of the
rank list is the ring order of the ring collectives and the rank numbering of
the trees, so placement decides which links a collective loads.
"""

from __future__ import annotations

import random
from typing import Hashable, Iterable

import networkx as nx

from fabric.model.graph import nodes_with_role

PLACEMENTS = ("rail", "random")


def _builder_order(graph: nx.Graph, hosts: list[str]) -> list[str]:
    """Order by (zone, pod, index), falling back on insertion order.

    The builders already insert hosts zone- or pod-major, so this is their
    order; sorting makes it independent of how ``hosts`` was listed.
    """
    position = {h: i for i, h in enumerate(nodes_with_role(graph, "host"))}

    def key(h: str) -> tuple[int, int, int, int]:
        data = graph.nodes[h]
        return (data.get("zone", -1), data.get("pod", -1), data.get("index", -1), position[h])

    return sorted(hosts, key=key)


def _rail_order(graph: nx.Graph, hosts: list[str]) -> list[str]:
    """Order by (rail, server) when every host has both, else builder order."""
    if all("rail" in graph.nodes[h] and "server" in graph.nodes[h] for h in hosts):
        # Grouped by rail, then by server: ring neighbours sit on the same rail
        # (and, for consecutive servers, usually the same leaf).
        return sorted(hosts, key=lambda h: (graph.nodes[h]["rail"], graph.nodes[h]["server"]))
    return _builder_order(graph, hosts)


def rank_hosts(graph: nx.Graph, n: int | None = None, placement: str = "rail", seed: int = 0,
               hosts: Iterable[str] | None = None) -> list[str]:
    """Return compute endpoints ordered as collective ranks.

    Parameters
    ----------
    graph : networkx.Graph
        The fabric graph.
    n : int, optional
        Take the first ``n`` of the order (all when None).
    placement : {"rail", "random"}
        ``"rail"``: on a rail-optimised fabric, grouped by rail and within a
        rail by server; elsewhere the builder order (zone/pod, then index).
        ``"random"``: a shuffle of that order with ``random.Random(seed)``.
    seed : int
        Seed of the random placement.
    hosts : iterable of str, optional
        Restrict the candidates to these endpoints (their order is ignored).

    Returns
    -------
    list of str
        Endpoint names, rank 0 first.

    Raises
    ------
    ValueError
        On an unknown placement, a candidate that is not a host endpoint, or
        ``n`` outside ``1..len(candidates)``.
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    all_hosts = nodes_with_role(graph, "host")
    if hosts is None:
        candidates = all_hosts
    else:
        candidates = list(dict.fromkeys(hosts))
        known = set(all_hosts)
        bad = [h for h in candidates if h not in known]
        if bad:
            raise ValueError(f"not host endpoints of the fabric: {bad}")
    order = _rail_order(graph, candidates)
    if placement == "random":
        random.Random(seed).shuffle(order)
    if n is not None:
        if not 1 <= n <= len(order):
            raise ValueError(f"n must be in 1..{len(order)}, got {n}")
        order = order[:n]
    return order


def server_of(graph: nx.Graph, host: str) -> Hashable:
    """Return the server ``host`` belongs to.

    Hosts without a ``server`` attribute (fabrics with one NIC per server)
    are their own server, so the host name is returned.
    """
    return graph.nodes[host].get("server", host)


def rail_groups(graph: nx.Graph, ranks: Iterable[str]) -> dict[int, list[str]]:
    """Group ranks by rail, keeping rank order within each rail.

    Raises
    ------
    ValueError
        When a rank has no ``rail`` attribute (not a rail-optimised fabric).
    """
    groups: dict[int, list[str]] = {}
    for rank in ranks:
        rail = graph.nodes[rank].get("rail")
        if rail is None:
            raise ValueError(f"{rank} has no rail: not a rail-optimised fabric")
        groups.setdefault(rail, []).append(rank)
    return dict(sorted(groups.items()))
