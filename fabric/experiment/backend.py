"""The backend seam: what brings an experiment's fabrics up and runs their traffic.

Two backends implement :class:`Backend`: the emulator
(:class:`~fabric.experiment.emulated.EmulatorBackend`: Mininet, Open vSwitch, real
stacks; root) and the ns-3 simulator
(:class:`~fabric.experiment.simulated.SimulatorBackend`). An experiment asks its
:class:`~fabric.experiment.loop.Runner` for a bring-up by backend name and runs
schedules on whatever it got; each run's result has the one shape of
:class:`fabric.traffic.result.RunResult`. A test hands the runner its own backends.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Iterable, Protocol

from fabric.experiment.context import RunContext
from fabric.experiment.emulated import EmulatorBackend
from fabric.experiment.runs import Progress, RowFunction, RunLog, Scheduled
from fabric.experiment.simulated import SimulatorBackend
from fabric.traffic.model import TransportSpec


class Backend(Protocol):
    """Brings fabrics up and runs schedules on them."""

    name: str  # as ``fabric run --backend`` names it
    default_rates: str  # how the rates of a run that names none are chosen, in a word

    def default_host_mbps(self, graph: Any, packet_bytes: int, headroom: float = 1.0
                          ) -> float:
        """The host rate of a bring-up whose run names none (``--host-mbps``)."""
        ...

    def bring_up(self, ctx: RunContext, graph: Any, **options: Any
                 ) -> AbstractContextManager[Any]:
        """The running fabric of ``graph`` with ``options``
        (:class:`~fabric.emulation.EmulationOptions` fields; an option the backend does
        not model is refused with a :class:`~fabric.errors.UserError`). It has ``graph``
        and ``report.rate_plan`` (``host_mbps``, ``link_mbps``, ``packet_bytes``)."""
        ...

    def run(self, ctx: RunContext, fabric: Any, runs: Iterable[Scheduled],
            transport: TransportSpec, workdir: Path, progress: Progress, row_of: RowFunction,
            log: RunLog, deadline_s: float = 120.0) -> None:
        """Run every scheduled run on ``fabric`` (one of this backend's bring-ups), step
        ``progress`` once per run and log each into ``log`` with its fidelity report and
        ``row_of``'s fields, in order; work files go under ``workdir``."""
        ...


def default_backends() -> dict[str, Backend]:
    """The backends ``fabric run`` offers, by name."""
    return {backend.name: backend for backend in (EmulatorBackend(), SimulatorBackend())}
