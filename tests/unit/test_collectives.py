"""Collective schedules and rank placement: byte counts, dependencies, timing, busbw."""

from __future__ import annotations

from collections import Counter

import pytest

import topologies
from fabric.model.graph import nodes_with_role
from fabric.traffic import collectives as col
from fabric.traffic.model import Transfer, dependency_order, validate_schedule
from fabric.traffic.placement import rail_groups, rank_hosts, server_of

NS = [2, 3, 4, 8, 16]
SIZES = [12345, 1000003]  # not divisible by any N above (nor by N x channels)


def ranks_of(n: int) -> list[str]:
    return [f"h{i}" for i in range(n)]


def sent(transfers: list[Transfer]) -> Counter:
    out: Counter = Counter()
    for t in transfers:
        out[t.src] += t.bytes
    return out


def simulate(transfers: list[Transfer], rate: float = 1.0,
             rates: dict[tuple[str, str], float] | None = None) -> dict[str, tuple[float, float]]:
    """Tiny discrete-event model: a transfer starts when its deps are done and its
    link has finished the previous one (in dependency order), and takes bytes /
    rate. Returns id -> (start, end)."""
    rates = rates or {}
    times: dict[str, tuple[float, float]] = {}
    free: dict[tuple[str, str], float] = {}
    for t in dependency_order(transfers):
        start = max([times[d][1] for d in t.after] + [free.get((t.src, t.dst), 0.0)])
        times[t.id] = (start, start + t.bytes / rates.get((t.src, t.dst), rate))
        free[(t.src, t.dst)] = times[t.id][1]
    return times


def makespan(transfers: list[Transfer], **kw) -> float:
    return max(end for _, end in simulate(transfers, **kw).values())


# --- split_bytes ------------------------------------------------------------

@pytest.mark.parametrize("total,parts", [(10, 3), (0, 4), (7, 7), (1000003, 16)])
def test_split_bytes_exact_and_even(total, parts):
    split = col.split_bytes(total, parts)
    assert sum(split) == total and len(split) == parts
    assert max(split) - min(split) <= 1


# --- byte counts ------------------------------------------------------------

@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("channels,chunks", [(1, 1), (3, 2)])
def test_ring_allreduce_bytes_per_rank(n, size, channels, chunks):
    ranks = ranks_of(n)
    ts = col.ring_allreduce(ranks, size, channels=channels, chunks=chunks)
    validate_schedule(ts, ranks)
    per_rank = sent(ts)
    # Rank r sends all parts but two per channel, each part within 1 byte of
    # S/N: per-rank error < 2 bytes per channel; the sum over ranks is exact.
    for r in ranks:
        assert abs(per_rank[r] - 2 * (n - 1) / n * size) < 2 * channels
    assert sum(per_rank.values()) == 2 * (n - 1) * size
    assert len(ts) == 2 * (n - 1) * n * channels * chunks


@pytest.mark.parametrize("gen", [col.all_gather, col.reduce_scatter, col.all_to_all])
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("channels,chunks", [(1, 1), (3, 2)])
def test_one_pass_collectives_bytes_per_rank(gen, n, size, channels, chunks):
    ranks = ranks_of(n)
    ts = gen(ranks, size, channels=channels, chunks=chunks)
    validate_schedule(ts, ranks)
    per_rank = sent(ts)
    for r in ranks:  # all parts but one per channel
        assert abs(per_rank[r] - (n - 1) / n * size) < channels
    assert sum(per_rank.values()) == (n - 1) * size


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("size", SIZES)
def test_tree_allreduce_bytes(n, size):
    ranks = ranks_of(n)
    ts = col.tree_allreduce(ranks, size, channels=2, chunks=3)
    validate_schedule(ts, ranks)
    per_rank = sent(ts)
    # Every tree edge carries its half up and down: 2(N-1)S in total, exactly.
    assert sum(per_rank.values()) == 2 * (n - 1) * size
    # A rank sends 2..4 halves (leaf/one-child root in one tree, <= 2 children
    # in the other), i.e. S..2S; halves are within 1 byte of S/2 per channel
    # and chunking splits exactly, so the error is < 4 halves x 2 channels.
    for r in ranks:
        assert size - 8 < per_rank[r] < 2 * size + 8


def test_single_rank_has_no_transfers():
    for gen in (col.ring_allreduce, col.tree_allreduce, col.all_gather, col.reduce_scatter,
                col.all_to_all):
        assert gen(["h0"], 100) == []


