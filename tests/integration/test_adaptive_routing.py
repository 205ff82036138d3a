"""Switch-local adaptive routing in the emulator's datapath: the tc program decides as
the pure decision does, moves packets off a busy hashed port, accounts every move on
both ends, and never sends a packet to a link that is down."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest

import topologies
from fabric.emulation import Emulation, EmulationError, EmulationOptions, adaptive_routing
from fabric.emulation.traffic import build_plan, run_plan
from fabric.host import libbpf
from fabric.model import graph as fg
from fabric.routing.switch_ar import choose_port
from fabric.traffic.model import Transfer, TransportSpec

TC_ACT_OK, TC_ACT_REDIRECT = 0, 7

FLOW_BYTES = 600 * 4096  # 600 packets: long enough for the hashed port to queue


def _uplinks(graph, switch: str) -> list[str]:
    return [fg.intf_name(switch, fg.port(graph, switch, nbr))
            for nbr in sorted(graph.neighbors(switch)) if fg.is_switch(graph, nbr)]


def test_the_switches_move_packets_to_the_less_occupied_uplink(tmp_path: Path) -> None:
    """Four flows leave one leaf of the rail-optimised Clos for four other leaves' hosts:
    whatever the hash, every uplink carries a share, and every move is counted at both
    ends. Then an uplink goes down: nothing more is moved onto it."""
    graph = topologies.build("rail-clos")
    transfers = [Transfer(f"f{i}", "h0g0", dst, FLOW_BYTES)
                 for i, dst in enumerate(["h4g0", "h5g0", "h6g0", "h7g0"])]
    transport = TransportSpec("roce")
    with Emulation(graph, EmulationOptions(policy="ar", packet_bytes=transport.packet_bytes)
                   ) as emu:
        leaf = next(iter(graph.neighbors("h0g0")))
        result = run_plan(emu, build_plan(emu, transfers, transport), tmp_path / "up")
        assert result.complete, result.errors
        counters = emu.adaptive_routing.counters()
        moved_out = sum(c[1] for c in counters.values())
        moved_in = sum(c[2] for c in counters.values())
        assert moved_out > 0 and moved_out == moved_in, counters
        sent = {dev: counters[dev][0] + counters[dev][2] for dev in _uplinks(graph, leaf)}
        assert min(sent.values()) > 0.1 * sum(sent.values()), sent
        # a flow split over several spines has no one path
        assert any(r["path"] is None for r in result.transfer_rows())

        spine = sorted(n for n in graph.neighbors(leaf) if fg.is_switch(graph, n))[0]
        cut = fg.intf_name(leaf, fg.port(graph, leaf, spine))
        emu.links.set_state([(leaf, spine)], up=False)
        emu.controller.wait_until_healed()
        before = emu.adaptive_routing.counters()[cut]
        again = run_plan(emu, build_plan(emu, transfers, transport), tmp_path / "down")
        assert again.complete, again.errors
        assert emu.adaptive_routing.counters()[cut][2] == before[2]  # nothing moved onto it


def test_a_slowed_uplink_gets_less_of_the_traffic(tmp_path: Path) -> None:
    """An uplink slowed to a quarter drains its queue four times slower, and the switches
    know it (their copy of its queue drains at the new rate): with one packet in service it
    still reads empty (queues count whole packets), with two it loses to the idle ports, so
    it carries about a fifth of what leaves the leaf. A copy draining at the old rate would
    read empty at every decision and take its turn, an even quarter."""
    graph = topologies.build("rail-clos")
    transfers = [Transfer(f"f{i}", "h0g0", dst, FLOW_BYTES)
                 for i, dst in enumerate(["h4g0", "h5g0", "h6g0", "h7g0"])]
    transport = TransportSpec("roce")
    with Emulation(graph, EmulationOptions(policy="ar", packet_bytes=transport.packet_bytes)
                   ) as emu:
        leaf = next(iter(graph.neighbors("h0g0")))
        spine = sorted(n for n in graph.neighbors(leaf) if fg.is_switch(graph, n))[0]
        emu.links.set_rate(leaf, spine, emu.report.rate_plan.host_mbps / 4)
        result = run_plan(emu, build_plan(emu, transfers, transport), tmp_path)
        assert result.complete, result.errors
        counters = emu.adaptive_routing.counters()
    sent = {dev: counters[dev][0] + counters[dev][2] for dev in _uplinks(graph, leaf)}
    slow = sent[fg.intf_name(leaf, fg.port(graph, leaf, spine))]
    assert slow < 0.22 * sum(sent.values()), sent  # measured 0.19


def test_a_route_wider_than_the_datapath_chooses_among_is_refused() -> None:
    graph = topologies.build("leaf-spine,leaves=2,spines=17,hosts_per_leaf=1")
    with pytest.raises(EmulationError, match="at most 16"):
        Emulation(graph, EmulationOptions(policy="ar")).start()


def _packet(src_port: int, dst_ip: bytes) -> bytes:
    """An Ethernet, IPv4 and UDP frame of 1,000 bytes to ``dst_ip``."""
    udp = struct.pack("!HHHH", src_port, 4791, 1000 - 34, 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 1000 - 14, 0, 0, 64, 17, 0,
                     socket.inet_aton("10.9.0.1"), dst_ip)
    frame = b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + udp
    return frame + bytes(1000 - len(frame))


def test_the_datapath_decides_as_the_python_decision_on_the_shared_vector() -> None:
    """The loaded BPF program, run on crafted packets (BPF_PROG_TEST_RUN) with its maps
    set to each vector's queues and pauses, chooses the port choose_port chooses (the
    flowlet map records the choice; the program returns TC_ACT_REDIRECT for a move).
    The simulator is held to the same decision by tests/unit/test_switch_ar.py."""
    from tests.unit.test_switch_ar import vectors

    obj = libbpf.BpfObject(adaptive_routing.build_object())
    try:
        maps = {n: obj.map_fd(n) for n in ("ports", "routes", "settings", "flowlets",
                                           "gate_stats")}
        prog = obj.program_fd("route")
        here = socket.if_nametoindex("lo")  # the hashed port: a test run needs a real device
        packet_ns, frame = 100_000_000, 1000  # 100 ms a packet: the run sees whole packets
        ctx = bytearray(192)
        struct.pack_into("=I", ctx, 40, here)  # struct __sk_buff's ifindex
        dst = socket.inet_aton("10.9.9.9")
        for number, (hashed, queued, paused, turn, keep) in enumerate(vectors(300)):
            n = len(queued)
            ifindexes = [here if i == hashed else 1000 + i for i in range(n)]
            libbpf.map_update(maps["settings"], struct.pack("=I", 0),
                              adaptive_routing.SETTINGS.pack(keep, frame, 10**12, 1))
            now = time.monotonic_ns()
            for i, (ifindex, q, p) in enumerate(zip(ifindexes, queued, paused)):
                libbpf.map_update(maps["ports"], struct.pack("=I", ifindex),
                                  adaptive_routing.PORT.pack(
                                      0, i + 1, packet_ns * 1000 // frame, 10**15,
                                      now + (q * packet_ns + packet_ns // 2), 0, 0, 0,
                                      turn if i == hashed else 0))
                gate = [0, 0, 1 if p else 0, 0, 0, 0, 0, 0]
                libbpf.map_update(maps["gate_stats"], struct.pack("=I", (i + 1) * 8),
                                  struct.pack("=8Q", *gate))
            route = adaptive_routing.ROUTE.pack(n, *ifindexes, *[0] * (16 - n))
            libbpf.map_update(maps["routes"], adaptive_routing.ROUTE_KEY.pack(
                0, struct.unpack("=I", dst)[0]), route)
            sport = 10_000 + number
            returned = libbpf.test_run(prog, _packet(sport, dst), bytes(ctx))
            expected = choose_port(hashed, queued, paused, turn, keep)
            if n == 1:
                assert returned == TC_ACT_OK
                continue
            key = struct.pack("=IIIHHI", 0, struct.unpack("=I", socket.inet_aton("10.9.0.1"))[0],
                              struct.unpack("=I", dst)[0], socket.htons(sport),
                              socket.htons(4791), 17)
            chosen = struct.unpack("=QII", libbpf.map_lookup(maps["flowlets"], key, 16))[1]
            assert ifindexes.index(chosen) == expected, (hashed, queued, paused, turn, keep)
            assert returned == (TC_ACT_OK if expected == hashed else TC_ACT_REDIRECT)
    finally:
        obj.close()


def test_a_flowlet_keeps_its_port_until_its_gap_passes() -> None:
    """Within the flowlet gap a flow's next packet takes its last port even when the other
    is now less occupied; once the gap has passed it is decided afresh."""
    obj = libbpf.BpfObject(adaptive_routing.build_object())
    try:
        maps = {n: obj.map_fd(n) for n in ("ports", "routes", "settings", "flowlets")}
        prog = obj.program_fd("route")
        here = socket.if_nametoindex("lo")
        ctx = bytearray(192)
        struct.pack_into("=I", ctx, 40, here)
        dst = socket.inet_aton("10.9.9.9")
        packet_ns, frame = 100_000_000, 1000
        libbpf.map_update(maps["routes"], adaptive_routing.ROUTE_KEY.pack(
            0, struct.unpack("=I", dst)[0]), adaptive_routing.ROUTE.pack(2, here, 1001,
                                                                       *[0] * 14))

        def decide(queued: list[int], gap_ns: int) -> int:
            libbpf.map_update(maps["settings"], struct.pack("=I", 0),
                              adaptive_routing.SETTINGS.pack(-1, frame, gap_ns, 0))
            now = time.monotonic_ns()
            for ifindex, q in zip((here, 1001), queued):
                libbpf.map_update(maps["ports"], struct.pack("=I", ifindex),
                                  adaptive_routing.PORT.pack(
                                      0, 0, packet_ns * 1000 // frame, 10**15,
                                      now + q * packet_ns + packet_ns // 2, 0, 0, 0, 0))
            return libbpf.test_run(prog, _packet(4242, dst), bytes(ctx))

        assert decide([5, 0], 10**12) == TC_ACT_REDIRECT  # the other port is emptier
        assert decide([0, 5], 10**12) == TC_ACT_REDIRECT  # its flowlet goes on: kept there
        assert decide([0, 5], 1) == TC_ACT_OK  # the gap passed: decided afresh
    finally:
        obj.close()
