"""Traffic metrics: collisions on synthetic paths, link flow counts, FCT, fairness."""

from __future__ import annotations

import math

import pytest

from fabric.traffic.metrics import (FlowSpan, balls_into_bins_expected_utilisation, collisions,
                                    fct_stats, goodput_mbps, jain_fairness, link_flow_counts,
                                    links_of, percentile, round_times)

UP = links_of(["h0", "l0", "s0", "l1", "h1"])  # h0 -> h1 through spine s0
OTHER = links_of(["h2", "l0", "s1", "l1", "h3"])  # shares no directed link with UP
BACK = links_of(["h1", "l1", "s0", "l0", "h0"])  # same cables, other direction


def test_links_of():
    assert UP == [("h0", "l0"), ("l0", "s0"), ("s0", "l1"), ("l1", "h1")]
    assert links_of(["h0"]) == []


def test_two_overlapping_flows_collide_once_per_link():
    shared = [("l0", "s0")]
    res = collisions({"a": (0.0, 4.0, [("h0", "l0")] + shared),
                      "b": (2.0, 6.0, [("h2", "l0")] + shared)})
    assert res.count == 1 and res.links == (("l0", "s0"),)
    assert res.episodes == 1 and res.max_flows_per_link == 2
    # in collision [2, 4) of active [0, 6)
    assert res.collision_seconds == pytest.approx(2.0)
    assert res.active_seconds == pytest.approx(6.0)
    assert res.share_of_time_in_collision == pytest.approx(1 / 3)


def test_whole_path_overlap_counts_every_link():
    res = collisions({"a": (0, 1, UP), "b": (0.5, 2, UP)})
    assert res.count == len(UP) and res.episodes == len(UP)
    assert res.share_of_time_in_collision == pytest.approx(0.5 / 2)


@pytest.mark.parametrize("flows", [
    {"a": (0, 1, UP), "b": (2, 3, UP)},      # disjoint in time
    {"a": (0, 1, UP), "b": (1, 2, UP)},      # back to back: half-open intervals
    {"a": (0, 5, UP), "b": (0, 5, OTHER)},   # concurrent on disjoint links
    {"a": (0, 5, UP), "b": (0, 5, BACK)},    # opposite directions of one cable
])
def test_no_collision(flows):
    res = collisions(flows)
    assert res.count == 0 and res.episodes == 0 and res.links == ()
    assert res.max_flows_per_link == 1 and res.share_of_time_in_collision == 0.0


def test_three_flows_max_three_and_episodes():
    res = collisions({"a": (0, 10, UP), "b": (2, 8, UP), "c": (4, 6, UP),
                      "d": (20, 22, UP[:1]), "e": (21, 23, UP[:1])})
    assert res.max_flows_per_link == 3
    assert res.count == len(UP)
    # [2, 8) on every link, plus [21, 22) on the first link
    assert res.episodes == len(UP) + 1
    assert res.collision_seconds == pytest.approx(6 + 1)
    assert res.active_seconds == pytest.approx(10 + 3)
    assert res.share_of_time_in_collision == pytest.approx(7 / 13)


def test_long_flow_filters():
    flows = {"big": FlowSpan(0, 4, tuple(UP), 10_000_000),
             "mouse": FlowSpan(1, 2, tuple(UP), 1_000)}
    assert collisions(flows).count == len(UP)
    assert collisions(flows, min_bytes=1_000_000).count == 0
    assert collisions(flows, min_seconds=2.0).count == 0
    with pytest.raises(ValueError):
        collisions({"a": (0, 1, UP)}, min_bytes=1)  # no byte count to filter on
    with pytest.raises(ValueError):
        collisions({"a": (2, 1, UP)})


def test_empty():
    res = collisions({})
    assert (res.count, res.max_flows_per_link, res.share_of_time_in_collision) == (0, 0, 0.0)


def test_link_flow_counts_step_function():
    counts = link_flow_counts({"a": (0, 4, UP), "b": (2, 6, UP[:2]), "c": (4, 5, UP[:1])})
    # a ends and c starts at 4: one sample for the instant, count unchanged
    assert counts[("h0", "l0")] == [(0, 1), (2, 2), (5, 1), (6, 0)]
    assert counts[("s0", "l1")] == [(0, 1), (4, 0)]
    assert ("h2", "l0") not in counts


def test_balls_into_bins():
    assert balls_into_bins_expected_utilisation(4) == pytest.approx(1 - (3 / 4) ** 4)
    assert balls_into_bins_expected_utilisation(1) == 1.0
    assert balls_into_bins_expected_utilisation(10**6) == pytest.approx(1 - 1 / math.e,
                                                                         rel=1e-5)
    with pytest.raises(ValueError):
        balls_into_bins_expected_utilisation(0)


def test_percentile_matches_linear_interpolation():
    assert percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    assert percentile([5, 1, 3], 0) == 1 and percentile([5, 1, 3], 100) == 5
    assert percentile(list(range(101)), 99) == pytest.approx(99)
    assert percentile([1, 2], 90) == pytest.approx(1.9)


def test_fct_stats_groups_rows_by_id():
    rows = [{"id": "a", "role": "send", "start": 0.0, "end": 1.0, "bytes": 10},
            {"id": "a", "role": "recv", "start": 0.1, "end": 1.5, "bytes": 10},
            {"id": "b", "role": "send", "start": 1.0, "end": 3.0, "bytes": 10},
            {"id": "c", "role": "send", "start": 0.0, "end": None, "bytes": 3}]
    s = fct_stats(rows)
    assert (s.count, s.unfinished) == (2, 1)
    assert s.min == pytest.approx(1.5) and s.max == pytest.approx(2.0)
    assert s.mean == pytest.approx(1.75) and s.p50 == pytest.approx(1.75)
    assert s.p99 == pytest.approx(1.5 + 0.99 * 0.5)
    empty = fct_stats([{"id": "x", "start": 0.0, "end": None}])
    assert empty.count == 0 and empty.unfinished == 1 and math.isnan(empty.p50)


def test_goodput_and_fairness():
    assert goodput_mbps(1_250_000, 1.0) == pytest.approx(10.0)
    assert goodput_mbps(64 * 1024, 0.005) == pytest.approx(64 * 1024 * 8 / 0.005 / 1e6)
    with pytest.raises(ValueError):
        goodput_mbps(1, 0)
    assert jain_fairness([5, 5, 5, 5]) == pytest.approx(1.0)
    assert jain_fairness([1, 0, 0, 0]) == pytest.approx(0.25)
    assert jain_fairness([1, 2]) == pytest.approx(9 / 10)
    assert jain_fairness([0, 0]) == 1.0
    with pytest.raises(ValueError):
        jain_fairness([])


def test_round_times_incomplete_round():
    rows = [{"id": "r0/req0", "start": 0.0, "end": 0.1},
            {"id": "r0/stripe0", "start": 0.1, "end": 0.5},
            {"id": "r1/req0", "start": 0.5, "end": 0.6},
            {"id": "r1/stripe0", "start": 0.6, "end": None}]
    out = round_times(rows, {0: ["r0/req0", "r0/stripe0"], 1: ["r1/req0", "r1/stripe0"],
                             2: ["r2/req0"]}, block_bytes=50_000)
    assert out[0].duration_s == pytest.approx(0.5)
    assert out[0].goodput_mbps == pytest.approx(50_000 * 8 / 0.5 / 1e6)
    assert out[1].start == 0.5 and out[1].end is None and out[1].goodput_mbps is None
    assert out[2].start is None and out[2].duration_s is None
