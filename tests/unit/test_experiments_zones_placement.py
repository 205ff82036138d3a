"""The zones and placement experiments without root: placement helpers,
schedules, row and table aggregation, run() against a fake fabric, figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import networkx as nx
import pytest

import topologies
from experiments import EXPERIMENTS, placement, zones
from fabric.experiment import RunContext
from fabric.analysis import results
from fabric.cli.run import format_table
from fabric.emulation import capacity, fidelity
from fabric.model import graph as fg
from fabric.emulation.machine_speed import default_host_mbps
from fabric.traffic.model import Plan, TransportSpec, validate_schedule
from tests import fake_emulation

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def zgraph():
    return topologies.build(zones.DEFAULT_TOPO)


@pytest.fixture(scope="module")
def rgraphs():
    return [topologies.build(spec) for _, spec in placement.topology_specs(None)]


def test_both_experiments_are_registered():
    assert EXPERIMENTS["zones"] == "experiments.zones"
    assert EXPERIMENTS["placement"] == "experiments.placement"


# --- zones: placement helpers ---------------------------------------------------

def test_one_zone_keeps_every_rank_in_zone_0(zgraph):
    n = zones.job_size(zgraph)
    assert n == 8
    for seed in range(5):
        ranks = zones.job_ranks(zgraph, "one-zone", n, seed)
        assert len(set(ranks)) == n
        assert {zgraph.nodes[r]["zone"] for r in ranks} == {0}
        assert zones.zone_crossing_pairs(zgraph, ranks) == 0
        assert zones.ring_bound_frac(zgraph, ranks) == 1.0


@pytest.mark.parametrize("name", ["cross-zone", "cross-zone-contiguous"])
def test_cross_zone_puts_half_the_ranks_in_each_zone(zgraph, name):
    n = zones.job_size(zgraph)
    for seed in range(5):
        ranks = zones.job_ranks(zgraph, name, n, seed)
        assert len(set(ranks)) == n
        per_zone = [sum(zgraph.nodes[r]["zone"] == z for r in ranks) for z in (0, 1)]
        assert per_zone == [n // 2, n // 2]
        assert zones.zone_crossing_pairs(zgraph, ranks) >= 2


def test_contiguous_ring_crosses_once_each_way_and_is_not_bounded(zgraph):
    ranks = zones.job_ranks(zgraph, "cross-zone-contiguous", 8, 3)
    assert zones.zone_crossing_pairs(zgraph, ranks) == 2
    assert zones.ring_bound_frac(zgraph, ranks) == 1.0


def test_inter_zone_bound_follows_the_crossings(zgraph):
    alternating = [f"z{i % 2}h{i // 2}" for i in range(8)]
    assert zones.zone_crossing_pairs(zgraph, alternating) == 8
    assert zones.ring_bound_frac(zgraph, alternating) == pytest.approx(0.25)  # 1 link, 4 flows
    wider = topologies.build("two-zone,hosts_per_leaf=4,leaves=2,spines=2,interzone_links=2,"
                             "storage=2")
    assert zones.ring_bound_frac(wider, alternating) == pytest.approx(0.5)


def test_interzone_bytes_counts_only_spine_links_between_zones(zgraph):
    assert zones.interzone_link_set(zgraph) == {frozenset(("z0s0", "z1s0"))}
    totals = {("z0s0", "z1s0"): 100, ("z1s0", "z0s0"): 20, ("z0l0", "z0s0"): 5000,
              ("st0", "z0l0"): 7000}
    assert zones.interzone_bytes(zgraph, totals) == 120


def test_stripe_path_check_flags_paths_that_leave_the_zone(zgraph):
    paths = {"a": ["st0", "z0l0", "z0h0"], "b": ["st1", "z1l1", "z1s0", "z0s0", "z0l0", "z0h0"],
             "c": None}
    assert zones.stripe_path_check(zgraph, paths, ["a", "b", "c"], 0) == (1, 1)


def test_zone_schedules_validate(zgraph):
    hosts = fg.endpoints(zgraph)
    runs = zones.schedules(zgraph, 1, 432)
    assert [r["placement"] for r in runs] == list(zones.PLACEMENTS)
    for run in runs:
        validate_schedule(run["transfers"], hosts)
    for zone, run in enumerate(runs[3:]):
        assert zgraph.nodes[run["client"]]["zone"] == zone
        assert len(run["stripes"]) == zones.STORAGE_ROUNDS * 2
        stripes = [t for t in run["transfers"] if t.id in set(run["stripes"])]
        assert {t.src for t in stripes} == {"st0", "st1"} and {t.dst for t in stripes} == {
            run["client"]}


def test_zone_job_size_is_its_segments_per_rank(zgraph):
    size = zones.ring_size(8, 432)
    per_rank = size * 2 * 7 / 8
    assert per_rank / 1448 == pytest.approx(432, rel=0.01)


def test_zones_quick_run_is_estimated_under_two_minutes(zgraph):
    quick = zones.estimate_duration_s(zgraph, quick=True)
    assert 30 < quick < 120
    assert zones.estimate_duration_s(zgraph, quick=False) > quick


# --- placement helpers ---------------------------------------------------------

def test_topology_specs_pair_non_blocking_with_two_to_one():
    assert placement.topology_specs(None) == [(1, "rail-clos"), (2, "rail-clos,oversub=2")]
    assert placement.topology_specs("rail-clos,servers=8,oversub=4") == [
        (1, "rail-clos,servers=8"), (2, "rail-clos,servers=8,oversub=2")]


def test_packed_ranks_share_a_leaf_and_scattered_cross_the_spines(rgraphs):
    graph = rgraphs[0]
    n = placement.leaf_size(graph)
    assert n == 4
    packed = placement.placement_ranks(graph, "packed", n, 0)
    assert len({placement.leaf_of(graph, r) for r in packed}) == 1
    assert placement.spine_crossing_share(graph, packed) == 0.0
    shares = [placement.spine_crossing_share(graph, placement.placement_ranks(
        graph, "scattered", n, seed)) for seed in range(10)]
    assert all(s > 0 for s in shares)
    assert sum(shares) / len(shares) > 0.5
    # Eight packed ranks fill two leaves: 2 of 8 ring hops change leaf.
    eight = placement.placement_ranks(graph, "packed", 8, 0)
    assert len({placement.leaf_of(graph, r) for r in eight}) == 2
    assert placement.spine_crossing_share(graph, eight) == pytest.approx(0.25)


def test_spine_crossing_share_counts_ring_neighbours():
    graph = nx.Graph()
    for h, leaf in (("a", "l0"), ("b", "l0"), ("c", "l1"), ("d", "l1")):
        graph.add_edge(h, leaf)
    assert placement.spine_crossing_share(graph, ["a", "b", "c", "d"]) == 0.5
    assert placement.spine_crossing_share(graph, ["a", "c", "b", "d"]) == 1.0
    assert placement.spine_crossing_share(graph, ["a"]) == 0.0


def test_uplink_share_and_common_host_rate(rgraphs):
    flat, over = rgraphs
    assert placement.uplink_frac(flat) == 1.0 and placement.uplink_frac(over) == 0.5
    assert placement.oversubscription(flat) == 1 and placement.oversubscription(over) == 2
    rate = placement.common_host_mbps(rgraphs, capacity.auto_host_mbps)
    assert rate > 0 and rate == min(capacity.auto_host_mbps(g) for g in rgraphs)


def test_placement_schedules_validate(rgraphs):
    for graph in rgraphs:
        for seed in range(3):
            runs = placement.schedules(graph, seed, 650)
            assert [r["placement"] for r in runs] == list(placement.PLACEMENTS)
            for run in runs:
                validate_schedule(run["transfers"], fg.endpoints(graph))
                assert len(run["ranks"]) == 4


def test_placement_quick_run_is_estimated_under_two_minutes(rgraphs):
    quick = placement.estimate_duration_s(rgraphs, quick=True)
    assert 30 < quick < 120
    assert placement.estimate_duration_s(rgraphs, quick=False) > quick


def test_max_flows_per_link_counts_connections_on_switch_links(rgraphs):
    graph = rgraphs[0]
    rows = [{"src": "h0g0", "dst": "h4g0", "path": ["h0g0", "r0l0", "sp0", "r0l1", "h4g0"]},
            {"src": "h0g0", "dst": "h4g0", "path": ["h0g0", "r0l0", "sp0", "r0l1", "h4g0"]},
            {"src": "h1g0", "dst": "h5g0", "path": ["h1g0", "r0l0", "sp0", "r0l1", "h5g0"]},
            {"src": "h2g0", "dst": "h3g0", "path": ["h2g0", "r0l0", "h3g0"]}]
    assert placement.max_flows_per_link(graph, rows) == 2
    assert placement.max_flows_per_link(graph, [{"src": "a", "dst": "b", "path": None}]) is None


# --- rows and tables ------------------------------------------------------------

def _rows(transfers, end=1.0, missing=()):
    return [{"id": t.id, "src": t.src, "dst": t.dst, "bytes": t.bytes, "send_start": 0.0,
             "recv_end": None if t.id in missing else end,
             "fct_s": None if t.id in missing else end, "path": None} for t in transfers]


def test_zone_rows_give_busbw_and_mark_incomplete_runs_invalid(zgraph):
    job, _, _, read, _ = zones.schedules(zgraph, 0, 432)
    row = zones.run_row(zgraph, job, 0, 5.0, _rows(job["transfers"]), {}, {}, True)
    assert row["busbw_frac"] == pytest.approx(1.0, rel=0.01) and row["valid"] is True
    assert row["interzone_bytes"] == 0 and row["ranks"] == 8
    broken = zones.run_row(zgraph, job, 0, 5.0,
                           _rows(job["transfers"], missing={job["transfers"][-1].id}),
                           {}, {}, True)
    assert broken["busbw_frac"] is None and broken["time_s"] is None
    assert broken["valid"] is False
    storage_row = zones.run_row(zgraph, read, 0, 5.0, _rows(read["transfers"]),
                                {("z0s0", "z1s0"): 64}, {}, True)
    assert storage_row["busbw_frac"] == pytest.approx(1.0, rel=0.01)
    assert storage_row["ranks"] is None and storage_row["client"] == read["client"]
    assert storage_row["stripes_unmeasured"] == len(read["stripes"])
    assert storage_row["interzone_bytes"] == 64


def test_zone_table_aggregates_seeds_and_counts_incomplete():
    rows = [{"placement": p, "seed": s, "busbw_frac": v, "bound_frac": b,
             "interzone_bytes": z}
            for p, s, v, b, z in (("one-zone", 0, 0.9, 1.0, 0), ("one-zone", 1, 0.8, 1.0, 0),
                                  ("cross-zone", 0, 0.3, 0.33, 2e6),
                                  ("cross-zone", 1, None, 0.5, 1e6))]
    one, cross = zones.EXPERIMENT.table(rows)
    assert one["placement"] == "one-zone" and one["busbw_frac"] == pytest.approx(0.85)
    assert one["busbw_frac_min"] == 0.8 and one["busbw_frac_max"] == 0.9
    assert cross["busbw_frac"] == 0.3 and cross["incomplete"] == 1
    assert cross["interzone_mb"] == pytest.approx(1.5)


def test_placement_rows_and_table(rgraphs):
    flat = rgraphs[0]
    runs = placement.schedules(flat, 0, 650)
    rows = []
    for run, end in zip(runs, (1.0, 2.0)):
        rows.append(placement.run_row(flat, "rail-clos", run, 0, 7.5,
                                      _rows(run["transfers"], end), True))
    assert rows[0]["busbw_frac"] == pytest.approx(1.0, rel=0.01)
    assert rows[1]["busbw_frac"] == pytest.approx(0.5, rel=0.01)
    assert rows[0]["spine_crossing_share"] == 0.0 and rows[0]["oversubscription"] == 1
    bad = placement.run_row(flat, "rail-clos", runs[1], 1, 7.5,
                            _rows(runs[1]["transfers"], missing={runs[1]["transfers"][0].id}),
                            True)
    assert bad["busbw_frac"] is None and bad["valid"] is False
    table = placement.EXPERIMENT.table(rows + [bad])
    assert [(r["oversubscription"], r["placement"]) for r in table] == [
        (1, "packed"), (1, "scattered")]
    assert table[1]["seeds"] == 2 and table[1]["incomplete"] == 1
    assert table[1]["busbw_frac_min"] == table[1]["busbw_frac_max"] == rows[1]["busbw_frac"]


# --- run() against a fake fabric ---------------------------------------------------

class FakeEmulation(fake_emulation.FakeEmulation):
    """Stands in for a running fabric: only the rate plan is read."""

    default_mbps = 5.0


def _fake_traffic(fail_ids=()):
    def traffic_run(emu, transfers, transport, workdir, seed, deadline_s=120.0):
        graph = emu.graph
        rows = []
        for t in transfers:
            path = nx.shortest_path(graph, t.src, t.dst)
            rows.append({"id": t.id, "src": t.src, "dst": t.dst, "bytes": t.bytes,
                         "send_start": 10.0, "recv_end": None if t.id in fail_ids else 11.25,
                         "fct_s": None if t.id in fail_ids else 1.25, "path": path})
        links = SimpleNamespace(totals=lambda: {("z0s0", "z1s0"): 1000})
        hosts = {ep: [] for ep in fg.endpoints(graph)}
        return SimpleNamespace(transfer_rows=lambda: rows, links=links,
                               paths={r["id"]: r["path"] for r in rows}, errors=[],
                               flow_control=[],
                               plan=Plan(list(transfers), hosts, transport, 10.0),
                               fidelity=[fidelity.Check("ovs_input_delay_ms", 0.1, 1.0, True)])
    return traffic_run


def _fabric(fail_ids=()):
    """Backends on a stand-in fabric whose transfers take 1.25 s (``fail_ids`` never end)."""
    return fake_emulation.backends(_fake_traffic(fail_ids), emulation=FakeEmulation)


@pytest.mark.parametrize("module", [zones, placement])
def test_run_writes_rows_summary_and_figures(tmp_path, monkeypatch, module):
    fabric = _fabric()
    # 432 TCP segments of 1,448 B in the fake's 1.25 s at 5 Mbit/s: 0.8 of the host rate
    values = {"transport": "tcp"}
    outcome = module.EXPERIMENT.run(RunContext(tmp_path, quick=True, values=values), fabric)
    assert outcome.table and outcome.parameters and outcome.notes is not None
    assert outcome.fidelity["valid"] is True and outcome.seeds == [0, 1]
    runs = results.read_csv(tmp_path / "runs.csv")
    assert runs and all(r["valid"] == "True" for r in runs)
    assert all(float(r["busbw_frac"]) == pytest.approx(0.8, rel=0.01) for r in runs)
    # beside each: what a perfect transport reaches on the same paths, and the ratio
    assert all(float(r["ideal"]) > 0 and float(r["efficiency"]) == pytest.approx(
        float(r["busbw_frac"]) / float(r["ideal"]), rel=0.01) for r in runs)
    summary = results.read_json(tmp_path / "summary.json")
    assert summary["experiment"] == module.NAME and "anchors" in summary
    assert "question" in summary
    text = format_table(module.NAME, outcome)
    assert "fidelity: valid" in text
    for path in module.EXPERIMENT.plot(tmp_path):
        assert path.stat().st_size > 1000


@pytest.mark.parametrize("module", [placement, zones])
def test_the_seeds_run_on_roce_by_default_sized_in_its_packets(tmp_path, module):
    """RSC and Fire-Flyer run RDMA: the default runs are roce with the run's congestion
    control, each ring rank's share the quick mode's packets of the path MTU's payload;
    tcp on request."""
    seen = []
    traffic = _fake_traffic()

    def recording(emu, transfers, transport, *args, **kwargs):
        seen.append(transport)
        return traffic(emu, transfers, transport, *args, **kwargs)

    fabric = fake_emulation.backends(recording, emulation=FakeEmulation)
    outcome = module.EXPERIMENT.run(RunContext(tmp_path / "roce", quick=True, seeds=1,
                                               values={"cc": "none"}), fabric)
    assert {(t.kind, t.cc) for t in seen} == {("roce", "none")}
    assert outcome.parameters["transport"] == "roce" and outcome.parameters["cc"] == "none"
    ring = results.read_csv(tmp_path / "roce" / "runs.csv")[0]
    ranks = int(ring["ranks"])
    per_rank = 2 * (ranks - 1) / ranks * int(ring["size_bytes"])  # ring all-reduce
    packets = module.TARGET_PACKETS[True]
    assert per_rank == pytest.approx(packets * seen[0].payload_bytes, rel=0.01)
    seen.clear()
    module.EXPERIMENT.run(RunContext(tmp_path / "tcp", quick=True, seeds=1,
                                        values={"transport": "tcp"}), fabric)
    assert {t.kind for t in seen} == {"tcp"}


def test_zones_run_rows_carry_placements_and_interzone_bytes(tmp_path):
    fabric = _fabric()
    zones.EXPERIMENT.run(RunContext(tmp_path, quick=True, seeds=1), fabric)
    runs = results.read_csv(tmp_path / "runs.csv")
    assert [r["placement"] for r in runs] == list(zones.PLACEMENTS)
    assert all(r["interzone_bytes"] == "1000" for r in runs)
    reads = [r for r in runs if r["placement"].startswith("storage")]
    # shortest paths of the fake stay in the client's zone
    assert all(r["stripes_off_zone"] == "0" and r["stripes_unmeasured"] == "0" for r in reads)


def test_an_incomplete_run_is_not_swallowed(tmp_path, monkeypatch):
    fabric = _fabric(fail_ids={"scattered-ring/ch0/step0/chunk0/r0"})
    outcome = placement.EXPERIMENT.run(RunContext(tmp_path, quick=True, seeds=1), fabric)
    assert outcome.fidelity["valid"] is False
    failed = [c for c in outcome.fidelity["checks"] if not c["ok"]]
    assert [c["name"] for c in failed] == ["transfers_complete"]
    runs = results.read_csv(tmp_path / "runs.csv")
    scattered = [r for r in runs if r["placement"] == "scattered"]
    assert all(r["busbw_frac"] == "" and r["valid"] == "False" for r in scattered)
    assert outcome.table[1]["incomplete"] == 1
    assert "INVALID (transfers_complete)" in format_table("placement", outcome)


def test_placement_uses_one_host_rate_for_both_fabrics(tmp_path, monkeypatch):
    fabric = _fabric()
    placement.EXPERIMENT.run(RunContext(tmp_path, quick=True, seeds=1), fabric)
    runs = results.read_csv(tmp_path / "runs.csv")
    roce = TransportSpec("roce").packet_bytes  # the default transport's
    assert {r["host_mbps"] for r in runs} == {str(placement.common_host_mbps(
        [topologies.build(s) for _, s in placement.topology_specs(None)],
        lambda g: default_host_mbps(g, packet_bytes=roce)))}
    assert {r["oversubscription"] for r in runs} == {"1", "2"}


# --- figures from synthetic run directories -----------------------------------------

def _fake_zones_dir(run_dir: Path, valid: bool) -> None:
    rows = []
    for placement_name, value in (("one-zone", 0.9), ("cross-zone", 0.4),
                                  ("cross-zone-contiguous", 0.88), ("storage-zone0", 0.95),
                                  ("storage-zone1", 0.93)):
        for seed in (0, 1):
            job = placement_name in zones.JOB_PLACEMENTS
            rows.append({"placement": placement_name, "seed": seed, "ranks": 8 if job else None,
                         "time_s": 1.1, "busbw_frac": None if seed and not valid else value,
                         "bound_frac": 0.5 if placement_name == "cross-zone" else 1.0,
                         "interzone_bytes": 2_000_000 if placement_name.startswith("cross")
                         else 0, "valid": valid})
    results.write_csv(run_dir / "runs.csv", rows)
    results.write_summary(run_dir, "zones", zones.EXPERIMENT.table(rows),
                          {"valid": valid, "runs": len(rows), "checks": []}, {"ranks": 8})


def _fake_placement_dir(run_dir: Path, valid: bool) -> None:
    rows = []
    for over in (1, 2):
        for name, value, share in (("packed", 0.92, 0.0), ("scattered", 0.9 / over, 0.75)):
            for seed in (0, 1):
                rows.append({"oversubscription": over, "placement": name, "seed": seed,
                             "ranks": 4, "time_s": 1.0, "spine_crossing_share": share,
                             "busbw_frac": None if seed and not valid else value - seed / 50,
                             "ideal": value, "valid": valid})
    results.write_csv(run_dir / "runs.csv", rows)
    results.write_summary(run_dir, "placement", placement.EXPERIMENT.table(rows),
                          {"valid": valid, "runs": len(rows), "checks": []}, {"ranks": 4})


@pytest.mark.parametrize("valid", [True, False])
@pytest.mark.parametrize("name,fake,figures", [
    ("zones", _fake_zones_dir, ("busbw", "interzone_bytes")),
    ("placement", _fake_placement_dir, ("busbw", "busbw_vs_crossing"))])
def test_figures_are_drawn_from_the_csvs_without_root(tmp_path, name, fake, figures, valid):
    fake(tmp_path, valid)
    proc = subprocess.run([sys.executable, "-m", "fabric.cli", "plot", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for figure in figures:
        for suffix in (".png", ".pdf"):
            assert (tmp_path / f"{figure}{suffix}").stat().st_size > 1000


def test_run_checks_puts_each_runs_load_checks_in_its_row():
    from fabric.experiment.checks import RUN_CHECKS, run_checks

    report = {"valid": False, "checks": [
        {"name": "ovs_input_delay_ms", "value": 1.4, "threshold": 1.0, "ok": False},
        {"name": "machine_cpu", "value": 0.7, "threshold": 0.95, "ok": True},
        {"name": "idle_path_rate", "value": 0.96, "threshold": 0.9, "ok": True}]}
    # a check the run did not have (TCP has no pacer lateness, a lossy run no pauses) is
    # an empty cell, not 0
    assert run_checks(report) == {"ovs_input_delay_ms": 1.4, "machine_cpu": 0.7,
                                  "agent_late_share": None, "late_pause_drops": None}
    assert run_checks({"checks": []}) == dict.fromkeys(RUN_CHECKS)


def test_zones_figures_name_the_placements_as_the_docs_and_tables_do(tmp_path):
    from fabric.experiment import RunData

    _fake_zones_dir(tmp_path, valid=True)
    data = RunData.read(tmp_path)
    docs = " ".join((ROOT / "docs" / "experiments" / "zones.md").read_text().split())
    for term in ("one zone", "zone-unaware ring", "ordered zone by zone", "client in"):
        assert term in docs   # the words the labels use are the docs'
    for figure in (zones.busbw_figure(data), zones.interzone_figure(data)):
        labels = [t.get_text() for t in figure.axes[0].get_xticklabels()]
        assert labels == [zones.label(p) for p in zones.PLACEMENTS]
        assert all(text.endswith(f"({p})") for text, p in zip(labels, zones.PLACEMENTS))
    assert zones.label("cross-zone") == "both zones,\nzone-unaware ring\n(cross-zone)"
    assert "crossed zones" in zones.interzone_figure(data).axes[0].get_ylabel()
