"""The receiving side of the RoCE engine: listeners, receive QPs, ACKs and CNPs.

A listener on port 4791 of every own NIC receives data (and the sender's
CLOSE) and answers with ACKs sent to the exact source address and port of
the data packet, so that ACKs of a sprayed flow are sprayed too. With
``cc="dcqcn"`` the listeners read each arrival's TOS byte, and a CE-marked
arrival makes the receiver send a CNP back the way ACKs go (at most one per
``cnp_interval`` packet times and queue pair).

Control packets leave by the NIC the data arrived on and take their bytes
from that NIC's pacer, which the engine owns (``pacer_for``).
"""

from __future__ import annotations

import functools
import socket
import struct
import time
from array import array
from typing import Any, Callable

from fabric.agent.core.loop import EventLoop
from fabric.agent.core.records import TransferRecord
from fabric.agent.roce import bth
from fabric.agent.roce.cc import SwiftParams
from fabric.agent.roce.recv import Inbound, RecvQP
from fabric.traffic.model import TransportSpec

_BTH = struct.Struct("!BBHII")
_SEND_TIME = bth.SEND_TIME
WIRE_EXTRA = 14 + 20 + 8  # Ethernet + IPv4 + UDP, charged by the pacer
ECT0 = 0b10  # ECN field of an ECN-capable packet
CE = 0b11    # ... and of one a switch marked
# the kernel's receive stamp of each datagram (Linux's value; Python does not name it)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("qq")
_ANCILLARY = socket.CMSG_SPACE(_TIMESPEC.size) + socket.CMSG_SPACE(4)


def _arrival(ancillary: list[tuple[int, int, bytes]], offset_ns: int) -> tuple[int, bool]:
    """Monotonic ns at which the kernel received a datagram (now if it did not say),
    and whether it arrived CE-marked (IP_RECVTOS), from its ancillary data.

    ``offset_ns`` is wall-clock minus monotonic time: kernel stamps are wall-clock.
    """
    arrived, ce = 0, False
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            sec, nsec = _TIMESPEC.unpack_from(data)
            arrived = sec * 1_000_000_000 + nsec - offset_ns
        elif level == socket.IPPROTO_IP and kind == socket.IP_TOS:
            ce = data[0] & CE == CE
    return arrived or time.monotonic_ns(), ce


