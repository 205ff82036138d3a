"""Runs killed in every phase, with SIGKILL, SIGTERM and SIGINT, leave nothing behind.

Each case starts ``fabric up``, ``fabric traffic`` or ``fabric run``, waits for a
phase to begin (the undo log written, the first emulated host, the first
bridge, the fabric up and running) plus a seeded jitter of up to 0.3 s, and
signals the process as a scheduler or ``timeout`` would. After SIGTERM or
SIGINT the run must end by itself within 5 s; after any signal, ``fabric
clean`` must leave the machine as it was: no bridge, interface, namespace,
process, listener, changed sysctl or undo log.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fabric.emulation import ovs
from tests import system_state

ROOT = Path(__file__).resolve().parents[2]
SELF_EXIT_S = 5.0
PHASE_TIMEOUT_S = 60.0
COMMANDS = {
    "up": ["up", "rail-clos"],
    "traffic": ["traffic", "rail-clos", "--pattern", "ring-allreduce", "--size", "400000"],
    "run": ["run", "placement", "--quick", "--out", "{out}"],
}
# what a command prints once its fabric is up and routed
RUNNING = {"up": "bring-up:", "traffic": "bring-up:", "run": "[placement 1/"}
PHASES = ("undo-log", "hosts", "bridges", "running")
CASES = [(command, phase, sig) for command in COMMANDS
         for phase in (PHASES if command == "up" else ("hosts", "running"))
         for sig in ("SIGKILL", "SIGTERM", "SIGINT")]


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _phase_reached(command: str, phase: str, proc: subprocess.Popen, log: Path) -> bool:
    if phase == "undo-log":
        return system_state.RUNS_DIR.is_dir() and any(system_state.RUNS_DIR.glob("*.json"))
    if phase == "hosts":  # a shell of this run's Mininet (a child of the run's process)
        return any(_parent(int(p.split()[0])) == proc.pid and "mininet:" in p
                   for p in system_state.processes())
    if phase == "bridges":
        return bool(ovs.bridges())
    return RUNNING[command] in log.read_text(errors="replace")


def _comparable(state: dict) -> dict:
    """The snapshot without Open vSwitch's own daemons (shared; a run starts them if they
    are not running)."""
    return {**state, "processes": {p for p in state["processes"]
                                   if "ovs-vswitchd" not in p and "ovsdb-server" not in p}}


@pytest.mark.parametrize("command, phase, sig", CASES, ids=["-".join(c) for c in CASES])
def test_killed_run_leaves_nothing_after_clean(command, phase, sig, tmp_path):
    rng = random.Random(f"{command}-{phase}-{sig}")
    before = _comparable(system_state.snapshot())
    log = tmp_path / "output.log"
    argv = [a.replace("{out}", str(tmp_path / "out")) for a in COMMANDS[command]]
    with open(log, "wb") as sink:
        # started with SIGINT ignored, as a script's background job is: it must still stop
        proc = subprocess.Popen([sys.executable, "-m", "fabric.cli", *argv], cwd=ROOT,
                                stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"),
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + PHASE_TIMEOUT_S
        while not _phase_reached(command, phase, proc, log):
            assert proc.poll() is None, f"ended before {phase}: {log.read_text()[-1500:]}"
            assert time.monotonic() < deadline, f"{phase} not reached: {log.read_text()[-1500:]}"
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.3))
        proc.send_signal(getattr(signal, sig))
        try:
            proc.wait(timeout=SELF_EXIT_S if sig != "SIGKILL" else 10)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {SELF_EXIT_S} s after {sig}: {log.read_text()[-1500:]}")
        assert sig == "SIGKILL" or proc.returncode != 0
        clean = _clean()
        if sig != "SIGKILL":  # the run cleaned up after itself: nothing was left to clean
            assert clean.stdout.strip() == "no leftovers", clean.stdout
        after = _comparable(system_state.snapshot())
        assert not system_state.differences(before, after), log.read_text()[-1500:]
        assert not ovs.bridges()
    finally:  # whatever happened, leave nothing for the next case
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _clean()


def _clean() -> subprocess.CompletedProcess:
    clean = subprocess.run([sys.executable, "-m", "fabric.cli", "clean"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert clean.returncode == 0, clean.stderr
    return clean
