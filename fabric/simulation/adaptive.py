"""The adaptive routing policy in the simulator: the controller's own decisions.

With ``telemetry_interval`` in its scenario the simulator stops every interval
and writes each switch port's counters and backlog (``tick``, ``port ...``,
``ready``); :class:`SimulatedController` feeds them to the adaptive policy's
pure code (:class:`fabric.routing.adaptive.AdaptiveBalancer`) as the os-ken
app feeds it port-stats replies and probe delays, and answers with the
weights of every group that changed (``weights ...``, ``go``). So the two
backends decide alike on the same inputs; what differs is what the inputs
are:

* a probe's queueing delay is the port's backlog over its rate at the tick
  (the emulator measures a probe that waited behind it);
* the new weights take effect at the tick itself, with no control-channel
  delay.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import IO

from fabric.model import graph as fg
from fabric.routing.adaptive import AdaptiveBalancer, AdaptiveParams
from fabric.routing.tables import route_tables
from fabric.simulation.scenario import Fabric


@dataclass
class SimulatedController:
    """The adaptive policy's loop over a simulation's telemetry.

    Parameters
    ----------
    fabric : Fabric
        The simulated fabric (its rates are the balancer's capacities).
    params : AdaptiveParams
        The policy's tuning; ``interval_s`` is the telemetry interval.
    """

    fabric: Fabric
    params: AdaptiveParams
    rounds: int = 0
    weight_changes: int = 0  # groups given new weights, over all rounds
    answer: list[str] = field(default_factory=list)  # the simulator's other lines

    def __post_init__(self) -> None:
        graph = self.fabric.graph
        self.balancer = AdaptiveBalancer(graph, self.fabric.scale / 1e6, self.params)
        self.names = sorted(graph.nodes)
        self.index = {name: i for i, name in enumerate(self.names)}
        # a switch's select groups: its multi-port next-hop sets, as build_intents makes them
        self.port_sets = {sw: sorted({p for p in table.values() if len(p) > 1})
                          for sw, table in route_tables(graph).items()}
        self.probed = {(sw, fg.port(graph, sw, nbr)) for sw in fg.switches(graph)
                       for nbr in graph.neighbors(sw) if fg.is_switch(graph, nbr)}

    def decide(self, now: float, ports: list[tuple[str, int, int, int, int]]) -> list[str]:
        """The ``weights`` lines for one tick's ``(switch, port, tx_bytes, tx_dropped,
        backlog_bytes)`` records: probes first, then each switch's counters and its
        groups, as the os-ken app takes a round."""
        bal = self.balancer
        for sw, port, _, _, backlog in ports:
            if (sw, port) in self.probed:
                bal.observe_queueing(sw, port, backlog * 8 / bal.capacity_bps(sw, port))
        counters: dict[str, dict[int, tuple[int, int]]] = {}
        for sw, port, tx, drops, _ in ports:
            counters.setdefault(sw, {})[port] = (tx, drops)
        lines = []
        for sw, by_port in counters.items():
            bal.observe(sw, now, by_port)
            if not bal.rebalance(sw, now, self.port_sets.get(sw, ())):
                continue
            for port_set, weights in bal.weights(sw).items():
                lines.append(f"weights {self.index[sw]} {len(port_set)} "
                             f"{' '.join(map(str, port_set))} "
                             f"{' '.join(str(weights[p]) for p in port_set)}")
        self.rounds += 1
        self.weight_changes += len(lines)
        return lines

    def converse(self, out: IO[str], into: IO[str]) -> str:
        """Answer every tick the simulator writes to ``out`` on ``into``, until it ends;
        return its other lines (its answer)."""
        ports: list[tuple[str, int, int, int, int]] = []
        now = 0.0
        for line in out:
            kind = line[:5]
            if kind == "port ":
                node, port, tx, drops, backlog = (int(v) for v in line.split()[1:])
                ports.append((self.names[node], port, tx, drops, backlog))
            elif kind == "tick ":
                now, ports = float(line.split()[1]), []
            elif line.startswith("ready"):
                try:
                    into.write("".join(f"{x}\n" for x in self.decide(now, ports)) + "go\n")
                    into.flush()
                except BrokenPipeError:  # it stopped: its error is on its stderr
                    break
            else:
                self.answer.append(line)
        self.answer.extend(out)
        return "".join(self.answer)
