"""Synthetic benchmark patterns: every host sends one flow (pure).

``stride``
    Rank ``i`` sends to rank ``i + k``, ``k`` being the largest number of
    ranks under one leaf: with rail placement every flow leaves its leaf, a
    permutation across the spines (the classic ECMP collision benchmark).
``permutation``
    A random permutation with no fixed point (seeded): the standard load of
    the multipath literature and of packet simulators (htsim's
    ``setPermutation``); some flows stay under their leaf or pod, the rest
    cross the spines.
``permutation-interpod``
    A random permutation in which every flow leaves its pod (seeded): the
    traffic htsim's published fat-tree figures were measured on. Fewer flows
    stay local, so more meet in the core. On a fabric without pods a flow
    leaves its leaf.
"""

from __future__ import annotations

import random
from typing import Hashable, Mapping

import networkx as nx

from fabric.traffic.model import Transfer

SYNTHETIC_PATTERNS = ("stride", "permutation", "permutation-interpod")


def stride(graph: nx.Graph, ranks: list[str], nbytes: int, tag: str = "stride"
           ) -> list[Transfer]:
    """Every rank sends ``nbytes`` to the rank one leaf further on."""
    leaf_of = {r: next(iter(graph.neighbors(r))) for r in ranks}
    per_leaf = max(sum(1 for r in ranks if leaf_of[r] == leaf) for leaf in set(leaf_of.values()))
    n = len(ranks)
    return [Transfer(f"{tag}/{i}", src, ranks[(i + per_leaf) % n], nbytes, tag=tag)
            for i, src in enumerate(ranks) if ranks[(i + per_leaf) % n] != src]


def permutation(ranks: list[str], nbytes: int, seed: int, tag: str = "permutation",
                groups: Mapping[str, Hashable] | None = None) -> list[Transfer]:
    """Every rank sends ``nbytes`` to one other rank, each receiving once (seeded).

    With ``groups`` (rank -> its pod) every rank sends outside its own group.

    Raises
    ------
    ValueError
        With fewer than two ranks, or when one group holds more than half of them
        (some rank would have nowhere to send).
    """
    if len(ranks) < 2:
        raise ValueError(f"a permutation needs two ranks, got {len(ranks)}")
    rng = random.Random(seed)
    targets = list(ranks)
    if groups is None:
        while any(a == b for a, b in zip(ranks, targets)):  # a derangement, by rejection
            rng.shuffle(targets)
    else:
        targets = _across_groups(ranks, groups, rng)
    return [Transfer(f"{tag}/{i}", src, dst, nbytes, tag=tag)
            for i, (src, dst) in enumerate(zip(ranks, targets))]


def pods(graph: nx.Graph, ranks: list[str]) -> dict[str, Hashable]:
    """Each rank's pod: its ``pod`` attribute where the fabric has pods, else its leaf."""
    if all("pod" in graph.nodes[r] for r in ranks):
        return {r: graph.nodes[r]["pod"] for r in ranks}
    return {r: min(graph.neighbors(r)) for r in ranks}


def _across_groups(ranks: list[str], groups: Mapping[str, Hashable],
                   rng: random.Random) -> list[str]:
    """Targets of a random permutation with every rank's target in another group: a
    shuffle, then each rank sending inside its group swaps targets with a random rank
    for which the swap leaves both outside their groups."""
    sizes: dict[Hashable, int] = {}
    for r in ranks:
        sizes[groups[r]] = sizes.get(groups[r], 0) + 1
    if max(sizes.values()) * 2 > len(ranks):
        raise ValueError(f"an inter-pod permutation needs every pod to hold at most half "
                         f"of the {len(ranks)} ranks; one holds {max(sizes.values())}")
    targets = list(ranks)
    rng.shuffle(targets)
    n = len(ranks)
    for i in range(n):
        if groups[targets[i]] != groups[ranks[i]]:
            continue
        order = list(range(n))
        rng.shuffle(order)
        # a partner exists: the group holds at most half of the ranks and of the targets
        j = next(j for j in order if groups[targets[j]] != groups[ranks[i]]
                 and groups[targets[i]] != groups[ranks[j]])
        targets[i], targets[j] = targets[j], targets[i]
    return targets
