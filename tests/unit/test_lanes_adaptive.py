"""Lane configs, controller configs and the adaptive balancer's rules."""

from __future__ import annotations

import pytest

import topologies
from fabric.emulation.shaping import shape_lines
from fabric.model import graph as fg
from fabric.model.lanes import (THREE_LANES, LaneConfigError, lane_config_from_dict,
                                lane_config_to_dict)
from fabric.routing.adaptive import (AdaptiveBalancer, AdaptiveConfigError, AdaptiveParams,
                                     params_for_rate)
from fabric.routing.config import (ControllerConfigError, controller_config_from_dict,
                                   controller_config_to_dict)


def lanes(*items):
    return {"lanes": list(items)}


@pytest.mark.parametrize("config, words", [
    (lanes({"name": "a", "share": 0.7, "default": True}, {"name": "b", "share": 0.5}), "add up"),
    (lanes({"name": "a", "share": 0.5, "dscp": [10]},
           {"name": "b", "share": 0.2, "dscp": [10], "default": True}), "DSCP 10"),
    (lanes({"name": "a", "share": 0.5}), "default"),
    (lanes({"name": "a", "share": 0.3, "default": True},
           {"name": "b", "share": 0.3, "default": True}), "default"),
    (lanes({"name": "a", "share": 0.3, "dscp": [64], "default": True}), "DSCP 64"),
    (lanes({"name": "a", "default": True}), "share"),
    (lanes({"name": "a", "share": 0.5, "default": True, "colour": "red"}), "unknown keys"),
    ({"lanes": []}, "non-empty"),
])
def test_bad_lane_configs_are_rejected(config, words):
    with pytest.raises(LaneConfigError, match=words):
        lane_config_from_dict(config)


def test_three_lanes_map_service_levels_and_round_trip():
    assert THREE_LANES.queue_for_dscp(26) == 0
    assert THREE_LANES.queue_for_dscp(10) == 1
    assert THREE_LANES.queue_for_dscp(0) == THREE_LANES.queue_for_dscp(46) == 2
    assert lane_config_from_dict(lane_config_to_dict(THREE_LANES)) == THREE_LANES


def test_lane_shaping_has_a_class_and_filter_per_lane():
    lines = shape_lines("x-eth1", 20.0, 32, THREE_LANES)
    assert lines[0].endswith("htb default 3")  # unnamed DSCPs go to the default lane
    assert sum("pfifo_head_drop limit 32" in line for line in lines) == 3
    assert any("classid 1:1 htb rate 10000kbit ceil 20000kbit prio 0" in line for line in lines)
    assert any("dsfield 0x68 0xfc flowid 1:1" in line for line in lines)  # DSCP 26
    assert any("dsfield 0x28 0xfc flowid 1:2" in line for line in lines)  # DSCP 10


def test_controller_config_round_trip_and_errors():
    config = controller_config_from_dict({**lane_config_to_dict(THREE_LANES),
                                          "scale_mbps_per_gbps": 0.1,
                                          "adaptive": {"interval_s": 0.2}})
    assert config.lanes == THREE_LANES and config.adaptive.interval_s == 0.2
    assert controller_config_from_dict(controller_config_to_dict(config)) == config
    for bad, words in [({"bogus": 1}, "unknown"), ({"adaptive": {"speed": 1}}, "adaptive"),
                       ({"scale_mbps_per_gbps": 0}, "scale"),
                       ({"adaptive": {"min_weight": 1, "max_weight": 300}}, "1:255")]:
        with pytest.raises(ControllerConfigError, match=words):
            controller_config_from_dict(bad)


def test_adaptive_params_need_hysteresis():
    with pytest.raises(AdaptiveConfigError, match="hysteresis"):
        AdaptiveParams(hot_margin=0.1, cool_margin=0.1)


# --- the balancer -------------------------------------------------------------

LEAF = "r0l0"


