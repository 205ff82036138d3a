"""The seed systems as presets: the fabric, routing, lanes, flow control and congestion
control each runs, at the scale of this emulator (plain data).

``fabric up/traffic --preset NAME`` take all of it (the topology when none is given);
``fabric run EXPERIMENT --preset NAME`` takes the flow control, the lanes and routing
of bring-ups that do not set their own, and the roce congestion control, while the
experiment keeps its own topology (its question needs it) unless ``--topo`` says
otherwise. Where a system's choice has no counterpart here, the closest one is taken
and :attr:`Preset.notes` says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from fabric.model.lanes import DSCP_COLLECTIVE, THREE_LANES, Lane, LaneConfig

# A RoCE fabric's one lossless class: RDMA traffic paused, everything else dropped.
RDMA_LOSSLESS = LaneConfig((
    Lane("rdma", (DSCP_COLLECTIVE,), 0.8, 0),
    Lane("default", (), 0.2, 1, True, lossless=False),
))
# InfiniBand: every virtual lane has credits.
ALL_LOSSLESS = LaneConfig((Lane("default", (), 1.0, 0, True),))


@dataclass(frozen=True)
class Preset:
    """One system's fabric as this emulator builds it."""

    name: str
    system: str
    topology: str
    policy: str
    lanes: LaneConfig
    flow_control: bool
    cc: str
    notes: tuple[str, ...]
    sources: tuple[str, ...]


PRESETS = {p.name: p for p in (
    Preset("fire-flyer", "DeepSeek Fire-Flyer 2 (InfiniBand, two zones)", "two-zone", "static",
           THREE_LANES, True, "none",
           ("two fat-tree zones joined by a few links, storage in both zones",
            "static routing: the subnet manager's planned forwarding tables (OpenSM's "
            "fat-tree engine, D-mod-k: one port per destination), no adaptive routing, "
            "which caused head-of-line blocking there",
            "three lanes, collective, storage and the rest, all lossless (InfiniBand's "
            "credits per virtual lane)",
            "congestion control off (DCQCN disabled); storage reads admitted by "
            "request-to-send (3FS): the incast experiment's admission rows"),
           ("An et al., Fire-Flyer AI-HPC: A Cost-Effective Software-Hardware Co-Design for "
            "Deep Learning, SC 2024", "DeepSeek 3FS design notes")),
    Preset("rsc", "Meta Research SuperCluster (InfiniBand)", "fat-tree,k=4", "static",
           ALL_LOSSLESS, True, "none",
           ("a non-blocking three-tier Clos: the k-ary fat-tree",
            "one lossless lane (InfiniBand's credit-based flow control)",
            "the subnet manager's static routes (D-mod-k, as OpenSM's fat-tree engine); no "
            "congestion control"),
           ("Meta, Introducing the AI Research SuperCluster, 2022",)),
    Preset("colossus", "xAI Colossus (Spectrum-X RoCE)", "rail-clos", "ar", RDMA_LOSSLESS,
           True, "dcqcn",
           ("the rail-optimised Clos; the switches route adaptively, each packet to the "
            "least occupied of its equal-cost ports, a paused one last (Spectrum-X adaptive "
            "routing), and the NIC puts the packets back in order",
            "one lossless RDMA class (PFC), the rest lossy",
            "DCQCN, the standard RoCE congestion control, stands in for Spectrum-X's own "
            "(not public)"),
           ("NVIDIA, Spectrum-X: xAI Colossus, 2024",)),
)}
