"""Change a running fabric's links: cut them, restore them, degrade their rate.

What a failure experiment (or a user at the Mininet prompt) does to cables: a
cut link's switch end goes administratively down and its peer loses carrier;
a degraded link stays up at a lower shaped rate. The switches' adaptive
routing, when there is one, is told at once (the controller learns through
OpenFlow port status).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import networkx as nx

from fabric.emulation import capacity, ecn, hostconfig, shaping
from fabric.emulation.adaptive_routing import AdaptiveRouting
from fabric.emulation.errors import EmulationError
from fabric.host import system
from fabric.model import graph as fg
from fabric.model.lanes import LaneConfig


class LinkControl:
    """The links of one running fabric.

    Parameters
    ----------
    graph : networkx.Graph
        The fabric.
    link_mbps : dict
        Each link's shaped rate (``frozenset({a, b})`` -> Mbit/s): the bring-up's
        rate plan, updated here as rates change.
    lanes : LaneConfig
        The lanes, whose shares a new rate keeps.
    queue_pkts : int
        The queues' bound (an ECN marker's thresholds follow the rate).
    ecn_marking : ecn.EcnMarking or None
        The switches' ECN marking (None: none).
    lossless : bool
        Under flow control every direction is shaped at its sender; otherwise the way
        into an endpoint is shaped at its IFB.
    frame_bytes : int
        Wire bytes of the workload's full-size packets.
    workdir : Path
        Where the tc batches for endpoints go.
    host_pids : dict
        Endpoint -> a process in its network namespace.
    adaptive_routing : AdaptiveRouting or None
        The switches' per-packet choice, told of every change.
    """

    def __init__(self, graph: nx.Graph, link_mbps: dict[frozenset, float], lanes: LaneConfig,
                 queue_pkts: int, ecn_marking: ecn.EcnMarking | None, lossless: bool,
                 frame_bytes: int, workdir: Path, host_pids: dict[str, int],
                 adaptive_routing: AdaptiveRouting | None = None):
        self.graph = graph
        self.link_mbps = link_mbps
        self.lanes = lanes
        self.queue_pkts = queue_pkts
        self.ecn_marking = ecn_marking
        self.lossless = lossless
        self.frame_bytes = frame_bytes
        self.workdir = workdir
        self.host_pids = host_pids
        self.adaptive_routing = adaptive_routing

    def set_rate(self, a: str, b: str, mbps: float) -> None:
        """Shape the link ``a``-``b`` (both directions) at ``mbps`` from now on: a
        degraded link, up but slow. Queued packets stay; buffers and lanes keep
        their sizes and shares.

        Raises
        ------
        EmulationError
            When there is no such link or the rate cannot be shaped.
        """
        self._check_link(a, b)
        if not capacity.MIN_SHAPED_MBPS <= mbps <= capacity.MAX_SHAPED_MBPS:
            raise EmulationError(f"link rate must be {capacity.MIN_SHAPED_MBPS}.."
                                 f"{capacity.MAX_SHAPED_MBPS:g} Mbit/s, got {mbps}")
        marker = None
        if self.ecn_marking:
            try:
                marker = ecn.marker_object(mbps, self.queue_pkts, self.ecn_marking,
                                           self.frame_bytes)
            except ecn.MarkerError as exc:
                raise EmulationError(str(exc)) from None
        for node, other in ((a, b), (b, a)):
            port_no = fg.port(self.graph, node, other)
            if fg.is_endpoint(self.graph, node):
                self._set_endpoint_rate(node, port_no, mbps, marker)
            elif self.lossless or not fg.is_endpoint(self.graph, other):  # else at the IFB
                dev = fg.intf_name(node, port_no)
                lines = shaping.rate_change_lines(dev, mbps, self.lanes)
                if marker:
                    lines.append(ecn.marker_line(dev, marker, replace=True))
                system.run(["tc", "-batch", "-"],
                           input_text="".join(line + "\n" for line in lines))
        self.link_mbps[frozenset((a, b))] = mbps
        if self.adaptive_routing is not None:  # the switches' copies of its queues too
            self.adaptive_routing.set_rate(a, b, mbps)

    def set_state(self, links: Iterable[tuple[str, str]], up: bool) -> None:
        """Cut links or restore them, as pulled cables would: each link's switch
        end goes administratively down, its peer loses carrier, and both switches
        report the port down to the controller. All links change in one ``ip``
        call (a lost switch loses its links at once). Packets queued on a cut
        interface are lost; its shaping stays.

        Raises
        ------
        EmulationError
            When a link does not exist.
        """
        links = list(links)
        lines = []
        for a, b in links:
            self._check_link(a, b)
            node, other = (a, b) if fg.is_switch(self.graph, a) else (b, a)
            dev = fg.intf_name(node, fg.port(self.graph, node, other))
            lines.append(f"link set dev {dev} {'up' if up else 'down'}\n")
        if lines:
            system.run(["ip", "-batch", "-"], input_text="".join(lines))
        if self.adaptive_routing is not None:  # the switches choose among the ports left
            self.adaptive_routing.set_links(links, up)

    def _set_endpoint_rate(self, endpoint: str, port_no: int, mbps: float,
                           marker: Path | None) -> None:
        """The NIC's egress and, for the way in, its IFB (lossy) with the IFB's marker."""
        ifb = hostconfig.ifb_name(endpoint, port_no)
        devs = [fg.intf_name(endpoint, port_no)] + ([] if self.lossless else [ifb])
        lines = [line for dev in devs for line in shaping.rate_change_lines(dev, mbps, self.lanes)]
        if marker and not self.lossless:
            lines.append(ecn.marker_line(ifb, marker, replace=True))
        batch = self.workdir / f"{endpoint}-rate.tc"
        batch.write_text("".join(line + "\n" for line in lines))
        try:
            tc_in_netns(self.host_pids[endpoint], batch)
        except system.HostSetupError as exc:
            raise EmulationError(f"{endpoint}: changing the rate failed: {exc}") from None

    def _check_link(self, a: str, b: str) -> None:
        if not self.graph.has_edge(a, b):
            raise EmulationError(f"no link between {a} and {b}")


def tc_in_netns(pid: int, batch: Path) -> None:
    """Run a ``tc -batch`` file in the network namespace of process ``pid`` with this
    process's mounts (BPF loading needs the bpf filesystem)."""
    system.run(["nsenter", "-t", str(pid), "-n", "tc", "-batch", str(batch)], timeout=60)
