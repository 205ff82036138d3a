"""Congestion control of the roce transport: how a queue pair's window moves (pure).

A controller only changes the window (in packets); loss detection, the once-
per-RTT gate of loss cuts and their undo stay with the queue pair
(:mod:`fabric.agent.roce.send`). Two algorithms:

``loss``
    AIMD: +1 packet per RTT's worth of ACKs, halved on loss. Queues fill
    until they drop; kept for comparison.
``swift``
    Delay-based, after Google's Swift (Kumar et al., SIGCOMM 2020). Every
    ACK carries the mean one-way fabric delay of the packets it acknowledges
    (all emulated hosts share one clock; the mean, not the last packet's, so
    that a sprayed flow reacts to its paths together, not to whichever one
    the last packet took). Below the target the window grows
    additively (``ai`` packets per RTT); above it, at most once per RTT, it
    shrinks in proportion to the excess, ``1 - beta * (delay - target) /
    delay``, by at most ``max_mdf``. A new flow starts with a base round trip's
    window and grows it by one packet per packet acknowledged (doubling every
    round trip) up to the queueing its target allows, unless queueing above
    half of that allowance or a loss ends that first: flows that start together
    into one queue find their share before they fill it. The target is the flow's base delay
    plus an allowance in packet times at the emulated rate. The base is the
    smallest delay seen (the switching and processing of its path: a lone
    packet passes the links' token buckets without waiting), believed up to
    ``base_cap`` packet times a link. The allowance is ``endpoint_allowance``
    (slack for the sender's NIC: a packet is stamped with the time the agent
    expects the NIC's shaped queue to let it go, kept to within a packet or
    two) plus ``hop_allowance`` per link of the path, so the target scales
    with hop count. Below one packet the window becomes a pacing gap (``rtt / cwnd``
    between packets).
``dcqcn``
    Rate-based, ECN-driven, after DCQCN (Zhu et al., SIGCOMM 2015). Switch
    queues mark ECN-capable packets CE (:mod:`fabric.emulation.ecn`); the
    receiver answers a marked packet with a CNP, at most one per interval and
    queue pair; the sender paces at its current rate ``Rc``. A CNP sets the
    target ``Rt = Rc``, cuts ``Rc *= 1 - alpha / 2`` and raises
    ``alpha = (1 - g) alpha + g``; every ``alpha_timer`` without a CNP decays
    ``alpha *= 1 - g``. Rate increase events come from a timer and a byte
    counter: while both counted fewer than ``fast_recovery`` events since the
    cut, ``Rc = (Rt + Rc) / 2`` (fast recovery); once one of them passed it,
    ``Rt`` also grows by ``ai`` (additive increase), once both did, by ``hai``
    times how far past (hyper increase). There is no window: loss is repaired
    by retransmission and does not cut the rate (a RoCE fabric relies on PFC).
``none``
    No congestion control, as an RDMA NIC with DCQCN turned off: the queue pair
    sends at line rate (its NIC's pacer) up to its outstanding limit and never
    cuts; loss is repaired by retransmission. Only link-level flow control keeps
    it from overflowing queues.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fabric.traffic.model import CONGESTION_CONTROLS as ALGORITHMS


@dataclass(frozen=True)
class SwiftParams:
    """Swift's tunables (dimensionless, or in packet times)."""

    ai: float = 1.0              # additive increase, packets per RTT
    beta: float = 0.8            # multiplicative decrease per unit of relative excess delay
    max_mdf: float = 0.5         # largest cut at once
    endpoint_allowance: float = 2.0  # slack for the sender's NIC, packet times
    # queueing allowed per link of the path, packet times. Sprayed packets meet
    # short-lived queues at every spine port even when the paths are balanced, and
    # swift must not cut its window for those (measured, 2 against 4:
    # docs/benchmarks.md, "Sizing the collisions workloads")
    hop_allowance: float = 4.0
    base_cap: float = 0.5        # largest base delay believed per link, packet times
    min_cwnd: float = 0.05       # packets (below 1: paced)

    def allowance(self, links: int) -> float:
        """Queueing (packet times) the target allows above the base on a path of ``links``
        links (0: unknown, taken as host, switch, host)."""
        return self.endpoint_allowance + (links or 2) * self.hop_allowance

    def initial_window(self, links: int) -> float:
        """Window a new flow starts with: a base round trip at line rate on a path of
        ``links`` store-and-forward links (a packet time per link, and the NIC's slack),
        as an RDMA NIC starts a flow at line rate. The window then doubles every round
        trip while the queueing stays below half the allowance, up to
        :meth:`allowance` (see :class:`SwiftControl`). Starting with the whole
        allowance overfilled a shared bottleneck when flows started together, and a
        fixed small window left long paths window-bound (measured: docs/benchmarks.md,
        "Four flows on one bottleneck" and "Sizing the collisions workloads")."""
        return self.endpoint_allowance + (links or 2)


