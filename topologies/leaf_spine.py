"""Two-tier leaf-spine fabric."""

from __future__ import annotations

import networkx as nx

from fabric.model.graph import FabricBuilder
from topologies._common import (check_counts, check_oversub, check_rate, check_size,
                                uplink_gbps)

NAME = "leaf-spine"


def leaf_spine(leaves: int = 4, spines: int = 4, hosts_per_leaf: int = 4, gbps: float = 100.0,
               oversub: float = 1.0) -> nx.Graph:
    """Build a two-tier leaf-spine fabric with every leaf linked to every spine.

    Leaves are ``l{i}``, spines ``s{i}``, hosts ``l{i}h{j}`` (role ``host``,
    one NIC each, all in address group 0).

    Parameters
    ----------
    leaves : int
        Number of leaf switches, >= 1.
    spines : int
        Number of spine switches, >= 1.
    hosts_per_leaf : int
        Hosts under each leaf, >= 1.
    gbps : float
        Host NIC rate.
    oversub : float
        Leaf oversubscription (down/up), in (0, 64]: each leaf-spine link runs
        at ``hosts_per_leaf * gbps / spines / oversub``.

    Returns
    -------
    networkx.Graph
        The fabric graph (see :mod:`fabric.model.graph`).

    Raises
    ------
    TopologyError
        On a bad parameter or a fabric above the size limits.
    """
    check_counts(NAME, leaves=leaves, spines=spines, hosts_per_leaf=hosts_per_leaf)
    check_rate(NAME, "gbps", gbps)
    check_oversub(NAME, oversub)
    check_size(NAME, leaves * hosts_per_leaf, leaves + spines,
               f"leaves={leaves}, spines={spines}, hosts_per_leaf={hosts_per_leaf}")

    fb = FabricBuilder(NAME, dict(leaves=leaves, spines=spines, hosts_per_leaf=hosts_per_leaf,
                                  gbps=gbps, oversub=oversub))
    leaf_names = [fb.add_switch(f"l{i}", "leaf", index=i) for i in range(leaves)]
    spine_names = [fb.add_switch(f"s{i}", "spine", index=i) for i in range(spines)]
    for i, leaf in enumerate(leaf_names):
        for j in range(hosts_per_leaf):
            host = fb.add_endpoint(f"l{i}h{j}", "host", index=i * hosts_per_leaf + j)
            fb.link(host, leaf, gbps)
    fb.link_all(leaf_names, spine_names, uplink_gbps(hosts_per_leaf, gbps, spines, oversub))
    return fb.build()
