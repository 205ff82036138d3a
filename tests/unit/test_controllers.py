"""fabric's own os-ken apps, driven through the fake-fabric harness.

These are the acceptance tests of the policies: reachability on every
builder, ECMP path stickiness and spread, spraying, adaptive re-weighting,
lane isolation, link failure and recovery, switch reconnection, proxy ARP
and IPv6 dropping -- all against the real apps' OpenFlow output, with no
switch and no root.
"""

from __future__ import annotations

from collections import Counter

import pytest

pytest.importorskip("os_ken")
pytest.importorskip("scapy")

from os_ken.ofproto import ofproto_v1_5 as ofp  # noqa: E402
from os_ken.ofproto import ofproto_v1_5_parser as parser  # noqa: E402
from scapy.layers.inet import TCP  # noqa: E402
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402

import topologies  # noqa: E402
from controllers.adaptive import AdaptiveApp  # noqa: E402
from controllers.ecmp import EcmpApp  # noqa: E402
from controllers.spray import SprayApp  # noqa: E402
from controllers.static import StaticApp  # noqa: E402
from fabric.model import graph as fg  # noqa: E402
from fabric.model.lanes import DSCP_COLLECTIVE, DSCP_STORAGE, THREE_LANES  # noqa: E402
from fabric.routing.config import ControllerConfig  # noqa: E402
from fabric.routing.probes import probe_frame  # noqa: E402
from fabric.testing import FakeFabric  # noqa: E402

APPS = {"ecmp": EcmpApp, "spray": SprayApp, "adaptive": AdaptiveApp, "static": StaticApp}


def up(spec, policy="ecmp", config=None, **fabric_kw):
    graph = topologies.build(spec) if isinstance(spec, str) else spec
    fabric = FakeFabric(graph, **fabric_kw)
    app = fabric.connect(fabric.make_app(APPS[policy], config=config))
    assert app.ready == set(fg.switches(graph)), "every switch confirmed its state by barrier"
    return fabric, app


def all_pairs(fabric, **packet_kw):
    """``{(src, dst ip): bytes}``: every endpoint to every other endpoint's NICs."""
    return {(src, att.ip): bytes(fabric.packet(src, att.ip, **packet_kw))
            for src in fg.endpoints(fabric.graph)
            for att in fg.attachments(fabric.graph) if att.endpoint != src}


def trace_all(fabric, packets):
    """Trace every packet; assert each reaches the owner of its address."""
    owner = {att.ip: att.endpoint for att in fg.attachments(fabric.graph)}
    traces = {}
    for (src, ip), data in packets.items():
        trace = fabric.trace(data, src=src)
        assert trace.delivered == [owner[ip]], (src, ip, trace.drops, trace.hops)
        assert not trace.loop and not trace.drops
        traces[(src, ip)] = trace
    return traces


def switch_links(graph):
    return [(a, b) for a, b in graph.edges if fg.is_switch(graph, a) and fg.is_switch(graph, b)]


def clean(fabric, app):
    assert fabric.errors == [] and app.errors == []


# --- reachability ------------------------------------------------------------------------

@pytest.mark.parametrize("policy", sorted(APPS))
@pytest.mark.parametrize("builder", sorted(topologies.BUILDERS))
def test_every_pair_reachable(builder, policy):
    fabric, app = up(builder, policy)
    traces = trace_all(fabric, all_pairs(fabric))
    assert len(traces) == sum(len(fg.attachments(fabric.graph)) - len(
        fabric.graph.nodes[ep]["nics"]) for ep in fg.endpoints(fabric.graph))
    clean(fabric, app)


def test_multi_nic_storage_sends_from_the_nic_of_the_destination_zone():
    fabric, _ = up("two-zone")
    graph = fabric.graph
    for zone in (0, 1):
        dst = next(h for h in fg.nodes_with_role(graph, "host") if graph.nodes[h]["zone"] == zone)
        trace = fabric.trace(fabric.packet("st0", dst), src="st0")
        assert trace.delivered_to == dst
        assert graph.nodes[trace.hops[0].switch]["zone"] == zone
        assert all(fg.is_switch(graph, h.to) or h.to == dst for h in trace.hops)


