"""A workload as transfers: locality, compute gaps, same-server skipping, byte scaling,
placement, deadlocks, and the report helpers on hand-made timing rows."""

from __future__ import annotations

from pathlib import Path

import pytest

import topologies
from fabric.traffic import collectives
from fabric.traffic.model import Transfer, dependency_order, validate_schedule
from fabric.traffic.trace import Collective, Compute, TraceError, Workload, load_trace
from fabric.traffic.trace.place import PlacementError, endpoint_servers, place_ranks
from fabric.traffic.trace.report import collective_times, key_of, step_times
from fabric.traffic.trace.schedule import emulated_byte_scale, replay, workload_transfers

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
GROUPS = {"world": (0, 1, 2, 3), "tp0": (0, 1), "tp1": (2, 3), "dp0": (0, 2), "dp1": (1, 3)}


def hybrid(rank: int) -> tuple:
    """Tensor-parallel all-gather, data-parallel all-reduce, world all-to-all."""
    return (Compute(0.5, 0), Collective("all_gather", 4000, 0, f"tp{rank // 2}"),
            Compute(0.25, 0), Collective("all_reduce", 4_000_000, 0, f"dp{rank % 2}"),
            Compute(0.125, 1), Collective("all_to_all", 8000, 1, "world"))


WORKLOAD = Workload(4, GROUPS, tuple(hybrid(r) for r in range(4)), "mem")


@pytest.fixture(scope="module")
def fabric():
    graph = topologies.build("rail-clos,servers=2,gpus=2")
    eps = place_ranks(graph, 4)
    return graph, eps, endpoint_servers(graph, eps)


def roots(transfers: list[Transfer], tag: str, src: str) -> list[Transfer]:
    """The transfers of ``tag`` that ``src`` sends without waiting for another of its sends."""
    mine = [t for t in transfers if t.id.startswith(tag + "/") and t.src == src]
    own = {t.id for t in mine}
    return [t for t in mine if not own.intersection(t.after)]


def test_dependencies_are_local_and_the_schedule_is_valid(fabric):
    _, eps, servers = fabric
    for options in ({}, {"servers": servers}, {"chunks": 2, "channels": 2},
                    {"allreduce": "tree_allreduce"}):
        transfers = workload_transfers(WORKLOAD, eps, byte_scale=1e-3, **options)
        validate_schedule(transfers, eps)  # unique ids, local acyclic dependencies
        assert all(t.bytes >= 1 for t in transfers)


def test_same_server_collectives_are_skipped_and_their_gap_carries_over(fabric):
    _, eps, servers = fabric
    assert eps == ["h0g0", "h0g1", "h1g0", "h1g1"]
    rep = replay(WORKLOAD, eps, servers=servers, time_scale=2.0, byte_scale=1e-3)
    skipped = {c.key for c in rep.collectives if c.skipped}
    assert skipped == {"trace/step0/all_gather-tp0-0", "trace/step0/all_gather-tp1-0"}
    assert not [t for t in rep.transfers if "all_gather" in t.id]
    # the all-reduce is each rank's first fabric collective: nothing to count a delay from
    assert {t.delay_s for t in rep.transfers if "all_reduce" in t.id} == {0.0}
    first = roots(rep.transfers, "trace/step1/all_to_all-world-0", "h0g0")
    assert len(first) == 3 and {t.delay_s for t in first} == {0.25}  # 0.125 s x 2
    reduce_ids = {t.id for t in rep.transfers if t.id.startswith("trace/step0/all_reduce-dp0")}
    assert all(set(t.after) & reduce_ids for t in first)
    assert rep.compute_s == {(r, 1): 0.25 for r in range(4)}


