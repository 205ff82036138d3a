"""Topology builders and the spec-driven registry.

``build("rail-clos,servers=8,gpus=4")`` parses the spec (grammar in
:mod:`fabric.model.spec`), binds its values to the named builder's parameters and
returns the fabric graph with the spec text recorded as ``graph.graph["spec"]``.
"""

from __future__ import annotations

from typing import Callable

import networkx as nx

from fabric.model.spec import SpecError, bind_spec, parse_spec
from topologies.fat_tree import fat_tree
from topologies.leaf_spine import leaf_spine
from topologies.rail_clos import rail_clos
from topologies.two_zone import two_zone

BUILDERS: dict[str, Callable[..., nx.Graph]] = {
    "rail-clos": rail_clos,
    "two-zone": two_zone,
    "fat-tree": fat_tree,
    "leaf-spine": leaf_spine,
}
DEFAULT_SPEC = "rail-clos"

__all__ = ["BUILDERS", "DEFAULT_SPEC", "build", "fat_tree", "leaf_spine", "rail_clos",
           "two_zone"]


def build(spec_text: str) -> nx.Graph:
    """Build the fabric a spec names.

    Parameters
    ----------
    spec_text : str
        ``name,arg,key=val`` (e.g. ``"rail-clos,servers=8,gpus=4,spines=4"``).

    Returns
    -------
    networkx.Graph
        The fabric graph, with ``graph.graph["spec"]`` set to ``spec_text``.

    Raises
    ------
    SpecError
        On a malformed spec, an unknown topology or parameter, or a value of
        the wrong type.
    TopologyError
        On a parameter value the builder rejects.
    """
    spec = parse_spec(spec_text)
    builder = BUILDERS.get(spec.name)
    if builder is None:
        raise SpecError(f"unknown topology {spec.name!r} (known: {', '.join(BUILDERS)})")
    graph = builder(**bind_spec(spec, builder))
    graph.graph["spec"] = spec_text
    return graph