@pytest.mark.parametrize("order", ["os-ken-first", "app-first"])
@pytest.mark.parametrize("policy", sorted(APPS))
def test_small_fabric_becomes_ready_in_either_handshake_order(policy, order):
    """Fewer messages than os-ken's 16-deep send queue: the barrier may beat os-ken's request."""
    fabric, app = up("leaf-spine,leaves=2,spines=1,hosts_per_leaf=2", policy, handshake=order)
    assert len(fabric.messages["l0"]) < 16
    trace_all(fabric, all_pairs(fabric))
    clean(fabric, app)


def test_link_down_before_connecting_is_learned_from_port_descriptions():
    graph = topologies.build("rail-clos")
    fabric = FakeFabric(graph)
    fabric.set_link("r0l0", "sp0", False)
    app = fabric.connect(fabric.make_app(EcmpApp))
    assert app.down_links() == {frozenset(("r0l0", "sp0"))}
    for trace in trace_all(fabric, all_pairs(fabric)).values():
        assert frozenset(("r0l0", "sp0")) not in trace.links
    clean(fabric, app)


# --- ECMP ----------------------------------------------------------------------------------

def test_ecmp_keeps_a_five_tuple_on_one_path():
    fabric, _ = up("rail-clos")
    pkt = fabric.packet("h0g0", "h4g0", "tcp", sport=43210)
    first = fabric.trace(pkt, src="h0g0").hops
    assert len(first) == 3
    for _ in range(20):
        assert fabric.trace(pkt, src="h0g0").hops == first


def test_ecmp_spreads_five_tuples_over_every_spine():
    fabric, app = up("rail-clos")
    assert fabric.graph.nodes["h0g0"]["rail"] == fabric.graph.nodes["h4g0"]["rail"] == 0
    spines = Counter()
    for sport in range(20000, 20200):
        trace = fabric.trace(fabric.packet("h0g0", "h4g0", "tcp", sport=sport), src="h0g0")
        assert trace.delivered_to == "h4g0"
        assert [h.switch for h in trace.hops][::2] == ["r0l0", "r0l1"]
        spines[trace.hops[1].switch] += 1
    assert set(spines) == {"sp0", "sp1", "sp2", "sp3"}
    assert min(spines.values()) >= 25  # 50 expected each
    clean(fabric, app)


def test_ecmp_leaf_holds_one_select_group_with_dp_hash():
    fabric, _ = up("rail-clos")
    (group,) = fabric.switches["r0l0"].groups.values()
    assert group.kind == "select" and group.method == "dp_hash"
    uplinks = {fg.port(fabric.graph, "r0l0", sp) for sp in ("sp0", "sp1", "sp2", "sp3")}
    assert set(group.weights()) == uplinks
    assert all(b.watch_port == b.ports[0] for b in group.buckets)


# --- spraying ------------------------------------------------------------------------------

def test_spraying_uses_every_uplink_of_the_source_leaf():
    fabric, app = up("rail-clos", "spray")
    uplinks = {fg.port(fabric.graph, "r0l0", sp) for sp in ("sp0", "sp1", "sp2", "sp3")}
    used = Counter()
    for sport in range(49152, 49152 + 64):  # one RoCEv2 flow, entropy per packet
        pkt = fabric.packet("h0g0", "h4g0", "roce", sport=sport, dscp=DSCP_COLLECTIVE)
        trace = fabric.trace(pkt, src="h0g0")
        assert trace.delivered_to == "h4g0"
        used[trace.hops[0].out_port] += 1
    assert set(used) == uplinks
    assert max(used.values()) <= 32
    clean(fabric, app)


def test_one_roce_source_port_stays_on_one_path():
    fabric, _ = up("rail-clos", "spray")
    pkt = bytes(fabric.packet("h0g0", "h4g0", "roce", sport=50000))
    assert len({tuple(fabric.trace(pkt, src="h0g0").hops) for _ in range(10)}) == 1


