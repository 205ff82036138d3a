"""The RoCEv2-like transport: wire format (checked with scapy), the pure QP
logic under simulated reordering and loss, and real agents on loopback
(exact delivery, an impairing proxy, pacing)."""

from __future__ import annotations

import heapq
import random
import socket
import struct
import time
from pathlib import Path

import pytest
from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import IP, UDP
from scapy.packet import Raw

from fabric.agent.core.loop import EventLoop
from fabric.agent.core.records import RECV, SEND, TransferRecord
from fabric.agent.local.impair import Impairment, ImpairmentProxy
from fabric.agent.local.processes import loopback_hosts, run_plan, spare_address
from fabric.agent.roce import bth
from fabric.agent.roce.engine import RoceEngine
from fabric.agent.roce.receiver import CE, ECT0
from fabric.agent.roce.recv import RecvQP
from fabric.agent.roce.send import SendQP
from fabric.traffic.model import Plan, ScheduleError, Transfer, TransportSpec, source_ports


def _ip(hosts: dict[str, list[str]], name: str) -> str:
    return hosts[name][0].split("/")[0]


def _row(run, transfer_id: str, role: str) -> dict:
    assert run.result is not None, run.stderr
    return next(r for r in run.result["transfers"] if r["id"] == transfer_id
                and r["role"] == role)


# -- wire format ---------------------------------------------------------------------------
def test_engine_packets_decode_as_rocev2_with_scapy():
    """Capture what the engine really sends and decode IP/UDP/BTH with scapy."""
    hosts = loopback_hosts(["a", "b"])
    src, dst = _ip(hosts, "a"), _ip(hosts, "b")
    spec = TransportSpec(kind="roce", mtu_payload=256, rate_mbps=50)
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind((dst, bth.ROCE_PORT))
    receiver.settimeout(2)
    loop = EventLoop()
    engine = RoceEngine(loop, spec, [src], lambda r: None, lambda r, e: None)
    loop.add_service(engine.service)
    try:
        transfer = Transfer("t", "a", "b", 256 * 3 + 10, dscp=26)  # 4 packets, last padded
        record = TransferRecord(transfer, SEND, qpn=0x1234, src_ip=src, dst_ip=dst)
        engine.start_send(record, time.monotonic())
        grams = []
        while len(grams) < 4:
            loop.run_once(0.01)
            try:
                receiver.setblocking(False)
                grams.append(receiver.recvfrom(2048))
            except BlockingIOError:
                pass
    finally:
        engine.close()
        loop.close()
        receiver.close()
    decoded = []
    for payload, (_, sport) in grams:
        frame = IP(bytes(IP(src=src, dst=dst, tos=26 << 2) / UDP(sport=sport, dport=4791)
                         / Raw(payload)))
        assert BTH in frame, frame.summary()
        decoded.append(frame[BTH])
    assert [p.opcode for p in decoded] == [bth.SEND_FIRST, bth.SEND_MIDDLE, bth.SEND_MIDDLE,
                                          bth.SEND_LAST]
    assert [p.psn for p in decoded] == [0, 1, 2, 3]
    assert {p.dqpn for p in decoded} == {0x1234}
    assert {p.pkey for p in decoded} == {0xFFFF}
    assert [p.padcount for p in decoded] == [0, 0, 0, 2]   # 10 bytes padded to 12
    assert decoded[-1].ackreq == 1 and decoded[-1].solicited == 1
    assert all(p.icrc == 0 for p in decoded)
    assert [len(p[Raw].load) for p in decoded] == [256, 256, 256, 12]


def _tos_of(sock: socket.socket, timeout: float = 2.0) -> tuple[bytes, int]:
    """Receive one datagram and the TOS byte it carried (IP_RECVTOS)."""
    sock.settimeout(timeout)
    data, ancdata, _, _ = sock.recvmsg(4096, socket.CMSG_SPACE(4))
    tos = [c[2][0] for c in ancdata if c[0] == socket.IPPROTO_IP and c[1] == socket.IP_TOS]
    return data, tos[0] if tos else -1


