"""Sockets opened in another process's network namespace (root: setns)."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import time

import pytest

from fabric.agent.netns import Namespace

SO_NETNS_COOKIE = 71  # Linux 5.14: which network namespace a socket belongs to
COOKIE = ("import socket, struct; s = socket.socket(); "
          f"print(struct.unpack('Q', s.getsockopt(socket.SOL_SOCKET, {SO_NETNS_COOKIE}, 8))[0])")


def _cookie(sock: socket.socket) -> int:
    return struct.unpack("Q", sock.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8))[0]


@pytest.fixture
def other_namespace():
    """A process in a fresh network namespace."""
    proc = subprocess.Popen(["unshare", "--net", "sleep", "60"])
    try:
        home = os.stat("/proc/self/ns/net").st_ino
        end = time.monotonic() + 10
        while os.stat(f"/proc/{proc.pid}/ns/net").st_ino == home:  # until it has moved
            assert time.monotonic() < end, "unshare did not create a namespace"
            time.sleep(0.02)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_a_socket_lives_in_the_namespace_it_was_opened_in(other_namespace: int) -> None:
    there = int(subprocess.run(["nsenter", "-t", str(other_namespace), "-n", sys.executable,
                                "-c", COOKIE], capture_output=True, text=True,
                               check=True).stdout)
    netns = Namespace(other_namespace)
    try:
        with netns.socket(socket.AF_INET, socket.SOCK_DGRAM) as inside, \
                socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as home:
            assert _cookie(inside) == there
            assert _cookie(home) != there  # and this process is back in its own
        assert "lo:" in (netns.proc_net / "dev").read_text()
    finally:
        netns.close()
