"""Run agents as local processes (one per fake host on loopback addresses).

For tests and benchmarks without Mininet: every endpoint gets its own
127.x.y.z address, so the agents bind their real ports (7100, 4791) side by
side. Every process started here is tracked by PID and killed if it
outlives its time.
"""

from __future__ import annotations

import json
import random
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from fabric.children import start_python
from fabric.traffic.model import Plan


@dataclass
class AgentRun:
    """How one agent process ended."""

    host: str
    returncode: int | None   # None: it had to be killed
    result: dict[str, Any] | None
    stderr: str
    cpu_s: float | None      # user + system CPU seconds of the process


def loopback_hosts(names: Sequence[str], prefixlen: int = 8,
                   rng: random.Random | None = None) -> dict[str, list[str]]:
    """One fresh 127.a.b.c address per name, in a random 127.a.b.0/24.

    A random subnet keeps concurrent or back-to-back runs from meeting each
    other's listeners or TIME_WAIT sockets.
    """
    rng = rng or random.Random()
    a, b = rng.randrange(1, 255), rng.randrange(0, 255)
    return {name: [f"127.{a}.{b}.{i + 2}/{prefixlen}"] for i, name in enumerate(names)}


def spare_address(hosts: dict[str, list[str]], offset: int = 100) -> str:
    """An unused loopback address in the same /24 as the first host (for proxies)."""
    first = next(iter(hosts.values()))[0].split("/")[0]
    a, b, c, _ = first.split(".")
    return f"{a}.{b}.{c}.{offset}"


def launch(plan: Plan, hosts: Iterable[str], workdir: Path,
           extra_args: Sequence[str] = (), gated: bool = False) -> dict[str, subprocess.Popen]:
    """Write the plan and start one agent process per host.

    ``gated`` gives each a stdin and stdout pipe (for ``--start-gate`` in
    ``extra_args``: the agent says READY on stdout and reads its start time
    from stdin).

    Returns
    -------
    dict
        host -> Popen; pass it to :func:`collect`.
    """
    workdir = workdir.resolve()  # the agents start in the source root
    workdir.mkdir(parents=True, exist_ok=True)
    plan_path = workdir / "plan.json"
    plan.save(plan_path)
    procs: dict[str, subprocess.Popen] = {}
    for host in hosts:
        procs[host] = start_python(
            "fabric.agent", ["--plan", str(plan_path), "--host", host,
                             "--out", str(workdir / f"{host}.json"), *extra_args],
            stdin=subprocess.PIPE if gated else None,
            stdout=subprocess.PIPE if gated else subprocess.DEVNULL,
            stderr=subprocess.PIPE)
    return procs


def collect(procs: dict[str, subprocess.Popen], workdir: Path, timeout_s: float
            ) -> dict[str, AgentRun]:
    """Wait for every process (killing, by PID, any still alive at the timeout)."""
    runs: dict[str, AgentRun] = {}
    end = time.monotonic() + timeout_s
    for host, proc in procs.items():
        cpu = None
        try:
            proc.wait(max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        if proc.stderr:
            proc.stderr.close()
        path = workdir / f"{host}.json"
        result = json.loads(path.read_text()) if path.exists() else None
        if result is not None:
            cpu = result.get("cpu_s")
        runs[host] = AgentRun(host, proc.returncode if proc.returncode is not None
                              and proc.returncode >= 0 else None, result, stderr, cpu)
    return runs


def run_plan(plan: Plan, workdir: Path, hosts: Iterable[str] | None = None,
             timeout_s: float | None = None, extra_args: Sequence[str] = ()
             ) -> dict[str, AgentRun]:
    """Launch agents for ``hosts`` (default: all in the plan) and collect them.

    ``timeout_s`` defaults to the plan's deadline plus a margin.
    """
    names = list(plan.hosts if hosts is None else hosts)
    if timeout_s is None:
        timeout_s = max(0.0, plan.start_at - time.time()) + plan.deadline_s + 10.0
    procs = launch(plan, names, workdir, extra_args)
    try:
        return collect(procs, workdir, timeout_s)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