def _tos_socket(ip: str, port: int) -> socket.socket:
    """A UDP socket bound to ``(ip, port)`` that reports each datagram's TOS byte."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    sock.bind((ip, port))
    return sock


def test_data_and_acks_carry_the_dscp():
    """Data leaves with IP_TOS = dscp << 2, and so do the ACKs of a shared listener."""
    hosts = loopback_hosts(["a", "b", "c"])
    a_ip, b_ip, c_ip = _ip(hosts, "a"), _ip(hosts, "b"), _ip(hosts, "c")
    peer = _tos_socket(b_ip, bth.ROCE_PORT)
    loop = EventLoop()
    engine = RoceEngine(loop, TransportSpec(kind="roce"), [a_ip], lambda r: None,
                        lambda r, e: None)
    loop.add_service(engine.service)
    try:
        engine.bind()
        # a sends to the peer socket: the data's TOS
        engine.start_send(TransferRecord(Transfer("s", "a", "b", 100, dscp=26), SEND,
                                         qpn=0x200, src_ip=a_ip, dst_ip=b_ip),
                          time.monotonic())
        loop.run_once(0.01)
        data, tos = _tos_of(peer)
        assert bth.parse_bth(data).dqpn == 0x200 and tos == 26 << 2
        # the peer sends a's listener a one-packet message: the ACK's TOS
        record = TransferRecord(Transfer("r", "c", "a", 100, dscp=46), "recv", qpn=0x201)
        engine.add_recv(record)
        sender = _tos_socket(c_ip, 0)
        sender.sendto(bth.data_packet(bth.SEND_ONLY, 0x201, 0, bytes(100), ackreq=True),
                      (a_ip, bth.ROCE_PORT))
        for _ in range(5):
            loop.run_once(0.01)
        ack, tos = _tos_of(sender)
        sender.close()
        assert bth.parse_ack(ack).cum == 1 and tos == 46 << 2
        assert record.bytes == 100 and record.end is not None
    finally:
        engine.close()
        loop.close()
        peer.close()


def test_dcqcn_data_is_ecn_capable_and_a_ce_mark_is_answered_with_one_cnp():
    """dcqcn: data leaves ECT(0); a CE-marked arrival makes the receiver send a CNP
    (RoCEv2 opcode 0x81, decoded by scapy), at most one per interval; a CNP cuts the
    sender's rate."""
    hosts = loopback_hosts(["a", "b", "c"])
    a_ip, b_ip, c_ip = _ip(hosts, "a"), _ip(hosts, "b"), _ip(hosts, "c")
    peer = _tos_socket(b_ip, bth.ROCE_PORT)
    sender = _tos_socket(c_ip, 0)
    loop = EventLoop()
    engine = RoceEngine(loop, TransportSpec(kind="roce", cc="dcqcn", rate_mbps=3), [a_ip],
                        lambda r: None, lambda r, e: None)
    loop.add_service(engine.service)
    try:
        engine.bind()
        engine.start_send(TransferRecord(Transfer("s", "a", "b", 100_000, dscp=26), SEND,
                                         qpn=0x200, src_ip=a_ip, dst_ip=b_ip),
                          time.monotonic())
        loop.run_once(0.01)
        peer.settimeout(2)
        data, ancdata, _, source = peer.recvmsg(4096, socket.CMSG_SPACE(4))
        assert bth.parse_bth(data).dqpn == 0x200 and ancdata[0][2][0] == 26 << 2 | ECT0
        # a CNP from the peer to the sending socket cuts the queue pair's rate
        peer.sendto(bth.cnp_packet(0x200), source)
        for _ in range(5):
            loop.run_once(0.01)
        qp = engine.senders[0x200].qp
        assert qp.cnps_received == 1 and qp.control.rate == pytest.approx(engine.line_rate / 2)
        # the receiver side: three CE-marked arrivals within one interval, one CNP
        record = TransferRecord(Transfer("r", "c", "a", 5 * 1400), "recv", qpn=0x201)
        engine.add_recv(record)
        for psn in range(3):
            sender.sendmsg([bth.data_packet(bth.SEND_FIRST if psn == 0 else bth.SEND_MIDDLE,
                                            0x201, psn, bytes(1400))],
                           [(socket.IPPROTO_IP, socket.IP_TOS, struct.pack("i", CE))], 0,
                           (a_ip, bth.ROCE_PORT))
        for _ in range(5):
            loop.run_once(0.01)
        replies = []
        sender.setblocking(False)
        while True:
            try:
                replies.append(sender.recv(2048))
            except BlockingIOError:
                break
        cnps = [r for r in replies if r[0] == bth.CNP]
        assert len(cnps) == 1
        frame = IP(bytes(IP(src=a_ip, dst=c_ip) / UDP(sport=4791, dport=4791) / Raw(cnps[0])))
        assert frame[BTH].opcode == bth.CNP and frame[BTH].dqpn == 0x201
        qp_recv = engine.receivers[0x201][1]
        assert (qp_recv.ce_packets, qp_recv.cnps_sent) == (3, 1)
    finally:
        engine.close()
        loop.close()
        peer.close()
        sender.close()


def test_delay_and_completion_are_measured_at_arrival_not_when_the_loop_reads():
    """A receiver that gets to its socket 150 ms late still reports the packet's own
    one-way delay in its ACK, and the arrival time as the completion."""
    hosts = loopback_hosts(["a", "b"])
    a_ip, b_ip = _ip(hosts, "a"), _ip(hosts, "b")
    loop = EventLoop()
    engine = RoceEngine(loop, TransportSpec(kind="roce"), [a_ip], lambda r: None,
                        lambda r, e: None)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.bind((b_ip, 0))
    sender.settimeout(2)
    try:
        engine.bind()
        record = TransferRecord(Transfer("r", "b", "a", 100), "recv", qpn=0x300)
        engine.add_recv(record)
        payload = bth.SEND_TIME.pack(time.monotonic_ns()) + bytes(92)
        sent_wall = time.time()
        sender.sendto(bth.data_packet(bth.SEND_ONLY, 0x300, 0, payload, ackreq=True),
                      (a_ip, bth.ROCE_PORT))
        time.sleep(0.15)  # the agent waits for a core
        loop.run_once(0.01)
        ack = bth.parse_ack(sender.recv(4096))
    finally:
        engine.close()
        loop.close()
        sender.close()
    assert ack.cum == 1
    assert 1 <= ack.owd_us < 50_000  # not the 150 ms the packet sat in the socket
    assert record.end is not None and record.end - sent_wall < 0.05


def test_the_nic_clock_stamps_a_burst_a_packet_time_apart(monkeypatch):
    """Packets handed over together leave the shaped NIC one after the other: each is
    stamped with its own departure, and an idle NIC sends at once (on a fake clock)."""
    from fabric.agent.roce import engine as roce
    from fabric.agent.roce.pacing import TokenBucket

    clock = [100.0]
    monkeypatch.setattr(roce.time, "monotonic", lambda: clock[0])
    pacer = roce._Pacer(TokenBucket(1e6, 1e4, 100.0))  # 1 MB/s: 1 ms per 1000 bytes
    assert [pacer.departs(1000) for _ in range(3)] == pytest.approx([100.0, 100.001, 100.002])
    clock[0] = 100.0025  # the burst's last packet is still leaving
    assert pacer.departs(1000) == pytest.approx(100.003)
    clock[0] = 100.010   # the NIC drained
    assert pacer.departs(1000) == pytest.approx(100.010)


def test_a_bucket_is_ready_when_its_balance_exceeds_the_reserve():
    from fabric.agent.roce.pacing import TokenBucket

    bucket = TokenBucket(1000.0, 5000.0, 0.0)  # 1000 bytes/s
    bucket.spend(5300)                          # balance -300
    assert bucket.ready_at(10.0) == pytest.approx(10.301)
    assert bucket.ready_at(10.0, reserve=1000) == pytest.approx(11.301)
    bucket.refill(2.0)                          # balance 1700
    assert bucket.ready_at(10.0, reserve=1000) == 10.0


