"""Rate scaling and the forwarding budget of this machine (pure code).

The graph keeps the modelled cluster's physical rates (hundreds of Gbit/s);
the emulation runs them at an explicit scale (Mbit/s per physical Gbit/s).
Before anything is built we check that every scaled rate can be shaped and
that the fabric at full load stays within what the switch datapath forwards
without silent loss.

Userspace Open vSwitch forwards all packets in one thread. Its budget is
measured by ``benchmarks/traffic.py``: every one of 16 hosts sends a flow
across the fabric (a permutation) sprayed packet by packet over all paths,
so that every link really runs at full load, and the run is faithful while
packets wait less than 1 ms on average in ovs-vswitchd's receive sockets
(or a tenth of a packet time, where that is longer). Loss-based ceilings
(up to ~120 k packet-hops/s, docs/platform.md) overstate what is faithful by far:
OVS delays packets by milliseconds long before it drops any.

**The budget falls with the switch ports.** The forwarding thread reads every
port's socket on each wake-up (one ``recvmmsg`` and a batch of receive buffers
per port, ``benchmarks/ovs_loop.py``), so a packet waits for a sweep whose
length grows with the ports, whatever the load. The budget is therefore
``BUDGET_PORT_PKT_HOPS / ports`` full-size packet-hops per second, flat below
``MIN_BUDGET_PORTS``: there the hosts' agents, not the sweep, give out first.
Measured on 2 cores with the forwarding thread pinned and one agent process
(input delay per run; rate per host of 4096-byte roce payloads; packet-hops/s
at full load):

* rail-clos, 48 ports: ``traffic.py`` 0.37-0.93 ms from 7.5 to 24 Mbit/s
  (9.4-30.1 k) in one session, 0.77-0.95 ms at 13.5 (17.0 k) and 1.00 at 15
  in a slower one; the quick collisions stride 0.31-0.91 ms at 13 Mbit/s,
  up to 1.15 at 18; the quick failures run (ring all-reduces) 0.23-0.75 ms
  at 12.5, the agents losing up to 1.3 % of their link time (limit 2 %); a
  sprayed all-to-all at 12.5 kept the machine 0.96-0.99 busy and lost 10-13 %.
  So rail-clos stays at 18.1 k (12.5 Mbit/s), and so does every fabric with
  fewer than 64 ports.
* k=4 fat-tree, 80 ports, glibc's allocator: ``traffic.py`` 0.59 ms at 4.5
  (9.7 k), 0.89 at 6, 1.48 at 7.5 (1.03-1.24 at 4.5 in the slower session);
  the quick stride 0.50-0.82 ms at 4.5, 0.64-2.34 at 6, with the machine only
  0.60-0.77 busy: the sweep, not the CPU, set the limit. With tcmalloc
  (:mod:`fabric.emulation.ovs`): the quick stride 0.45-0.79 ms at 4.5 and
  0.59-0.83 at 6 (12.9 k).
* 64-endpoint rail-clos, 192 ports, glibc: the quick stride 1.56-2.35 ms at
  1.5 Mbit/s (limit 2.2 ms: invalid), 1.43-1.98 ms at 0.7 (limit 4.7 ms).

``BUDGET_PORT_PKT_HOPS`` gives the fat-tree 14.5 k, its roce default 6 Mbit/s
at the headroom below (4.5 under the flat budget of 11 k before), rail-clos
18.1 k (12.5 Mbit/s; 7.5 before) and the 64-endpoint rail-clos 6.0 k (0.9
Mbit/s; 1.5 before, invalid at full load).

Two levers that would remove the sweep were measured; neither is usable as
it stands: one ovs-vswitchd per switch (possible with ``--enable-dummy``
daemons and ``dummy`` datapaths, but on a chain of 8 bridges they used 1.4-1.6
cores where one daemon used 0.9-1.0, each paying its whole main loop per
packet), and AF_XDP ports (no sweep, but OVS 3.1 drops frames over ~3.6 kB
there, so roce could only use 2048-byte payloads, and shaping needs a bridge
hop per link); see ``benchmarks/datapath.py``. What each iteration costs was
cut instead (:mod:`fabric.emulation.idle_accept`); the budget was not raised
for it (measured at half speed only). What the machine pays per packet-hop
(``benchmarks/traffic.py --project``), measured at half speed: 0.031-0.034 cores
per thousand packet-hops/s for the whole machine on top of 0.8-1.0 at none, so
four times the old flat budget (44 k) would take 2.2-2.5 of its 2 cores.

The budget's figures were measured with the machine at full speed. A machine that runs slower
now (a shared host's busy hour: the same rail-clos stride was unfaithful at 12.5
Mbit/s, at the edge at 8 and valid at 7) gets a share of the budget: callers pass ``speed`` from
:func:`fabric.emulation.machine_speed.machine_speed`, which times a small probe.
This module stays pure: it only multiplies.

The budget counts packets, not bits: roce's 4140-byte packets (4096 bytes of
payload) at 8.5 Mbit/s per host, the same 10.7 k packet-hops/s as 1444-byte
ones at 3, kept OVS's input delay at 0.54-0.68 ms (1444 bytes: 0.52-0.60) with
the same CPU. So rates are planned for the workload's packet size.
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
# Share of the budget a roce workload's default rate fills. Its transport runs in the
# host agents (Python, tens of us of CPU per packet sent or received, beside OVS's
# work on the same two cores): at the full budget sprayed and adaptive roce runs kept
# the machine 0.80-0.87 busy, and the same quick runs read 0.05-0.15 more at other
# hours (this VM shares its host), enough to cross the 0.95 machine-CPU or the 1 ms
# input-delay check now and then. TCP runs, whose transport is the kernel's, stayed
# at 0.73 or less. A rate given explicitly is checked against the whole budget.
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
