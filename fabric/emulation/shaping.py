"""Egress shaping as ``tc -batch`` lines (pure code).

Each emulated link direction gets an HTB root with one class at the link
rate and a bounded ``pfifo_head_drop`` leaf. Head-drop, not tail-drop: when
a full tail-drop queue refuses a packet, userspace OVS discards the rest of
its 32-packet send batch whatever its class (DESIGN.md section 3). Netem is
not used: this kernel has none.

Lane ``i`` (see :mod:`fabric.model.lanes`) is class ``1:(i+1)`` under a parent
class at the link rate; u32 filters on the DSCP bits classify packets. A queue
that marks ECN has its marker (:mod:`fabric.emulation.ecn`) as the first
filter; it never classifies.
"""

from __future__ import annotations

from fabric.model.lanes import SINGLE_LANE, LaneConfig
from fabric.traffic.model import TCP_PACKET_BYTES

DEFAULT_QUEUE_PKTS = 64
LINK_CLASS = 0xFFFE  # parent class that caps all lanes at the link rate
# Every emulated link carries jumbo frames (RoCE's 4096-byte path MTU needs more than
# 1500); TCP keeps a 1500-byte MTU's segments by the hosts' routes (hostconfig).
LINK_MTU = 9000
ETHERNET_HEADER_BYTES = 14  # counted by HTB; no FCS
MAX_FRAME_BYTES = LINK_MTU + ETHERNET_HEADER_BYTES
DEFAULT_FRAME_BYTES = TCP_PACKET_BYTES + ETHERNET_HEADER_BYTES  # a 1500-byte packet's
LANE_FILTER_PRIO = 2  # after an ECN marker's filter (priority 1)
# HTB warns above 200000 bytes of quantum and needs at least one frame.
_MAX_QUANTUM = 200_000


def htb_quantum(rate_mbps: float) -> int:
    """Bytes a class may send per round: rate/10 clamped to [largest frame, 200000]."""
    return int(min(_MAX_QUANTUM, max(MAX_FRAME_BYTES, rate_mbps * 1e6 / 8 / 10)))


def shape_lines(dev: str, rate_mbps: float, queue_pkts: int = DEFAULT_QUEUE_PKTS,
                lanes: LaneConfig = SINGLE_LANE) -> list[str]:
    """Return ``tc -batch`` lines that shape ``dev``'s egress.

    Parameters
    ----------
    dev : str
        Interface name (validated by the graph: letters, digits, ``-``).
    rate_mbps : float
        Link rate: the ceiling of the whole interface and of every lane.
    queue_pkts : int
        Egress buffer of each lane, in packets.
    lanes : LaneConfig
        Virtual lanes: lane ``i`` is class ``1:(i+1)`` with its guaranteed
        share and HTB priority; u32 filters on the DSCP bits pick the lane;
        unmatched packets go to the default lane.
    """
    if queue_pkts < 1:
        raise ValueError(f"queue must hold at least one packet, got {queue_pkts}")
    link = _kbit(rate_mbps)
    lines = [
        f"qdisc replace dev {dev} root handle 1: htb default {lanes.default_queue + 1:x}",
        f"class add dev {dev} parent 1: classid 1:{LINK_CLASS:x} htb rate {link} ceil {link} "
        f"quantum {htb_quantum(rate_mbps)}",
    ]
    for i, lane in enumerate(lanes.lanes):
        rate = lane.share * rate_mbps
        lines += [
            f"class add dev {dev} parent 1:{LINK_CLASS:x} classid 1:{i + 1:x} htb "
            f"rate {_kbit(rate)} ceil {link} prio {lane.prio} quantum {htb_quantum(rate)}",
            f"qdisc add dev {dev} parent 1:{i + 1:x} handle {i + 10:x}: "
            f"pfifo_head_drop limit {queue_pkts}",
        ]
        lines += [f"filter add dev {dev} parent 1: protocol ip prio {LANE_FILTER_PRIO} u32 "
                  f"match ip dsfield 0x{dscp << 2:02x} 0xfc flowid 1:{i + 1:x}"
                  for dscp in lane.dscp]
    return lines


def rate_change_lines(dev: str, rate_mbps: float, lanes: LaneConfig = SINGLE_LANE) -> list[str]:
    """``tc -batch`` lines that move ``dev``'s shaping (from :func:`shape_lines`, same
    lanes) to ``rate_mbps``, in place: queued packets and counters stay."""
    link = _kbit(rate_mbps)
    lines = [f"class change dev {dev} parent 1: classid 1:{LINK_CLASS:x} htb rate {link} "
             f"ceil {link} quantum {htb_quantum(rate_mbps)}"]
    for i, lane in enumerate(lanes.lanes):
        rate = lane.share * rate_mbps
        lines.append(f"class change dev {dev} parent 1:{LINK_CLASS:x} classid 1:{i + 1:x} htb "
                     f"rate {_kbit(rate)} ceil {link} prio {lane.prio} "
                     f"quantum {htb_quantum(rate)}")
    return lines


def _kbit(mbps: float) -> str:
    return f"{max(1, round(mbps * 1000))}kbit"
