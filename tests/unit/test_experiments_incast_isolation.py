"""The incast and isolation experiments without root: schedules, measurement, tables,
time budgets and figures drawn from synthetic run directories."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import topologies
from experiments import EXPERIMENTS, incast, isolation
from fabric.experiment.checks import completion_check
from fabric.analysis import results
from fabric.traffic.result import TrafficResult
from fabric.model import graph as fg
from fabric.model.lanes import DSCP_COLLECTIVE, DSCP_STORAGE
from fabric.traffic.model import Plan, validate_schedule
from tests import fake_emulation

ROOT = Path(__file__).resolve().parents[2]


def test_both_experiments_are_registered():
    assert EXPERIMENTS["incast"] == "experiments.incast"
    assert EXPERIMENTS["isolation"] == "experiments.isolation"


# --- a fake traffic result -------------------------------------------------------

def fake_result(transfers, duration=lambda t: 0.01, fail=(), netstat=None, drops=None,
                errors=()):
    """Every transfer starts when its dependencies end and takes ``duration(t)``;
    ids in ``fail`` never finish, and what depends on them never starts."""
    ends: dict[str, float] = {}
    agents: dict[str, dict] = {}
    for t in _order(transfers):
        blocked = any(d not in ends for d in t.after)
        start = None if blocked else max((ends[d] for d in t.after), default=100.0)
        end = None if blocked or t.id in fail else start + duration(t)
        if end is not None:
            ends[t.id] = end
        agents.setdefault(t.src, {"transfers": [], "netstat": {}})["transfers"].append(
            {"id": t.id, "role": "send", "start": start, "end": end, "bytes": t.bytes})
        agents.setdefault(t.dst, {"transfers": [], "netstat": {}})["transfers"].append(
            {"id": t.id, "role": "recv", "start": start, "end": end, "bytes": t.bytes})
    for ep, counters in (netstat or {}).items():
        agents[ep]["netstat"] = counters
    hosts = {ep: ["10.0.0.1/24"] for ep in agents}
    return TrafficResult(Plan(list(transfers), hosts), agents, None, {}, dict(drops or {}), [],
                         list(errors))


def _order(transfers):
    from fabric.traffic.model import dependency_order

    return dependency_order(transfers)


# --- incast --------------------------------------------------------------------

def test_stripe_is_in_segments_at_every_rate():
    assert incast.stripe_bytes() == incast.STRIPE_PACKETS * 1448
    assert incast.burst_pkts(6, incast.stripe_bytes()) > 32 >= incast.burst_pkts(
        5, incast.stripe_bytes())  # the 32-packet buffer overflows from 6 senders on
    graph = topologies.build(incast.DEFAULT_TOPO)
    assert all(t.bytes == incast.VICTIM_PACKETS * 1448
               for t in incast.victim_transfers(graph, incast.QUICK))


def test_burst_is_capped_by_the_initial_window():
    assert incast.burst_pkts(8, 64 * 1024) == 8 * 10  # 46 segments, window 10
    assert incast.burst_pkts(16, 3604) == 16 * 3
    assert incast.burst_pkts(1, 1448) == 1


def test_incast_schedule_fits_16_senders_on_the_default_fabric():
    graph = topologies.build(incast.DEFAULT_TOPO)
    stripe = incast.stripe_bytes()
    spec = incast.pattern_spec(16, stripe, rounds=3, admission=4)
    transfers, client, servers = incast.incast_transfers(graph, spec)
    validate_schedule(transfers, fg.endpoints(graph))
    assert len(servers) == 16 and client not in servers
    assert {t.dscp for t in transfers} == {DSCP_STORAGE}
    data = [t for t in transfers if "/stripe" in t.id]
    assert len(data) == 16 * 3 and all(t.dst == client for t in data)
    assert sum(t.bytes for t in data) == 3 * 16 * stripe  # block = stripe x senders


def test_incast_grids_and_quick_budget():
    quick = incast.run_configs(incast.QUICK, [0])
    lossy = [c for c in quick if c.fabric == "lossy" and c.senders]
    assert len(lossy) == 16 and {c.buffer_pkts for c in quick} == {32}
    assert {c.rto_min_ms for c in lossy} == {200, 10}
    assert {c.admission for c in lossy} == {None, 4}
    lossless = [(c.lanes, c.senders, c.admission) for c in quick if c.fabric == "lossless"]
    # the victim alone first, then fan-ins with and without admission; its own lane once
    assert lossless == [("shared", 0, None), ("shared", 4, None), ("shared", 16, None),
                        ("shared", 4, 4), ("shared", 16, 4), ("separate", 0, None),
                        ("separate", 16, None)]
    assert len(quick) == 24
    # grouped by bring-up (fabric, lanes, buffer), each starting with the victim alone
    full = incast.run_configs(incast.FULL, [0, 1, 2])
    bring_ups = list(dict.fromkeys(c.bring_up for c in full))
    assert [c.bring_up for c in full] == sorted((c.bring_up for c in full),
                                                key=bring_ups.index)
    assert len(bring_ups) == 3 + 2
    assert len(full) == 3 * (3 + 6 * 2 * 2 * 3) + (3 + 4 * 2 * 3) + (3 + 3)
    host_mbps = incast.host_rate(None)
    estimate = incast.estimate_s(quick, host_mbps, incast.QUICK.rounds)
    assert estimate < incast.QUICK_BUDGET_S
    # the estimate charges bring-up and per-run overhead: it cannot be optimistic
    assert estimate > incast.BRINGUP_S + len(quick) * incast.RUN_OVERHEAD_S
    # every rto the sweep sets is above the kernel's floor
    from fabric.emulation.traffic import MIN_RTO_ROUTE_FLOOR_MS

    assert min(incast.QUICK.rtos + incast.FULL.rtos) >= MIN_RTO_ROUTE_FLOOR_MS


def _incast_run(senders=4, fail=(), errors=()):
    graph = topologies.build(incast.DEFAULT_TOPO)
    stripe = 3604
    spec = incast.pattern_spec(senders, stripe, rounds=3, admission=None)
    transfers, client, servers = incast.incast_transfers(graph, spec)
    result = fake_result(transfers, duration=lambda t: 0.02 if "/stripe" in t.id else 0.001,
                         fail=fail, netstat={servers[0]: {"TCPTimeouts": 2, "RetransSegs": 5}},
                         drops={client: 7}, errors=errors)
    cfg = incast.RunConfig(senders, 32, 200, None, 0)
    check = completion_check(result)
    report = {"valid": check.ok, "checks": []}
    return incast.measure(cfg, spec, result, client, servers, 5.5, report, graph), check


def test_incast_measure_reports_rounds_counters_and_drops():
    (row, rounds), check = _incast_run()
    assert check.ok and row["valid"] and row["complete"]
    # a round: request 1 ms, then the stripes 20 ms: 4 x 3604 B in 21 ms
    expected = 4 * 3604 * 8 / 0.021 / 1e6 / 5.5
    assert row["goodput_frac"] == pytest.approx(expected, rel=1e-3)
    assert row["round_p99_ms"] == pytest.approx(21.0, abs=0.01)
    assert (row["timeouts"], row["retransmits"], row["drops"]) == (2, 5, 7)
    assert row["admission"] == 0 and row["burst_pkts"] == 12
    assert [r["round"] for r in rounds] == [0, 1, 2]
    assert all(r["duration_ms"] == pytest.approx(21.0, abs=0.01) for r in rounds)


def test_incast_failed_transfer_makes_goodput_none_and_row_invalid():
    (row, rounds), check = _incast_run(fail={"striped-read/c0/round1/stripe2"})
    assert not check.ok and check.value < 1
    assert row["goodput_frac"] is None and row["round_p99_ms"] is None
    assert row["valid"] is False and row["complete"] is False
    assert rounds[1]["duration_ms"] is None
    (row, _), check = _incast_run(errors=["agent on l0h0 did not finish; stopped"])
    assert not check.ok and "did not finish" in check.detail and row["valid"] is False


def _incast_rows():
    rows = []
    for buffer_pkts in (16, 32):
        for rto in (200, 10):
            for admission in (0, 4):
                for senders in (1, 4, 8, 16):
                    for seed in (0, 1):
                        collapse = rto == 200 and not admission and senders >= 8
                        frac = 0.3 if collapse else 0.9
                        rows.append({"senders": senders, "buffer_pkts": buffer_pkts,
                                     "rto_min_ms": rto, "admission": admission, "seed": seed,
                                     "host_mbps": 5.5, "goodput_frac": frac + seed / 100,
                                     "round_p50_ms": 20.0, "round_p99_ms": 200.0 + seed,
                                     "timeouts": 3 if collapse else 0, "retransmits": 4,
                                     "drops": 5, "complete": True, "valid": True})
    return rows


def test_incast_table_averages_seeds_and_keeps_failures_visible():
    rows = _incast_rows()
    rows[0] = {**rows[0], "goodput_frac": None, "valid": False}
    table = incast.EXPERIMENT.table(rows)
    assert len(table) == 2 * 2 * 2 * 4
    first = next(r for r in table if (r["buffer_pkts"], r["rto_min_ms"], r["admission"],
                                      r["senders"]) == (16, 200, 0, 1))
    assert first["seeds"] == 2 and first["valid"] is False
    assert first["goodput_frac"] == pytest.approx(0.91)  # the seed that completed
    other = next(r for r in table if (r["buffer_pkts"], r["rto_min_ms"], r["admission"],
                                      r["senders"]) == (32, 200, 0, 16))
    assert other["goodput_frac"] == pytest.approx(0.305) and other["valid"] is True
    assert other["round_p99_ms"] == pytest.approx(200.5) and other["timeouts"] == 3
    assert list(first)[:6] == ["fabric", "lanes", "senders", "buffer_pkts", "rto_min_ms",
                               "admission"]


def _fake_incast_dir(run_dir: Path, valid: bool) -> None:
    rows = _incast_rows()
    rows[3] = {**rows[3], "goodput_frac": None, "round_p99_ms": None, "valid": False}
    results.write_csv(run_dir / "runs.csv", rows)
    results.write_csv(run_dir / "rounds.csv",
                      [{"senders": r["senders"], "buffer_pkts": r["buffer_pkts"],
                        "rto_min_ms": r["rto_min_ms"], "admission": r["admission"],
                        "seed": r["seed"], "round": k, "duration_ms": 20.0 + k,
                        "goodput_frac": 0.8} for r in rows for k in range(3)])
    results.write_summary(run_dir, "incast", incast.EXPERIMENT.table(rows),
                          {"valid": valid, "runs": len(rows), "checks": []})


@pytest.mark.parametrize("valid", [True, False])
def test_incast_figures_are_drawn_from_the_csvs(tmp_path, valid):
    _fake_incast_dir(tmp_path, valid)
    written = incast.EXPERIMENT.plot(tmp_path)
    for name in ("goodput", "round_p99", "timeouts"):
        for suffix in (".png", ".pdf"):
            path = tmp_path / f"{name}{suffix}"
            assert path in written and path.stat().st_size > 1000


# --- isolation -----------------------------------------------------------------

def _leaf(graph, endpoint):
    return next(iter(graph.neighbors(endpoint)))


def test_isolation_iteration_on_rail_clos():
    graph = topologies.build("rail-clos")
    who = isolation.roles(graph)
    transfers = isolation.iteration_transfers(graph, True, who)
    validate_schedule(transfers, fg.endpoints(graph))
    ring = [t for t in transfers if t.tag.startswith(isolation.RING_TAG)]
    stor = [t for t in transfers if not t.tag.startswith(isolation.RING_TAG)]
    assert len(who.ranks) == 8 and {t.dscp for t in ring} == {DSCP_COLLECTIVE}
    assert stor and {t.dscp for t in stor} == {DSCP_STORAGE}
    assert {t.src for t in ring} == set(who.ranks)  # a ring over the 8 ranks
    # storage servers are outside the ring; every storage transfer has one end on a
    # ring rank, so it crosses the ring's leaves and shares that rank's link
    servers = set(who.read_servers) | set(who.write_targets)
    assert not servers & set(who.ranks)
    ring_leaves = {_leaf(graph, r) for r in who.ranks}
    for t in stor:
        assert {t.src, t.dst} & set(who.ranks)
        assert {_leaf(graph, t.src), _leaf(graph, t.dst)} & ring_leaves
    # the read client receives ring data on the link the stripes arrive on;
    # the writer sends ring data on the link its checkpoint leaves on
    assert any(t.dst == who.read_client for t in ring)
    assert any(t.src == who.writer for t in ring)
    assert _leaf(graph, who.read_client) != _leaf(graph, who.writer)
    stripes = [t for t in stor if t.dst == who.read_client and "/stripe" in t.id]
    assert {t.src for t in stripes} == set(who.read_servers)
    assert sum(t.bytes for t in stripes) == pytest.approx(isolation.storage_bytes(), abs=4)
    # the baseline is the same ring, alone
    alone = isolation.iteration_transfers(graph, False, who)
    assert alone == ring


def test_ring_size_is_its_packets_per_rank_at_line_rate():
    n = 8
    size = isolation.ring_bytes(n)
    per_rank = 2 * (n - 1) / n * size
    assert per_rank / 1448 == pytest.approx(isolation.RING_PACKETS, rel=1e-3)


def test_isolation_needs_room_for_storage():
    with pytest.raises(Exception, match="needs 8 ring ranks"):
        isolation.roles(topologies.build("rail-clos,servers=4,gpus=2"))


def test_isolation_quick_budget():
    graph = topologies.build(isolation.DEFAULT_TOPO)
    from fabric.emulation import capacity

    host_mbps = capacity.auto_host_mbps(graph, "user")
    estimate = isolation.estimate_s(isolation.QUICK, isolation.QUICK.seeds, host_mbps)
    assert estimate < isolation.QUICK_BUDGET_S
    bring_ups = len(isolation.FABRICS) * len(isolation.LANES)
    runs = bring_ups * isolation.run_count(isolation.QUICK, isolation.QUICK.seeds)
    assert runs == 16
    assert estimate > bring_ups * isolation.BRINGUP_S + runs * isolation.RUN_OVERHEAD_S


def test_isolation_measure_splits_classes_and_catches_failures():
    graph = topologies.build("rail-clos")
    who = isolation.roles(graph)
    transfers = isolation.iteration_transfers(graph, True, who)
    result = fake_result(transfers, duration=lambda t: 0.05 if t.dscp == DSCP_COLLECTIVE
                         else 0.1)
    got = isolation.measure_iteration(result, 7.5, who.storage_endpoints_on_ring)
    assert got["collective_ms"] == pytest.approx(14 * 50, abs=0.1)  # 2(N-1) steps
    stor = [t for t in transfers if t.dscp == DSCP_STORAGE]
    assert got["storage_bytes"] == sum(t.bytes for t in stor)
    # the read's rounds of request + stripes (0.2 s each) bound the storage span
    rounds = isolation.READ_ROUNDS
    expected = got["storage_bytes"] * 8 / (0.2 * rounds) / 1e6 / 7.5 / 2
    assert got["storage_goodput_frac"] == pytest.approx(expected, rel=1e-3)
    failed = fake_result(transfers, fail={f"read/round{rounds - 1}/stripe1"})
    got = isolation.measure_iteration(failed, 7.5, 2)
    assert got["storage_goodput_frac"] is None and got["collective_ms"] is not None
    assert not completion_check(failed).ok
    alone = fake_result(isolation.iteration_transfers(graph, False, who))
    got = isolation.measure_iteration(alone, 7.5, 2)
    assert got["storage_goodput_frac"] is None and got["storage_bytes"] == 0


def _isolation_rows():
    rows = []
    for lanes, loaded in (("shared", 2000.0), ("separate", 1100.0)):
        for it in range(3):
            for phase in isolation.PHASES:
                ms = (1000.0 + 10 * it) if phase == "baseline" else loaded + 10 * it
                rows.append({"lanes": lanes, "seed": 0, "iteration": it, "phase": phase,
                             "host_mbps": 7.5, "collective_ms": ms,
                             "collective_slowdown": None,
                             "storage_goodput_frac": None if phase == "baseline" else 0.6,
                             "storage_bytes": 0, "complete": True, "valid": True})
    return isolation.add_slowdowns(rows)


def test_isolation_slowdown_is_against_the_median_baseline_of_the_same_lanes():
    rows = _isolation_rows()
    shared = [r for r in rows if r["lanes"] == "shared" and r["phase"] == "storage"]
    assert [r["collective_slowdown"] for r in shared] == pytest.approx([2000 / 1010,
                                                                        2010 / 1010,
                                                                        2020 / 1010])
    base = [r for r in rows if r["phase"] == "baseline" and r["iteration"] == 1]
    assert all(r["collective_slowdown"] == 1.0 for r in base)
    rows[0]["collective_ms"] = None  # a failed baseline is left out of the median
    isolation.add_slowdowns(rows)
    assert rows[0]["collective_slowdown"] is None


def test_isolation_table_per_lanes():
    rows = _isolation_rows()
    rows[-1] = {**rows[-1], "valid": False, "storage_goodput_frac": None}
    table = isolation.EXPERIMENT.table(rows)
    assert [r["lanes"] for r in table] == ["shared", "separate"]
    shared, separate = table
    assert shared["iterations"] == 3 and shared["baseline_ms"] == 1010.0
    assert shared["collective_slowdown"] == pytest.approx(2010 / 1010, abs=1e-3)
    assert shared["collective_p99_ms"] == pytest.approx(2019.8, abs=0.01)
    assert shared["storage_goodput_frac"] == 0.6 and shared["valid"] is True
    assert separate["collective_slowdown"] == pytest.approx(1110 / 1010, abs=1e-3)
    assert separate["valid"] is False and separate["storage_goodput_frac"] == 0.6


def _fake_isolation_dir(run_dir: Path, valid: bool) -> None:
    rows = _isolation_rows()
    rows[1] = {**rows[1], "collective_ms": None, "collective_slowdown": None, "valid": False}
    results.write_csv(run_dir / "runs.csv", rows)
    results.write_csv(run_dir / "flows.csv", [{"lanes": "shared", "id": "ring/x", "fct_s": 0.1}])
    results.write_summary(run_dir, "isolation", isolation.EXPERIMENT.table(rows),
                          {"valid": valid, "runs": len(rows), "checks": []})


@pytest.mark.parametrize("valid", [True, False])
def test_isolation_figures_are_drawn_from_the_csvs(tmp_path, valid):
    _fake_isolation_dir(tmp_path, valid)
    written = isolation.EXPERIMENT.plot(tmp_path)
    for name in ("slowdown", "iteration_time"):
        for suffix in (".png", ".pdf"):
            path = tmp_path / f"{name}{suffix}"
            assert path in written and path.stat().st_size > 1000


@pytest.mark.parametrize("name", ["incast", "isolation"])
def test_fabric_plot_redraws_from_the_directory(tmp_path, name):
    (_fake_incast_dir if name == "incast" else _fake_isolation_dir)(tmp_path, False)
    proc = subprocess.run([sys.executable, "-m", "fabric.cli", "plot", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert all(Path(p).exists() for p in proc.stdout.split())


# --- run() end to end on a fake fabric (no root) ---------------------------------

class _FakeEmulation(fake_emulation.FakeEmulation):
    """Stands in for :class:`fabric.emulation.Emulation`: records its options."""

    default_mbps = 5.5


def _fake_fabric(monkeypatch, module, fail_prefix=None):
    """Backends on a stand-in fabric, and the RTOs the experiment set (when it sets any)."""
    _FakeEmulation.made = []
    rto_calls = []

    def run(emu, transfers, transport, workdir, seed, deadline_s=120.0):
        fail = {t.id for t in transfers if fail_prefix and t.id.startswith(fail_prefix)}
        return fake_result(transfers, fail=fail)

    if hasattr(module, "set_rto_min"):
        monkeypatch.setattr(module, "set_rto_min",
                            lambda emu, eps, ms: rto_calls.append((len(eps), ms)))
    return fake_emulation.backends(run, emulation=_FakeEmulation), rto_calls


def test_incast_quick_run_writes_everything_and_sets_the_rto_every_run(tmp_path,
                                                                       monkeypatch):
    from fabric.experiment import RunContext
    from fabric.cli.run import format_table

    fabric, rto_calls = _fake_fabric(monkeypatch, incast)
    outcome = incast.EXPERIMENT.run(RunContext(tmp_path, quick=True), fabric)
    made = _FakeEmulation.made
    assert [o.queue_pkts for o in made] == [32] * 3
    assert [o.flow_control is not None for o in made] == [False, True, True]
    assert [len(o.lanes.lanes) for o in made] == [1, 1, 3]
    runs = results.read_csv(tmp_path / "runs.csv")
    assert len(runs) == 24 and all(r["valid"] == "True" for r in runs)
    assert all(len(r["victim_fct_s"].split("/")) == incast.VICTIMS for r in runs)
    assert all(r["victim_slowdown"] for r in runs)  # each against its bring-up's alone
    assert len(results.read_csv(tmp_path / "rounds.csv")) == 21 * incast.QUICK.rounds
    # every run sets the RTO on all 25 endpoints; 200 is set back explicitly at the end
    # of every bring-up; the victim alone goes first
    assert len(rto_calls) == 27 and {n for n, _ in rto_calls} == {25}
    assert [ms for _, ms in rto_calls] == ([200] * 9 + [10] * 8 + [200] + [200] * 6
                                           + [200] * 3)
    assert outcome.fidelity["valid"] and len(outcome.table) == 21
    assert outcome.parameters["estimated_s"] < incast.QUICK_BUDGET_S
    assert "anchor" in format_table("incast", outcome)
    summary = results.read_json(tmp_path / "summary.json")
    assert summary["valid"] and summary["question"] and summary["anchors"]
    assert len(incast.EXPERIMENT.plot(tmp_path)) == 10


def test_incast_run_with_a_failed_transfer_is_invalid(tmp_path, monkeypatch):
    from fabric.experiment import RunContext

    fabric, _ = _fake_fabric(monkeypatch, incast, fail_prefix="striped-read/c0/round3/stripe0")
    outcome = incast.EXPERIMENT.run(RunContext(tmp_path, quick=True), fabric)
    assert not outcome.fidelity["valid"]
    assert not results.read_json(tmp_path / "summary.json")["valid"]
    runs = [r for r in results.read_csv(tmp_path / "runs.csv") if r["senders"] != "0"]
    assert runs and all(r["goodput_frac"] == "" and r["valid"] == "False" for r in runs)
    assert len(incast.EXPERIMENT.plot(tmp_path)) == 10


def test_isolation_quick_run_writes_everything(tmp_path, monkeypatch):
    from fabric.experiment import RunContext
    from fabric.model.lanes import SINGLE_LANE, THREE_LANES

    fabric, _ = _fake_fabric(monkeypatch, isolation)
    outcome = isolation.EXPERIMENT.run(RunContext(tmp_path, quick=True, host_mbps=7.5), fabric)
    made = _FakeEmulation.made
    assert [o.lanes for o in made] == [SINGLE_LANE, THREE_LANES] * 2
    assert [o.flow_control is not None for o in made] == [False, False, True, True]
    runs = results.read_csv(tmp_path / "runs.csv")
    assert len(runs) == 16 and {r["phase"] for r in runs} == {"baseline", "storage"}
    assert all(r["collective_slowdown"] for r in runs)
    assert [(r["fabric"], r["lanes"]) for r in outcome.table] == [
        ("lossy", "shared"), ("lossy", "separate"), ("lossless", "shared"),
        ("lossless", "separate")]
    assert outcome.fidelity["valid"]
    assert outcome.parameters["estimated_s"] < isolation.QUICK_BUDGET_S
    assert len(isolation.EXPERIMENT.plot(tmp_path)) == 4


def test_isolation_run_with_a_failed_ring_is_invalid(tmp_path, monkeypatch):
    from fabric.experiment import RunContext

    fabric, _ = _fake_fabric(monkeypatch, isolation, fail_prefix="ring/ch0/step3/chunk0/r2")
    outcome = isolation.EXPERIMENT.run(RunContext(tmp_path, quick=True, host_mbps=7.5), fabric)
    assert not outcome.fidelity["valid"]
    runs = results.read_csv(tmp_path / "runs.csv")
    assert all(r["collective_ms"] == "" and r["valid"] == "False" for r in runs)
    assert all(r["collective_slowdown"] is None for r in outcome.table)
    assert len(isolation.EXPERIMENT.plot(tmp_path)) == 4
