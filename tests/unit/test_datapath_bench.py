"""benchmarks/datapath.py: how bridges are spread over ovs-vswitchd daemons."""

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "datapath.py"
_SPEC = importlib.util.spec_from_file_location("datapath_bench", _PATH)
datapath = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(datapath)


@pytest.mark.parametrize("daemons, expected", [("one", 1), ("per-bridge", 8), ("2", 2),
                                               ("8", 8)])
def test_daemon_count(daemons, expected):
    assert datapath.daemon_count(daemons, 8) == expected


@pytest.mark.parametrize("daemons", ["0", "9", "two", "", "-1"])
def test_daemon_count_refuses(daemons):
    with pytest.raises(ValueError, match="count from 1 to 8"):
        datapath.daemon_count(daemons, 8)


def test_consecutive_bridges_share_a_daemon():
    assert [datapath.daemon_of(k, 8, 2) for k in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [datapath.daemon_of(k, 3, 3) for k in range(3)] == [0, 1, 2]
    assert {datapath.daemon_of(k, 8, 1) for k in range(8)} == {0}
