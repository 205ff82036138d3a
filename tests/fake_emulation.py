"""A stand-in for a running fabric in the experiments' unit tests: nothing on the system
is touched. Tests subclass it to record what an experiment did to the fabric."""

from __future__ import annotations

from types import SimpleNamespace

from fabric.emulation import capacity


class FakeEmulation:
    """Has what an experiment reads of :class:`fabric.emulation.Emulation` outside the
    traffic runs (which the tests replace): graph, options, the rate plan."""

    made: list = []       # the options of every bring-up; reset it in each test
    default_mbps = 3.0    # host rate when the options name none

    def __init__(self, graph, options):
        self.graph, self.options = graph, options
        self.report = SimpleNamespace(rate_plan=capacity.plan_rates(
            graph, options.host_mbps or self.default_mbps, enforce_budget=False))
        type(self).made.append(options)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def save_controller_log(self, path):
        return False  # no controller ran
