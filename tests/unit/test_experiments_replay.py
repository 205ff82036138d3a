"""The replay experiment's pure parts: jobs, placement, time dilation, rows, table, figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import experiments
import topologies
from experiments import replay as rp
from fabric.analysis import results
from fabric.errors import UserError
from fabric.experiment import RunContext
from fabric.traffic import sizing
from fabric.traffic.model import TransportSpec
from fabric.traffic.trace import load_trace
from fabric.traffic.trace.schema import from_dict
from fabric.traffic.trace.place import PlacementError
from fabric.traffic.trace.report import step_times

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "traces" / "example.json"


@pytest.fixture(scope="module")
def graph():
    return topologies.build("rail-clos")


def _ctx(**values) -> RunContext:
    return RunContext(Path("/nonexistent"), quick=True, values=values)


def test_registered_with_its_options():
    assert experiments.load("replay") is rp.EXPERIMENT
    assert {o.flag for o in rp.EXPERIMENT.options} >= {"--trace", "--workload", "--placement"}


def test_the_default_is_the_shipped_trace_twice(graph):
    jobs = rp.jobs_of(_ctx())
    assert [(j.name, j.placement) for j in jobs] == [("a", "rail"), ("b", "scattered")]
    assert jobs[0].workload is jobs[1].workload
    assert [s for s, _ in rp.scenarios(jobs)] == ["a alone", "b alone", "together"]
    one = rp.jobs_of(_ctx(trace=EXAMPLE, placement="packed"))
    assert [(j.name, j.placement) for j in one] == [("job", "packed")]
    assert [s for s, _ in rp.scenarios(one)] == ["job alone"]


@pytest.mark.parametrize("values,message", [
    ({"trace": EXAMPLE, "workload": EXAMPLE}, "not both"),
    ({"placement": "packed"}, "--placement needs --trace")])
def test_conflicting_options_are_refused(values, message):
    with pytest.raises(UserError, match=message):
        rp.jobs_of(_ctx(**values))


def _workload(tmp_path: Path, jobs) -> Path:
    path = tmp_path / "workload.json"
    path.write_text(json.dumps({"jobs": jobs}) if not isinstance(jobs, str) else jobs)
    return path


def test_a_workload_file_names_its_jobs_with_traces_relative_to_it(tmp_path):
    (tmp_path / "t.json").write_text(EXAMPLE.read_text())
    jobs = rp.read_jobs(_workload(tmp_path, [
        {"name": "train", "trace": "t.json"},
        {"name": "other", "trace": "t.json", "placement": "scattered", "dscp": 10}]))
    assert [(j.name, j.placement, j.dscp) for j in jobs] == [("train", "rail", 26),
                                                             ("other", "scattered", 10)]


@pytest.mark.parametrize("jobs,message", [
    ("{not json", "not a JSON workload file"),
    ([], "non-empty list"),
    ([{"name": "a"}], "job 0: needs a \"trace\""),
    ([{"name": "a b", "trace": "t.json"}], "job 0: name 'a b'"),
    ([{"trace": "t.json", "placement": "round"}], "job 0 \\(job0\\): placement"),
    ([{"trace": "t.json", "dscp": 64}], "dscp must be 0..63"),
    ([{"trace": "missing.json"}], "no trace at"),
    ([{"name": "a", "trace": "t.json"}, {"name": "a", "trace": "t.json"}], "distinct"),
])
def test_a_bad_workload_file_is_one_line_naming_the_file_and_job(tmp_path, jobs, message):
    (tmp_path / "t.json").write_text(EXAMPLE.read_text())
    path = _workload(tmp_path, jobs)
    with pytest.raises(UserError, match=message) as err:
        rp.read_jobs(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_jobs_take_distinct_nics_and_too_many_ranks_are_refused(graph):
    job = rp.Job("a", load_trace(EXAMPLE))
    placed = rp.place_jobs(graph, [job, rp.Job("b", job.workload, "scattered")], seed=3)
    assert len(placed["a"]) == len(placed["b"]) == job.workload.ranks
    assert not set(placed["a"]) & set(placed["b"])
    assert placed["a"] == ["h0g0", "h0g1", "h1g0", "h1g1"]  # rail: servers 0 and 1
    with pytest.raises(PlacementError, match="taken"):
        rp.place_jobs(graph, [rp.Job(f"j{i}", job.workload) for i in range(5)], seed=0)


ROCE = TransportSpec("roce")


def test_the_busiest_step_is_its_target_in_packets_at_every_rate(graph):
    jobs = [rp.Job("a", load_trace(EXAMPLE))]
    placed = rp.place_jobs(graph, jobs, 0)
    busiest = rp.busiest_step_bytes(graph, jobs, placed)
    byte_scale, dilation = rp.scales(graph, jobs, placed, 10.0, ROCE, quick=True)
    packets = busiest * byte_scale / ROCE.payload_bytes
    compute = rp.step_compute_s(jobs) * dilation / sizing.packet_time_s(ROCE, 10.0)
    # the target, unless the compute caps the scale
    assert packets == pytest.approx(rp.TARGET_COMM_PACKETS[True]) or (
        compute == pytest.approx(rp.MAX_COMPUTE_PACKET_TIMES[True])
        and packets < rp.TARGET_COMM_PACKETS[True])
    # the same packets at twice the rate, in half the emulated time
    assert rp.scales(graph, jobs, placed, 20.0, ROCE, quick=True) == pytest.approx(
        (byte_scale, dilation / 2))
    # the ratio of communication to compute is the cluster's: bytes at 400 Gbit/s
    comm_s = busiest * byte_scale * 8 / 10e6   # payload at the emulated 10 Mbit/s
    real_comm = busiest * 8 / 400e9
    assert comm_s / (rp.step_compute_s(jobs) * dilation) == pytest.approx(
        real_comm / rp.step_compute_s(jobs))


def test_a_job_that_hardly_communicates_is_not_stretched_past_the_compute_cap(graph):
    data = json.loads(EXAMPLE.read_text())
    for program in data["programs"]:
        for op in program:
            if "bytes" in op:
                op["bytes"] = 4096  # a few packets a step against milliseconds of compute
    tiny = rp.Job("a", from_dict(data, "tiny.json"))
    placed = rp.place_jobs(graph, [tiny], 0)
    byte_scale, dilation = rp.scales(graph, [tiny], placed, 10.0, ROCE, quick=True)
    # the compute cap binds: the step's compute lasts exactly MAX_COMPUTE_PACKET_TIMES
    assert rp.step_compute_s([tiny]) * dilation == pytest.approx(
        sizing.seconds_of(rp.MAX_COMPUTE_PACKET_TIMES[True], ROCE, 10.0))
    busiest = rp.busiest_step_bytes(graph, [tiny], placed)
    assert busiest * byte_scale < rp.TARGET_COMM_PACKETS[True] * ROCE.payload_bytes


def _schedule(graph):
    job = rp.Job("a", load_trace(EXAMPLE))
    placed = rp.place_jobs(graph, [job], 0)
    return rp._replay(graph, job, placed["a"], 1e-3, 10.0)


def test_job_fields_read_steps_in_the_jobs_milliseconds(graph):
    schedule = _schedule(graph)
    # every transfer takes 0.1 s after the previous one ends: a serial toy timing
    measured, t = {}, 0.0
    for tr in schedule.transfers:
        measured[tr.id] = (t, t + 0.1, tr.bytes)
        t += 0.1
    fields = rp.job_fields("a", schedule, measured, measured, dilation=10.0)
    assert fields["complete:a"] and fields["steps:a"] >= 1
    assert fields["step_ms:a"] == fields["ideal_ms:a"] > 0
    steps = step_times(schedule, measured)
    assert fields["step_ms:a"] == pytest.approx(  # emulated seconds / dilation, in ms
        sum(s.seconds for s in steps) / len(steps) / 10.0 * 1e3, rel=1e-3)
    assert fields["exposed_ms:a"] == pytest.approx(
        sum(s.exposed_s for s in steps) / len(steps) / 10.0 * 1e3, rel=1e-3)
    broken = dict(measured, **{schedule.transfers[0].id: (0.0, None, 1)})
    assert not rp.job_fields("a", schedule, broken, None, 10.0)["complete:a"]
    rows = rp.collective_rows({"policy": "ecmp"}, "a", schedule, measured, None, 1e6)
    assert rows and all(r["job"] == "a" and r["ideal_frac"] is None for r in rows)


def _rows():
    base = {"host_mbps": 10.0, "dilation": 50.0, "byte_scale": 1e-4, "valid": True, "seed": 0}
    rows = []
    for policy, slow in (("ecmp", 1.5), ("spray", 1.1)):
        rows.append({**base, "policy": policy, "scenario": "a alone", "jobs": "a",
                     "step_ms:a": 10.0, "ideal_ms:a": 8.0, "compute_ms:a": 6.0,
                     "exposed_ms:a": 4.0})
        rows.append({**base, "policy": policy, "scenario": "b alone", "jobs": "b",
                     "step_ms:b": 12.0, "ideal_ms:b": 9.0, "compute_ms:b": 6.0,
                     "exposed_ms:b": 6.0})
        rows.append({**base, "policy": policy, "scenario": "together", "jobs": "a+b",
                     "step_ms:a": 10.0 * slow, "ideal_ms:a": 8.0, "step_ms:b": 12.0 * slow,
                     "ideal_ms:b": 9.5})
    return rows


def test_the_table_gives_each_jobs_slowdown_beside_running_alone():
    table = rp.table_of(_rows())
    assert [(r["policy"], r["job"]) for r in table] == [("ecmp", "a"), ("ecmp", "b"),
                                                        ("spray", "a"), ("spray", "b")]
    ecmp_a = table[0]
    assert ecmp_a["slowdown"] == 1.5 and ecmp_a["efficiency"] == 0.8
    assert ecmp_a["exposed_share"] == 0.4 and ecmp_a["together_ms"] == 15.0
    assert table[3]["slowdown"] == pytest.approx(1.1)


def test_figures_are_drawn_from_the_csvs(tmp_path):
    rows = _rows()
    results.write_csv(tmp_path / "runs.csv", rows)
    results.write_summary(tmp_path, "replay", rp.table_of(rows),
                          {"valid": True, "runs": len(rows), "checks": []})
    written = rp.EXPERIMENT.plot(tmp_path)
    for name in ("step_time", "exposed"):
        assert tmp_path / f"{name}.png" in written
        assert (tmp_path / f"{name}.pdf").stat().st_size > 1000


def test_a_quick_run_is_costed_and_counted():
    ctx = _ctx()
    assert rp.EXPERIMENT.run_count(ctx) == 3 * 1 * 3
    assert 3 * rp.BRINGUP_S < rp.EXPERIMENT.estimate_s(ctx) < 600