@pytest.fixture
def balancer():
    graph = topologies.build("rail-clos")
    ups = tuple(sorted(fg.port(graph, LEAF, n) for n in graph.neighbors(LEAF)
                       if graph.nodes[n]["role"] == "spine"))
    bal = AdaptiveBalancer(graph, 0.05, AdaptiveParams(ewma_alpha=1.0))
    return bal, ups, bal.capacity_bps(LEAF, ups[0]) / 8  # bytes per second at line rate


def feed(bal, ups, rate, now, totals, utils, drops=None):
    for port, util in zip(ups, utils):
        totals[port] = totals.get(port, 0) + int(util * rate * 0.1)
    bal.observe(LEAF, now, {p: (totals[p], (drops or {}).get(p, 0)) for p in ups})
    return bal.rebalance(LEAF, now, [ups])


def test_hot_uplink_loses_weight_then_regains_it_after_the_hold(balancer):
    bal, ups, rate = balancer
    totals: dict[int, int] = {}
    feed(bal, ups, rate, 0.0, totals, [0, 0, 0, 0])
    assert feed(bal, ups, rate, 0.1, totals, [0.95, 0.2, 0.2, 0.2])
    assert bal.weights(LEAF)[ups][ups[0]] == 50
    feed(bal, ups, rate, 0.2, totals, [0.95, 0.2, 0.2, 0.2])
    assert bal.weights(LEAF)[ups][ups[0]] == 25
    assert all(bal.weights(LEAF)[ups][p] == 100 for p in ups[1:])
    now = 0.3
    feed(bal, ups, rate, now, totals, [0.2] * 4)  # cool, but inside the hold time
    assert bal.weights(LEAF)[ups][ups[0]] == 25
    while now < 2.0:
        now += 0.1
        feed(bal, ups, rate, now, totals, [0.2] * 4)
    assert bal.weights(LEAF)[ups][ups[0]] == 100


def test_hysteresis_band_keeps_weights(balancer):
    bal, ups, rate = balancer
    totals: dict[int, int] = {}
    feed(bal, ups, rate, 0.0, totals, [0, 0, 0, 0])
    feed(bal, ups, rate, 0.1, totals, [0.95, 0.2, 0.2, 0.2])
    # 0.1 above the mean: neither hot (0.15) nor cool (0.05): unchanged.
    for step in range(2, 20):
        feed(bal, ups, rate, step / 10, totals, [0.7, 0.567, 0.567, 0.567])
    assert bal.weights(LEAF)[ups][ups[0]] == 50


def test_drops_count_as_a_full_port(balancer):
    bal, ups, rate = balancer
    totals: dict[int, int] = {}
    feed(bal, ups, rate, 0.0, totals, [0, 0, 0, 0])
    feed(bal, ups, rate, 0.1, totals, [0.1, 0.1, 0.1, 0.1], drops={ups[2]: 5})
    assert bal.utilisation(LEAF, ups[2]) == 1.0
    assert bal.weights(LEAF)[ups][ups[2]] == 50


def test_adaptive_timing_scales_with_the_emulated_rate():
    slow, fast = params_for_rate(3.0), params_for_rate(12.0)
    assert slow.interval_s == pytest.approx(0.4) and slow.hold_s == pytest.approx(2.0)
    assert fast.interval_s == pytest.approx(0.1)
    assert params_for_rate(100.0).interval_s == 0.1          # never below the default
    with pytest.raises(AdaptiveConfigError):
        params_for_rate(0.0)
    # the interval spans packets: 4 kB packets at 8.3 Mbit/s take as long as 1.5 kB ones at 3
    jumbo = params_for_rate(3.0 * 4140 / 1500, packet_bits=4140 * 8)
    assert jumbo.interval_s == pytest.approx(slow.interval_s, abs=0.001)
    assert jumbo.packet_bits == 4140 * 8 and slow.packet_bits == 1500 * 8
