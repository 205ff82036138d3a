"""The adaptive policy in the simulator: telemetry out, weights in, and the same
decisions as the os-ken app on the same counters (no root)."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("os_ken")

import topologies  # noqa: E402
from controllers.adaptive import AdaptiveApp  # noqa: E402
from fabric.model import graph as fg  # noqa: E402
from fabric.routing.adaptive import params_for_rate  # noqa: E402
from fabric.routing.config import ControllerConfig  # noqa: E402
from fabric.routing.policies import compute_intents  # noqa: E402
from fabric.simulation import build, simulate  # noqa: E402
from fabric.simulation import run as sim_run  # noqa: E402
from fabric.simulation.adaptive import SimulatedController  # noqa: E402
from fabric.simulation.scenario import Fabric  # noqa: E402
from fabric.testing import FakeFabric  # noqa: E402
from fabric.traffic.model import TransportSpec  # noqa: E402
from fabric.traffic.workloads import pattern_transfers  # noqa: E402

pytestmark = pytest.mark.skipif(not build.NS3_HEADER.exists() or shutil.which("g++") is None,
                                reason="ns-3 not installed (scripts/setup.sh --ns3)")

MBPS = 10.0


class Recording(SimulatedController):
    """The simulator's controller, keeping every tick's inputs and the weights after it."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.ticks: list[tuple[float, list, dict]] = []

    def decide(self, now, ports):
        lines = super().decide(now, ports)
        self.ticks.append((now, list(ports), self.balancer.all_weights()))
        return lines


def adaptive_run(monkeypatch, spec: str, entropy: str, controller=Recording, packets=900):
    """A stride of ``packets``-packet flows under the adaptive policy at MBPS; the run and
    its controller."""
    graph = topologies.build(spec)
    made = []

    def make(fabric, params):
        made.append(controller(fabric, params))
        return made[-1]

    monkeypatch.setattr(sim_run, "SimulatedController", make)
    transport = TransportSpec("roce", rate_mbps=MBPS, entropy=entropy, entropy_ports=256)
    transfers, _, _ = pattern_transfers(graph, "stride", 0, transport, packets)
    params = params_for_rate(MBPS, packet_bits=transport.packet_bytes * 8)
    result = simulate(Fabric(graph, host_mbps=MBPS), transfers, transport, seed=0,
                      deadline_s=60.0, adaptive=params)
    return graph, params, result, made[0]


def test_the_simulator_s_groups_are_the_adaptive_app_s() -> None:
    graph = topologies.build("fat-tree")
    controller = SimulatedController(Fabric(graph, host_mbps=MBPS), params_for_rate(MBPS))
    intents = compute_intents("adaptive", graph)
    for sw, intent in intents.items():
        assert controller.port_sets[sw] == sorted(tuple(b.port for b in g.buckets)
                                                  for g in intent.groups)


# per-flow entropy: collided uplinks stay hot, so weights change every few rounds
@pytest.mark.parametrize("spec", ["rail-clos", "fat-tree"])
def test_the_app_and_the_simulator_decide_alike_on_the_simulator_s_telemetry(
        monkeypatch, spec) -> None:
    graph, params, result, rec = adaptive_run(monkeypatch, spec, "flow")
    assert result.complete and rec.rounds == len(rec.ticks) > 10
    changed = result.telemetry["weight_changes"]
    assert changed > 0, "the run never re-weighted a group: nothing was compared"
    # the os-ken app on the fake switches, fed the same counters and probe delays
    fake = FakeFabric(graph)
    config = ControllerConfig(scale_mbps_per_gbps=Fabric(graph, host_mbps=MBPS).scale / 1e6,
                              adaptive=params)
    app = fake.connect(fake.make_app(AdaptiveApp, config=config))
    for now, ports, weights in rec.ticks:
        for sw, port, tx, drops, backlog in ports:
            if (sw, port) in rec.probed:
                app.balancer.observe_queueing(sw, port,
                                              backlog * 8 / app.balancer.capacity_bps(sw, port))
            counters = fake.counters(sw, port)
            counters.tx_bytes, counters.tx_dropped = tx, drops
        fake.poll_stats(app, now=now)
        for sw, groups in weights.items():
            installed = {tuple(sorted(g.weights())): g.weights()
                         for g in fake.switches[sw].groups.values()}
            assert installed == groups, f"{sw} at {now}"
    assert app.errors == [] and fake.errors == []


class OneUplink(SimulatedController):
    """Sends everything a leaf hashes upward to its first uplink, from the first tick."""

    def decide(self, now, ports):
        self.rounds += 1
        if self.rounds > 1:
            return []
        graph = self.fabric.graph
        lines = []
        for sw in fg.switches(graph):
            for ups in self.port_sets[sw]:
                weights = [1] + [0] * (len(ups) - 1)
                lines.append(f"weights {self.index[sw]} {len(ups)} {' '.join(map(str, ups))} "
                             f"{' '.join(map(str, weights))}")
        return lines


def test_the_simulator_routes_by_the_weights_it_is_given(monkeypatch) -> None:
    graph, params, result, ctl = adaptive_run(monkeypatch, "rail-clos", "recycle",
                                              controller=OneUplink, packets=300)
    assert result.complete and ctl.rounds > 1
    leaf = "r0l0"
    ups = sorted(n for n in graph.neighbors(leaf) if fg.is_switch(graph, n))
    first = min(ups, key=lambda n: fg.port(graph, leaf, n))
    loads = {n: result.links[(leaf, n)].bytes for n in ups}
    # before the first tick (one interval) every uplink carried a share; after it, only
    # the first (the only one of weight > 0)
    bound = params.interval_s * MBPS * 1e6 / 8 * 1.1
    assert loads[first] > 4 * bound
    assert all(0 < loads[n] <= bound for n in ups if n != first)


def test_a_simulation_without_adaptive_has_no_telemetry() -> None:
    graph = topologies.build("rail-clos")
    transfers, _, _ = pattern_transfers(graph, "stride", 0, TransportSpec("roce"), 60)
    result = simulate(Fabric(graph, host_mbps=MBPS), transfers,
                      TransportSpec("roce", rate_mbps=MBPS), seed=0)
    assert result.complete and result.telemetry is None
