"""The storage experiment without root: roles, sizes, the step-loop and restore
measurements on synthetic results, the table, a whole quick run on a fake fabric and its
figures."""

from __future__ import annotations

import pytest

import topologies
from experiments import EXPERIMENTS
from experiments import storage as st
from fabric.experiment import RunContext
from fabric.analysis import results
from fabric.cli.run import format_table
from fabric.traffic.result import TrafficResult
from fabric.model import graph as fg
from fabric.traffic.model import Plan, ScheduleError, dependency_order, validate_schedule
from tests import fake_emulation

RATE = 3.0


@pytest.fixture(scope="module")
def graph():
    return topologies.build(st.DEFAULT_TOPO)


@pytest.fixture(scope="module")
def who(graph):
    return st.roles(graph)


def fake_result(transfers, duration, fail=(), drops=None, timeouts=0):
    """Every transfer starts when its dependencies (and its after_start) allow and takes
    ``duration(t)``; ids in ``fail`` never finish, nor does what waits for them."""
    times: dict[str, tuple[float | None, float | None]] = {}
    agents: dict[str, dict] = {}
    for t in dependency_order(transfers):
        blocked = any(times[d][1] is None for d in t.after) or (
            t.after_start is not None and times[t.after_start[0]][0] is None)
        start = None
        if not blocked:
            start = max((times[d][1] for d in t.after), default=100.0)
            if t.after_start:
                start = max(start, times[t.after_start[0]][0] + t.after_start[1])
        end = None if start is None or t.id in fail else start + duration(t)
        times[t.id] = (start, end)
        for ep, role in ((t.src, "send"), (t.dst, "recv")):
            agents.setdefault(ep, {"transfers": [], "netstat": {"TCPTimeouts": timeouts}})
            agents[ep]["transfers"].append({"id": t.id, "role": role, "start": start,
                                            "end": end, "ready": start, "bytes": t.bytes})
    hosts = {ep: ["10.0.0.1/24"] for ep in agents}
    return TrafficResult(Plan(list(transfers), hosts), agents, None, {}, dict(drops or {}), [])


def by_kind(fetch_s=0.25, shard_s=0.5, ring_s=0.01):
    def duration(t):
        if "/stripe" in t.id:
            return fetch_s
        if "/shard" in t.id:
            return shard_s
        return ring_s if t.id.startswith("ring/") else 0.0
    return duration


def test_registered():
    assert EXPERIMENTS["storage"] == "experiments.storage"


def test_roles_use_storage_nodes_or_stand_ins():
    ls = st.roles(topologies.build("leaf-spine"))
    assert len(ls.training) == 12 and ls.servers == ("l3h3", "l3h2", "l3h1", "l3h0")
    zones = topologies.build("two-zone,hosts_per_leaf=4,leaves=2,spines=2,interzone_links=1,"
                             "storage=2")
    who = st.roles(zones)
    assert who.servers == ("st0", "st1") and len(who.training) == 16
    assert st.storage_links(zones, who) == 4   # dual-homed: one link per zone
    with pytest.raises(ScheduleError, match="2 training hosts"):
        st.roles(topologies.build("leaf-spine,leaves=2,hosts_per_leaf=2,spines=1"))


def test_sizes_are_in_packets_the_same_at_every_rate(who, graph):
    links = st.storage_links(graph, who)
    nbytes = st.batch_bytes(len(who.training), links)
    step = st.compute_s(RATE)   # the step's packet times, at this rate
    load = len(who.training) * nbytes / (links * st.TCP.payload_bytes / st.TCP.packet_bytes
                                         * RATE * 1e6 / 8 * step)
    assert load == pytest.approx(st.STORAGE_LOAD, rel=1e-3)
    assert st.compute_s(2 * RATE) == pytest.approx(step / 2)
    for condition in st.CONDITIONS:   # the same bytes at any rate; only the compute scales
        slow, fast = (st.loading_transfers(who, condition, r, 3, links) for r in (RATE, 2 * RATE))
        assert [t.bytes for t in slow] == [t.bytes for t in fast]
    shards = st.SHARDS_PER_SERVER * len(who.servers)
    assert st.shard_bytes(shards) * shards == pytest.approx(
        st.RESTORE_PACKETS * st.TCP.payload_bytes, abs=shards)
    assert st.clients_of(st.FULL, who) == [1, 2, 4, 8, 12]
    assert st.clients_of(st.QUICK, who) == [1, 4, 12]


