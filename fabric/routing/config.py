"""Controller configuration file: lanes, rate scale, adaptive tuning, pinned routes (JSON).

::

    {"lanes": [...],                       # see fabric.model.lanes; default one lane
     "scale_mbps_per_gbps": 0.05,          # the emulation's rate scale
     "adaptive": {"interval_s": 0.1, ...}, # see fabric.routing.adaptive.AdaptiveParams
     "routes": {"s0": {"10.0.0.5": [2]}}}  # switch -> destination ip -> output ports,
                                           # in place of the policy's for those
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabric.model.lanes import (SINGLE_LANE, LaneConfig, LaneConfigError, lane_config_from_dict,
                                lane_config_to_dict)
from fabric.routing.adaptive import AdaptiveConfigError, AdaptiveParams

DEFAULT_SCALE_MBPS_PER_GBPS = 0.05


class ControllerConfigError(ValueError):
    """A controller config that cannot be used."""


@dataclass(frozen=True)
class ControllerConfig:
    """Everything a policy app needs besides the graph."""

    lanes: LaneConfig = SINGLE_LANE
    scale_mbps_per_gbps: float = DEFAULT_SCALE_MBPS_PER_GBPS
    adaptive: AdaptiveParams = field(default_factory=AdaptiveParams)
    # switch -> destination ip -> output ports, installed in place of the policy's
    routes: dict[str, dict[str, tuple[int, ...]]] = field(default_factory=dict)


def controller_config_from_dict(data: dict[str, Any]) -> ControllerConfig:
    """Validate and build a :class:`ControllerConfig`."""
    if not isinstance(data, dict):
        raise ControllerConfigError("controller config must be a JSON object")
    unknown = set(data) - {"lanes", "scale_mbps_per_gbps", "adaptive", "routes"}
    if unknown:
        raise ControllerConfigError(f"unknown controller config keys {sorted(unknown)}")
    try:
        lanes = lane_config_from_dict(data) if "lanes" in data else SINGLE_LANE
        known = {f.name for f in dataclasses.fields(AdaptiveParams)}
        raw = data.get("adaptive", {})
        if not isinstance(raw, dict) or set(raw) - known:
            raise ControllerConfigError(f"adaptive takes only {sorted(known)}")
        adaptive = AdaptiveParams(**raw)
        scale = float(data.get("scale_mbps_per_gbps", DEFAULT_SCALE_MBPS_PER_GBPS))
    except (LaneConfigError, AdaptiveConfigError, TypeError, ValueError) as exc:
        raise ControllerConfigError(str(exc)) from None
    if not scale > 0:
        raise ControllerConfigError(f"scale_mbps_per_gbps must be > 0, got {scale}")
    return ControllerConfig(lanes, scale, adaptive, _routes(data.get("routes", {})))


def _routes(raw: Any) -> dict[str, dict[str, tuple[int, ...]]]:
    """``routes`` as ``{switch: {ip: (port, ...)}}`` (its names are checked against the
    graph where one is known: :func:`fabric.routing.tables.check_pinned`)."""
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise ControllerConfigError("routes must map a switch to {destination ip: [ports]}")
    out: dict[str, dict[str, tuple[int, ...]]] = {}
    for sw, table in raw.items():
        out[str(sw)] = {}
        for ip, ports in table.items():
            if (not isinstance(ports, list) or not ports
                    or not all(isinstance(p, int) and p >= 0 for p in ports)):
                raise ControllerConfigError(f"routes: {sw} {ip}: give a list of port numbers, "
                                            f"got {ports!r}")
            out[str(sw)][str(ip)] = tuple(ports)
    return out


def load_controller_config(path: str | Path) -> ControllerConfig:
    """Read a controller config file."""
    try:
        return controller_config_from_dict(json.loads(Path(path).read_text()))
    except OSError as exc:
        raise ControllerConfigError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ControllerConfigError(f"{path} is not valid JSON: {exc}") from None


def controller_config_to_dict(config: ControllerConfig) -> dict[str, Any]:
    """The JSON form of ``config``."""
    return {**lane_config_to_dict(config.lanes),
            "scale_mbps_per_gbps": config.scale_mbps_per_gbps,
            "adaptive": dataclasses.asdict(config.adaptive),
            "routes": {sw: {ip: list(ports) for ip, ports in table.items()}
                       for sw, table in config.routes.items()}}