@pytest.mark.parametrize("wake_packets", [1, 2, 3])
def test_a_pacer_out_of_tokens_wakes_when_wake_packets_may_go(wake_packets):
    """Each timer wake-up of the loop sends ``wake_packets`` packets (not one): the engine
    asks to be woken when the bucket holds that many, and then sends them."""
    from fabric.agent.roce.engine import RoceConfig

    hosts = loopback_hosts(["a", "b"])
    src, dst = _ip(hosts, "a"), _ip(hosts, "b")
    # 1 MB/s; no congestion control: only the tokens hold the sender back
    spec = TransportSpec(kind="roce", mtu_payload=1000, rate_mbps=8, cc="none")
    loop = EventLoop()
    engine = RoceEngine(loop, spec, [src], lambda r: None, lambda r, e: None,
                        RoceConfig(wake_packets=wake_packets))
    try:
        record = TransferRecord(Transfer("t", "a", "b", 200_000), SEND, qpn=0x100,
                                src_ip=src, dst_ip=dst)
        engine.start_send(record, 100.0)
        qp, bucket = engine.senders[0x100].qp, engine.pacers[src].bucket
        wake = engine.service(100.0)        # spends the full bucket
        assert bucket.tokens <= 0
        sent = qp.packets_sent
        bucket.refill(wake)
        wire = 1000 + bth.DATA_OVERHEAD     # the frame: Ethernet, IPv4, UDP, BTH, ICRC
        assert (wake_packets - 1) * wire < bucket.tokens <= (wake_packets - 1) * wire + 2
        engine.service(wake)
        assert qp.packets_sent - sent == wake_packets
    finally:
        engine.close()
        loop.close()


def _paced_sender(transfer_bytes: int):
    """An engine sending one transfer at 1 MB/s (1000-byte payloads), not yet serviced."""
    hosts = loopback_hosts(["a", "b"])
    src, dst = _ip(hosts, "a"), _ip(hosts, "b")
    loop = EventLoop()
    engine = RoceEngine(loop, TransportSpec(kind="roce", mtu_payload=1000, rate_mbps=8),
                        [src], lambda r: None, lambda r, e: None)
    record = TransferRecord(Transfer("t", "a", "b", transfer_bytes), SEND, qpn=0x100,
                            src_ip=src, dst_ip=dst)
    engine.start_send(record, time.monotonic())
    return loop, engine, engine.pacers[src]


@pytest.mark.parametrize("late_s", [0.0, 0.5])
def test_a_late_send_counts_the_wire_time_the_nic_lost(late_s):
    """The pacer plans its next send when its tokens run out; a service that comes
    later than planned, with the NIC's queue empty by then, lost the difference."""
    loop, engine, pacer = _paced_sender(2_000_000)
    try:
        planned = engine.service(time.monotonic())  # spends the bucket, plans the next
        assert pacer.planned == planned and pacer.busy_s > 0
        engine.service(planned + late_s)
        # the queue ran dry at the plan or a little after (the sends took real time)
        assert late_s / 2 <= pacer.late_s <= late_s
        assert engine.totals()["pacer_late_s"] == pytest.approx(pacer.late_s, abs=1e-6)
    finally:
        engine.close()
        loop.close()


def test_no_lateness_when_nothing_is_left_to_send():
    """A sender that has sent everything when the tokens run out has no planned send:
    however late the engine runs next, nothing is counted (the wait is the transport's)."""
    loop, engine, pacer = _paced_sender(1000)  # one packet
    try:
        now = time.monotonic()
        pacer.bucket.tokens = 1.0  # one packet takes the balance below zero
        engine.service(now)
        assert engine.senders[0x100].qp.packets_sent == 1 and pacer.planned is None
        engine.service(now + 1.0)
        assert pacer.late_s == 0.0
    finally:
        engine.close()
        loop.close()


def test_a_lossless_lane_keeps_its_timeout_above_all_its_path_can_hold():
    """Under flow control a paused packet waits in every switch of its path, each of
    which may hold its whole buffer in one queue: late, not lost."""
    loop = EventLoop()
    try:
        spec = TransportSpec(kind="roce", rate_mbps=10, buffer_packets=64,
                             lossless_dscps=(26,), lossless_hold_packets=1536)
        engine = RoceEngine(loop, spec, ["127.0.0.1"], lambda r: None, lambda r, e: None)
        pt = engine.packet_time
        assert engine.lossless_cc.min_rto_s > 1536 * pt
        assert engine.lossless_cc.max_rto_s >= 2.5 * engine.lossless_cc.min_rto_s - 1e-12
        assert engine.qp_cc.min_rto_s == pytest.approx(100 * pt)  # the lossy lanes' own
        engine.close()
    finally:
        loop.close()
    loop = EventLoop()
    engine = RoceEngine(loop, spec, ["127.0.0.1"], lambda r: None, lambda r, e: None)
    try:
        for qpn, dscp in ((0x300, 26), (0x301, 0)):
            engine.start_send(TransferRecord(Transfer(f"t{dscp}", "a", "b", 100, dscp=dscp),
                                             SEND, qpn=qpn, src_ip="127.0.0.1",
                                             dst_ip="127.0.0.1"), time.monotonic())
        # the lossless class's queue pair times out on the lossless floor, the other not
        assert engine.senders[0x300].qp.win.cc is engine.lossless_cc
        assert engine.senders[0x301].qp.win.cc is engine.qp_cc
    finally:
        engine.close()
        loop.close()
    plan = Plan([], {}, spec)
    assert Plan.from_json(plan.to_json()).transport == spec  # a tuple again
    with pytest.raises(ScheduleError):
        TransportSpec(kind="roce", lossless_dscps=(64,))
    with pytest.raises(ScheduleError):
        TransportSpec(kind="roce", lossless_hold_packets=-1)


def test_the_timeout_floor_outlasts_a_full_default_switch_buffer():
    """A packet queued behind a full buffer is late, not lost: the timeout must not
    resend the window for that (it did at 50 packet times under ECMP collisions)."""
    from fabric.emulation.shaping import DEFAULT_QUEUE_PKTS

    loop = EventLoop()
    try:
        for mbps in (3, 7.5, 100):
            engine = RoceEngine(loop, TransportSpec(kind="roce", rate_mbps=mbps), ["127.0.0.1"],
                                lambda r: None, lambda r, e: None)
            assert engine.qp_cc.min_rto_s > DEFAULT_QUEUE_PKTS * engine.packet_time
            engine.close()
        for buffer in (16, 64, 256, 1024):  # --queue-pkts: the floor follows the buffer
            spec = TransportSpec(kind="roce", rate_mbps=10, buffer_packets=buffer)
            engine = RoceEngine(loop, spec, ["127.0.0.1"], lambda r: None, lambda r, e: None)
            cc = engine.qp_cc
            assert cc.min_rto_s > buffer * engine.packet_time
            assert cc.min_rto_s >= 100 * engine.packet_time  # never below the default's
            assert cc.max_rto_s >= 2.5 * cc.min_rto_s - 1e-12
            engine.close()
    finally:
        loop.close()


