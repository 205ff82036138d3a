"""What one ``fabric run`` was asked for: the run context every experiment reads."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from fabric.emulation import EmulationOptions
from fabric.emulation.capture import DEFAULT_MAX_PACKETS, capture_points
from fabric.experiment.options import CC, ROCE_MTU, TRANSPORT, Option
from fabric.experiment.runs import DEFAULT_ATTEMPTS
from fabric.experiment.simulated import SIM_TIME_SCALE
from fabric.model import graph as fg
from fabric.model.flowcontrol import FlowControl
from fabric.model.presets import Preset
from fabric.routing.switch_ar import ArParams
from fabric.traffic.model import TransportSpec


@dataclass(frozen=True)
class CaptureSpec:
    """``fabric run --pcap``: packet captures of every traffic run.

    Each run writes ``out_dir/<bring-up>/<run>/<point>.pcap``, where
    ``<bring-up>`` is the run's work directory under ``work_root``.
    """

    out_dir: Path
    work_root: Path
    at: tuple[str, ...] = ()  # endpoints or links a-b; empty: the fabric's first endpoint
    max_packets: int = DEFAULT_MAX_PACKETS

    def points(self, graph: Any) -> list:
        """The capture points on ``graph`` (:func:`capture_points`; ValueError if unknown)."""
        return capture_points(graph, list(self.at) or sorted(fg.endpoints(graph))[:1])

    def run_dir(self, workdir: Path) -> Path:
        """Where the captures of the run whose work directory is ``workdir`` go."""
        return self.out_dir / workdir.relative_to(self.work_root)


@dataclass
class RunContext:
    """The arguments of one experiment run and its new run directory.

    ``values`` holds the experiment's own options (its declared
    :class:`~fabric.experiment.options.Option` s) by destination name; read one
    with :meth:`get`, which falls back to the option's default.
    """

    run_dir: Path
    quick: bool = False
    seeds: int | None = None
    topo: str | None = None
    host_mbps: float | None = None
    tcp_cc: str = "cubic"    # the emulated hosts' TCP congestion control
    flow_control: FlowControl | None = None  # link-level flow control (PFC); None: lossy
    preset: Preset | None = None  # a seed system: lanes and routing of bring-ups that set none
    values: Mapping[str, Any] = field(default_factory=dict)
    capture: CaptureSpec | None = None  # --pcap: captures of every run
    attempts: int = DEFAULT_ATTEMPTS
    backend: str = "emulator"  # or "ns3": the runs are simulated (fabric.experiment.simulated)
    adaptive_routing: ArParams = ArParams()  # the switches' choice in runs routed by ar
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))

    def get(self, option: Option) -> Any:
        """The value of one of the experiment's options: given, or its default."""
        value = self.values.get(option.dest)
        return option.default if value is None else value

    def options(self, **kwargs: Any) -> EmulationOptions:
        """Emulation options of a bring-up, with this run's TCP congestion control, flow
        control, adaptive-routing options and the preset's lanes and routing (``kwargs`` set
        their own)."""
        preset = ({"lanes": self.preset.lanes, "policy": self.preset.policy}
                  if self.preset else {})
        return EmulationOptions(**{"tcp_cc": self.tcp_cc, "flow_control": self.flow_control,
                                   "adaptive_routing": self.adaptive_routing,
                                   **preset, **kwargs})

    def roce(self, **kwargs: Any) -> TransportSpec:
        """The roce transport with this run's path MTU and congestion control
        (``kwargs`` may set another ``cc``)."""
        return TransportSpec("roce", **{"mtu_payload": self.get(ROCE_MTU), "cc": self.get(CC),
                                        **kwargs})

    def transport(self) -> TransportSpec:
        """The hosts' transport of an experiment with ``--transport``: :meth:`roce`
        (the default) or the kernel's TCP."""
        return self.roce() if self.get(TRANSPORT) == "roce" else TransportSpec("tcp")

    def transport_parameters(self, transport: TransportSpec) -> dict[str, Any]:
        """What a manifest says of ``transport``: its kind and congestion control."""
        if transport.kind == "roce":
            return {"transport": "roce", "cc": transport.cc, "roce_mtu": transport.mtu_payload}
        return {"transport": transport.kind, "tcp_cc": self.tcp_cc}

    def time_scale_of(self, backend: str) -> float:
        """How ``backend`` scales an experiment's deadlines and the adaptive controller's
        floor (seconds at the emulated rates; the workloads are in packets): 1, but
        :data:`~fabric.experiment.simulated.SIM_TIME_SCALE` for the simulator at physical
        rates (``ns3`` without ``--host-mbps``)."""
        return SIM_TIME_SCALE if backend == "ns3" and not self.host_mbps else 1.0

    def seed_list(self, default: int) -> list[int]:
        """Seeds to run: ``--seeds`` or the experiment's ``default`` for the mode."""
        return list(range(self.seeds or default))
