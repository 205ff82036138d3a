"""Work sized in packets, htsim's inter-pod permutation and how a run records its work."""

from __future__ import annotations

import pytest

import topologies
from fabric.analysis.provenance import work_text
from fabric.traffic import sizing, synthetic
from fabric.traffic.model import TransportSpec
from fabric.traffic.placement import rank_hosts
from fabric.traffic.workloads import FLOW_PACKETS, pattern_transfers


def test_packets_are_full_payloads_of_the_transport() -> None:
    roce, tcp = TransportSpec("roce", mtu_payload=1024), TransportSpec("tcp")
    assert sizing.bytes_of(1000, roce) == 1_024_000
    assert sizing.bytes_of(10, tcp) == 14_480
    assert sizing.packets_of(sizing.bytes_of(2.5, roce), roce) == pytest.approx(2.5)
    with pytest.raises(ValueError, match="cannot have -1 packets"):
        sizing.bytes_of(-1, roce)


def test_a_packet_time_counts_the_ip_bytes_and_scales_with_the_rate() -> None:
    roce = TransportSpec("roce")
    assert sizing.packet_time_s(roce, 10.0) == pytest.approx(roce.packet_bytes * 8 / 10e6)
    assert sizing.seconds_of(100, roce, 5.0) == pytest.approx(
        2 * sizing.seconds_of(100, roce, 10.0))
    with pytest.raises(ValueError, match="positive rate"):
        sizing.packet_time_s(roce, 0.0)


def test_a_flow_is_the_same_bytes_at_every_rate() -> None:
    graph, roce = topologies.build("fat-tree"), TransportSpec("roce")
    transfers, _, _ = pattern_transfers(graph, "permutation", 0, roce)
    assert {t.bytes for t in transfers} == {FLOW_PACKETS * roce.mtu_payload}


@pytest.mark.parametrize("spec", ["fat-tree", "fat-tree,k=8", "rail-clos"])
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_an_interpod_permutation_sends_every_flow_out_of_its_pod(spec: str, seed: int) -> None:
    graph = topologies.build(spec)
    ranks = rank_hosts(graph, placement="random", seed=seed)
    pods = synthetic.pods(graph, ranks)
    flows = synthetic.permutation(ranks, 100, seed, groups=pods)
    assert sorted(t.src for t in flows) == sorted(ranks)
    assert sorted(t.dst for t in flows) == sorted(ranks)  # each receives once
    assert all(pods[t.src] != pods[t.dst] for t in flows)
    assert flows == synthetic.permutation(ranks, 100, seed, groups=pods)  # seeded


def test_pods_are_the_fat_tree_s_and_else_the_leaves() -> None:
    fat = topologies.build("fat-tree")
    assert len(set(synthetic.pods(fat, rank_hosts(fat)).values())) == 4
    rail = topologies.build("rail-clos")
    hosts = rank_hosts(rail)
    assert all(rail.has_edge(h, leaf) for h, leaf in synthetic.pods(rail, hosts).items())


def test_an_interpod_permutation_refuses_a_pod_with_more_than_half_the_ranks() -> None:
    ranks = ["a", "b", "c"]
    with pytest.raises(ValueError, match="at most half"):
        synthetic.permutation(ranks, 1, 0, groups={"a": 0, "b": 0, "c": 1})


def test_a_run_s_work_reads_in_packets_and_packet_times() -> None:
    assert work_text({"flow_packets": 1000, "buffer_packets": 2000,
                      "payload_bytes": 4096}) == (
        "1,000-packet flows, 2,000-packet buffers of 4,096 B")
    assert work_text({"flap_period_packet_times": 400, "htsim_flow_packets": 12000}) == (
        "400-packet-time flap periods")
    assert work_text(None) is None and work_text({"payload_bytes": 4096}) is None
