"""The runner an experiment measures through: it brings fabrics up on the backend a run
asks for (:mod:`fabric.experiment.backend`), runs their schedules there, and keeps the
progress lines and the run log. Experiments and benchmarks both run traffic here.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Mapping

from fabric.experiment.backend import Backend, default_backends
from fabric.experiment.context import RunContext
from fabric.experiment.runs import Progress, RowFunction, RunLog, Scheduled
from fabric.traffic.model import TransportSpec


class Runner:
    """One experiment run's bring-ups and traffic runs: the run context's emulation
    options, progress on stderr, attempts and the run log.

    Parameters
    ----------
    ctx : RunContext
        The run (its directory, ``--attempts``, ``--pcap``, the hosts' TCP).
    name : str
        The experiment's name, leading every progress line.
    total_runs : int
        How many traffic runs the experiment will schedule (for the estimate).
    backends : mapping, optional
        Backend name -> :class:`~fabric.experiment.backend.Backend`; by default the
        emulator and the simulator (a test passes stand-ins).
    """

    def __init__(self, ctx: RunContext, name: str, total_runs: int,
                 backends: Mapping[str, Backend] | None = None):
        self.ctx = ctx
        self.progress = Progress(total_runs, name)
        self.log = RunLog(attempts=ctx.attempts)
        self.backends = dict(backends or default_backends())
        self._running: dict[int, Backend] = {}  # id of a running fabric -> its backend

    def backend(self, name: str | None = None) -> Backend:
        """The backend called ``name``, or the run's (``--backend``)."""
        return self.backends[name or self.ctx.backend]

    def host_mbps(self, graph: Any, packet_bytes: int, headroom: float = 1.0,
                  backend: str | None = None) -> float:
        """The host rate of a bring-up of ``graph``: ``--host-mbps``, or the backend's
        default (what the machine sustains, or the physical rate)."""
        return self.ctx.host_mbps or self.backend(backend).default_host_mbps(
            graph, packet_bytes, headroom)

    @contextmanager
    def bring_up(self, graph: Any, backend: str | None = None, **options: Any) -> Iterator[Any]:
        """The fabric of ``graph`` running with ``options`` (:class:`EmulationOptions`
        fields) and the run context's, torn down on leaving, on the run's backend
        (``--backend``) or on ``backend`` when given (an option it does not model is
        refused)."""
        chosen = self.backend(backend)
        with chosen.bring_up(self.ctx, graph, **options) as fabric:
            self._running[id(fabric)] = chosen
            try:
                yield fabric
            finally:
                del self._running[id(fabric)]

    def run(self, fabric: Any, runs: Iterable[Scheduled], transport: TransportSpec,
            workdir: str, row_of: RowFunction, deadline_s: float = 120.0) -> None:
        """Run and log every run of ``runs`` on ``fabric`` (one of :meth:`bring_up`'s),
        on the backend that brought it up, into ``work/<workdir>`` of the run
        directory."""
        self._running[id(fabric)].run(self.ctx, fabric, runs, transport,
                                      self.ctx.run_dir / "work" / workdir, self.progress,
                                      row_of, self.log, deadline_s)

    def table(self, name: str) -> list[dict[str, Any]]:
        """The rows of the experiment's own ``name.csv`` (appended to by the caller)."""
        return self.log.tables.setdefault(name, [])
