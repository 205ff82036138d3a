"""Collective communication patterns as transfer schedules (pure).

Each generator turns a rank list (endpoint names, rank 0 first; the order is
the ring order) and a size into :class:`~fabric.traffic.model.Transfer` lists
whose dependencies are local to the sender, as NCCL's are: a rank forwards a
piece once it has received it.

``size_bytes`` is nccl-tests' size: the per-rank buffer for all-reduce and
all-to-all, the total output for all-gather, the total input for
reduce-scatter. Common options:

``channels``
    NCCL's parallel rings/trees: the data is split evenly over them and each
    runs independently on its own connection (``Transfer.channel``).
``chunks``
    Pipelining (NCCL's slices): every step's piece is cut into ``chunks``
    sub-pieces; sub-piece ``c`` is forwarded as soon as it arrived.
``slots``
    Pieces in flight per connection (NCCL's ``NCCL_STEPS``, 8): a send also
    waits for the send ``slots`` places before it on the same connection to
    be complete, as NCCL's sender waits for the receiver to free a slot of
    its buffer. With 8 slots a rank forwards each piece the moment it arrived
    and the link stays busy across step boundaries; with 1 every send waits
    for the previous one's last acknowledgement (one piece in flight).
``dscp``, ``tag``
    Traffic class and the prefix of every id and tag (use distinct tags for
    two collectives in one plan).

NCCL's defaults, for reference: 8 slots (``NCCL_STEPS``) of a 4 MiB buffer
(``NCCL_BUFFSIZE``), so 512 KiB, 128 packets of 4 KiB, per slot; one channel
per NIC and more on rail-optimised servers. The emulation keeps packet sizes
and slows time, so a piece of ``P`` packets here is a piece of ``P`` packets
there: pick ``chunks`` so that pieces are a few dozen packets.

Every byte count is exact: a total is split into near-equal integer parts
with the remainder spread over the first parts (:func:`split_bytes`).
Reporting follows nccl-tests ``doc/PERFORMANCE.md``: :func:`algbw`,
:func:`busbw_factor`, :func:`busbw`.
"""

from __future__ import annotations

from typing import Callable, Sequence

import networkx as nx

from fabric.traffic.model import Transfer
from fabric.traffic.placement import rail_groups

__all__ = ["COLLECTIVES", "algbw", "all_gather", "all_to_all", "binary_tree", "busbw",
           "busbw_factor", "double_binary_tree", "generate", "hierarchical_allreduce",
           "reduce_scatter", "ring_allreduce", "split_bytes", "tree_allreduce"]


def split_bytes(total: int, parts: int) -> list[int]:
    """Split ``total`` into ``parts`` integers differing by at most one.

    The first ``total % parts`` parts get the extra byte, so the sum is exact.
    """
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    if total < 0:
        raise ValueError(f"total must be >= 0, got {total}")
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _check(ranks: Sequence[str], size_bytes: int, chunks: int, channels: int, dscp: int,
           min_pieces: int, slots: int = 1) -> None:
    if len(ranks) < 1:
        raise ValueError("a collective needs at least one rank")
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"ranks must be distinct, got {list(ranks)}")
    if chunks < 1 or channels < 1 or slots < 1:
        raise ValueError(f"chunks, channels and slots must be >= 1, got {chunks}, {channels}, "
                         f"{slots}")
    if not 0 <= dscp <= 63:
        raise ValueError(f"dscp must be 0..63, got {dscp}")
    # Every transfer must carry at least one byte (validate_schedule).
    if size_bytes < min_pieces:
        raise ValueError(f"size_bytes {size_bytes} is too small to split into {min_pieces} "
                         f"pieces (ranks x chunks x channels)")


# --- rings -------------------------------------------------------------------

