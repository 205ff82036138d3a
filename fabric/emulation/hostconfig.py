"""Per-node configuration files: addresses, static ARP, shaping (pure).

Where each link direction is shaped:

* switch -> switch and endpoint -> switch: an HTB tree on the sender's
  egress interface (the switch port, or the endpoint's NIC);
* switch -> endpoint: on an IFB device at the endpoint's ingress. The
  endpoint's NIC redirects everything it receives to its IFB, whose egress
  carries the link's HTB tree and buffer. Drops there are counted exactly,
  whereas on an OVS egress tc undercounts them several-fold (userspace OVS
  discards the rest of a send batch when the qdisc refuses a packet).
  Under link-level flow control, on the switch's port instead: the queue into
  an endpoint must be before the point where the flow-control accounting sees
  a packet reach the endpoint (its arrival at the NIC), and a lossless lane
  never drops there.

The switch queues (switch ports towards switches, and the queues into
endpoints) can also mark ECN (:mod:`fabric.emulation.ecn`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path

import networkx as nx

from fabric.emulation.ecn import marker_line
from fabric.emulation.shaping import LINK_MTU, MAX_FRAME_BYTES, shape_lines
from fabric.model import graph as fg
from fabric.model.flowcontrol import FlowControl, leaf_limits
from fabric.model.lanes import LaneConfig
from fabric.traffic.model import TCP_ADVERTISED_MSS


def ifb_name(endpoint: str, port: int) -> str:
    """Name of the IFB device that shapes traffic into ``endpoint``'s NIC ``port``."""
    return f"{endpoint}-ifb{port}"


def nic_for(nics: list[dict], ip: str) -> dict | None:
    """The NIC whose prefix holds ``ip`` (longest match), or None."""
    addr = ipaddress.ip_address(ip)
    matching = [n for n in nics if addr in ipaddress.ip_network(n["prefix"])]
    return max(matching, key=lambda n: ipaddress.ip_network(n["prefix"]).prefixlen, default=None)


def nic_route(endpoint: str, nic: dict, rto_min_ms: int | None = None) -> str:
    """The ``ip`` line that (re)makes the connected route of one of ``endpoint``'s NICs.

    TCP (the agents, iperf, the Mininet CLI) advertises a 1500-byte MTU's segments on
    it, although the links carry jumbo frames; ``rto_min_ms`` adds a minimum RTO. A
    route's metrics are all given at once: a change that left one out would drop it.
    """
    line = (f"route replace {nic['prefix']} dev {fg.intf_name(endpoint, nic['port'])} "
            f"proto kernel scope link src {nic['ip']} advmss {TCP_ADVERTISED_MSS}")
    return line + (f" rto_min {rto_min_ms}ms" if rto_min_ms is not None else "")


def host_ip_batch(graph: nx.Graph, endpoint: str) -> str:
    """``ip -batch`` lines for one endpoint: MTU, addresses, MACs, TCP's segment size,
    IFBs and static ARP.

    Static ARP for every other NIC in the fabric, on the NIC whose prefix
    routes to it, so no ARP is ever flooded through the multipath fabric.
    """
    nics = graph.nodes[endpoint]["nics"]
    lines = []
    for nic in nics:
        dev = fg.intf_name(endpoint, nic["port"])
        ifb = ifb_name(endpoint, nic["port"])
        plen = ipaddress.ip_network(nic["prefix"]).prefixlen
        lines += [f"link set dev {dev} down", f"link set dev {dev} address {nic['mac']}",
                  f"link set dev {dev} mtu {LINK_MTU}",
                  f"addr flush dev {dev}", f"addr add {nic['ip']}/{plen} dev {dev}",
                  f"link set dev {dev} up",
                  nic_route(endpoint, nic),
                  f"link add name {ifb} type ifb",
                  f"link set dev {ifb} mtu {LINK_MTU}", f"link set dev {ifb} up"]
    for att in fg.attachments(graph):
        if att.endpoint == endpoint:
            continue
        nic = nic_for(nics, att.ip)
        if nic is not None:
            lines.append(f"neigh replace {att.ip} lladdr {att.mac} "
                         f"dev {fg.intf_name(endpoint, nic['port'])} nud permanent")
    return "".join(line + "\n" for line in lines)


