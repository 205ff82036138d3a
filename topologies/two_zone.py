"""Two-zone fabric in the style of DeepSeek's Fire-Flyer 2."""

from __future__ import annotations

import networkx as nx

from fabric.model.graph import FabricBuilder, TopologyError
from topologies._common import (check_count, check_counts, check_oversub, check_rate,
                                check_size, uplink_gbps)

NAME = "two-zone"
ZONES = (0, 1)


def two_zone(hosts_per_leaf: int = 3, leaves: int = 2, spines: int = 2, interzone_links: int = 1,
             storage: int = 2, gbps: float = 200.0, oversub: float = 1.0) -> nx.Graph:
    """Build two leaf-spine zones joined by a few spine-to-spine links.

    Zone ``z`` has leaves ``z{z}l{i}``, spines ``z{z}s{i}`` and compute hosts
    ``z{z}h{i}`` (role ``host``, one NIC in address group ``z``); every node
    carries attribute ``zone``. Spine ``i`` of zone 0 links to spine ``i`` of
    zone 1 for ``i < interzone_links``. Storage nodes ``st{i}`` (role
    ``storage``) have one NIC in each zone, on leaf ``i % leaves``: port 0 in
    zone 0 (address group 0), port 1 in zone 1 (address group 1), so each NIC
    routes its own zone's ``10.<zone>.0.0/16``.

    Parameters
    ----------
    hosts_per_leaf : int
        Compute hosts under each leaf, >= 1.
    leaves : int
        Leaves per zone, >= 1.
    spines : int
        Spines per zone, >= 1.
    interzone_links : int
        Spine-to-spine links between the zones, 1 .. ``spines``; each at ``gbps``.
    storage : int
        Dual-homed storage nodes, >= 0.
    gbps : float
        Host NIC rate (and inter-zone link rate).
    oversub : float
        Leaf oversubscription (down/up), in (0, 64]: each leaf-spine link runs
        at ``hosts_per_leaf * gbps / spines / oversub``. Storage ports are not
        counted in this sizing.

    Returns
    -------
    networkx.Graph
        The fabric graph (see :mod:`fabric.model.graph`).

    Raises
    ------
    TopologyError
        On a bad parameter or a fabric above the size limits.
    """
    check_counts(NAME, hosts_per_leaf=hosts_per_leaf, leaves=leaves, spines=spines,
                 interzone_links=interzone_links)
    check_count(NAME, "storage", storage, minimum=0)
    if interzone_links > spines:
        raise TopologyError(f"{NAME}: interzone_links must be <= spines ({spines}), "
                            f"got {interzone_links}")
    check_rate(NAME, "gbps", gbps)
    check_oversub(NAME, oversub)
    check_size(NAME, len(ZONES) * leaves * hosts_per_leaf + storage,
               len(ZONES) * (leaves + spines),
               f"hosts_per_leaf={hosts_per_leaf}, leaves={leaves}, spines={spines}, "
               f"storage={storage}")

    fb = FabricBuilder(NAME, dict(hosts_per_leaf=hosts_per_leaf, leaves=leaves, spines=spines,
                                  interzone_links=interzone_links, storage=storage, gbps=gbps,
                                  oversub=oversub))
    zone_leaves, zone_spines = {}, {}
    for z in ZONES:
        zone_leaves[z] = [fb.add_switch(f"z{z}l{i}", "leaf", zone=z, index=i)
                          for i in range(leaves)]
        zone_spines[z] = [fb.add_switch(f"z{z}s{i}", "spine", zone=z, index=i)
                          for i in range(spines)]
        for i in range(leaves * hosts_per_leaf):
            host = fb.add_endpoint(f"z{z}h{i}", "host", zone=z, index=i)
            fb.link(host, zone_leaves[z][i // hosts_per_leaf], gbps, addr_group=z)
    for i in range(storage):
        node = fb.add_endpoint(f"st{i}", "storage", index=i)
        for z in ZONES:  # port z faces zone z
            fb.link(node, zone_leaves[z][i % leaves], gbps, addr_group=z)
    uplink = uplink_gbps(hosts_per_leaf, gbps, spines, oversub)
    for z in ZONES:
        fb.link_all(zone_leaves[z], zone_spines[z], uplink)
    for i in range(interzone_links):
        fb.link(zone_spines[0][i], zone_spines[1][i], gbps)
    return fb.build()
