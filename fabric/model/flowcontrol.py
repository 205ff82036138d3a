"""Link-level flow control (PFC, InfiniBand's credits) as plain data: what a lossless
fabric's switches do with their buffers, in packet times.

Every switch has one shared buffer. The bytes it holds are charged to the port
and lane they arrived on: the first ``reserve`` of a port and lane are its own,
the rest comes from the shared buffer. A port and lane holding more than a
dynamic threshold, the free shared buffer times ``2**-alpha_shift``, pauses that
lane on its link at the sender; whatever is still in flight then lands in its
``headroom``. It resumes once its headroom is empty and its shared use is
``resume`` below the threshold. The design is the shared-buffer MMU of the ns-3
RDMA simulators (HPCC's ``switch-mmu.cc``): reserve 4 KB, resume offset 3 KB,
alpha 1/8, headroom three times a link's rate x delay.

Sizes are in packet times at the link rate (a full-size frame each), like every
other timer of the emulation: the emulated links run ~10^5 times slower than
the modelled ones, and a threshold in bytes of the real fabric would not scale.
A pause (and a resume) takes effect ``reaction`` packet times after the packet
that asked for it: a real switch reacts in ~1 us, a few packet times at 400 Gbit/s
(8 of 1500-byte frames at 100 Gbit/s, 12 of 4 KB frames at 400). The emulation's
own latency, from that packet to the sender's gate, is far below a packet time
(``benchmarks/pfc.py``; docs/benchmarks.md, "Flow control (PFC)"), so the reaction
is modelled: the daemon waits out the rest. The headroom must cover what arrives
after the threshold is crossed: what the link carries during the reaction, what
the sender had already let out (its gate's burst: at most two frames) and the
frame on the wire.

A pause that lasts longer than the watchdog is broken (RDMA NICs and switches
stop honouring a storm of pauses after 100 ms): the lane is released and, for
as long again, not paused. The watchdog is given in the modelled fabric's time
and converted to packet times at its physical rate.

A pause held longer than ``deadlock_after_pkts`` on every link of a cycle of buffer
dependencies is a deadlock (:mod:`fabric.emulation.deadlock_watch` reports it while a
run goes on); the watchdog, when it is the shorter, breaks it before it is seen.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from fabric.errors import UserError
from fabric.model import graph as fg
from fabric.model.lanes import LaneConfig

MODES = ("none", "pfc")
IN_FLIGHT_FRAMES = 3  # a closing gate's burst (two frames) and the frame on the wire


class FlowControlError(UserError, ValueError):
    """Flow-control settings that cannot be applied."""


@dataclass(frozen=True)
class FlowControl:
    """The lossless switches' buffer settings, in packet times (full-size frames)."""

    buffer_pkts_per_port: float | None = None  # None: the lossy egress queue's size
    reserve_pkts: float = 1.0
    headroom_pkts: float = 8.0
    reaction_pkts: float = 3.0  # from the packet over Xoff to the sender's pause
    resume_pkts: float = 1.0
    alpha_shift: int = 3
    watchdog_ms: float = 100.0  # in the modelled fabric's time
    deadlock_after_pkts: float = 200.0  # a pause held this long counts towards a deadlock

    def __post_init__(self) -> None:
        for name in ("reserve_pkts", "headroom_pkts", "resume_pkts", "reaction_pkts"):
            if not getattr(self, name) >= 0:
                raise FlowControlError(f"flow control: {name} must be >= 0, "
                                       f"got {getattr(self, name)}")
        if self.headroom_pkts < self.reaction_pkts + IN_FLIGHT_FRAMES:
            raise FlowControlError(
                f"flow control: headroom_pkts must cover the reaction ({self.reaction_pkts:g}"
                f" packets) and the {IN_FLIGHT_FRAMES} frames a closing gate still lets out or"
                f" has on the wire, got {self.headroom_pkts:g}")
        if not 0 <= self.alpha_shift <= 10:
            raise FlowControlError(f"flow control: alpha_shift must be 0..10, "
                                   f"got {self.alpha_shift}")
        if self.buffer_pkts_per_port is not None and not self.buffer_pkts_per_port > 0:
            raise FlowControlError(f"flow control: buffer_pkts_per_port must be > 0, got "
                                   f"{self.buffer_pkts_per_port}")
        if not self.deadlock_after_pkts > 0:
            raise FlowControlError(f"flow control: deadlock_after_pkts must be > 0, "
                                   f"got {self.deadlock_after_pkts}")
        if not self.watchdog_ms > 0:
            raise FlowControlError(f"flow control: watchdog_ms must be > 0, "
                                   f"got {self.watchdog_ms}")


