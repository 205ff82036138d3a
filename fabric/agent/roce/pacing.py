"""Token bucket that paces a NIC's RoCE packets at the emulated link rate.

Everything leaving through one NIC shares one bucket, as the queue pairs of
one RDMA NIC share its port: pacing per queue pair would let three
concurrent transfers send at three times the link rate and overflow the
fabric's queues (OVS drops the excess without counting it).
"""

from __future__ import annotations


class TokenBucket:
    """Byte tokens refilled at ``rate`` up to ``depth``.

    A packet may go when the balance is positive and drives it negative by
    its size; the deficit is paid back before the next one. That keeps the
    long-run rate exact while the event loop wakes with ~1 ms granularity
    (epoll timeouts are in milliseconds).

    Parameters
    ----------
    rate_bytes_s : float
        Refill rate.
    depth_bytes : float
        Largest burst.
    now : float
        Monotonic time of creation (the bucket starts full).
    """

    __slots__ = ("rate", "depth", "tokens", "stamp")

    def __init__(self, rate_bytes_s: float, depth_bytes: float, now: float) -> None:
        if rate_bytes_s <= 0 or depth_bytes <= 0:
            raise ValueError("rate and depth must be positive")
        self.rate = rate_bytes_s
        self.depth = depth_bytes
        self.tokens = depth_bytes
        self.stamp = now

    def refill(self, now: float) -> float:
        """Add tokens for the time since the last call; return the balance."""
        tokens = self.tokens + (now - self.stamp) * self.rate
        self.tokens = tokens if tokens < self.depth else self.depth
        self.stamp = now
        return self.tokens

    def spend(self, nbytes: int) -> None:
        """Take ``nbytes`` (the balance may go negative)."""
        self.tokens -= nbytes

    def ready_at(self, now: float, reserve: float = 0.0) -> float:
        """Monotonic time the balance exceeds ``reserve`` bytes (positive by default)."""
        short = reserve - self.tokens
        return now if short < 0 else now + (short + 1) / self.rate


def bucket_for(rate_mbps: float, packet_bytes: int, now: float,
               burst_s: float = 0.002, min_packets: int = 3) -> TokenBucket:
    """A bucket for ``rate_mbps`` holding ``burst_s`` of traffic, >= ``min_packets``."""
    rate = rate_mbps * 1e6 / 8
    return TokenBucket(rate, max(rate * burst_s, min_packets * packet_bytes), now)
