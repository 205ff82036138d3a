"""Routing policies by name: what each one installs (pure).

* ``ecmp``: per-flow hashing over all equal-cost next hops, equal weights.
* ``spray``: the same switch state; spraying happens because senders vary
  the UDP source port (the entropy) per packet, as RoCEv2 and Ultra Ethernet
  NICs do, and the ``dp_hash`` select groups hash the full 5-tuple. Open
  vSwitch has no per-packet select method, so the switches cannot spray
  on their own.
* ``adaptive``: spraying plus bucket weights from port telemetry
  (:mod:`fabric.routing.adaptive`); table 0 also returns link probes to
  the controller (:mod:`fabric.routing.probes`).
* ``static``: InfiniBand's planned routes, one output port per destination
  as the subnet manager's fat-tree engine assigns them (D-mod-k,
  :mod:`fabric.routing.static`): no group, no hash; senders keep one path.
* ``ar``: switch-local adaptive routing, as InfiniBand AR and Spectrum-X switches
  route: ECMP's groups, and the switch moves each packet from the hashed port to
  the least occupied of the route's ports (:mod:`fabric.routing.switch_ar`; the
  choice is the datapath's). Senders keep one entropy per flow.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

import networkx as nx

from fabric.model.intents import SwitchIntent
from fabric.model.lanes import SINGLE_LANE, LaneConfig
from fabric.routing.probes import PROBE_FLOW
from fabric.routing.static import static_route_tables
from fabric.routing.tables import Weights, build_intents, pin_routes, route_tables

POLICIES = ("ecmp", "spray", "adaptive", "static", "ar")
SPRAYING = {"ecmp": False, "spray": True, "adaptive": True, "static": False, "ar": False}


def sprays(policy: str) -> bool:
    """True when ``policy``'s senders vary their entropy per packet (spray, adaptive);
    False when a flow keeps one entropy (ecmp, static; ar, whose switches move it).

    Raises
    ------
    ValueError
        For an unknown policy.
    """
    if policy not in SPRAYING:
        raise ValueError(f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")
    return SPRAYING[policy]


def multipath(policy: str) -> bool:
    """True when a flow's packets may take every equal-cost path (spray, adaptive: the
    sender's entropy moves them; ar: the switches do); False when a flow keeps one path
    (ecmp, static), so that its ideal is its own path's.

    Raises
    ------
    ValueError
        For an unknown policy.
    """
    return sprays(policy) or policy == "ar"


def policy_route_tables(policy: str, graph: nx.Graph, down: Iterable[frozenset] = (),
                        pinned: dict[str, dict[str, tuple[int, ...]]] | None = None
                        ) -> dict[str, dict[str, tuple[int, ...]]]:
    """``{switch: {destination ip: ports}}`` that ``policy`` installs: one planned port
    per destination (static) or every equal-cost port (the others; adaptive and ar
    choose among them), with the ``pinned`` routes in place of its own."""
    tables = (static_route_tables(graph, down) if policy == "static"
              else route_tables(graph, down))
    return pin_routes(tables, pinned) if pinned else tables


def compute_intents(policy: str, graph: nx.Graph, down: Iterable[frozenset] = (),
                    lanes: LaneConfig = SINGLE_LANE,
                    weights: dict[str, Weights] | None = None,
                    previous: dict[str, SwitchIntent] | None = None,
                    default_weight: int = 1,
                    pinned: dict[str, dict[str, tuple[int, ...]]] | None = None
                    ) -> dict[str, SwitchIntent]:
    """Return ``{switch: SwitchIntent}`` for ``policy``.

    Parameters
    ----------
    policy : str
        One of :data:`POLICIES`.
    graph : networkx.Graph
        The fabric graph.
    down : iterable of frozenset
        Links currently down.
    lanes : LaneConfig
        Service level -> lane map.
    weights : dict, optional
        Bucket weights (``adaptive`` only).
    previous : dict, optional
        Installed intents whose group ids are kept.
    default_weight : int
        Weight of buckets ``weights`` does not name.
    pinned : dict, optional
        ``{switch: {destination ip: ports}}`` installed in place of the policy's routes
        (e.g. routes that break up-down order on purpose:
        :func:`fabric.routing.deadlock.valley_routes`).
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")
    if policy != "adaptive" and weights:
        raise ValueError(f"{policy} uses equal weights")
    intents = build_intents(graph, policy_route_tables(policy, graph, down, pinned), lanes,
                            weights, previous, default_weight)
    if policy == "adaptive":
        intents = {sw: dataclasses.replace(intent, flows=intent.flows + (PROBE_FLOW,))
                   for sw, intent in intents.items()}
    return intents
