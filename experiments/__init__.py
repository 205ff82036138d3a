"""Experiments: one module per question, each holding one
:class:`fabric.experiment.Experiment` as ``EXPERIMENT``.

``EXPERIMENTS`` maps a name to its module; :func:`load` imports one on use.
"""

from __future__ import annotations

import importlib
from typing import Any

EXPERIMENTS = {
    "collisions": "experiments.collisions",
    "incast": "experiments.incast",
    "isolation": "experiments.isolation",
    "zones": "experiments.zones",
    "placement": "experiments.placement",
    "failures": "experiments.failures",
    "storage": "experiments.storage",
    "lossless": "experiments.lossless",
    "replay": "experiments.replay",
    "scaling": "experiments.scaling",
    "deadlock": "experiments.deadlock",
}


def load(name: str) -> Any:
    """The experiment called ``name`` (a :class:`fabric.experiment.Experiment`)."""
    return importlib.import_module(EXPERIMENTS[name]).EXPERIMENT