def _ring(ranks: Sequence[str], size_bytes: int, steps: int,
          part_of: Callable[[int, int], int], *, tag: str, dscp: int, chunks: int,
          channels: int, slots: int) -> list[Transfer]:
    """Ring schedule: at step ``k`` rank ``r`` sends part ``part_of(r, k)`` to ``r + 1``.

    ``part_of`` must satisfy ``part_of(r, k) == part_of(r - 1, k - 1)``: what a
    rank sends at step ``k`` is what it received at step ``k - 1``.
    """
    n = len(ranks)
    _check(ranks, size_bytes, chunks, channels, dscp, n * chunks * channels, slots)
    if n == 1:
        return []

    def tid(ch: int, k: int, c: int, r: int) -> str:
        return f"{tag}/ch{ch}/step{k}/chunk{c}/r{r}"

    out: list[Transfer] = []
    for ch, ch_bytes in enumerate(split_bytes(size_bytes, channels)):
        pieces = [split_bytes(p, chunks) for p in split_bytes(ch_bytes, n)]
        sent: list[list[str]] = [[] for _ in range(n)]  # each rank's sends on its link
        for k in range(steps):
            for c in range(chunks):
                for r in range(n):
                    after = []
                    if k > 0:  # forward what the predecessor sent at step k-1
                        after.append(tid(ch, k - 1, c, (r - 1) % n))
                    after += _slot_freed(sent[r], slots)
                    this = tid(ch, k, c, r)
                    out.append(Transfer(this, ranks[r], ranks[(r + 1) % n],
                                        pieces[part_of(r, k) % n][c], tuple(after), dscp,
                                        f"{tag}/step{k}", ch))
                    sent[r].append(this)
    return out


def _slot_freed(earlier: list[str], slots: int) -> list[str]:
    """The send a new one on the same connection waits for: ``slots`` places back."""
    return [earlier[-slots]] if len(earlier) >= slots else []


def ring_allreduce(ranks: Sequence[str], size_bytes: int, *, chunks: int = 1, dscp: int = 0,
                   tag: str = "ring-allreduce", channels: int = 1,
                   slots: int = 8) -> list[Transfer]:
    """Ring all-reduce: reduce-scatter then all-gather, ``2(N-1)`` steps.

    At step ``k`` rank ``r`` sends part ``(r - k) mod N`` (of ``N`` near-equal
    parts of ``size_bytes``) to its successor; steps ``0..N-2`` reduce, the
    rest gather. Each rank sends ``2(N-1)/N * size_bytes`` (exact up to one
    byte per part, per channel).

    Parameters
    ----------
    ranks : sequence of str
        Endpoints in ring order.
    size_bytes : int
        Per-rank buffer size, at least ``N * chunks * channels``.
    chunks, dscp, tag, channels, slots
        See the module docstring.

    Returns
    -------
    list of Transfer
        Ids ``{tag}/ch{c}/step{k}/chunk{j}/r{r}``; tags ``{tag}/step{k}``.
    """
    return _ring(ranks, size_bytes, 2 * (len(ranks) - 1), lambda r, k: r - k, tag=tag,
                 dscp=dscp, chunks=chunks, channels=channels, slots=slots)


def all_gather(ranks: Sequence[str], size_bytes: int, *, chunks: int = 1, dscp: int = 0,
               tag: str = "all-gather", channels: int = 1, slots: int = 8) -> list[Transfer]:
    """Ring all-gather: ``N-1`` steps; rank ``r`` starts with part ``r``.

    ``size_bytes`` is the total output size; each rank sends
    ``(N-1)/N * size_bytes`` (everything but its successor's part).
    """
    return _ring(ranks, size_bytes, len(ranks) - 1, lambda r, k: r - k, tag=tag, dscp=dscp,
                 chunks=chunks, channels=channels, slots=slots)


def reduce_scatter(ranks: Sequence[str], size_bytes: int, *, chunks: int = 1, dscp: int = 0,
                   tag: str = "reduce-scatter", channels: int = 1,
                   slots: int = 8) -> list[Transfer]:
    """Ring reduce-scatter: ``N-1`` steps; rank ``r`` ends with part ``r`` reduced.

    ``size_bytes`` is the total input size; each rank sends
    ``(N-1)/N * size_bytes`` (everything but its own part).
    """
    return _ring(ranks, size_bytes, len(ranks) - 1, lambda r, k: r - k - 1, tag=tag, dscp=dscp,
                 chunks=chunks, channels=channels, slots=slots)


