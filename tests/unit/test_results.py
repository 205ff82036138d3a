"""Run directories, manifests, summaries and the experiment figures (no root)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import collisions
from fabric.analysis import results
from fabric.cli.run import format_table

ROOT = Path(__file__).resolve().parents[2]


def test_new_run_dir_refuses_to_overwrite(tmp_path):
    run = results.new_run_dir(tmp_path / "run")
    (run / "runs.csv").write_text("x\n")
    with pytest.raises(results.ResultsError, match="already holds results"):
        results.new_run_dir(run)


def test_merge_fidelity_is_invalid_when_any_run_failed():
    ok = {"valid": True, "checks": [{"name": "a", "value": 0.5, "threshold": 1.0, "ok": True}]}
    bad = {"valid": False, "checks": [{"name": "a", "value": 2.0, "threshold": 1.0, "ok": False}]}
    merged = results.merge_fidelity([ok, bad, ok])
    assert merged["valid"] is False and merged["runs"] == 3 and merged["invalid_runs"] == 1
    (check,) = merged["checks"]
    assert check == {"name": "a", "failed_runs": 1, "threshold": 1.0, "min": 0.5, "max": 2.0,
                     "ok": False}
    assert results.merge_fidelity([ok])["valid"] is True
    assert results.merge_fidelity([])["valid"] is False


def test_merged_ranges_leave_out_runs_that_measured_nothing():
    ok = {"valid": True, "checks": [{"name": "a", "value": 0.5, "threshold": 1.0, "ok": True}]}
    none = {"valid": False, "checks": [{"name": "a", "value": None, "threshold": 1.0,
                                        "ok": False}]}
    (check,) = results.merge_fidelity([ok, none])["checks"]
    assert (check["min"], check["max"], check["unmeasured_runs"]) == (0.5, 0.5, 1)
    (check,) = results.merge_fidelity([none])["checks"]
    assert check["min"] is None and check["max"] is None and not check["ok"]


def test_a_figure_says_how_many_of_its_runs_failed_a_fidelity_check():
    from fabric.analysis.plotstyle import validity_mark

    ok, bad = {"valid": True, "checks": []}, {"valid": False, "checks": []}
    assert validity_mark({"valid": True, "fidelity": results.merge_fidelity([ok])}) == ""
    merged = results.merge_fidelity([ok, bad, bad, ok, ok])
    assert validity_mark({"valid": False, "fidelity": merged}).startswith("2 of 5 runs failed")
    # a summary written before it counted the invalid runs: its rows count them
    old = {"valid": False, "fidelity": {"valid": False, "runs": 3, "checks": []}}
    rows = [{"valid": "True"}, {"valid": "False"}, {"valid": "True"}]
    assert validity_mark(old, rows).startswith("1 of 3 runs failed")
    assert validity_mark(old).startswith("INVALID RUN")


def test_manifest_and_summary_carry_what_a_paper_needs(tmp_path):
    fid = results.merge_fidelity([{"valid": True, "checks": []}])
    manifest = json.loads(results.write_manifest(tmp_path, "collisions", {"quick": True},
                                                 [0, 1], fid).read_text())
    assert {"command", "parameters", "seeds", "versions", "git_commit", "fidelity"} <= set(manifest)
    assert manifest["seeds"] == [0, 1] and "python" in manifest["versions"]
    summary = json.loads(results.write_summary(tmp_path, "collisions", [{"a": 1}], fid,
                                               {"question": "q"}).read_text())
    assert summary["experiment"] == "collisions" and summary["valid"] is True
    assert summary["table"] == [{"a": 1}] and summary["question"] == "q"


def _fake_collisions_run(run_dir: Path, valid: bool, extra: tuple = ()) -> None:
    rows, flows, links = [], [], []
    for (policy, value), cc in ((p, c) for p in (("ecmp", 0.6), ("spray", 0.9),
                                                  ("adaptive", 0.85), *extra)
                                for c in ("swift", "loss")):
        for seed in (0, 1):
            rows.append({"topology": "rail-clos", "policy": policy, "pattern": "stride",
                         "cc": cc, "seed": seed, "norm_throughput": value + seed / 100,
                         "ideal": 0.95, "efficiency": (value + seed / 100) / 0.95,
                         "span_efficiency": 0.98,
                         "collisions": 3 if policy == "ecmp" else None,
                         "max_flows_per_link": 2 if policy == "ecmp" else None,
                         "drop_frac": 0.001, "rto": 0})
            flows += [{"topology": "rail-clos", "policy": policy, "pattern": "stride",
                       "seed": seed, "id": f"stride/{i}", "bytes": 1000, "fct_s": 1.0 + i / 10,
                       "path": f"h{i}g0/r0l0/sp{i % 4}/r0l1/h{i + 4}g0"} for i in range(5)]
            links += [{"policy": policy, "pattern": "stride", "seed": seed,
                       "link": f"r0l0>sp{i}", "share": 0.25} for i in range(4)]
    results.write_csv(run_dir / "runs.csv", rows)
    results.write_csv(run_dir / "flows.csv", flows)
    results.write_csv(run_dir / "uplinks.csv", links)
    results.write_summary(run_dir, "collisions", collisions.table_of(rows, {"rail-clos": 4}),
                          {"valid": valid, "runs": 6, "checks": []},
                          {"balls_into_bins_expectation": 0.684})


def test_collisions_figures_are_drawn_from_the_csvs_without_root(tmp_path):
    _fake_collisions_run(tmp_path, valid=False)
    proc = subprocess.run([sys.executable, "-m", "fabric.cli", "plot", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for name in ("throughput", "uplink_load", "fct_cdf"):
        for suffix in (".png", ".pdf"):
            assert (tmp_path / f"{name}{suffix}").stat().st_size > 1000


def test_the_ablations_rows_say_which_ratio_each_plots(tmp_path):
    from fabric.experiment import RunData

    _fake_collisions_run(tmp_path, valid=True)
    fig = collisions.ablation_figure(RunData.read(tmp_path))
    rate, last_byte = fig.axes   # one pattern: a row per ratio
    assert rate.get_title() == "stride on rail-clos:\nrate efficiency"
    assert last_byte.get_title() == "stride on rail-clos:\nlast-byte efficiency"
    assert "measured mean rate\n/ ideal mean rate" in rate.get_ylabel()
    assert "ideal / measured time" in last_byte.get_ylabel()
    assert "1 = the ideal" in fig.get_suptitle()


def test_a_users_policy_gets_its_own_rows_boxes_and_heatmap_column(tmp_path):
    _fake_collisions_run(tmp_path, valid=True, extra=(("Flowlets", 0.8),))
    summary = results.read_json(tmp_path / "summary.json")
    mine = [r for r in summary["table"] if r["policy"] == "Flowlets"]
    assert mine and all(r["theory"] is None and r["anchor"] is None for r in mine)
    runs = results.read_csv(tmp_path / "runs.csv")
    assert collisions.policies_in(runs) == ["ecmp", "spray", "adaptive", "Flowlets"]
    names = {p.name for p in collisions.EXPERIMENT.plot(tmp_path)}
    assert {"throughput.png", "uplink_load.png", "fct_cdf.png"} <= names


def test_collisions_table_aggregates_seeds():
    rows = [{"topology": "t", "policy": "ecmp", "pattern": "stride", "cc": "swift", "seed": s,
             "norm_throughput": v, "ideal": i, "efficiency": v / i, "span_efficiency": 1.0,
             "collisions": c,
             "max_flows_per_link": m, "drop_frac": d, "rto": r}
            for s, v, i, c, m, d, r in ((0, 0.5, 0.6, 2, 2, 0.0, 0), (1, 0.7, 0.8, 4, 3, 0.002, 1))]
    (row,) = collisions.table_of(rows, {"t": 4})
    assert row["seeds"] == 2 and row["norm_throughput"] == pytest.approx(0.6)
    assert row["ideal"] == pytest.approx(0.7)
    assert row["efficiency"] == pytest.approx((0.5 / 0.6 + 0.7 / 0.8) / 2, abs=1e-4)
    assert row["drop_frac"] == pytest.approx(0.001) and row["rto"] == 1 and row["cc"] == "swift"
    assert row["norm_throughput_min"] == 0.5 and row["max_flows_per_link"] == 3
    assert row["collisions"] == 3.0
    # theory next to the measurement: balls into bins for N=4 paths, and the anchor
    assert row["theory"] == pytest.approx(1 - (3 / 4) ** 4, abs=1e-4)
    assert row["anchor"] == "0.60-0.68"


def test_flows_per_link_counts_ecmp_paths_only():
    flows = [{"policy": "ecmp", "pattern": "stride", "seed": "0", "path": "h0/l0/s1/l1/h4"},
             {"policy": "ecmp", "pattern": "stride", "seed": "0", "path": "h1/l0/s1/l1/h5"},
             {"policy": "ecmp", "pattern": "stride", "seed": "0", "path": ""},
             {"policy": "spray", "pattern": "stride", "seed": "0", "path": "h0/l0/s1/l1/h4"}]
    counts = collisions.flows_per_link(flows)
    assert counts[("stride", "0", "l0>s1")] == 2 and counts[("stride", "0", "h0>l0")] == 1
    assert ("stride", "0", "s1>l0") not in counts


def test_collisions_theory_is_for_the_stride_only():
    assert collisions.expected_throughput("spray", "stride", 4) == 1.0
    assert collisions.expected_throughput("ecmp", "all-to-all", 4) is None


@pytest.mark.parametrize("spec, paths", [("rail-clos", 4), ("rail-clos,spines=3", 3),
                                         ("fat-tree", 4)])
def test_paths_between_pods_are_the_top_tier(spec, paths):
    import topologies

    assert collisions.top_tier_paths(topologies.build(spec)) == paths


def test_format_table_labels_invalid_runs():
    from fabric.experiment import Outcome

    text = format_table("collisions", Outcome(
        [{"policy": "ecmp", "x": 0.5}], {"valid": False, "runs": 2, "checks": [
            {"name": "ovs_input_delay_ms", "ok": False}]}, [0], {}, ["theory 0.684"]))
    assert "theory 0.684" in text and "INVALID (ovs_input_delay_ms)" in text


def test_plot_of_a_directory_without_summary_fails_with_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "fabric.cli", "plot", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "summary.json" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_every_series_of_a_figure_has_its_own_colour_and_marker():
    from fabric.analysis import plotstyle

    styles = [plotstyle.series_style("", i) for i in range(8)]
    assert len({s["color"] for s in styles}) == len({s["marker"] for s in styles}) == 8
    policies = [plotstyle.series_style(p, i) for i, p in enumerate(("ecmp", "spray",
                                                                     "adaptive"))]
    assert len({(s["color"], s["marker"]) for s in policies}) == 3
    assert len({s["color"] for s in policies}) == 3


def test_progress_gives_no_estimate_before_a_step_finished(capsys):
    from fabric.experiment.runs import Progress

    progress = Progress(3, "probe")
    progress.step("first")
    progress.step("second")
    first, second = capsys.readouterr().err.splitlines()
    assert "left" not in first and "nan" not in first
    assert "s left" in second


@pytest.mark.parametrize("name", ["collisions", "incast", "isolation", "zones", "placement",
                                  "failures", "storage"])
def test_every_experiment_checks_its_topology_before_it_runs(name, tmp_path):
    import experiments
    from fabric.experiment import Experiment, RunContext

    experiment = experiments.load(name)
    assert isinstance(experiment, Experiment) and experiment.name == name
    assert experiment.question and set(experiment.modes) == {"quick", "full"}
    experiment.check(RunContext(tmp_path, quick=True))  # its own default topology runs
    with pytest.raises(ValueError):
        experiment.check(RunContext(tmp_path, quick=True, topo="rail-clos,servers=1,gpus=1"))
    assert not any(tmp_path.iterdir())  # a check writes nothing