class RoceReceiver:
    """The receive QPs of one engine, its listeners, and the ACKs and CNPs they send.

    Parameters
    ----------
    loop : EventLoop
        The agent's loop (listeners are registered on it).
    spec : TransportSpec
        The plan's transport (MTU payload, timeline).
    config : RoceConfig
        The engine's tunables (ACK coalescing, linger, port, timers).
    packet_time : float
        Seconds of one full-size data packet at the emulated rate.
    ack_delay_s : float
        Longest an arrival waits for its ACK.
    ecn : bool
        Whether listeners read arrivals' TOS byte (``cc="dcqcn"``).
    pacer_for : callable
        ``(nic address, now) -> pacer``: the NIC's pacer a control packet takes
        its bytes from.
    on_done : callable
        Called with the record when a message is complete.
    """

    def __init__(self, loop: EventLoop, spec: TransportSpec, config: Any, packet_time: float,
                 ack_delay_s: float, ecn: bool, pacer_for: Callable[[str, float], Any],
                 on_done: Callable[[TransferRecord], None]) -> None:
        self.loop = loop
        self.spec = spec
        self.config = config
        self.packet_time = packet_time
        self.ack_delay_s = ack_delay_s
        self.ecn = ecn
        self.pacer_for = pacer_for
        self.on_done = on_done
        self.listeners: dict[str, socket.socket] = {}
        self.receivers: dict[int, tuple[TransferRecord, RecvQP]] = {}
        self._inbound: dict[tuple, Inbound] = {}  # connection -> what its messages share
        # receive QP -> (listener, its NIC address, the data's source, TOS) to answer with
        self._reply: dict[int, tuple[socket.socket, str, tuple[str, int], int]] = {}
        self._ack_pending: dict[int, RecvQP] = {}
        # the earliest delayed ACK an arrival made due since the engine last ran its
        # timers (None: none): the engine's wake-up must not sleep past it
        self.ack_due: float | None = None
        # qpn -> (arrival, send) wall-clock pairs of newly delivered packets, flattened
        self.arrivals: dict[int, array] | None = {} if spec.timeline else None
        # the steady-state window's edges still to pass (wall clock), and each receive
        # QP's delivered bytes at the edges passed
        self.marks: list[float] = []
        self._next_mark = float("inf")
        self.mark_bytes: list[dict[int, int]] = []
        self._rx = bytearray(65536)
        self._rxview = memoryview(self._rx)
        self.unknown_qp = 0
        self.bad_packets = 0
        self.send_errors = 0

    def bind(self, addresses: list[str], udp_socket: Callable[[int], socket.socket]) -> None:
        """Bind a listener on the engine's port of every address in ``addresses``.

        ``udp_socket(tos)`` opens a non-blocking UDP socket the engine closes.

        Raises
        ------
        OSError
            If a port is busy (another agent or a stale run holds it).
        """
        for address in addresses:
            sock = udp_socket(0)
            # delays and completions are measured to when a packet arrived, not
            # to when a loop waiting for a core got round to reading it
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            if self.ecn:
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
            sock.bind((address, self.config.port))
            self.listeners[address] = sock
            self.loop.register(sock, 1, functools.partial(self._on_listener, sock, address))

    def add_recv(self, record: TransferRecord) -> None:
        """Expect the message of ``record`` (any time, even before start_at)."""
        # entropy recycling echoes a port while its packet queued no more than swift
        # aims for, whichever control runs: a path is congested where the congestion
        # control would call it so (a fixed threshold echoed too few ports: measured in
        # docs/benchmarks.md, "Sizing the collisions workloads")
        echo_excess = SwiftParams().allowance(record.transfer.hops)
        inbound = self._inbound.setdefault(record.transfer.connection, Inbound())
        qp = RecvQP(record.qpn, record.transfer.bytes, self.spec.mtu_payload,
                    self.config.ack_every, self.ack_delay_s,
                    round(echo_excess * self.packet_time * 1e6),
                    self.config.timers.cnp_interval * self.packet_time, inbound)
        self.receivers[record.qpn] = (record, qp)

    def _on_listener(self, sock: socket.socket, nic: str, _mask: int) -> None:
        rx = self._rx
        receivers = self.receivers
        offset_ns = time.time_ns() - time.monotonic_ns()
        for _ in range(256):
            try:
                n, ancillary, _, addr = sock.recvmsg_into([rx], _ANCILLARY)
            except OSError:  # BlockingIOError among them: nothing left to read
                return
            if n < bth.BTH_LEN + bth.ICRC_LEN:
                self.bad_packets += 1
                continue
            opcode, flags, _, qp_word, psn_word = _BTH.unpack_from(rx)
            entry = receivers.get(qp_word & bth.PSN_MASK)
            if entry is None:
                self.unknown_qp += 1
                continue
            record, qp = entry
            if opcode in bth.DATA_OPCODES:
                arrived_ns, ce = _arrival(ancillary, offset_ns)
                now = arrived_ns / 1e9
                wall = (arrived_ns + offset_ns) / 1e9
                if wall >= self._next_mark:
                    self._pass_mark()
                if record.start is None:
                    record.start = wall
                length = n - bth.BTH_LEN - bth.ICRC_LEN - ((flags >> 4) & 3)
                sent_ns = _SEND_TIME.unpack_from(rx, bth.BTH_LEN)[0] if length >= 8 else 0
                # stamps are when the NIC's shaped queue lets a packet go; where nothing
                # shapes it (loopback) it arrives "early": still a measured delay
                owd_us = max(1, (arrived_ns - sent_ns) // 1000) if sent_ns else 0
                delivered = qp.bytes
                urgent = qp.on_data(psn_word & bth.PSN_MASK, length, bool(psn_word >> 31), now,
                                    owd_us, addr[1] if flags & bth.ECHO_FLAG else 0)
                if self.arrivals is not None and qp.bytes != delivered:
                    self._log_arrival(qp.qpn, wall, owd_us)
                self._reply[qp.qpn] = (sock, nic, addr, record.transfer.dscp << 2)
                finished = record.end is None and qp.complete
                if finished:
                    record.end = wall
                    record.bytes = qp.bytes
                if ce and qp.on_ce(now):
                    self._send_control(qp, bth.cnp_packet(qp.qpn))
                if urgent:
                    self._send_ack(qp)
                elif qp.pending:
                    self._ack_pending[qp.qpn] = qp
                    due = qp.ack_due()
                    if due is not None and (self.ack_due is None or due < self.ack_due):
                        self.ack_due = due
                if finished:
                    self.on_done(record)
            elif opcode == bth.ACKNOWLEDGE:
                try:
                    if bth.parse_ack(self._rxview[:n]).kind == bth.CLOSE_KIND:
                        qp.closed, qp.closed_at = True, time.monotonic()
                except ValueError:
                    self.bad_packets += 1
            else:
                self.bad_packets += 1

    def count_window(self, start: float, end: float) -> None:
        """Count every receive QP's delivered bytes when the wall clock passes ``start``
        and ``end`` (its first packet that arrives later): a steady-state window."""
        self.marks = sorted((start, end))
        self._next_mark = self.marks[0]

    def _pass_mark(self) -> None:
        # every packet before this one arrived before the mark (to within a socket's batch)
        self.mark_bytes.append({qpn: qp.bytes for qpn, (_, qp) in self.receivers.items()})
        del self.marks[0]
        self._next_mark = self.marks[0] if self.marks else float("inf")

    def _log_arrival(self, qpn: int, wall: float, owd_us: int) -> None:
        # all emulated hosts share one clock, so the sender's stamp is our time too
        assert self.arrivals is not None  # called only with a timeline
        self.arrivals.setdefault(qpn, array("d")).extend((wall, wall - owd_us * 1e-6))

    def _send_ack(self, qp: RecvQP) -> None:
        self._ack_pending.pop(qp.qpn, None)
        self._send_control(qp, qp.make_ack())

    def _send_control(self, qp: RecvQP, packet: bytes) -> None:
        """Send an ACK or CNP of ``qp`` to the source of its latest data packet."""
        sock, nic, addr, tos = self._reply[qp.qpn]
        # it leaves by the same NIC as data: it takes its bytes from the NIC's
        # pacer, so data and control packets together stay within the link rate
        pacer = self.pacer_for(nic, time.monotonic())
        pacer.bucket.spend(len(packet) + WIRE_EXTRA)
        pacer.departs(len(packet) + WIRE_EXTRA)
        try:
            if tos:
                # the listener is shared by all traffic classes: set TOS per datagram
                sock.sendmsg([packet], [(socket.IPPROTO_IP, socket.IP_TOS,
                                         struct.pack("i", tos))], 0, addr)
            else:
                sock.sendto(packet, addr)
        except OSError:
            self.send_errors += 1

    def send_due_acks(self, now: float, wake: float | None) -> float | None:
        """Send the delayed ACKs that are due; return ``wake`` or the next one, if earlier.

        Parameters
        ----------
        now : float
            Monotonic time.
        wake : float or None
            When the engine runs next for its other timers.

        Returns
        -------
        float or None
            The earlier of ``wake`` and the next delayed ACK.
        """
        for qp in list(self._ack_pending.values()):
            due = qp.ack_due()
            if due is None:
                del self._ack_pending[qp.qpn]
            elif due <= now:
                self._send_ack(qp)
            elif wake is None or due < wake:
                wake = due
        return wake

    def linger_until(self) -> float | None:
        """Monotonic time until which finished receive QPs should still answer.

        A finished receiver keeps acknowledging retransmissions (its last
        ACK may have been lost) until the sender's CLOSE arrives or
        ``linger_s`` passed without a packet, and after the CLOSE goes on
        counting the packets still in flight for ``close_linger`` packet times.
        """
        until = None
        for record, qp in self.receivers.values():
            if not qp.complete:
                continue
            if not qp.closed:
                t = qp.last_rx + self.config.linger_s
            else:  # packets the sender sent before it saw the last ACK are still coming
                t = qp.closed_at + self.config.timers.close_linger * self.packet_time
            until = t if until is None else max(until, t)
        return until
