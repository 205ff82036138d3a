"""The linter and the type checker pass: ruff's error rules on every package, mypy on the
fabric package, the builders and the controllers (setup.cfg's [mypy]; scripts/setup.sh
installs both)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINTED = ("fabric", "topologies", "controllers", "experiments", "benchmarks", "tests",
          "examples", "scripts")
TYPED = ("fabric", "topologies", "controllers")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def test_ruff_finds_no_error():
    proc = _run("ruff", "check", "--no-cache", *LINTED)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-1000:]


@pytest.mark.slow
def test_the_typed_layers_type_check():
    proc = _run("mypy", "--no-incremental", *TYPED)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-1000:]