# --- static --------------------------------------------------------------------------------

def test_static_installs_no_group_and_a_flow_keeps_its_path_whatever_its_entropy():
    fabric, app = up("rail-clos", "static")
    assert all(not sw.groups for sw in fabric.switches.values())
    paths = {tuple(fabric.trace(fabric.packet("h0g0", "h4g0", "roce", sport=sport),
                                src="h0g0").links)
             for sport in range(49152, 49152 + 32)}
    assert len(paths) == 1   # destination routes: a sprayed source port moves nothing
    clean(fabric, app)


@pytest.mark.parametrize("spec", ["fat-tree", "rail-clos"])
def test_static_stride_shares_no_link_on_the_switches(spec):
    from fabric.traffic import synthetic
    from fabric.traffic.placement import rank_hosts

    fabric, app = up(spec, "static")
    graph = fabric.graph
    used = Counter()
    for t in synthetic.stride(graph, rank_hosts(graph), 1000):
        trace = fabric.trace(fabric.packet(t.src, fg.nearest_nic_ip(graph, t.src, t.dst),
                                           "roce"), src=t.src)
        assert trace.delivered_to == t.dst
        used.update((h.switch, h.to) for h in trace.hops)
    assert max(used.values()) == 1
    clean(fabric, app)


# --- adaptive ------------------------------------------------------------------------------

def _uplink_group(fabric, leaf):
    uplinks = {fg.port(fabric.graph, leaf, n) for n in fabric.graph.neighbors(leaf)
               if fg.is_switch(fabric.graph, n)}
    (group,) = [g for g in fabric.switches[leaf].groups.values() if set(g.weights()) == uplinks]
    return group


def test_adaptive_moves_weight_off_a_hot_uplink_and_back():
    config = ControllerConfig()
    fabric, app = up("rail-clos", "adaptive", config)
    leaf, graph = "r0l0", fabric.graph
    params = config.adaptive
    hot, *others = sorted(_uplink_group(fabric, leaf).weights())
    assert set(_uplink_group(fabric, leaf).weights().values()) == {params.max_weight}
    capacity_bps = graph.edges[leaf, "sp0"]["gbps"] * config.scale_mbps_per_gbps * 1e6
    dt = params.interval_s

    def load(t, hot_share, other_share):
        fabric.add_port_bytes(leaf, hot, hot_share * capacity_bps * dt / 8)
        for port in others:
            fabric.add_port_bytes(leaf, port, other_share * capacity_bps * dt / 8)
        fabric.poll_stats(app, now=t)
        return _uplink_group(fabric, leaf).weights()

    fabric.poll_stats(app, now=0.0)
    t, weights = 0.0, {}
    for _ in range(5):
        t += dt
        weights = load(t, 0.95, 0.2)
    assert weights[hot] < min(weights[p] for p in others)
    assert all(weights[p] == params.max_weight for p in others)
    assert weights[hot] >= params.min_weight

    # The hot uplink now takes a smaller share of new 5-tuples.
    share = Counter(fabric.trace(fabric.packet("h0g0", "h4g0", "tcp", sport=s), src="h0g0",
                                 count=False).hops[0].out_port for s in range(30000, 30400))
    assert share[hot] < min(share[p] for p in others)

    last_cut = t
    restored_at = None
    for i in range(40):  # equal load: hold, then double back up to the maximum
        t += dt
        weights = load(t, 0.3, 0.3)
        if i == 0:
            assert weights[hot] < params.max_weight, "hysteresis: no instant recovery"
        if weights[hot] == params.max_weight:
            restored_at = t
            break
    assert restored_at is not None and restored_at - last_cut > params.hold_s
    assert fabric.group_mods(leaf) > 1  # modified in place over OpenFlow 1.5
    clean(fabric, app)


