"""Rail-optimised two-tier Clos (NVIDIA DGX SuperPOD style)."""

from __future__ import annotations

import networkx as nx

from fabric.model.graph import FabricBuilder, TopologyError
from topologies._common import (MAX_ENDPOINTS, check_counts, check_oversub, check_rate,
                                check_size, uplink_gbps)

NAME = "rail-clos"


def rail_clos(servers: int = 8, gpus: int = 2, servers_per_leaf: int = 4, spines: int = 4,
              gbps: float = 400.0, oversub: float = 1.0) -> nx.Graph:
    """Build a rail-optimised Clos: NIC k of every server sits on rail k.

    Each (server, GPU) pair is one endpoint ``h{server}g{gpu}`` (role ``host``,
    attributes ``server`` and ``rail``) with one NIC. Each rail has
    ``ceil(servers / servers_per_leaf)`` leaves ``r{rail}l{i}``; server ``s``
    attaches to leaf ``s // servers_per_leaf`` of every rail. Every leaf links
    to every spine ``sp{i}``, so traffic between rails crosses a spine and
    traffic within a rail stays on (or below) its leaves.

    Parameters
    ----------
    servers : int
        Number of servers, >= 1. Need not be a multiple of
        ``servers_per_leaf``: the last leaf of each rail is then partly filled.
    gpus : int
        GPUs (and NICs, and rails) per server, >= 1.
    servers_per_leaf : int
        Leaf down-ports per rail, >= 1.
    spines : int
        Number of spine switches, >= 1.
    gbps : float
        Host NIC rate.
    oversub : float
        Leaf oversubscription (down/up), in (0, 64]. Each leaf-spine link runs
        at ``servers_per_leaf * gbps / spines / oversub``, sized for a full
        leaf, so 1.0 is non-blocking.

    Returns
    -------
    networkx.Graph
        The fabric graph (see :mod:`fabric.model.graph`); host NIC addresses use the
        rail as address group (``10.<rail>.x.y``).

    Raises
    ------
    TopologyError
        On a bad parameter or a fabric above the size limits.
    """
    check_counts(NAME, servers=servers, gpus=gpus, servers_per_leaf=servers_per_leaf,
                 spines=spines)
    check_rate(NAME, "gbps", gbps)
    check_oversub(NAME, oversub)
    if servers_per_leaf > MAX_ENDPOINTS:  # would only inflate the uplink rate
        raise TopologyError(f"{NAME}: servers_per_leaf must be <= {MAX_ENDPOINTS}, "
                            f"got {servers_per_leaf}")
    leaves_per_rail = -(-servers // servers_per_leaf)
    check_size(NAME, servers * gpus, gpus * leaves_per_rail + spines,
               f"servers={servers}, gpus={gpus}, servers_per_leaf={servers_per_leaf}, "
               f"spines={spines}")

    fb = FabricBuilder(NAME, dict(servers=servers, gpus=gpus, servers_per_leaf=servers_per_leaf,
                                  spines=spines, gbps=gbps, oversub=oversub))
    leaves = [[fb.add_switch(f"r{rail}l{i}", "leaf", rail=rail, index=i)
               for i in range(leaves_per_rail)] for rail in range(gpus)]
    spine_names = [fb.add_switch(f"sp{i}", "spine", index=i) for i in range(spines)]
    # Server-major order: host h{s}g{g} gets 10.{g}.0.{s+1}, so the address
    # names both the rail and the server.
    for server in range(servers):
        for rail in range(gpus):
            host = fb.add_endpoint(f"h{server}g{rail}", "host", server=server, rail=rail)
            fb.link(host, leaves[rail][server // servers_per_leaf], gbps, addr_group=rail)
    uplink = uplink_gbps(servers_per_leaf, gbps, spines, oversub)
    for rail_leaves in leaves:
        fb.link_all(rail_leaves, spine_names, uplink)
    return fb.build()
