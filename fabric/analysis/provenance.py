"""Where a figure's data came from, in one line: the run directory's provenance.

Every figure of an experiment carries the line below its axes and in its PNG
and PDF metadata (:func:`fabric.analysis.plotstyle.save`), so a figure found
on its own can be traced to the run that made it::

    fabric 449e9cf · lossless · 2026-12-04 · rail-clos · 11 Mbit/s hosts · roce 4096 B ·
    entropy recycle · cc none, dcqcn, swift · seeds 0-1 · full run, 120 runs valid ·
    speed 0.86

The fields come from the run directory's ``manifest.json``, except what
``runs.csv`` records of each run: the host rate it really used (the manifest
may say ``auto``) and the congestion controls of an ablation the manifest does
not name. A field neither records is left out of the line, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from fabric.analysis import results

SEPARATOR = " · "
MAX_TOPOLOGIES = 2  # more are counted ("+2 more"), not listed


@dataclass(frozen=True)
class Provenance:
    """The facts that place a figure: what ran, where, how and how well.

    Every field is None (or empty) when the run directory does not record it.
    """

    experiment: str | None = None
    commit: str | None = None            # short hash, "-dirty" kept
    date: str | None = None              # YYYY-MM-DD the run started
    topologies: tuple[str, ...] = ()
    host_mbps: tuple[float, ...] = ()    # the host link rate(s) the runs used
    transport: str | None = None         # "roce" or "tcp"
    roce_mtu: int | None = None          # RoCE path MTU (payload bytes)
    entropy: str | None = None           # the spraying senders' entropy mode
    ccs: tuple[str, ...] = ()            # congestion control(s)
    seeds: tuple[int, ...] = ()
    quick: bool | None = None
    runs: int | None = None
    invalid_runs: int | None = None
    speed: float | None = None           # the machine speed factor
    work: str | None = None              # the work in packets, e.g. "1,000-packet flows"

    def line(self) -> str:
        """The provenance as one compact line (fields that are unknown left out).

        Returns
        -------
        str
            E.g. ``fabric 449e9cf · lossless · 2026-12-04 · rail-clos · 7 Mbit/s hosts ·
            roce 4096 B · entropy recycle · seeds 0-9 · full run, 360 runs valid ·
            speed 0.86``; empty when nothing is known.
        """
        parts = [f"fabric {self.commit}" if self.commit else None, self.experiment,
                 self.date, _topologies(self.topologies),
                 f"{_rates(self.host_mbps)} Mbit/s hosts" if self.host_mbps else None,
                 _transport(self.transport, self.roce_mtu),
                 f"entropy {self.entropy}" if self.entropy else None,
                 f"cc {', '.join(self.ccs)}" if self.ccs else None,
                 f"seed{'s' if len(self.seeds) > 1 else ''} {_ranges(self.seeds)}"
                 if self.seeds else None,
                 self.work, _runs(self.quick, self.runs, self.invalid_runs),
                 f"speed {self.speed:.2f}" if self.speed is not None else None]
        return SEPARATOR.join(p for p in parts if p)


def read(run_dir: Path) -> Provenance:
    """The provenance of a run directory.

    Parameters
    ----------
    run_dir : Path
        A run directory: ``manifest.json``, and ``runs.csv`` for what the
        manifest leaves open. Either may be missing (an empty or partial
        provenance, then).

    Returns
    -------
    Provenance
        What the directory records; nothing invented.
    """
    manifest = _read_json(run_dir / "manifest.json")
    runs = _read_rows(run_dir / "runs.csv")
    params = manifest.get("parameters") or {}
    fidelity = manifest.get("fidelity") or {}
    speed = (params.get("machine_speed") or {}).get("factor")
    count, invalid = fidelity.get("runs"), fidelity.get("invalid_runs")
    if count is None and runs and all("valid" in row for row in runs):
        count = len(runs)
        invalid = sum(str(row["valid"]) not in ("True", "true", "1") for row in runs)
    return Provenance(
        experiment=manifest.get("experiment"),
        commit=short_commit(manifest.get("git_commit")),
        date=_date(params.get("started") or manifest.get("started")
                   or manifest.get("finished")),
        topologies=tuple(_strings(params.get("topologies") or params.get("topology"))),
        host_mbps=host_rates(params, runs),
        transport=params.get("transport"),
        roce_mtu=params.get("roce_mtu") if params.get("transport") == "roce" else None,
        entropy=params.get("spray_entropy"),
        ccs=congestion_controls(params, runs),
        seeds=tuple(int(s) for s in manifest.get("seeds") or ()),
        quick=params.get("quick") if isinstance(params.get("quick"), bool) else None,
        runs=count, invalid_runs=invalid,
        speed=float(speed) if isinstance(speed, (int, float)) else None,
        work=work_text(params.get("work")))


def work_text(work: Any) -> str | None:
    """The ``work`` parameter's lengths in packets as text.

    Parameters
    ----------
    work : dict or None
        The manifest's ``parameters.work``: ``<what>_packets`` and ``<what>_packet_times``
        keys (others ignored).

    Returns
    -------
    str or None
        E.g. ``1,000-packet flows, 2,000-packet buffers`` (``of 4,096 B`` after them when
        ``payload_bytes`` is recorded); None when nothing is recorded.
    """
    if not isinstance(work, dict):
        return None
    parts = [text for key, value in work.items() if not key.startswith("htsim")
             for text in [_length(key, value)] if text]
    payload = work.get("payload_bytes")
    if not parts:
        return None
    return ", ".join(parts) + (f" of {payload:,} B" if isinstance(payload, int) else "")


def short_commit(commit: str | None) -> str | None:
    """A commit hash shortened to 7 digits, its ``-dirty`` suffix kept.

    Parameters
    ----------
    commit : str or None
        The manifest's ``git_commit`` (``unknown`` when git was not there).

    Returns
    -------
    str or None
        E.g. ``449e9cf-dirty``; None when the commit is unknown.
    """
    if not commit or commit == "unknown":
        return None
    head, dirty, _ = commit.partition("-dirty")
    return head[:7] + dirty


def host_rates(params: dict[str, Any], runs: list[dict[str, str]]) -> tuple[float, ...]:
    """The host link rates the runs used, in Mbit/s, lowest first.

    Parameters
    ----------
    params : dict
        The manifest's ``parameters``.
    runs : list of dict
        ``runs.csv``'s rows: their ``host_mbps`` column records what each run
        really used (an ``auto`` rate resolved).

    Returns
    -------
    tuple of float
        The rates of ``runs.csv``; without that column, the manifest's
        ``host_mbps_used`` or a numeric ``host_mbps`` (``auto`` is not a rate);
        empty when neither records one.
    """
    used = {rate for row in runs for rate in [_number(row.get("host_mbps"))] if rate is not None}
    if not used:
        recorded = [rate for rate in (_number(params.get("host_mbps_used")),
                                      _number(params.get("host_mbps"))) if rate is not None]
        used = set(recorded[:1])
    return tuple(sorted(used))


def congestion_controls(params: dict[str, Any], runs: list[dict[str, str]]
                        ) -> tuple[str, ...]:
    """The congestion control(s) the run recorded.

    Parameters
    ----------
    params : dict
        The manifest's ``parameters``: ``cc``, ``ccs`` or ``tcp_cc``.
    runs : list of dict
        ``runs.csv``'s rows: a ``cc`` column adds the controls the manifest
        does not name (an ablation's).

    Returns
    -------
    tuple of str
        The manifest's first, then the others in name order; empty when none
        is recorded.
    """
    found = [*_strings(params.get("cc")), *_strings(params.get("ccs")),
             *_strings(params.get("tcp_cc"))]
    found += sorted({row["cc"] for row in runs if row.get("cc")} - set(found))
    return tuple(dict.fromkeys(found))


# --- formatting (pure) -----------------------------------------------------------------

def _ranges(values: Iterable[int]) -> str:
    """``0-9`` for consecutive values, ``0, 2, 5-7`` otherwise."""
    spans: list[list[int]] = []
    for value in sorted(set(values)):
        if spans and value == spans[-1][1] + 1:
            spans[-1][1] = value
        else:
            spans.append([value, value])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def _rates(rates: tuple[float, ...]) -> str:
    text = [f"{r:g}" for r in rates]
    return text[0] if len(text) == 1 else f"{text[0]}-{text[-1]}"


def _topologies(names: tuple[str, ...]) -> str | None:
    if not names:
        return None
    shown = ", ".join(names[:MAX_TOPOLOGIES])
    return shown + (f" +{len(names) - MAX_TOPOLOGIES} more" if len(names) > MAX_TOPOLOGIES
                    else "")


def _transport(transport: str | None, mtu: int | None) -> str | None:
    if not transport:
        return None
    return f"{transport} {mtu} B" if mtu else transport


def _runs(quick: bool | None, count: int | None, invalid: int | None) -> str | None:
    mode = None if quick is None else ("quick run" if quick else "full run")
    if count is None:
        return mode
    validity = ("" if invalid is None else " valid" if not invalid
                else f", {invalid} invalid")
    counted = f"{count} runs{validity}"
    return f"{mode}, {counted}" if mode else counted


# --- reading ---------------------------------------------------------------------------

def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = results.read_json(path)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _read_rows(path: Path) -> list[dict[str, str]]:
    try:
        return results.read_csv(path)
    except (OSError, ValueError):
        return []


def _strings(value: Any) -> list[str]:
    """A value that is one name or a list of names, as a list (None: empty)."""
    if value is None or value == "":
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value if v not in (None, "")]
    return [str(value)]


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def _date(stamp: Any) -> str | None:
    """The date of an ISO timestamp (``2026-12-04T12:36:20+0000`` -> ``2026-12-04``)."""
    if not isinstance(stamp, str) or len(stamp) < 10 or stamp[4] != "-":
        return None
    return stamp[:10]


def _length(key: str, value: Any) -> str | None:
    """``flow_packets: 1000`` as ``1,000-packet flows``, ``flap_period_packet_times: 400`` as
    ``400-packet-time flap periods``; None for a key in neither unit."""
    for suffix, unit in (("_packet_times", "packet-time"), ("_packets", "packet")):
        if key.endswith(suffix) and isinstance(value, (int, float)):
            return f"{value:,}-{unit} {key[:-len(suffix)].replace('_', ' ')}s"
    return None
