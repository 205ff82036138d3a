"""Per-link byte counters over time, from the switch ports' kernel counters.

Every switch port is a veth in the root namespace, so each directed link's
load can be read from sysfs without spawning a process: a switch's port
``tx`` counts what the switch sent on the link, its ``rx`` what the
neighbour sent to it. (Open vSwitch's own port counters need one
``ovs-ofctl`` process per switch and read.) For a switch -> endpoint link
this is the load offered to the endpoint's ingress buffer; drops there are
counted separately on the endpoint's IFB.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import networkx as nx

from fabric.model import graph as fg
from fabric.traffic.result import LinkSeries

SYSFS = Path("/sys/class/net")
DirectedLink = tuple[str, str]  # (sender, receiver)


def counter_sources(graph: nx.Graph) -> dict[DirectedLink, tuple[str, str]]:
    """``{(a, b): (root-namespace interface, "tx"|"rx")}`` for every directed link."""
    sources: dict[DirectedLink, tuple[str, str]] = {}
    for a, b in graph.edges:
        for u, v in ((a, b), (b, a)):
            if fg.is_switch(graph, u):
                sources[(u, v)] = (fg.intf_name(u, fg.port(graph, u, v)), "tx")
            else:  # an endpoint sends: read the switch end's receive counter
                sources[(u, v)] = (fg.intf_name(v, fg.port(graph, v, u)), "rx")
    return sources


def read_bytes(sources: dict[DirectedLink, tuple[str, str]], root: Path = SYSFS
               ) -> dict[DirectedLink, int]:
    """Read the byte counter of every directed link (missing interfaces read 0)."""
    out = {}
    for link, (dev, direction) in sources.items():
        try:
            out[link] = int((root / dev / "statistics" / f"{direction}_bytes").read_text())
        except (OSError, ValueError):
            out[link] = 0
    return out


class LinkSampler:
    """Sample every directed link's counter each ``interval_s`` in a thread.

    Use as a context manager around the traffic; ``series`` holds the samples.
    """

    def __init__(self, graph: nx.Graph, interval_s: float = 0.2):
        self.sources = counter_sources(graph)
        self.interval_s = interval_s
        self.series = LinkSeries()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="link-sampler", daemon=True)

    def __enter__(self) -> "LinkSampler":
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _sample(self) -> None:
        self.series.times.append(time.time())
        self.series.bytes.append(read_bytes(self.sources))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()