def test_adaptive_probes_every_live_switch_link_and_times_their_return():
    fabric, app = up("rail-clos", "adaptive")
    graph = fabric.graph
    fabric.set_link("r0l0", "sp1", False)
    links = {(sw, fg.port(graph, sw, nbr)): nbr for sw in fg.switches(graph)
             for nbr in graph.neighbors(sw) if fg.is_switch(graph, nbr)}
    live = {key: nbr for key, nbr in links.items() if {key[0], nbr} != {"r0l0", "sp1"}}
    start = len(fabric.packet_outs)
    app.probe_round()
    outs = fabric.packet_outs[start:]
    assert sorted((sw, msg.actions[0].port) for sw, msg, _ in outs) == sorted(live)
    for sw, msg, trace in outs:
        # One hop, then the next switch hands it to the controller, ahead of any route.
        assert [h.to for h in trace.hops] == [live[(sw, msg.actions[0].port)]]
        (pin,) = trace.packet_ins
        assert pin.switch == live[(sw, msg.actions[0].port)] and not trace.delivered
        fabric.packet_in(pin.switch, pin.in_port, pin.data)
    assert app.probes_returned == len(live)
    assert all(app.probes.base_delay(*key) is not None for key in live)
    assert app.probes.base_delay("r0l0", fg.port(graph, "r0l0", "sp1")) is None
    app.probe_round()  # closes the round: nothing queued, nothing slow
    assert app.balancer.slow_ports() == {} and app.status()["slow_ports"] == []
    clean(fabric, app)


def test_only_adaptive_returns_probes_to_the_controller():
    for policy, expected in (("ecmp", False), ("adaptive", True)):
        fabric, app = up("rail-clos", policy)
        trace = fabric.trace(probe_frame(7), switch="sp0", in_port=fg.port(fabric.graph, "sp0",
                                                                             "r0l0"))
        assert trace.to_controller == expected, policy
        assert not trace.delivered and not trace.hops
        clean(fabric, app)


# --- virtual lanes --------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["ecmp", "adaptive"])
def test_each_service_level_stays_in_its_lane_on_every_hop(policy):
    fabric, app = up("rail-clos", policy, ControllerConfig(lanes=THREE_LANES))
    expected = {DSCP_COLLECTIVE: 0, DSCP_STORAGE: 1, 0: 2, 46: 2}
    assert THREE_LANES.default_queue == 2
    for dscp, queue in expected.items():
        for (src, ip), data in all_pairs(fabric, dscp=dscp).items():
            trace = fabric.trace(data, src=src)
            assert trace.delivered_to is not None
            assert [h.queue for h in trace.hops] == [queue] * len(trace.hops), (dscp, src, ip)
    clean(fabric, app)


def test_single_lane_sets_no_queue():
    fabric, _ = up("leaf-spine")
    trace = fabric.trace(fabric.packet("l0h0", "l3h0", dscp=DSCP_COLLECTIVE), src="l0h0")
    assert trace.hops and all(h.queue is None for h in trace.hops)


# --- failures -------------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["ecmp", "static"])   # static: as the subnet manager
@pytest.mark.parametrize("spec", ["rail-clos", "fat-tree,k=4"])
def test_any_single_link_down_is_routed_around_and_recovers(spec, policy):
    fabric, app = up(spec, policy)
    packets = all_pairs(fabric)
    before = {key: t.hops for key, t in trace_all(fabric, packets).items()}
    links = switch_links(fabric.graph)
    assert len(links) == (16 if spec == "rail-clos" else 32)
    for a, b in links:
        fabric.set_link(a, b, False)
        assert frozenset((a, b)) in app.down_links()
        for trace in trace_all(fabric, packets).values():
            assert frozenset((a, b)) not in trace.links, (a, b, trace.hops)
        fabric.set_link(a, b, True)
        assert not app.down_links()
        after = {key: t.hops for key, t in trace_all(fabric, packets).items()}
        assert after == before, f"paths differ after {a}-{b} came back"
    assert app.ready == set(fabric.switches)
    clean(fabric, app)


