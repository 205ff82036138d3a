"""Experiment run directories: raw data, manifest, summary (no root needed).

Every run writes into its own new directory and refuses to touch one that
already holds results, so earlier results are never overwritten. A run
directory holds ``manifest.json`` (command, parameters, seeds, versions, git
commit, fidelity), raw data as CSV, ``summary.json`` (``experiment``,
``valid``, ``fidelity``, ``table``) and the figures.
"""

from __future__ import annotations

import csv
import json
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

from fabric.children import SOURCE_ROOT
from fabric.errors import UserError



class ResultsError(UserError, RuntimeError):
    """A results directory that cannot be used."""


def new_run_dir(path: Path) -> Path:
    """Create ``path`` as an empty run directory; refuse one that holds anything."""
    if path.exists() and any(path.iterdir()):
        raise ResultsError(f"{path} already holds results; choose a new --out directory")
    path.mkdir(parents=True, exist_ok=True)
    return path


def versions() -> dict[str, str]:
    """Versions of everything that shapes a result."""
    found = {"python": platform.python_version(), "kernel": platform.release()}
    for package in ("os-ken", "networkx", "scapy", "matplotlib"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "missing"
    for name, args in (("openvswitch", ["ovs-vsctl", "--version"]),
                       ("mininet", ["mn", "--version"])):
        try:
            out = subprocess.run(args, capture_output=True, text=True, timeout=10).stdout
            found[name] = out.splitlines()[0].split()[-1] if out else "unknown"
        except (OSError, subprocess.TimeoutExpired):
            found[name] = "missing"
    return found


def git_commit() -> str:
    """The project's commit (with ``-dirty`` when the tree has changes)."""
    try:
        commit = subprocess.run(["git", "-C", str(SOURCE_ROOT), "rev-parse", "HEAD"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(SOURCE_ROOT), "status", "--porcelain"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (commit or "unknown") + ("-dirty" if dirty else "")


def write_manifest(run_dir: Path, experiment: str, parameters: dict[str, Any],
                   seeds: list[int], fidelity: dict[str, Any], commit: str | None = None
                   ) -> Path:
    """Write ``manifest.json``; ``commit`` is :func:`git_commit` as the run started (read
    now when not given)."""
    manifest = {"experiment": experiment, "command": sys.argv, "parameters": parameters,
                "seeds": seeds, "started": parameters.get("started"),
                "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "versions": versions(),
                "git_commit": commit or git_commit(), "fidelity": fidelity}
    path = run_dir / "manifest.json"
    path.write_text(json.dumps(manifest, indent=1, default=str))
    return path


def write_csv(path: Path, rows: Iterable[dict[str, Any]]) -> Path:
    """Write dict rows as CSV (columns: the union of keys, first-seen order)."""
    rows = list(rows)
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def read_csv(path: Path) -> list[dict[str, str]]:
    """Read CSV rows as strings (plots convert what they need)."""
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def write_summary(run_dir: Path, experiment: str, table: list[dict[str, Any]],
                  fidelity: dict[str, Any], extra: dict[str, Any] | None = None) -> Path:
    """Write ``summary.json``; ``valid`` is false when any fidelity check failed."""
    summary = {"experiment": experiment, "valid": bool(fidelity.get("valid")),
               "fidelity": fidelity, "table": table, **(extra or {})}
    path = run_dir / "summary.json"
    path.write_text(json.dumps(summary, indent=1, default=str))
    return path


def merge_fidelity(reports: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Combine per-run fidelity reports: valid only if every run was valid.

    Each check keeps its range of values and how many runs failed it; a run whose
    check measured nothing (value None) counts in ``unmeasured_runs``, not the range.
    """
    merged: dict[str, dict[str, Any]] = {}
    runs = invalid = 0
    for report in reports:
        runs += 1
        invalid += not report.get("valid")
        for check in report.get("checks", []):
            entry = merged.setdefault(check["name"], {"name": check["name"], "failed_runs": 0,
                                                      "threshold": check["threshold"],
                                                      "values": []})
            entry["values"].append(check["value"])
            entry["failed_runs"] += 0 if check["ok"] else 1
    checks = []
    for entry in merged.values():
        every = entry.pop("values")
        values = [v for v in every if v is not None]
        unmeasured = {"unmeasured_runs": len(every) - len(values)} if len(values) < len(every) \
            else {}
        checks.append({**entry, "min": min(values, default=None),
                       "max": max(values, default=None), **unmeasured,
                       "ok": entry["failed_runs"] == 0})
    return {"valid": invalid == 0 and runs > 0, "runs": runs, "invalid_runs": invalid,
            "checks": checks}


def read_json(path: Path) -> dict[str, Any]:
    """Read a JSON file written by this module."""
    return json.loads(path.read_text())
