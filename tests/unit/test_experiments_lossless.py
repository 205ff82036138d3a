"""The lossless experiment without root: roles, schedules, measurement, tables, budget
and figures drawn from a synthetic run directory."""

from __future__ import annotations

from pathlib import Path

import pytest

import topologies
from experiments import EXPERIMENTS, lossless
from fabric.analysis import results
from fabric.emulation import fidelity
from fabric.experiment.context import RunContext
from fabric.model.lanes import DSCP_COLLECTIVE, DSCP_STORAGE
from fabric.traffic.model import ScheduleError, TransportSpec, validate_schedule
from tests.unit.test_experiments_incast_isolation import fake_result

ROCE = TransportSpec("roce")


def _leaf(graph, endpoint):
    return min(graph[endpoint])


def test_registered():
    assert EXPERIMENTS["lossless"] == "experiments.lossless"


@pytest.mark.parametrize("spec", ["rail-clos", "leaf-spine", "fat-tree,k=4", "two-zone"])
def test_roles_put_the_incast_on_one_leaf_and_the_ring_across_leaves(spec):
    # two-zone's leaves differ in size: its ring ends with two ranks of one leaf
    graph = topologies.build(spec)
    who = lossless.roles(graph)
    hot = _leaf(graph, who.client)
    assert all(_leaf(graph, s) != hot for s in who.servers)
    assert len(set(who.servers)) == len(who.servers) <= lossless.MAX_SERVERS
    taken = {who.client, *who.servers}
    assert not taken & set(who.ranks) and len(set(who.ranks)) == len(who.ranks)
    assert lossless.MIN_RING_RANKS <= len(who.ranks) <= lossless.RING_RANKS
    ring = list(who.ranks) + [who.ranks[0]]
    steps = list(zip(ring, ring[1:]))
    crossing = [_leaf(graph, a) != _leaf(graph, b) for a, b in steps]
    assert all(crossing) if spec != "two-zone" else sum(crossing) >= len(steps) - 1
    assert any(_leaf(graph, b) == hot for _, b in steps)  # and one enters the hot leaf
    assert _leaf(graph, who.probe_dst) == hot and _leaf(graph, who.probe_src) != hot


@pytest.mark.parametrize("spec", ["leaf-spine,leaves=2", "leaf-spine,leaves=3,hosts_per_leaf=2"])
def test_too_small_a_fabric_is_refused(spec):
    with pytest.raises(ScheduleError, match="lossless needs"):
        lossless.roles(topologies.build(spec))


def test_iteration_has_the_read_only_with_storage_and_the_probe_only_when_asked():
    who = lossless.roles(topologies.build("rail-clos"))
    full = lossless.iteration_transfers(who, ROCE, True, True)
    validate_schedule(full, set(topologies.build("rail-clos")))
    tags = {t.tag.split("/")[0] for t in full}
    assert tags == {lossless.RING_TAG, lossless.READ_TAG, lossless.PROBE_TAG}
    read = [t for t in full if t.tag.startswith(lossless.READ_TAG) and t.dst == who.client]
    assert sum(t.bytes for t in read if t.src in who.servers) == pytest.approx(
        lossless.read_bytes(ROCE), abs=8)
    assert {t.dscp for t in read} == {DSCP_STORAGE}
    assert {t.dscp for t in full if t.tag.startswith("ring")} == {DSCP_COLLECTIVE}
    probes = [t for t in full if t.tag == lossless.PROBE_TAG]
    assert len(probes) == lossless.PROBES and {t.dscp for t in probes} == {0}
    assert all(p.after == (q.id,) for q, p in zip(probes, probes[1:]))  # one at a time
    alone = lossless.iteration_transfers(who, ROCE, False, False)
    assert {t.tag.split("/")[0] for t in alone} == {lossless.RING_TAG}


def test_measure_splits_ring_read_and_probe():
    who = lossless.roles(topologies.build("rail-clos"))
    transfers = lossless.iteration_transfers(who, ROCE, True, True)
    durations = {lossless.PROBE_TAG: 0.002, lossless.READ_TAG: 0.05}
    result = fake_result(transfers, lambda t: durations.get(t.tag.split("/")[0], 0.1))
    got = lossless.measure_rows(result.transfer_rows(), 5.0)
    # 14 dependent ring steps of 0.1 s; the read: the requests, then every stripe at once
    assert got["ring_ms"] == pytest.approx(1400.0)
    read_bytes = lossless.read_bytes(ROCE) + 6 * 64  # the stripes and their requests
    assert got["storage_goodput_frac"] == pytest.approx(read_bytes * 8 / 0.1 / 5e6, abs=1e-3)
    assert got["probe_p50_ms"] == pytest.approx(2.0) and got["probe_p99_ms"] == pytest.approx(2.0)
    failed = fake_result(transfers, fail={"probe/3"})
    got = lossless.measure_rows(failed.transfer_rows(), 5.0)
    assert got["ring_ms"] is not None and got["probe_p50_ms"] == pytest.approx(10.0)