@pytest.mark.parametrize("gen", [col.ring_allreduce, col.tree_allreduce, col.all_to_all])
def test_too_small_or_bad_arguments_raise(gen):
    with pytest.raises(ValueError):
        gen(ranks_of(4), 1)  # a piece would be empty
    with pytest.raises(ValueError):
        gen(ranks_of(4), 7, chunks=2, channels=2)
    with pytest.raises(ValueError):
        gen(["h0", "h0"], 100)
    with pytest.raises(ValueError):
        gen(ranks_of(2), 100, dscp=64)
    with pytest.raises(ValueError):
        gen(ranks_of(2), 100, chunks=0)


# --- dependencies -----------------------------------------------------------

def test_ring_allreduce_dependencies_are_local_and_as_nccl():
    ranks = ranks_of(4)
    ts = {t.id: t for t in col.ring_allreduce(ranks, 4000, tag="ar")}
    first = ts["ar/ch0/step0/chunk0/r2"]
    assert first.after == () and (first.src, first.dst) == ("h2", "h3")
    t = ts["ar/ch0/step3/chunk0/r2"]
    # what r2 received at step 2 (from r1); its own earlier sends hold fewer than 8 slots
    assert set(t.after) == {"ar/ch0/step2/chunk0/r1"}
    assert t.tag == "ar/step3"
    assert len({t.tag for t in ts.values()}) == 2 * 3
    one = {t.id: t for t in col.ring_allreduce(ranks, 4000, tag="ar", slots=1)}
    # one slot: also its own step-2 send, acknowledged
    assert set(one["ar/ch0/step3/chunk0/r2"].after) == {"ar/ch0/step2/chunk0/r1",
                                                          "ar/ch0/step2/chunk0/r2"}


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_a_send_waits_for_the_send_slots_places_back(slots):
    ranks = ranks_of(3)
    ts = col.ring_allreduce(ranks, 3 * 4 * 100, tag="ar", chunks=4, slots=slots)
    for r in range(3):
        mine = [t for t in ts if t.src == ranks[r]]  # in send order
        for i, t in enumerate(mine):
            own = {d for d in t.after if d.endswith(f"/r{r}")}
            assert own == ({mine[i - slots].id} if i >= slots else set())
    a2a = col.all_to_all(ranks, 3 * 5 * 10, chunks=5, slots=slots)
    to1 = [t for t in a2a if t.src == "h0" and t.dst == "h1"]
    assert [t.after for t in to1] == [(to1[i - slots].id,) if i >= slots else ()
                                      for i in range(5)]


def test_ring_part_forwarded_is_the_part_received():
    # Step k at rank r sends part (r - k) mod N: the one rank r-1 sent at k-1.
    ranks = ranks_of(5)
    parts = col.split_bytes(104, 5)  # unequal parts [21, 21, 21, 21, 20]
    ts = {t.id: t for t in col.ring_allreduce(ranks, 104, tag="ar")}
    for k in range(1, 8):
        for r in range(5):
            t = ts[f"ar/ch0/step{k}/chunk0/r{r}"]
            assert t.bytes == parts[(r - k) % 5]
            assert t.bytes == ts[f"ar/ch0/step{k - 1}/chunk0/r{(r - 1) % 5}"].bytes


def test_tree_dependencies():
    ranks = ranks_of(8)
    ts = col.tree_allreduce(ranks, 8000, tag="t")
    validate_schedule(ts, ranks)
    by_id = {t.id: t for t in ts}
    parents = col.double_binary_tree(8)[0]
    for r, p in enumerate(parents):
        kids = [q for q, pq in enumerate(parents) if pq == r]
        if p >= 0:
            up = by_id[f"t/ch0/tree0/up/chunk0/r{r}"]
            assert (up.src, up.dst) == (ranks[r], ranks[p])
            assert set(up.after) == {f"t/ch0/tree0/up/chunk0/r{q}" for q in kids}
        for q in kids:
            down = by_id[f"t/ch0/tree0/down/chunk0/r{q}"]
            expected = ({f"t/ch0/tree0/down/chunk0/r{r}"} if p >= 0
                        else {f"t/ch0/tree0/up/chunk0/r{c}" for c in kids})
            assert set(down.after) == expected
    assert {t.channel for t in ts} == {0, 1}  # one channel per tree


# --- trees ------------------------------------------------------------------

