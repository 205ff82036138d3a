"""The fabric graph: one networkx graph describes the whole fabric.

Every other layer (Mininet emulation, routing, traffic, analysis) reads this
graph. Builders in ``topologies/`` create it through :class:`FabricBuilder`,
which derives every identifier (datapath id, MAC, IP, port number) from the
structure, so the same spec always gives the same addresses.

Schema
------
Node attributes (all nodes):
    ``role``: one of ``host``, ``storage`` (endpoints) or ``leaf``, ``spine``,
    ``core`` (switches); plus structural attributes where they apply:
    ``server``, ``rail``, ``zone``, ``pod``, ``index``.
Switch attributes:
    ``dpid``: 16 hex digits; the top byte encodes the role.
Endpoint attributes:
    ``nics``: list of ``{"port", "ip", "mac", "prefix"}``, one per attached
    link; ``prefix`` is the destination prefix routed out of that NIC.
    ``ip`` and ``mac`` repeat the first NIC's address.
Link attributes:
    ``gbps``: the physical rate of the modelled cluster;
    ``ports``: ``{node: port_number}`` for both ends. Switch ports count from
    1 (they are OpenFlow port numbers), endpoint ports from 0 (``eth0``).
Graph attributes:
    ``name`` (builder name), ``params`` (the builder's arguments).
"""

from __future__ import annotations

import ipaddress
import re
from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable

import networkx as nx

from fabric.errors import UserError

ENDPOINT_ROLES = ("host", "storage")
SWITCH_ROLES = ("leaf", "spine", "core")
ROLES = ENDPOINT_ROLES + SWITCH_ROLES
TIER_ORDER = ("host", "storage", "leaf", "spine", "core")

# Linux limits interface names to 15 characters; ours are "{node}-eth{port}".
MAX_IFNAME = 15
_ROLE_DPID_CODE = {"leaf": 0x01, "spine": 0x02, "core": 0x03}
# Endpoint addresses live in 10.<group>.<hi>.<lo>; 254 usable per /24.
_HOSTS_PER_OCTET = 254
_MAX_GROUP = 255
# Names become interface names and command arguments: keep them plain.
_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9]*")


class TopologyError(UserError, ValueError):
    """A topology that cannot be built or is not a valid fabric graph."""


def intf_name(node: str, port: int) -> str:
    """Return the Linux interface name of ``node``'s port ``port``."""
    return f"{node}-eth{port}"


def is_switch(graph: nx.Graph, node: str) -> bool:
    """Return True when ``node`` is a switch (leaf, spine or core)."""
    return graph.nodes[node].get("role") in SWITCH_ROLES


def is_endpoint(graph: nx.Graph, node: str) -> bool:
    """Return True when ``node`` is an endpoint (host NIC or storage node)."""
    return graph.nodes[node].get("role") in ENDPOINT_ROLES


def switches(graph: nx.Graph) -> list[str]:
    """Return the switch names in insertion order."""
    return [n for n in graph.nodes if is_switch(graph, n)]


def endpoints(graph: nx.Graph) -> list[str]:
    """Return the endpoint names (hosts and storage) in insertion order."""
    return [n for n in graph.nodes if is_endpoint(graph, n)]


def nodes_with_role(graph: nx.Graph, role: str) -> list[str]:
    """Return the names of all nodes with ``role``."""
    return [n for n, r in graph.nodes(data="role") if r == role]


def port(graph: nx.Graph, node: str, neighbour: str) -> int:
    """Return the port number of ``node`` that faces ``neighbour``."""
    return graph.edges[node, neighbour]["ports"][node]


def dpid_int(graph: nx.Graph, switch: str) -> int:
    """Return the datapath id of ``switch`` as an integer."""
    return int(graph.nodes[switch]["dpid"], 16)


@dataclass(frozen=True)
class Attachment:
    """Where one endpoint NIC plugs into the fabric."""

    endpoint: str
    endpoint_port: int
    ip: str
    mac: str
    switch: str
    switch_port: int


def attachments(graph: nx.Graph) -> list[Attachment]:
    """Return one :class:`Attachment` per endpoint NIC, in a stable order."""
    found = []
    for node in endpoints(graph):
        for nic in graph.nodes[node]["nics"]:
            switch = _neighbour_on_port(graph, node, nic["port"])
            found.append(Attachment(node, nic["port"], nic["ip"], nic["mac"],
                                    switch, port(graph, switch, node)))
    return found


def _neighbour_on_port(graph: nx.Graph, node: str, port_no: int) -> str:
    for nbr in graph.neighbors(node):
        if graph.edges[node, nbr]["ports"][node] == port_no:
            return nbr
    raise TopologyError(f"{node} has no link on port {port_no}")


