"""Capture points: endpoints and links of the fabric, by name."""

from __future__ import annotations

import pytest

import topologies
from fabric.emulation.capture import CapturePoint, capture, capture_points
from fabric.model import graph as fg


@pytest.fixture(scope="module")
def graph():
    return topologies.build("leaf-spine")


def test_an_endpoint_stands_for_its_links_and_a_link_for_itself(graph):
    assert capture_points(graph, ["l0h0"]) == [CapturePoint("l0h0-l0", "l0-eth1")]
    (point,) = capture_points(graph, ["l0-s1"])
    assert point == CapturePoint("l0-s1", fg.intf_name("l0", fg.port(graph, "l0", "s1")))
    # named the other way round, the link is captured at the other switch's end
    (reverse,) = capture_points(graph, ["s1-l0"])
    assert reverse == CapturePoint("s1-l0", fg.intf_name("s1", fg.port(graph, "s1", "l0")))
    assert len(capture_points(graph, ["l0h0", "l0h0-l0", "l0-l0h0"])) == 1


@pytest.mark.parametrize("item", ["nosuch", "l0-l1", "l0h0-l1", "-", "l0-"])
def test_what_is_not_an_endpoint_or_a_link_is_refused(graph, item):
    with pytest.raises(ValueError, match="neither an endpoint nor a link"):
        capture_points(graph, [item])


@pytest.mark.parametrize("count", [0, 2_000_000])
def test_the_packet_cap_is_bounded(tmp_path, count):
    with pytest.raises(ValueError, match="max_packets"):
        with capture([], tmp_path, state=None, max_packets=count):
            pass


def test_run_captures_go_beside_the_runs_work_directories(graph, tmp_path):
    from fabric.experiment import CaptureSpec

    spec = CaptureSpec(tmp_path / "pcap", tmp_path / "out" / "work")
    assert spec.run_dir(tmp_path / "out" / "work" / "ecmp" / "0-stride") == (
        tmp_path / "pcap" / "ecmp" / "0-stride")
    assert spec.points(graph) == capture_points(graph, [sorted(fg.endpoints(graph))[0]])
    named = CaptureSpec(tmp_path, tmp_path, ("l0-s1", "l1h0"))
    assert [p.name for p in named.points(graph)] == ["l0-s1", "l1h0-l1"]
