"""The ns-3 backend: its switches hash as the documented select hash, its links and
NICs send at their rates, its buffers drop and the transport repairs, its schedule
keeps dependencies. Needs ns-3 (``scripts/setup.sh --ns3``), not root."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import topologies
from fabric.agent.roce import bth
from fabric.routing.tables import route_tables
from fabric.simulation import SimulatorMissing, build, simulate
from fabric.simulation.run import ecmp_path
from fabric.traffic.metrics import window_throughput
from fabric.simulation.scenario import Fabric
from fabric.traffic.model import ROCE_PORT, ScheduleError, Transfer, TransportSpec
from fabric.traffic.workloads import pattern_transfers

pytestmark = pytest.mark.skipif(not build.NS3_HEADER.exists() or shutil.which("g++") is None,
                                reason="ns-3 not installed (scripts/setup.sh --ns3)")

MBPS = 10.0
MTU = 4096
PACKET_S = (MTU + bth.DATA_OVERHEAD) * 8 / (MBPS * 1e6)


def roce(**kw) -> TransportSpec:
    return TransportSpec(kind="roce", rate_mbps=MBPS, mtu_payload=MTU, **kw)


def ip(graph, node: str) -> str:
    return graph.nodes[node]["nics"][0]["ip"]


def test_ecmp_packets_cross_exactly_the_links_the_select_hash_picks() -> None:
    """Every directed link's packet count is what the replayed hash predicts: the data
    on each transfer's path, its ACKs on the path of the reverse 5-tuple."""
    graph = topologies.build("fat-tree")
    transfers, _, _ = pattern_transfers(graph, "permutation", 3, roce(), packets=90)
    result = simulate(Fabric(graph, host_mbps=MBPS), transfers, roce(), seed=3)
    tables = route_tables(graph)
    expected: Counter = Counter()
    for row, t in zip(result.transfer_rows(), result.plan.transfers):
        path = row["path"]
        assert path[0] == t.src and path[-1] == t.dst
        for link in zip(path, path[1:]):
            expected[link] += row["send_packets_sent"]
        back = ecmp_path(graph, tables, t.dst, t.dst_ip, ip(graph, t.src), ROCE_PORT,
                         result.ports[t.id][0])
        for link in zip(back, back[1:]):
            expected[link] += row["recv_acks_sent"]
    measured = {link: load.packets for link, load in result.links.items() if load.packets}
    assert measured == dict(expected)
    assert result.drops == 0 and result.complete


def test_a_sprayed_flow_crosses_every_uplink_of_its_leaf() -> None:
    graph = topologies.build("fat-tree")
    t = Transfer("a", "p0e0h0", "p1e0h0", 200 * MTU)
    result = simulate(Fabric(graph, host_mbps=MBPS), [t], roce(entropy="packet"))
    for up in ("p0a0", "p0a1"):
        assert result.links[("p0e0", up)].packets > 40
    for core in ("c0", "c1", "c2", "c3"):
        assert result.links[(core, "p1a0" if core in ("c0", "c1") else "p1a1")].packets > 20
    assert result.complete and result.transfer_rows()[0]["path"] is None


def test_a_lone_flow_runs_at_line_rate_store_and_forward() -> None:
    """Its last byte arrives after its packets' wire time plus one packet time per
    further link: no idle time at the NIC, no loss."""
    graph = topologies.build("fat-tree")
    packets = 300
    t = Transfer("a", "p0e0h0", "p0e0h1", packets * MTU)
    result = simulate(Fabric(graph, host_mbps=MBPS), [t], roce())
    row = result.transfer_rows()[0]
    wire = packets * PACKET_S
    assert wire + PACKET_S < row["fct_s"] < wire * 1.01 + 2 * PACKET_S
    assert row["send_packets_sent"] == packets and row["recv_bytes"] == t.bytes
    assert result.drops == 0


def test_an_overflowing_buffer_drops_and_the_transport_repairs() -> None:
    """Four senders without congestion control into one NIC behind an 8-packet buffer:
    the buffer drops, the senders resend exactly what was lost, everything arrives."""
    graph = topologies.build("fat-tree")
    senders = ("p0e0h1", "p0e1h0", "p1e0h0", "p2e0h0")
    transfers = [Transfer(f"t{i}", s, "p0e0h0", 60 * MTU) for i, s in enumerate(senders)]
    result = simulate(Fabric(graph, host_mbps=MBPS, queue_pkts=8), transfers,
                      roce(cc="none"))
    rows = result.transfer_rows()
    assert result.complete
    assert all(r["recv_bytes"] == 60 * MTU for r in rows)
    assert result.links[("p0e0", "p0e0h0")].drops > 0
    resent = sum(r["send_retransmitted"] for r in rows)
    assert resent >= result.drops


