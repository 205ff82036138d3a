"""Evidence that an emulation run was not CPU-bound and lost nothing unseen.

Checks, each with its measured value and threshold:

* ``ovs_busiest_thread``: CPU share of ovs-vswitchd's busiest thread (in
  userspace mode one thread forwards everything; near 100 % it drops or
  delays packets silently);
* ``machine_cpu``: share of all cores busy (agents, shaping and OVS compete);
* ``hidden_socket_drops``: drops counted by the kernel on ovs-vswitchd's
  packet sockets, which no OVS counter shows;
* ``idle_path_rate`` (added by the traffic runner): goodput of one flow on
  an idle path over its configured rate.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fabric import ovs

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MAX_OVS_THREAD_SHARE = 0.85
MAX_MACHINE_CPU = 0.95
MIN_IDLE_PATH_RATE = 0.90


@dataclass(frozen=True)
class Check:
    """One fidelity check."""

    name: str
    value: float
    threshold: float
    ok: bool
    detail: str = ""


def thread_cpu_ticks(pid: int) -> dict[int, int]:
    """``{thread id: utime + stime ticks}`` of every thread of ``pid``."""
    ticks = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            fields = (task / "stat").read_text().rsplit(") ", 1)[1].split()
            ticks[int(task.name)] = int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return ticks


def machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


class FidelityMonitor:
    """Measure OVS and machine CPU and hidden drops between start and stop."""

    def __init__(self) -> None:
        self.checks: list[Check] = []
        self._t0 = 0.0
        self._ovs_pid: int | None = None
        self._threads0: dict[int, int] = {}
        self._machine0 = (0, 0)
        self._drops0 = 0

    def start(self) -> None:
        """Take the first readings."""
        self._t0 = time.monotonic()
        self._ovs_pid = ovs.vswitchd_pid()
        self._threads0 = thread_cpu_ticks(self._ovs_pid) if self._ovs_pid else {}
        self._machine0 = machine_ticks()
        self._drops0 = sum(s.drops for s in ovs.packet_sockets())

    def stop(self) -> list[Check]:
        """Take the second readings and return the checks."""
        elapsed = max(time.monotonic() - self._t0, 1e-6)
        checks = []
        if self._ovs_pid:
            threads1 = thread_cpu_ticks(self._ovs_pid)
            busiest = max((threads1[t] - self._threads0.get(t, 0) for t in threads1), default=0)
            share = busiest / CLOCK_TICKS / elapsed
            checks.append(Check("ovs_busiest_thread", round(share, 3), MAX_OVS_THREAD_SHARE,
                                share <= MAX_OVS_THREAD_SHARE, "CPU share of one core"))
        busy1, total1 = machine_ticks()
        busy = (busy1 - self._machine0[0]) / max(total1 - self._machine0[1], 1)
        checks.append(Check("machine_cpu", round(busy, 3), MAX_MACHINE_CPU,
                            busy <= MAX_MACHINE_CPU, f"{os.cpu_count()} cores"))
        drops = sum(s.drops for s in ovs.packet_sockets()) - self._drops0
        checks.append(Check("hidden_socket_drops", drops, 0, drops == 0,
                            "kernel drops on ovs-vswitchd packet sockets"))
        self.checks = checks
        return checks


def idle_path_check(achieved_mbps: float, configured_mbps: float) -> Check:
    """Goodput of one flow on an idle path against the configured rate."""
    ratio = achieved_mbps / configured_mbps if configured_mbps else 0.0
    return Check("idle_path_rate", round(ratio, 3), MIN_IDLE_PATH_RATE,
                 ratio >= MIN_IDLE_PATH_RATE,
                 f"{achieved_mbps:.2f} of {configured_mbps:.2f} Mbit/s")


def report(checks: list[Check]) -> dict[str, Any]:
    """``{"valid": all ok, "checks": [...]}`` for results and manifests."""
    return {"valid": all(c.ok for c in checks), "checks": [asdict(c) for c in checks]}