def test_schedules_validate_and_the_ring_comes_with_its_conditions(who, graph):
    links = st.storage_links(graph, who)
    for condition, (_, ring) in st.CONDITIONS.items():
        ts = st.loading_transfers(who, condition, RATE, 4, links)
        validate_schedule(ts, fg.endpoints(graph))
        assert any(t.id.startswith("ring/") for t in ts) == ring
    with pytest.raises(ValueError, match="condition"):
        st.loading_transfers(who, "nope", RATE, 4, links)
    for source in st.SOURCES:
        validate_schedule(st.restore_transfers(who, source, 4), fg.endpoints(graph))
    cached = st.restore_transfers(who, "cache", 12)
    stored = sum(t.bytes for t in cached if t.src in who.servers)
    assert stored == pytest.approx(0.2 * sum(t.bytes for t in cached if "/shard" in t.id),
                                   rel=0.1)


def test_ideal_is_the_busiest_endpoint_link(who, graph):
    one = st.restore_transfers(who, "storage", 1)
    twelve = st.restore_transfers(who, "storage", 12)
    # one client: its own downlink (the checkpoint's RESTORE_PACKETS, plus headers)
    checkpoint_s = st.RESTORE_PACKETS * st.TCP.payload_bytes * 8 / (RATE * 1e6)
    assert st.endpoint_bound_s(one, graph, RATE) == pytest.approx(checkpoint_s * st.TCP_WIRE,
                                                                  rel=1e-3)
    # twelve: each of the 4 servers sends 12 quarters of the checkpoint
    assert st.endpoint_bound_s(twelve, graph, RATE) == pytest.approx(3 * checkpoint_s
                                                                     * st.TCP_WIRE, rel=1e-3)


@pytest.mark.parametrize("fetch_steps, stall_steps", [(0.25, 0.0), (1.5, 0.5)])
def test_measure_loading_finds_the_stalls(who, graph, fetch_steps, stall_steps):
    step = st.compute_s(RATE)
    fetch_s, stall_ms = fetch_steps * step, stall_steps * step * 1e3
    links = st.storage_links(graph, who)
    ts = st.loading_transfers(who, "shared", RATE, 4, links)
    row, fetches = st.measure_loading(fake_result(ts, by_kind(fetch_s)), who, 4, graph, RATE,
                                      links)
    assert row["fetch_p50_ms"] == row["fetch_max_ms"] == pytest.approx(fetch_s * 1e3)
    assert row["stall_ms_per_step"] == pytest.approx(stall_ms)
    assert row["step_slowdown"] == pytest.approx(1 + stall_steps * 3 / 4)
    assert row["compute_ms"] == pytest.approx(step * 1e3, abs=0.1)
    assert row["collective_ms"] is not None and 0 < row["fetch_ideal_ms"] < step * 1e3
    assert len(fetches) == 12 * 4 and {f["batch"] for f in fetches} == {0, 1, 2, 3}


def test_measure_loading_with_a_lost_batch_has_no_figures(who, graph):
    links = st.storage_links(graph, who)
    ts = st.loading_transfers(who, "alone", RATE, 4, links)
    row, fetches = st.measure_loading(fake_result(ts, by_kind(), fail={"load/c3/batch2/stripe1"}),
                                      who, 4, graph, RATE, links)
    assert row["fetch_p99_ms"] is None and row["stall_ms_per_step"] is None
    assert row["step_slowdown"] is None and row["collective_ms"] is None
    mine = [f for f in fetches if f["client"] == who.training[3]]
    assert [f["fetch_ms"] is None for f in mine] == [False, False, True, True]
    assert [f["stall_ms"] for f in mine][2:] == [None, None]


@pytest.mark.parametrize("source, restore", [("storage", 0.5), ("admission", 2.5)])
def test_measure_restore(who, graph, source, restore):
    ts = st.restore_transfers(who, source, 4)
    row = st.measure_restore(fake_result(ts, by_kind(), drops={"l0h0": 3}, timeouts=1), ts,
                             who, graph, RATE)
    # 20 shards per client at once take one shard time; 4 at a time take 5
    assert row["restore_s"] == pytest.approx(restore) and row["restore_p99_s"] == row["restore_s"]
    checkpoint = st.shard_bytes(st.SHARDS_PER_SERVER * 4) * st.SHARDS_PER_SERVER * 4
    assert row["storage_link_util"] == pytest.approx(
        4 * checkpoint / restore / (4 * RATE * 1e6 / 8), rel=1e-3)
    assert row["drops"] == 3 and row["timeouts"] == 1 * len({t.src for t in ts} | {t.dst
                                                                               for t in ts})
    failed = st.measure_restore(fake_result(ts, by_kind(), fail={"restore/c1/shard3"}), ts, who,
                                graph, RATE)
    assert failed["restore_s"] is None and failed["storage_link_util"] is None


def _fake_fabric(duration, fail=()):
    """Backends whose runs take ``duration(transfer)``; ids in ``fail`` never finish."""
    fake_emulation.FakeEmulation.made = []
    return fake_emulation.backends(
        lambda emu, transfers, transport, workdir, seed, deadline_s=120.0, during=None:
        fake_result(transfers, duration, fail=fail))