def _gated(graph: nx.Graph, node: str, queue_pkts: int, lanes: LaneConfig,
           flow_control: FlowControl | None) -> dict[int, int] | None:
    return leaf_limits(graph, node, flow_control, queue_pkts, lanes) if flow_control else None


def endpoint_tc_batch(graph: nx.Graph, endpoint: str, link_mbps: dict[frozenset, float],
                      queue_pkts: int, lanes: LaneConfig,
                      flow_control: FlowControl | None = None,
                      frame_bytes: int = MAX_FRAME_BYTES) -> str:
    """``tc -batch`` lines for an endpoint: NIC egress (ACKs and CNPs ahead of the
    data), and ingress via its IFB (none under flow control: the switch's port holds
    that queue; its gates' burst is one ``frame_bytes`` frame)."""
    lines = []
    gated = _gated(graph, endpoint, queue_pkts, lanes, flow_control)
    for nic in graph.nodes[endpoint]["nics"]:
        dev = fg.intf_name(endpoint, nic["port"])
        ifb = ifb_name(endpoint, nic["port"])
        mbps = link_mbps[frozenset((endpoint, _switch_at(graph, endpoint, nic["port"])))]
        lines += shape_lines(dev, mbps, queue_pkts, lanes, gated, frame_bytes,
                             control_first=True)
        if flow_control:
            continue
        lines += [f"qdisc add dev {dev} handle ffff: ingress",
                  f"filter add dev {dev} parent ffff: protocol all prio 1 u32 match u32 0 0 "
                  f"action mirred egress redirect dev {ifb}"]
        lines += shape_lines(ifb, mbps, queue_pkts, lanes)
    return "".join(line + "\n" for line in lines)


def endpoint_marker_batch(graph: nx.Graph, endpoint: str, link_mbps: dict[frozenset, float],
                          markers: Mapping[float, Path]) -> str:
    """``tc -batch`` lines that put ECN markers (link rate -> compiled marker) on an
    endpoint's IFBs, after :func:`endpoint_tc_batch`.

    An IFB is the switch's queue into the endpoint; the NIC's own egress is
    never marked. tc must run them in the endpoint's network namespace but the
    root's mount namespace: loading BPF needs the bpf filesystem, which a
    Mininet host's own /sys hides.
    """
    lines = []
    for nic in graph.nodes[endpoint]["nics"]:
        switch = _switch_at(graph, endpoint, nic["port"])
        lines.append(marker_line(ifb_name(endpoint, nic["port"]),
                                 markers[link_mbps[frozenset((endpoint, switch))]]))
    return "".join(line + "\n" for line in lines)


def _switch_at(graph: nx.Graph, endpoint: str, port: int) -> str:
    """The switch on the other end of ``endpoint``'s NIC ``port``."""
    return next(n for n in graph.neighbors(endpoint) if fg.port(graph, endpoint, n) == port)


def switch_tc_batch(graph: nx.Graph, switch: str, link_mbps: dict[frozenset, float],
                    queue_pkts: int, lanes: LaneConfig,
                    markers: Mapping[float, Path] | None = None,
                    flow_control: FlowControl | None = None,
                    frame_bytes: int = MAX_FRAME_BYTES) -> str:
    """``tc -batch`` lines for a switch's ports towards other switches (and, under
    flow control, towards endpoints, with gates on the lossless lanes).

    Without flow control, ports towards endpoints stay unshaped: those links are
    shaped at the endpoint's IFB. ``markers`` (link rate -> compiled ECN marker)
    marks them.
    """
    lines = []
    gated = _gated(graph, switch, queue_pkts, lanes, flow_control)
    for nbr in graph.neighbors(switch):
        if fg.is_endpoint(graph, nbr) and not flow_control:
            continue
        dev = fg.intf_name(switch, fg.port(graph, switch, nbr))
        mbps = link_mbps[frozenset((switch, nbr))]
        lines += shape_lines(dev, mbps, queue_pkts, lanes, gated, frame_bytes)
        if markers:
            lines.append(marker_line(dev, markers[mbps]))
    return "".join(line + "\n" for line in lines)
