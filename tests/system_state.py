"""A snapshot of what a fabric run can change on this machine, for before/after checks.

Bridges, root-namespace interfaces, network namespaces, fabric's processes
(controllers, emulated hosts, agents, Open vSwitch daemons), listeners on the
OpenFlow ports, the sysctls a bring-up sets, and the undo logs. Whatever this
user cannot read is recorded as such, so two snapshots still compare.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SYSCTLS = ("net.core.rmem_default", "net.core.wmem_default",
           "net.ipv6.conf.default.disable_ipv6", "net.ipv4.tcp_allowed_congestion_control",
           "kernel.sched_rt_runtime_us")
RUNS_DIR = Path("/run/fabric/runs")
# command-line marks of the processes a run starts
PROCESS_MARKS = ("-m controllers", "mininet:", "fabric.agent", "ovs-vswitchd", "ovsdb-server",
                 "iperf")


def _run(args: list[str]) -> str:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unreadable: {exc}"


def processes() -> set[str]:
    """``pid command line`` of every process a run may start (pytest itself excluded)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        if any(mark in cmd for mark in PROCESS_MARKS) and "pytest" not in cmd:
            found.add(f"{entry.name} {cmd}")
    return found


def _netns() -> set[int]:
    inodes = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                inodes.add(os.stat(entry / "ns" / "net").st_ino)
            except OSError:
                pass
    return inodes


def snapshot() -> dict[str, object]:
    """Everything a run may change, as comparable values."""
    state: dict[str, object] = {
        "interfaces": sorted(Path("/sys/class/net").iterdir()),
        "netns": _netns(),
        "processes": processes(),
        "listeners": sorted(line.split()[3] for line in _run(["ss", "-ltnH"]).splitlines()
                            if line.split()[3].rsplit(":", 1)[-1] in ("6633", "6653")),
        "sysctls": {key: Path("/proc/sys", *key.split(".")).read_text().strip()
                    for key in SYSCTLS},
        "undo_logs": sorted(RUNS_DIR.iterdir()) if RUNS_DIR.is_dir() else [],
    }
    if os.geteuid() == 0 and shutil.which("ovs-vsctl"):
        state["bridges"] = _run(["ovs-vsctl", "--timeout=5", "list-br"])
    return state


def differences(before: dict[str, object], after: dict[str, object]) -> list[str]:
    """What changed between two snapshots, one line per kind."""
    return [f"{key}: {before.get(key)!r} -> {after.get(key)!r}"
            for key in sorted(set(before) | set(after)) if before.get(key) != after.get(key)]
