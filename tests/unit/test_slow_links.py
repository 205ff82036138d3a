"""Link probes and the adaptive balancer's slow-link rules (gray failures)."""

from __future__ import annotations

import pytest

import topologies
from fabric.model import graph as fg
from fabric.routing.adaptive import (FORGET_RATIO, HOLD_INTERVALS,
                                     RELAX_RATIO, SLOW_ROUNDS, AdaptiveBalancer,
                                     AdaptiveConfigError, AdaptiveParams)
from fabric.routing.probes import (FRAME_BYTES, PROBE_ETHERTYPE, ProbeRounds, probe_frame,
                                   probe_seq)

LEAF, OTHER_LEAF, SPINE = "r0l0", "r0l1", "sp0"
DT = 0.1


# --- probe frames and rounds ---------------------------------------------------------------

def test_probe_frames_round_trip_and_nothing_else_parses():
    frame = probe_frame(123456789)
    assert len(frame) == FRAME_BYTES
    assert int.from_bytes(frame[12:14], "big") == PROBE_ETHERTYPE
    assert probe_seq(frame) == 123456789
    arp_like = frame[:12] + b"\x08\x06" + frame[14:]
    assert probe_seq(arp_like) is None
    assert probe_seq(frame[:20]) is None
    assert probe_seq(frame[:14] + b"x" * 46) is None


def probe_round(rounds, delays, now):
    """Send one probe per port in ``delays`` at ``now``; those with a delay come back."""
    seqs = {port: rounds.sent("s1", port, now) for port in delays}
    for port, delay in delays.items():
        if delay is not None:
            assert rounds.received(seqs[port], now + delay)
    return seqs


def test_a_round_subtracts_each_ports_smallest_delay_and_the_common_lateness():
    rounds = ProbeRounds()
    probe_round(rounds, {1: 0.003, 2: 0.010, 3: 0.005}, now=0.0)
    assert rounds.close_round(0.4) == {("s1", 1): 0.0, ("s1", 2): 0.0, ("s1", 3): 0.0}
    assert rounds.base_delay("s1", 2) == pytest.approx(0.010)
    # Port 1 queues 40 ms; every probe of the round is also 20 ms late.
    probe_round(rounds, {1: 0.063, 2: 0.030, 3: 0.025}, now=0.4)
    queueing = rounds.close_round(0.8)
    assert queueing[("s1", 1)] == pytest.approx(0.040)
    assert queueing[("s1", 2)] == pytest.approx(0.0) and queueing[("s1", 3)] == 0.0


def test_a_probe_counts_once_and_only_in_its_round():
    rounds = ProbeRounds()
    seqs = probe_round(rounds, {1: 0.003}, now=0.0)
    assert not rounds.received(seqs[1], 0.01)                 # a repeat
    assert not rounds.received(999, 0.01)                     # unknown
    late = rounds.sent("s1", 2, 0.0)
    rounds.close_round(0.4)
    assert not rounds.received(late, 0.5)                     # its round is closed
    assert rounds.close_round(0.8) == {}


def test_a_lost_probe_waited_as_long_as_it_was_out():
    rounds = ProbeRounds()
    probe_round(rounds, {1: 0.003, 2: 0.003, 3: 0.003}, now=0.0)
    rounds.close_round(0.4)
    probe_round(rounds, {1: None, 2: 0.003, 3: 0.003}, now=0.4)
    assert rounds.close_round(0.8)[("s1", 1)] == pytest.approx(0.4)


def test_forgetting_a_port_drops_its_base_and_its_probe_in_flight():
    rounds = ProbeRounds()
    probe_round(rounds, {1: 0.003, 2: 0.003}, now=0.0)
    rounds.close_round(0.4)
    probe_round(rounds, {1: None, 2: 0.003}, now=0.4)
    rounds.forget("s1", 1)
    assert rounds.base_delay("s1", 1) is None
    assert ("s1", 1) not in rounds.close_round(0.8)


# --- the balancer ----------------------------------------------------------------------------

@pytest.fixture
def graph():
    return topologies.build("rail-clos")


