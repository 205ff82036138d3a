"""The experiment layer: the contract every experiment implements and the run loop
it runs in, shared with the benchmarks.

:mod:`~fabric.experiment.contract` (:class:`Experiment`, :class:`Mode`,
:class:`Measured`, :class:`Outcome`, :class:`RunData`),
:mod:`~fabric.experiment.options` (an experiment's own command-line options),
:mod:`~fabric.experiment.context` (:class:`RunContext`: what one run was asked
for), :mod:`~fabric.experiment.loop` (:class:`Runner`: bring-ups on a backend,
progress and the run log), :mod:`~fabric.experiment.backend` (the
:class:`~fabric.experiment.backend.Backend` interface),
:mod:`~fabric.experiment.emulated` (the emulator's: idle check, warm-up, attempts)
and :mod:`~fabric.experiment.simulated` (the ns-3 simulator's),
:mod:`~fabric.experiment.runs` (a scheduled run, the progress lines, the run log),
:mod:`~fabric.experiment.checks` (a run's fidelity verdict),
:mod:`~fabric.experiment.measures` (small measurements rows share) and
:mod:`~fabric.experiment.crosscheck` (the same runs on both backends).

May import: fabric.model, fabric.routing, fabric.traffic, fabric.host, fabric.emulation,
fabric.analysis, fabric.simulation, topologies.
"""

from fabric.experiment.context import CaptureSpec, RunContext
from fabric.experiment.contract import (Experiment, Measured, Mode, Outcome, RunData,
                                        with_checks)
from fabric.experiment.loop import Runner
from fabric.experiment.options import Option
from fabric.experiment.runs import Scheduled

__all__ = ["CaptureSpec", "Experiment", "Measured", "Mode", "Option", "Outcome", "RunContext",
           "RunData", "Runner", "Scheduled", "with_checks"]
