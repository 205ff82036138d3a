"""Congestion control of the roce transport: hand-worked steps of swift and AIMD."""

from __future__ import annotations

import math

import pytest

from fabric.agent.bth import Ack
from fabric.agent.cc import LossControl, SwiftControl, SwiftParams, make_control
from fabric.agent.roce_send import CcConfig, SendQP

PKT = 0.004  # a packet time: 1458 bytes at ~3 Mbit/s


def test_swift_target_is_the_base_delay_plus_an_allowance_per_hop():
    swift = SwiftControl(PKT, 512, hops=4)
    assert math.isinf(swift.target())
    swift.on_ack(10, 1, 1.5 * PKT, now=0.0, rtt=0.02)
    # 2 packet times at the sender's NIC and 2 per link
    assert swift.target() == pytest.approx(1.5 * PKT + (2 + 4 * 2) * PKT)
    swift.on_ack(10, 1, 0.5 * PKT, now=0.0, rtt=0.02)  # the base only ever falls
    assert swift.target() == pytest.approx(0.5 * PKT + 10 * PKT)
    assert SwiftControl(PKT, 512, hops=2).target() == math.inf
    longer = SwiftControl(PKT, 512, hops=6)
    longer.on_ack(10, 1, 0.5 * PKT, now=0.0, rtt=0.02)
    assert longer.target() - swift.target() == pytest.approx(2 * 2 * PKT)


def test_swift_base_is_capped_so_a_flow_that_never_saw_an_empty_queue_is_not_favoured():
    late = SwiftControl(PKT, 512, hops=4)
    late.on_ack(10, 1, 30 * PKT, now=0.0, rtt=0.2)      # its first packet queued 30 deep
    early = SwiftControl(PKT, 512, hops=4)
    early.on_ack(10, 1, 2 * PKT, now=0.0, rtt=0.2)      # 0.5 packet times a link at most
    assert late.target() == pytest.approx(early.target())


def test_swift_grows_additively_below_target():
    swift = SwiftControl(PKT, 512)
    cwnd = swift.on_ack(10.0, 5, 4 * PKT, now=0.0, rtt=0.02)
    assert cwnd == pytest.approx(10.5)  # +ai per RTT: 5 acked of a 10-packet window
    small = swift.on_ack(0.5, 1, 4 * PKT, now=0.0, rtt=0.02)
    assert small == pytest.approx(1.5)  # below one packet: +ai per ACK


def test_swift_cuts_in_proportion_to_the_excess_once_per_rtt():
    swift = SwiftControl(PKT, 512, hops=1, params=SwiftParams(
        beta=0.8, max_mdf=0.5, endpoint_allowance=1.0, hop_allowance=3.0, base_cap=4.0))
    swift.on_ack(10, 1, 4 * PKT, now=0.0, rtt=0.02)   # base 4 pkt times, target 8
    delay = 10 * PKT                                   # excess 2 of 10: cut 0.8 * 0.2
    cwnd = swift.on_ack(20.0, 1, delay, now=1.0, rtt=0.02)
    assert cwnd == pytest.approx(20 * (1 - 0.8 * 2 / 10))
    assert swift.on_ack(cwnd, 1, delay, now=1.01, rtt=0.02) == cwnd  # within the RTT
    huge = swift.on_ack(cwnd, 1, 100 * PKT, now=1.05, rtt=0.02)
    assert huge == pytest.approx(cwnd * 0.5)           # at most max_mdf at once


def test_swift_window_stays_within_bounds():
    swift = SwiftControl(PKT, 16, params=SwiftParams(min_cwnd=0.05))
    swift.on_ack(10, 1, 4 * PKT, now=0.0, rtt=0.02)
    assert swift.on_ack(16, 100, 4 * PKT, now=0.0, rtt=0.02) == 16
    cwnd = 0.06
    for i in range(10):
        cwnd = swift.on_ack(cwnd, 0, 1000 * PKT, now=1.0 + i, rtt=0.02)
    assert cwnd == pytest.approx(0.05)
    assert swift.on_loss(1.0) == pytest.approx(0.5)


def test_loss_control_is_aimd():
    aimd = LossControl(512)
    assert aimd.on_ack(10.0, 10, None, 0.0, 0.02) == pytest.approx(11.0)
    assert aimd.on_loss(10.0) == 5.0 and aimd.on_loss(1.5) == 1.0
    with pytest.raises(ValueError, match="swift"):
        make_control("nosuch", PKT, 512)


def test_a_window_below_one_packet_paces_the_queue_pair():
    swift = SwiftControl(PKT, 512, hops=4)
    swift.base_delay = 1 * PKT                    # target: 11 packet times
    qp = SendQP(0x100, 10 * 1400, 1400, CcConfig(), swift)
    qp.cwnd, qp.srtt = 0.25, 0.02
    assert qp.can_send(0.0)
    qp.next_packet(0.0)                           # the next may go rtt / cwnd later
    assert qp.next_send_at == pytest.approx(0.08)
    assert not qp.can_send(0.01)                  # one packet in flight at most
    late = Ack(0x100, 1, 0, 0, 0, 0, 0, b"", int(40 * PKT * 1e6))  # far above target
    qp.on_ack(late, 0.03)
    assert qp.cwnd < 0.25
    assert qp.paced_until(0.03) == pytest.approx(0.08)
    assert not qp.can_send(0.03) and qp.can_send(0.08)
