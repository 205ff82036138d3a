"""A run that only the machine's load invalidated is tried again (pure code)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from fabric.experiment import RunContext, checks
from fabric.experiment.emulated import EmulatorBackend, idle_check
from fabric.experiment.runs import DEFAULT_ATTEMPTS, Progress, RunLog, Scheduled
from fabric.analysis import results
from fabric.emulation import fidelity
from fabric.traffic.model import Transfer, TransportSpec

DELAY_LIMIT = fidelity.MAX_OVS_INPUT_DELAY_MS


def _result(delay_ms: float, complete: bool = True) -> SimpleNamespace:
    """A traffic result with one input-delay reading and one transfer, done or not."""
    row = {"id": "a", "src": "h0", "dst": "h1", "bytes": 10**6, "path": None,
           "fct_s": 1.0 if complete else None}
    return SimpleNamespace(
        transfer_rows=lambda: [row], errors=[], flow_control=[],
        fidelity=[fidelity.Check("ovs_input_delay_ms", delay_ms, DELAY_LIMIT,
                                 delay_ms <= DELAY_LIMIT),
                  fidelity.Check("machine_cpu", 0.5, fidelity.MAX_MACHINE_CPU, True)])


def _run(tmp_path: Path, outcomes: dict[int, list[SimpleNamespace]],
         attempts: int = DEFAULT_ATTEMPTS) -> tuple[RunLog, list[str]]:
    """Run seeds 7 and 8; each traffic run of a seed takes that seed's next outcome."""
    dirs, prepared = [], []

    def fake_traffic(emu, transfers, transport, workdir, seed, deadline_s=120.0, during=None):
        if Path(workdir).name == "warm-up":
            return _result(0.1)
        dirs.append(Path(workdir).name)
        return outcomes[seed].pop(0)

    runs = [Scheduled({"seed": seed}, [Transfer("a", "h0", "h1", 10**6)], seed,
                      prepare=lambda emu, seed=seed: prepared.append(seed))
            for seed in (7, 8)]
    log = RunLog(attempts=attempts)
    backend = EmulatorBackend(traffic=fake_traffic, idle=lambda emu, transport, workdir:
                              fidelity.Check("idle_path_rate", 0.98, 0.9, True))
    backend.run(RunContext(tmp_path), SimpleNamespace(controller=SimpleNamespace(save_log=lambda path: None)),
                runs, TransportSpec("roce"), tmp_path, Progress(2, "test"),
                lambda run, result, report: {"delay": result.fidelity[0].value}, log)
    assert prepared == [int(d.split("-")[0]) for d in dirs]  # every attempt is prepared
    return log, dirs


def test_an_overloaded_run_is_repeated_and_its_attempt_listed(tmp_path):
    log, dirs = _run(tmp_path, {7: [_result(1.4), _result(0.6)], 8: [_result(0.3)]})
    assert dirs == ["7", "7-attempt2", "8"]
    assert [(r["seed"], r["delay"], r["attempts"]) for r in log.rows] == [(7, 0.6, 2),
                                                                           (8, 0.3, 1)]
    assert log.discarded == [{"seed": 7, "attempt": 1, "workdir": "7",
                              "ovs_input_delay_ms": 1.4, "machine_cpu": 0.5,
                              "agent_late_share": None, "late_pause_drops": None}]
    merged = log.write(tmp_path)
    assert merged["valid"] and merged["runs"] == 2
    assert (merged["attempts"], merged["repeated_runs"], merged["discarded_attempts"]) == (3, 1, 1)
    assert [r["workdir"] for r in results.read_csv(tmp_path / "discarded.csv")] == ["7"]


def test_a_run_overloaded_every_time_stays_invalid_after_its_last_attempt(tmp_path):
    log, dirs = _run(tmp_path, {7: [_result(1.4), _result(2.0)], 8: [_result(0.3)]},
                     attempts=2)
    assert dirs == ["7", "7-attempt2", "8"]
    assert [r["attempts"] for r in log.rows] == [2, 1]
    merged = log.write(tmp_path)
    assert not merged["valid"] and merged["invalid_runs"] == 1
    assert merged["repeated_runs"] == 1 and merged["discarded_attempts"] == 1


@pytest.mark.parametrize("attempts", [1, 3])
def test_a_run_that_failed_anything_else_is_not_repeated(tmp_path, attempts):
    # an incomplete transfer is the run's own failure, whatever the load
    log, dirs = _run(tmp_path, {7: [_result(1.4, complete=False)],
                                             8: [_result(1.4), _result(0.3)]},
                     attempts=attempts)
    assert dirs[:1] == ["7"] and "7-attempt2" not in dirs
    assert log.rows[0]["attempts"] == 1
    assert not log.write(tmp_path)["valid"]
    assert (tmp_path / "discarded.csv").exists() == (attempts > 1)  # seed 8 was repeated


def test_overloaded_means_only_load_dependent_checks_failed():
    def report(*failed: str) -> dict:
        names = ("ovs_input_delay_ms", "machine_cpu", "agent_late_share", "late_pause_drops",
                 "hidden_socket_drops", "lossless_drops")
        return {"checks": [{"name": n, "ok": n not in failed, "value": 2, "threshold": 1}
                           for n in names]}

    assert not checks.overloaded(report())
    assert checks.overloaded(report("ovs_input_delay_ms"))
    assert checks.overloaded(report("ovs_input_delay_ms", "machine_cpu"))
    assert not checks.overloaded(report("machine_cpu", "hidden_socket_drops"))
    assert checks.overload_text(report("machine_cpu")) == "machine_cpu 2 > 1"
    assert checks.overloaded(report("agent_late_share"))
    assert checks.overloaded(report("late_pause_drops"))  # the daemon was not run in time
    assert not checks.overloaded(report("late_pause_drops", "lossless_drops"))
    unmeasured = {"checks": [{"name": "ovs_input_delay_ms", "ok": False, "value": None,
                              "threshold": 1, "detail": "not measured: 3 backlog samples"}]}
    assert checks.overloaded(unmeasured)  # a starved sampler: the machine's load
    assert checks.overload_text(unmeasured) == \
        "ovs_input_delay_ms not measured: 3 backlog samples"


@pytest.mark.parametrize("values, tries, kept", [
    ([0.98], 1, 0.98),                # on its rate: measured once
    ([0.865, 0.97], 2, 0.97),         # the fresh bring-up's first flow fell short
    ([0.60, 0.55], 2, 0.60),          # a path that runs slow fails every try
])
def test_the_idle_path_is_tried_again_when_it_falls_short(tmp_path, values, tries, kept):
    seen = []

    def fake_idle(emu, transport, workdir):
        seen.append(Path(workdir).name)
        value = values[len(seen) - 1]
        return fidelity.Check("idle_path_rate", value, fidelity.MIN_IDLE_PATH_RATE,
                              value >= fidelity.MIN_IDLE_PATH_RATE)

    check = idle_check(None, TransportSpec("roce"), tmp_path / "idle", probe=fake_idle)
    assert seen == ["idle", "idle-again"][:tries]
    assert check.value == kept and check.ok == (kept >= fidelity.MIN_IDLE_PATH_RATE)