def test_watch_ports_protect_before_the_controller_reacts():
    """With the app disconnected from one leaf, its select group still skips a dead uplink."""
    fabric, _ = up("rail-clos")
    fabric.disconnect("r0l0")
    fabric.set_link("r0l0", "sp0", False)
    for sport in range(100):
        trace = fabric.trace(fabric.packet("h0g0", "h4g0", sport=sport), src="h0g0")
        assert trace.delivered_to == "h4g0" and trace.hops[0].to != "sp0"


def test_host_link_down_drops_only_that_host():
    fabric, app = up("leaf-spine")
    fabric.set_link("l0h0", "l0", False)
    assert fabric.trace(fabric.packet("l1h0", "l0h0"), src="l1h0").delivered_to is None
    assert fabric.trace(fabric.packet("l1h0", "l0h1"), src="l1h0").delivered_to == "l0h1"
    clean(fabric, app)


# --- reconnection ---------------------------------------------------------------------------

def _kinds(msgs):
    out = []
    for m in msgs:
        if isinstance(m, parser.OFPFlowMod):
            out.append("flow-delete-all" if (m.command, m.table_id) == (ofp.OFPFC_DELETE,
                                                                      ofp.OFPTT_ALL)
                       else f"flow-{m.command}")
        elif isinstance(m, parser.OFPGroupMod):
            out.append("group-delete-all" if (m.command, m.group_id) == (ofp.OFPGC_DELETE,
                                                                       ofp.OFPG_ALL)
                       else f"group-{m.command}")
        else:
            out.append(type(m).__name__)
    return out


@pytest.mark.parametrize("restart", [False, True])
def test_reconnecting_switch_gets_its_full_state_again(restart):
    fabric, app = up("rail-clos")
    sw = fabric.switches["r0l0"]
    flows, groups = sw.dump_flows(), sw.dump_groups()
    dp = fabric.datapath("r0l0")  # a stray entry the full state must remove
    dp.send_msg(parser.OFPFlowMod(dp, table_id=5, priority=1, match=parser.OFPMatch(),
                                  instructions=[]))
    sent_before = len(fabric.messages["r0l0"])
    fabric.reconnect("r0l0", restart=restart)
    kinds = _kinds(fabric.messages["r0l0"][sent_before:])
    n_groups, n_flows = len(groups), len(flows)
    assert kinds == (["flow-delete-all", "group-delete-all"]
                     + [f"group-{ofp.OFPGC_ADD}"] * n_groups
                     + [f"flow-{ofp.OFPFC_ADD}"] * n_flows
                     + ["OFPBarrierRequest", "OFPPortDescStatsRequest"])
    assert sw.dump_flows() == flows and sw.dump_groups() == groups
    assert "r0l0" in app.ready
    trace_all(fabric, {k: v for k, v in all_pairs(fabric).items() if k[0] == "h0g0"})
    clean(fabric, app)


# --- ARP and IPv6 ---------------------------------------------------------------------------

def test_arp_is_answered_from_the_graph():
    fabric, app = up("rail-clos")
    graph = fabric.graph
    for target in ("h5g1", "h1g0", "h7g0"):
        assert fabric.arp("h0g0", graph.nodes[target]["ip"]) == graph.nodes[target]["mac"]
    assert fabric.arp("h0g0", "10.9.9.9") is None
    assert fabric.arp("h0g0", "192.168.1.1") is None
    clean(fabric, app)


def test_arp_for_a_storage_nic_in_the_other_zone():
    fabric, _ = up("two-zone")
    nic = fabric.graph.nodes["st1"]["nics"][1]
    assert fabric.arp("z1h0", nic["ip"]) == nic["mac"]


def test_ipv6_is_dropped_at_the_first_switch():
    fabric, _ = up("rail-clos")
    pkt = (Ether(src=fabric.graph.nodes["h0g0"]["mac"], dst="33:33:00:00:00:01")
           / IPv6(src="fe80::1", dst="ff02::1") / TCP())
    trace = fabric.trace(pkt, src="h0g0")
    assert trace.hops == [] and trace.dropped_at == "r0l0" and not trace.to_controller
