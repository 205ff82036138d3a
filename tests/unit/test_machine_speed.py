"""The machine speed probe and the factor it scales the forwarding budget by."""

from __future__ import annotations

import pytest

import topologies
from fabric.emulation import capacity, machine_speed
from fabric.emulation.machine_speed import (ENV_OVERRIDE, REFERENCE_ROUND_US, MachineSpeed,
                                            default_host_mbps, probe_round_us, speed_factor)


def test_the_factor_is_the_reference_over_the_round_and_never_above_one():
    assert speed_factor(REFERENCE_ROUND_US) == 1.0
    assert speed_factor(REFERENCE_ROUND_US / 2) == 1.0  # faster: the measured budget, no more
    assert speed_factor(REFERENCE_ROUND_US * 2) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        speed_factor(0.0)


def test_the_probe_times_a_loopback_round():
    round_us = probe_round_us(samples=20, rounds=10)
    assert 0.1 < round_us < 10_000  # microseconds, not seconds or nanoseconds
    with pytest.raises(ValueError):
        probe_round_us(samples=0)


def test_the_environment_sets_the_factor_and_skips_the_probe(monkeypatch):
    monkeypatch.setenv(ENV_OVERRIDE, "0.5")
    machine_speed.machine_speed.cache_clear()
    monkeypatch.setattr(machine_speed, "probe_round_us", lambda *a, **k: pytest.fail("probed"))
    speed = machine_speed.machine_speed()
    assert speed == MachineSpeed(None, 0.5, ENV_OVERRIDE)
    assert "set by FABRIC_MACHINE_SPEED" in speed.describe()
    graph = topologies.build("rail-clos")
    assert default_host_mbps(graph) == capacity.auto_host_mbps(graph, speed=0.5)


@pytest.mark.parametrize("value", ["0", "1.2", "fast", "-1"])
def test_a_bad_factor_in_the_environment_is_refused(monkeypatch, value):
    monkeypatch.setenv(ENV_OVERRIDE, value)
    machine_speed.machine_speed.cache_clear()
    with pytest.raises(ValueError, match=ENV_OVERRIDE):
        machine_speed.machine_speed()


def test_without_the_environment_the_probe_decides_once_per_process(monkeypatch):
    monkeypatch.delenv(ENV_OVERRIDE)
    machine_speed.machine_speed.cache_clear()
    calls = []
    monkeypatch.setattr(machine_speed, "probe_round_us",
                        lambda *a, **k: calls.append(1) or 2 * REFERENCE_ROUND_US)
    speed = machine_speed.machine_speed()
    assert machine_speed.machine_speed() is speed and len(calls) == 1
    assert speed.factor == 0.5 and speed.source == "probe"
    assert speed.as_dict() == {"round_us": 2 * REFERENCE_ROUND_US,
                               "reference_round_us": REFERENCE_ROUND_US, "factor": 0.5,
                               "source": "probe"}
    assert f"{2 * REFERENCE_ROUND_US} us per round against" in speed.describe()


def test_bring_up_reports_the_headroom_on_this_machine():
    from types import SimpleNamespace

    from fabric.cli.common import bring_up_text

    plan = capacity.plan_rates(topologies.build("rail-clos"), 3.0, speed=0.5)
    report = SimpleNamespace(rate_plan=plan, phases_s={"network": 1.0}, total_s=1.0,
                             datapath="user", warnings=[])
    text = bring_up_text(report)
    assert f"headroom x{plan.headroom / 2:.2f}" in text
    assert "runs at 0.50 of the speed the budget of 18 k was measured at" in text
    full = bring_up_text(SimpleNamespace(**{**vars(report), "rate_plan": capacity.plan_rates(
        topologies.build("rail-clos"), 3.0)}))
    assert "speed" not in full
