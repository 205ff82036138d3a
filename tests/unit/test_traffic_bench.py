"""benchmarks/traffic.py: the cost per packet-hop fitted through its runs."""

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "traffic.py"
_SPEC = importlib.util.spec_from_file_location("traffic_bench", _PATH)
traffic = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(traffic)


def _cores(ovs, agents, softirq):
    return {"ovs-vswitchd": ovs, "agents": agents, "softirq": softirq,
            "machine": ovs + agents + softirq}


def test_cost_lines_recover_each_parts_slope_and_base():
    # ovs 0.5 + 0.01/k, agents 0.1 + 0.03/k, softirq 0.02/k
    points = [(k, _cores(0.5 + 0.01 * k, 0.1 + 0.03 * k, 0.02 * k)) for k in (4.0, 8.0, 16.0)]
    lines = traffic.cost_lines(points)
    assert lines["ovs-vswitchd"] == pytest.approx((0.01, 0.5))
    assert lines["agents"] == pytest.approx((0.03, 0.1))
    assert lines["softirq"] == pytest.approx((0.02, 0.0), abs=1e-12)
    assert lines["machine"] == pytest.approx((0.06, 0.6))


@pytest.mark.parametrize("loads", [[], [5.0], [5.0, 5.0]])
def test_no_line_without_two_different_loads(loads):
    assert traffic.cost_lines([(k, _cores(0.5, 0.2, 0.1)) for k in loads]) == {}


def test_projection_is_printed_from_the_lines(capsys):
    points = [(k, _cores(0.5 + 0.01 * k, 0.03 * k, 0.02 * k)) for k in (5.0, 10.0)]
    traffic.print_costs(points, 40.0)
    out = capsys.readouterr().out
    assert "ovs-vswitchd +0.010 (0.50)" in out
    assert "extrapolated to 40 k packet-hops/s" in out
    assert "ovs-vswitchd 0.90" in out and "agents 1.20" in out and "machine 2.90" in out


def test_nothing_is_printed_for_one_run(capsys):
    traffic.print_costs([(5.0, _cores(0.5, 0.2, 0.1))], 40.0)
    assert capsys.readouterr().out == ""
