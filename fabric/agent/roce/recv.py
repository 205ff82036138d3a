"""Responder side of one RoCE queue pair: accept any order, deliver once, ACK.

Pure logic like :mod:`fabric.agent.roce.send`. Packets may arrive in any
order (spraying); each PSN is delivered once, later copies are counted as
duplicates, and a packet arriving after a higher PSN counts as out of order.
An ACK is due after every ``ack_every`` new packets, on a packet with the
ACK-request bit, on a duplicate (the sender is missing an ACK), on
completion, or ``ack_delay_s`` after the first unacknowledged arrival.

Each ACK carries the mean one-way delay of the packets that arrived since the
previous one (``swift``'s signal). With ACKs coalesced, the last packet's delay
alone would be one path's in eight when the flow is sprayed, and a sender that
cut on it would back off for its most loaded path whatever the others carry;
on one path the mean only smooths over a few consecutive packets.

A packet that arrives marked CE (``dcqcn``) makes a CNP due, at most one per
``cnp_interval_s`` (DCQCN's notification point).

A packet that asks for it (entropy recycling) has its UDP source port echoed
in the next ACK when it arrived without queueing: its one-way delay at most
``echo_excess_us`` above the smallest its connection has seen.

The messages of one connection share an :class:`Inbound`: the smallest
one-way delay (a message of a dozen packets, all queued, would take its own
queueing for the path's base) and the time of the last CNP.
"""

from __future__ import annotations

from fabric.agent.roce.bth import (ACK_KIND, MAX_BITMAP_BYTES, MAX_ECHO, PSN_MASK, ack_packet,
                                   unwrap)

_BITS = bytes.maketrans(b"\x00\x01", b"01")


class Inbound:
    """What a receiver keeps of one connection across its messages."""

    __slots__ = ("base_owd_us", "last_cnp")

    def __init__(self) -> None:
        self.base_owd_us = 0    # smallest one-way delay seen (0: none yet)
        self.last_cnp = float("-inf")


