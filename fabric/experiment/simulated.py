"""An experiment's runs on the ns-3 backend (``fabric run ... --backend ns3``).

Where the emulator brings a fabric up, the simulator takes the same graph; each
scheduled run becomes one simulation (:func:`fabric.simulation.simulate`) with
the same transfers, transport and seed, and the experiment's own row function
reads its result as it reads an emulated one. The runs of one fabric go two at
a time (one per core). What the simulator does not model is refused by
:func:`simulated_fabric`, in one line; the adaptive policy is asked every
telemetry interval (:mod:`fabric.simulation.adaptive`).

Rates: with ``--host-mbps`` every link is scaled as the emulator scales it;
without it the links run at the graph's physical rates. The workloads are in
packets (:mod:`fabric.traffic.sizing`), so a run is the same packets either way
and the emulated run's twin; the transport's timers are in packet times. Only
the experiments' deadlines and the adaptive controller's floor, which are
seconds at the emulated rates, are :data:`SIM_TIME_SCALE` times as long at
physical rates.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from fabric.emulation.capacity import mean_switch_hops
from fabric.emulation.shaping import DEFAULT_QUEUE_PKTS
from fabric.errors import UserError
from fabric.model import graph as fg
from fabric.routing.adaptive import DEFAULT_FLOOR_S, AdaptiveParams, params_for_rate
from fabric.routing.switch_ar import ArParams, check_port_sets
from fabric.simulation import SimResult, simulate
from fabric.simulation.run import stop_all
from fabric.simulation.scenario import NOT_MODELLED_CC, Fabric
from fabric.experiment.checks import fidelity_of
from fabric.experiment.runs import Progress, RowFunction, RunLog, Scheduled
from fabric.traffic.model import TransportSpec

if TYPE_CHECKING:  # the run context imports this module's time scale
    from fabric.experiment.context import RunContext

BACKENDS = ("emulator", "ns3")
SIM_TIME_SCALE = 1e-3  # deadlines and timer floors at physical rates, per emulated second
# routing policies the simulator runs: the same select groups, the senders' entropy apart,
# adaptive's weights from the policy's own code (fabric.simulation.adaptive), and the
# planned static routes (fabric.routing.static)
SIMULATED_POLICIES = ("ecmp", "spray", "adaptive", "static", "ar")
UNMODELLED_CC = frozenset(NOT_MODELLED_CC)  # congestion controls the simulator refuses
# Packets a link carries per second of wall time in the simulator, ACKs included, and a
# run's fixed cost (scenario, start-up, reading the answer), for the estimate
# (docs/benchmarks.md, "Simulator cross-check and cost")
SIM_PACKET_HOPS_PER_S = 3e5
SIM_RUN_OVERHEAD_S = 0.5
# simulations run side by side: one per core of this project's 2-core machines
SIM_WORKERS = 2


class NotSimulated(UserError, ValueError):
    """Something a run asks for that the ns-3 backend does not model."""


@dataclass(frozen=True)
class SimRatePlan:
    """The rates of a simulated fabric, as an emulated one's ``rate_plan`` gives them."""

    host_mbps: float
    link_mbps: dict[frozenset, float]
    packet_bytes: int

    @property
    def packet_s(self) -> float:
        """Seconds a full-size packet takes on a host link."""
        return self.packet_bytes * 8 / (self.host_mbps * 1e6)


@dataclass(frozen=True)
class SimReport:
    """What an experiment reads of a bring-up's report."""

    rate_plan: SimRatePlan


@dataclass(frozen=True)
class SimulatedFabric:
    """A fabric the simulator runs, standing where an :class:`Emulation` would."""

    fabric: Fabric
    report: SimReport
    time_scale: float  # how deadlines and the adaptive floor scale (context.time_scale_of)
    adaptive: AdaptiveParams | None = None  # the adaptive policy's tuning, when it routes

    @property
    def graph(self) -> Any:
        """The fabric graph."""
        return self.fabric.graph


def simulated_fabric(graph: Any, time_scale: float, host_mbps: float | None = None,
                     packet_bytes: int = 0, queue_pkts: int = DEFAULT_QUEUE_PKTS,
                     policy: str = "ecmp", adaptive_routing: ArParams = ArParams(),
                     **unmodelled: Any) -> SimulatedFabric:
    """The simulated twin of ``Emulation(graph, EmulationOptions(...))``.

    Raises
    ------
    NotSimulated
        For a policy or option the simulator does not model (a user's controller app,
        lanes, flow control, ...).
    """
    if policy not in SIMULATED_POLICIES:
        raise NotSimulated(f"the ns-3 backend does not model the {policy} routing policy "
                           f"(it runs {', '.join(SIMULATED_POLICIES)})")
    for name, value in unmodelled.items():
        if value not in (None, False):
            raise NotSimulated(f"the ns-3 backend does not model {name.replace('_', ' ')}")
    fabric = Fabric(graph, host_mbps=host_mbps, queue_pkts=queue_pkts,
                    static_routes=policy == "static",
                    adaptive_routing=adaptive_routing if policy == "ar" else None)
    if policy == "ar":
        try:
            check_port_sets(fabric.routes())
        except ValueError as exc:
            raise NotSimulated(str(exc)) from None
    scale = fabric.scale / 1e6  # Mbit/s per physical Gbit/s
    links = {frozenset((a, b)): d["gbps"] * scale for a, b, d in graph.edges(data=True)}
    plan = SimRatePlan(fabric.host_bps / 1e6, links, packet_bytes)
    # the emulator's tuning: an interval of 100 packets of a host link, and at least the
    # controller's floor, scaled as the workloads are (at physical rates 0.1 s is a run)
    adaptive = (params_for_rate(plan.host_mbps, packet_bits=(packet_bytes or 1500) * 8,
                                floor_s=DEFAULT_FLOOR_S * time_scale)
                if policy == "adaptive" else None)
    return SimulatedFabric(fabric, SimReport(plan), time_scale, adaptive)


