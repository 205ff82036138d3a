"""Launch-time configuration handed to the os-ken app in this process.

os-ken instantiates apps itself, without arguments, so whoever starts an app
(the controllers' launcher, or the test harness's ``make_app``) stores the
graph and options here first; the app reads them with :func:`current` (apps
import it as ``controllers.runtime``).
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
