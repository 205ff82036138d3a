"""Process helpers: zombies are not running; stopping many processes at once; the
remote controller's address."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from fabric.host import ports, system


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


def test_kill_trees_stops_a_process_the_moment_it_started():
    # just after Popen returns, /proc/PID/cmdline reads empty for a while (it did in half
    # of the reads here): a process stopped then must not pass for someone else's
    for _ in range(20):
        proc = subprocess.Popen(["sleep", "60"])
        try:
            assert system.kill_trees([(proc.pid, "sleep")], grace=1) == [proc.pid]
            assert proc.wait(timeout=10) != 0
        finally:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("text, expected", [("remote:127.0.0.1:6633", ("127.0.0.1", 6633)),
                                            ("remote:127.1.2.3:1", ("127.1.2.3", 1))])
def test_a_remote_controller_on_loopback_is_accepted(text, expected):
    assert ports.parse_remote_controller(text) == expected


@pytest.mark.parametrize("text, words", [
    ("127.0.0.1:6633", "remote:HOST:PORT"), ("remote:127.0.0.1", "remote:HOST:PORT"),
    ("remote:10.0.0.1:6633", "loopback"), ("remote:0.0.0.0:6633", "loopback"),
    ("remote:::1:6633", "IPv4 loopback"), ("remote:ctl.example:6633", "not an IP address"),
    ("remote:127.0.0.1:0", "1..65535"), ("remote:127.0.0.1:http", "1..65535")])
def test_a_remote_controller_off_loopback_or_malformed_is_refused(text, words):
    with pytest.raises(ValueError, match=words):
        ports.parse_remote_controller(text)


def test_nothing_listening_is_reported():
    import socket

    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]   # bound, never listening
        with pytest.raises(ports.NotListeningError, match=str(port)):
            ports.check_listening("127.0.0.1", port)
