"""What one traffic run gives back, on either backend (pure): the result every
experiment's row function and the analysis read, and the fidelity checks it carries.

The emulator's :class:`TrafficResult` (with its :class:`LinkSeries` of link samples)
and the simulator's :class:`~fabric.simulation.run.SimResult` both have the
:class:`RunResult` shape; nothing that reads a result needs to know which backend
made it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable, Mapping, Protocol

from fabric.traffic.model import Plan


@dataclass(frozen=True)
class Check:
    """One fidelity check: its measured value against its threshold, and whether it held."""

    name: str
    value: float
    threshold: float | None  # None: reported beside the checks, never held to a limit
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


@dataclass(frozen=True)
class TransferRecord:
    """One transfer as a run saw it, on either backend.

    ``start`` is when its first byte was sent, ``end`` when its last byte arrived
    (seconds: wall time on the emulator, simulated time on the simulator; None when it
    did not happen); ``path`` the nodes it crossed when one path was traced. ``fields``
    is its whole row as ``flows.csv`` stores it, the transport's own counters included
    (``send_rto_count``, ``recv_arrivals``, ...).
    """

    id: str
    src: str
    dst: str
    bytes: int
    start: float | None
    end: float | None
    path: tuple[str, ...] | None
    fields: Mapping[str, Any]

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "TransferRecord":
        """The record of a transfer row (``send_start``, ``recv_end``, ``path``, ...)."""
        path = row.get("path")
        return cls(row["id"], row["src"], row["dst"], row["bytes"], row.get("send_start"),
                   row.get("recv_end"), tuple(path) if path else None, row)

    @property
    def seconds(self) -> float | None:
        """From its first byte sent to its last received (None if incomplete)."""
        return None if self.start is None or self.end is None else self.end - self.start

    def timed(self, start: float, end: float) -> "TransferRecord":
        """The same transfer with other times (a perfect transport's, say)."""
        return replace(self, start=start, end=end,
                       fields={**self.fields, "send_start": start, "recv_end": end,
                               "fct_s": end - start})


def records(rows: Iterable[Mapping[str, Any]]) -> list[TransferRecord]:
    """Transfer rows as records."""
    return [TransferRecord.from_row(row) for row in rows]


def span_s(transfers: Iterable[TransferRecord]) -> float | None:
    """Seconds from the first byte sent to the last received, over ``transfers``; None
    when there are none, any is incomplete, or no time passed."""
    starts, ends = [], []
    for t in transfers:
        if t.start is None or t.end is None:
            return None
        starts.append(t.start)
        ends.append(t.end)
    if not starts:
        return None
    span = max(ends) - min(starts)
    return span if span > 0 else None


def timings(transfers: Iterable[TransferRecord]) -> dict[str, tuple[Any, Any, int]]:
    """``{id: (start, end, bytes)}``, as throughput measures take them."""
    return {t.id: (t.start, t.end, t.bytes) for t in transfers}


class RunResult(Protocol):
    """One traffic run's result, whichever backend ran it.

    ``transfer_rows()`` gives one row per transfer (``id``, ``src``, ``dst``, ``bytes``,
    ``tag``, the sender's and receiver's ``send_*``/``recv_*`` fields, ``fct_s``,
    ``path``); ``flow_control`` what each lossless link paused (empty when lossy);
    ``deadlocks`` the cycles of links held paused that formed during the run
    (:class:`fabric.emulation.deadlock_watch.Formation` rows; empty when none did or the
    backend does not model flow control).
    """

    plan: Plan
    links: Any  # per directed link: ``totals()`` gives the bytes each carried
    fidelity: list[Check]
    errors: list[str]
    flow_control: list[dict[str, Any]]
    deadlocks: list[dict[str, Any]]

    def transfer_rows(self) -> list[dict[str, Any]]:
        """One row per transfer: the sender's and the receiver's view merged."""
        ...

    @property
    def complete(self) -> bool:
        """True when every transfer's last byte arrived."""
        ...


@dataclass
class LinkSeries:
    """Samples of every directed link's byte counter."""

    times: list[float] = field(default_factory=list)
    bytes: list[dict[tuple[str, str], int]] = field(default_factory=list)

    def rates_mbps(self) -> list[tuple[float, dict[tuple[str, str], float]]]:
        """Per-interval rates: ``[(interval midpoint, {link: Mbit/s})]``."""
        rows = []
        for i in range(1, len(self.times)):
            dt = self.times[i] - self.times[i - 1]
            if dt <= 0:
                continue
            rows.append(((self.times[i] + self.times[i - 1]) / 2,
                         {k: (self.bytes[i][k] - self.bytes[i - 1][k]) * 8 / dt / 1e6
                          for k in self.bytes[i]}))
        return rows

    def totals(self) -> dict[tuple[str, str], int]:
        """Bytes each directed link carried between the first and last sample."""
        if len(self.bytes) < 2:
            return {}
        return {k: self.bytes[-1][k] - self.bytes[0][k] for k in self.bytes[-1]}


@dataclass
class TrafficResult:
    """Everything one emulated run measured: the agents' reports, link samples, the
    paths the switches' counters traced, ingress drops and the fidelity checks."""

    plan: Plan
    agents: dict[str, dict]
    links: LinkSeries
    paths: dict[str, list[str]]  # transfer id -> node path (first connection)
    ingress_drops: dict[str, int]  # endpoint -> packets dropped at its ingress buffer
    fidelity: list[Check]
    errors: list[str] = field(default_factory=list)
    # under flow control: per link direction and lossless lane, what it paused, held and
    # dropped during the run
    flow_control: list[dict[str, Any]] = field(default_factory=list)
    # cycles of links held paused that formed during the run (the deadlock detector's)
    deadlocks: list[dict[str, Any]] = field(default_factory=list)

    def transfer_rows(self) -> list[dict[str, Any]]:
        """One row per transfer: sender and receiver view merged."""
        rows: dict[str, dict[str, Any]] = {t.id: {"id": t.id, "src": t.src, "dst": t.dst,
                                                  "bytes": t.bytes, "tag": t.tag}
                                           for t in self.plan.transfers}
        for agent in self.agents.values():
            for rec in agent.get("transfers", []):
                row = rows.get(rec["id"])
                if row is None:
                    continue
                prefix = "send_" if rec["role"] == "send" else "recv_"
                for key, value in rec.items():
                    if key not in ("id", "role"):
                        row[prefix + key] = value
        for row in rows.values():
            start, end = row.get("send_start"), row.get("recv_end")
            row["fct_s"] = (end - start) if start is not None and end is not None else None
            row["path"] = self.paths.get(row["id"])
        return list(rows.values())

    @property
    def complete(self) -> bool:
        """True when every transfer's last byte arrived."""
        return all(r["fct_s"] is not None for r in self.transfer_rows())
