"""Switch-local adaptive routing: the pure decision, its C twin (compiled into both
backends), the options, and what each backend is given."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import topologies
from fabric.emulation import adaptive_routing, flowcontrol
from fabric.model import graph as fg
from fabric.routing.policies import compute_intents, multipath, sprays
from fabric.routing.switch_ar import HEADER, MAX_PORTS, ArParams, check_port_sets, choose_port
from fabric.routing.tables import route_tables
from fabric.simulation.scenario import Fabric, transport_config
from fabric.traffic.model import TransportSpec

COMPILER = shutil.which("clang") or shutil.which("cc")
HARNESS = r"""
#include <stdio.h>
#include "switch_ar.h"
int main(void) {
    int n, hashed;
    unsigned long long turn;
    long long keep;
    while (scanf("%d %d %llu %lld", &n, &hashed, &turn, &keep) == 4) {
        unsigned long long queued[AR_MAX_PORTS];
        unsigned char paused[AR_MAX_PORTS];
        for (int i = 0; i < n; i++) {
            int p;
            if (scanf("%llu %d", &queued[i], &p) != 2) return 1;
            paused[i] = (unsigned char)p;
        }
        printf("%d\n", ar_choose(n, hashed, turn, queued, paused, keep));
    }
    return 0;
}
"""


def vectors(count: int) -> list[tuple[int, list[int], list[bool], int, int]]:
    """Decisions with ties, pauses and thresholds (a fixed seed: the same every run)."""
    rng = random.Random(20261207)
    out = []
    for _ in range(count):
        n = rng.randint(1, MAX_PORTS)
        queued = [rng.choice([0, 0, 1, 2, 3, rng.randint(0, 2000)]) for _ in range(n)]
        paused = [rng.random() < 0.2 for _ in range(n)]
        out.append((rng.randrange(n), queued, paused, rng.randint(0, 40),
                    rng.choice([-1, -1, 0, 1, 5])))
    return out


@pytest.mark.skipif(COMPILER is None, reason="a C compiler (clang) is installed by setup.sh")
def test_the_c_twin_decides_as_the_python_decision_on_every_vector(tmp_path: Path) -> None:
    source = tmp_path / "harness.c"
    source.write_text(HARNESS)
    binary = tmp_path / "harness"
    subprocess.run([COMPILER, "-O2", "-Wall", "-Werror", f"-I{HEADER.parent}", str(source),
                    "-o", str(binary)], check=True, capture_output=True)
    cases = vectors(3000)
    text = "".join(f"{len(q)} {h} {turn} {keep} "
                   + " ".join(f"{x} {int(p)}" for x, p in zip(q, paused)) + "\n"
                   for h, q, paused, turn, keep in cases)
    out = subprocess.run([str(binary)], input=text, capture_output=True, text=True,
                         check=True).stdout.split()
    expected = [choose_port(h, q, paused, turn, keep) for h, q, paused, turn, keep in cases]
    assert [int(x) for x in out] == expected
    assert len(set(expected)) > 8  # the vector exercises many outcomes


def test_the_least_occupied_port_wins_and_pauses_lose() -> None:
    assert choose_port(0, [5, 2, 7], [False] * 3) == 1
    assert choose_port(0, [5, 2, 7], [False, True, False]) == 0  # a paused port loses
    assert choose_port(2, [9, 9, 9], [True, True, False]) == 2


def test_equal_ports_take_turns_from_the_hashed_one() -> None:
    picks = [choose_port(1, [0, 0, 0, 0], [False] * 4, turn) for turn in range(8)]
    assert picks == [1, 2, 3, 0, 1, 2, 3, 0]


def test_a_threshold_keeps_the_hashed_port_until_it_fills() -> None:
    assert choose_port(0, [3, 0], [False, False], keep=3) == 0
    assert choose_port(0, [4, 0], [False, False], keep=3) == 1
    assert choose_port(0, [0, 0], [True, False], keep=3) == 1  # unless it is paused


@pytest.mark.parametrize("params, words", [
    ({"threshold_pkts": -1}, "threshold"), ({"threshold_pkts": 2.5}, "whole number"),
    ({"threshold_pkts": 10**6}, "threshold"), ({"flowlet_gap_pkts": 0}, "flowlet gap"),
    ({"flowlet_gap_pkts": float("inf")}, "flowlet gap"),
    ({"flowlet_gap_pkts": float("nan")}, "flowlet gap")])
def test_options_out_of_range_are_refused(params, words) -> None:
    with pytest.raises(ValueError, match=words):
        ArParams(**params)


def test_ar_routes_as_ecmp_and_its_flows_take_every_path() -> None:
    graph = topologies.build("fat-tree")
    assert compute_intents("ar", graph) == compute_intents("ecmp", graph)
    assert multipath("ar") and not sprays("ar")  # the switches move a flow, not its sender
    assert not multipath("ecmp") and not multipath("static") and multipath("spray")


def test_routes_wider_than_a_switch_chooses_among_are_refused() -> None:
    check_port_sets(route_tables(topologies.build("fat-tree")))
    with pytest.raises(ValueError, match="at most 16"):
        check_port_sets({"s1": {"10.0.0.1": tuple(range(17))}})


def test_the_simulator_is_told_the_threshold_gap_and_queue_unit() -> None:
    graph = topologies.build("fat-tree")
    transport = TransportSpec("roce", mtu_payload=4096)
    fabric = Fabric(graph, host_mbps=10.0, adaptive_routing=ArParams(2, 8.0))
    config = transport_config(fabric, transport, 10.0)
    assert config["ar"] == 1.0 and config["ar_keep"] == 2.0
    assert config["ar_frame_bytes"] == 4096 + 58  # payload, headers, ICRC: a packet's wire size
    assert config["ar_flowlet_gap"] == pytest.approx(8 * config["packet_time"])
    assert "ar" not in transport_config(Fabric(graph, host_mbps=10.0), transport, 10.0)
    with pytest.raises(ValueError, match="static routes"):
        Fabric(graph, static_routes=True, adaptive_routing=ArParams())


def test_the_datapath_is_given_every_route_with_a_choice_and_its_link_ids() -> None:
    graph = topologies.build("fat-tree")
    ports = adaptive_routing.fabric_ports(graph)
    assert len(ports) == 2 * sum(1 for a, b in graph.edges
                                 if fg.is_switch(graph, a) and fg.is_switch(graph, b))
    ids = {(d.src, d.dst): i for i, d in enumerate(flowcontrol.directed_links(graph), start=1)}
    switches = fg.switches(graph)
    assert all(ids[switches[sw], nbr] == link for sw, nbr, link in ports.values())
    entries = adaptive_routing.route_entries(graph)
    assert entries and all(len(devs) == 2 and set(devs) <= set(ports)
                           for devs in entries.values())
    # around a down uplink the edge switch has one port left: no choice, no entry
    down = frozenset(("p0e0", "p0a0"))
    after = adaptive_routing.route_entries(graph, [down])
    edge = switches.index("p0e0")
    assert not any(sw == edge for sw, _ in after) and any(sw == edge for sw, _ in entries)


def test_the_datapath_s_shared_maps_match_the_flow_control_accounting() -> None:
    """The adaptive-routing program reuses two maps of pfc.bpf.c by fd: their sizes agree."""
    ar = adaptive_routing.SOURCE.read_text()
    pfc = flowcontrol.SOURCE.read_text()
    assert re.search(r"#define PFC_MAX_LINKS (\d+)", ar).group(1) == \
        re.search(r"#define MAX_LINKS (\d+)", pfc).group(1)
    for name in adaptive_routing.PFC_MAPS:
        assert f"}} {name} SEC" in ar and f"}} {name} SEC" in pfc


@pytest.mark.skipif(shutil.which("clang") is None, reason="clang is installed by setup.sh")
def test_the_datapath_program_compiles(tmp_path: Path) -> None:
    obj = adaptive_routing.bpf_build.compile_object(
        adaptive_routing.SOURCE, tmp_path, "ar", RuntimeError,
        (HEADER, flowcontrol.HEADER))
    assert obj.read_bytes()[:4] == b"\x7fELF"
