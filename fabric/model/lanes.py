"""Service levels and virtual lanes (traffic isolation), as plain data.

A packet's service level (SL) is its DSCP. Each virtual lane (VL) owns a set
of DSCP values, a guaranteed share of every link and an HTB priority; one
lane is the default and takes every DSCP no other lane names. Lane ``i`` is
egress queue ``i`` in the controller's ``set_queue`` actions and HTB class
``1:(i+1)`` on every shaped interface, the convention of Open vSwitch's
``linux-htb`` QoS.

Under link-level flow control (:mod:`fabric.model.flowcontrol`) a lane is
lossless unless it says ``"lossless": false`` (RoCE deployments pause only the
RDMA class; InfiniBand's lanes are all lossless); without flow control every lane
is lossy.

The config file is JSON::

    {"lanes": [
        {"name": "collective", "dscp": [26], "share": 0.5, "prio": 0},
        {"name": "storage", "dscp": [10], "share": 0.3, "prio": 1},
        {"name": "default", "share": 0.2, "prio": 2, "default": true,
         "lossless": false}]}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabric.errors import UserError

MAX_DSCP = 63
MAX_LANES = 8


class LaneConfigError(UserError, ValueError):
    """A lane configuration that cannot be applied."""


@dataclass(frozen=True)
class Lane:
    """One virtual lane."""

    name: str
    dscp: tuple[int, ...]
    share: float
    prio: int = 0
    default: bool = False
    lossless: bool = True  # paused, not dropped, under link-level flow control


@dataclass(frozen=True)
class LaneConfig:
    """The SL->VL map: lanes in queue order."""

    lanes: tuple[Lane, ...]

    @property
    def default_queue(self) -> int:
        """Queue of the lane that takes unnamed DSCPs."""
        return next(i for i, lane in enumerate(self.lanes) if lane.default)

    def queue_for_dscp(self, dscp: int) -> int:
        """Return the queue (lane index) service level ``dscp`` maps to."""
        for i, lane in enumerate(self.lanes):
            if dscp in lane.dscp:
                return i
        return self.default_queue

    def queue_named(self, name: str) -> int:
        """Return the queue of the lane called ``name``."""
        for i, lane in enumerate(self.lanes):
            if lane.name == name:
                return i
        raise LaneConfigError(f"no lane named {name!r}")

    @property
    def isolating(self) -> bool:
        """True when there is more than one lane."""
        return len(self.lanes) > 1


SINGLE_LANE = LaneConfig((Lane("default", (), 1.0, 0, True),))
DSCP_COLLECTIVE = 26  # the DSCP RoCE deployments commonly give RDMA traffic
DSCP_STORAGE = 10
THREE_LANES = LaneConfig((
    Lane("collective", (DSCP_COLLECTIVE,), 0.5, 0),
    Lane("storage", (DSCP_STORAGE,), 0.3, 1),
    Lane("default", (), 0.2, 2, True),
))


def lane_config_from_dict(data: dict[str, Any]) -> LaneConfig:
    """Build and validate a :class:`LaneConfig` from parsed JSON."""
    raw = data.get("lanes") if isinstance(data, dict) else None
    if not isinstance(raw, list) or not raw:
        raise LaneConfigError("lane config needs a non-empty list 'lanes'")
    if len(raw) > MAX_LANES:
        raise LaneConfigError(f"at most {MAX_LANES} lanes, got {len(raw)}")
    lanes = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise LaneConfigError(f"lane {i} must be an object")
        unknown = set(item) - {"name", "dscp", "share", "prio", "default", "lossless"}
        if unknown:
            raise LaneConfigError(f"lane {i}: unknown keys {sorted(unknown)}")
        try:
            lane = Lane(name=str(item.get("name", f"lane{i}")),
                        dscp=tuple(int(d) for d in item.get("dscp", [])),
                        share=float(item["share"]), prio=int(item.get("prio", 0)),
                        default=bool(item.get("default", False)),
                        lossless=_boolean(item.get("lossless", True), f"lane {i}: lossless"))
        except (KeyError, TypeError, ValueError) as exc:
            raise LaneConfigError(f"lane {i}: {exc!r} (needs a numeric 'share')") from None
        lanes.append(lane)
    return validate_lanes(LaneConfig(tuple(lanes)))


def _boolean(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise LaneConfigError(f"{what} must be true or false, got {value!r}")
    return value


def validate_lanes(config: LaneConfig) -> LaneConfig:
    """Check shares, DSCP ranges and uniqueness, and exactly one default lane."""
    seen: dict[int, str] = {}
    for lane in config.lanes:
        if not 0 < lane.share <= 1:
            raise LaneConfigError(f"lane {lane.name}: share must be in (0, 1], got {lane.share}")
        if not 0 <= lane.prio <= 7:
            raise LaneConfigError(f"lane {lane.name}: prio must be 0..7, got {lane.prio}")
        for dscp in lane.dscp:
            if not 0 <= dscp <= MAX_DSCP:
                raise LaneConfigError(f"lane {lane.name}: DSCP {dscp} outside 0..{MAX_DSCP}")
            if dscp in seen:
                raise LaneConfigError(f"DSCP {dscp} is in lanes {seen[dscp]} and {lane.name}")
            seen[dscp] = lane.name
    total = sum(lane.share for lane in config.lanes)
    if total > 1.0 + 1e-9:
        raise LaneConfigError(f"lane shares add up to {total:.3g}, more than the link")
    defaults = [lane.name for lane in config.lanes if lane.default]
    if len(defaults) != 1:
        raise LaneConfigError(f"exactly one lane must be the default, got {defaults or 'none'}")
    if len({lane.name for lane in config.lanes}) != len(config.lanes):
        raise LaneConfigError("lane names must be unique")
    return config


def load_lane_config(path: str | Path) -> LaneConfig:
    """Read a lane config JSON file."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise LaneConfigError(f"cannot read lane config {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise LaneConfigError(f"lane config {path} is not valid JSON: {exc}") from None
    return lane_config_from_dict(data)


def lane_config_to_dict(config: LaneConfig) -> dict[str, Any]:
    """The JSON form of ``config`` (for manifests)."""
    return {"lanes": [{"name": lane.name, "dscp": list(lane.dscp), "share": lane.share,
                       "prio": lane.prio, "default": lane.default, "lossless": lane.lossless}
                      for lane in config.lanes]}
