"""Storage patterns: striped reads (barrier, admission), checkpoint writes, restart stampede."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from fabric.traffic.metrics import round_times
from fabric.traffic.model import Transfer, dependency_order, validate_schedule
from fabric.traffic.storage import (cache_sources, checkpoint_restore, checkpoint_write,
                                    dataloader, incast_rounds, restart_stampede, round_of,
                                    step_times, storage_sources, striped_read)

CLIENT = "c0"
SERVERS = [f"s{i}" for i in range(5)]
HOSTS = [CLIENT] + SERVERS


def simulate(transfers: list[Transfer],
             rates: dict[tuple[str, str], float] | None = None) -> dict[str, tuple[float, float]]:
    """Each transfer starts when its deps are done and takes bytes / rate (no contention)."""
    rates = rates or {}
    times: dict[str, tuple[float, float]] = {}
    for t in dependency_order(transfers):
        start = max((times[d][1] for d in t.after), default=0.0)
        times[t.id] = (start, start + t.bytes / rates.get((t.src, t.dst), 1.0))
    return times


def uneven_rates(seed: int) -> dict[tuple[str, str], float]:
    rng = random.Random(seed)  # servers of different speeds reorder completions
    return {(s, CLIENT): rng.uniform(0.2, 5.0) for s in SERVERS}


def max_outstanding(transfers: list[Transfer], times: dict[str, tuple[float, float]]) -> int:
    """Most stripes in flight at once: from their request's start to their own end."""
    events = []
    for t in transfers:
        if "/stripe" in t.id:
            (req,) = t.after
            events += [(times[req][0], 1), (times[t.id][1], -1)]
    peak = active = 0
    for _, delta in sorted(events):  # ends before starts at equal times
        active += delta
        peak = max(peak, active)
    return peak


@pytest.mark.parametrize("block", [1000, 1003, 64 * 1024 + 3])
def test_stripes_sum_to_block(block):
    ts = striped_read(CLIENT, SERVERS, block, rounds=3)
    validate_schedule(ts, HOSTS)
    for k, ids in incast_rounds(ts).items():
        stripes = [t for t in ts if t.id in ids and "/stripe" in t.id]
        assert sum(t.bytes for t in stripes) == block
        assert {t.src for t in stripes} == set(SERVERS)
        assert max(t.bytes for t in stripes) - min(t.bytes for t in stripes) <= 1
    requests = [t for t in ts if "/req" in t.id]
    assert len(requests) == 15 and all(t.bytes == 64 and t.src == CLIENT for t in requests)


def test_stripe_depends_on_its_request_and_rounds_parse():
    ts = {t.id: t for t in striped_read(CLIENT, SERVERS, 1000, rounds=4, tag="sr", dscp=26)}
    assert ts["sr/round2/stripe3"].after == ("sr/round2/req3",)
    assert ts["sr/round2/stripe3"].src == "s3" and ts["sr/round2/stripe3"].dst == CLIENT
    assert all(t.dscp == 26 for t in ts.values())
    assert round_of("sr/round12") == 12 and round_of("sr/round3/x") == 3
    assert round_of("sr/background") is None
    rounds = incast_rounds(ts.values())
    assert list(rounds) == [0, 1, 2, 3] and all(len(ids) == 10 for ids in rounds.values())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_round_barrier(seed):
    ts = striped_read(CLIENT, SERVERS, 5000, rounds=4)
    times = simulate(ts, uneven_rates(seed))
    rounds = incast_rounds(ts)
    for k in range(1, 4):
        prev_end = max(times[i][1] for i in rounds[k - 1] if "/stripe" in i)
        assert min(times[i][0] for i in rounds[k] if "/req" in i) == pytest.approx(prev_end)
    assert max_outstanding(ts, times) == len(SERVERS)  # no admission: the full incast


