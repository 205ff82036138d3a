"""Al-Fares k-ary three-tier fat-tree."""

from __future__ import annotations

import networkx as nx

from fabric.model.graph import FabricBuilder, TopologyError
from topologies._common import check_count, check_rate, check_size

NAME = "fat-tree"


def fat_tree(k: int = 4, gbps: float = 100.0) -> nx.Graph:
    """Build the k-ary fat-tree of Al-Fares et al. (SIGCOMM 2008).

    ``k`` pods, each with ``k/2`` edge switches ``p{pod}e{i}`` (role ``leaf``)
    and ``k/2`` aggregation switches ``p{pod}a{i}`` (role ``spine``);
    ``(k/2)^2`` core switches ``c{i}``; ``k^3/4`` hosts ``p{pod}e{e}h{i}``
    (``k/2`` per edge switch). Every edge switch links to every aggregation
    switch of its pod; aggregation switch ``j`` of each pod links to cores
    ``j*k/2 .. j*k/2 + k/2 - 1``. Every switch has degree ``k`` and the fabric
    is non-blocking. Pod nodes carry attribute ``pod``; host NICs use the pod
    as address group.

    Parameters
    ----------
    k : int
        Switch radix, even and >= 2 (the size limits allow k <= 12).
    gbps : float
        Rate of every link.

    Returns
    -------
    networkx.Graph
        The fabric graph (see :mod:`fabric.model.graph`).

    Raises
    ------
    TopologyError
        On a bad parameter or a fabric above the size limits.
    """
    check_count(NAME, "k", k, minimum=2)
    if k % 2:
        raise TopologyError(f"{NAME}: k must be even, got {k}")
    check_rate(NAME, "gbps", gbps)
    half = k // 2
    check_size(NAME, k ** 3 // 4, 5 * k * k // 4, f"k={k}")

    fb = FabricBuilder(NAME, dict(k=k, gbps=gbps))
    cores = [fb.add_switch(f"c{i}", "core", index=i) for i in range(half * half)]
    host_index = 0
    for pod in range(k):
        aggs = [fb.add_switch(f"p{pod}a{j}", "spine", pod=pod, index=j) for j in range(half)]
        edges = [fb.add_switch(f"p{pod}e{i}", "leaf", pod=pod, index=i) for i in range(half)]
        for i, edge in enumerate(edges):
            for h in range(half):
                # Longest name for k=12 is "p11e5h5-eth0": 12 characters.
                host = fb.add_endpoint(f"p{pod}e{i}h{h}", "host", pod=pod, index=host_index)
                host_index += 1
                fb.link(host, edge, gbps, addr_group=pod)
            fb.link_all([edge], aggs, gbps)
        for j, agg in enumerate(aggs):
            fb.link_all([agg], cores[j * half:(j + 1) * half], gbps)
    return fb.build()
