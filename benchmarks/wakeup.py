"""What a wake-up costs a process on this machine, by how long it slept (no root).

``python benchmarks/wakeup.py [--sleeps-ms 0,0.5,1,4.4,20] [--wakeups 300] [--busy]``
waits in epoll for each sleep length, ``--wakeups`` times, doing nothing when it
wakes, and prints the process's CPU time per wake-up (user and system). ``--busy``
keeps every core busy with low-priority spinners meanwhile, as a loaded emulation does.
On a virtual machine a wake-up can cost far more than the work it serves; this is why
one agent process serves all hosts (:mod:`fabric.agent.runner`).
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
import subprocess
import sys
import time


def cost_per_wakeup(sleep_s: float, wakeups: int) -> float:
    """CPU seconds the process spends per return from ``epoll_wait(sleep_s)``."""
    selector = selectors.DefaultSelector()
    quiet, other = socket.socketpair()  # registered, never readable
    selector.register(quiet, selectors.EVENT_READ)
    try:
        start = time.process_time()
        for _ in range(wakeups):
            selector.select(sleep_s)
        return (time.process_time() - start) / wakeups
    finally:
        selector.close()
        quiet.close()
        other.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sleeps-ms", default="0,0.5,1,4.4,20")
    parser.add_argument("--wakeups", type=int, default=300)
    parser.add_argument("--busy", action="store_true")
    args = parser.parse_args()
    try:
        sleeps = [float(v) / 1e3 for v in args.sleeps_ms.split(",")]
    except ValueError:
        parser.error("--sleeps-ms: comma-separated milliseconds")
    if any(s < 0 for s in sleeps) or args.wakeups < 1:
        parser.error("sleeps must be >= 0 and --wakeups >= 1")
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(os.cpu_count() or 1)] if args.busy else []
    try:
        for proc in spinners:
            os.setpriority(os.PRIO_PROCESS, proc.pid, 19)
        for sleep_s in sleeps:
            cost = cost_per_wakeup(sleep_s, args.wakeups)
            print(f"sleep {sleep_s * 1e3:5.1f} ms: {cost * 1e6:6.1f} us of CPU per wake-up"
                  f"{' (cores busy)' if spinners else ''}")
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