@pytest.mark.parametrize("window", [1, 2, 3, 5, 7])
@pytest.mark.parametrize("barrier", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_admission_limits_outstanding_stripes(window, barrier, seed):
    ts = striped_read(CLIENT, SERVERS, 5000, rounds=4, admission=window, barrier=barrier)
    validate_schedule(ts, HOSTS)
    times = simulate(ts, uneven_rates(seed))
    peak = max_outstanding(ts, times)
    assert peak <= window
    # the window is used: with no barrier, or a window within one round
    if not barrier or window <= len(SERVERS):
        assert peak == min(window, len(SERVERS) if barrier else window)


def test_admission_window_spans_rounds_without_barrier():
    ts = {t.id: t for t in striped_read(CLIENT, SERVERS, 5000, rounds=2, admission=2,
                                        barrier=False, tag="sr")}
    # global stripe 5 (round 1, stripe 0) waits for global stripe 3
    assert ts["sr/round1/req0"].after == ("sr/round0/stripe3",)
    assert ts["sr/round0/req1"].after == ()


def test_round_times_from_simulated_results():
    ts = striped_read(CLIENT, SERVERS, 5000, rounds=3)
    times = simulate(ts)  # request 64, then stripes of 1000 at rate 1
    rows = [{"id": i, "role": "recv", "start": s, "end": e, "bytes": 0}
            for i, (s, e) in times.items()]
    out = round_times(rows, incast_rounds(ts), block_bytes=5000)
    assert list(out) == [0, 1, 2]
    for k, rt in out.items():
        assert rt.start == pytest.approx(k * 1064)
        assert rt.duration_s == pytest.approx(1064)
        assert rt.goodput_mbps == pytest.approx(5000 * 8 / 1064 / 1e6)


def test_striped_read_errors():
    with pytest.raises(ValueError):
        striped_read(CLIENT, SERVERS, 4, rounds=1)  # empty stripe
    with pytest.raises(ValueError):
        striped_read(CLIENT, SERVERS, 1000, rounds=0)
    with pytest.raises(ValueError):
        striped_read(CLIENT, SERVERS, 1000, rounds=1, admission=0)
    with pytest.raises(ValueError):
        striped_read("s0", SERVERS, 1000, rounds=1)
    with pytest.raises(ValueError):
        striped_read(CLIENT, [], 1000, rounds=1)


def test_checkpoint_write_is_striped_pushes():
    writers = [f"w{i}" for i in range(4)]
    ts = checkpoint_write(writers, SERVERS, 10007, dscp=8)
    validate_schedule(ts, writers + SERVERS)
    assert len(ts) == 4 * 5 and all(t.after == () and t.dscp == 8 for t in ts)
    per_writer = Counter()
    for t in ts:
        per_writer[t.src] += t.bytes
    assert set(per_writer.values()) == {10007}
    with pytest.raises(ValueError):
        checkpoint_write(writers, SERVERS, 4)


@pytest.mark.parametrize("stripe", [False, True])
def test_restart_stampede(stripe):
    clients = [f"c{i}" for i in range(6)]
    ts = restart_stampede(clients, SERVERS, 12345, stripe=stripe)
    validate_schedule(ts, clients + SERVERS)
    by_id = {t.id: t for t in ts}
    got = Counter()
    for t in ts:
        if "/resp" in t.id:
            req = by_id[t.after[0]]
            assert (req.src, req.dst) == (t.dst, t.src)
            got[t.dst] += t.bytes
        else:
            assert t.after == ()
    assert set(got.values()) == {12345}
    senders = {t.src for t in ts if "/resp" in t.id}
    assert senders == (set(SERVERS) if stripe else {"s0"})
    # all clients at once: every response finishes after one request + transfer
    times = simulate(ts)
    ends = {times[t.id][1] for t in ts if "/resp" in t.id}
    assert len(ends) == 1  # 12345 = 5 x 2469: equal stripes end together


# --- the data loader's step loop and the checkpoint restore ---------------------

def simulate_loop(transfers: list[Transfer], duration) -> dict[str, tuple[float, float]]:
    """As :func:`simulate`, honouring ``after_start`` (not before its transfer's start
    plus the compute time)."""
    times: dict[str, tuple[float, float]] = {}
    for t in dependency_order(transfers):
        start = max((times[d][1] for d in t.after), default=0.0)
        if t.after_start:
            start = max(start, times[t.after_start[0]][0] + t.after_start[1])
        times[t.id] = (start, start + duration(t))
    return times


def test_dataloader_prefetches_one_batch_and_steps_wait_for_their_compute():
    ts = dataloader(CLIENT, SERVERS[:2], 1001, steps=4, compute_s=1.0, tag="L", dscp=10)
    validate_schedule(ts, HOSTS)
    by_id = {t.id: t for t in ts}
    assert len(ts) == 4 * 2 * 2 and all(t.dscp == 10 for t in ts)
    assert sum(by_id[f"L/batch3/stripe{j}"].bytes for j in range(2)) == 1001
    assert by_id["L/batch0/req1"].after == () and by_id["L/batch0/req1"].after_start is None
    # batch 1 is asked for when step 0 starts: as soon as batch 0 is in
    assert by_id["L/batch1/req0"].after == ("L/batch0/stripe0", "L/batch0/stripe1")
    assert by_id["L/batch1/req0"].after_start is None
    # batch k+1 also waits for step k-1's compute, which began when batch k was asked for
    assert by_id["L/batch3/req1"].after_start == ("L/batch2/req0", 1.0)
    assert by_id["L/batch3/stripe1"].after == ("L/batch3/req1",)


@pytest.mark.parametrize("fetch_s, stall", [(0.25, 0.0), (1.5, 0.5)])
def test_the_loop_stalls_exactly_when_a_fetch_outlasts_the_compute(fetch_s, stall):
    ts = dataloader(CLIENT, SERVERS[:2], 1000, steps=5, compute_s=1.0)
    times = simulate_loop(ts, lambda t: fetch_s if "/stripe" in t.id else 0.0)
    arrivals = [max(times[f"load/batch{k}/stripe{j}"][1] for j in range(2)) for k in range(5)]
    starts = step_times(arrivals, 1.0)
    assert [b - a - 1.0 for a, b in zip(starts, starts[1:])] == pytest.approx([stall] * 4)
    # the loader asked for batch k+1 exactly when step k started
    asked = [times[f"load/batch{k}/req0"][0] for k in range(1, 5)]
    assert asked == pytest.approx(starts[:4])


def test_step_times_by_hand():
    assert step_times([2.0, 2.5, 5.0, 5.2], 1.0) == [2.0, 3.0, 5.0, 6.0]
    assert step_times([], 1.0) == []


def test_dataloader_errors():
    with pytest.raises(ValueError, match="steps"):
        dataloader(CLIENT, SERVERS, 100, steps=1, compute_s=1.0)
    with pytest.raises(ValueError, match="compute_s"):
        dataloader(CLIENT, SERVERS, 100, steps=3, compute_s=0)
    with pytest.raises(ValueError, match="empty"):
        dataloader(CLIENT, SERVERS, 3, steps=3, compute_s=1.0)


def test_cache_sources_spread_hits_and_misses_and_read_own_shards_locally():
    peers = ["p0", "p1", "p2"]
    sources = cache_sources(["p0", "p2"], ["s0", "s1"], peers, shards=10, hit_rate=0.8)
    first = sources[0]
    misses = [s for s, src in enumerate(first) if src in ("s0", "s1")]
    assert misses == [4, 9] and [first[s] for s in misses] == ["s0", "s1"]
    hits = [s for s in range(10) if s not in misses]
    holders = ["p0", "p1", "p2", "p0", "p1", "p2", "p0", "p1"]  # round robin over peers
    assert [first[s] for s in hits] == [None if h == "p0" else h for h in holders]
    assert [sources[1][s] for s in hits] == [None if h == "p2" else h for h in holders]
    assert all(src in ("s0", "s1") for src in cache_sources(["p0"], ["s0", "s1"], peers, 10,
                                                            0.0)[0])
    with pytest.raises(ValueError, match="hit_rate"):
        cache_sources(["p0"], ["s0"], peers, 10, 1.5)


@pytest.mark.parametrize("window", [None, 1, 3])
def test_checkpoint_restore_reads_every_shard_with_at_most_w_outstanding(window):
    clients = ["c0", "c1"]
    sources = storage_sources(2, SERVERS[:3], shards=7)
    assert sources[0] == ["s0", "s1", "s2", "s0", "s1", "s2", "s0"]
    ts = checkpoint_restore(clients, sources, 100, admission=window)
    validate_schedule(ts, clients + SERVERS)
    for i, client in enumerate(clients):
        shards = [t for t in ts if t.dst == client]
        assert len(shards) == 7 and all(t.bytes == 100 for t in shards)
        assert all(t.after == (f"restore/c{i}/req{t.id.rsplit('shard', 1)[1]}",)
                   for t in shards)
    times = simulate(ts)
    if window is None:
        assert all(times[t.id][0] == 0 for t in ts if "/req" in t.id)
    else:
        mine = [t for t in ts if t.src == "c0" or t.dst == "c0"]
        assert max_outstanding([Transfer(t.id.replace("shard", "stripe"), t.src, t.dst, t.bytes,
                                         tuple(a.replace("shard", "stripe") for a in t.after))
                                for t in mine],
                               {k.replace("shard", "stripe"): v for k, v in times.items()}
                               ) == window


def test_checkpoint_restore_skips_local_shards_and_rejects_self_reads():
    ts = checkpoint_restore(["c0"], [["s0", None, "s1"]], 10, admission=1)
    assert [t.id for t in ts] == ["restore/c0/req0", "restore/c0/shard0", "restore/c0/req2",
                                  "restore/c0/shard2"]
    assert ts[2].after == ("restore/c0/shard0",)   # the window counts network reads only
    second = checkpoint_restore(["c0", "c1"], [["s0", "s1", "s2"]] * 2, 10, admission=1)
    assert [t.id for t in second if t.src == "c1"] == [  # client 1 starts at shard 1
        "restore/c1/req1", "restore/c1/req2", "restore/c1/req0"]
    with pytest.raises(ValueError, match="itself"):
        checkpoint_restore(["c0"], [["c0"]], 10)
    with pytest.raises(ValueError, match="source lists"):
        checkpoint_restore(["c0", "c1"], [["s0"]], 10)