def test_swift_keeps_an_incast_at_line_rate_without_loss() -> None:
    """Four senders as far from the receiver (one target delay) keep its link busy."""
    graph = topologies.build("fat-tree")
    senders = ("p1e0h0", "p2e0h0", "p3e0h0", "p1e1h0")
    transfers = [Transfer(f"t{i}", s, "p0e0h0", 400 * MTU) for i, s in enumerate(senders)]
    result = simulate(Fabric(graph, host_mbps=MBPS), transfers, roce(cc="swift"))
    rows = result.transfer_rows()
    span = max(r["recv_end"] for r in rows) - min(r["send_start"] for r in rows)
    assert result.drops == 0
    assert 4 * 400 * PACKET_S / span > 0.95  # the receiver's link stays busy


def test_a_dependent_transfer_starts_its_delay_after_its_input_arrived() -> None:
    graph = topologies.build("fat-tree")
    first = Transfer("a", "p0e0h0", "p1e0h0", 50 * MTU)
    second = Transfer("b", "p1e0h0", "p2e0h0", 50 * MTU, after=("a",), delay_s=0.25)
    result = simulate(Fabric(graph, host_mbps=MBPS), [first, second], roce())
    rows = {r["id"]: r for r in result.transfer_rows()}
    assert rows["b"]["send_start"] == pytest.approx(rows["a"]["recv_end"] + 0.25, abs=1e-9)


def test_the_same_seed_gives_the_same_run_and_another_seed_other_paths() -> None:
    graph = topologies.build("fat-tree")
    transfers, _, _ = pattern_transfers(graph, "stride", 0, roce(), packets=60)
    fabric = Fabric(graph, host_mbps=MBPS)
    one, two = (simulate(fabric, transfers, roce(), seed=5) for _ in range(2))
    assert one.transfer_rows() == two.transfer_rows()
    other = simulate(fabric, transfers, roce(), seed=6)
    assert [r["path"] for r in other.transfer_rows()] != [r["path"] for r in one.transfer_rows()]


@pytest.mark.parametrize("transport, words", [
    (TransportSpec(kind="tcp"), "kernel TCP"),
    (roce(cc="dcqcn"), "dcqcn needs ECN marking"),
    (roce(timeline=True), "timelines"),
])
def test_what_is_not_modelled_is_refused_in_one_line(transport, words) -> None:
    graph = topologies.build("fat-tree")
    with pytest.raises(ScheduleError, match=words) as info:
        simulate(Fabric(graph, host_mbps=MBPS), [Transfer("a", "p0e0h0", "p0e0h1", 1000)],
                 transport)
    assert "\n" not in str(info.value)


def test_a_bad_schedule_is_refused_as_the_emulator_refuses_it() -> None:
    graph = topologies.build("fat-tree")
    with pytest.raises(ScheduleError, match="unknown endpoint"):
        simulate(Fabric(graph, host_mbps=MBPS), [Transfer("a", "p0e0h0", "nowhere", 1000)],
                 roce())


