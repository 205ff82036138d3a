"""Unit tests plan rates as on the machine the budget was measured on: the machine
speed probe (:mod:`fabric.emulation.machine_speed`) would make them depend on how
busy this machine is; its own tests undo this."""

import pytest

from fabric.emulation import machine_speed


@pytest.fixture(autouse=True)
def full_machine_speed(monkeypatch):
    monkeypatch.setenv(machine_speed.ENV_OVERRIDE, "1")
    machine_speed.machine_speed.cache_clear()
    yield
    machine_speed.machine_speed.cache_clear()
