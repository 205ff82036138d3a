"""Host-system helpers: preflight checks, commands, sysctls, processes.

Commands are always argument lists, never shell strings.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from fabric.errors import UserError

REQUIRED_TOOLS = ("ovs-vsctl", "ovs-ofctl", "ovs-vswitchd", "ovsdb-server", "ip", "tc",
                  "ethtool", "mnexec", "nsenter", "ping")


class HostSetupError(UserError, RuntimeError):
    """The machine is not ready to emulate (not root, a tool missing...)."""


def preflight() -> None:
    """Check root and required tools; raise :class:`HostSetupError` naming what is missing."""
    if os.geteuid() != 0:
        raise HostSetupError("emulation needs root: run with sudo")
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        raise HostSetupError(f"missing {', '.join(missing)}: run scripts/setup.sh to install "
                           f"Mininet, Open vSwitch and the network tools")


def run(args: list[str], check: bool = True, timeout: float = 30, input_text: str | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``args`` (in ``env``, or this process's environment) and capture text output;
    raise with its stderr on failure."""
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                          input=input_text, env=env)
    if check and proc.returncode != 0:
        raise HostSetupError(f"{' '.join(args[:3])} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def _sysctl_path(key: str) -> Path:
    return Path("/proc/sys") / key.replace(".", "/")


def read_sysctl(key: str) -> str:
    """Return the current value of ``key`` in this network namespace."""
    return _sysctl_path(key).read_text().strip()


def write_sysctl(key: str, value: str) -> None:
    """Set ``key`` to ``value`` in this network namespace."""
    _sysctl_path(key).write_text(f"{value}\n")


def pid_alive(pid: int) -> bool:
    """Return True when a process with ``pid`` exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running(pid: int) -> bool:
    """Return True when ``pid`` exists and has not finished: a zombie (a finished
    process its parent has not reaped yet) is not running."""
    return pid_alive(pid) and not _is_zombie(pid)


def cmdline(pid: int) -> str:
    """Return ``pid``'s command line with spaces, or '' if it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def settled_cmdline(pid: int, wait: float = 1.0) -> str:
    """:func:`cmdline` of a process that may have just been started.

    Right after ``Popen`` returns, the kernel is still setting up the new program and
    ``/proc/PID/cmdline`` reads empty; only a running process reads empty, so wait up to
    ``wait`` seconds for it to fill (kernel threads, which stay empty, are never ours).
    """
    deadline = time.monotonic() + wait
    while not (line := cmdline(pid)) and running(pid) and time.monotonic() < deadline:
        time.sleep(0.001)
    return line


def kill_tree(pid: int, expect: str | None = None, grace: float = 3.0) -> bool:
    """:func:`kill_trees` for one process; True when it was signalled."""
    return bool(kill_trees([(pid, expect)], grace))


def kill_trees(targets: list[tuple[int, str | None]], grace: float = 3.0) -> list[int]:
    """Stop processes we started (each with its process group, if it leads one).

    All are asked at once (SIGTERM, and SIGHUP for the interactive shells of
    emulated hosts, which ignore SIGTERM); whatever still runs after ``grace``
    seconds in all is killed. So stopping many processes takes one grace period,
    not one each.

    Parameters
    ----------
    targets : list of (pid, expect)
        ``expect``, when not None, is a substring the command line must contain:
        it protects against a recycled pid belonging to someone else.
    grace : float
        Seconds to wait for all of them before SIGKILL.

    Returns
    -------
    list of int
        The pids that were signalled.
    """
    senders = []
    for pid, expect in targets:
        if not running(pid) or (expect is not None and expect not in settled_cmdline(pid)):
            continue
        try:
            group = os.getpgid(pid) == pid
        except ProcessLookupError:
            continue
        senders.append((pid, (lambda sig, p=pid: os.killpg(p, sig)) if group
                        else (lambda sig, p=pid: os.kill(p, sig))))
    for _, send in senders:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                send(sig)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace
    waiting = [(pid, send) for pid, send in senders]
    while waiting and time.monotonic() < deadline:
        time.sleep(0.05)
        waiting = [(pid, send) for pid, send in waiting if running(pid)]
    for _, send in waiting:
        try:
            send(signal.SIGKILL)
        except ProcessLookupError:
            pass
    return [pid for pid, _ in senders]


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return False


_CLONE_NEWNET = 0x40000000


@contextmanager
def netns(pid: int | None) -> Iterator[None]:
    """Run the body in the network namespace of process ``pid`` (None: this thread's
    own). ``setns(2)`` moves only the calling thread; sockets keep the namespace they
    were created in."""
    if pid is None:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(target, _CLONE_NEWNET):
            raise OSError(ctypes.get_errno(), f"setns to process {pid}'s network namespace")
        try:
            yield
        finally:
            if libc.setns(own, _CLONE_NEWNET):
                raise RuntimeError("cannot return to this process's network namespace")
    finally:
        os.close(own)
        os.close(target)
