"""What one traffic run gives back, on either backend (pure): the result every
experiment's row function and the analysis read, and the fidelity checks it carries.

The emulator's :class:`~fabric.emulation.traffic.TrafficResult` and the simulator's
:class:`~fabric.simulation.run.SimResult` both have this shape; nothing that reads a
result needs to know which backend made it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from fabric.traffic.model import Plan


@dataclass(frozen=True)
class Check:
    """One fidelity check: its measured value against its threshold, and whether it held."""

    name: str
    value: float
    threshold: float
    ok: bool
    detail: str = ""


def report(checks: list[Check]) -> dict[str, Any]:
    """``{"valid": all ok, "checks": [...]}`` for results and manifests; a check that
    measured nothing (value NaN) has the value None (JSON null)."""
    return {"valid": all(c.ok for c in checks),
            "checks": [{**asdict(c), "value": None if _unmeasured(c.value) else c.value}
                       for c in checks]}


def _unmeasured(value: float) -> bool:
    return isinstance(value, float) and math.isnan(value)


class RunResult(Protocol):
    """One traffic run's result, whichever backend ran it.

    ``transfer_rows()`` gives one row per transfer (``id``, ``src``, ``dst``, ``bytes``,
    ``tag``, the sender's and receiver's ``send_*``/``recv_*`` fields, ``fct_s``,
    ``path``); ``flow_control`` what each lossless link paused (empty when lossy).
    """

    plan: Plan
    links: Any  # per directed link: ``totals()`` gives the bytes each carried
    fidelity: list[Check]
    errors: list[str]
    flow_control: list[dict[str, Any]]

    def transfer_rows(self) -> list[dict[str, Any]]:
        """One row per transfer: the sender's and the receiver's view merged."""
        ...

    @property
    def complete(self) -> bool:
        """True when every transfer's last byte arrived."""
        ...
