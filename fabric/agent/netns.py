"""Sockets in an emulated host's network namespace, opened from outside it.

One agent process serves several hosts (see :mod:`fabric.agent.runner`): it
runs in its own namespace and opens each host's sockets in that host's
namespace. A socket keeps the namespace it was created in for its whole
life, so only its creation needs to be inside; sending, receiving and
polling work from anywhere. ``setns(2)`` changes the calling thread only,
and the agent has one thread.
"""

from __future__ import annotations

import ctypes
import os
import socket
from pathlib import Path

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


class Namespace:
    """The network namespace of process ``pid`` (an emulated host's shell).

    Parameters
    ----------
    pid : int
        A process in the namespace; ``/proc/<pid>/ns/net`` is opened now, so
        the namespace stays valid (and the same one) while this object lives.

    Raises
    ------
    ValueError
        If ``pid`` is not a positive integer.
    OSError
        If the process does not exist or its namespace cannot be opened.
    """

    def __init__(self, pid: int) -> None:
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
            raise ValueError(f"a namespace's pid must be a positive integer, got {pid!r}")
        self.pid = pid
        self._fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self._home = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)

    @property
    def proc_net(self) -> Path:
        """``/proc/<pid>/net``: the namespace's counters, readable from outside."""
        return Path(f"/proc/{self.pid}/net")

    def socket(self, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM
               ) -> socket.socket:
        """A new socket that lives in this namespace.

        Raises
        ------
        OSError
            If the namespace cannot be entered. Failing to return to the
            agent's own namespace is a ``RuntimeError``: every later socket
            would land in the wrong place.
        """
        _setns(self._fd)
        try:
            return socket.socket(family, kind)
        finally:
            try:
                _setns(self._home)
            except OSError as exc:
                raise RuntimeError(f"cannot return to the agent's namespace: {exc}") from exc

    def close(self) -> None:
        """Release the namespace references (idempotent)."""
        for fd in (self._fd, self._home):
            if fd >= 0:
                os.close(fd)
        self._fd = self._home = -1
