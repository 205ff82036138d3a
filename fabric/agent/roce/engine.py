"""The RoCEv2-like transport: UDP sockets, pacing and dispatch for many QPs.

One :class:`RoceEngine` per agent, driven by the agent's event loop. Every
transfer is one queue pair, numbered by the transfer's position in the plan
(:func:`qpn_for`), so both ends agree without a handshake.

Sockets:

- a listener on port 4791 of every own NIC receives data (and the sender's
  CLOSE) and sends ACKs back to the exact source address and port of the
  data packet, so that ACKs of a sprayed flow are sprayed too (the receiving
  side, :mod:`fabric.agent.roce.receiver`);
- a sender opens, per transfer, the UDP sockets on the source ports the
  plan assigns it (:func:`fabric.traffic.model.source_ports`): one
  (``entropy="flow"``: ECMP hashes the flow once) or ``entropy_ports``
  (``entropy="packet"``: the source port rotates every packet, so a 5-tuple
  hashing switch sprays the packets over its uplinks; ``"recycle"``: the
  next packet takes a port the receiver echoed as uncongested, and the next
  port of the rotation only when there is none, after REPS). Seeded ports make
  every hash outcome, hence every path, reproducible. The sockets are
  connected to the receiver; ACKs are read on all of them, and they are
  closed when the transfer completes.

With ``cc="dcqcn"`` data packets leave ECN-capable (ECT(0)), the listeners
read each arrival's TOS byte, and a CE-marked arrival makes the receiver send
a CNP back the way ACKs go (at most one per ``cnp_interval`` packet times and
queue pair); the sender's ACK sockets hand CNPs to the queue pair's rate
control.

What the engine reports is built by :mod:`fabric.agent.roce.report`.

Per-packet work stays small: a data packet is a 12-byte ``struct.pack_into``
into a preallocated zero buffer and one ``send``; an ACK carries a bitmap
built with C-level byte operations.
"""

from __future__ import annotations

import functools
import socket
import struct
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

from fabric.agent.core.engine import Engine
from fabric.agent.core.loop import EventLoop
from fabric.agent.core.records import TransferRecord
from fabric.agent.roce import bth, report
from fabric.agent.roce.cc import make_control
from fabric.agent.roce.entropy import EntropyChoice
from fabric.agent.roce.pacing import TokenBucket, bucket_for
from fabric.agent.roce.receiver import ECT0, WIRE_EXTRA, RoceReceiver
from fabric.agent.roce.send import CcConfig, SendQP, Window
from fabric.traffic.model import ROCE_PORT, TransportSpec

_BTH = struct.Struct("!BBHII")
_SEND_TIME = bth.SEND_TIME


def qpn_for(index: int) -> int:
    """QP number of the transfer at ``index`` in the plan (QP0/QP1 are reserved in IB)."""
    qpn = 0x100 + index
    if qpn > bth.PSN_MASK:
        raise ValueError("more transfers than 24-bit queue pair numbers")
    return qpn


# A plan made by the traffic runner always names the emulated host rate; one
# written by hand without a rate is paced at the default emulated rate.
UNPLANNED_RATE_MBPS = 20.0
# The loop wakes in whole milliseconds (epoll) and late by a fraction of one:
# a bucket shallower than a few wake-ups loses tokens at every late wake-up
# (measured: docs/benchmarks.md, "Cost per packet and wake-ups").
WAKE_SLACK_S = 0.003