def test_binary_tree_matches_nccl_figure():
    # ncclGetBtree's comment in src/graph/trees.cc, 14 ranks.
    expected = {0: -1, 8: 0, 4: 8, 12: 8, 2: 4, 6: 4, 10: 12, 13: 12,
                1: 2, 3: 2, 5: 6, 7: 6, 9: 10, 11: 10}
    assert col.binary_tree(14) == [expected[r] for r in range(14)]
    # ncclGetDtree's mirror figure, 12 ranks: roots 0 and 11, 3 under 11.
    first, second = col.double_binary_tree(12)
    assert first[8] == 0 and second.index(-1) == 11 and second[3] == 11
    assert second[1] == 3 and second[7] == 3


@pytest.mark.parametrize("n", range(1, 34))
def test_double_binary_tree_properties(n):
    trees = col.double_binary_tree(n)
    leaves = []
    for parents in trees:
        assert parents.count(-1) == 1
        for r in range(n):  # every rank reaches the root: a spanning tree
            seen, cur = set(), r
            while parents[cur] != -1:
                assert cur not in seen
                seen.add(cur)
                cur = parents[cur]
        kids = Counter(p for p in parents if p >= 0)
        assert max(kids.values(), default=0) <= 2
        leaves.append({r for r in range(n) if kids[r] == 0})
    if n % 2 == 0 and n > 1:  # complementary: each rank a leaf in exactly one tree
        assert leaves[0] | leaves[1] == set(range(n))
        assert not leaves[0] & leaves[1]
    elif n > 1:  # shifted: only rank 0 may be interior in both
        assert set(range(1, n)) <= leaves[0] | leaves[1]


# --- timing in the toy simulator ---------------------------------------------

@pytest.mark.parametrize("n", NS)
def test_ring_allreduce_takes_2n_minus_2_steps(n):
    size = n * 1000  # each step moves S/N = 1000 bytes
    ts = col.ring_allreduce(ranks_of(n), size)
    assert makespan(ts) == pytest.approx(2 * (n - 1) * 1000)
    piped = col.ring_allreduce(ranks_of(n), size * 4, chunks=4)
    assert makespan(piped) == pytest.approx(4 * 2 * (n - 1) * 1000)


@pytest.mark.parametrize("n", [3, 4, 8, 16])
def test_one_slow_link_slows_the_whole_ring(n):
    ranks = ranks_of(n)
    ts = col.ring_allreduce(ranks, n * 1000)
    slow = makespan(ts, rates={(ranks[1], ranks[2]): 0.5})
    # Every step waits for the slowest link: the whole collective halves.
    assert slow == pytest.approx(2 * makespan(ts))


@pytest.mark.parametrize("gen", [col.all_gather, col.reduce_scatter])
def test_one_pass_ring_takes_n_minus_1_steps(gen):
    assert makespan(gen(ranks_of(8), 8000)) == pytest.approx(7 * 1000)


def test_all_to_all_is_one_round():
    assert makespan(col.all_to_all(ranks_of(8), 8000)) == pytest.approx(1000)


def test_tree_pipelining_shortens_fill_and_drain():
    ranks = ranks_of(16)
    plain = makespan(col.tree_allreduce(ranks, 64000))
    piped = makespan(col.tree_allreduce(ranks, 64000, chunks=8))
    assert piped < plain / 2


# --- busbw ------------------------------------------------------------------

def test_busbw_factors_by_hand():
    assert col.busbw_factor("all_reduce", 8) == pytest.approx(1.75)
    assert col.busbw_factor("ring-allreduce", 2) == pytest.approx(1.0)
    assert col.busbw_factor("tree_allreduce", 16) == pytest.approx(30 / 16)
    assert col.busbw_factor("all_gather", 4) == pytest.approx(0.75)
    assert col.busbw_factor("reduce_scatter", 8) == pytest.approx(0.875)
    assert col.busbw_factor("alltoall", 16) == pytest.approx(15 / 16)
    assert col.busbw_factor("all_reduce", 1) == 0.0
    assert col.algbw(1e9, 2.0) == pytest.approx(5e8)
    assert col.busbw("all_reduce", 8, 1e9, 2.0) == pytest.approx(8.75e8)
    with pytest.raises(ValueError):
        col.busbw_factor("broadcast-ish", 4)
    with pytest.raises(ValueError):
        col.algbw(1, 0)