def switch_tiers(graph: nx.Graph) -> dict[str, int]:
    """Each switch's tier: its hops from the nearest endpoint over switches (a leaf, which
    endpoints attach to, is tier 1); a switch that reaches no endpoint is absent."""
    tier = {att.switch: 1 for att in attachments(graph)}
    queue = deque(tier)
    while queue:  # BFS over switches only, from the leaves up
        node = queue.popleft()
        for nbr in graph.neighbors(node):
            if is_switch(graph, nbr) and nbr not in tier:
                tier[nbr] = tier[node] + 1
                queue.append(nbr)
    return tier


def uplinks(graph: nx.Graph, switch: str, tiers: dict[str, int] | None = None) -> list[str]:
    """The neighbours of ``switch`` one tier up (:func:`switch_tiers`), in port order."""
    tiers = tiers if tiers is not None else switch_tiers(graph)
    return sorted((n for n in graph.neighbors(switch) if tiers.get(n) == tiers[switch] + 1),
                  key=lambda n: port(graph, switch, n))


def path_links(graph: nx.Graph, src: str, dst: str) -> int:
    """Links on a shortest path from ``src`` to ``dst`` through switches only."""
    return nx.shortest_path_length(graph.subgraph(set(switches(graph)) | {src, dst}), src, dst)


def nearest_nic_ip(graph: nx.Graph, src: str, dst: str) -> str:
    """The address of ``dst``'s NIC closest to ``src`` (a dual-homed storage
    node is reached in the client's own zone, not across inter-zone links)."""
    core = graph.subgraph(switches(graph))
    dist = nx.single_source_shortest_path_length(core, next(iter(graph.neighbors(src))))
    best = min(graph.nodes[dst]["nics"],
               key=lambda nic: (dist.get(_neighbour_on_port(graph, dst, nic["port"]), 1 << 30),
                                nic["port"]))
    return best["ip"]


class FabricBuilder:
    """Accumulate switches, endpoints and links, deriving ids and addresses.

    Parameters
    ----------
    name : str
        Builder name recorded in the graph (e.g. ``"rail-clos"``).
    params : dict
        The builder's arguments, recorded for manifests and summaries.
    """

    def __init__(self, name: str, params: dict[str, Any]):
        self.graph = nx.Graph(name=name, params=dict(params))
        self._switch_count: dict[str, int] = {}
        self._group_count: dict[int, int] = {}

    def add_switch(self, name: str, role: str, **attrs: Any) -> str:
        """Add a switch; its dpid is derived from its role and order."""
        if role not in SWITCH_ROLES:
            raise TopologyError(f"{name}: {role!r} is not a switch role")
        index = self._switch_count.get(role, 0)
        self._switch_count[role] = index + 1
        dpid = (_ROLE_DPID_CODE[role] << 48) | (index + 1)
        self._add_node(name, role=role, dpid=f"{dpid:016x}", **attrs)
        return name

    def add_endpoint(self, name: str, role: str = "host", **attrs: Any) -> str:
        """Add an endpoint; it gets one NIC per link added later."""
        if role not in ENDPOINT_ROLES:
            raise TopologyError(f"{name}: {role!r} is not an endpoint role")
        self._add_node(name, role=role, nics=[], **attrs)
        return name

    def link(self, a: str, b: str, gbps: float, addr_group: int = 0) -> None:
        """Link ``a`` and ``b`` at ``gbps``.

        Parameters
        ----------
        a, b : str
            Existing nodes; at most one of them may be an endpoint.
        gbps : float
            Physical link rate.
        addr_group : int
            Second octet of the address an endpoint NIC on this link gets
            (rails, pods or zones keep their own 10.<group>/16).
        """
        if a == b:
            raise TopologyError(f"cannot link {a} to itself")
        if self.graph.has_edge(a, b):
            raise TopologyError(f"{a} and {b} are already linked")
        for node in (a, b):
            if node not in self.graph:
                raise TopologyError(f"unknown node {node}")
        ports = {a: self._next_port(a), b: self._next_port(b)}
        self.graph.add_edge(a, b, gbps=float(gbps), ports=ports)
        for node in (a, b):
            if is_endpoint(self.graph, node):
                self._add_nic(node, ports[node], addr_group)

    def link_all(self, lowers: list[str], uppers: list[str], gbps: float) -> None:
        """Link every node of ``lowers`` to every node of ``uppers`` (a full
        bipartite tier, e.g. leaves to spines), lower by lower."""
        for lower in lowers:
            for upper in uppers:
                self.link(lower, upper, gbps)

    def build(self) -> nx.Graph:
        """Finish: set per-NIC route prefixes, validate, return the graph."""
        for node in endpoints(self.graph):
            nics = self.graph.nodes[node]["nics"]
            for nic in nics:
                # A single NIC reaches everything; several NICs each own the
                # /16 of the group they attach to (e.g. a storage node's zones).
                nic["prefix"] = ("10.0.0.0/8" if len(nics) == 1
                                 else str(ipaddress.ip_network(f"{nic['ip']}/16", strict=False)))
            if nics:
                self.graph.nodes[node]["ip"] = nics[0]["ip"]
                self.graph.nodes[node]["mac"] = nics[0]["mac"]
        validate(self.graph)
        return self.graph

    def _add_node(self, name: str, **attrs: Any) -> None:
        if not _NAME_RE.fullmatch(name):
            raise TopologyError(f"node name {name!r} must be a letter then letters or digits")
        if name in self.graph:
            raise TopologyError(f"duplicate node name {name}")
        self.graph.add_node(name, **attrs)

    def _next_port(self, node: str) -> int:
        first = 0 if is_endpoint(self.graph, node) else 1
        return first + self.graph.degree(node)

    def _add_nic(self, node: str, port_no: int, group: int) -> None:
        if not 0 <= group <= _MAX_GROUP:
            raise TopologyError(f"address group {group} out of range 0..{_MAX_GROUP}")
        index = self._group_count.get(group, 0)
        self._group_count[group] = index + 1
        hi, lo = divmod(index, _HOSTS_PER_OCTET)
        if hi > 255:
            raise TopologyError(f"too many endpoints in address group {group}")
        ip = f"10.{group}.{hi}.{lo + 1}"
        mac = "02:00:" + ":".join(f"{int(o):02x}" for o in ip.split("."))
        self.graph.nodes[node]["nics"].append({"port": port_no, "ip": ip, "mac": mac})