@dataclass(frozen=True)
class PacketTimes:
    """The transport's timers, in packet times at the emulated host rate.

    The emulation runs links ~10^5 times slower than the fabric it models, so
    a timer in absolute time would behave like no timer of a real NIC: these
    scale with the rate, as an RDMA NIC's do with its line rate.
    """

    ack_delay: float = 4.0    # longest an arrival waits for its (coalesced) ACK
    # retransmission timeout floor (and first value): a full switch buffer's drain
    # (the plan's ``buffer_packets``) plus this, for the path's round trip, and at
    # least ``min_rto``: a real NIC's timeout (ms) is far above any queue's drain
    # (us); at 50 with 64-packet buffers, ECMP flows queued behind a full buffer
    # timed out and resent their window without a loss
    rto_above_buffer: float = 36.0
    min_rto: float = 100.0
    max_rto: float = 250.0    # at least 2.5 times the floor
    min_reorder: float = 12.0  # floor of the loss detector's reordering allowance
    burst: float = 2.0        # pacer bucket depth (at least 2 packets)
    cnp_interval: float = 20.0  # dcqcn: shortest gap between a queue pair's CNPs
    # after the sender's CLOSE, a receiver still counts what was in flight, so that
    # sent minus received is exactly what the fabric lost
    close_linger: float = 64.0

    def rto_packets(self, buffer_packets: int, hold_packets: int = 0) -> tuple[float, float]:
        """The retransmission timeout's floor and ceiling, packet times (pure): above a
        full switch queue's drain, and in a lossless lane above the drain of all that
        its path's buffers can hold (``hold_packets``): a paused packet is late, not
        lost, and a real NIC's timeout (ms) is far above both."""
        floor = max(self.min_rto, max(buffer_packets, hold_packets) + self.rto_above_buffer)
        return floor, max(self.max_rto, 2.5 * floor)


def _timed_cc(config: "RoceConfig", packet_time: float, min_rto: float,
              max_rto: float) -> CcConfig:
    """``config.cc`` with its timers in seconds: timeouts and reordering allowance."""
    return replace(config.cc, min_rto_s=min_rto * packet_time, init_rto_s=min_rto * packet_time,
                   max_rto_s=max_rto * packet_time,
                   min_reorder_s=config.timers.min_reorder * packet_time)


@dataclass(frozen=True)
class RoceConfig:
    """Tunables of the engine (the plan's TransportSpec sets rate, MTU, entropy, cc).

    The timers of ``cc`` are replaced by ``timers`` (packet times) for the
    plan's rate; ``ack_every`` coalesces ACKs as an RDMA NIC does.
    """

    cc: CcConfig = field(default_factory=CcConfig)
    timers: PacketTimes = field(default_factory=PacketTimes)
    ack_every: int = 8
    linger_s: float = 1.0          # keep answering a finished QP until its CLOSE or this
    socket_buffer: int = 1 << 20
    port: int = ROCE_PORT
    # a pacer waiting for tokens wakes when this many full packets may go, not one: each
    # wake-up of the loop costs more CPU than the packet it sends, and the NIC's own
    # shaped queue spaces the packets of a wake-up on the wire
    wake_packets: int = 2


class _Connection:
    """One queue pair between two NICs in a class and channel, as NCCL keeps them: its
    sockets, the window its messages share, the order of its source ports, and the
    messages it carries (oldest first: a connection sends in order)."""

    __slots__ = ("window", "sockets", "dest", "pacer", "entropy", "ports", "senders")

    def __init__(self, window: Window, sockets: list[socket.socket], pacer: "_Pacer",
                 entropy: EntropyChoice, ports: list[int],
                 dest: tuple[str, int] | None = None) -> None:
        self.window = window
        # connected to the receiver's (address, 4791), or (a sprayed pool shared by the
        # sender's peers) unconnected, sending to ``dest``
        self.sockets = sockets
        self.dest = dest
        self.pacer = pacer
        self.entropy = entropy
        self.ports = ports
        self.senders: deque[_Sender] = deque()

    def ready(self, now: float) -> "_Sender | None":
        """The oldest message the window lets send a packet now, if any."""
        if self.window.full:
            return None
        for sender in self.senders:
            if sender.qp.can_send(now):
                return sender
        return None

    def paced_until(self, now: float) -> float | None:
        """When pacing lets the oldest message with a packet waiting go on, if only
        pacing holds it."""
        for sender in self.senders:
            if sender.qp.has_packet():
                return sender.qp.paced_until(now)
        return None


class _Sender:
    """Runtime of one message (send QP) on its connection."""

    __slots__ = ("record", "qp", "conn", "recycled")

    def __init__(self, record: TransferRecord, qp: SendQP, conn: _Connection) -> None:
        self.record = record
        self.qp = qp
        self.conn = conn
        self.recycled = 0  # packets sent on a port the receiver echoed


