"""What the builders share: parameter checks and the leaf-spine uplink rate.

Every bad value raises at once. Messages are one line,
``"<builder>: <parameter> must be ..., got <value>"``, so a typo in a spec is
reported against the parameter that caused it.
"""

from __future__ import annotations

import math

from fabric.model.graph import TopologyError

# Size caps so a typo cannot ask for a million nodes: a 2-core VM emulates ~200
# nodes, the ns-3 backend simulates a k=32 fat-tree (8,192 endpoints, 1,280 switches).
MAX_ENDPOINTS = 8192
MAX_SWITCHES = 2048
MAX_OVERSUB = 64.0


def check_count(topo: str, name: str, value: object, minimum: int = 1) -> None:
    """Raise unless ``value`` is an int >= ``minimum``."""
    # bool is an int subclass; True as a count is always a mistake.
    if isinstance(value, bool) or not isinstance(value, int):
        raise TopologyError(f"{topo}: {name} must be an integer, got {value!r}")
    if value < minimum:
        raise TopologyError(f"{topo}: {name} must be >= {minimum}, got {value}")


def check_counts(topo: str, **counts: object) -> None:
    """:func:`check_count` (minimum 1) on every keyword."""
    for name, value in counts.items():
        check_count(topo, name, value)


def check_rate(topo: str, name: str, value: object) -> None:
    """Raise unless ``value`` is a finite number > 0."""
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or value <= 0):
        raise TopologyError(f"{topo}: {name} must be a finite number > 0, got {value!r}")


def check_oversub(topo: str, value: object) -> None:
    """Raise unless ``value`` is a ratio in (0, MAX_OVERSUB]."""
    check_rate(topo, "oversub", value)
    if value > MAX_OVERSUB:  # type: ignore[operator]
        raise TopologyError(f"{topo}: oversub must be <= {MAX_OVERSUB:g}, got {value!r}")


def check_size(topo: str, n_endpoints: int, n_switches: int, params: str) -> None:
    """Raise when the fabric would exceed the endpoint or switch cap."""
    if n_endpoints > MAX_ENDPOINTS:
        raise TopologyError(f"{topo}: {params} gives {n_endpoints} endpoints, "
                            f"above the limit of {MAX_ENDPOINTS}")
    if n_switches > MAX_SWITCHES:
        raise TopologyError(f"{topo}: {params} gives {n_switches} switches, "
                            f"above the limit of {MAX_SWITCHES}")


def uplink_gbps(down_ports: int, gbps: float, spines: int, oversub: float) -> float:
    """Rate of each leaf-spine link: a leaf of ``down_ports`` hosts at ``gbps``
    spread over ``spines`` uplinks, ``oversub`` times thinner (1.0: non-blocking)."""
    return down_ports * gbps / spines / oversub
