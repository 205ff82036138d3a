"""Congestion control of the roce transport: hand-worked steps of swift, DCQCN and AIMD."""

from __future__ import annotations

import math

import pytest

from fabric.agent.roce.bth import DATA_OVERHEAD, Ack
from fabric.agent.roce.cc import (DcqcnControl, DcqcnParams, LossControl, SwiftControl,
                                  SwiftParams, make_control)
from fabric.agent.roce.send import CcConfig, SendQP

PKT = 0.004  # a packet time: 1458 bytes at ~3 Mbit/s


def test_swift_target_is_the_base_delay_plus_an_allowance_per_hop():
    swift = SwiftControl(PKT, 512, hops=4)
    assert math.isinf(swift.target())
    swift.on_ack(10, 1, 1.5 * PKT, now=0.0, rtt=0.02)
    # 2 packet times at the sender's NIC and 4 per link
    assert swift.target() == pytest.approx(1.5 * PKT + (2 + 4 * 4) * PKT)
    swift.on_ack(10, 1, 0.5 * PKT, now=0.0, rtt=0.02)  # the base only ever falls
    assert swift.target() == pytest.approx(0.5 * PKT + 18 * PKT)
    assert SwiftControl(PKT, 512, hops=2).target() == math.inf
    longer = SwiftControl(PKT, 512, hops=6)
    longer.on_ack(10, 1, 0.5 * PKT, now=0.0, rtt=0.02)
    assert longer.target() - swift.target() == pytest.approx(2 * 4 * PKT)


def test_swift_base_is_capped_so_a_flow_that_never_saw_an_empty_queue_is_not_favoured():
    late = SwiftControl(PKT, 512, hops=4)
    late.on_ack(10, 1, 30 * PKT, now=0.0, rtt=0.2)      # its first packet queued 30 deep
    early = SwiftControl(PKT, 512, hops=4)
    early.on_ack(10, 1, 2 * PKT, now=0.0, rtt=0.2)      # 0.5 packet times a link at most
    assert late.target() == pytest.approx(early.target())


def test_swift_grows_additively_below_target():
    swift = SwiftControl(PKT, 512)
    swift.slow_start = False
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


def test_a_swift_queue_pair_starts_with_a_base_round_trip_of_its_path():
    """Swift starts at line rate for one round trip of store-and-forward (a packet time
    per link, and the NIC's slack), more packets for longer paths; the other controls
    keep the configured window."""
    params = SwiftParams()
    for links in (2, 4, 6):
        qp = SendQP(0x100, 4096 * 100, 4096, CcConfig(init_cwnd=16.0),
                    SwiftControl(0.004, 512.0, links))
        assert qp.cwnd == params.endpoint_allowance + links < params.allowance(links)
    assert SendQP(0x100, 4096, 4096, CcConfig(init_cwnd=16.0), LossControl(512.0)).cwnd == 16.0


def _slow_starter(hops: int = 4) -> SwiftControl:
    swift = SwiftControl(PKT, 512, hops=hops)
    swift.on_ack(6.0, 0, 1 * PKT, now=0.0, rtt=0.02)  # base 1 packet time
    return swift


def test_swift_doubles_its_window_every_round_trip_up_to_the_allowance():
    swift, cwnd = _slow_starter(), 6.0
    cwnd = swift.on_ack(cwnd, 6, 2 * PKT, now=0.1, rtt=0.02)   # one round trip acked
    assert cwnd == 12.0 and swift.slow_start
    cwnd = swift.on_ack(cwnd, 12, 2 * PKT, now=0.2, rtt=0.02)
    assert cwnd == 24.0 and not swift.slow_start             # past 18: additive from here
    assert swift.on_ack(cwnd, 12, 2 * PKT, now=0.3, rtt=0.02) == pytest.approx(24.5)


def test_swift_slow_start_ends_at_half_the_allowed_queueing_or_a_loss():
    allowed = SwiftParams().allowance(4)                      # 18 packet times on 4 links
    swift = _slow_starter()
    cwnd = swift.on_ack(6.0, 2, (1 + allowed / 2 - 0.5) * PKT, now=0.1, rtt=0.02)
    assert cwnd == 8.0 and swift.slow_start                   # below half: still doubling
    cwnd = swift.on_ack(cwnd, 2, (1 + allowed / 2 + 0.5) * PKT, now=0.1, rtt=0.02)
    assert not swift.slow_start and cwnd == pytest.approx(8 + 2 / 8)
    assert swift.decreases == 0                               # below the target: no cut
    lossy = _slow_starter()
    assert lossy.on_loss(6.0) == 3.0 and not lossy.slow_start


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


# -- dcqcn -------------------------------------------------------------------------------
LINE = 1458 / PKT  # bytes/s: one full-size packet per packet time


def _dcqcn(**params) -> DcqcnControl:
    return DcqcnControl(PKT, LINE, 512, now=0.0, params=DcqcnParams(**params))