def uplinks(graph, leaf=LEAF):
    return tuple(sorted(fg.port(graph, leaf, n) for n in graph.neighbors(leaf)
                        if fg.is_switch(graph, n)))


class Port:
    """Drives one port's counters at a chosen share of its nominal rate."""

    def __init__(self, bal, switch, port):
        self.bal, self.switch, self.port, self.total = bal, switch, port, 0
        self.nominal = bal.capacity_bps(switch, port)
        self.packet_time = bal.params.packet_bits / self.nominal

    def send(self, now, share):
        self.total += int(share * self.nominal * DT / 8)
        self.bal.observe(self.switch, now, {self.port: (self.total, 0)})


def slow_port(graph, switch=LEAF, port=None, share=0.25):
    """A balancer whose ``port`` sends at ``share`` of nominal with a deep queue."""
    bal = AdaptiveBalancer(graph, 0.05, AdaptiveParams(ewma_alpha=1.0))
    port = port or uplinks(graph)[0]
    drive = Port(bal, switch, port)
    drive.send(0.0, 0.0)
    for i in range(1, SLOW_ROUNDS + 1):
        drive.send(i * DT, share)
        bal.observe_queueing(switch, port, 20 * drive.packet_time)
    return bal, drive


def test_a_slow_port_learns_its_capacity_after_consecutive_deep_probes(graph):
    bal = AdaptiveBalancer(graph, 0.05, AdaptiveParams(ewma_alpha=1.0))
    port = uplinks(graph)[0]
    drive = Port(bal, LEAF, port)
    drive.send(0.0, 0.0)
    drive.send(DT, 0.25)
    assert bal.utilisation(LEAF, port) == pytest.approx(0.25)
    bal.observe_queueing(LEAF, port, 20 * drive.packet_time)
    assert bal.learned_capacity_bps(LEAF, port) is None, "one deep probe is not enough"
    bal.observe_queueing(LEAF, port, 0.0)                    # the run of deep probes breaks
    for _ in range(SLOW_ROUNDS - 1):
        bal.observe_queueing(LEAF, port, 20 * drive.packet_time)
    assert bal.learned_capacity_bps(LEAF, port) is None
    bal.observe_queueing(LEAF, port, 20 * drive.packet_time)
    assert bal.learned_capacity_bps(LEAF, port) == pytest.approx(0.25 * drive.nominal, rel=0.01)
    assert bal.slow_ports() == {(LEAF, port): pytest.approx(0.25, rel=0.01)}
    drive.send(2 * DT, 0.25)
    assert bal.utilisation(LEAF, port) == pytest.approx(1.0, rel=0.01)


def test_a_busy_port_an_idle_port_or_a_shallow_queue_is_not_slow(graph):
    bal = AdaptiveBalancer(graph, 0.05, AdaptiveParams(ewma_alpha=1.0))
    busy, quiet, idle = uplinks(graph)[:3]
    drives = {p: Port(bal, LEAF, p) for p in (busy, quiet, idle)}
    for i in range(6):
        drives[busy].send(i * DT, 0.95)
        drives[quiet].send(i * DT, 0.1)
        drives[idle].send(i * DT, 0.005)
        bal.observe_queueing(LEAF, busy, 20 * drives[busy].packet_time)  # queue at line rate
        bal.observe_queueing(LEAF, quiet, 7 * drives[quiet].packet_time)  # below 8 packets
        bal.observe_queueing(LEAF, idle, 20 * drives[idle].packet_time)  # a late answer
    assert bal.slow_ports() == {}


def test_a_slow_uplink_gets_a_weight_in_proportion_to_its_capacity(graph):
    bal, drive = slow_port(graph)
    ups = uplinks(graph)
    assert bal.rebalance(LEAF, 1.0, [ups])
    weights = bal.weights(LEAF)[ups]
    assert weights[ups[0]] == 25
    assert all(weights[p] == 100 for p in ups[1:])
    for step in range(2, 40):                                # never doubles past its share
        bal.rebalance(LEAF, step * 1.0, [ups])
    assert bal.weights(LEAF)[ups][ups[0]] <= 25


