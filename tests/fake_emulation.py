"""A stand-in for a running fabric in the experiments' unit tests: nothing on the system
is touched. Tests subclass it to record what an experiment did to the fabric."""

from __future__ import annotations

from types import SimpleNamespace

from fabric.emulation import capacity
from fabric.experiment.emulated import EmulatorBackend
from fabric.traffic.result import Check


class FakeEmulation:
    """Has what an experiment reads of :class:`fabric.emulation.Emulation` outside the
    traffic runs (which the tests replace, :func:`backends`): graph, options, the rate
    plan, the controller's log."""

    made: list = []       # the options of every bring-up; reset it in each test
    default_mbps = 3.0    # host rate when the options name none

    def __init__(self, graph, options):
        self.graph, self.options = graph, options
        self.controller = SimpleNamespace(save_log=lambda path: False)  # no controller ran
        self.report = SimpleNamespace(rate_plan=capacity.plan_rates(
            graph, options.host_mbps or self.default_mbps, enforce_budget=False))
        type(self).made.append(options)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def idle_ok(emu, transport, workdir):
    """An idle-path check that passed."""
    return Check("idle_path_rate", 0.98, 0.9, True)


def backends(traffic, emulation=FakeEmulation, idle=idle_ok):
    """The emulator backend's own run loop on stand-ins: ``emulation`` for the fabric,
    ``traffic`` (``traffic_run``'s signature) for every run, ``idle`` for the idle
    check. Pass it to ``Experiment.run(ctx, backends=...)``."""
    return {"emulator": EmulatorBackend(emulation=emulation, traffic=traffic, idle=idle)}