class _Pacer:
    """A NIC's token bucket, the connections taking turns on it, and when the NIC is free.

    ``free_at`` follows the NIC's own shaped queue: a burst the pacer lets go in
    one wake-up leaves it a packet time apart, and each data packet is stamped
    with the time it starts to leave, not the time it was handed over, so its
    one-way delay is the fabric's alone.

    ``late_s`` is the wire time the NIC lost to the agent: when the pacer has
    spent its tokens it plans the next send (``planned``), and the NIC's queue
    runs dry about then; a send that comes later, with the queue empty, leaves
    the wire idle for the difference (the agent waited for a CPU). ``busy_s`` is
    the wire time of everything queued, so ``late_s / (busy_s + late_s)`` is the
    share of the NIC's sending time the emulation, not the transport, took.
    """

    __slots__ = ("bucket", "active", "free_at", "planned", "late_s", "busy_s", "held_s",
                 "state", "since")

    def __init__(self, bucket: TokenBucket) -> None:
        self.bucket = bucket
        self.active: deque[_Connection] = deque()
        self.free_at = 0.0  # monotonic
        self.planned: float | None = None  # monotonic
        self.late_s = 0.0
        self.busy_s = 0.0
        # time the NIC could have sent but its connections' windows were full ("window")
        # or it had messages open and nothing to send ("waiting": every packet sent
        # and not yet acknowledged, or their successors waiting for their inputs)
        self.held_s = {"window": 0.0, "waiting": 0.0}
        self.state: str | None = None
        self.since = 0.0

    def account(self, now: float, state: str | None) -> None:
        """The NIC is in ``state`` (a key of ``held_s``, or None: sending or idle)
        from ``now``."""
        if self.state is not None:
            self.held_s[self.state] += now - self.since
        self.state, self.since = state, now

    def departs(self, wire_bytes: int) -> float:
        """Queue ``wire_bytes`` on the NIC; return when they start to leave (monotonic)."""
        start = max(time.monotonic(), self.free_at)
        wire_s = wire_bytes / self.bucket.rate
        self.free_at = start + wire_s
        self.busy_s += wire_s
        return start

    def sending(self, now: float, planned: float | None) -> None:
        """Count the NIC's idle time since ``planned`` (the send the pacer had planned
        for then happens at ``now``); None: nothing was planned."""
        if planned is not None and now > planned and now > self.free_at:
            self.late_s += now - max(planned, self.free_at)

    def serve(self, now: float, wake: float | None, send: Callable[["_Sender", float], int],
              reserve: float, sent: set["_Sender"]) -> float | None:
        """Send what the tokens and the connections' windows allow, the connections
        taking turns.

        Parameters
        ----------
        now : float
            Monotonic time.
        wake : float or None
            When the engine runs next so far.
        send : callable
            ``(sender, now) -> wire bytes``: puts the sender's next packet on the wire.
        reserve : float
            Bytes the bucket must hold beyond a packet's before a wake-up pays
            (``wake_packets``).
        sent : set
            Collects the senders that sent (their loss timers may start).

        Returns
        -------
        float or None
            ``wake`` or, if earlier, when this NIC or one of its senders can go on.
        """
        active = self.active
        if not active:
            # nothing to send: a plan made while it had is void (the next message
            # may start a compute phase later; that wait is not the agent's)
            self.planned = None
            self.account(now, None)
            return wake
        bucket = self.bucket
        tokens = bucket.refill(now)
        # the send planned when the tokens ran out, if it is due (else it stays)
        planned = self.planned
        if planned is not None and now >= planned:
            self.planned = None
        else:
            planned = None
        idle, size = 0, len(active)
        while tokens > 0 and idle < size:
            conn = active[0]
            active.rotate(-1)
            sender = conn.ready(now)
            if sender is not None:
                idle = 0
                if planned is not None:
                    self.sending(now, planned)
                    planned = None
                tokens -= send(sender, now)
                sent.add(sender)
            else:
                idle += 1
                paced = conn.paced_until(now)
                if paced is not None and (wake is None or paced < wake):
                    wake = paced
        bucket.tokens = tokens
        self.account(now, None if tokens <= 0 else self.held())
        if tokens <= 0:
            ready = bucket.ready_at(now, reserve)
            # a plan only when the tokens, not the windows, hold the senders back: a
            # send that waits for an ACK is the transport's, however late it comes
            if any(conn.ready(ready) for conn in active):
                self.planned = ready
            if wake is None or ready < wake:
                wake = ready
        return wake

    def held(self) -> str:
        """Why the NIC, with tokens left, sent nothing more (a key of ``held_s``)."""
        for conn in self.active:
            if conn.window.full and any(s.qp.has_packet() for s in conn.senders):
                return "window"
        return "waiting"


