"""Rate scaling and the forwarding budget of this machine (pure code).

The graph keeps the modelled cluster's physical rates (hundreds of Gbit/s);
the emulation runs them at an explicit scale (Mbit/s per physical Gbit/s).
Before anything is built we check that every scaled rate can be shaped and
that the fabric at full load stays within what the switch datapath forwards
without silent loss.

Userspace Open vSwitch forwards all packets in one thread. Its budget is
calibrated by ``benchmarks/traffic.py``: every host sends a flow across the
fabric (a permutation) sprayed packet by packet over all paths, so that every
link really runs at full load, and a rate is faithful while packets wait less
than 1 ms on average in ovs-vswitchd's receive sockets (or a tenth of a packet
time, where that is longer). Loss-based ceilings (up to ~120 k packet-hops/s,
docs/platform.md) overstate what is faithful by far: OVS delays packets by
milliseconds long before it drops any.

**The budget falls with the switch ports.** The forwarding thread reads every
port's socket on each wake-up (one ``recvmmsg`` and a batch of receive buffers
per port), so a packet waits for a sweep whose length grows with the ports,
whatever the load. The budget is therefore ``BUDGET_PORT_PKT_HOPS / ports``
full-size packet-hops per second, flat below ``MIN_BUDGET_PORTS``: there the
hosts' agents, not the sweep, give out first. That gives rail-clos (48 ports,
and every fabric under 64) 18.1 k, the k=4 fat-tree (80) 14.5 k and the
64-endpoint rail-clos (192) 6.0 k: roce defaults of 12.5, 6 and 0.9 Mbit/s per
host at ``ROCE_RATE_HEADROOM``, each the rate the quick experiments were
measured faithful at.

**It counts packets, not bits**: a packet's forwarding cost barely depends on
its length up to roce's 4096 bytes of payload, so rates are planned for the
workload's packet size.

**It holds for the machine it was measured on at full speed.** A machine that
runs slower now (a shared host's busy hour) gets a share of it: callers pass
``speed`` from :func:`fabric.emulation.machine_speed.machine_speed`, which times
a small probe. This module stays pure: it only multiplies.

The measurements behind each figure, and the levers that were measured and not
taken (one daemon per switch, AF_XDP ports), are in docs/benchmarks.md,
"Forwarding budget".
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import networkx as nx

from fabric.emulation.shaping import LINK_MTU
from fabric.errors import UserError
from fabric.model import graph as fg
from fabric.traffic.model import ROCE_MTUS, ROCE_PACKET_OVERHEAD, TCP_PACKET_BYTES

# Full-size packet-hops/s x switch ports that userspace OVS forwards faithfully (module
# docstring); a fabric with fewer ports than MIN_BUDGET_PORTS gets their share
BUDGET_PORT_PKT_HOPS = 1_160_000.0
MIN_BUDGET_PORTS = 64
# Not measured here (no openvswitch module on these machines): a kernel
# datapath forwards on every core; we allow ten times the userspace budget of the
# smallest fabric, whatever the ports.
KERNEL_BUDGET_FACTOR = 10.0
MIN_SHAPED_MBPS = 0.1  # HTB's rate tables lose accuracy below ~100 kbit/s
MAX_SHAPED_MBPS = 1000.0
MAX_USERSPACE_PORTS = 1024
MAX_AUTO_HOST_MBPS = 20.0
# Share of the budget a roce workload's default rate fills: its transport runs in the
# host agents, beside OVS on the same cores, and at the full budget the machine's CPU
# left too little margin for a slower hour (measured: docs/benchmarks.md, "Headroom at
# the default rates"). A rate given explicitly is checked against the whole budget.
ROCE_RATE_HEADROOM = 0.9
MIN_PACKET_BYTES = ROCE_MTUS[0] + ROCE_PACKET_OVERHEAD
AUTO_RATE_STEP_MBPS = 0.5
FINE_RATE_STEP_MBPS = 0.1  # below 1 Mbit/s (large fabrics), down to what HTB shapes
# what a fabric too large for this machine can do instead
SMALLER = "a smaller fabric, or simulate it (fabric run collisions --backend ns3)"


class CapacityError(UserError, ValueError):
    """A rate or fabric size this machine cannot emulate faithfully."""


@dataclass(frozen=True)
class RatePlan:
    """The emulated rate of every link and the load check behind it."""

    scale_mbps_per_gbps: float
    link_mbps: dict[frozenset, float]
    demand_pkt_hops: float
    budget_pkt_hops: float
    switch_ports: int
    datapath: str
    host_mbps: float
    packet_bytes: int = TCP_PACKET_BYTES
    speed: float = 1.0  # the machine's speed factor the default rate was planned with

    @property
    def packet_s(self) -> float:
        """Seconds a full-size packet takes on a host link."""
        return self.packet_bytes * 8 / (self.host_mbps * 1e6)

    @property
    def headroom(self) -> float:
        """Budget over full-load demand; above 1 means the fabric fits."""
        return self.budget_pkt_hops / self.demand_pkt_hops if self.demand_pkt_hops else float("inf")

    @property
    def machine_headroom(self) -> float:
        """The headroom on this machine as it runs now (the budget times ``speed``)."""
        return self.headroom * self.speed


def forwarding_budget(switch_ports: int, datapath: str, speed: float = 1.0) -> float:
    """Full-size packet-hops per second the datapath forwards faithfully with
    ``switch_ports`` ports (up to 4 kB packets cost the same, see module docstring) on a
    machine running at ``speed`` of the one it was measured on
    (:mod:`fabric.emulation.machine_speed`)."""
    if not 0 < speed <= 1:
        raise ValueError(f"speed must be in (0, 1], got {speed}")
    if datapath == "kernel":  # forwards in softirq on every core: no sweep of the ports
        return speed * KERNEL_BUDGET_FACTOR * BUDGET_PORT_PKT_HOPS / MIN_BUDGET_PORTS
    return speed * BUDGET_PORT_PKT_HOPS / max(switch_ports, MIN_BUDGET_PORTS)


def auto_host_mbps(graph: nx.Graph, datapath: str = "user",
                   busy_links: int | None = None,
                   packet_bytes: int = TCP_PACKET_BYTES, headroom: float = 1.0,
                   speed: float = 1.0) -> float:
    """The largest host rate (0.5 Mbit/s steps, 0.1 below 1 Mbit/s, at most 20) whose
    full load fits within ``headroom`` of the budget.

    Parameters
    ----------
    graph : networkx.Graph
        The fabric graph with physical rates.
    datapath : {"user", "kernel"}
        The Open vSwitch datapath that will forward.
    busy_links : int, optional
        How many endpoint links the workload keeps busy at once (an incast
        loads only its client's); None means all of them.
    packet_bytes : int
        IP bytes of the workload's full-size packets: the budget counts packets.
    headroom : float
        Share of the budget to fill (``ROCE_RATE_HEADROOM`` for roce workloads).
    speed : float
        This machine's speed factor (:func:`fabric.emulation.machine_speed.machine_speed`):
        a machine running slower now than the one the budget was measured on gets
        that share of it.

    Raises
    ------
    CapacityError
        When not even the smallest step fits.
    """
    ports = sum(graph.degree(sw) for sw in fg.switches(graph))
    per_mbps = (_injected_bps(graph, 1.0, busy_links) / (packet_bytes * 8)
                * mean_switch_hops(graph))
    fits = headroom * forwarding_budget(ports, datapath, speed) / per_mbps
    step = AUTO_RATE_STEP_MBPS if fits >= 1.0 else FINE_RATE_STEP_MBPS
    rate = min(MAX_AUTO_HOST_MBPS, round(int(fits / step) * step, 1))
    if rate < FINE_RATE_STEP_MBPS:
        raise CapacityError(f"even {FINE_RATE_STEP_MBPS} Mbit/s per host link exceeds what "
                            f"{datapath}space Open vSwitch forwards faithfully here; "
                            f"use {SMALLER}")
    return rate


def _injected_bps(graph: nx.Graph, host_mbps: float, busy_links: int | None) -> float:
    """Bits per second the endpoints inject at full load (``busy_links`` of them at most)."""
    fastest = max(graph.edges[a.endpoint, a.switch]["gbps"] for a in fg.attachments(graph))
    rates = sorted((graph.edges[a.endpoint, a.switch]["gbps"] / fastest * host_mbps * 1e6
                    for a in fg.attachments(graph)), reverse=True)
    return sum(rates if busy_links is None else rates[:busy_links])


def mean_switch_hops(graph: nx.Graph) -> float:
    """Mean number of switches on a shortest path between two endpoint NICs."""
    core = graph.subgraph(fg.switches(graph))
    atts = fg.attachments(graph)
    dist = {sw: nx.single_source_shortest_path_length(core, sw)
            for sw in {a.switch for a in atts}}
    pairs = [(a, b) for a, b in itertools.permutations(atts, 2) if a.endpoint != b.endpoint]
    if not pairs:
        return 1.0
    return sum(dist[a.switch][b.switch] + 1 for a, b in pairs) / len(pairs)


def scale_for_host_rate(graph: nx.Graph, host_mbps: float) -> float:
    """Return the scale that emulates the fastest endpoint link at ``host_mbps``."""
    fastest = max(graph.edges[a.endpoint, a.switch]["gbps"] for a in fg.attachments(graph))
    return host_mbps / fastest


def plan_rates(graph: nx.Graph, host_mbps: float | None = None, datapath: str = "user",
               busy_links: int | None = None, enforce_budget: bool = True,
               packet_bytes: int = TCP_PACKET_BYTES, speed: float = 1.0) -> RatePlan:
    """Scale every link and check the fabric fits this machine.

    Parameters
    ----------
    graph : networkx.Graph
        The fabric graph with physical rates.
    host_mbps : float, optional
        Emulated rate of the fastest endpoint link; all links scale alike.
        None picks :func:`auto_host_mbps` at ``speed``.
    datapath : {"user", "kernel"}
        The Open vSwitch datapath that will forward.
    busy_links : int, optional
        How many endpoint links the workload keeps busy at once; None (all
        of them) checks the fabric's full load.
    enforce_budget : bool
        False lets a benchmark go beyond the forwarding budget (to measure
        where fidelity breaks); the plan's ``headroom`` is then below 1.
    packet_bytes : int
        IP bytes of the workload's full-size packets (1500 for TCP, the RoCE
        path MTU plus 44 for roce): the budget counts packets, not bits.
    speed : float
        This machine's speed factor: it scales the default rate, and the plan
        keeps it (:attr:`RatePlan.machine_headroom`). A rate given explicitly is
        checked against the whole budget, so that a command line means the same
        on every machine; the caller warns where the machine runs too slowly for it.

    Raises
    ------
    CapacityError
        When a scaled rate is outside what HTB shapes reliably, or the full
        load exceeds the forwarding budget (the message gives the largest
        ``host_mbps`` that fits).
    """
    if not MIN_PACKET_BYTES <= packet_bytes <= LINK_MTU:
        raise CapacityError(f"full-size packets must have {MIN_PACKET_BYTES}..{LINK_MTU} "
                            f"bytes, got {packet_bytes}")
    if host_mbps is None:
        host_mbps = auto_host_mbps(graph, datapath, busy_links, packet_bytes, speed=speed)
    if busy_links is not None and busy_links < 1:
        raise CapacityError(f"busy_links must be at least 1, got {busy_links}")
    if not host_mbps > 0:
        raise CapacityError(f"host rate must be positive, got {host_mbps} Mbit/s")
    scale = scale_for_host_rate(graph, host_mbps)
    links = {frozenset((a, b)): d["gbps"] * scale for a, b, d in graph.edges(data=True)}
    for key, mbps in links.items():
        if not MIN_SHAPED_MBPS <= mbps <= MAX_SHAPED_MBPS:
            a, b = sorted(key)
            raise CapacityError(
                f"link {a}-{b} would run at {mbps:.3g} Mbit/s; emulated rates must lie in "
                f"{MIN_SHAPED_MBPS}..{MAX_SHAPED_MBPS:g} Mbit/s (change the host rate)")
    ports = sum(graph.degree(sw) for sw in fg.switches(graph))
    if datapath == "user" and ports > MAX_USERSPACE_PORTS:
        raise CapacityError(f"{ports} switch ports exceed the {MAX_USERSPACE_PORTS} that userspace "
                            f"Open vSwitch forwards on this machine; use {SMALLER}")
    demand = (_injected_bps(graph, host_mbps, busy_links) / (packet_bytes * 8)
              * mean_switch_hops(graph))
    budget = forwarding_budget(ports, datapath)
    if demand > budget and enforce_budget:
        fits = int(host_mbps * budget / demand * 10) / 10  # round down: it is a maximum
        if fits < MIN_SHAPED_MBPS:
            raise CapacityError(
                f"the fabric needs {demand / host_mbps / 1e3:.0f} k packet-hops/s per Mbit/s "
                f"of host rate; {datapath}space Open vSwitch forwards about "
                f"{budget / 1e3:.0f} k here, less than the lowest rate HTB shapes "
                f"({MIN_SHAPED_MBPS} Mbit/s) needs: use {SMALLER}")
        raise CapacityError(
            f"at {host_mbps:g} Mbit/s per host link the fabric needs {demand / 1e3:.0f} k "
            f"packet-hops/s at {'full' if busy_links is None else f'{busy_links}-link'} load, but {datapath}space Open vSwitch forwards about "
            f"{budget / 1e3:.0f} k with {ports} ports here; use a host rate of at most "
            f"{fits:.1f} Mbit/s or a smaller fabric")
    return RatePlan(scale, links, demand, budget, ports, datapath, host_mbps, packet_bytes,
                    speed)
