"""All-pairs reachability over the emulated fabric, with real ICMP echo.

Every endpoint pings every NIC address of every other endpoint, all hosts at
once and all destinations of one host in parallel, so a 16-host fabric is
checked in about a second. Failed pairs are retried once, because a reply
can be lost to a transient (e.g. a route being replaced).
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from fabric.model import graph as fg

PING_SCRIPT = r"""
for ip in "$@"; do
  ( if ping -n -q -c 1 -W 1 "$ip" >/dev/null 2>&1; then echo "ok $ip"; else echo "fail $ip"; fi ) &
done
wait
"""


@dataclass
class ReachabilityReport:
    """Outcome of an all-pairs check."""

    pairs: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when every pair answered."""
        return self.pairs > 0 and not self.failed


def targets(graph: nx.Graph) -> dict[str, list[str]]:
    """Return, per endpoint, every NIC address of every other endpoint."""
    atts = fg.attachments(graph)
    return {ep: [a.ip for a in atts if a.endpoint != ep] for ep in fg.endpoints(graph)}


def check_all_pairs(graph: nx.Graph, host_of: Any, retries: int = 1) -> ReachabilityReport:
    """Ping every (endpoint, remote NIC) pair.

    Parameters
    ----------
    graph : networkx.Graph
        The fabric graph.
    host_of : callable
        ``host_of(name)`` returns the Mininet host (``Emulation.host``).
    retries : int
        Extra rounds for pairs that failed.
    """
    start = time.monotonic()
    todo = targets(graph)
    report = ReachabilityReport(pairs=sum(len(v) for v in todo.values()))
    ip_owner = {a.ip: a.endpoint for a in fg.attachments(graph)}
    for _ in range(retries + 1):
        failed = _ping_round(todo, host_of)
        todo = {}
        for src, ip in failed:
            todo.setdefault(src, []).append(ip)
        if not todo:
            break
    report.failed = [(src, ip_owner[ip]) for src, ips in todo.items() for ip in ips]
    report.seconds = time.monotonic() - start
    return report


def _ping_round(todo: dict[str, list[str]], host_of: Any) -> list[tuple[str, str]]:
    procs = {src: host_of(src).popen(["sh", "-c", PING_SCRIPT, "sh", *ips],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
             for src, ips in todo.items() if ips}
    failed = []
    for src, proc in procs.items():
        out, _ = proc.communicate(timeout=30)
        answered = {line.split()[1] for line in out.decode().splitlines()
                    if line.startswith("ok ")}
        failed += [(src, ip) for ip in todo[src] if ip not in answered]
    return failed