def test_dcqcn_starts_at_line_rate_and_a_cnp_cuts_by_half_alpha():
    d = _dcqcn()
    assert d.rate == LINE and d.alpha == 1.0
    d.on_cnp(0.0)
    assert d.target == LINE                      # Rt = the rate before the cut
    assert d.rate == pytest.approx(LINE / 2)     # Rc * (1 - alpha / 2), alpha = 1
    assert d.alpha == pytest.approx(1.0)         # (1 - g) * 1 + g
    d.on_cnp(0.0)
    assert d.rate == pytest.approx(LINE / 4)


def test_dcqcn_alpha_decays_per_period_without_cnps_and_sets_the_next_cut():
    d = _dcqcn(g=1 / 16, alpha_timer=10, increase_timer=1e9)
    d.on_cnp(0.0)
    d.advance(35 * PKT)  # three whole alpha periods and a half
    assert d.alpha == pytest.approx((15 / 16) ** 3)
    before = d.rate
    d.on_cnp(35 * PKT)
    assert d.rate == pytest.approx(before * (1 - (15 / 16) ** 3 / 2))


def test_dcqcn_fast_recovery_halves_the_gap_to_the_target_per_timer_event():
    d = _dcqcn(increase_timer=10, byte_counter=1e9)
    d.on_cnp(0.0)                      # Rc = LINE / 2, Rt = LINE
    d.advance(10.5 * PKT)
    assert d.rate == pytest.approx(0.75 * LINE)
    d.advance(30.5 * PKT)              # two more events
    assert d.rate == pytest.approx(LINE - LINE / 16)
    assert d.target == LINE            # fast recovery leaves the target alone


def test_dcqcn_additive_then_hyper_increase_after_fast_recovery():
    d = _dcqcn(increase_timer=10, byte_counter=1, fast_recovery=2, ai=0.01, hai=0.1)
    d.on_cnp(0.0)
    d.on_cnp(0.0)                      # Rt = LINE / 2, Rc = LINE / 4
    assert d.target == pytest.approx(LINE / 2)
    for _ in range(3):                 # byte counter: 1 packet each; events 1, 2 recover
        d.on_send(1458, 0.0)
    # the third byte event passed F while the timer has none: additive increase
    assert d.target == pytest.approx(LINE / 2 + 0.01 * LINE)
    d.advance(30.5 * PKT)              # timer events 1..3: the third also passes F
    # both counters past F (3 and 3): hyper increase by (min - F) * hai
    assert d.target == pytest.approx(LINE / 2 + 0.01 * LINE + 2 * 0.01 * LINE + 0.1 * LINE)
    assert d.rate <= d.target


def test_dcqcn_rate_stays_within_its_floor_and_line_rate():
    d = _dcqcn(min_rate=0.1)
    for _ in range(20):
        d.on_cnp(0.0)
    assert d.rate == pytest.approx(0.1 * LINE)
    d.advance(1e6)  # a long idle period: timer events are capped, the rate tops out
    assert d.rate == pytest.approx(LINE)
    assert d.target == LINE


def test_dcqcn_paces_by_wire_time_and_ignores_loss_and_acks():
    d = _dcqcn()
    assert d.on_send(1458, 0.0) == pytest.approx(PKT)
    d.on_cnp(0.0)
    assert d.on_send(1458, 0.0) == pytest.approx(2 * PKT)
    assert d.on_ack(3.0, 1, 0.1, 0.0, 0.01) == 512
    assert d.on_loss(7.0) == 7.0
    assert make_control("dcqcn", PKT, 512, line_rate=LINE, now=5.0).alpha_since == 5.0


def test_send_qp_with_dcqcn_paces_every_packet_and_catches_up_one_gap():
    qp = SendQP(1, 10 * 1400, 1400, CcConfig(), _dcqcn())
    wire = PKT * (1400 + DATA_OVERHEAD) / 1458   # seconds per data packet at line rate
    assert qp.can_send(0.0)
    qp.next_packet(0.0)
    assert not qp.can_send(0.0)
    assert qp.paced_until(0.0) == pytest.approx(wire)
    # woken late by less than a gap: the next departure keeps the schedule
    late = wire + 0.4 * wire
    assert qp.can_send(late)
    qp.next_packet(late)
    assert qp.next_send_at == pytest.approx(2 * wire)
    # woken later than a whole gap: the schedule restarts from now
    qp.next_packet(10 * wire)
    assert qp.next_send_at == pytest.approx(11 * wire)
    qp.on_cnp(10 * wire)
    assert qp.cnps_received == 1 and qp.control.rate == pytest.approx(LINE / 2)


def test_no_congestion_control_keeps_the_outstanding_limit():
    from fabric.agent.roce.cc import NoControl, make_control

    control = make_control("none", packet_time=0.005, max_cwnd=64)
    assert isinstance(control, NoControl)
    assert control.initial_window(16) == 64
    assert control.on_ack(10, 5, 0.02, 1.0, 0.01) == 64 and control.on_loss(64) == 64
