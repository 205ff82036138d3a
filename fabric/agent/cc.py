"""Congestion control of the roce transport: how a queue pair's window moves (pure).

A controller only changes the window (in packets); loss detection, the once-
per-RTT gate of loss cuts and their undo stay with the queue pair
(:mod:`fabric.agent.roce_send`). Two algorithms:

``loss``
    AIMD: +1 packet per RTT's worth of ACKs, halved on loss. Queues fill
    until they drop; kept for comparison.
``swift``
    Delay-based, after Google's Swift (Kumar et al., SIGCOMM 2020). Every
    ACK carries the one-way fabric delay of the packet that triggered it
    (all emulated hosts share one clock). Below the target the window grows
    additively (``ai`` packets per RTT); above it, at most once per RTT, it
    shrinks in proportion to the excess, ``1 - beta * (delay - target) /
    delay``, by at most ``max_mdf``. The target is the flow's base delay
    plus an allowance in packet times at the emulated rate. The base is the
    smallest delay seen (the switching and processing of its path: a lone
    packet passes the links' token buckets without waiting), believed up to
    ``base_cap`` packet times a link. The allowance is ``endpoint_allowance``
    (the sender's own pacing burst waits in its NIC's queue) plus
    ``hop_allowance`` per link of the path, so the target scales with hop
    count. Below one packet the window becomes a pacing gap (``rtt / cwnd``
    between packets).
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
    endpoint_allowance: float = 2.0  # queueing allowed at the sender's NIC, packet times
    hop_allowance: float = 2.0   # queueing allowed per link of the path, packet times
    base_cap: float = 0.5        # largest base delay believed per link, packet times
    min_cwnd: float = 0.05       # packets (below 1: paced)


class LossControl:
    """AIMD on loss."""

    name = "loss"

    def __init__(self, max_cwnd: float) -> None:
        self.max_cwnd = max_cwnd

    def on_ack(self, cwnd: float, newly: int, delay: float | None, now: float,
               rtt: float) -> float:
        """Window after ``newly`` packets were acknowledged."""
        return min(cwnd + newly / max(cwnd, 1.0), self.max_cwnd)

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

    def target(self) -> float:
        """Target one-way delay: the base plus the per-hop allowance."""
        if math.isinf(self.base_delay):
            return math.inf
        p = self.params
        # a flow that never saw an empty queue would take a queue for its base and
        # out-push the others: an unloaded path costs well under a packet time a link
        base = min(self.base_delay, self.hops * p.base_cap * self.packet_time)
        return base + (p.endpoint_allowance + self.hops * p.hop_allowance) * self.packet_time

    def on_ack(self, cwnd: float, newly: int, delay: float | None, now: float,
               rtt: float) -> float:
        """Window after an ACK that acknowledged ``newly`` packets and measured ``delay``."""
        p = self.params
        if delay is None:
            return cwnd
        self.latest_delay = delay
        self.base_delay = min(self.base_delay, delay)
        target = self.target()
        if delay < target:
            if newly:
                cwnd += p.ai * newly / cwnd if cwnd >= 1 else p.ai * newly
        elif now - self.last_decrease >= rtt:
            cwnd *= max(1 - p.beta * (delay - target) / delay, 1 - p.max_mdf)
            self.last_decrease = now
            self.decreases += 1
        return min(max(cwnd, p.min_cwnd), self.max_cwnd)

    def on_loss(self, cwnd: float) -> float:
        """Window after a loss episode (called at most once per RTT)."""
        return max(cwnd * (1 - self.params.max_mdf), self.params.min_cwnd)


def make_control(algorithm: str, packet_time: float, max_cwnd: float, hops: int = 0
                 ) -> LossControl | SwiftControl:
    """The controller named ``algorithm`` (one of :data:`ALGORITHMS`) for a flow over
    ``hops`` links."""
    if algorithm == "swift":
        return SwiftControl(packet_time, max_cwnd, hops)
    if algorithm == "loss":
        return LossControl(max_cwnd)
    raise ValueError(f"congestion control must be one of {ALGORITHMS}, got {algorithm!r}")