def test_packets_nobody_acknowledges_are_resent_on_the_timeout():
    """The engine skips its service on wake-ups that changed nothing but the time: the
    loss timer of what it just sent must still be in the wake-up it asks for."""
    hosts = loopback_hosts(["a", "b"])
    src, dst = _ip(hosts, "a"), _ip(hosts, "b")
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind((dst, bth.ROCE_PORT))  # takes the packets, never answers
    loop = EventLoop()
    engine = RoceEngine(loop, TransportSpec(kind="roce", rate_mbps=100), [src],
                        lambda r: None, lambda r, e: None)
    loop.add_service(engine.service)
    try:
        record = TransferRecord(Transfer("t", "a", "b", 3000), SEND, qpn=0x100,
                                src_ip=src, dst_ip=dst)
        engine.start_send(record, time.monotonic())
        qp = engine.senders[0x100].qp
        rto_s = qp.rto
        end = time.monotonic() + 0.5
        while time.monotonic() < end and not qp.rto_count:
            loop.run_once(0.05)
        assert rto_s < 0.05  # 100 packet times at 100 Mbit/s: the loop had 10 timeouts' time
        assert qp.rto_count >= 1 and qp.retransmitted >= 1
    finally:
        engine.close()
        loop.close()
        sink.close()


def test_a_wake_quantum_below_one_packet_is_refused():
    from fabric.agent.roce.engine import RoceConfig

    loop = EventLoop()
    try:
        with pytest.raises(ValueError, match="wake_packets"):
            RoceEngine(loop, TransportSpec(kind="roce"), ["127.0.0.1"], lambda r: None,
                       lambda r, e: None, RoceConfig(wake_packets=0))
    finally:
        loop.close()


def test_arrival_reads_the_kernel_stamp_and_the_ce_mark():
    """Ancillary data as recvmsg returns it: a wall-clock stamp becomes monotonic time."""
    from fabric.agent.roce.receiver import SO_TIMESTAMPNS, _arrival

    stamp = struct.pack("qq", 1_000, 500)  # 1000 s + 500 ns, wall clock
    offset = 400 * 10**9                   # wall minus monotonic
    arrived, ce = _arrival([(socket.SOL_SOCKET, SO_TIMESTAMPNS, stamp),
                            (socket.IPPROTO_IP, socket.IP_TOS, bytes([CE]))], offset)
    assert arrived == 600 * 10**9 + 500 and ce
    arrived, ce = _arrival([(socket.IPPROTO_IP, socket.IP_TOS, bytes([ECT0]))], offset)
    assert not ce and abs(arrived - time.monotonic_ns()) < 10**8  # no stamp: now


def test_ack_decodes_with_scapy_and_roundtrips():
    bitmap = bytes([0b00000101, 0x80])
    raw = bth.ack_packet(dqpn=0x345, cum=10, msn=1, kind=bth.ACK_KIND, trigger_psn=25,
                         duplicates=3, out_of_order=7, bitmap=bitmap)
    frame = IP(bytes(IP(src="127.0.0.3", dst="127.0.0.2") / UDP(sport=4791, dport=4791)
                     / Raw(raw)))
    assert frame[BTH].opcode == bth.ACKNOWLEDGE and frame[BTH].dqpn == 0x345
    assert frame[BTH].psn == 9                       # IB: last PSN received in order
    assert frame[AETH].syndrome == bth.AETH_ACK and frame[AETH].msn == 1
    ack = bth.parse_ack(raw)
    assert (ack.dqpn, ack.cum, ack.msn, ack.kind, ack.trigger_psn, ack.duplicates,
            ack.out_of_order, ack.bitmap) == (0x345, 10, 1, 0, 25, 3, 7, bitmap)


def test_psn_unwrap_across_24_bits():
    assert bth.unwrap(5, 2**24 - 3) == 2**24 + 5
    assert bth.unwrap(2**24 - 2, 2**24 + 1) == 2**24 - 2
    assert bth.unwrap(100, 90) == 100


def test_sack_bitmap_from_receiver_acks_exactly_what_arrived():
    recv = RecvQP(0x100, 1400 * 40, 1400)
    send = SendQP(0x100, 1400 * 40, 1400)
    for _ in range(40):
        send.cwnd = 64
        send.next_packet(0.0)
    arrived = [0, 1, 2, 5, 9, 10, 17, 33, 39]
    for psn in arrived:
        recv.on_data(psn, 1400, False, 0.001)
    assert recv.cum == 3 and recv.out_of_order == 0
    send.on_ack(bth.parse_ack(recv.make_ack()), 0.002)
    assert [p for p in range(40) if send.state[p] == 3] == arrived
    assert send.bytes_acked == len(arrived) * 1400


# -- pure logic under simulated reordering and loss ----------------------------------------
def simulate(npackets: int, loss: float, reorder: float, max_extra_s: float, seed: int,
             ack_loss: float = 0.0, rate_pps: float = 2000.0, limit_s: float = 30.0
             ) -> tuple[SendQP, RecvQP]:
    """Run one QP pair over a channel that delays, reorders and drops (dt = 50 us)."""
    rng = random.Random(seed)
    mtu = 1000
    send, recv = SendQP(0x100, npackets * mtu, mtu), RecvQP(0x100, npackets * mtu, mtu)
    wire: list[tuple[float, int, str, object]] = []
    seq = 0
    now, next_slot, dt = 0.0, 0.0, 5e-5

    def put(kind: str, item: object, base: float, drop: float) -> None:
        nonlocal seq
        if rng.random() < drop:
            return
        delay = base + (rng.uniform(0, max_extra_s) if rng.random() < reorder else 0.0)
        seq += 1
        heapq.heappush(wire, (now + delay, seq, kind, item))

    while not send.done and now < limit_s:
        while wire and wire[0][0] <= now:
            _, _, kind, item = heapq.heappop(wire)
            if kind == "data":
                psn, ackreq = item  # type: ignore[misc]
                if recv.on_data(psn, mtu, ackreq, now):
                    put("ack", recv.make_ack(), 2e-4, ack_loss)
            else:
                send.on_ack(bth.parse_ack(item), now)  # type: ignore[arg-type]
        due = recv.ack_due()
        if due is not None and due <= now:
            put("ack", recv.make_ack(), 2e-4, ack_loss)
        deadline = send.deadline()
        if deadline is not None and deadline <= now:
            send.on_timer(now)
        if now >= next_slot and send.can_send(now):
            psn, _, ackreq, _ = send.next_packet(now)
            put("data", (psn, ackreq), 2e-4, loss)
            next_slot = now + 1 / rate_pps
        now += dt
    return send, recv