def test_without_servers_everything_crosses_the_fabric_with_its_gaps(fabric):
    _, eps, _ = fabric
    rep = replay(WORKLOAD, eps, byte_scale=1e-3)
    assert not any(c.skipped for c in rep.collectives)
    after_gather = roots(rep.transfers, "trace/step0/all_reduce-dp0-0", "h0g0")
    starters = [t for t in after_gather if t.after_start is None]
    assert starters and {t.delay_s for t in starters} == {0.25}
    starter_ids = {t.id for t in starters}
    forwards = [t for t in after_gather if t.after_start is not None]
    assert forwards and all(t.after_start[0] in starter_ids and t.delay_s == 0.0
                            for t in forwards)  # not before the rank's gap is over
    gather = {t.id for t in rep.transfers if t.id.startswith("trace/step0/all_gather-tp0-0/")}
    by_id = {t.id: t for t in rep.transfers}
    for t in after_gather:  # waits for the all-gather as h0g0 itself saw it
        earlier = {d for d in t.after if not d.startswith("trace/step0/all_reduce")}
        assert earlier and earlier <= gather
        assert all("h0g0" in (by_id[d].src, by_id[d].dst) for d in earlier)
    assert rep.compute_s == {(r, 0): 0.25 for r in range(4)} | {(r, 1): 0.125 for r in range(4)}


def test_bytes_are_scaled_with_a_floor(fabric):
    _, eps, servers = fabric
    rep = replay(WORKLOAD, eps, servers=servers, byte_scale=1e-3)
    sizes = {c.name: c.replayed_bytes for c in rep.collectives if not c.skipped}
    assert sizes == {"all_reduce": 4000, "all_to_all": 8}
    sent = sum(t.bytes for t in rep.transfers if t.src == "h0g0" and "all_reduce" in t.id)
    assert sent == 4000  # a ring all-reduce of 2 ranks sends 2(N-1)/N of the buffer
    tiny = replay(WORKLOAD, eps, servers=servers, byte_scale=1e-9, chunks=2, channels=3)
    assert {c.replayed_bytes for c in tiny.collectives if not c.skipped} == {2 * 2 * 3,
                                                                              4 * 2 * 3}
    assert emulated_byte_scale(4.0, 400.0) == pytest.approx(1e-5)


def test_point_to_point_messages_pair_up():
    w = load_trace(DATA / "example.json")
    eps = ["a", "b", "c", "d"]
    rep = replay(w, eps, byte_scale=1.0)
    (msg,) = [t for t in rep.transfers if "send-0to2" in t.id]
    assert (msg.src, msg.dst, msg.bytes) == ("a", "c", 8 << 20)
    assert msg.after and all(dep.startswith("trace/step1/all_to_all") for dep in msg.after)
    validate_schedule(rep.transfers, eps)


def test_the_profiled_job_replays_on_rail_clos(fabric):
    graph, eps, servers = fabric
    w = load_trace(DATA / "kineto")
    rep = replay(w, eps, servers=servers, byte_scale=1.0, tag_prefix="job")
    validate_schedule(rep.transfers, eps)
    tp = [c for c in rep.collectives if c.group in ("1", "2")]
    assert tp and all(c.skipped for c in tp)  # tensor parallel stays in the servers
    assert {key_of(t.id).split("/")[1] for t in rep.transfers} == {"step2", "step3", "step4"}
    # at 400 Gbit/s (50 GB/s a NIC) a rank's fabric traffic of a step (the 256 MiB all-reduce
    # of 2 ranks, 3/4 of its 32 MiB all-to-all, the 8 MiB send) takes about 6 ms, a sizeable
    # share of its 20-30 ms of compute
    for rank, endpoint in enumerate(eps):
        for step in w.steps:
            sent = sum(t.bytes for t in rep.transfers
                       if t.src == endpoint and f"/step{step}/" in t.id)
            assert sent == (256 + 24 + (8 if rank == 0 else 0)) << 20
            compute = sum(op.seconds for op in w.programs[rank]
                          if isinstance(op, Compute) and op.step == step)
            assert 0.005 < sent / 50e9 < 0.01 and sent / 50e9 > compute / 6


def test_opposite_orders_on_two_groups_deadlock():
    a, b = Collective("all_reduce", 64, 0, "a"), Collective("all_reduce", 64, 0, "b")
    w = Workload(2, {"a": (0, 1), "b": (0, 1)}, ((a, b), (b, a)), "cross.json")
    with pytest.raises(TraceError, match=r"^cross.json: the replay cannot run"):
        replay(w, ["x", "y"])