def physical_host_mbps(graph: Any) -> float:
    """The fastest endpoint link's physical rate, Mbit/s."""
    return Fabric(graph).host_bps / 1e6


def estimate_s(graph: Any, packets_per_host: float) -> float:
    """Wall seconds to simulate every endpoint sending ``packets_per_host`` packets (the
    simulator's cost is per packet hop, whatever the rate)."""
    packets = len(fg.endpoints(graph)) * packets_per_host
    # each packet crosses the switches' hops and the two host links; an ACK per 8 packets
    return SIM_RUN_OVERHEAD_S + packets * (mean_switch_hops(graph) + 1) * 1.125 \
        / SIM_PACKET_HOPS_PER_S


def completion(result: SimResult) -> dict[str, Any]:
    """The fidelity report of a simulated run: every transfer finished. A simulation is
    not CPU-bound, so the emulator's load checks do not apply."""
    return fidelity_of(result, [])


class SimulatorBackend:
    """The ns-3 simulator: the :class:`~fabric.experiment.backend.Backend` of
    ``--backend ns3`` (no root)."""

    name = "ns3"
    default_rates = "physical"

    def default_host_mbps(self, graph: Any, packet_bytes: int, headroom: float = 1.0
                          ) -> float:
        """The graph's physical rate (:func:`physical_host_mbps`): a simulation is not
        bound by the machine."""
        return physical_host_mbps(graph)

    @contextmanager
    def bring_up(self, ctx: RunContext, graph: Any, **options: Any
                 ) -> Iterator[SimulatedFabric]:
        """The simulated twin of the emulator's bring-up (:func:`simulated_fabric`)."""
        yield simulated_fabric(graph, ctx.time_scale_of(self.name),
                               **{"adaptive_routing": ctx.adaptive_routing, **options})

    def run(self, ctx: RunContext, fabric: SimulatedFabric, runs: Iterable[Scheduled],
            transport: TransportSpec, workdir: Path, progress: Progress, row_of: RowFunction,
            log: RunLog, deadline_s: float = 120.0) -> None:
        """Simulate every run of ``runs``, :data:`SIM_WORKERS` at a time, and log them in
        order as the emulator's runs are logged; each run keeps its scenario file under
        ``workdir/<run>``."""
        runs = list(runs)

        def simulated(run: Scheduled) -> SimResult:
            where = workdir / run.name
            where.mkdir(parents=True, exist_ok=True)
            return simulate(fabric.fabric, run.transfers, transport, seed=run.seed,
                            deadline_s=deadline_s * fabric.time_scale, workdir=where,
                            window=run.window, adaptive=fabric.adaptive)

        with ThreadPoolExecutor(max_workers=SIM_WORKERS) as pool:
            futures = [pool.submit(simulated, run) for run in runs]
            try:
                for run, future in zip(runs, futures):
                    progress.step(" ".join(f"{k} {v}" for k, v in run.keys.items()))
                    _log_simulated(run, future.result(), workdir / run.name, progress,
                                   row_of, log)
            except BaseException:  # interrupted, or one failed: the others' simulators go
                pool.shutdown(wait=False, cancel_futures=True)
                stop_all()
                raise


def _log_simulated(run: Scheduled, result: SimResult, where: Path, progress: Progress,
                   row_of: RowFunction, log: RunLog) -> None:
    """A simulated run's fidelity file, progress line and rows."""
    report = completion(result)
    (where / "fidelity.json").write_text(json.dumps(report, indent=1))
    rounds = (f", {result.telemetry['rounds']} telemetry rounds re-weighted "
              f"{result.telemetry['weight_changes']} groups" if result.telemetry else "")
    progress.say(f"simulated {result.sim_s:.4g} s in {result.wall_s:.1f} s wall, "
                 f"{result.memory_mb:.0f} MB{rounds}")
    log.add(run, result, report, row_of(run, result, report),
            {"backend": "ns3", "wall_s": round(result.wall_s, 2),
             "memory_mb": round(result.memory_mb, 1)})
