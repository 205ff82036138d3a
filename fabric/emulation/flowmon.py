"""Which switches each flow crossed: per-flow OpenFlow monitor entries.

For every flow of interest we add, on every switch, an exact-match entry
above everything the controller put in table 0. It only counts: it marks
the packet in register 7 (:data:`MARK_REG`, invisible on the wire) and
resubmits it to table 0, where the mark keeps it from matching again, so the
controller's own entries handle it as if the monitor were not there: fabric's
policies, and a user's app with whatever pipeline it builds. After the traffic, the switches whose entry counted packets
are the flow's path; with the graph they give the exact hop sequence. This
is exact for hashed paths (the select group's choice cannot be predicted
from outside the datapath) and cheap: one entry per flow per switch, read
once.

Monitors carry the cookie prefix ``0xf1`` so they never collide with the
controller's entries (cookie 0) and are removed together.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import networkx as nx

from fabric.host import system
from fabric.model import graph as fg

COOKIE_PREFIX = 0xF1 << 56
COOKIE_MASK = 0xFF << 56
PRIORITY_MONITOR = 65000  # above any entry a controller is likely to use
MARK_REG = "reg7"         # an Open vSwitch register: pipeline metadata, never on the wire
PROTO_NAMES = {6: "tcp", 17: "udp"}


@dataclass(frozen=True)
class FlowKey:
    """What identifies a flow on the wire; ``src_port`` None matches any."""

    src_ip: str
    dst_ip: str
    proto: int
    src_port: int | None
    dst_port: int
    dscp: int = 0


def monitor_flow(index: int, key: FlowKey) -> str:
    """One ``ovs-ofctl add-flows`` line for monitor ``index``: count, mark, resubmit."""
    proto = PROTO_NAMES[key.proto]
    fields = [f"cookie={COOKIE_PREFIX | index:#x}", "table=0", f"priority={PRIORITY_MONITOR}",
              f"{MARK_REG}=0", proto, f"nw_src={key.src_ip}", f"nw_dst={key.dst_ip}",
              f"tp_dst={key.dst_port}", f"ip_dscp={key.dscp}"]
    if key.src_port is not None:
        fields.append(f"tp_src={key.src_port}")
    actions = [f"load:1->NXM_NX_{MARK_REG.upper()}[]", "resubmit(,0)"]
    return ",".join(fields) + ",actions=" + ",".join(actions) + "\n"


def parse_monitor_counts(dump: str) -> dict[int, int]:
    """``{monitor index: packets}`` from ``ovs-ofctl dump-flows`` output."""
    counts = {}
    for line in dump.splitlines():
        cookie = re.search(r"cookie=(0x[0-9a-f]+)", line)
        packets = re.search(r"n_packets=(\d+)", line)
        if cookie and packets:
            value = int(cookie.group(1), 16)
            if value & COOKIE_MASK == COOKIE_PREFIX:
                counts[value & ~COOKIE_MASK] = int(packets.group(1))
    return counts


def path_from_switches(graph: nx.Graph, src: str, dst: str, crossed: set[str]) -> list[str]:
    """The node sequence from endpoint ``src`` to ``dst`` through the ``crossed`` switches.

    Raises
    ------
    ValueError
        When the crossed switches do not connect ``src`` to ``dst`` (e.g. no
        packet was counted), or when they are more than one path's: the flow's
        packets were split over several (the switches routed them adaptively).
    """
    sub = graph.subgraph(set(crossed) | {src, dst})
    try:
        path = nx.shortest_path(sub, src, dst)
    except (nx.NetworkXNoPath, nx.NodeNotFound):
        raise ValueError(f"switches {sorted(crossed)} do not join {src} and {dst}") from None
    if set(crossed) - set(path):
        raise ValueError(f"{src} to {dst} crossed {sorted(crossed)}: more than one path")
    return path


class FlowMonitor:
    """Install monitors for ``keys`` on every switch; read their paths later."""

    def __init__(self, graph: nx.Graph, keys: list[FlowKey]):
        self.graph = graph
        self.keys = keys

    def install(self) -> None:
        """Add the monitor entries to every bridge."""
        lines = "".join(monitor_flow(i, k) for i, k in enumerate(self.keys))
        for sw in fg.switches(self.graph):
            system.run(["ovs-ofctl", "-O", "OpenFlow15", "add-flows", sw, "-"],
                       input_text=lines, timeout=30)

    def crossed(self) -> dict[int, set[str]]:
        """``{monitor index: switches whose entry counted packets}``."""
        found: dict[int, set[str]] = {i: set() for i in range(len(self.keys))}
        for sw in fg.switches(self.graph):
            dump = system.run(["ovs-ofctl", "-O", "OpenFlow15", "dump-flows", sw,
                               f"cookie={COOKIE_PREFIX:#x}/{COOKIE_MASK:#x}"], timeout=30).stdout
            for index, packets in parse_monitor_counts(dump).items():
                if packets > 0 and index in found:
                    found[index].add(sw)
        return found

    def remove(self) -> None:
        """Delete every monitor entry."""
        for sw in fg.switches(self.graph):
            system.run(["ovs-ofctl", "-O", "OpenFlow15", "del-flows", sw,
                        f"cookie={COOKIE_PREFIX:#x}/{COOKIE_MASK:#x}"], check=False)