class LossControl:
    """AIMD on loss."""

    name = "loss"

    def __init__(self, max_cwnd: float) -> None:
        self.max_cwnd = max_cwnd

    def on_ack(self, cwnd: float, newly: int, delay: float | None, now: float,
               rtt: float) -> float:
        """Window after ``newly`` packets were acknowledged."""
        return min(cwnd + newly / max(cwnd, 1.0), self.max_cwnd)

    def initial_window(self, default: float) -> float:
        """Window of a new queue pair: ``default`` (the queue pair's configured one)."""
        return default

    def on_loss(self, cwnd: float) -> float:
        """Window after a loss episode (called at most once per RTT)."""
        return max(1.0, cwnd / 2)


class SwiftControl:
    """Delay-based window control (see the module docstring).

    Parameters
    ----------
    packet_time : float
        Seconds one full-size data packet takes at the emulated host rate.
    max_cwnd : float
        Largest window, packets.
    hops : int
        Links on the flow's path (0: unknown, taken as 2: host, switch, host).
    params : SwiftParams
        Tunables.
    """

    name = "swift"

    def __init__(self, packet_time: float, max_cwnd: float, hops: int = 0,
                 params: SwiftParams = SwiftParams()) -> None:
        if packet_time <= 0:
            raise ValueError(f"packet_time must be > 0, got {packet_time}")
        self.packet_time = packet_time
        self.max_cwnd = max_cwnd
        self.hops = hops or 2
        self.params = params
        self.base_delay = math.inf   # smallest one-way delay seen
        self.last_decrease = -math.inf
        self.latest_delay: float | None = None
        self.decreases = 0           # delay cuts, reported per transfer
        self.slow_start = True       # doubling: see on_ack

    def initial_window(self, default: float) -> float:
        """Window of a new queue pair: the path's (see
        :meth:`SwiftParams.initial_window`), whatever ``default`` says."""
        return self.params.initial_window(self.hops)

    def target(self) -> float:
        """Target one-way delay: the base plus the per-hop allowance."""
        if math.isinf(self.base_delay):
            return math.inf
        p = self.params
        # a flow that never saw an empty queue would take a queue for its base and
        # out-push the others: an unloaded path costs well under a packet time a link
        base = min(self.base_delay, self.hops * p.base_cap * self.packet_time)
        return base + p.allowance(self.hops) * self.packet_time

    def on_ack(self, cwnd: float, newly: int, delay: float | None, now: float,
               rtt: float) -> float:
        """Window after an ACK that acknowledged ``newly`` packets and measured ``delay``."""
        p = self.params
        if delay is None:
            return cwnd
        self.latest_delay = delay
        self.base_delay = min(self.base_delay, delay)
        target = self.target()
        allowed = p.allowance(self.hops) * self.packet_time
        if delay > target - allowed / 2:
            # half the allowed queueing: the window is past a base round trip, so the
            # flow already runs at line rate, and the rest of the allowance covers
            # the round trip of lag before flows starting together see their queue
            self.slow_start = False
        if delay < target:
            if self.slow_start:
                cwnd += newly
                # up to the queueing the target allows: a NIC-bound flow's window would
                # otherwise grow without a signal, far past what a cut could bring back
                self.slow_start = cwnd < p.allowance(self.hops)
            elif newly:
                cwnd += p.ai * newly / cwnd if cwnd >= 1 else p.ai * newly
        elif now - self.last_decrease >= rtt:
            cwnd *= max(1 - p.beta * (delay - target) / delay, 1 - p.max_mdf)
            self.last_decrease = now
            self.decreases += 1
        return min(max(cwnd, p.min_cwnd), self.max_cwnd)

    def on_loss(self, cwnd: float) -> float:
        """Window after a loss episode (called at most once per RTT)."""
        self.slow_start = False
        return max(cwnd * (1 - self.params.max_mdf), self.params.min_cwnd)


