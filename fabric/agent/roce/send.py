"""Requester side of one RoCE queue pair: window, loss detection, congestion control.

Pure logic (no sockets, no clock): the engine passes ``now`` (monotonic
seconds) and sends what :meth:`SendQP.next_packet` hands out. That keeps the
loss-detection rules testable with simulated reordering.

Loss detection never counts duplicate ACKs: per-packet spraying reorders more
than half of the packets, so "three later packets were acked" says nothing.
As in RACK (RFC 8985) a packet is declared lost only when a packet *sent
after it* has been delivered and more than ``srtt * factor + reordering
allowance`` passed since it was sent, or when the retransmission timer (on
the oldest outstanding transmission) expires. The reordering allowance grows
when the receiver reports duplicates (a retransmission was spurious) or when
an original arrives after it was declared lost (before its repair left).
Only lost packets are sent again (selective repeat).

The window (packets) is moved by a controller from :mod:`fabric.agent.roce.cc`:
on every ACK (with the one-way delay it reports) and on a loss episode, at
most once per RTT. A cut whose every loss proves to be reordering is undone.
Below one packet the window is a pacing gap: one packet in flight, sent
``rtt / cwnd`` after the previous one. A rate-based controller (``dcqcn``)
paces every packet instead: the gap after a packet is its wire time at the
controller's rate, and a late wakeup may catch up at most one gap.
``lost_detected`` counts declarations: a packet declared lost that is then
acknowledged before its repair leaves (it was only late) is not resent.

A connection (NCCL's queue pair between two ranks on one channel) carries
many messages, several in flight: their :class:`SendQP` share one
:class:`Window`, so the window, the RTT estimate, the reordering allowance and
RACK's "latest delivered transmission" belong to the connection. A message's
lost tail is then found by the next message's deliveries, not by a timeout.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from dataclasses import dataclass

from fabric.agent.roce.bth import DATA_OVERHEAD, MAX_BITMAP_BYTES, Ack, data_opcode, unwrap
from fabric.agent.roce.cc import Control, DcqcnControl, LossControl

UNSENT, IN_FLIGHT, LOST, ACKED = 0, 1, 2, 3
# New packets go out only within this many PSNs of the oldest unacked one,
# so that the receiver's SACK bitmap (which starts at its cumulative point)
# can always describe everything in flight.
MAX_SPAN = MAX_BITMAP_BYTES * 8


@dataclass(frozen=True)
class CcConfig:
    """Congestion-control and loss-detection parameters (packets, seconds)."""

    init_cwnd: float = 16.0
    max_cwnd: float = 512.0
    min_rto_s: float = 0.2  # as TCP: queues here reach hundreds of ms at low rates
    max_rto_s: float = 1.0
    init_rto_s: float = 0.2
    rtt_factor: float = 1.25      # loss threshold = srtt * factor + reordering allowance
    min_reorder_s: float = 0.001  # floor of the reordering allowance
    max_reorder_mult: int = 16
    reorder_persist: int = 16     # loss episodes without a spurious repair before it resets
    max_timeouts: int = 10        # consecutive RTOs without progress before giving up


class Window:
    """Congestion state one connection's messages share (see the module docstring).

    Parameters
    ----------
    cc : CcConfig
        Tunables.
    control : LossControl, SwiftControl or DcqcnControl, optional
        Moves the window (or, DCQCN, the pacing rate); default AIMD on loss.
    """

    __slots__ = ("cc", "control", "rate_paced", "cwnd", "inflight", "srtt", "latest_rtt",
                 "rttvar", "rto", "next_send_at", "tx", "rack_tx", "last_cut", "undo_cwnd",
                 "undo_pending", "reorder_mult", "last_mult_change", "episodes_since_widening")

    def __init__(self, cc: CcConfig = CcConfig(), control: Control | None = None) -> None:
        self.cc = cc
        self.control = control or LossControl(cc.max_cwnd)
        self.rate_paced = isinstance(self.control, DcqcnControl)
        self.cwnd = float(self.control.initial_window(cc.init_cwnd))
        self.inflight = 0                # packets in flight, all messages
        self.srtt: float | None = None
        self.latest_rtt = 0.0
        self.rttvar = 0.0
        self.rto = cc.init_rto_s
        self.next_send_at = -math.inf    # pacing gap of a window below one packet, or a rate
        # transmission numbers order packets sent in the same instant (one pacing burst
        # shares ``now``), which RACK's "sent after" needs; rack_tx is the latest-sent
        # delivered packet's
        self.tx = 0
        self.rack_tx = -1
        self.last_cut = -math.inf
        # undo of a spurious cut (as TCP's DSACK undo): the window before the
        # episode's cut and how many of its lost marks are still unexplained
        self.undo_cwnd: float | None = None
        self.undo_pending = 0
        self.reorder_mult = 1
        self.last_mult_change = -math.inf
        self.episodes_since_widening = 0

    @property
    def full(self) -> bool:
        """Whether the window holds no room for another packet."""
        return self.inflight >= max(1, int(self.cwnd))


class SendQP:
    """Reliable, window-limited, selectively retransmitting sender of one message.

    Parameters
    ----------
    qpn : int
        Queue pair number (the receiver's, carried in every BTH).
    nbytes : int
        Message length.
    mtu : int
        Payload bytes per packet.
    cc : CcConfig
        Tunables (of a new window; a shared one has its own).
    control : LossControl, SwiftControl or DcqcnControl, optional
        Moves the window of a new :class:`Window`; default AIMD on loss.
    window : Window, optional
        The connection's window this message shares with the others it carries;
        default a window of its own.
    """

    COUNTERS = ("packets_sent", "retransmitted", "lost_detected", "rto_count", "acks_received",
                "cnps_received")

    def __init__(self, qpn: int, nbytes: int, mtu: int, cc: CcConfig = CcConfig(),
                 control: Control | None = None, window: Window | None = None) -> None:
        if nbytes < 1:
            raise ValueError("a message needs at least one byte")
        self.qpn = qpn
        self.nbytes = nbytes
        self.mtu = mtu
        self.win = window or Window(cc, control)
        self.cc = self.win.cc
        self.rate_paced = self.win.rate_paced
        self.count = -(-nbytes // mtu)
        self.last_len = nbytes - (self.count - 1) * mtu
        self.state = bytearray(self.count)
        self.retx = bytearray(self.count)           # 1 once a PSN was sent twice (Karn)
        self.sent_at = array("d", bytes(8 * self.count))
        self.sent_tx = array("q", bytes(8 * self.count))  # the window's transmission numbers
        self.outstanding: deque[tuple[int, int]] = deque()  # (psn, tx) in send order
        self.lost: deque[int] = deque()
        self.next_new = 0
        self.una = 0
        self.acked = 0
        self.inflight = 0
        self.overtaken_late = False     # a lost-marked original was delivered (this ACK)
        self.peer_duplicates = 0
        self.peer_out_of_order = 0
        # reported per transfer (COUNTERS)
        self.packets_sent = 0
        self.retransmitted = 0
        self.acks_received = 0
        self.cnps_received = 0
        self.failed: str | None = None
        # after the state it reads: it keeps references to those arrays
        self.loss = LossRecovery(self)

    # the connection's state, read (and in tests set) through the message
    cwnd = property(lambda self: self.win.cwnd,
                    lambda self, value: setattr(self.win, "cwnd", value))
    srtt = property(lambda self: self.win.srtt,
                    lambda self, value: setattr(self.win, "srtt", value))
    rttvar = property(lambda self: self.win.rttvar,
                      lambda self, value: setattr(self.win, "rttvar", value))
    rto = property(lambda self: self.win.rto, lambda self, value: setattr(self.win, "rto", value))
    control = property(lambda self: self.win.control)
    latest_rtt = property(lambda self: self.win.latest_rtt)
    reorder_mult = property(lambda self: self.win.reorder_mult)
    rack_tx = property(lambda self: self.win.rack_tx)
    next_send_at = property(lambda self: self.win.next_send_at)
    # the loss recovery's counters, reported with the message's
    lost_detected = property(lambda self: self.loss.lost_detected)
    rto_count = property(lambda self: self.loss.rto_count)
    loss_cuts = property(lambda self: self.loss.loss_cuts)
    undone_cuts = property(lambda self: self.loss.undone_cuts)

    # -- state -------------------------------------------------------------------------
    def counters(self) -> dict[str, int]:
        """The reported counters by name."""
        return {name: getattr(self, name) for name in self.COUNTERS}

    @property
    def done(self) -> bool:
        """Every PSN acknowledged."""
        return self.acked == self.count

    @property
    def bytes_acked(self) -> int:
        """Payload bytes the receiver confirmed."""
        full = self.acked - (self.state[self.count - 1] == ACKED)
        return full * self.mtu + (self.last_len if self.state[self.count - 1] == ACKED else 0)

    def length(self, psn: int) -> int:
        """Payload length of packet ``psn``."""
        return self.last_len if psn == self.count - 1 else self.mtu

    def can_send(self, now: float) -> bool:
        """Whether the window allows a packet now and there is one to send."""
        win = self.win
        if self.done or self.failed or win.inflight >= max(1, int(win.cwnd)):
            return False
        if (win.cwnd < 1 or self.rate_paced) and now < win.next_send_at:
            return False
        return self._has_packet()

    def _has_packet(self) -> bool:
        lost = self.lost
        while lost and self.state[lost[0]] != LOST:
            lost.popleft()  # acknowledged after all (it was only reordered)
        return bool(lost) or (self.next_new < self.count and self.next_new < self.una + MAX_SPAN)

    def has_packet(self) -> bool:
        """Whether a packet waits to go (a repair or a new one), window aside."""
        return not (self.done or self.failed) and self._has_packet()

    def paced_until(self, now: float) -> float | None:
        """When pacing (a rate, or a window below one packet) lets the next packet go,
        if that is later and only pacing holds it."""
        win = self.win
        if now >= win.next_send_at or self.done or self.failed or not self._has_packet():
            return None
        if self.rate_paced:
            held = win.inflight < max(1, int(win.cwnd))
        else:
            held = win.cwnd < 1 and not win.inflight
        return win.next_send_at if held else None

    def on_cnp(self, now: float) -> None:
        """A congestion notification from the receiver (rate-based control only)."""
        self.cnps_received += 1
        if self.rate_paced:
            control = self.win.control
            assert isinstance(control, DcqcnControl)  # what rate_paced means
            control.on_cnp(now)

    def next_packet(self, now: float) -> tuple[int, int, bool, int]:
        """Commit the next packet to the wire; call only when :meth:`can_send`.

        Returns
        -------
        tuple
            ``(psn, opcode, ackreq, payload_length)``.
        """
        win = self.win
        if self.lost:
            psn = self.lost.popleft()
            self.retx[psn] = 1
            self.retransmitted += 1
            ackreq = True  # have the receiver answer a repair at once
        else:
            psn = self.next_new
            self.next_new += 1
            ackreq = psn == self.count - 1
        self.state[psn] = IN_FLIGHT
        self.sent_at[psn] = now
        win.tx += 1
        self.sent_tx[psn] = win.tx
        self.outstanding.append((psn, win.tx))
        self.inflight += 1
        win.inflight += 1
        self.packets_sent += 1
        if self.rate_paced:
            # rate_paced: a DcqcnControl (no per-packet check on the hot path)
            gap = win.control.on_send(  # type: ignore[union-attr]
                self.length(psn) + DATA_OVERHEAD, now)
            # a wakeup late by less than one gap sends on schedule, not a gap late
            start = win.next_send_at if now - win.next_send_at < gap else now
            win.next_send_at = start + gap
        elif win.cwnd < 1:
            win.next_send_at = now + (win.srtt or win.rto) / win.cwnd
        return psn, data_opcode(psn, self.count), ackreq, self.length(psn)

    # -- acknowledgements --------------------------------------------------------------
    def _deliver(self, psn: int) -> None:
        state = self.state[psn]
        if state == IN_FLIGHT:
            self.inflight -= 1
            self.win.inflight -= 1
        elif state == LOST and not self.retx[psn]:
            # the original arrived before its repair was sent: proof, without
            # waiting for a duplicate, that reordering outlasted the allowance
            self.overtaken_late = True
            self.loss.spurious(1)
        self.state[psn] = ACKED
        self.acked += 1
        if not self.retx[psn] and self.sent_tx[psn] > self.win.rack_tx:
            self.win.rack_tx = self.sent_tx[psn]

    def on_ack(self, ack: Ack, now: float) -> int:
        """Apply a cumulative + selective ACK; return how many PSNs it newly acked."""
        self.acks_received += 1
        state = self.state
        count = self.count
        before = self.acked
        trigger = unwrap(ack.trigger_psn, self.una)
        fresh = 0 <= trigger < count and state[trigger] != ACKED and not self.retx[trigger]
        cum = min(unwrap(ack.cum, self.una), count)
        if cum > self.una:
            for psn in range(self.una, cum):
                if state[psn] != ACKED:
                    self._deliver(psn)
            self.una = cum
        if ack.bitmap:
            mask = int.from_bytes(ack.bitmap, "little")
            base = cum + 1
            while mask:
                low = mask & -mask
                psn = base + low.bit_length() - 1
                mask ^= low
                if psn < count and state[psn] != ACKED:
                    self._deliver(psn)
        newly = self.acked - before
        if fresh and state[trigger] == ACKED:
            # only the packet that triggered this very ACK, acknowledged for
            # the first time and sent once (Karn), gives an unambiguous sample
            self._rtt_sample(now - self.sent_at[trigger])
        duplicated = ack.duplicates > self.peer_duplicates
        win = self.win
        if duplicated or self.overtaken_late:
            # the receiver got a PSN twice (a retransmission was spurious: RACK's
            # DSACK rule) or an original came in after it was declared lost:
            # packets are reordered more than we allowed for; widen the
            # allowance, at most once per RTT
            if now - win.last_mult_change >= (win.srtt or win.rto):
                win.reorder_mult = min(win.reorder_mult + 1, self.cc.max_reorder_mult)
                win.last_mult_change = now
                win.episodes_since_widening = 0
            self.overtaken_late = False
        if duplicated:
            self.loss.spurious(ack.duplicates - self.peer_duplicates)
        self.peer_duplicates = max(self.peer_duplicates, ack.duplicates)
        self.peer_out_of_order = max(self.peer_out_of_order, ack.out_of_order)
        delay = ack.owd_us / 1e6 if ack.owd_us else None
        win.cwnd = win.control.on_ack(win.cwnd, newly, delay, now, win.srtt or win.rto)
        if newly:
            loss = self.loss
            loss.timeouts_in_row = 0
            loss.backoff = 1
            loss.detect(now)
        return newly

    def _rtt_sample(self, rtt: float) -> None:
        win = self.win
        win.latest_rtt = rtt
        if win.srtt is None:
            win.srtt, win.rttvar = rtt, rtt / 2
        else:
            win.rttvar += 0.25 * (abs(win.srtt - rtt) - win.rttvar)
            win.srtt += 0.125 * (rtt - win.srtt)
        win.rto = min(max(win.srtt + 4 * win.rttvar, self.cc.min_rto_s), self.cc.max_rto_s)

    # -- loss detection (see :class:`LossRecovery`) -------------------------------------
    def loss_threshold(self) -> float | None:
        """Age after which a packet overtaken by a delivered one is lost
        (:meth:`LossRecovery.threshold`)."""
        return self.loss.threshold()

    def deadline(self) -> float | None:
        """Monotonic time at which :meth:`on_timer` has work, if any
        (:meth:`LossRecovery.deadline`)."""
        return self.loss.deadline()

    def on_timer(self, now: float) -> None:
        """Run time-threshold detection and the retransmission timeout
        (:meth:`LossRecovery.on_timer`)."""
        self.loss.on_timer(now)


class LossRecovery:
    """Loss detection and timers of one :class:`SendQP`: RACK's time threshold, the
    retransmission timeout with its backoff, the window cut once per episode and its
    undo when the losses prove spurious (see the module docstring).

    It marks the message's packets lost in the message's own state (``state``,
    ``lost``, ``inflight``), whose arrays it holds directly: the checks run on
    every ACK that delivers something.

    Parameters
    ----------
    qp : SendQP
        The message it recovers (its arrays and window are made first).
    """

    __slots__ = ("qp", "win", "cc", "state", "sent_at", "sent_tx", "outstanding", "lost",
                 "backoff", "timeouts_in_row", "loss_cuts", "undone_cuts", "lost_detected",
                 "rto_count")

    def __init__(self, qp: SendQP) -> None:
        self.qp = qp
        self.win = qp.win
        self.cc = qp.cc
        # the message's arrays, never rebound: read without going through the message
        self.state = qp.state
        self.sent_at = qp.sent_at
        self.sent_tx = qp.sent_tx
        self.outstanding = qp.outstanding
        self.lost = qp.lost
        self.backoff = 1
        self.timeouts_in_row = 0
        self.loss_cuts = 0
        self.undone_cuts = 0
        # reported per transfer with the message's counters (SendQP.COUNTERS)
        self.lost_detected = 0
        self.rto_count = 0

    def threshold(self) -> float | None:
        """Age after which a packet overtaken by a delivered one is lost."""
        win = self.win
        if win.srtt is None:
            return None
        # RACK uses the latest RTT: when queues build, the smoothed RTT lags
        # behind and would declare merely delayed packets lost.
        rtt = max(win.srtt, win.latest_rtt)
        allowance = win.reorder_mult * max(self.cc.min_reorder_s, rtt / 4)
        return rtt * self.cc.rtt_factor + allowance

    def head(self) -> tuple[int, int] | None:
        """Oldest transmission still in flight as (psn, tx); drops stale entries."""
        outstanding = self.outstanding
        state, sent_tx = self.state, self.sent_tx
        while outstanding:
            psn, tx = outstanding[0]
            if state[psn] == IN_FLIGHT and sent_tx[psn] == tx:
                return psn, tx
            outstanding.popleft()
        return None

    def detect(self, now: float) -> int:
        """Declare time-threshold losses; return how many were declared."""
        threshold = self.threshold()
        if threshold is None:
            return 0
        found = 0
        while True:
            head = self.head()
            if head is None:
                break
            psn, tx = head
            # send order is time order: once the head is young enough or was
            # sent after the latest delivered packet, so is everything behind
            if tx > self.win.rack_tx or now - self.sent_at[psn] < threshold:
                break
            self.outstanding.popleft()
            self.mark_lost(psn)
            found += 1
        if found:
            self.cut(now, found)
        return found

    def mark_lost(self, psn: int) -> None:
        """Declare the transmission of ``psn`` in flight lost: it waits for its repair."""
        self.state[psn] = LOST
        self.qp.inflight -= 1
        self.win.inflight -= 1
        self.lost.append(psn)
        self.lost_detected += 1

    def cut(self, now: float, marked: int) -> None:
        """Cut the window for ``marked`` new losses (once per episode, see below)."""
        # halve once per RTT however many losses that RTT had, in all the
        # connection's messages
        win = self.win
        if now - win.last_cut >= (win.srtt or win.rto):
            win.undo_cwnd, win.undo_pending = win.cwnd, marked
            win.cwnd = win.control.on_loss(win.cwnd)
            self.loss_cuts += 1
            win.last_cut = now
            # as RACK's reo_wnd_persist: a widened allowance that caught no
            # spurious repair for many loss episodes falls back to the floor
            win.episodes_since_widening += 1
            if win.episodes_since_widening >= self.cc.reorder_persist:
                win.reorder_mult = 1
                win.episodes_since_widening = 0
        elif win.undo_cwnd is not None:
            win.undo_pending += marked  # more marks of the same episode

    def spurious(self, count: int) -> None:
        """``count`` packets marked lost were delivered after all: once every
        mark of the last cut's episode proves spurious, restore its window."""
        win = self.win
        if win.undo_cwnd is None:
            return
        win.undo_pending -= count
        if win.undo_pending <= 0:
            win.cwnd = max(win.cwnd, win.undo_cwnd)
            win.undo_cwnd = None
            self.undone_cuts += 1

    def deadline(self) -> float | None:
        """Monotonic time at which :meth:`on_timer` has work, if any."""
        head = self.head()
        if head is None:
            return None
        psn, tx = head
        when = self.sent_at[psn]
        rto_at = when + self.win.rto * self.backoff
        threshold = self.threshold()
        if threshold is not None and tx < self.win.rack_tx:
            return min(rto_at, when + threshold)
        return rto_at

    def on_timer(self, now: float) -> None:
        """Run time-threshold detection and the retransmission timeout."""
        self.detect(now)
        head = self.head()
        rto = self.win.rto
        if head is None or now - self.sent_at[head[0]] < rto * self.backoff:
            return
        # RTO: nothing was delivered for a whole timeout; everything in
        # flight is presumed lost and the timer backs off exponentially
        self.rto_count += 1
        self.timeouts_in_row += 1
        if self.timeouts_in_row > self.cc.max_timeouts:
            self.qp.failed = (f"no acknowledgement after {self.timeouts_in_row - 1} "
                              f"retransmission timeouts")
            return
        marked = 0
        while True:
            head = self.head()
            if head is None:
                break
            self.outstanding.popleft()
            self.mark_lost(head[0])
            marked += 1
        self.backoff = min(self.backoff * 2, 64)
        if rto * self.backoff > self.cc.max_rto_s:
            self.backoff = max(1, int(self.cc.max_rto_s / rto))
        self.cut(now, marked)
