"""Layered drawing of a fabric graph: core on top, endpoints at the bottom.

Nodes are coloured by their group (rail in rail-clos, zone in two-zone, pod
in fat-tree) with the Okabe-Ito colour-blind-safe palette, and each layer is
ordered by group so rails, zones and pods sit together.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import networkx as nx

from fabric.model import graph as fg

# Okabe & Ito (2008), black left out: it would hide the labels.
OKABE_ITO = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7")
NEUTRAL = "#999999"  # nodes outside every group (spines of a rail-clos, storage, cores)
_GROUP_ATTR = {"rail-clos": "rail", "two-zone": "zone", "fat-tree": "pod"}
_LAYER = {"host": 0, "storage": 0, "leaf": 1, "spine": 2, "core": 3}
_MARKER = {"host": "o", "storage": "s", "leaf": "^", "spine": "^", "core": "^"}


def group_attr(graph: nx.Graph) -> str | None:
    """Return the node attribute that groups this fabric's nodes, if any."""
    attr = _GROUP_ATTR.get(graph.graph.get("name"))
    if attr is None:  # unknown builder: use the first grouping attribute present
        attr = next((a for a in ("rail", "zone", "pod")
                     if any(a in d for _, d in graph.nodes(data=True))), None)
    return attr


def layout(graph: nx.Graph) -> dict[str, tuple[float, float]]:
    """Return ``{node: (x, y)}``: one row per tier, each row ordered by group.

    Ungrouped nodes in a row of grouped ones (storage between the zones) sort
    to the middle of the row.
    """
    attr = group_attr(graph)
    rows: dict[int, list[str]] = defaultdict(list)
    for node, role in graph.nodes(data="role"):
        rows[_LAYER[role]].append(node)
    pos = {}
    for y, nodes in rows.items():
        groups = [graph.nodes[n].get(attr) for n in nodes] if attr else []
        known = [g for g in groups if g is not None]
        middle = (min(known) + max(known)) / 2 if known else 0
        order = {n: i for i, n in enumerate(nodes)}
        nodes = sorted(nodes, key=lambda n: (_group_of(graph, n, attr, middle), order[n]))
        for i, node in enumerate(nodes):
            pos[node] = ((i + 0.5) / len(nodes), float(y))
    return pos


def _group_of(graph: nx.Graph, node: str, attr: str | None, middle: float) -> float:
    value = graph.nodes[node].get(attr) if attr else None
    return middle if value is None else value


def draw_png(graph: nx.Graph, path: str | Path, dpi: int = 150) -> Path:
    """Draw ``graph`` as a layered picture and save it as a PNG.

    Parameters
    ----------
    graph : networkx.Graph
        A fabric graph.
    path : str or pathlib.Path
        Output file.
    dpi : int
        Resolution.

    Returns
    -------
    pathlib.Path
        The path written.
    """
    import matplotlib
    matplotlib.use("Agg")  # headless: never needs a display
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    pos = layout(graph)
    attr = group_attr(graph)
    widest = max(sum(1 for p in pos.values() if p[1] == y) for y in {p[1] for p in pos.values()})
    fig, ax = plt.subplots(figsize=(min(30.0, max(6.0, 0.3 * widest)), 4.5))
    try:
        top = max(g for _, _, g in graph.edges(data="gbps"))
        segments = [(pos[a], pos[b]) for a, b in graph.edges]
        widths = [0.3 + 1.2 * g / top for _, _, g in graph.edges(data="gbps")]
        ax.add_collection(LineCollection(segments, colors="#bbbbbb", linewidths=widths, zorder=1))
        font = 6 if len(pos) <= 80 else 4
        for role in fg.ROLES:
            nodes = fg.nodes_with_role(graph, role)
            if not nodes:
                continue
            ax.scatter([pos[n][0] for n in nodes], [pos[n][1] for n in nodes],
                       c=[_colour(graph.nodes[n].get(attr) if attr else None) for n in nodes],
                       marker=_MARKER[role], s=90 if role == "storage" else 60,
                       edgecolors="black", linewidths=0.5, zorder=2)
            for n in nodes:
                below = role in fg.ENDPOINT_ROLES
                ax.annotate(n, pos[n], xytext=(0, -8 if below else 7), textcoords="offset points",
                            ha="center", va="top" if below else "bottom", fontsize=font,
                            rotation=90 if below and len(pos) > 40 else 0)
        ax.legend(handles=_legend(graph, attr, Line2D), fontsize=6, loc="upper left",
                  bbox_to_anchor=(1.0, 1.0), frameon=False)
        ax.set_xlim(-0.02, 1.02)
        ax.set_ylim(-0.8, max(p[1] for p in pos.values()) + 0.5)
        ax.set_yticks(sorted({p[1] for p in pos.values()}))
        ax.set_yticklabels([_tier_label(graph, y) for y in sorted({p[1] for p in pos.values()})],
                           fontsize=7)
        ax.set_xticks([])
        for side in ("top", "right", "bottom"):
            ax.spines[side].set_visible(False)
        ax.set_title(graph.graph.get("spec") or graph.graph.get("name") or "fabric", fontsize=9)
        if not fig.get_constrained_layout():  # the experiments' style lays out by itself
            fig.tight_layout()
        path = Path(path)
        fig.savefig(path, dpi=dpi)
    finally:
        plt.close(fig)
    return path


def _colour(group: Any) -> str:
    return NEUTRAL if group is None else OKABE_ITO[int(group) % len(OKABE_ITO)]


def _tier_label(graph: nx.Graph, y: float) -> str:
    return "/".join(r for r in fg.ROLES if _LAYER[r] == y and fg.nodes_with_role(graph, r))


def _legend(graph: nx.Graph, attr: str | None, line2d: Any) -> list:
    handles = []
    if attr:
        groups = sorted({g for _, g in graph.nodes(data=attr) if g is not None})
        for g in groups[:len(OKABE_ITO)]:  # the palette cycles beyond this
            handles.append(line2d([], [], marker="o", linestyle="", color=_colour(g),
                                  markeredgecolor="black", label=f"{attr} {g}"))
    for role, label in (("host", "host"), ("storage", "storage"), ("leaf", "switch")):
        if role == "storage" and not fg.nodes_with_role(graph, "storage"):
            continue
        handles.append(line2d([], [], marker=_MARKER[role], linestyle="", color=NEUTRAL,
                              markeredgecolor="black", label=label))
    return handles