@dataclass(frozen=True)
class DcqcnParams:
    """DCQCN's tunables: timers and counters in packet times and packets at the
    emulated host rate, rates as fractions of it.

    DCQCN's published values (40 Gbit/s: K = T = 55 us, B = 10 MB, g = 1/256,
    R_AI = 40 Mbit/s, R_HAI = 200 Mbit/s) are ~180 packet times, ~6700 packets,
    0.1 % and 0.5 % of the line rate. Here an RTT is 5-10 packet times, not
    30-60, and a message a few thousand packets, not millions: the timers are
    shorter by about that ratio, the byte counter is 32 packets, and the
    increase steps are 20 and 10 times larger, so that a flow recovers from a
    cut within its message; ``g`` is as published. Chosen for utilisation
    against losses on a bottleneck shared by 2, 4 and 8 senders.
    """

    g: float = 1 / 256            # alpha's gain (as published)
    alpha_timer: float = 24.0     # packet times without a CNP per alpha decay (K)
    increase_timer: float = 24.0  # packet times per timer increase event (T)
    byte_counter: float = 32.0    # full-size packets sent per byte-counter event (B)
    fast_recovery: int = 5        # events of fast recovery after a cut (F)
    ai: float = 0.02              # additive increase of Rt, fraction of line rate
    hai: float = 0.05             # hyper increase step, fraction of line rate
    min_rate: float = 0.01        # floor of Rc, fraction of line rate
    max_events: int = 256         # timer events caught up at once after idling


