"""Host-system helpers: preflight checks, commands, sysctls, processes.

Commands are always argument lists, never shell strings.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

REQUIRED_TOOLS = ("ovs-vsctl", "ovs-ofctl", "ovs-vswitchd", "ovsdb-server", "ip", "tc",
                  "ethtool", "mnexec", "ping")


class HostSetupError(RuntimeError):
    """The machine is not ready to emulate (not root, a tool missing...)."""


def preflight() -> None:
    """Check root and required tools; raise :class:`HostSetupError` naming what is missing."""
    if os.geteuid() != 0:
        raise HostSetupError("emulation needs root: run with sudo")
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        raise HostSetupError(f"missing {', '.join(missing)}: run scripts/setup.sh to install "
                           f"Mininet, Open vSwitch and the network tools")


def run(args: list[str], check: bool = True, timeout: float = 30, input_text: str | None = None
        ) -> subprocess.CompletedProcess:
    """Run ``args`` and capture text output; raise with its stderr on failure."""
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                          input=input_text)
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


def cmdline(pid: int) -> str:
    """Return ``pid``'s command line with spaces, or '' if it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def kill_tree(pid: int, expect: str | None = None, grace: float = 3.0) -> bool:
    """Terminate ``pid``'s process group (or the process), then kill it.

    Parameters
    ----------
    pid : int
        A process we started in its own session.
    expect : str, optional
        A substring its command line must contain; protects against a
        recycled pid belonging to someone else.

    Returns
    -------
    bool
        True when something was signalled.
    """
    if not pid_alive(pid) or (expect is not None and expect not in cmdline(pid)):
        return False
    try:
        target = os.getpgid(pid)
        group = target == pid
    except ProcessLookupError:
        return False
    send = (lambda sig: os.killpg(pid, sig)) if group else (lambda sig: os.kill(pid, sig))
    try:
        send(signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not pid_alive(pid) or _is_zombie(pid):
            break
        time.sleep(0.05)
    else:
        try:
            send(signal.SIGKILL)
        except ProcessLookupError:
            pass
    return True


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return False


class PortBusyError(RuntimeError):
    """A listen port is already taken (often by a stale controller)."""


def check_port_free(host: str, port: int) -> None:
    """Raise :class:`PortBusyError` when ``host:port`` cannot be listened on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        if probe.connect_ex((host, port)) == 0:
            raise PortBusyError(f"port {host}:{port} is busy: another controller is listening "
                                f"(a stale run? try `fabric clean`)")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
                raise PortBusyError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
            raise
