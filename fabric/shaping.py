"""Egress shaping as ``tc -batch`` lines (pure code).

Each emulated link direction gets an HTB root with one class at the link
rate and a bounded ``pfifo_head_drop`` leaf. Head-drop, not tail-drop: when
a full tail-drop queue refuses a packet, userspace OVS discards the rest of
its 32-packet send batch whatever its class (DESIGN.md section 3). Netem is
not used: this kernel has none.
"""

from __future__ import annotations

DEFAULT_QUEUE_PKTS = 64
MTU_BYTES = 1514
# HTB warns above 200000 bytes of quantum and needs at least one MTU.
_MAX_QUANTUM = 200_000


def htb_quantum(rate_mbps: float) -> int:
    """Bytes a class may send per round: rate/10 clamped to [MTU, 200000]."""
    return int(min(_MAX_QUANTUM, max(MTU_BYTES, rate_mbps * 1e6 / 8 / 10)))


def shape_lines(dev: str, rate_mbps: float, queue_pkts: int = DEFAULT_QUEUE_PKTS) -> list[str]:
    """Return ``tc -batch`` lines that shape ``dev``'s egress.

    Parameters
    ----------
    dev : str
        Interface name (validated by the graph: letters, digits, ``-``).
    rate_mbps : float
        Link rate; also the ceiling.
    queue_pkts : int
        Egress buffer in packets.
    """
    if queue_pkts < 1:
        raise ValueError(f"queue must hold at least one packet, got {queue_pkts}")
    rate = f"{rate_mbps * 1000:.0f}kbit"
    return [
        f"qdisc replace dev {dev} root handle 1: htb default 1",
        f"class add dev {dev} parent 1: classid 1:1 htb rate {rate} ceil {rate} "
        f"quantum {htb_quantum(rate_mbps)}",
        f"qdisc add dev {dev} parent 1:1 handle 10: pfifo_head_drop limit {queue_pkts}",
    ]
