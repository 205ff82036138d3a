"""Where ovs-vswitchd's forwarding thread spends its main loop, under a real run (root).

Runs ``fabric run collisions --quick --attempts 1`` (the main job's run) and,
from its first measured run on, counts with ``perf stat`` what the forwarding
thread (ovs-vswitchd's main thread) does each second: main-loop iterations
(its ``poll`` calls), receive calls (``recvmmsg``: one per port per iteration,
the sweep), send batches (``sendmmsg``) and its CPU time. A packet waits in
its socket for part of an iteration, so the milliseconds per iteration bound
the input delay the fidelity check measures. It counts the ``accept`` calls
too: every iteration tries each listening socket once (each bridge's
``.mgmt`` and ``.snoop`` sockets and the daemon's control socket), and an
``accept`` that finds nothing still allocates and frees a socket in the
kernel. ``--profile`` also samples the
thread for a few seconds and prints its time by binary (kernel, ovs-vswitchd,
the C library: its allocator shows there).

Needs ``perf`` (Debian: ``apt install linux-perf``) and nothing else running.

Usage::

    sudo .venv/bin/python benchmarks/ovs_loop.py [--seconds 40] [--profile]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EVENTS = {"syscalls:sys_enter_poll": "iterations", "syscalls:sys_enter_recvmmsg": "receives",
          "syscalls:sys_enter_sendmmsg": "send_batches", "syscalls:sys_enter_accept": "accepts",
          "task-clock": "cpu_ms"}
PROFILE_S = 6


def vswitchd_pid() -> int:
    """The pid (= main thread id) of the running ovs-vswitchd."""
    out = subprocess.run(["pgrep", "-x", "ovs-vswitchd"], capture_output=True, text=True).stdout
    if not out.split():
        raise SystemExit("ovs-vswitchd is not running")
    return int(out.split()[0])


def parse_intervals(text: str) -> list[dict[str, float]]:
    """Rows ``{event name: count}`` per interval from ``perf stat -I -x,`` output."""
    rows: dict[float, dict[str, float]] = defaultdict(dict)
    for line in text.splitlines():
        fields = line.split(",")
        if line.startswith("#") or len(fields) < 4 or fields[3] not in EVENTS:
            continue
        try:
            rows[float(fields[0])][EVENTS[fields[3]]] = float(fields[1])
        except ValueError:  # "<not counted>": the thread has gone
            continue
    return [rows[t] for t in sorted(rows)]


def per_iteration(row: dict[str, float], interval_s: float) -> str:
    """One interval as text: iterations/s, receives and send batches per iteration,
    CPU per iteration and the thread's share of a core."""
    loops = row.get("iterations", 0.0)
    if not loops:
        return "idle"
    return (f"{loops / interval_s:6.0f} iterations/s, {row.get('receives', 0) / loops:5.1f} "
            f"receive calls, {row.get('accepts', 0) / loops:4.1f} accept calls and "
            f"{row.get('send_batches', 0) / loops:4.1f} send batches per "
            f"iteration, {row.get('cpu_ms', 0) / loops:5.3f} ms CPU per iteration, "
            f"thread {row.get('cpu_ms', 0) / 1e3 / interval_s:4.2f} of a core")


def profile(pid: int, workdir: Path) -> str:
    """The thread's time by binary over ``PROFILE_S`` seconds (perf record)."""
    data = workdir / "perf.data"
    subprocess.run(["perf", "record", "-q", "-t", str(pid), "-F", "999", "-o", str(data),
                    "--", "sleep", str(PROFILE_S)], capture_output=True)
    report = subprocess.run(["perf", "report", "-i", str(data), "--sort", "dso", "--stdio"],
                            capture_output=True, text=True).stdout
    return "\n".join(line for line in report.splitlines() if line.strip()
                     and not line.startswith("#"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40.0,
                        help="how long to count, from the first measured run (5-120)")
    parser.add_argument("--profile", action="store_true",
                        help="also print the thread's time by binary")
    args = parser.parse_args()
    if not 5 <= args.seconds <= 120:
        parser.error("--seconds must be within 5..120")
    if shutil.which("perf") is None:
        parser.error("needs perf (Debian: apt install linux-perf)")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        cmd = [sys.executable, "-m", "fabric.cli", "run", "collisions", "--quick",
               "--attempts", "1", "--out", str(workdir / "run")]
        with subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) as run:
            try:
                for line in run.stderr:  # the first progress line: a fabric forwards
                    if line.startswith("[collisions 1/"):
                        break
                else:
                    raise SystemExit(f"the run ended before its first measured run "
                                     f"(exit {run.wait()})")
                pid = vswitchd_pid()
                stat = subprocess.run(
                    ["perf", "stat", "-t", str(pid), "-I", "1000", "-x,",
                     "-e", ",".join(EVENTS), "--", "sleep", str(args.seconds)],
                    capture_output=True, text=True)
                rows = parse_intervals(stat.stderr)
                binaries = profile(pid, workdir) if args.profile else ""
                run.stderr.read()
                status = run.wait()
            except KeyboardInterrupt:
                run.wait()  # Ctrl-C reached the run too: let it tear its fabric down
                return 130
    print(f"ovs-vswitchd's forwarding thread (pid {pid}), per second of "
          f"`fabric run collisions --quick` (exit {status}):")
    for second, row in enumerate(rows, 1):
        print(f"  {second:3d} s: {per_iteration(row, 1.0)}")
    busy = [r for r in rows if r.get("iterations")]
    if busy:
        total = {key: sum(r.get(key, 0.0) for r in busy) for key in EVENTS.values()}
        print(f"  over the {len(busy)} busy seconds: {per_iteration(total, len(busy))}")
    if binaries:
        print(f"time by binary over {PROFILE_S} s:\n{binaries}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
