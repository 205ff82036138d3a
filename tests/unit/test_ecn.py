"""ECN marking on the switch queues: marker parameters, tc lines, where markers go
(no root needed; the compiled filter itself runs in tests/integration/test_ecn.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import topologies
from fabric.emulation import ecn, hostconfig, shaping
from fabric.model.lanes import SINGLE_LANE
from fabric.model import graph as fg


def test_defines_are_the_thresholds_as_backlog_time_at_the_link_rate():
    # 3 Mbit/s: a byte takes 8/3 us, a full-size (1514-byte) packet 4037.33 us
    d = ecn.marker_defines(3.0, 64, ecn.EcnMarking(kmin=4, kmax=16, pmax=0.25))
    assert d["NS_PER_KBYTE"] == round(1000 * 8e3 / 3.0)
    assert d["KMIN_NS"] == round(4 * 1514 * 8e3 / 3.0)
    assert d["KMAX_NS"] == round(16 * 1514 * 8e3 / 3.0)
    assert d["CAP_NS"] == round(64 * 1514 * 8e3 / 3.0)
    assert d["PMAX_U32"] == round(0.25 * (2**32 - 1))


def test_thresholds_count_the_workloads_full_size_frames():
    marking = ecn.EcnMarking(kmin=4, kmax=16)
    small, jumbo = (ecn.marker_defines(3.0, 64, marking, frame) for frame in (1514, 4154))
    for key in ("KMIN_NS", "KMAX_NS", "CAP_NS"):
        assert jumbo[key] / small[key] == pytest.approx(4154 / 1514, rel=1e-6)
    assert jumbo["NS_PER_KBYTE"] == small["NS_PER_KBYTE"]


def test_step_marking_keeps_the_ramp_nonempty():
    d = ecn.marker_defines(10.0, 64, ecn.EcnMarking(kmin=8, kmax=8, pmax=1.0))
    assert d["KMAX_NS"] == d["KMIN_NS"] + 1


@pytest.mark.parametrize("kwargs", [dict(kmin=0), dict(kmin=5, kmax=4), dict(pmax=0),
                                    dict(pmax=1.5)])
def test_bad_thresholds_are_refused(kwargs):
    with pytest.raises(ValueError):
        ecn.EcnMarking(**kwargs)


def test_marker_line_goes_before_the_lane_filters_and_refuses_whitespace():
    line = ecn.marker_line("l0-eth5", Path("/run/fabric/ecn/marker-ab.o"))
    assert line == ("filter add dev l0-eth5 parent 1: protocol ip prio 1 handle 1 bpf obj "
                    "/run/fabric/ecn/marker-ab.o sec classifier")
    assert ecn.MARKER_PRIO < shaping.LANE_FILTER_PRIO
    assert all(f"prio {shaping.LANE_FILTER_PRIO} u32" in line
               for line in shaping.shape_lines("x-eth1", 3.0) if line.startswith("filter"))
    assert ecn.marker_line("x", Path("/a.o"), replace=True).startswith("filter replace ")
    with pytest.raises(ecn.MarkerError):
        ecn.marker_line("x", Path("/tmp/my dir/m.o"))


def test_prog_id_is_read_from_tc_filter_show():
    shown = ("filter parent 1: protocol ip pref 1 bpf chain 0 \n"
             "filter parent 1: protocol ip pref 1 bpf chain 0 handle 0x1 "
             "marker-0d33.o:[classifier] not_in_hw id 5613 name mark tag e40c jited \n"
             "filter parent 1: protocol ip pref 2 u32 chain 0 \n")
    assert ecn.marker_prog_id(shown) == 5613
    assert ecn.marker_prog_id("filter parent 1: protocol ip pref 2 u32 chain 0\n") is None


def test_markers_sit_on_switch_queues_only():
    graph = topologies.build("leaf-spine")
    rates = {frozenset(e): 3.0 for e in graph.edges}
    markers = {3.0: Path("/m.o")}
    for sw in fg.switches(graph):
        lines = hostconfig.switch_tc_batch(graph, sw, rates, 64, SINGLE_LANE,
                                           markers).splitlines()
        marked = {line.split()[3] for line in lines if " bpf obj " in line}
        shaped = {line.split()[3] for line in lines if line.startswith("qdisc replace")}
        assert marked == shaped and shaped  # every shaped switch port, i.e. towards switches
    ep = fg.endpoints(graph)[0]
    host_lines = hostconfig.endpoint_tc_batch(graph, ep, rates, 64, SINGLE_LANE)
    assert " bpf " not in host_lines  # the NIC's own egress is never marked
    marker_lines = hostconfig.endpoint_marker_batch(graph, ep, rates, markers).splitlines()
    assert [line.split()[3] for line in marker_lines] == [
        hostconfig.ifb_name(ep, nic["port"]) for nic in graph.nodes[ep]["nics"]]


@pytest.mark.skipif(shutil.which("clang") is None, reason="clang is installed by setup.sh")
def test_marker_compiles_once_per_parameter_set(tmp_path: Path):
    marking = ecn.EcnMarking()
    obj = ecn.marker_object(3.0, 64, marking, cache_dir=tmp_path)
    assert obj.read_bytes()[:4] == b"\x7fELF"
    mtime = obj.stat().st_mtime_ns
    assert ecn.marker_object(3.0, 64, marking, cache_dir=tmp_path) == obj
    assert obj.stat().st_mtime_ns == mtime  # cached
    assert ecn.marker_object(1.5, 64, marking, cache_dir=tmp_path) != obj
    assert not list(tmp_path.glob("*.tmp"))


def test_missing_clang_is_a_clear_error(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ecn.MarkerError, match="clang"):
        ecn.marker_object(2.0, 64, ecn.EcnMarking(), cache_dir=tmp_path)