def test_heavy_reordering_without_loss_needs_no_retransmission():
    send, recv = simulate(600, loss=0.0, reorder=0.6, max_extra_s=0.002, seed=3)
    assert send.done and recv.bytes == 600 * 1000
    assert recv.out_of_order / recv.packets_received > 0.25     # spraying-like reordering
    assert send.retransmitted <= 0.02 * 600                      # no dup-ACK false alarms
    assert recv.duplicates == send.retransmitted                 # all of them spurious


def test_a_cut_whose_losses_were_all_reordering_is_undone():
    send = _twenty_in_flight()
    # PSN 10 arrives first: 0-9 look lost once they are old enough
    send.on_ack(bth.parse_ack(_ack_for(send, [10])), 0.050)
    assert send.lost_detected == 10 and send.cwnd < 9.0
    # then the originals of 0-9 arrive before any repair was sent
    send.on_ack(bth.parse_ack(_ack_for(send, list(range(11)))), 0.051)
    assert send.cwnd >= 16.0 and send.undone_cuts == 1


def test_a_cut_with_one_real_loss_stays():
    send = _twenty_in_flight()
    send.on_ack(bth.parse_ack(_ack_for(send, [10])), 0.050)
    # 1-9 were reordered, PSN 0 was really lost
    send.on_ack(bth.parse_ack(_ack_for(send, list(range(1, 11)))), 0.051)
    assert send.cwnd < 16.0 and send.undone_cuts == 0


def test_an_original_arriving_after_its_loss_mark_widens_the_reordering_allowance():
    """No duplicate reached the receiver (no repair had left), yet the sender knows
    its mark was early: it allows for more reordering from then on."""
    send = _twenty_in_flight()
    send.on_ack(bth.parse_ack(_ack_for(send, [10])), 0.050)
    before = send.loss_threshold()
    send.on_ack(bth.parse_ack(_ack_for(send, list(range(11)))), 0.051)
    assert send.reorder_mult == 2 and send.loss_threshold() > before
    assert send.retransmitted == 0


def test_repairs_of_real_losses_leave_the_reordering_allowance():
    send = _twenty_in_flight()
    send.on_ack(bth.parse_ack(_ack_for(send, [10])), 0.050)
    for _ in range(10):  # 0-9 were really lost: their repairs go out
        send.next_packet(0.050)
    send.on_ack(bth.parse_ack(_ack_for(send, list(range(11)))), 0.090)
    assert send.reorder_mult == 1 and send.retransmitted == 10


def _twenty_in_flight() -> SendQP:
    """A sender with PSNs 0-9 sent at t=0 and 10-19 at t=0.04 s."""
    send = SendQP(0x100, 100 * 1000, 1000)
    for i in range(20):
        send.next_packet(0.0 if i < 10 else 0.040)
    return send


def _ack_for(send: SendQP, arrived: list[int]) -> bytes:
    """The ACK a receiver that got exactly ``arrived`` sends."""
    recv = RecvQP(send.qpn, send.nbytes, send.mtu)
    for psn in arrived:
        recv.on_data(psn, send.length(psn), False, 0.0)
    return recv.make_ack()


@pytest.mark.parametrize("seed", [1, 2])
def test_loss_and_reordering_deliver_everything_once(seed):
    send, recv = simulate(800, loss=0.05, reorder=0.5, max_extra_s=0.003, seed=seed,
                          ack_loss=0.05)
    assert send.done and recv.complete
    assert recv.bytes == 800 * 1000 and send.bytes_acked == 800 * 1000
    assert send.retransmitted >= 20                         # ~40 packets were dropped
    assert recv.bad_packets == 0
    assert recv.packets_received == 800 + recv.duplicates   # each PSN delivered once
    assert 1 <= send.cwnd <= send.cc.max_cwnd


def test_receiver_gone_fails_after_repeated_timeouts():
    send = SendQP(0x100, 10_000, 1000)
    now = 0.0
    while not send.failed and now < 60:
        while send.can_send(now):
            send.next_packet(now)
        deadline = send.deadline()
        assert deadline is not None
        now = max(now, deadline)
        send.on_timer(now)
    assert send.failed and "timeouts" in send.failed
    assert send.rto_count == send.cc.max_timeouts + 1
    assert 5 < now < 15                                   # backed off to max_rto_s