# --- trees -------------------------------------------------------------------

def _btree_node(n: int, rank: int) -> tuple[int, int, int]:
    """NCCL's ``ncclGetBtree`` (src/graph/trees.cc): (parent, child0, child1), -1 for none."""
    bit = 1
    while bit < n:
        if bit & rank:
            break
        bit <<= 1
    if rank == 0:
        return -1, -1, (bit >> 1 if n > 1 else -1)
    up = (rank ^ bit) | (bit << 1)
    if up >= n:
        up = rank ^ bit
    lowbit = bit >> 1
    down0 = -1 if lowbit == 0 else rank - lowbit
    down1 = -1 if lowbit == 0 else rank + lowbit
    while down1 >= n:  # literal translation of NCCL's loop
        down1 = -1 if lowbit == 0 else rank + lowbit
        lowbit >>= 1
    return up, down0, down1


def binary_tree(n: int) -> list[int]:
    """Return NCCL's binary tree over ranks ``0..n-1`` as a parent list (-1: root).

    Rank 0 is the root with a single child; odd ranks are leaves; a rank's
    parent is found by moving its lowest set bit one place up.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return [_btree_node(n, r)[0] for r in range(n)]


def double_binary_tree(n: int) -> tuple[list[int], list[int]]:
    """Return NCCL's two complementary trees (``ncclGetDtree``) as parent lists.

    Tree 1 is :func:`binary_tree`. Tree 2 mirrors it (rank ``r`` plays
    ``n-1-r``) when ``n`` is even, so the odd ranks (leaves of tree 1) are the
    interior of tree 2 and every rank is a leaf in exactly one tree; when
    ``n`` is odd it is shifted by one rank (``r`` plays ``r-1``), where only
    rank 0 can be interior in both (root with one child in tree 1).
    """
    first = binary_tree(n)
    if n % 2 == 0:
        second = [-1 if first[n - 1 - r] == -1 else n - 1 - first[n - 1 - r] for r in range(n)]
    else:
        second = [-1 if first[(r - 1) % n] == -1 else (first[(r - 1) % n] + 1) % n
                  for r in range(n)]
    return first, second


def _children(parents: list[int]) -> list[list[int]]:
    kids: list[list[int]] = [[] for _ in parents]
    for r, p in enumerate(parents):
        if p >= 0:
            kids[p].append(r)
    return kids


def _tree(ranks: Sequence[str], parents: list[int], half: int, *, tag: str, dscp: int,
          chunks: int, channel: int, slots: int) -> list[Transfer]:
    """Reduce up ``parents`` then broadcast down, ``half`` bytes in ``chunks`` pieces."""
    kids = _children(parents)

    def up(c: int, r: int) -> str:
        return f"{tag}/up/chunk{c}/r{r}"

    def down(c: int, r: int) -> str:  # the piece rank r receives from its parent
        return f"{tag}/down/chunk{c}/r{r}"

    out: list[Transfer] = []
    for c, piece in enumerate(split_bytes(half, chunks)):
        for r, p in enumerate(parents):
            if p < 0:
                continue
            # A parent forwards up once every child's contribution arrived.
            after = [up(c, q) for q in kids[r]] + ([up(c - slots, r)] if c >= slots else [])
            out.append(Transfer(up(c, r), ranks[r], ranks[p], piece, tuple(after), dscp,
                                f"{tag}/up", channel))
        for r, p in enumerate(parents):
            # The root turns around once reduced; others forward what came down.
            got = [up(c, q) for q in kids[r]] if p < 0 else [down(c, r)]
            for q in kids[r]:
                after = got + ([down(c - slots, q)] if c >= slots else [])
                out.append(Transfer(down(c, q), ranks[r], ranks[q], piece, tuple(after), dscp,
                                    f"{tag}/down", channel))
    return out


def tree_allreduce(ranks: Sequence[str], size_bytes: int, *, chunks: int = 1, dscp: int = 0,
                   tag: str = "tree-allreduce", channels: int = 1,
                   slots: int = 8) -> list[Transfer]:
    """Double-binary-tree all-reduce, as NCCL's tree algorithm.

    Each channel's data is halved; half ``t`` is reduced up tree ``t`` of
    :func:`double_binary_tree` (children to parent; a parent's upward send
    waits for all its children) and broadcast back down (a child's downward
    sends wait for what its parent sent down; the root's wait for all its
    children). NCCL runs the two trees on separate channels: tree ``t`` of
    channel ``c`` uses ``Transfer.channel = 2c + t``.

    Each tree edge carries its half once up and once down, so all ranks
    together send ``2(N-1) * size_bytes`` (``2(N-1)/N * size_bytes`` per rank
    on average, as the ring); a single rank sends between ``size_bytes`` and
    ``2 * size_bytes`` (up to rounding): it is a leaf or a one-child root in
    one tree and has at most two children in the other.

    Parameters
    ----------
    ranks : sequence of str
        Endpoints; index in the list is the NCCL rank number.
    size_bytes : int
        Per-rank buffer size, at least ``2 * chunks * channels``.
    chunks, dscp, tag, channels, slots
        See the module docstring.

    Returns
    -------
    list of Transfer
        Ids ``{tag}/ch{c}/tree{t}/{up|down}/chunk{j}/r{r}`` (``r`` the sender
        going up, the receiver going down).
    """
    _check(ranks, size_bytes, chunks, channels, dscp, 2 * chunks * channels, slots)
    if len(ranks) == 1:
        return []
    trees = double_binary_tree(len(ranks))
    out: list[Transfer] = []
    for ch, ch_bytes in enumerate(split_bytes(size_bytes, channels)):
        for t, half in enumerate(split_bytes(ch_bytes, 2)):
            out += _tree(ranks, trees[t], half, tag=f"{tag}/ch{ch}/tree{t}", dscp=dscp,
                         chunks=chunks, channel=2 * ch + t, slots=slots)
    return out


# --- all-to-all and hierarchical ---------------------------------------------

def all_to_all(ranks: Sequence[str], size_bytes: int, *, chunks: int = 1, dscp: int = 0,
               tag: str = "all-to-all", channels: int = 1, slots: int = 8) -> list[Transfer]:
    """All-to-all: every rank sends part ``j`` of ``size_bytes`` to rank ``j``, all at once.

    No dependencies, except with more than ``slots`` chunks: a piece to one
    peer then waits for the piece ``slots`` places before it. Each rank sends
    ``(N-1)/N * size_bytes`` (all parts but its own).
    """
    n = len(ranks)
    _check(ranks, size_bytes, chunks, channels, dscp, n * chunks * channels, slots)
    out: list[Transfer] = []
    for ch, ch_bytes in enumerate(split_bytes(size_bytes, channels)):
        parts = split_bytes(ch_bytes, n)
        for i in range(n):
            for j in range(n):
                if i == j:
                    continue
                sent: list[str] = []
                for c, piece in enumerate(split_bytes(parts[j], chunks)):
                    this = f"{tag}/ch{ch}/r{i}/to{j}/chunk{c}"
                    out.append(Transfer(this, ranks[i], ranks[j], piece,
                                        tuple(_slot_freed(sent, slots)), dscp, tag, ch))
                    sent.append(this)
    return out


def hierarchical_allreduce(graph: nx.Graph, ranks: Sequence[str], size_bytes: int, *,
                           chunks: int = 1, dscp: int = 0, tag: str = "hier-allreduce",
                           channels: int = 1, slots: int = 8) -> list[Transfer]:
    """Rail-local all-reduce for rail-optimised fabrics.

    NCCL's hierarchical scheme reduce-scatters inside each server (NVLink),
    all-reduces across servers per rail, then all-gathers inside the server.
    The graph has no intra-server links, so the NVLink steps are assumed free
    and not emulated: what remains is one ring all-reduce per rail, among that
    rail's ranks (so traffic stays on the rail's leaves), all rails at once,
    each on ``size_bytes / rails`` of the data (exact split).

    Parameters
    ----------
    graph : networkx.Graph
        The fabric; every rank needs a ``rail`` attribute.
    ranks : sequence of str
        Endpoints; within a rail the ring follows this order.
    size_bytes : int
        Per-rank buffer size.
    chunks, dscp, tag, channels, slots
        See the module docstring; rail ``k`` uses tag ``{tag}/rail{k}``.

    Raises
    ------
    ValueError
        When a rank has no rail, or a rail's share is too small to split.
    """
    _check(ranks, size_bytes, chunks, channels, dscp, 1)
    groups = rail_groups(graph, ranks)
    out: list[Transfer] = []
    for (rail, members), share in zip(groups.items(), split_bytes(size_bytes, len(groups))):
        out += ring_allreduce(members, share, chunks=chunks, dscp=dscp,
                              tag=f"{tag}/rail{rail}", channels=channels, slots=slots)
    return out


COLLECTIVES: dict[str, Callable[..., list[Transfer]]] = {
    "ring_allreduce": ring_allreduce,
    "tree_allreduce": tree_allreduce,
    "all_gather": all_gather,
    "reduce_scatter": reduce_scatter,
    "all_to_all": all_to_all,
    "hierarchical_allreduce": hierarchical_allreduce,
}
_NEEDS_GRAPH = {"hierarchical_allreduce"}


def _normalise(name: str) -> str:
    return name.strip().lower().replace("-", "_")


def generate(name: str, ranks: Sequence[str], size_bytes: int, graph: nx.Graph | None = None,
             **options: int | str) -> list[Transfer]:
    """Call the :data:`COLLECTIVES` generator ``name`` (``-`` or ``_`` alike).

    ``graph`` is passed to the generators that need it (hierarchical).
    """
    key = _normalise(name)
    if key not in COLLECTIVES:
        raise ValueError(f"unknown collective {name!r} (known: {', '.join(COLLECTIVES)})")
    if key in _NEEDS_GRAPH:
        if graph is None:
            raise ValueError(f"{name} needs the fabric graph")
        return COLLECTIVES[key](graph, ranks, size_bytes, **options)
    return COLLECTIVES[key](ranks, size_bytes, **options)


# --- nccl-tests reporting ----------------------------------------------------

_ALLREDUCE = {"all_reduce", "allreduce", "ring_allreduce", "tree_allreduce",
              "hierarchical_allreduce"}
_ONE_PASS = {"all_gather", "allgather", "reduce_scatter", "reducescatter", "all_to_all",
             "alltoall"}


def busbw_factor(collective: str, n: int) -> float:
    """Return nccl-tests' bus-bandwidth factor for ``n`` ranks.

    All-reduce: ``2(n-1)/n``; all-gather, reduce-scatter, all-to-all:
    ``(n-1)/n`` (nccl-tests ``doc/PERFORMANCE.md``): busbw is then comparable
    to the hardware link rate whatever ``n``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    key = _normalise(collective)
    if key in _ALLREDUCE:
        return 2 * (n - 1) / n
    if key in _ONE_PASS:
        return (n - 1) / n
    raise ValueError(f"no bus-bandwidth factor for {collective!r}")


def algbw(size_bytes: float, seconds: float) -> float:
    """Return the algorithm bandwidth ``size_bytes / seconds`` in bytes per second."""
    if not seconds > 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    return size_bytes / seconds


def busbw(collective: str, n: int, size_bytes: float, seconds: float) -> float:
    """Return the bus bandwidth ``algbw * busbw_factor`` in bytes per second."""
    return algbw(size_bytes, seconds) * busbw_factor(collective, n)
