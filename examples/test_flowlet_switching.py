"""Unit tests of the flowlet-switching example, on fake switches (no root, no Mininet).

Run them with ``pytest examples/test_flowlet_switching.py``. The fabric is a
2x2 leaf-spine: leaves l0, l1 (ports 1-2 hosts, 3 to s0, 4 to s1), spines
s0, s1; hosts l0h0 10.0.0.1, l0h1 10.0.0.2, l1h0 10.0.0.3, l1h1 10.0.0.4.
"""

from __future__ import annotations

import pytest

import topologies
from fabric.routing.config import ControllerConfig
from fabric.testing import FakeFabric
from flowlet_switching import FlowletChooser, FlowletSwitching, gap_seconds

UPLINKS = (3, 4)


@pytest.fixture
def fabric():
    return FakeFabric(topologies.build("leaf-spine,leaves=2,spines=2,hosts_per_leaf=2"))


@pytest.fixture
def app(fabric):
    # make_app hands the app its context (graph, rate scale), as the launcher does
    return fabric.connect(fabric.make_app(FlowletSwitching))


def udp(fabric, sport, src="l0h0", dst="l1h0"):
    return fabric.packet(src, dst, "udp", sport=sport, dport=4791)


def first_hop(fabric, packet, src="l0h0"):
    """The uplink the switch itself gives ``packet`` (None: it asks the controller)."""
    trace = fabric.trace(packet, src)
    return None if trace.packet_ins else trace.hops[0].out_port


def live_entries(fabric, switch="l0"):
    return sum(1 for f in fabric.switches[switch].flows if f.priority == 20)


def test_the_chooser_balances_flowlets_and_keeps_a_live_one():
    chooser = FlowletChooser()
    a, b, c = [("10.0.0.1", "10.0.0.3", 17, port, 4791) for port in (1, 2, 3)]
    pa = chooser.choose(1, a, [3, 4])
    pb = chooser.choose(1, b, [3, 4])
    assert {pa, pb} == {3, 4}                   # the second goes where the first is not
    assert chooser.choose(1, a, [3, 4]) == pa   # a live flowlet keeps its port
    assert not chooser.end(1, a, pb)            # a late removal from another port: no-op
    assert chooser.end(1, a, pa)
    assert chooser.choose(1, c, [3, 4]) == pa   # the freed port is the least loaded
    assert chooser.choose(1, a, [pb]) == pb     # only one port left: that one
    assert dict(chooser.live[1]) == {pa: 1, pb: 2}


def test_a_flow_of_acknowledgements_weighs_little_against_a_flow_of_data():
    # ACKs for l0h0's incoming data leave through the same uplinks: counted as a whole
    # flow, the ACK flowlet would make a and b tie on port 4 (they collide, for this hash)
    ack = ("10.0.0.3", "10.0.0.1", 17, 4791, 5000)
    a = ("10.0.0.1", "10.0.0.3", 17, 5000, 4791)
    b = ("10.0.0.2", "10.0.0.4", 17, 6000, 4791)
    chooser = FlowletChooser()
    chooser.choose(1, ack, [3, 4], weight=60 / 1538)
    assert (chooser.choose(1, a, [3, 4]), chooser.choose(1, b, [3, 4])) == (4, 3)
    assert chooser.end(1, ack, 3) and chooser.live[1][3] == pytest.approx(1.0)


def test_the_gap_is_whole_seconds_of_packet_times_at_the_emulated_rate():
    graph = topologies.build("leaf-spine")
    host_gbps = graph.edges["l0", "l0h0"]["gbps"]
    assert gap_seconds(graph, 3 / host_gbps) == 1          # 128 x 4.1 ms at 3 Mbit/s
    assert gap_seconds(graph, 0.1 / host_gbps) == 16       # 128 x 123 ms at 0.1 Mbit/s


def test_a_single_path_needs_no_controller_and_several_ask_it(fabric, app):
    same_leaf = fabric.trace(udp(fabric, 5000, dst="l0h1"), "l0h0")
    assert same_leaf.delivered == ["l0h1"] and not same_leaf.packet_ins
    other_leaf = fabric.trace(udp(fabric, 5000), "l0h0")
    assert not other_leaf.delivered and [p.switch for p in other_leaf.packet_ins] == ["l0"]
    # from the spine down there is one path: no controller
    assert fabric.trace(udp(fabric, 5000), switch="s0", in_port=1).delivered == ["l1h0"]


def test_a_new_flow_is_placed_and_then_forwarded_by_the_switch(fabric, app):
    exchange = fabric.send(udp(fabric, 5000), "l0h0")
    assert exchange.delivered == ["l1h0"] and exchange.packet_ins == 1
    port = exchange.packet_outs[0].hops[0].out_port
    assert port in UPLINKS and first_hop(fabric, udp(fabric, 5000)) == port
    assert live_entries(fabric) == 1


def test_concurrent_flows_spread_over_the_uplinks(fabric, app):
    for sport in range(5000, 5004):
        assert fabric.send(udp(fabric, sport), "l0h0").delivered == ["l1h0"]
    ports = [first_hop(fabric, udp(fabric, sport)) for sport in range(5000, 5004)]
    assert sorted(ports) == [3, 3, 4, 4]


def test_a_flowlet_ends_after_an_idle_gap_and_the_next_is_placed_by_the_load(fabric, app):
    fabric.send(udp(fabric, 5000), "l0h0")  # A
    fabric.send(udp(fabric, 5001), "l0h0")  # B
    assert app.gap_s == 1
    fabric.advance(0.6)
    first_hop(fabric, udp(fabric, 5001))    # B keeps sending, A is idle
    fabric.advance(0.6)
    assert first_hop(fabric, udp(fabric, 5000)) is None   # A's entry idled out...
    assert first_hop(fabric, udp(fabric, 5001)) in UPLINKS  # ...B's did not
    dpid = fabric.switches["l0"].dpid
    live = app.chooser.live[dpid]
    assert len(app.chooser.port_of) == live_entries(fabric) == 1  # the removal reached the app
    least = [p for p in UPLINKS if live[p] == min(live[q] for q in UPLINKS)]
    exchange = fabric.send(udp(fabric, 5000), "l0h0")  # A's next flowlet
    assert exchange.delivered == ["l1h0"] and exchange.packet_outs[0].hops[0].out_port in least


def test_a_failed_uplink_moves_its_flowlets_and_is_avoided_until_it_is_back(fabric, app):
    fabric.send(udp(fabric, 5000), "l0h0")
    port = first_hop(fabric, udp(fabric, 5000))
    spine = fabric.switches["l0"].ports[port]
    fabric.set_link("l0", spine, up=False)
    assert live_entries(fabric) == 0                      # deleted, so it asks again
    other = next(p for p in UPLINKS if p != port)
    for sport in (5000, 5001, 5002):
        fabric.send(udp(fabric, sport), "l0h0")
        assert first_hop(fabric, udp(fabric, sport)) == other
    fabric.set_link("l0", spine, up=True)
    fabric.send(udp(fabric, 5003), "l0h0")                # 0 flowlets there now
    assert first_hop(fabric, udp(fabric, 5003)) == port


def test_the_routes_follow_the_rate_scale_given_to_the_app(fabric):
    app = fabric.make_app(FlowletSwitching, config=ControllerConfig(scale_mbps_per_gbps=0.001))
    assert app.gap_s > 1
