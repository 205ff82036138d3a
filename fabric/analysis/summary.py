"""Fabric summary: counts, per-tier capacity, oversubscription, bisection.

Pure functions over the fabric graph (see :mod:`fabric.model.graph`); no I/O.

Bisection split
---------------
The bisection is the max-flow min-cut (networkx, link capacities in both
directions) from one half of the endpoints to the other:

* by default the endpoints in the order of :func:`fabric.model.graph.endpoints`
  (builder order: server-major in rail-clos, pod-major in fat-tree), first
  ``n // 2`` against the rest;
* when every compute host carries a ``zone`` attribute and there are exactly
  two zones (two-zone), zone-0 compute hosts against zone-1 compute hosts,
  storage excluded: this measures the inter-zone bottleneck.

Endpoints outside the two halves are left out of the flow network, and no
endpoint is ever transit (a dual-homed storage node does not bridge zones).
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from fabric.model import graph as fg

_RANK = {"host": 0, "storage": 0, "leaf": 1, "spine": 2, "core": 3}
_SOURCE, _SINK = ("__source__",), ("__sink__",)  # tuples cannot clash with node names


def summarize(graph: nx.Graph) -> dict[str, Any]:
    """Return counts, per-tier capacity and the bisection of ``graph``.

    Parameters
    ----------
    graph : networkx.Graph
        A fabric graph.

    Returns
    -------
    dict
        ``name``, ``spec``, ``params``; ``counts`` per role (all five roles);
        ``endpoints`` (NIC count); ``links``; ``tiers``: for ``leaf``,
        ``spine`` and ``core`` a dict with ``switches``, ``down_gbps`` (links
        to the tier below), ``up_gbps`` (links to the tier above),
        ``lateral_gbps`` (links within the tier) and ``oversubscription``
        (down/up, None when up is 0); ``interzone_gbps`` (links between
        switches of different zones); ``bisection_gbps`` and
        ``bisection_split`` (see the module docstring).
    """
    counts = {role: 0 for role in fg.TIER_ORDER}
    for _, role in graph.nodes(data="role"):
        counts[role] += 1
    tiers: dict[str, dict[str, Any]] = {
        role: {"switches": counts[role], "down_gbps": 0.0, "up_gbps": 0.0, "lateral_gbps": 0.0,
               "oversubscription": None} for role in fg.SWITCH_ROLES}
    interzone = 0.0
    for a, b, gbps in graph.edges(data="gbps"):
        ra, rb = (_RANK[graph.nodes[n]["role"]] for n in (a, b))
        for node, mine, theirs in ((a, ra, rb), (b, rb, ra)):
            tier = tiers.get(graph.nodes[node]["role"])
            if tier is not None:
                key = "down_gbps" if theirs < mine else "up_gbps" if theirs > mine else None
                if key:
                    tier[key] += gbps
        if ra == rb:  # a lateral link: count it once, in its tier
            tiers[graph.nodes[a]["role"]]["lateral_gbps"] += gbps
            za, zb = graph.nodes[a].get("zone"), graph.nodes[b].get("zone")
            if za is not None and zb is not None and za != zb:
                interzone += gbps
    for tier in tiers.values():
        if tier["up_gbps"] > 0:
            tier["oversubscription"] = tier["down_gbps"] / tier["up_gbps"]
    first, second, split = bisection_halves(graph)
    return {
        "name": graph.graph.get("name"),
        "spec": graph.graph.get("spec", graph.graph.get("name")),
        "params": dict(graph.graph.get("params", {})),
        "counts": counts,
        "endpoints": sum(len(graph.nodes[n]["nics"]) for n in fg.endpoints(graph)),
        "links": graph.number_of_edges(),
        "tiers": tiers,
        "interzone_gbps": interzone,
        "bisection_gbps": bisection_gbps(graph, first, second),
        "bisection_split": split,
    }


def bisection_halves(graph: nx.Graph) -> tuple[list[str], list[str], str]:
    """Return the two endpoint halves used for the bisection and a description."""
    hosts = fg.nodes_with_role(graph, "host")
    zones = {graph.nodes[h].get("zone") for h in hosts}
    if hosts and None not in zones and len(zones) == 2:
        z0, z1 = sorted(zones)
        return ([h for h in hosts if graph.nodes[h]["zone"] == z0],
                [h for h in hosts if graph.nodes[h]["zone"] == z1],
                f"zone {z0} vs zone {z1} compute hosts (storage excluded)")
    ends = fg.endpoints(graph)
    half = len(ends) // 2
    return ends[:half], ends[half:], "first vs second half of the endpoints in builder order"


def bisection_gbps(graph: nx.Graph, first: list[str], second: list[str]) -> float:
    """Return the max flow (gbps) from endpoints ``first`` to endpoints ``second``.

    Only switches and the given endpoints take part, so no endpoint is transit.
    """
    if not first or not second:
        return 0.0
    keep = set(fg.switches(graph)) | set(first) | set(second)
    net = nx.DiGraph()
    for a, b, gbps in graph.subgraph(keep).edges(data="gbps"):
        net.add_edge(a, b, capacity=gbps)
        net.add_edge(b, a, capacity=gbps)
    # Edges without a capacity attribute are infinite for networkx.
    net.add_edges_from((_SOURCE, n) for n in first)
    net.add_edges_from((n, _SINK) for n in second)
    return float(nx.maximum_flow_value(net, _SOURCE, _SINK))


def format_summary(summary: dict[str, Any]) -> str:
    """Render a :func:`summarize` result as a readable multi-line table."""
    counts = ", ".join(f"{role} {n}" for role, n in summary["counts"].items())
    lines = [
        f"fabric {summary['name']}  (spec: {summary['spec']})",
        f"nodes: {counts}",
        f"endpoint NICs: {summary['endpoints']}   links: {summary['links']}",
        "",
        f"{'tier':<6} {'switches':>8} {'down_gbps':>11} {'up_gbps':>11} {'lateral':>9} "
        f"{'oversub':>8}",
    ]
    for role, tier in summary["tiers"].items():
        ratio = tier["oversubscription"]
        lines.append(f"{role:<6} {tier['switches']:>8} {tier['down_gbps']:>11.1f} "
                     f"{tier['up_gbps']:>11.1f} {tier['lateral_gbps']:>9.1f} "
                     f"{'-' if ratio is None else f'{ratio:.2f}':>8}")
    lines += [
        "",
        f"inter-zone: {summary['interzone_gbps']:.1f} gbps",
        f"bisection:  {summary['bisection_gbps']:.1f} gbps  ({summary['bisection_split']})",
    ]
    return "\n".join(lines)
