"""The fluid ideal's cost: a random permutation under per-flow ECMP by fabric size.

Every run's ideal (:mod:`fabric.traffic.ideal`) is a fluid model that shares
each link max-min fairly and recomputes the shares at every flow's end. Under
ECMP a permutation's flows end one by one, so a fabric of N hosts recomputes N
times. This prints, per fabric, the flows, the recomputations, the seconds the
whole model took, and the mean flow rate it gives (over the host rate), so a
change to the model's speed can be checked to leave its answer alone.

Usage::

    .venv/bin/python benchmarks/ideal.py [--topo fat-tree,k=8;fat-tree,k=16] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import time

import networkx as nx

import topologies
from fabric.argtypes import integer
from fabric.model import graph as fg
from fabric.model.spec import SpecError
from fabric.traffic import ideal

DEFAULT_TOPOLOGIES = "fat-tree;fat-tree,k=8;fat-tree,k=16"
FLOW_BYTES = 3_000_000


def ecmp_permutation(graph: nx.Graph, seed: int) -> list[ideal.FluidTransfer]:
    """A random permutation of the endpoints, each flow on one random shortest path."""
    rng = random.Random(seed)
    hosts = sorted(fg.endpoints(graph))
    targets = hosts[:]
    rng.shuffle(targets)
    core = graph.subgraph(fg.switches(graph))
    overhead = ideal.transport_overhead("roce")
    fluid = []
    for src, dst in zip(hosts, targets):
        if src == dst:
            continue
        first, last = next(iter(graph.neighbors(src))), next(iter(graph.neighbors(dst)))
        path = [src, *rng.choice(list(nx.all_shortest_paths(core, first, last))), dst]
        load = ideal.path_load(path, overhead)
        fluid.append(ideal.FluidTransfer(f"{src}>{dst}", FLOW_BYTES, load,
                                         acks=ideal.ack_load(load, overhead)))
    return fluid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topo", default=DEFAULT_TOPOLOGIES,
                        help="fabrics, separated by ';' (default: %(default)s)")
    parser.add_argument("--seed", type=integer(minimum=0), default=0)
    args = parser.parse_args()
    print(f"{'topology':>16} {'flows':>6} {'seconds':>8} {'mean rate':>9}")
    try:
        graphs = [(spec, topologies.build(spec)) for spec in args.topo.split(";")]
    except SpecError as exc:
        parser.error(str(exc))
    for spec, graph in graphs:
        fluid = ecmp_permutation(graph, args.seed)
        capacity = ideal.link_capacity(graph, {frozenset(e): graph.edges[e]["gbps"] * 1e3
                                               for e in graph.edges})
        started = time.perf_counter()
        spans = ideal.simulate(fluid, capacity)
        seconds = time.perf_counter() - started
        host_mbps = max(capacity.values())
        rates = [t.bytes * 8e-6 / spans[t.id].seconds / host_mbps for t in fluid]
        print(f"{spec:>16} {len(fluid):>6} {seconds:>8.2f} {sum(rates) / len(rates):>9.4f}",
              flush=True)


if __name__ == "__main__":
    main()
