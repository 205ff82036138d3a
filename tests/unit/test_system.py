"""Process helpers: zombies are not running; stopping many processes at once."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from fabric.emulation import system


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]


def test_a_finished_unreaped_process_is_not_running():
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while _state(child.pid) != "Z":  # exited, not yet waited for
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert system.pid_alive(child.pid)  # the pid still exists...
    assert not system.running(child.pid)  # ...but nothing runs under it
    child.wait()
    assert not system.pid_alive(child.pid)


def test_kill_trees_stops_processes_that_ignore_sigterm():
    # an interactive shell (an emulated host's) ignores SIGTERM; so does this trap
    procs = [subprocess.Popen(["bash", "-c", "trap '' TERM; sleep 60 & wait"],
                              start_new_session=True) for _ in range(3)]
    try:
        stopped = system.kill_trees([(p.pid, "bash") for p in procs], grace=0.5)
        assert sorted(stopped) == sorted(p.pid for p in procs)
        for p in procs:
            p.wait(timeout=10)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_kill_trees_leaves_a_recycled_pid_alone():
    proc = subprocess.Popen(["sleep", "60"])
    try:
        assert system.kill_trees([(proc.pid, "not-its-command-line")]) == []
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