def test_quick_run_writes_both_parts_and_draws_them(tmp_path):
    from fabric.model.lanes import SINGLE_LANE, THREE_LANES

    fabric = _fake_fabric(by_kind(fetch_s=10.0))   # longer than a step at any rate
    outcome = st.EXPERIMENT.run(RunContext(tmp_path, quick=True), fabric)
    assert [o.lanes for o in fake_emulation.FakeEmulation.made] == [SINGLE_LANE, THREE_LANES]
    runs = results.read_csv(tmp_path / "runs.csv")
    assert len(runs) == 3 + len(st.SOURCES) * 3 and all(r["valid"] == "True" for r in runs)
    table = outcome.table
    assert [r["condition"] for r in table if r["part"] == "dataloading"] == [
        "alone", "shared", "separate"]
    assert [(r["source"], r["clients"]) for r in table if r["part"] == "stampede"] == [
        (s, n) for s in st.SOURCES for n in (1, 4, 12)]
    compute_ms = {float(r["compute_ms"]) for r in runs if r["part"] == "dataloading"}
    assert len(compute_ms) == 1 and 0 < min(compute_ms) < 10e3
    assert all(r["stall_ms_per_step"] == pytest.approx(10e3 - min(compute_ms), abs=0.2)
               for r in table if r["part"] == "dataloading")
    assert outcome.fidelity["valid"] and summary_valid(tmp_path)
    assert outcome.parameters["estimated_s"] < st.QUICK_BUDGET_S
    text = format_table("storage", outcome)
    assert text.count("fetch_p99_ms") == 1 and text.count("restore_p99_s") == 1
    assert len(results.read_csv(tmp_path / "fetches.csv")) == 3 * 12 * st.QUICK.steps
    written = st.EXPERIMENT.plot(tmp_path)
    assert {p.name for p in written} == {"storage.png", "storage.pdf"}
    assert all(p.stat().st_size > 1000 for p in written)


def summary_valid(run_dir):
    return results.read_json(run_dir / "summary.json")["valid"]


def test_a_lost_shard_makes_the_run_invalid_and_figures_still_draw(tmp_path):
    # shard 4 is a cache miss: read from storage under every source
    fabric = _fake_fabric(by_kind(), fail={"restore/c0/shard4"})
    outcome = st.EXPERIMENT.run(RunContext(tmp_path, quick=True), fabric)
    assert not outcome.fidelity["valid"] and not summary_valid(tmp_path)
    broken = [r for r in outcome.table if r["part"] == "stampede"]
    assert all(r["restore_s"] is None and not r["valid"] for r in broken)
    assert len(st.EXPERIMENT.plot(tmp_path)) == 2


def test_restore_curves_stay_apart_and_ideals_match_their_legend(tmp_path):
    from fabric.experiment import RunData

    ideal = {"storage": 1.0, "cache": 0.5, "admission": 1.0, "cache+admission": 0.5}
    rows = [{"part": "stampede", "source": s, "clients": n, "seed": 0,
             "restore_s": 2.0 * n,  # every source the same: the curves lie on each other
             "ideal_restore_s": ideal[s] * n, "valid": True}
            for s in st.SOURCES for n in (1, 4, 12)]
    results.write_csv(tmp_path / "runs.csv", rows)
    results.write_summary(tmp_path, "storage", [], {"valid": True, "runs": 12, "checks": []})
    fig = st.storage_figure(RunData.read(tmp_path))
    right = fig.axes[1]
    measured = {line.get_label(): line for line in right.get_lines()
                if line.get_label() in st.SOURCES}
    def dashes(line):
        offset, pattern = line._unscaled_dash_pattern   # as the line was given
        return offset, tuple(pattern or ())

    assert len({dashes(line) for line in measured.values()}) == len(st.SOURCES)
    assert len({line.get_markersize() for line in measured.values()}) == len(st.SOURCES)
    labels = [t.get_text() for t in right.get_legend().get_texts()]
    assert labels[:4] == list(st.SOURCES)
    assert labels[4:] == ["ideal (busiest link):\nstorage, admission",
                          "ideal (busiest link):\ncache, cache+admission"]
    ideals = [line for line in right.get_lines() if line.get_label() not in st.SOURCES]
    colours = {line.get_color() for line in measured.values()}
    assert {line.get_color() for line in ideals} == colours   # each in its source's colour
    by_y = {}
    for line in ideals:
        by_y.setdefault(tuple(line.get_ydata()), []).append(line)
    # coinciding ideals: the same dots, offset, so both colours show
    assert all(len({dashes(line)[0] for line in group}) == 2
               for group in by_y.values())
