"""Bounded packet captures on chosen links, with tcpdump, while traffic runs.

A capture point is a link: its switch end's interface, in the root namespace,
sees both directions. An endpoint stands for all of its links. Every file
holds at most ``max_packets`` packets of at most :data:`SNAPLEN_BYTES` bytes
(headers, BTH included, not payloads), so a capture can never fill a disk.
roce packets go to UDP port 4791, which Wireshark and scapy decode as RoCEv2.
"""

from __future__ import annotations

import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import networkx as nx

from fabric.host import system
from fabric.model import graph as fg

SNAPLEN_BYTES = 128
DEFAULT_MAX_PACKETS = 10_000
MAX_PACKETS_LIMIT = 1_000_000


@dataclass(frozen=True)
class CapturePoint:
    """One link to capture: a file name and the switch-side interface."""

    name: str
    dev: str


def _link(graph: nx.Graph, text: str) -> tuple[str, str] | None:
    """``a-b`` as a link of ``graph`` (node names may hold ``-`` themselves)."""
    for i, char in enumerate(text):
        if char == "-" and graph.has_edge(text[:i], text[i + 1:]):
            return text[:i], text[i + 1:]
    return None


def capture_points(graph: nx.Graph, items: list[str]) -> list[CapturePoint]:
    """The links named by ``items``: endpoints (all their links) or links ``a-b``.

    Raises
    ------
    ValueError
        For a name that is neither an endpoint nor a link of the fabric.
    """
    points: dict[str, CapturePoint] = {}
    for item in items:
        if item in graph and fg.is_endpoint(graph, item):
            links = [(item, nbr) for nbr in sorted(graph.neighbors(item))]
        elif (link := _link(graph, item)) is not None:
            links = [link]
        else:
            raise ValueError(f"{item!r} is neither an endpoint nor a link (a-b) of the fabric")
        for a, b in links:
            switch, other = (a, b) if fg.is_switch(graph, a) else (b, a)
            name = f"{other}-{switch}" if fg.is_endpoint(graph, other) else f"{a}-{b}"
            points.setdefault(name, CapturePoint(
                name, fg.intf_name(switch, fg.port(graph, switch, other))))
    return list(points.values())


@contextmanager
def capture(points: list[CapturePoint], out_dir: Path, state: Any,
            max_packets: int = DEFAULT_MAX_PACKETS) -> Iterator[list[Path]]:
    """Run one tcpdump per point into ``out_dir/NAME.pcap`` while the block runs.

    ``state`` is the emulation's run state: every tcpdump is recorded there,
    so teardown and ``fabric clean`` stop it even if this process dies.
    """
    if not 1 <= max_packets <= MAX_PACKETS_LIMIT:
        raise ValueError(f"max_packets must be in 1..{MAX_PACKETS_LIMIT}, got {max_packets}")
    out_dir.mkdir(parents=True, exist_ok=True)
    procs, files = [], []
    try:
        for point in points:
            path = out_dir / f"{point.name}.pcap"
            # -U: write each packet as it comes, so what is stopped early is still whole
            # -Z root: the file stays root's, like every other result (tcpdump would
            # otherwise hand it to its own user)
            proc = subprocess.Popen(["tcpdump", "-i", point.dev, "-w", str(path), "-U", "-n",
                                     "-Z", "root", "-s", str(SNAPLEN_BYTES),
                                     "-c", str(max_packets)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    start_new_session=True)
            procs.append(proc)
            state.add_process(proc.pid, expect="tcpdump")
            files.append(path)
        _wait_until_listening(procs, files)
        yield files
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # tcpdump flushes and closes its file
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                system.kill_tree(proc.pid, expect="tcpdump")


def _wait_until_listening(procs: list[subprocess.Popen], files: list[Path],
                          timeout_s: float = 5.0) -> None:
    """tcpdump writes the file header once it listens: wait for every header."""
    deadline = time.monotonic() + timeout_s
    while not all(f.exists() and f.stat().st_size >= 24 for f in files):
        for proc in procs:
            if proc.poll() is not None:
                assert proc.stderr is not None  # capture() starts tcpdump with stderr=PIPE
                raise RuntimeError(f"tcpdump exited ({proc.returncode}): "
                                   f"{proc.stderr.read().decode(errors='replace').strip()}")
        if time.monotonic() > deadline:
            raise RuntimeError("tcpdump did not start capturing within "
                               f"{timeout_s:.0f} s")
        time.sleep(0.05)
