"""Synthetic benchmark patterns: every host sends one flow (pure).

``stride``
    Rank ``i`` sends to rank ``i + k``, ``k`` being the largest number of
    ranks under one leaf: with rail placement every flow leaves its leaf, a
    permutation across the spines (the classic ECMP collision benchmark).
``permutation``
    A random permutation with no fixed point (seeded): the standard load of
    the multipath literature and of packet simulators; some flows stay under
    their leaf, the rest cross the spines.
"""

from __future__ import annotations

import random

import networkx as nx

from fabric.traffic.model import Transfer

SYNTHETIC_PATTERNS = ("stride", "permutation")


def stride(graph: nx.Graph, ranks: list[str], nbytes: int, tag: str = "stride"
           ) -> list[Transfer]:
    """Every rank sends ``nbytes`` to the rank one leaf further on."""
    leaf_of = {r: next(iter(graph.neighbors(r))) for r in ranks}
    per_leaf = max(sum(1 for r in ranks if leaf_of[r] == leaf) for leaf in set(leaf_of.values()))
    n = len(ranks)
    return [Transfer(f"{tag}/{i}", src, ranks[(i + per_leaf) % n], nbytes, tag=tag)
            for i, src in enumerate(ranks) if ranks[(i + per_leaf) % n] != src]


def permutation(ranks: list[str], nbytes: int, seed: int, tag: str = "permutation"
                ) -> list[Transfer]:
    """Every rank sends ``nbytes`` to one other rank, each receiving once (seeded)."""
    if len(ranks) < 2:
        raise ValueError(f"a permutation needs two ranks, got {len(ranks)}")
    rng = random.Random(seed)
    targets = list(ranks)
    while any(a == b for a, b in zip(ranks, targets)):  # a derangement, by rejection
        rng.shuffle(targets)
    return [Transfer(f"{tag}/{i}", src, dst, nbytes, tag=tag)
            for i, (src, dst) in enumerate(zip(ranks, targets))]
