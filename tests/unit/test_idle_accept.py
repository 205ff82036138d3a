"""The idle-accept library preloaded into ovs-vswitchd: accept() on a socket that the
thread's last poll() found idle answers EAGAIN without the kernel, and every other
accept() is the real one (a child Python process runs with the library preloaded)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fabric.emulation import idle_accept

pytestmark = pytest.mark.skipif(shutil.which("clang") is None,
                                reason="clang builds the library (scripts/setup.sh)")

CHILD = r"""
import ctypes, errno, select, socket, sys, threading, time
skipped = ctypes.c_ulong.in_dll(ctypes.CDLL(sys.argv[1]), "fabric_idle_accepts")
path = sys.argv[2]

def listener(blocking):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path + str(blocking)); s.listen(4); s.setblocking(blocking)
    return s

def polled(s, timeout_ms=0):
    p = select.poll(); p.register(s, select.POLLIN)
    return p.poll(timeout_ms)

def accept_result(s):
    try:
        conn, _ = s.accept(); conn.close(); return "connection"
    except BlockingIOError:
        return "EAGAIN"

out = {}
s = listener(False)
out["never polled"] = (accept_result(s), skipped.value)
polled(s)
out["polled idle"] = (accept_result(s), skipped.value)
out["again, same round"] = (accept_result(s), skipped.value)
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); c.connect(path + "False")
out["connected, not yet polled"] = (accept_result(s), skipped.value)
c2 = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); c2.connect(path + "False")
out["polled ready"] = (bool(polled(s, 1000)) and accept_result(s), skipped.value)
b = listener(True)
polled(b)
threading.Timer(0.2, lambda: socket.socket(socket.AF_UNIX).connect(path + "True")).start()
out["blocking, polled idle"] = (accept_result(b), skipped.value)
print(repr(out))
"""


def run_child(tmp_path: Path) -> dict:
    library = idle_accept.library(tmp_path / "cache")
    proc = subprocess.run([sys.executable, "-c", CHILD, str(library), str(tmp_path / "l")],
                          env={**os.environ, "LD_PRELOAD": str(library)},
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return eval(proc.stdout)  # noqa: S307 - our own child's repr of a dict of tuples


def test_only_an_idle_polled_nonblocking_socket_is_answered_here(tmp_path) -> None:
    out = run_child(tmp_path)
    assert out["never polled"] == ("EAGAIN", 0)  # the kernel's answer
    assert out["polled idle"] == ("EAGAIN", 1)  # ours
    assert out["again, same round"] == ("EAGAIN", 2)
    # a connection that came after the poll waits for the next poll, which wakes at once
    assert out["connected, not yet polled"] == ("EAGAIN", 3)
    assert out["polled ready"] == ("connection", 3)
    assert out["blocking, polled idle"] == ("connection", 3)  # blocks, never fails


def test_the_library_is_built_once_per_source(tmp_path) -> None:
    first = idle_accept.library(tmp_path)
    mtime = first.stat().st_mtime_ns
    assert idle_accept.library(tmp_path) == first and first.stat().st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no partial files left


def test_a_failed_build_says_why(tmp_path, monkeypatch) -> None:
    source = tmp_path / "broken.c"
    source.write_text("int f(void) { return }\n")
    monkeypatch.setattr(idle_accept, "SOURCE", source)
    with pytest.raises(idle_accept.BuildError, match="clang failed"):
        idle_accept.library(tmp_path / "cache")
    assert not any((tmp_path / "cache").iterdir())
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the cache directory would go
    with pytest.raises(idle_accept.BuildError, match="building in"):
        idle_accept.library(blocked / "cache")
    monkeypatch.setattr(idle_accept.shutil, "which", lambda name: None)
    with pytest.raises(idle_accept.BuildError, match="clang is missing"):
        idle_accept.library(tmp_path / "cache")
