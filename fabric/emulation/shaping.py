"""Egress shaping as ``tc -batch`` lines (pure code).

Each emulated link direction gets an HTB root with one class at the link
rate and a bounded ``pfifo_head_drop`` leaf. Head-drop, not tail-drop: when
a full tail-drop queue refuses a packet, userspace OVS discards the rest of
its 32-packet send batch whatever its class (docs/platform.md, "Head-drop leaves"). Netem is
not used: this kernel has none.

Lane ``i`` (see :mod:`fabric.model.lanes`) is class ``1:(i+1)`` under a parent
class at the link rate; u32 filters on the DSCP bits classify packets. A queue
that marks ECN has its marker (:mod:`fabric.emulation.ecn`) as the first
filter; it never classifies.

Under link-level flow control a lossless lane's class holds a gate (a TBF,
``(i+0x20):``) above its leaf, which the flow-control daemon closes to pause the
lane (:mod:`fabric.host.tcgate`); its leaf is as large as the switch's whole
buffer, since the switch's accounting, not the leaf, bounds what it holds.

On an endpoint's NIC (``control_first``) each lane's leaf is a two-class
HTB that serves its first class first: the roce transport's ACKs and CNPs (UDP
from port 4791) go out before the lane's queued data, as an RDMA NIC sends a
responder's ACK ahead of its send queues' data instead of behind them. So do TCP's
pure ACKs (no payload, no FIN) and everything the TCP transport's receiving side
sends (from its listening port: ACKs and DONE frames), as a Linux host's per-flow
qdisc (fq_codel, which this kernel lacks) serves a flow that sends little ahead of
a bulk flow's backlog. Nothing of a flow's data is reordered: a packet with
payload goes first only from a side that sends no bulk data. They stay in their
lane: a paused lane holds its ACKs too, as PFC pauses a whole priority.
"""

from __future__ import annotations

from fabric.model.lanes import SINGLE_LANE, LaneConfig
from fabric.traffic.model import ROCE_PORT, TCP_DATA_PORT, TCP_PACKET_BYTES

DEFAULT_QUEUE_PKTS = 64
LINK_CLASS = 0xFFFE  # parent class that caps all lanes at the link rate
GATE_HANDLE = 0x20   # lane i's gate is qdisc (0x20 + i):, its leaf (10 + i):
LEAF_HANDLE = 10
# control_first: lane i's leaf is an HTB (0x40 + i): whose first class's FIFO (0x50 + i):
# holds the ACKs and CNPs and whose second's is the data's, (10 + i): as usual
ACK_FIRST_HANDLE = 0x40
CONTROL_LEAF_HANDLE = 0x50
ORDER_ONLY_RATE = "10gbit"  # above any emulated link (capacity caps them far lower)
# An open gate's rate, as a multiple of the link's: far above it, so that only the HTB
# class shapes. Its burst is one full-size frame of the workload: a closing gate (whose
# tokens a change refills) lets out at most that much more, plus the frame being sent;
# a larger frame would be dropped at the gate (counted as a drop of its lossless lane).
GATE_OPEN_FACTOR = 10
# Every emulated link carries jumbo frames (RoCE's 4096-byte path MTU needs more than
# 1500); TCP keeps a 1500-byte MTU's segments by the hosts' routes (hostconfig).
LINK_MTU = 9000
ETHERNET_HEADER_BYTES = 14  # counted by HTB; no FCS
MAX_FRAME_BYTES = LINK_MTU + ETHERNET_HEADER_BYTES
DEFAULT_FRAME_BYTES = TCP_PACKET_BYTES + ETHERNET_HEADER_BYTES  # a 1500-byte packet's
LANE_FILTER_PRIO = 2  # after an ECN marker's filter (priority 1)
# HTB warns above 200000 bytes of quantum and needs at least one frame.
_MAX_QUANTUM = 200_000
IPV4_HEADER_BYTES = 20  # the hosts send no IP options
TCP_DATA_OFFSETS = range(5, 16)  # TCP header length in 32-bit words: 20-60 bytes


def htb_quantum(rate_mbps: float) -> int:
    """Bytes a class may send per round: rate/10 clamped to [largest frame, 200000]."""
    return int(min(_MAX_QUANTUM, max(MAX_FRAME_BYTES, rate_mbps * 1e6 / 8 / 10)))


def gate_handle(lane: int) -> int:
    """The 32-bit tc handle of lane ``lane``'s gate qdisc."""
    return (GATE_HANDLE + lane) << 16


def lane_class(lane: int) -> int:
    """The 32-bit tc handle of lane ``lane``'s HTB class ``1:(lane+1)``."""
    return (1 << 16) | (lane + 1)


