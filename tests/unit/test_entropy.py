"""Which source port a sprayed packet takes: in turn, or recycled after an echo (REPS)."""

from __future__ import annotations

import pytest

from fabric.agent.roce import bth
from fabric.agent.roce.entropy import EntropyChoice
from fabric.agent.roce.recv import RecvQP
from fabric.traffic.model import ScheduleError, TransportSpec

PORTS = [5000, 5001, 5002, 5003]


def test_packet_spraying_takes_the_ports_in_turn_from_where_the_pool_stopped():
    choice = EntropyChoice(PORTS, start=2)
    assert [choice.next() for _ in range(6)] == [2, 3, 0, 1, 2, 3]
    choice.echoed([5000])  # not recycling: echoes change nothing
    assert choice.next() == 0 and not choice.recycling and choice.reused == 0


def test_recycling_reuses_each_echoed_port_once_then_goes_on_in_turn():
    choice = EntropyChoice(PORTS, recycle=True)
    assert [choice.next() for _ in range(2)] == [0, 1]
    choice.echoed([5001, 5001, 9999, 5003])  # a port not ours is ignored
    assert [choice.next() for _ in range(5)] == [1, 1, 3, 2, 3]
    assert choice.reused == 3 and choice.rot == 0


def test_a_port_that_is_never_echoed_falls_out_of_use():
    """Paths through port 5002 queue: after the first turn, the flow avoids it."""
    choice = EntropyChoice(PORTS, recycle=True)
    used, in_flight = [], []
    for _ in range(200):  # 8 packets in flight: each echo comes back 8 packets later
        index = choice.next()
        used.append(index)
        in_flight.append(index)
        if len(in_flight) > 8:
            arrived = in_flight.pop(0)
            if arrived != 2:
                choice.echoed([PORTS[arrived]])
    assert used.count(2) <= 3 and {0, 1, 3} <= set(used)
    assert choice.reused > 150


def test_the_receiver_echoes_the_ports_of_packets_that_did_not_queue():
    qp = RecvQP(0x101, 10 * 1000, 1000, ack_every=8, echo_excess_us=500)
    for psn, (owd, port) in enumerate([(3000, 5000), (2000, 5001), (2400, 5002),
                                       (2600, 5003), (2100, 0)]):
        qp.on_data(psn, 1000, False, 0.0, owd_us=owd, echo_port=port)
    # base 2000 us: 5000 came before the base was known (3000 - 3000 <= 500 then)
    ack = bth.parse_ack(qp.make_ack())
    assert ack.echo == (5000, 5001, 5002) and qp.inbound.base_owd_us == 2000
    assert bth.parse_ack(qp.make_ack()).echo == ()  # echoed once


def test_a_connections_messages_judge_queueing_by_the_base_all_of_them_saw():
    from fabric.agent.roce.recv import Inbound

    inbound = Inbound()
    first = RecvQP(0x101, 2 * 1000, 1000, echo_excess_us=500, inbound=inbound)
    first.on_data(0, 1000, False, 0.0, owd_us=2000, echo_port=5000)
    # every packet of the next message queued: alone it would take 4000 us for its base
    second = RecvQP(0x102, 2 * 1000, 1000, echo_excess_us=500, inbound=inbound)
    for psn in range(2):
        second.on_data(psn, 1000, False, 0.0, owd_us=4000, echo_port=5001 + psn)
    assert bth.parse_ack(second.make_ack()).echo == ()
    alone = RecvQP(0x103, 2 * 1000, 1000, echo_excess_us=500)
    for psn in range(2):
        alone.on_data(psn, 1000, False, 0.0, owd_us=4000, echo_port=5001 + psn)
    assert bth.parse_ack(alone.make_ack()).echo == (5001, 5002)


def test_an_ack_carries_the_mean_delay_of_the_packets_since_the_last_one():
    qp = RecvQP(0x101, 10 * 1000, 1000, ack_every=8)
    for psn, owd in enumerate([1000, 2000, 6000]):  # a sprayed flow: one hot path
        qp.on_data(psn, 1000, False, 0.0, owd_us=owd)
    assert bth.parse_ack(qp.make_ack()).owd_us == 3000
    qp.on_data(3, 1000, False, 0.0, owd_us=500)
    qp.on_data(4, 1000, False, 0.0, owd_us=0)  # not measured: left out of the mean
    assert bth.parse_ack(qp.make_ack()).owd_us == 500
    assert bth.parse_ack(qp.make_ack()).owd_us == 0  # nothing measured since


def test_echoes_roundtrip_on_the_wire_and_are_bounded():
    packet = bth.ack_packet(0x101, 7, 0, bth.ACK_KIND, 6, 0, 0, b"\x05", 1234, (5000, 65535))
    ack = bth.parse_ack(packet)
    assert ack.echo == (5000, 65535) and ack.bitmap == b"\x05" and ack.owd_us == 1234
    with pytest.raises(ValueError, match="truncated"):
        bth.parse_ack(packet[:-5])
    with pytest.raises(ValueError, match="echoed"):
        bth.ack_packet(0x101, 7, 0, bth.ACK_KIND, 6, 0, 0, echo=tuple(range(bth.MAX_ECHO + 1)))
    assert bth.parse_ack(bth.ack_packet(0x101, 7, 0, bth.ACK_KIND, 6, 0, 0)).echo == ()


def test_recycling_is_a_roce_spraying_mode():
    assert TransportSpec("roce", entropy="recycle").sprays
    assert not TransportSpec("roce").sprays
    with pytest.raises(ScheduleError, match="roce"):
        TransportSpec("tcp", entropy="recycle")