# -- real agents on loopback ---------------------------------------------------------------
def test_roce_delivers_every_byte(tmp_path: Path):
    hosts = loopback_hosts(["a", "b"])
    transfers = [Transfer("t1", "a", "b", 1_000_001), Transfer("t2", "b", "a", 1)]
    plan = Plan(transfers, hosts, TransportSpec(kind="roce", rate_mbps=100),
                start_at=time.time() + 0.6, deadline_s=8)
    runs = run_plan(plan, tmp_path)
    assert {h: r.returncode for h, r in runs.items()} == {"a": 0, "b": 0}, \
        [r.stderr for r in runs.values()]
    for tid, size, src, dst in (("t1", 1_000_001, "a", "b"), ("t2", 1, "b", "a")):
        sent, got = _row(runs[src], tid, "send"), _row(runs[dst], tid, "recv")
        assert sent["bytes"] == got["bytes"] == size
        packets = -(-size // plan.transport.mtu_payload)
        assert got["packets"] == packets
        # every arrival is either new (delivered once) or a counted duplicate
        assert got["packets_received"] == packets + got["duplicates"] + got["bad_packets"]
        assert sent["packets_sent"] == packets + sent["retransmitted"]
        assert sent["end"] >= got["end"] >= got["start"] >= sent["start"] - 0.01
        assert sent["error"] is None and got["error"] is None
    result = runs["b"].result
    assert result["roce"]["bytes_received"] == 1_000_001
    assert result["roce"]["unknown_qp"] == 0 and result["errors"] == []


def test_a_senders_sprayed_transfers_in_one_class_share_their_entropy_ports():
    hosts = loopback_hosts(["a", "b", "c"])
    transfers = [Transfer("s1", "a", "b", 10), Transfer("s2", "a", "b", 10, after=("s1",)),
                 Transfer("s3", "a", "c", 10), Transfer("s4", "a", "b", 10, dscp=26)]
    sprayed = Plan(transfers, hosts, TransportSpec("roce", entropy="packet", entropy_ports=8))
    ports = source_ports(sprayed)["a"]
    assert len(ports[("roce", "s1")]) == 8
    # another peer too (its address is in the hash): the same set, as one NIC's
    assert ports[("roce", "s1")] == ports[("roce", "s2")] == ports[("roce", "s3")]
    # another traffic class: its own set
    assert not set(ports[("roce", "s1")]) & set(ports[("roce", "s4")])
    per_flow = source_ports(Plan(transfers, hosts, TransportSpec("roce")))["a"]
    # one port per connection: s1 and s2 are messages of one (same peer, class, channel)
    assert per_flow[("roce", "s1")] == per_flow[("roce", "s2")]
    assert len({per_flow[("roce", t.id)] for t in transfers}) == 3
    channel1 = Transfer("s5", "a", "b", 10, channel=1)
    other = source_ports(Plan(transfers + [channel1], hosts, TransportSpec("roce")))["a"]
    assert other[("roce", "s5")] != other[("roce", "s1")]


def test_too_many_entropy_ports_is_a_schedule_error():
    hosts = loopback_hosts(["a", "b"])  # one set per traffic class
    transfers = [Transfer(f"t{i}", "a", "b", 10, dscp=i) for i in range(30)]
    plan = Plan(transfers, hosts, TransportSpec("roce", entropy="packet", entropy_ports=1024))
    with pytest.raises(ScheduleError, match="entropy_ports"):
        source_ports(plan)


def test_sprayed_sockets_are_opened_before_the_start():
    loop = EventLoop()
    spec = TransportSpec("roce", rate_mbps=10, entropy="packet", entropy_ports=8)
    ports = tuple(range(21000, 21008))
    engine = RoceEngine(loop, spec, ["127.0.0.1"], lambda r: None, lambda r, m: None,
                        source_ports={("roce", "t1"): ports, ("roce", "t2"): ports})
    try:
        records = [TransferRecord(Transfer(tid, "a", "b", 1000), SEND, qpn=0x100 + i)
                   for i, tid in enumerate(("t1", "t2"))]
        for record in records:
            record.src_ip, record.dst_ip = "127.0.0.1", "127.0.0.2"
            engine.prepare_send(record)
        (pool,) = engine.pools.values()
        assert sorted(sock.getsockname()[1] for sock in pool) == list(ports)
        engine.start_send(records[1], time.monotonic())
        assert engine.senders[0x101].conn.sockets is pool
    finally:
        engine.close()


def test_a_sprayed_pool_serves_every_peer_unconnected():
    loop = EventLoop()
    spec = TransportSpec("roce", rate_mbps=10, entropy="packet", entropy_ports=4)
    ports = tuple(range(21100, 21104))
    engine = RoceEngine(loop, spec, ["127.0.0.1"], lambda r: None, lambda r, m: None,
                        source_ports={("roce", "t1"): ports, ("roce", "t2"): ports})
    try:
        records = [TransferRecord(Transfer(tid, "a", peer, 1000), SEND, qpn=0x100 + i)
                   for i, (tid, peer) in enumerate((("t1", "b"), ("t2", "c")))]
        for record, dst in zip(records, ("127.0.0.2", "127.0.0.3")):
            record.src_ip, record.dst_ip = "127.0.0.1", dst
            engine.start_send(record, time.monotonic())
        (pool,) = engine.pools.values()
        assert all(engine.senders[r.qpn].conn.sockets is pool for r in records)
        assert [engine.senders[r.qpn].conn.dest for r in records] == [("127.0.0.2", 4791),
                                                                 ("127.0.0.3", 4791)]
        for sock in pool:
            with pytest.raises(OSError):
                sock.getpeername()  # unconnected: each send names its receiver
    finally:
        engine.close()


@pytest.mark.parametrize("cc", ["swift", "loss"])
def test_a_receiver_echoes_ports_up_to_the_queueing_swift_allows_on_the_path(cc):
    """Recycling calls a path congested where swift would: 2 packet times plus 4 per
    link (whichever control runs), so a longer path is allowed more."""
    spec = TransportSpec("roce", rate_mbps=10, entropy="recycle", entropy_ports=8, cc=cc)
    engine = RoceEngine(EventLoop(), spec, ["127.0.0.1"], lambda r: None, lambda r, m: None)
    try:
        for qpn, links in ((0x100, 4), (0x101, 6), (0x102, 0)):
            engine.add_recv(TransferRecord(Transfer(f"t{qpn}", "a", "b", 1000, hops=links),
                                           RECV, qpn=qpn))
        allowed = {qpn: qp.echo_excess_us / 1e6 / engine.packet_time
                   for qpn, (_, qp) in engine.receivers.items()}
        assert allowed == pytest.approx({0x100: 18.0, 0x101: 26.0, 0x102: 10.0}, abs=1e-3)
    finally:
        engine.close()


def test_a_collective_of_many_steps_reuses_one_socket_pool(tmp_path: Path):
    hosts = loopback_hosts(["a", "b"])
    steps = [Transfer(f"s{i}", "a", "b", 20_000, after=(f"s{i - 1}",) if i else ())
             for i in range(6)]
    plan = Plan(steps, hosts, TransportSpec("roce", rate_mbps=100, entropy="packet",
                                            entropy_ports=16),
                start_at=time.time() + 0.6, deadline_s=8)
    runs = run_plan(plan, tmp_path)
    assert {h: r.returncode for h, r in runs.items()} == {"a": 0, "b": 0}, \
        [r.stderr for r in runs.values()]
    used = {tuple(_row(runs["a"], t.id, "send")["src_ports"]) for t in steps}
    assert len(used) == 1 and len(next(iter(used))) == 16
    # each step goes on in the pool where the previous one stopped, so that short
    # transfers do not all spray over the pool's first ports
    for before, after in zip(steps, steps[1:]):
        prev = _row(runs["a"], before.id, "send")
        assert _row(runs["a"], after.id, "send")["first_port"] == (
            prev["first_port"] + prev["packets_sent"]) % 16
    for t in steps:
        assert _row(runs["b"], t.id, "recv")["bytes"] == 20_000


# loss-based control through 5 % loss and half the packets held back 4 ms; swift, which
# reads a held packet's 4 ms (14 packet times on a one-link path) as a queue and slows
# down, through the loss alone
@pytest.mark.parametrize("entropy, cc, held", [("packet", "loss", 0.5), ("flow", "loss", 0.5),
                                               ("packet", "swift", 0.0),
                                               ("recycle", "loss", 0.5)])
def test_roce_through_lossy_reordering_proxy(tmp_path: Path, entropy: str, cc: str,
                                             held: float):
    hosts = loopback_hosts(["a", "b"])
    proxy_ip = spare_address(hosts)
    size = 500_000
    plan = Plan([Transfer("t1", "a", "b", size, dst_ip=proxy_ip)], hosts,
                TransportSpec(kind="roce", rate_mbps=40, entropy=entropy, entropy_ports=16,
                              cc=cc),
                start_at=time.time() + 0.6, deadline_s=8)
    with ImpairmentProxy(proxy_ip, _ip(hosts, "b"), forward=Impairment(0.05, held, 0.004),
                         seed=11) as proxy:
        runs = run_plan(plan, tmp_path)
    assert runs["a"].returncode == 0 and runs["b"].returncode == 0, runs["a"].result
    sent, got = _row(runs["a"], "t1", "send"), _row(runs["b"], "t1", "recv")
    assert proxy.stats.forward["dropped"] > 0 and (proxy.stats.forward["held"] > 0) == bool(held)
    assert sent["bytes"] == got["bytes"] == size                  # nothing lost, nothing twice
    assert sent["retransmitted"] > 0 and sent["lost_detected"] > 0
    assert got["out_of_order"] > 0
    # each PSN delivered once: the rest of the arrivals are counted duplicates
    assert got["packets_received"] == got["packets"] + got["duplicates"]
    assert sent["packets_sent"] == got["packets"] + sent["retransmitted"]
    # the planned, seeded source ports: one per packet in turn, or one for the flow
    assert sent["src_ports"] == list(source_ports(plan)["a"][("roce", "t1")])
    assert len(sent["src_ports"]) == (1 if entropy == "flow" else 16)
    # recycling: the ports of packets that were not held back are reused
    assert (sent["recycled_packets"] > 0) == (entropy == "recycle")


def test_dcqcn_slows_down_on_marks_and_still_delivers_every_byte(tmp_path: Path):
    """A fifth of the data forwarded CE-marked: every mark arrives, CNPs go back (at
    most one per interval), the sender cuts its rate and the transfer completes."""
    hosts = loopback_hosts(["a", "b"])
    proxy_ip = spare_address(hosts)
    size = 300_000
    plan = Plan([Transfer("t1", "a", "b", size, dst_ip=proxy_ip)], hosts,
                TransportSpec(kind="roce", rate_mbps=40, cc="dcqcn"),
                start_at=time.time() + 0.6, deadline_s=8)
    with ImpairmentProxy(proxy_ip, _ip(hosts, "b"), forward=Impairment(0, 0, 0, mark=0.2),
                         backward=Impairment(0, 0, 0), seed=3) as proxy:
        runs = run_plan(plan, tmp_path)
    assert runs["a"].returncode == 0 and runs["b"].returncode == 0, runs["a"].result
    sent, got = _row(runs["a"], "t1", "send"), _row(runs["b"], "t1", "recv")
    assert sent["bytes"] == got["bytes"] == size
    # every marked data packet is counted; the proxy may also have marked the CLOSE
    assert 0 <= proxy.stats.forward["marked"] - got["ce_packets"] <= 1
    assert got["ce_packets"] > 0
    assert 0 < got["cnps_sent"] < got["ce_packets"]          # one per interval at most
    # loopback loses none, but one answering a late copy may find the sender finished
    assert 0 < sent["cnps_received"] <= got["cnps_sent"]
    assert sent["cc"] == "dcqcn" and sent["rate_final_mbps"] < 40


def test_busy_planned_port_falls_back_with_a_warning(tmp_path: Path):
    hosts = loopback_hosts(["a", "b"])
    plan = Plan([Transfer("t1", "a", "b", 20_000)], hosts,
                TransportSpec(kind="roce", entropy="packet", entropy_ports=4),
                start_at=time.time() + 0.6, deadline_s=8, port_seed=5)
    planned = source_ports(plan)["a"][("roce", "t1")]
    squatter = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    squatter.bind((_ip(hosts, "a"), planned[2]))
    try:
        runs = run_plan(plan, tmp_path)
    finally:
        squatter.close()
    assert runs["a"].returncode == 0 and runs["b"].returncode == 0
    sent = _row(runs["a"], "t1", "send")
    assert sent["bytes"] == 20_000
    assert sent["src_ports"][:2] == list(planned[:2]) and sent["src_ports"][2] != planned[2]
    (warning,) = runs["a"].result["warnings"]
    assert str(planned[2]) in warning and "ephemeral" in warning


def test_roce_pacing_holds_20_mbps(tmp_path: Path):
    """Loopback is unshaped: only the token bucket limits the sender."""
    hosts = loopback_hosts(["a", "b"])
    rate, seconds = 20.0, 2.0
    size = int(rate * 1e6 / 8 * seconds * 1400 / (1400 + bth.DATA_OVERHEAD))
    plan = Plan([Transfer("t1", "a", "b", size)], hosts,
                TransportSpec(kind="roce", rate_mbps=rate, entropy="packet"),
                start_at=time.time() + 0.6, deadline_s=8)
    runs = run_plan(plan, tmp_path)
    assert runs["a"].returncode == 0, runs["a"].result
    sent = _row(runs["a"], "t1", "send")
    duration = sent["end"] - sent["start"]
    goodput = sent["bytes"] * 8 / duration / 1e6
    wire = goodput * (1400 + bth.DATA_OVERHEAD) / 1400
    assert 18.0 <= goodput <= 22.0, goodput
    assert 18.0 <= wire <= 22.0, wire
    assert 1.7 < duration < 2.5


def test_packet_sizes_follow_the_transport():
    # RoCE's path MTU plus IPv4, UDP, BTH and ICRC; TCP keeps 1500-byte packets
    assert TransportSpec("roce").packet_bytes == 4096 + 44
    assert TransportSpec("roce", mtu_payload=1024).packet_bytes == 1024 + 44
    assert TransportSpec("tcp").packet_bytes == 1500
    for bad in (255, 4097):
        with pytest.raises(ScheduleError, match="mtu_payload"):
            TransportSpec("roce", mtu_payload=bad)


def test_a_plan_with_smaller_packets_than_the_rates_were_planned_for_is_refused():
    # rates planned for 4 kB packets carry 2.8 times as many 1500-byte ones: beyond budget
    import topologies
    from types import SimpleNamespace

    from fabric.emulation.capacity import plan_rates
    from fabric.emulation.traffic import build_plan
    from fabric.model import graph as fg

    graph = topologies.build("leaf-spine")
    a, b = fg.endpoints(graph)[:2]
    roce = TransportSpec("roce")
    emu = SimpleNamespace(graph=graph, report=SimpleNamespace(
        rate_plan=plan_rates(graph, 3.0, packet_bytes=roce.packet_bytes)),
        options=SimpleNamespace(queue_pkts=128, flow_control=None))
    transfers = [Transfer("t", a, b, 10_000)]
    assert build_plan(emu, transfers, roce).transport.rate_mbps == 3.0
    assert build_plan(emu, transfers, roce).transport.buffer_packets == 128  # --queue-pkts
    assert build_plan(emu, transfers, roce).transport.lossless_dscps == ()
    from fabric.model.flowcontrol import FlowControl
    from fabric.model.presets import RDMA_LOSSLESS

    emu.options = SimpleNamespace(queue_pkts=128, flow_control=FlowControl(),
                                  lanes=RDMA_LOSSLESS)
    lossless = build_plan(emu, transfers, roce).transport
    assert lossless.lossless_dscps == (26,)
    # a and b share their leaf: that one switch's whole buffer
    leaf = next(iter(graph.neighbors(a)))
    assert lossless.lossless_hold_packets == 128 * graph.degree(leaf)
    with pytest.raises(ScheduleError, match="4140-byte packets"):
        build_plan(emu, transfers, TransportSpec("tcp"))
    with pytest.raises(ScheduleError, match="4140-byte packets"):
        build_plan(emu, transfers, TransportSpec("roce", mtu_payload=1024))


# --- one connection, many messages ------------------------------------------------

def _ack(qp: SendQP, cum: int, trigger: int) -> bth.Ack:
    return bth.Ack(qp.qpn, cum, 0, bth.ACK_KIND, trigger, 0, 0, b"")


def test_the_messages_of_a_connection_share_one_window():
    from fabric.agent.roce.send import CcConfig, Window

    window = Window(CcConfig(init_cwnd=4.0))
    first = SendQP(0x100, 3 * 1000, 1000, window=window)
    second = SendQP(0x101, 3 * 1000, 1000, window=window)
    for _ in range(3):
        first.next_packet(0.0)
    assert second.can_send(0.0)
    second.next_packet(0.0)
    # four packets in flight over both: the window is full for either message
    assert window.inflight == 4 and not second.can_send(0.0) and not first.can_send(0.0)
    first.on_ack(_ack(first, 3, 2), 0.01)
    assert window.inflight == 1 and second.can_send(0.01)
    assert first.cwnd is second.cwnd or first.cwnd == second.cwnd == window.cwnd


def test_a_later_message_finds_an_earlier_ones_lost_tail():
    """RACK over the connection: the tail of one message is declared lost once a packet of
    the next, sent after it, is delivered and the reordering allowance passed: no
    timeout (a message of a few packets has no later packet of its own)."""
    from fabric.agent.roce.send import LOST, CcConfig, Window

    cc = CcConfig(init_cwnd=16.0, min_rto_s=10.0, init_rto_s=10.0, max_rto_s=20.0,
                  min_reorder_s=0.001)
    window = Window(cc)
    first = SendQP(0x100, 2 * 1000, 1000, window=window)
    second = SendQP(0x101, 2 * 1000, 1000, window=window)
    first.next_packet(0.0)
    first.next_packet(0.0)        # its last packet: lost in the fabric
    second.next_packet(0.001)
    first.on_ack(_ack(first, 1, 0), 0.01)   # first's packet 0, an RTT sample
    second.on_ack(_ack(second, 1, 0), 0.011)  # second's packet 0, sent after first's tail
    deadline = first.deadline()
    assert deadline is not None and deadline < 1.0  # far below the 10 s timeout
    first.on_timer(deadline + 1e-6)
    assert first.state[1] == LOST and first.rto_count == 0 and first.can_send(deadline)


def test_alone_a_message_waits_for_the_timeout_for_its_tail():
    from fabric.agent.roce.send import CcConfig

    cc = CcConfig(init_cwnd=16.0, min_rto_s=10.0, init_rto_s=10.0, max_rto_s=20.0)
    qp = SendQP(0x100, 2 * 1000, 1000, cc)
    qp.next_packet(0.0)
    qp.next_packet(0.0)
    qp.on_ack(_ack(qp, 1, 0), 0.01)
    assert qp.deadline() == pytest.approx(10.0)


def test_a_connection_sends_its_oldest_message_first():
    from fabric.agent.roce.engine import _Connection, _Sender
    from fabric.agent.roce.entropy import EntropyChoice
    from fabric.agent.roce.send import CcConfig, Window

    window = Window(CcConfig(init_cwnd=8.0))
    conn = _Connection(window, [], None, EntropyChoice([1]), [1])
    old, new = (_Sender(TransferRecord(Transfer(f"t{i}", "a", "b", 2000), SEND),
                        SendQP(0x100 + i, 2000, 1000, window=window), conn) for i in range(2))
    conn.senders.extend([old, new])
    assert conn.ready(0.0) is old
    old.qp.next_packet(0.0)
    old.qp.next_packet(0.0)
    assert conn.ready(0.0) is new   # the old one has nothing left to send
    window.cwnd = 2.0
    assert conn.ready(0.0) is None  # both of its packets fill the shared window


def test_a_plan_is_void_once_every_message_of_the_nic_finished():
    """Tokens ran out with a packet still to send (a plan), then the message finished
    (failed here, as a deadline would): the next message starts a compute phase later,
    and that wait is not lateness."""
    loop, engine, pacer = _paced_sender(2_000_000)
    try:
        planned = engine.service(time.monotonic())
        assert pacer.planned == planned
        sender = engine.senders[0x100]
        sender.record.error = "gone"  # the runner failed it: it leaves its NIC's turns
        engine.service(planned)
        assert not pacer.active and pacer.planned is None
        record = TransferRecord(Transfer("u", "a", "b", 2_000_000), SEND, qpn=0x101,
                                src_ip=sender.record.src_ip, dst_ip=sender.record.dst_ip)
        engine.start_send(record, planned + 5.0)
        engine.service(planned + 5.0)
        assert pacer.late_s == 0.0
    finally:
        engine.close()
        loop.close()