@pytest.mark.parametrize("kwargs, message", [
    ({"byte_scale": 0}, "byte_scale must be > 0"),
    ({"tag_prefix": "a/b"}, "tag_prefix must be non-empty without '/'"),
    ({"allreduce": "hierarchical_allreduce"}, "allreduce must be one of"),
    ({"chunks": 0}, "cannot generate"),
])
def test_bad_replay_arguments_fail_in_one_line(fabric, kwargs, message):
    _, eps, _ = fabric
    with pytest.raises(TraceError, match=message):
        replay(WORKLOAD, eps, **kwargs)
    with pytest.raises(TraceError, match="need 4 distinct endpoints"):
        replay(WORKLOAD, eps[:3])


def test_placements():
    graph = topologies.build("rail-clos,servers=2,gpus=2")
    assert place_ranks(graph, 4, "rail") == ["h0g0", "h0g1", "h1g0", "h1g1"]
    assert place_ranks(graph, 3, "packed") == ["h0g0", "h0g1", "h1g0"]
    scattered = place_ranks(graph, 4, "scattered", seed=3)
    assert sorted(scattered) == sorted(place_ranks(graph, 4)) and \
        scattered == place_ranks(graph, 4, "scattered", seed=3)
    with pytest.raises(PlacementError, match=r"^the trace has 5 ranks but the fabric has 4 host"):
        place_ranks(graph, 5)
    with pytest.raises(PlacementError, match="placement must be one of"):
        place_ranks(graph, 2, "diagonal")
    flat = topologies.build("leaf-spine")  # no servers or rails: the builder order
    assert place_ranks(flat, 2, "rail") == place_ranks(flat, 2, "packed")


# --- the report helpers --------------------------------------------------------------------


def simulate(transfers: list[Transfer], rate: float) -> dict[str, tuple[float, float, int]]:
    """A transfer starts when its dependencies completed plus its delay, and takes bytes/rate."""
    rows: dict[str, tuple[float, float, int]] = {}
    for t in dependency_order(transfers):
        start = max((rows[d][1] for d in t.after), default=0.0) + (t.delay_s if t.after else 0)
        rows[t.id] = (start, start + t.bytes / rate, t.bytes)
    return rows


TWO_STEPS = Workload(2, {"dp": (0, 1)}, tuple(
    (Compute(1.0, 0), Collective("all_reduce", 1000, 0, "dp"),
     Compute(0.5, 1), Collective("all_reduce", 1000, 1, "dp")) for _ in range(2)))


def test_collective_times_and_busbw_from_rows():
    rep = replay(TWO_STEPS, ["a", "b"])
    rows = simulate(rep.transfers, rate=1000.0)
    first, second = collective_times(rep, rows, ideal_busbw=1000.0)
    assert (first.start, first.end, first.seconds) == (0.0, 1.0, 1.0)
    assert (second.start, second.end) == (1.5, 2.5)
    assert first.busbw == pytest.approx(collectives.busbw("all_reduce", 2, 1000, 1.0))
    assert first.ratio == pytest.approx(1.0) and second.step == 1
    rows[rep.transfers[0].id] = (0.0, None, 500)
    assert collective_times(rep, rows)[0].seconds is None


def test_step_times_exposed_communication_and_ideal():
    rep = replay(TWO_STEPS, ["a", "b"])
    rows = simulate(rep.transfers, rate=1000.0)
    s0, s1 = step_times(rep, rows, ideal_s={0: 0.5, 1: 1.0})
    assert (s0.step, s0.start, s0.end, s0.seconds) == (0, 0.0, 1.0, 1.0)
    assert (s0.compute_s, s0.exposed_s, s0.ratio) == (0.0, 1.0, 2.0)  # first gap not replayed
    assert (s1.start, s1.end, s1.seconds, s1.compute_s) == (1.0, 2.5, 1.5, 0.5)
    assert s1.exposed_s == pytest.approx(1.0) and s1.critical_rank == 0
    shifted = {k: (a + 10, b + 10, n) for k, (a, b, n) in rows.items()}
    assert step_times(rep, shifted, origin=9.0)[0].seconds == 2.0
