"""Launch-time configuration handed to the os-ken app in this process.

os-ken instantiates apps itself, without arguments, so the launcher stores
the graph and options here before starting the app manager.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

from fabric.routing.config import ControllerConfig


@dataclass
class RuntimeConfig:
    """What an app needs: the fabric graph, where to report, its config."""

    graph: nx.Graph
    status_path: Path | None = None
    config: ControllerConfig = field(default_factory=ControllerConfig)


_current: RuntimeConfig | None = None


def configure(config: RuntimeConfig) -> None:
    """Set the configuration the next app instance will read."""
    global _current
    _current = config


def current() -> RuntimeConfig:
    """Return the configuration set by the launcher."""
    if _current is None:
        raise RuntimeError("controller started without a fabric graph; use `fabric controller`")
    return _current