def test_ideals_are_line_rate_less_the_roce_headers():
    got = lossless.ideals(4096, 10.0)
    line_ms = lossless.RING_PACKETS * 4096 * 8 / 10e6 * 1e3
    assert line_ms < got["ring_ideal_ms"] < line_ms * 4200 / 4096
    assert 4096 / 4200 < got["storage_goodput_ideal"] < 1.0


def test_pause_link_seconds_sums_the_paused_links():
    who = lossless.roles(topologies.build("rail-clos"))
    result = fake_result(lossless.iteration_transfers(who, ROCE, False, False))
    assert lossless.pause_link_seconds(result) is None  # lossy: no flow-control check
    result.fidelity.append(fidelity.Check("lossless_drops", 0.0, 0.0, True, ""))
    result.flow_control = [{"link": "sp0>r0l0", "lane": 0, "pauses": 3, "pause_share": 0.5},
                           {"link": "h4g0>r0l1", "lane": 0, "pauses": 1, "pause_share": 0.25},
                           {"link": "sp1>r0l0", "lane": 0, "pauses": 0, "pause_share": 0.0,
                            "max_held_pkts": 4}]
    assert lossless.pause_link_seconds(result) == 0.75


def _rows():
    rows = []
    for part, setting, loaded in (("routing", "ecmp", 1200.0), ("routing", "spray", 1800.0),
                                  ("cc", "none", 1100.0)):
        for it in range(3):
            for phase in lossless.PHASES:
                storage = phase == "storage"
                rows.append({"part": part, "setting": setting, "seed": 0, "iteration": it,
                             "phase": phase, "ring_ms": (loaded if storage else 1000.0) + it,
                             "ring_slowdown": None,
                             "storage_goodput_frac": 0.8 if storage else None,
                             "ring_ideal_ms": 1014.0, "storage_goodput_ideal": 0.99,
                             "probe_p50_ms": 2.0 if part == "cc" else None,
                             "probe_p99_ms": (9.0 if storage else 3.0) if part == "cc" else None,
                             "paused_links": 6 if storage else 0,
                             "pause_link_seconds": 1.5 if storage else 0.0,
                             "host_links_paused": 2, "valid": True})
    lossless.add_slowdowns(rows)
    return rows


def test_slowdown_against_the_same_settings_median_baseline_and_table():
    rows = _rows()
    spray = [r for r in rows if r["setting"] == "spray" and r["phase"] == "storage"]
    assert [r["ring_slowdown"] for r in spray] == pytest.approx([1800 / 1001, 1801 / 1001,
                                                                 1802 / 1001], abs=1e-4)
    rows[-1] = {**rows[-1], "valid": "False"}
    table = lossless.EXPERIMENT.table(rows)
    assert [(r["part"], r["setting"]) for r in table] == [("routing", "ecmp"),
                                                          ("routing", "spray"), ("cc", "none")]
    ecmp, spray_row, cc = table
    assert ecmp["baseline_ms"] == 1001.0 and ecmp["ring_ms"] == 1201.0
    assert ecmp["ring_ideal_ms"] == 1014.0 and ecmp["storage_goodput_ideal"] == 0.99
    assert ecmp["ring_slowdown"] == pytest.approx(1201 / 1001, abs=1e-3)
    assert spray_row["slowdown_max"] == pytest.approx(1802 / 1001, abs=1e-4)
    assert cc["probe_alone_p99_ms"] == 3.0 and cc["probe_p99_ms"] == 9.0
    assert ecmp["pause_link_seconds"] == 1.5 and ecmp["valid"] and not cc["valid"]


def test_run_count_and_a_quick_budget_of_six_bring_ups():
    ctx = RunContext(Path("/nonexistent"), quick=True)
    # five routing policies (static first, Fire-Flyer's; ar second) and three congestion
    # controls
    assert lossless.POLICIES[:2] == ("static", "ar")
    assert lossless.EXPERIMENT.run_count(ctx) == 8 * lossless.QUICK.iterations * 2
    estimate = lossless.EXPERIMENT.estimate_s(ctx)
    assert 6 * lossless.BRINGUP_S + 32 * lossless.RUN_OVERHEAD_S < estimate < 280


@pytest.mark.parametrize("valid", [True, False])
def test_figures_are_drawn_from_the_csvs(tmp_path, valid):
    rows = _rows()
    results.write_csv(tmp_path / "runs.csv", rows)
    results.write_summary(tmp_path, "lossless", lossless.EXPERIMENT.table(rows),
                          {"valid": valid, "runs": len(rows), "checks": []})
    written = lossless.EXPERIMENT.plot(tmp_path)
    for name in ("routing", "cc"):
        assert tmp_path / f"{name}.png" in written
        assert (tmp_path / f"{name}.pdf").stat().st_size > 1000
