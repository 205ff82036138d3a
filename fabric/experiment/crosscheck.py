"""The emulator and the ns-3 simulator on the same runs, side by side (root).

For one fabric and routing policy: one bring-up at the collisions experiment's
rate; every (pattern, seed) of the one-flow patterns runs on it, and the
simulator runs the same transfers at the same rate with the same seed. Under
per-flow ECMP the simulator's data takes the paths the emulated run measured:
Open vSwitch's hash and the simulator's documented one pick different paths for
the same seed, and the comparison is of the two fabrics and transports on the
same collisions, not of two hash functions. Under the adaptive policy the
simulator asks the policy's code at the emulator's telemetry interval. Each
backend's figure stands beside its own per-run ideal.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from fabric.analysis.report import ideal_transfers
from fabric.emulation import Emulation, EmulationOptions, capacity
from fabric.emulation.machine_speed import default_host_mbps
from fabric.experiment.checks import fidelity_of
from fabric.experiment.emulated import idle_check, traffic_run, warm_up
from fabric.experiment.runs import Scheduled
from fabric.routing.adaptive import params_for_rate
from fabric.routing.policies import multipath, sprays
from fabric.simulation import simulate
from fabric.simulation.scenario import Fabric
from fabric.traffic.model import SPRAY_ENTROPY_PORTS, TransportSpec
from fabric.traffic.result import records, timings
from fabric.traffic.workloads import norm_throughput, pattern_transfers


@dataclass(frozen=True)
class Cell:
    """One run on both backends: throughput over line rate, each beside its ideal."""

    pattern: str
    seed: int
    emulated: float
    emulated_ideal: float
    simulated: float
    simulated_ideal: float
    valid: bool  # the emulated run passed its fidelity checks

    @property
    def difference(self) -> float:
        """Simulated minus emulated."""
        return self.simulated - self.emulated


def _measure(graph: Any, result: Any, pattern: str, ranks: list[str], size: Any,
             host_mbps: float, link_mbps: Any, spray: bool) -> tuple[float, float]:
    """Mean flow rate over line rate, measured and on the run's ideal."""
    measured = norm_throughput(pattern, timings(records(result.transfer_rows())), ranks, size, host_mbps)
    transfers = ideal_transfers(result, graph, link_mbps, spray)
    # None when a per-flow path was not measured; crosscheck passes the emulated paths
    assert transfers is not None, "the run's ideal needs every transfer's path"
    ideal = norm_throughput(pattern, timings(transfers), ranks, size, host_mbps)
    # None for an incomplete run, which a cell cannot compare
    assert measured is not None and ideal is not None, f"{pattern}: a transfer did not complete"
    return measured, ideal


def crosscheck(graph: Any, policy: str, patterns: Iterable[str], seeds: Iterable[int],
               workdir: Path, cc: str = "swift", host_mbps: float | None = None
               ) -> list[Cell]:
    """Every (pattern, seed) of ``patterns`` under ``policy`` (``ecmp``, ``spray``,
    ``adaptive`` or ``static``) on both backends (see the module docstring), at ``host_mbps`` (default:
    the rate this machine emulates faithfully). The workloads are in packets: the same
    runs whatever the rate."""
    entropy = "recycle" if sprays(policy) else "flow"
    transport = TransportSpec("roce", entropy=entropy, entropy_ports=SPRAY_ENTROPY_PORTS, cc=cc)
    mbps = host_mbps or default_host_mbps(graph, packet_bytes=transport.packet_bytes,
                                          headroom=capacity.ROCE_RATE_HEADROOM)
    options = EmulationOptions(policy=policy, host_mbps=mbps,
                               packet_bytes=transport.packet_bytes)
    cells = []
    with Emulation(graph, options) as emu:
        plan = emu.report.rate_plan
        assert plan is not None  # bring-up planned the rates
        transport = TransportSpec("roce", entropy=entropy, entropy_ports=SPRAY_ENTROPY_PORTS,
                                  cc=cc, rate_mbps=plan.host_mbps)
        idle = idle_check(emu, transport, workdir / "idle")
        fabric = Fabric(graph, host_mbps=plan.host_mbps, queue_pkts=emu.options.queue_pkts,
                        static_routes=policy == "static",
                        adaptive_routing=emu.options.adaptive_routing if policy == "ar" else None)
        # the emulator's controller's tuning at this rate (Emulation._start_controller)
        adaptive = (params_for_rate(plan.host_mbps, packet_bits=transport.packet_bytes * 8)
                    if policy == "adaptive" else None)
        warmed = False
        for pattern in patterns:
            for seed in seeds:
                transfers, ranks, size = pattern_transfers(graph, pattern, seed, transport)
                if not warmed:
                    warm_up(emu, Scheduled({}, transfers, seed), transport,
                            workdir / "warm-up")
                    warmed = True
                where = workdir / f"{pattern}-{seed}"
                emulated = traffic_run(emu, transfers, transport, where, seed)
                valid = fidelity_of(emulated, [idle])["valid"]
                paths = ({r["id"]: r["path"] for r in emulated.transfer_rows() if r["path"]}
                         if not multipath(policy) else None)
                simulated = simulate(fabric, transfers, transport, seed=seed, paths=paths,
                                     adaptive=adaptive)
                args = (pattern, ranks, size, plan.host_mbps, plan.link_mbps, multipath(policy))
                emu_value, emu_ideal = _measure(graph, emulated, *args)
                sim_value, sim_ideal = _measure(graph, simulated, *args)
                cells.append(Cell(pattern, seed, emu_value, emu_ideal, sim_value, sim_ideal,
                                  valid))
    return cells
