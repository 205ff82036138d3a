"""Real fabrics under each policy: spraying, adaptive weights, isolation,
failover and a switch restart."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import topologies
from fabric.emulation import Emulation, EmulationOptions, ovs
from fabric.emulation.linkstats import LinkSampler
from fabric.emulation.reachability import check_all_pairs
from fabric.model import graph as fg
from fabric.model.lanes import DSCP_COLLECTIVE, DSCP_STORAGE, SINGLE_LANE, THREE_LANES
from tests.integration.helpers import SPRAY_SENDER, UDP_COUNTER, group_weights, port_tx_packets

# Rail 0 of the default rail-clos: h0g0..h3g0 under r0l0, h4g0..h7g0 under r0l1.
SRC, DST, LEAF = "h0g0", "h4g0", "r0l0"


def uplinks(graph, leaf: str) -> list[int]:
    return sorted(fg.port(graph, leaf, n) for n in graph.neighbors(leaf)
                  if graph.nodes[n]["role"] == "spine")


def iperf_server(emu: Emulation, host: str, port: int = 5201) -> subprocess.Popen:
    proc = emu.host(host).popen(["iperf3", "-s", "-1", "-p", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    return proc


def iperf_client(emu: Emulation, host: str, dst: str, *args: str, port: int = 5201
                 ) -> subprocess.Popen:
    return emu.host(host).popen(["iperf3", "-c", emu.graph.nodes[dst]["ip"], "-p", str(port),
                                 "--json", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen, timeout: float = 60) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err.decode() or out.decode()[-500:]
    return json.loads(out)


def test_sprayed_udp_flow_uses_every_spine() -> None:
    graph = topologies.build("rail-clos")
    with Emulation(graph, EmulationOptions(policy="spray")) as emu:
        counter = emu.host(DST).popen([sys.executable, "-c", UDP_COUNTER, "4791"],
                                      stdout=subprocess.PIPE)
        time.sleep(0.3)
        before = port_tx_packets(LEAF)
        rate = 0.8 * emu.report.rate_plan.host_mbps  # below the host link: no loss
        sender = emu.host(SRC).popen([sys.executable, "-c", SPRAY_SENDER,
                                      graph.nodes[DST]["ip"], "4791", "2000", "1000", str(rate),
                                      "40000", "64"])
        assert sender.wait(timeout=30) == 0
        after = port_tx_packets(LEAF)
        received = int(counter.communicate(timeout=30)[0])
    shares = {p: after[p] - before[p] for p in uplinks(graph, LEAF)}
    total = sum(shares.values())
    print(f"spray over uplinks: {shares} ({received} of 2000 received)")
    assert total >= 2000
    assert all(n >= 0.10 * total for n in shares.values()), shares
    assert received >= 0.99 * 2000


def test_adaptive_weights_move_in_ovs_under_a_hot_spot() -> None:
    graph = topologies.build("rail-clos")
    with Emulation(graph, EmulationOptions(policy="adaptive")) as emu:
        idle = group_weights(LEAF)
        assert idle and all(len(set(w)) == 1 for w in idle.values()), idle
        server = iperf_server(emu, DST)
        client = iperf_client(emu, SRC, DST, "-t", "4")
        skewed, start, first_shift = [], time.monotonic(), None
        while client.poll() is None:
            now = [w for w in group_weights(LEAF).values() if len(set(w)) > 1]
            if now and first_shift is None:
                first_shift = time.monotonic() - start
            skewed += now
            time.sleep(0.05)
        finish(client)
        server.wait(timeout=10)
        restored = None
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            now = group_weights(LEAF)
            if all(len(set(w)) == 1 and w[0] == max(w) for w in now.values()):
                restored = time.monotonic()
                break
            time.sleep(0.1)
    print(f"adaptive: first weight shift {first_shift} s after the flow started; "
          f"{len(skewed)} skewed samples, e.g. {skewed[:3]}")
    assert skewed, "one line-rate flow on one uplink should make the controller shift weight"
    assert restored is not None, "weights should return to equal once the fabric is idle"


def _collective_mbps(lanes) -> tuple[float, float]:
    """Collective-class TCP goodput while a storage-class UDP flood shares its
    links, and the host link rate."""
    graph = topologies.build("rail-clos")
    with Emulation(graph, EmulationOptions(policy="ecmp", lanes=lanes)) as emu:
        server = iperf_server(emu, DST)
        flood_sink = iperf_server(emu, DST, port=5202)
        link_mbps = emu.report.rate_plan.host_mbps
        flood = iperf_client(emu, "h1g0", DST, "-u", "-b", f"{3 * link_mbps}M", "-t", "6",
                             "--dscp", str(DSCP_STORAGE), port=5202)
        time.sleep(1)
        collective = iperf_client(emu, SRC, DST, "-t", "4", "--dscp", str(DSCP_COLLECTIVE))
        result = finish(collective)
        finish(flood)
        server.wait(timeout=10)
        flood_sink.wait(timeout=10)
    return result["end"]["sum_received"]["bits_per_second"] / 1e6, link_mbps


def test_storage_flood_leaves_collective_its_guaranteed_share() -> None:
    isolated, link_mbps = _collective_mbps(THREE_LANES)
    shared, _ = _collective_mbps(SINGLE_LANE)
    guaranteed = THREE_LANES.lanes[THREE_LANES.queue_named("collective")].share * link_mbps
    print(f"collective under a storage flood: {isolated:.2f} Mbit/s with lanes, "
          f"{shared:.2f} Mbit/s in one shared lane (guaranteed {guaranteed:.1f})")
    assert isolated >= 0.95 * guaranteed
    assert shared < isolated, "without lanes the flood should hurt the collective flow"


def longest_stall(rates: list[tuple[float, float]], floor: float) -> float:
    """Longest stretch of consecutive samples below ``floor``, in seconds."""
    longest, since = 0.0, None
    for t, rate in rates:
        if rate < floor:
            since = t if since is None else since
            longest = max(longest, t - since)
        else:
            since = None
    return longest


def test_link_down_during_traffic_is_routed_around_within_a_second() -> None:
    graph = topologies.build("rail-clos")
    with Emulation(graph, EmulationOptions(policy="ecmp")) as emu:
        server = iperf_server(emu, DST)
        with LinkSampler(graph, interval_s=0.05) as sampler:
            client = iperf_client(emu, SRC, DST, "-t", "6")
            time.sleep(1.5)
            before = port_tx_packets(LEAF)
            time.sleep(0.5)
            after = port_tx_packets(LEAF)
            busy = max(uplinks(graph, LEAF), key=lambda p: after[p] - before[p])
            dev = fg.intf_name(LEAF, busy)
            cut_at = time.time()
            subprocess.run(["ip", "link", "set", "dev", dev, "down"], check=True)
            result = finish(client)
        server.wait(timeout=10)
        status = emu.controller.status()
        reach = check_all_pairs(graph, emu.host)
        subprocess.run(["ip", "link", "set", "dev", dev, "up"], check=True)
        time.sleep(1)
        healed = emu.controller.status()
    # Delivery to the receiver, every 50 ms, from its leaf's port counters.
    delivered = [(t, rates[("r0l1", DST)]) for t, rates in sampler.series.rates_mbps()]
    during = [(t, r) for t, r in delivered if t >= cut_at - 0.05]
    ends = result["start"]["timestamp"]["timesecs"] + result["end"]["sum_sent"]["seconds"]
    flowing = [r for t, r in delivered if t < cut_at and r > 0]
    gap = longest_stall([(t, r) for t, r in during if t < ends - 0.1],
                        0.1 * sum(flowing) / len(flowing))
    reacted = [e["time"] - cut_at for e in status["events"]
               if e["time"] >= cut_at and "down" in e["what"]]
    print(f"failover: delivery stalled {gap:.2f} s, controller updated routes "
          f"{reacted[0] * 1e3 if reacted else float('nan'):.1f} ms after the cut")
    assert result["end"]["sum_received"]["bytes"] > 0
    assert gap < 1.0
    assert reacted and reacted[0] < 1.0
    assert status["down_links"], "the controller should know the link is down"
    assert reach.ok, reach.failed[:5]
    assert healed["down_links"] == []


def test_fabric_survives_an_open_vswitch_restart() -> None:
    graph = topologies.build("rail-clos")
    with Emulation(graph, EmulationOptions(policy="ecmp")) as emu:
        server = iperf_server(emu, DST)
        client = iperf_client(emu, SRC, DST, "-t", "8")
        time.sleep(2)
        assert ovs.restart_vswitchd() == []  # the new daemon forwards at real-time priority too
        deadline = time.monotonic() + 5
        while len(emu.controller.status().get("ready", [])) == len(fg.switches(graph)):
            if time.monotonic() > deadline:
                break  # reconnection was faster than we could observe
            time.sleep(0.05)
        emu.controller.wait_until_routed(timeout_s=20)
        result = finish(client)
        server.wait(timeout=10)
        reach = check_all_pairs(graph, emu.host)
    assert result["end"]["sum_received"]["bytes"] > 0
    assert reach.ok, reach.failed[:5]
    assert emu.leftovers() == []