def test_registry_and_generate():
    assert set(col.COLLECTIVES) == {"ring_allreduce", "tree_allreduce", "all_gather",
                                    "reduce_scatter", "all_to_all", "hierarchical_allreduce"}
    ts = col.generate("ring-allreduce", ranks_of(4), 4000, dscp=10)
    assert ts == col.ring_allreduce(ranks_of(4), 4000, dscp=10)
    assert all(t.dscp == 10 for t in ts)
    g = topologies.build("rail-clos")
    assert col.generate("hierarchical_allreduce", rank_hosts(g), 8000, graph=g)
    with pytest.raises(ValueError):
        col.generate("hierarchical_allreduce", rank_hosts(g), 8000)
    with pytest.raises(ValueError):
        col.generate("nope", ranks_of(2), 10)


# --- hierarchical -----------------------------------------------------------

def test_hierarchical_allreduce_stays_on_rails():
    g = topologies.build("rail-clos,servers=8,gpus=4")
    ranks = rank_hosts(g)
    size = 4 * 8 * 1000 + 7  # uneven split over rails and ranks
    ts = col.hierarchical_allreduce(g, ranks, size)
    validate_schedule(ts, ranks)
    assert all(g.nodes[t.src]["rail"] == g.nodes[t.dst]["rail"] for t in ts)
    assert {t.tag.split("/")[1] for t in ts} == {"rail0", "rail1", "rail2", "rail3"}
    per_rank = sent(ts)
    shares = col.split_bytes(size, 4)
    for r in ranks:
        share = shares[g.nodes[r]["rail"]]
        assert abs(per_rank[r] - 2 * 7 / 8 * share) < 2
    # Rails run concurrently: the time is one rail's ring on S/4.
    even = col.hierarchical_allreduce(g, ranks, 4 * 8 * 1000)
    assert makespan(even) == pytest.approx(2 * 7 * 1000)


def test_hierarchical_needs_rails():
    g = topologies.build("fat-tree")
    with pytest.raises(ValueError):
        col.hierarchical_allreduce(g, rank_hosts(g), 1000)


# --- placement --------------------------------------------------------------

def test_rail_placement_on_rail_clos():
    g = topologies.build("rail-clos,servers=8,gpus=2,servers_per_leaf=4")
    ranks = rank_hosts(g)
    assert ranks == [f"h{s}g0" for s in range(8)] + [f"h{s}g1" for s in range(8)]
    leaf = {h: next(iter(g.neighbors(h))) for h in ranks}
    # Ring neighbours share a leaf except at leaf and rail boundaries (+ wrap).
    shared = sum(leaf[a] == leaf[b] for a, b in zip(ranks, ranks[1:] + ranks[:1]))
    assert shared == 16 - 4
    assert rank_hosts(g, n=3) == ["h0g0", "h1g0", "h2g0"]
    assert rank_hosts(g, hosts=["h3g1", "h0g1", "h3g0"]) == ["h3g0", "h0g1", "h3g1"]
    assert rail_groups(g, ranks) == {0: ranks[:8], 1: ranks[8:]}
    assert server_of(g, "h5g1") == 5


def test_builder_order_elsewhere():
    for spec in ("fat-tree", "two-zone", "leaf-spine"):
        g = topologies.build(spec)
        assert rank_hosts(g) == nodes_with_role(g, "host")
        assert server_of(g, rank_hosts(g)[0]) == rank_hosts(g)[0]
    g = topologies.build("two-zone")
    assert rank_hosts(g, hosts=["z1h0", "z0h1"]) == ["z0h1", "z1h0"]
    assert "st0" not in rank_hosts(g)


def test_random_placement_is_seeded():
    g = topologies.build("rail-clos")
    a = rank_hosts(g, placement="random", seed=1)
    assert a == rank_hosts(g, placement="random", seed=1)
    assert a != rank_hosts(g, placement="random", seed=2)
    assert sorted(a) == sorted(rank_hosts(g)) and a != rank_hosts(g)
    assert rank_hosts(g, n=5, placement="random", seed=1) == a[:5]


def test_placement_errors():
    g = topologies.build("two-zone")
    with pytest.raises(ValueError):
        rank_hosts(g, placement="nearest")
    with pytest.raises(ValueError):
        rank_hosts(g, n=0)
    with pytest.raises(ValueError):
        rank_hosts(g, n=1000)
    with pytest.raises(ValueError):
        rank_hosts(g, hosts=["st0"])
    with pytest.raises(ValueError):
        rail_groups(g, ["z0h0"])