class RoceEngine(Engine):
    """All RoCE queue pairs of one agent.

    Parameters
    ----------
    loop : EventLoop
        The agent's loop (sockets are registered on it).
    spec : TransportSpec
        Rate, MTU payload and entropy from the plan.
    addresses : list of str
        Own NIC addresses (listeners bind on each).
    on_done, on_fail : callable
        Called with the record when a transfer side completes or fails.
    config : RoceConfig
        Engine tunables.
    source_ports : mapping, optional
        This host's part of :func:`fabric.traffic.model.source_ports`:
        ``("roce", transfer id) -> ports``. Missing: ephemeral ports.
    open_socket : callable, optional
        How sockets are opened (see :class:`~fabric.agent.core.engine.Engine`).
    """

    def __init__(self, loop: EventLoop, spec: TransportSpec, addresses: list[str],
                 on_done: Callable[[TransferRecord], None],
                 on_fail: Callable[[TransferRecord, str], None],
                 config: RoceConfig = RoceConfig(),
                 source_ports: Mapping[tuple, tuple[int, ...]] | None = None,
                 open_socket: Callable[[int, int], socket.socket] = socket.socket) -> None:
        super().__init__(loop, spec, addresses, on_done, on_fail, config, source_ports,
                         open_socket)
        self._scale_to_rate(spec, config)
        self.pacers: dict[str, _Pacer] = {}
        self.senders: dict[int, _Sender] = {}
        self._active: dict[int, _Sender] = {}  # senders not yet finished (timers to run)
        self.receiver = RoceReceiver(loop, spec, config, self.packet_time, self.ack_delay_s,
                                     self.ecn, self._pacer, on_done)
        self.receivers = self.receiver.receivers  # qpn -> (record, receive QP)
        # what :meth:`service` last asked for, and whether anything it depends on changed
        # since other than time (an ACK, a new transfer): a wake-up for a data packet
        # alone then skips it, which on a loaded machine costs tens of us (cold caches)
        self._due: float | None = None
        self._dirty = True
        self._own: set[socket.socket] = set()  # every socket we opened, until closed
        # per-packet entropy: (src, dscp, ports) -> sockets shared by the connections of
        # one class, and where in a pool the next connection starts: starting every one
        # at the pool's first port would spray them all in step over the same ports
        self.pools: dict[tuple, list[socket.socket]] = {}
        self._pool_next: dict[int, int] = {}
        # id(pool) -> its ports and their indices, taken once: every connection would
        # otherwise ask the kernel for hundreds of socket names
        self._pool_ports: dict[int, tuple[list[int], dict[int, int]]] = {}
        # (src, dst, dscp, channel) -> the connection: a transfer goes on with the window,
        # delay estimates, RTT and port order its connection has, not from scratch
        self.connections: dict[tuple, _Connection] = {}
        # the send buffer of the largest data packet, made once: the header is rewritten
        # per packet, payload and ICRC stay zero; and the buffer ACKs are read into
        self._tx = bytearray(bth.BTH_LEN + spec.mtu_payload + 3 + bth.ICRC_LEN)
        self._txview = memoryview(self._tx)
        self._rx = bytearray(65536)
        self._rxview = memoryview(self._rx)
        self.bad_packets = 0
        self.send_errors = 0
        self.icmp_errors = 0

    def _scale_to_rate(self, spec: TransportSpec, config: RoceConfig) -> None:
        """Set the packet time, line rate and the timers in seconds at the plan's rate."""
        rate = spec.rate_mbps or UNPLANNED_RATE_MBPS
        # one full-size data packet's time on the wire at the emulated host rate
        self.packet_time = (spec.mtu_payload + bth.DATA_OVERHEAD) * 8 / (rate * 1e6)
        self.line_rate = rate * 1e6 / 8  # bytes/s, counted as the pacer counts them
        self.ecn = spec.cc == "dcqcn"
        timers = config.timers
        pt = self.packet_time
        self.qp_cc = _timed_cc(config, pt, *timers.rto_packets(spec.buffer_packets))
        # a queue pair in a lossless lane: its path's buffers may hold a packet longer
        self.lossless_cc = _timed_cc(config, pt, *timers.rto_packets(
            spec.buffer_packets, spec.lossless_hold_packets))
        self.ack_delay_s = timers.ack_delay * self.packet_time
        if config.wake_packets < 1:
            raise ValueError(f"wake_packets must be at least 1, got {config.wake_packets}")
        # a full-size data packet as the pacer charges it (DATA_OVERHEAD has the
        # Ethernet, IPv4 and UDP headers already)
        self._wire_packet = spec.mtu_payload + bth.DATA_OVERHEAD
        self._wake_reserve = (config.wake_packets - 1) * self._wire_packet

    # -- setup -------------------------------------------------------------------------
    def _udp_socket(self, tos: int) -> socket.socket:
        sock = self.open_socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._own.add(sock)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.config.socket_buffer)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.config.socket_buffer)
        if tos:
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
        sock.setblocking(False)
        return sock

    def bind(self) -> None:
        """Bind a listener on port 4791 of every own NIC.

        Raises
        ------
        OSError
            If a port is busy (another agent or a stale run holds it).
        """
        self.receiver.bind(self.addresses, self._udp_socket)

    def _sender_sockets(self, record: TransferRecord) -> list[socket.socket]:
        """Sockets on the planned source ports, connected to the receiver (a
        connection's, open until the engine closes).

        With per-packet entropy every transfer from the same address in the
        same class gets the same planned ports, whatever its receiver: their
        sockets are opened once, left unconnected, and kept in :attr:`pools`
        (ACKs name their queue pair, so sharing is safe). A planned port that
        is busy is replaced by an ephemeral one and reported in
        :attr:`warnings` (that flow's hash, hence path, then differs from what
        the plan's seed predicts).
        """
        t = record.transfer
        count = self.spec.entropy_ports if self.spec.sprays else 1
        ports = tuple(self.source_ports.get(("roce", t.id), ())) or (0,) * count
        pool_key = (record.src_ip, t.dscp, ports)
        if self.spec.sprays and pool_key in self.pools:
            return self.pools[pool_key]
        socks: list[socket.socket] = []
        for port in ports:
            sock = self._udp_socket(t.dscp << 2 | (ECT0 if self.ecn else 0))
            socks.append(sock)
            try:
                sock.bind((record.src_ip, port))
            except OSError as exc:
                if not port:
                    raise
                self.warnings.append(f"{t.id}: source port {record.src_ip}:{port} "
                                     f"unavailable ({exc.strerror}); used an ephemeral one")
                sock.bind((record.src_ip, 0))
            if not self.spec.sprays:
                # connected: send() needs no address and the kernel drops
                # anything that is not from the receiver
                sock.connect((record.dst_ip, self.config.port))
            self.loop.register(sock, 1, functools.partial(self._on_ack_socket, sock))
        if self.spec.sprays and any(ports):
            self.pools[pool_key] = socks
        return socks

    def _pacer(self, src_ip: str, now: float) -> _Pacer:
        pacer = self.pacers.get(src_ip)
        if pacer is None:
            burst_s = max(self.config.timers.burst * self.packet_time, WAKE_SLACK_S)
            pacer = _Pacer(bucket_for(self.spec.rate_mbps or UNPLANNED_RATE_MBPS,
                                      self._wire_packet, now, burst_s,
                                      min_packets=max(2, self.config.wake_packets)))
            self.pacers[src_ip] = pacer
        return pacer

    # -- transfers ---------------------------------------------------------------------
    def add_recv(self, record: TransferRecord) -> None:
        """Expect the message of ``record`` (any time, even before start_at)."""
        self.receiver.add_recv(record)

    def prepare_send(self, record: TransferRecord) -> None:
        """Open a sprayed send's shared entropy sockets now, not in the measured run
        (an all-to-all needs thousands); a failure is reported when it starts."""
        if self.spec.sprays:
            try:
                self._sender_sockets(record)
            except OSError:
                pass

    def start_send(self, record: TransferRecord, now: float) -> None:
        """Open the queue pair of ``record`` (src_ip/dst_ip set) on its connection and
        start pacing it."""
        t = record.transfer
        assert record.src_ip and record.dst_ip
        try:
            conn = self._connection(record, now)
        except OSError as exc:
            self.on_fail(record, f"cannot open UDP sockets on {record.src_ip}: {exc}")
            return
        qp = SendQP(record.qpn, t.bytes, self.spec.mtu_payload, window=conn.window)
        sender = _Sender(record, qp, conn)
        self.senders[record.qpn] = sender
        self._active[record.qpn] = sender
        if not conn.senders:
            conn.pacer.active.append(conn)
        conn.senders.append(sender)
        self._dirty = True
        record.start = time.time()
        record.extra["src_ports"] = conn.ports
        record.extra["first_port"] = conn.entropy.rot  # index in src_ports of its first packet

    def _connection(self, record: TransferRecord, now: float) -> _Connection:
        """The connection ``record`` goes on (one per peer, class and channel, as NCCL
        keeps its queue pairs), opened with its first transfer."""
        t = record.transfer
        key = (record.src_ip, record.dst_ip, t.dscp, t.channel)
        conn = self.connections.get(key)
        if conn is not None:
            return conn
        sockets = self._sender_sockets(record)
        known = self._pool_ports.get(id(sockets))
        if known is None:
            ports = [sock.getsockname()[1] for sock in sockets]
            known = ports, {port: i for i, port in enumerate(ports)}
            if sockets in self.pools.values():
                self._pool_ports[id(sockets)] = known
        start = self._pool_next.get(id(sockets), 0)
        self._pool_next[id(sockets)] = start + 1
        entropy = EntropyChoice(known[0], start, recycle=self.spec.entropy == "recycle",
                                index_of=known[1])
        control = make_control(self.spec.cc, self.packet_time, self.qp_cc.max_cwnd, t.hops,
                               self.line_rate, time.monotonic())
        assert record.src_ip and record.dst_ip  # start_send checked them
        cc = self.lossless_cc if t.dscp in self.spec.lossless_dscps else self.qp_cc
        conn = _Connection(Window(cc, control), sockets, self._pacer(record.src_ip, now),
                           entropy, known[0],
                           (record.dst_ip, self.config.port) if self.spec.sprays else None)
        self.connections[key] = conn
        return conn

    # -- data path ---------------------------------------------------------------------
    def _send_data(self, sender: _Sender, now: float) -> int:
        qp, conn = sender.qp, sender.conn
        psn, opcode, ackreq, length = qp.next_packet(now)
        pad = -length % 4
        size = bth.BTH_LEN + length + pad + bth.ICRC_LEN
        entropy = conn.entropy
        flags = ((opcode == bth.SEND_LAST or opcode == bth.SEND_ONLY) << 7) | (pad << 4)
        if entropy.recycling:
            flags |= bth.ECHO_FLAG
        _BTH.pack_into(self._tx, 0, opcode, flags, bth.PKEY_DEFAULT, qp.qpn,
                       (ackreq << 31) | (psn & bth.PSN_MASK))
        departs = conn.pacer.departs(size + WIRE_EXTRA)
        if length >= _SEND_TIME.size:
            _SEND_TIME.pack_into(self._tx, bth.BTH_LEN, int(departs * 1e9))
        if entropy.recycled:
            sender.recycled += 1
        sock = conn.sockets[entropy.next()]
        try:
            if conn.dest is None:
                sock.send(self._txview[:size])
            else:
                sock.sendto(self._txview[:size], conn.dest)
        except OSError:
            # a full socket buffer or a pending ICMP error: the packet did not
            # leave, which loss detection repairs like any other loss
            self.send_errors += 1
        return size + WIRE_EXTRA

    def _on_ack_socket(self, sock: socket.socket, _mask: int) -> None:
        self._dirty = True  # windows, rates and entropy move
        rx, view = self._rx, self._rxview
        for _ in range(256):
            try:
                n = sock.recv_into(rx)
            except BlockingIOError:
                return
            except ConnectionRefusedError:
                self.icmp_errors += 1  # port unreachable: the receiver is not up (yet)
                continue
            except OSError:
                return
            if n >= bth.BTH_LEN and rx[0] == bth.CNP:
                sender = self.senders.get(_BTH.unpack_from(rx)[3] & bth.PSN_MASK)
                if sender is not None and not sender.record.finished:
                    sender.qp.on_cnp(time.monotonic())
                continue
            try:
                ack = bth.parse_ack(view[:n])
            except ValueError:
                self.bad_packets += 1
                continue
            sender = self.senders.get(ack.dqpn)
            if sender is None:
                continue
            if ack.echo:  # the connection's, even in a late ACK of a finished message
                sender.conn.entropy.echoed(ack.echo)
            if sender.record.finished:
                continue
            qp = sender.qp
            qp.on_ack(ack, time.monotonic())
            if qp.done:
                self._finish_send(sender)

    def _finish_send(self, sender: _Sender) -> None:
        record, qp = sender.record, sender.qp
        record.end = time.time()
        record.bytes = qp.bytes_acked
        close = bth.ack_packet(qp.qpn, qp.count & bth.PSN_MASK, 1, bth.CLOSE_KIND, 0, 0, 0)
        conn = sender.conn
        sock = conn.sockets[conn.entropy.rot]
        try:
            if conn.dest is None:
                sock.send(close)
            else:
                sock.sendto(close, conn.dest)
        except OSError:
            self.send_errors += 1  # the receiver then stops after its linger time
        self._retire(sender)
        self.on_done(record)

    def _retire(self, sender: _Sender) -> None:
        self._active.pop(sender.qp.qpn, None)
        conn = sender.conn
        try:
            conn.senders.remove(sender)
        except ValueError:
            return
        # a failed message's packets in flight no longer hold the connection's window
        conn.window.inflight -= sender.qp.inflight
        sender.qp.inflight = 0
        if not conn.senders:  # idle: out of its NIC's turns until its next message
            conn.pacer.active.remove(conn)

    # -- timers ------------------------------------------------------------------------
    def service(self, now: float) -> float | None:
        """Loss timers, pacing and delayed ACKs; return when to run next.

        When nothing but time changed since the last call (no ACK, CNP or new
        transfer) and what it asked for is not due, it answers the same again
        (or the delayed ACK an arrival made due since, if that is earlier).
        """
        acks = self.receiver.ack_due
        if acks is not None:  # a delayed ACK an arrival made due since the last call
            self.receiver.ack_due = None
            if self._due is None or acks < self._due:
                self._due = acks
        if not self._dirty and (self._due is None or now < self._due):
            return self._due
        self._dirty = False
        wake = self._run_loss_timers(now)
        sent: set[_Sender] = set()
        send, reserve = self._send_data, self._wake_reserve
        for pacer in self.pacers.values():
            wake = pacer.serve(now, wake, send, reserve, sent)
        for sender in sent:  # what they just sent may start a loss timer
            due = sender.qp.loss.deadline()
            if due is not None and (wake is None or due < wake):
                wake = due
        wake = self.receiver.send_due_acks(now, wake)
        self._due = wake
        return wake

    def _run_loss_timers(self, now: float) -> float | None:
        """Fire the senders' due loss timers; return the earliest deadline left."""
        wake: float | None = None
        for sender in list(self._active.values()):
            if sender.record.finished:  # failed by the runner (deadline)
                self._retire(sender)
                continue
            qp = sender.qp
            loss = qp.loss
            due = loss.deadline()
            if due is not None and due <= now:
                loss.on_timer(now)
                if qp.failed:
                    self._retire(sender)
                    self.on_fail(sender.record, qp.failed)
                    continue
                due = loss.deadline()
            if due is not None and (wake is None or due < wake):
                wake = due
        return wake

    def linger_until(self) -> float | None:
        """Monotonic time until which finished receive QPs should still answer
        (:meth:`RoceReceiver.linger_until`)."""
        return self.receiver.linger_until()

    # -- results -----------------------------------------------------------------------
    def snapshot(self) -> None:
        """Copy bytes and counters into every record's row."""
        report.fill_send_rows(self.senders.values())
        report.fill_recv_rows(self.receiver)

    def totals(self) -> dict[str, float]:
        """Counters summed over the agent's queue pairs (call after :meth:`snapshot`),
        and the NICs' wire time busy, lost to the agent's lateness, held by full windows
        and waiting for something to send while messages were open (``pacer_busy_s``,
        ``pacer_late_s``, ``pacer_window_s``, ``pacer_waiting_s``, see :class:`_Pacer`)."""
        return report.totals(self)

    def close(self) -> None:
        """Close every socket the engine opened."""
        for sock in self._own:
            self.loop.unregister(sock)
            sock.close()
        self._own.clear()
        self.receiver.listeners.clear()
        self.pools.clear()