class RecvQP:
    """Reassembly state of one message.

    The counters in :attr:`COUNTERS` are reported per transfer and summed per
    agent.

    Parameters
    ----------
    qpn : int
        This queue pair's number (also the requester's: both ends use the
        transfer's QPN).
    nbytes, mtu : int
        Message length and payload per packet, as the sender splits it.
    ack_every : int
        New packets per immediate ACK.
    ack_delay_s : float
        Longest an arrival waits for its ACK.
    echo_excess_us : int
        Queueing (one-way delay above the smallest seen) up to which a
        packet's source port is echoed, when the packet asks for it.
    cnp_interval_s : float
        Shortest time between two CNPs.
    inbound : Inbound, optional
        The connection's state this message shares; default its own.
    """

    COUNTERS = ("packets_received", "out_of_order", "duplicates", "bad_packets", "acks_sent",
                "ce_packets", "cnps_sent")

    def __init__(self, qpn: int, nbytes: int, mtu: int, ack_every: int = 4,
                 ack_delay_s: float = 0.001, echo_excess_us: int = 0,
                 cnp_interval_s: float = 0.0, inbound: Inbound | None = None) -> None:
        self.qpn = qpn
        self.inbound = inbound or Inbound()
        self.nbytes = nbytes
        self.mtu = mtu
        self.count = -(-nbytes // mtu)
        self.last_len = nbytes - (self.count - 1) * mtu
        self.ack_every = ack_every
        self.ack_delay_s = ack_delay_s
        self.got = bytearray(self.count)
        self.cum = 0            # next PSN expected in order
        self.max_seen = -1
        self.trigger = 0        # PSN of the latest arrival (echoed for RTT samples)
        self.owd_sum_us = 0     # one-way delays since the last ACK (their mean is echoed)
        self.owd_count = 0
        self.pending = 0        # arrivals not yet acknowledged
        self.pending_since = 0.0
        self.bytes = 0
        self.packets_received = 0
        self.out_of_order = 0
        self.duplicates = 0
        self.bad_packets = 0
        self.acks_sent = 0
        self.closed = False     # the sender said it saw everything acknowledged
        self.closed_at = 0.0
        self.last_rx = 0.0
        self.echo_excess_us = echo_excess_us
        self.echo: list[int] = []  # source ports to echo in the next ACK
        self.cnp_interval_s = cnp_interval_s
        self.ce_packets = 0
        self.cnps_sent = 0

    def counters(self) -> dict[str, int]:
        """The reported counters by name."""
        return {name: getattr(self, name) for name in self.COUNTERS}

    @property
    def complete(self) -> bool:
        """Every PSN arrived."""
        return self.cum >= self.count

    def on_data(self, psn: int, payload_len: int, ackreq: bool, now: float,
                owd_us: int = 0, echo_port: int = 0) -> bool:
        """Account one data packet; return True if an ACK should go out now.

        ``payload_len`` excludes BTH padding and ICRC; ``owd_us`` is the
        packet's one-way delay (0: not measured; the next ACK echoes the mean
        of those measured since the last); ``echo_port``, when not 0,
        is the packet's UDP source port, to echo if it did not queue. A
        packet outside the message or of the wrong length is counted in
        :attr:`bad_packets` and dropped.
        """
        self.last_rx = now
        self.packets_received += 1
        index = unwrap(psn, self.cum)
        if not 0 <= index < self.count or payload_len != (
                self.last_len if index == self.count - 1 else self.mtu):
            self.bad_packets += 1
            return False
        self.trigger = index
        if owd_us:
            self.owd_sum_us += owd_us
            self.owd_count += 1
            inbound = self.inbound
            if not inbound.base_owd_us or owd_us < inbound.base_owd_us:
                inbound.base_owd_us = owd_us
        if (echo_port and owd_us and owd_us - self.inbound.base_owd_us <= self.echo_excess_us
                and len(self.echo) < MAX_ECHO):
            self.echo.append(echo_port)
        if self.got[index]:
            self.duplicates += 1
            return True
        self.got[index] = 1
        self.bytes += payload_len
        if index < self.max_seen:
            self.out_of_order += 1
        else:
            self.max_seen = index
        if index == self.cum:
            nxt = self.got.find(0, index + 1)
            self.cum = self.count if nxt < 0 else nxt
        if not self.pending:
            self.pending_since = now
        self.pending += 1
        return ackreq or self.pending >= self.ack_every or self.cum >= self.count

    def on_ce(self, now: float) -> bool:
        """Count a CE-marked arrival; return True when a CNP should go out now."""
        self.ce_packets += 1
        if now - self.inbound.last_cnp < self.cnp_interval_s:
            return False
        self.inbound.last_cnp = now
        self.cnps_sent += 1
        return True

    def ack_due(self) -> float | None:
        """Monotonic time a delayed ACK is due, if one is pending."""
        return self.pending_since + self.ack_delay_s if self.pending else None

    def make_ack(self) -> bytes:
        """The ACKNOWLEDGE datagram for the current state (resets pending)."""
        self.pending = 0
        self.acks_sent += 1
        owd_us = self.owd_sum_us // self.owd_count if self.owd_count else 0
        self.owd_sum_us = self.owd_count = 0
        bitmap = b""
        hi = min(self.max_seen + 1, self.cum + 1 + MAX_BITMAP_BYTES * 8)
        if hi > self.cum + 1:
            # bytes of 0/1 -> "01" text -> int: bit j is PSN cum+1+j, all in C
            bits = self.got[self.cum + 1:hi].translate(_BITS)[::-1]
            bitmap = int(bits, 2).to_bytes(-(-len(bits) // 8), "little")
        echo, self.echo = self.echo, []
        return ack_packet(self.qpn, self.cum & PSN_MASK, 1 if self.complete else 0, ACK_KIND,
                          self.trigger & PSN_MASK, self.duplicates, self.out_of_order, bitmap,
                          owd_us, echo)