def test_without_ns3_the_error_says_how_to_install_it(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(build, "NS3_HEADER", tmp_path / "absent.h")
    with pytest.raises(SimulatorMissing, match=r"scripts/setup\.sh --ns3") as info:
        build.simulator_binary()
    assert "\n" not in str(info.value)


@pytest.mark.slow
def test_the_binary_is_built_once_per_source(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = build.simulator_binary()
    stamp = first.stat().st_mtime_ns
    assert build.simulator_binary() == first and first.stat().st_mtime_ns == stamp
    assert first.is_relative_to(tmp_path)


def test_a_pinned_connection_takes_its_given_path_whatever_the_hash() -> None:
    graph = topologies.build("fat-tree")
    t = Transfer("a", "p0e0h0", "p1e0h0", 40 * MTU)
    fabric = Fabric(graph, host_mbps=MBPS)
    hashed = simulate(fabric, [t], roce()).transfer_rows()[0]["path"]
    # the other aggregation switch and core of the same plane: a path the hash did not take
    other_agg = "p0a1" if hashed[2] == "p0a0" else "p0a0"
    core = "c2" if other_agg == "p0a1" else "c0"
    path = ["p0e0h0", "p0e0", other_agg, core, other_agg.replace("p0", "p1"), "p1e0", "p1e0h0"]
    result = simulate(fabric, [t], roce(), paths={"a": path})
    assert result.transfer_rows()[0]["path"] == path
    for link in zip(path, path[1:]):
        assert result.links[link].packets == 40
    assert result.links[("p0e0", hashed[2])].packets == 0


def test_a_path_that_is_not_the_fabric_s_is_refused() -> None:
    graph = topologies.build("fat-tree")
    t = Transfer("a", "p0e0h0", "p1e0h0", 40 * MTU)
    with pytest.raises(ScheduleError, match="a: path p0e0h0/p0e0/p1e0/p1e0h0 is not a path"):
        simulate(Fabric(graph, host_mbps=MBPS), [t], roce(),
                 paths={"a": ["p0e0h0", "p0e0", "p1e0", "p1e0h0"]})


def test_the_window_counts_what_a_flow_delivered_between_its_edges() -> None:
    graph = topologies.build("fat-tree")
    t = Transfer("a", "p0e0h0", "p1e0h0", 300 * MTU)
    result = simulate(Fabric(graph, host_mbps=MBPS), [t], roce(), window=(0.2, 0.6))
    # payload over wire bytes, within a packet's worth of the 0.4 s window
    assert window_throughput(result.transfer_rows(), (0.2, 0.6), MBPS) == pytest.approx(
        MTU / (MTU + bth.DATA_OVERHEAD), abs=PACKET_S / 0.4)


@pytest.mark.slow
def test_fabric_run_collisions_on_the_simulator(tmp_path: Path) -> None:
    """The experiment's run directory as the emulator writes it, with the backend named,
    every policy run (adaptive from its telemetry)."""
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "fabric.cli", "run", "collisions", "--backend",
                          "ns3", "--quick", "--host-mbps", "10", "--out", str(out)],
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    with (out / "runs.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {r["backend"] for r in rows} == {"ns3"}
    assert sorted((r["policy"], r["seed"]) for r in rows) == [
        ("adaptive", "0"), ("adaptive", "1"), ("ar", "0"), ("ar", "1"), ("ecmp", "0"),
        ("ecmp", "1"), ("spray", "0"), ("spray", "1")]
    assert all(float(r["norm_throughput"]) > 0.9 for r in rows if r["policy"] != "ecmp")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parameters"]["backend"] == "ns3"
    assert "backend: ns-3 simulation" in res.stdout
    assert "telemetry rounds re-weighted" in res.stderr
    assert (out / "throughput.png").exists()


@pytest.mark.parametrize("options, words", [
    ({"policy": "my-policy"}, "does not model the my-policy routing policy"),
    ({"controller_app": "my.app:App"}, "does not model controller app"),
])
def test_a_bring_up_the_simulator_does_not_model_is_refused(options, words) -> None:
    from fabric.experiment.simulated import NotSimulated, simulated_fabric

    with pytest.raises(NotSimulated, match=words):
        simulated_fabric(topologies.build("fat-tree"), 1.0, **options)


def test_a_dual_homed_node_is_reached_by_its_nic_in_the_sender_s_zone() -> None:
    """Both backends address a storage node by its NIC nearest the sender (the model's
    ``nearest_nic_ip``), so a transfer never crosses the inter-zone links needlessly."""
    from fabric.model import graph as fg

    graph = topologies.build("two-zone")
    storage = next(e for e in fg.endpoints(graph) if len(graph.nodes[e]["nics"]) > 1)
    zone0, zone1 = (nic["ip"] for nic in graph.nodes[storage]["nics"])
    assert fg.nearest_nic_ip(graph, "z0h0", storage) == zone0
    assert fg.nearest_nic_ip(graph, "z1h0", storage) == zone1
    assert fg.path_links(graph, "z1h0", storage) == 2


def test_fabric_traffic_on_the_simulator(tmp_path: Path) -> None:
    """``fabric traffic --backend ns3``: a ring all-reduce at the graph's physical rates, its
    bus bandwidth beside the line rate, ECMP's collisions counted, the scenario kept."""
    keep = tmp_path / "keep"
    res = subprocess.run([sys.executable, "-m", "fabric.cli", "traffic", "fat-tree",
                          "--backend", "ns3", "--transport", "roce", "--pattern",
                          "ring-allreduce", "--size", "8000000", "--keep", str(keep)],
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)["summary"]
    assert summary["backend"] == "ns3" and summary["complete"]
    assert summary["host_mbps"] == 100_000 and summary["ranks"] == 16
    assert 0.1 < summary["busbw_frac"] < 1.0
    assert summary["collisions"] is not None and summary["fidelity"]["valid"]
    assert (keep / "scenario.txt").exists()


def test_adaptive_switches_split_two_flows_over_both_uplinks_whatever_the_hash() -> None:
    """Two flows leave one edge switch; ECMP's hash puts both on one uplink for this seed,
    the adaptive switches send each packet to the less occupied one: both carry about
    half, and the flows finish in about the time one would alone."""
    from fabric.routing.switch_ar import ArParams

    graph = topologies.build("fat-tree")
    transfers = [Transfer("a", "p0e0h0", "p1e0h0", 300 * MTU),
                 Transfer("b", "p0e0h1", "p1e1h0", 300 * MTU)]

    def uplinks(seed: int) -> set[str]:  # the aggregation switches ECMP's flows take
        rows = simulate(Fabric(graph, host_mbps=MBPS), transfers, roce(), seed=seed)
        return {r["path"][2] for r in rows.transfer_rows()}

    seed = next(s for s in range(50) if len(uplinks(s)) == 1)
    hashed = simulate(Fabric(graph, host_mbps=MBPS), transfers, roce(), seed=seed)
    assert len({r["path"][2] for r in hashed.transfer_rows()}) == 1  # a collision
    adaptive = simulate(Fabric(graph, host_mbps=MBPS, adaptive_routing=ArParams()), transfers,
                        roce(), seed=seed)
    up = [adaptive.links[("p0e0", agg)].packets for agg in ("p0a0", "p0a1")]
    assert min(up) > 0.4 * sum(up)
    assert adaptive.complete and adaptive.drops == 0
    span = max(r["recv_end"] for r in adaptive.transfer_rows())
    assert span < 1.15 * 300 * PACKET_S < max(r["recv_end"] for r in hashed.transfer_rows())