class DcqcnControl:
    """ECN-driven rate control (see the module docstring).

    Parameters
    ----------
    packet_time : float
        Seconds one full-size data packet takes at the emulated host rate.
    line_rate : float
        Emulated host rate, bytes per second (also the start rate).
    max_cwnd : float
        The queue pair's outstanding limit, packets (never moved).
    now : float
        Monotonic time the timers start from.
    params : DcqcnParams
        Tunables.
    """

    name = "dcqcn"

    def __init__(self, packet_time: float, line_rate: float, max_cwnd: float, now: float,
                 params: DcqcnParams = DcqcnParams()) -> None:
        if packet_time <= 0 or line_rate <= 0:
            raise ValueError("packet_time and line_rate must be > 0")
        self.params = params
        self.line_rate = line_rate
        self.max_cwnd = max_cwnd
        self.alpha_period = params.alpha_timer * packet_time
        self.increase_period = params.increase_timer * packet_time
        self.byte_period = params.byte_counter * packet_time * line_rate
        self.rate = line_rate            # Rc, bytes/s
        self.target = line_rate          # Rt
        self.alpha = 1.0
        self.alpha_since = now           # start of the running alpha period
        self.increase_since = now        # start of the running increase period
        self.sent_since = 0.0            # bytes towards the next byte-counter event
        self.timer_events = 0            # since the last cut (T)
        self.byte_events = 0             # since the last cut (BC)

    def on_cnp(self, now: float) -> None:
        """A congestion notification: cut the rate, raise alpha, restart the counters."""
        self.advance(now)
        p = self.params
        self.target = self.rate
        self.rate = max(self.rate * (1 - self.alpha / 2), p.min_rate * self.line_rate)
        self.alpha = (1 - p.g) * self.alpha + p.g
        self.alpha_since = self.increase_since = now
        self.sent_since = 0.0
        self.timer_events = self.byte_events = 0

    def on_send(self, wire_bytes: int, now: float) -> float:
        """Count a packet against the byte counter; return the pacing gap after it."""
        self.advance(now)
        self.sent_since += wire_bytes
        while self.sent_since >= self.byte_period:
            self.sent_since -= self.byte_period
            self.byte_events += 1
            self._increase()
        return wire_bytes / self.rate

    def advance(self, now: float) -> None:
        """Run the alpha and increase timers up to ``now`` (lazily: no wakeups)."""
        p = self.params
        periods = int((now - self.alpha_since) / self.alpha_period)
        if periods > 0:
            self.alpha *= (1 - p.g) ** periods
            self.alpha_since += periods * self.alpha_period
        periods = int((now - self.increase_since) / self.increase_period)
        if periods > 0:
            for _ in range(min(periods, p.max_events)):
                self.timer_events += 1
                self._increase()
            self.increase_since += periods * self.increase_period

    def _increase(self) -> None:
        p = self.params
        fewer, more = sorted((self.timer_events, self.byte_events))
        if more > p.fast_recovery:
            if fewer > p.fast_recovery:
                self.target += (fewer - p.fast_recovery) * p.hai * self.line_rate
            else:
                self.target += p.ai * self.line_rate
            self.target = min(self.target, self.line_rate)
        self.rate = min((self.target + self.rate) / 2, self.line_rate)

    def initial_window(self, default: float) -> float:
        """Outstanding limit until the first ACK: ``default``."""
        return default

    def on_ack(self, cwnd: float, newly: int, delay: float | None, now: float,
               rtt: float) -> float:
        """No window: the outstanding limit stays."""
        return self.max_cwnd

    def on_loss(self, cwnd: float) -> float:
        """Loss does not cut a DCQCN sender (retransmission repairs it)."""
        return cwnd


class NoControl:
    """No congestion control: the window is the queue pair's outstanding limit."""

    name = "none"

    def __init__(self, max_cwnd: float) -> None:
        self.max_cwnd = max_cwnd

    def initial_window(self, default: float) -> float:
        """Line rate from the start: the whole outstanding limit."""
        return self.max_cwnd

    def on_ack(self, cwnd: float, newly: int, delay: float | None, now: float,
               rtt: float) -> float:
        """Nothing moves the window."""
        return self.max_cwnd

    def on_loss(self, cwnd: float) -> float:
        """Nor does loss."""
        return cwnd


Control = LossControl | SwiftControl | DcqcnControl | NoControl


def make_control(algorithm: str, packet_time: float, max_cwnd: float, hops: int = 0,
                 line_rate: float = 0.0, now: float = 0.0) -> Control:
    """The controller named ``algorithm`` (one of :data:`ALGORITHMS`) for a flow over
    ``hops`` links; a rate-based one starts at ``line_rate`` (bytes/s, as its
    sender counts them) and monotonic time ``now``."""
    if algorithm == "swift":
        return SwiftControl(packet_time, max_cwnd, hops)
    if algorithm == "loss":
        return LossControl(max_cwnd)
    if algorithm == "dcqcn":
        return DcqcnControl(packet_time, line_rate, max_cwnd, now)
    if algorithm == "none":
        return NoControl(max_cwnd)
    raise ValueError(f"congestion control must be one of {ALGORITHMS}, got {algorithm!r}")