def gate_open_bytes_per_s(rate_mbps: float) -> int:
    """An open gate's rate on a link of ``rate_mbps``, in bytes per second."""
    return int(GATE_OPEN_FACTOR * rate_mbps * 1e6 / 8)


def shape_lines(dev: str, rate_mbps: float, queue_pkts: int = DEFAULT_QUEUE_PKTS,
                lanes: LaneConfig = SINGLE_LANE, gated: dict[int, int] | None = None,
                gate_burst: int = MAX_FRAME_BYTES, control_first: bool = False) -> list[str]:
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
    gated : dict, optional
        Lane index -> leaf packets of the lanes that get a gate (lossless lanes
        under flow control); their leaves take that size instead of ``queue_pkts``.
    gate_burst : int
        A gate's burst, bytes: the workload's full-size frame.
    control_first : bool
        An endpoint's NIC: the transport's ACKs and CNPs leave before their
        lane's queued data (see the module docstring).
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
        ]
        leaf_parent = f"1:{i + 1:x}"
        if gated and i in gated:
            gate = f"{GATE_HANDLE + i:x}:"
            lines.append(f"qdisc add dev {dev} parent {leaf_parent} handle {gate} tbf "
                         f"rate {gate_open_bytes_per_s(rate_mbps)}bps burst {gate_burst} "
                         f"limit {gate_burst}")
            leaf_parent = f"{gate}1"
        limit = gated[i] if gated and i in gated else queue_pkts
        if control_first:
            lines += _control_first_lines(dev, leaf_parent, i, limit)
        else:
            lines.append(f"qdisc add dev {dev} parent {leaf_parent} "
                         f"handle {LEAF_HANDLE + i:x}: pfifo_head_drop limit {limit}")
        lines += [f"filter add dev {dev} parent 1: protocol ip prio {LANE_FILTER_PRIO} u32 "
                  f"match ip dsfield 0x{dscp << 2:02x} 0xfc flowid 1:{i + 1:x}"
                  for dscp in lane.dscp]
    return lines


def _control_first_lines(dev: str, parent: str, lane: int, limit: int) -> list[str]:
    """Lane ``lane``'s leaf under ``parent`` as an HTB of its own (this kernel has no
    prio qdisc) whose first class, served first, takes the transport's control packets
    and whose second, the default, the data. Both run far above the link rate: the
    class above shapes; this one only orders."""
    leaf = f"{ACK_FIRST_HANDLE + lane:x}:"
    rate = f"rate {ORDER_ONLY_RATE} ceil {ORDER_ONLY_RATE} quantum {MAX_FRAME_BYTES}"
    lines = [
        f"qdisc add dev {dev} parent {parent} handle {leaf} htb default 2",
        f"class add dev {dev} parent {leaf} classid {leaf}1 htb {rate} prio 0",
        f"class add dev {dev} parent {leaf} classid {leaf}2 htb {rate} prio 1",
        f"qdisc add dev {dev} parent {leaf}1 handle {CONTROL_LEAF_HANDLE + lane:x}: "
        f"pfifo_head_drop limit {limit}",
        f"qdisc add dev {dev} parent {leaf}2 handle {LEAF_HANDLE + lane:x}: "
        f"pfifo_head_drop limit {limit}",
    ]
    return lines + [f"filter add dev {dev} parent {leaf} protocol ip prio 1 u32 {match} "
                    f"flowid {leaf}1" for match in control_matches()]


def control_matches() -> list[str]:
    """u32 matches of the packets an endpoint's NIC sends ahead of its lane's data.

    The roce transport's ACKs and CNPs (UDP from its port), the TCP transport's
    receiving side (TCP from its listening port), and any TCP pure ACK: an IPv4 packet
    without options whose total length is its TCP header's (one match per header
    length) and whose FIN is clear (a FIN closes a stream of data; ahead of that data
    it would look like a loss).
    """
    matches = [f"match ip protocol 17 0xff match ip sport {ROCE_PORT} 0xffff",
               f"match ip protocol 6 0xff match ip sport {TCP_DATA_PORT} 0xffff"]
    tcp = IPV4_HEADER_BYTES  # where the TCP header starts
    for words in TCP_DATA_OFFSETS:
        matches.append(f"match ip protocol 6 0xff match u8 0x45 0xff at 0 "
                       f"match u16 {IPV4_HEADER_BYTES + 4 * words} 0xffff at 2 "
                       f"match u8 0x{words << 4:02x} 0xf0 at {tcp + 12} "
                       f"match u8 0x00 0x01 at {tcp + 13}")
    return matches


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
