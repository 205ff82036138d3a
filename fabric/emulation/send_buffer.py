"""How large userspace OVS's send socket must be so that it never drops a packet.

In userspace mode ovs-vswitchd sends every switch's packets through one AF_PACKET
socket. A packet a switch port's queue holds is still charged to that socket, so the
socket's send buffer bounds what all the fabric's queues hold together; past it the
send fails and OVS drops the packet, counted nowhere but its log. The buffer must
hold every switch queue full at once: under flow control a switch's lossless lanes
share its buffer, and each lossy lane has a queue of its own on every port.
"""

from __future__ import annotations

import networkx as nx

from fabric.model import graph as fg
from fabric.model.flowcontrol import FlowControl, lossless_lanes, switch_buffer_pkts
from fabric.model.lanes import LaneConfig

MIN_SEND_BUFFER_BYTES = 4 * 1024 * 1024
# a socket's buffer is an int, doubled by the kernel's accounting in places: stay far
# below 2 GiB
MAX_SEND_BUFFER_BYTES = 1024 * 1024 * 1024
# an AF_PACKET send's skb: the frame rounded up to its slab (a power of two) plus the
# skb's own overhead; twice the frame and a KiB is above it for every frame size
SKB_OVERHEAD_BYTES = 1024


def fabric_queue_packets(graph: nx.Graph, queue_pkts: int, lanes: LaneConfig,
                         flow_control: FlowControl | None) -> int:
    """Full-size packets all switch egress queues of ``graph`` can hold at once (pure).

    Parameters
    ----------
    graph : nx.Graph
        The fabric.
    queue_pkts : int
        A lossy lane's egress queue on one port, packets.
    lanes : LaneConfig
        The lanes every port has.
    flow_control : FlowControl, optional
        Link-level flow control; its lossless lanes share each switch's buffer.
    """
    lossless = set(lossless_lanes(lanes)) if flow_control else set()
    lossy_count = len(lanes.lanes) - len(lossless)
    total = 0
    for switch in fg.switches(graph):
        ports = graph.degree(switch)
        total += lossy_count * queue_pkts * ports
        if lossless and flow_control is not None:
            total += switch_buffer_pkts(graph, switch, flow_control, queue_pkts)
    return total


def send_buffer_bytes(packets: int, frame_bytes: int) -> int:
    """The send buffer that holds ``packets`` frames of ``frame_bytes`` (pure): a power
    of two, at least :data:`MIN_SEND_BUFFER_BYTES`, at most :data:`MAX_SEND_BUFFER_BYTES`
    (a fabric that needs more is caught by the run's ``ovs_send_drops`` check)."""
    need = packets * (2 * frame_bytes + SKB_OVERHEAD_BYTES)
    size = MIN_SEND_BUFFER_BYTES
    while size < need and size < MAX_SEND_BUFFER_BYTES:
        size *= 2
    return size