@dataclass(frozen=True)
class MmuBytes:
    """One switch's buffer settings in bytes, as its accounting uses them."""

    shared_total: int
    reserve: int
    headroom: int
    resume_offset: int
    alpha_shift: int
    buffer: int


def mmu_bytes(fc: FlowControl, frame_bytes: int, ports: int, lossless_count: int,
              queue_pkts: int) -> MmuBytes:
    """One switch's buffer in bytes (pure).

    Parameters
    ----------
    fc : FlowControl
        The settings, in packet times.
    frame_bytes : int
        A full-size frame of the workload.
    ports : int
        The switch's ports.
    lossless_count : int
        Lossless lanes: each reserves and keeps headroom on every port.
    queue_pkts : int
        The lossy egress queue's size, the default buffer per port.

    Raises
    ------
    FlowControlError
        When the reserves and headrooms leave no shared buffer.
    """
    per_port = fc.buffer_pkts_per_port or queue_pkts
    buffer = round(per_port * ports * frame_bytes)
    reserve = round(fc.reserve_pkts * frame_bytes)
    headroom = round(fc.headroom_pkts * frame_bytes)
    shared = buffer - ports * lossless_count * (reserve + headroom)
    if shared <= 0:
        raise FlowControlError(
            f"flow control: {ports} ports x {lossless_count} lossless lanes of "
            f"{fc.reserve_pkts:g} reserved + {fc.headroom_pkts:g} headroom packets leave "
            f"nothing of a {per_port:g}-packet-per-port buffer to share; raise "
            f"buffer_pkts_per_port or lower the headroom")
    return MmuBytes(shared, reserve, headroom, round(fc.resume_pkts * frame_bytes),
                    fc.alpha_shift, buffer)


def spare_headroom_pkts(fc: FlowControl) -> float:
    """Packet times a pause may come later than modelled before the headroom overflows
    (pure): what the headroom holds beyond the reaction and the frames in flight."""
    return fc.headroom_pkts - fc.reaction_pkts - IN_FLIGHT_FRAMES


def watchdog_packets(fc: FlowControl, physical_gbps: float, frame_bytes: int) -> float:
    """The watchdog in packet times: ``watchdog_ms`` of the modelled link (pure)."""
    return fc.watchdog_ms * 1e-3 * physical_gbps * 1e9 / 8 / frame_bytes


def lossless_lanes(lanes: LaneConfig) -> list[int]:
    """Indices of the lanes that flow control keeps lossless."""
    return [i for i, lane in enumerate(lanes.lanes) if lane.lossless]


def lossless_dscps(lanes: LaneConfig) -> tuple[int, ...]:
    """Every DSCP whose lane flow control keeps lossless (pure; the default lane's
    too: the DSCPs no lane names)."""
    return tuple(d for d in range(64) if lanes.lanes[lanes.queue_for_dscp(d)].lossless)


def switch_buffer_pkts(graph: nx.Graph, switch: str, fc: FlowControl, queue_pkts: int) -> int:
    """Full-size packets ``switch``'s lossless lanes hold together at most (pure): its
    whole buffer, which one egress queue may take."""
    return int((fc.buffer_pkts_per_port or queue_pkts) * graph.degree(switch))


def path_hold_pkts(graph: nx.Graph, path: list[str], fc: FlowControl, queue_pkts: int) -> int:
    """Full-size packets the lossless queues along ``path`` (its nodes, endpoints
    included) can hold together: every switch's whole buffer (pure)."""
    return sum(switch_buffer_pkts(graph, node, fc, queue_pkts) for node in path
               if fg.is_switch(graph, node))


def leaf_limits(graph: nx.Graph, node: str, fc: FlowControl, queue_pkts: int,
                lanes: LaneConfig) -> dict[int, int]:
    """Lossless lane -> leaf packets on ``node``'s egress (pure): a switch's whole buffer
    (its accounting bounds what it holds); an endpoint NIC's, large enough that its
    sockets, not the queue, stop the sender."""
    if fg.is_endpoint(graph, node):
        per_port = 16 * (fc.buffer_pkts_per_port or queue_pkts)
        return dict.fromkeys(lossless_lanes(lanes), int(per_port))
    return dict.fromkeys(lossless_lanes(lanes), switch_buffer_pkts(graph, node, fc, queue_pkts))
