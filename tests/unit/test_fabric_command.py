"""The command scripts/setup.sh installs as /usr/local/bin/fabric, so that ``sudo fabric``
works: it runs the checkout the current directory is in, and says so outside one."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMAND = ROOT / "scripts" / "fabric-command"


@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "fabric").exists(),
                    reason="the checkout's .venv is made by scripts/setup.sh")
def test_it_runs_the_fabric_of_the_checkout_it_is_called_in():
    proc = subprocess.run([str(COMMAND), "topo", "leaf-spine"], cwd=ROOT / "docs",
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("fabric leaf-spine")


def test_outside_a_checkout_it_says_what_to_do(tmp_path):
    proc = subprocess.run([str(COMMAND), "topo", "leaf-spine"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "not in a fabric checkout" in proc.stderr