def validate(graph: nx.Graph) -> None:
    """Check the schema invariants; raise :class:`TopologyError` on the first breach."""
    if not switches(graph):
        raise TopologyError("the fabric has no switches")
    seen: dict[str, str] = {}
    for node, data in graph.nodes(data=True):
        role = data.get("role")
        if role not in ROLES:
            raise TopologyError(f"{node}: unknown role {role!r}")
        ports = sorted(graph.edges[node, nbr]["ports"][node] for nbr in graph.neighbors(node))
        if ports and len(intf_name(node, ports[-1])) > MAX_IFNAME:
            raise TopologyError(
                f"{node}: interface name {intf_name(node, ports[-1])} exceeds "
                f"{MAX_IFNAME} characters; use a shorter node name")
        first = 0 if role in ENDPOINT_ROLES else 1
        if ports != list(range(first, first + len(ports))):
            raise TopologyError(f"{node}: ports {ports} are not contiguous from {first}")
        keys = [data["dpid"]] if role in SWITCH_ROLES else _nic_keys(node, data)
        for key in keys:
            if key in seen:
                raise TopologyError(f"{node} and {seen[key]} share the identifier {key}")
            seen[key] = node
    for a, b, data in graph.edges(data=True):
        if not data.get("gbps", 0) > 0:
            raise TopologyError(f"link {a}-{b} has no positive rate")
        if is_endpoint(graph, a) and is_endpoint(graph, b):
            raise TopologyError(f"link {a}-{b} joins two endpoints")
    if not nx.is_connected(graph):
        raise TopologyError("the fabric is not connected")
    if not nx.is_connected(graph.subgraph(switches(graph))):
        raise TopologyError("the switches alone do not form a connected fabric")


def _nic_keys(node: str, data: dict) -> Iterable[str]:
    if not data.get("nics"):
        raise TopologyError(f"endpoint {node} has no link")
    for nic in data["nics"]:
        yield nic["ip"]
        yield nic["mac"]


def to_json_dict(graph: nx.Graph) -> dict[str, Any]:
    """Return the graph as ``{"name", "spec", "params", "nodes": [...], "links": [...]}``.

    Links carry ``a``, ``b``, ``gbps``, ``a_port`` and ``b_port``.
    """
    nodes = [{"name": n, **data} for n, data in graph.nodes(data=True)]
    links = []
    for a, b, data in graph.edges(data=True):
        extra = {k: v for k, v in data.items() if k not in ("ports", "gbps")}
        links.append({"a": a, "b": b, "gbps": data["gbps"],
                      "a_port": data["ports"][a], "b_port": data["ports"][b], **extra})
    return {"name": graph.graph.get("name"), "spec": graph.graph.get("spec"),
            "params": graph.graph.get("params", {}),
            "nodes": nodes, "links": links}