def test_a_slow_port_is_forgotten_when_it_carries_more_or_its_link_changes(graph):
    bal, drive = slow_port(graph)
    drive.send((SLOW_ROUNDS + 1) * DT, FORGET_RATIO * 0.25 * 1.1)
    assert bal.learned_capacity_bps(drive.switch, drive.port) is None

    bal, drive = slow_port(graph)
    bal.forget(drive.switch, drive.port)
    assert bal.learned_capacity_bps(drive.switch, drive.port) is None


def test_a_slow_ports_estimate_grows_while_it_carries_it_without_a_queue(graph):
    bal, drive = slow_port(graph)
    learned = bal.learned_capacity_bps(LEAF, drive.port)
    now = (SLOW_ROUNDS + 1) * DT
    for _ in range(3 * HOLD_INTERVALS):     # carries a tenth of its estimate: no news
        drive.send(now, 0.025)
        bal.observe_queueing(LEAF, drive.port, 0.0)
        now += DT
    assert bal.learned_capacity_bps(LEAF, drive.port) == pytest.approx(learned)
    for _ in range(HOLD_INTERVALS - 1):     # carries its estimate with no queue
        drive.send(now, 0.25)
        bal.observe_queueing(LEAF, drive.port, 0.0)
        now += DT
    assert bal.learned_capacity_bps(LEAF, drive.port) == pytest.approx(learned)
    drive.send(now, 0.25)
    bal.observe_queueing(LEAF, drive.port, 0.0)
    assert bal.learned_capacity_bps(LEAF, drive.port) == pytest.approx(learned * RELAX_RATIO)


def test_a_slow_port_left_idle_is_forgotten(graph):
    bal, drive = slow_port(graph)
    now = (SLOW_ROUNDS + 1) * DT
    for i in range(HOLD_INTERVALS):
        assert bal.learned_capacity_bps(LEAF, drive.port) is not None, i
        drive.send(now, 0.0)
        bal.observe_queueing(LEAF, drive.port, 0.0)
        now += DT
    assert bal.learned_capacity_bps(LEAF, drive.port) is None


def test_a_slow_spine_downlink_steers_other_leaves_off_that_spine(graph):
    # The spine's link down to OTHER_LEAF is slow and full.
    down_port = fg.port(graph, SPINE, OTHER_LEAF)
    bal, drive = slow_port(graph, SPINE, down_port)
    drive.send((SLOW_ROUNDS + 1) * DT, 0.25)
    assert bal.utilisation(SPINE, down_port) == pytest.approx(1.0, rel=0.01)
    ups = uplinks(graph)
    to_spine = fg.port(graph, LEAF, SPINE)
    assert bal.path_utilisation(LEAF, to_spine) == pytest.approx(1.0, rel=0.01)
    assert bal.rebalance(LEAF, 1.0, [ups])
    weights = bal.weights(LEAF)[ups]
    assert weights[to_spine] < min(w for p, w in weights.items() if p != to_spine)
    # The leaf below the slow link does not avoid the spine for it: no other way down.
    other_to_spine = fg.port(graph, OTHER_LEAF, SPINE)
    assert bal.path_utilisation(OTHER_LEAF, other_to_spine) == 0.0


def test_healthy_ports_weigh_as_before(graph):
    bal = AdaptiveBalancer(graph, 0.05, AdaptiveParams(ewma_alpha=1.0))
    ups = uplinks(graph)
    drives = [Port(bal, LEAF, p) for p in ups]
    for i in range(5):
        for drive in drives:
            drive.send(i * DT, 0.5)
            bal.observe_queueing(LEAF, drive.port, 0.0)
        bal.rebalance(LEAF, i * DT, [ups])
    assert set(bal.weights(LEAF)[ups].values()) == {100}
    assert all(bal.path_utilisation(LEAF, p) == bal.utilisation(LEAF, p) for p in ups)


def test_slow_delay_must_be_positive():
    with pytest.raises(AdaptiveConfigError, match="slow_delay_pkts"):
        AdaptiveParams(slow_delay_pkts=0)
