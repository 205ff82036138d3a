"""Link-level flow control on real fabrics: a lossless lane drops nothing under incast,
pauses reach the senders, and a paused lane stops only itself."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


import topologies
from fabric.emulation import Emulation, EmulationOptions, shaping
from fabric.emulation.traffic import build_plan, run_plan
from fabric.host.tcgate import Gate
from fabric.model import graph as fg
from fabric.model.flowcontrol import FlowControl
from fabric.model.lanes import DSCP_COLLECTIVE, DSCP_STORAGE, THREE_LANES
from fabric.traffic.model import TransportSpec
from fabric.traffic.patterns import PatternSpec, make_transfers

INCAST_SPEC = "leaf-spine,leaves=4,spines=2,hosts_per_leaf=4"  # 16 hosts: 15 senders


def test_a_15_to_1_incast_on_a_lossless_lane_drops_nothing_and_pauses_the_senders(
        tmp_path: Path) -> None:
    """Every round, 15 servers answer one client at once with three times the buffer of
    the client's leaf (32 packets for each of its 6 ports): lossy, it drops; lossless,
    it pauses the links into that leaf, the spines' links from the other leaves and
    the servers' own NICs instead."""
    graph = topologies.build(INCAST_SPEC)
    queue = 32
    stripe = 3 * queue * 6 * 1448 // 15
    spec = PatternSpec("striped-read", size_bytes=stripe * 15, clients=1, servers=15,
                       rounds=4)
    transfers, participants = make_transfers(graph, spec)
    options = EmulationOptions(host_mbps=4, queue_pkts=queue, busy_links=1,
                               flow_control=FlowControl())
    with Emulation(graph, options) as emu:
        result = run_plan(emu, build_plan(emu, transfers, TransportSpec("tcp")), tmp_path)
    assert result.complete, result.errors
    checks = {c.name: c for c in result.fidelity}
    assert checks["lossless_drops"].ok and checks["lossless_drops"].value == 0, \
        checks["lossless_drops"]
    assert sum(result.ingress_drops.values()) == 0
    paused = {row["link"] for row in result.flow_control if row["pauses"]}
    client_leaf = next(iter(graph.neighbors(participants[0])))
    assert any(link.endswith(f">{client_leaf}") for link in paused), paused
    senders = set(participants[1:])
    assert any(link.split(">")[0] in senders for link in paused), paused  # back to the NICs
    # nothing the client's leaf held went beyond its headroom
    assert all(row["drops"] == 0 for row in result.flow_control)


def _pings(host, dst: str, tos: int, count: int = 3) -> int:
    """How many of ``count`` 1400-byte pings in service class ``tos`` were answered: a
    closed gate still lets out its burst, one full-size frame of the workload (1514
    bytes), so the pings are nearly that large."""
    out = host.cmd(f"ping -c {count} -i 0.3 -W 1 -s 1400 -Q {tos} {dst}")
    found = re.search(r"(\d+) received", out)
    return int(found.group(1)) if found else 0


def test_a_paused_lane_stops_only_that_lane_and_resumes(tmp_path: Path) -> None:
    graph = topologies.build("leaf-spine,leaves=2,spines=1,hosts_per_leaf=1")
    with Emulation(graph, EmulationOptions(lanes=THREE_LANES,
                                           flow_control=FlowControl())) as emu:
        src, dst = fg.endpoints(graph)
        ip = graph.nodes[dst]["nics"][0]["ip"]
        dev = fg.intf_name(src, graph.nodes[src]["nics"][0]["port"])
        ifindex = int(emu.host(src).cmd(f"cat /sys/class/net/{dev}/ifindex").split()[-1])
        mbps = emu.report.rate_plan.host_mbps
        gate = Gate(ifindex, shaping.lane_class(0), shaping.gate_handle(0),
                    shaping.gate_open_bytes_per_s(mbps),
                    emu.options.packet_bytes + shaping.ETHERNET_HEADER_BYTES, 1024)
        collective, storage = DSCP_COLLECTIVE << 2, DSCP_STORAGE << 2
        host = emu.host(src)
        assert _pings(host, ip, collective) == _pings(host, ip, storage) == 3
        _change_gate(host.pid, gate.message(closed=True))
        assert _pings(host, ip, collective, count=4) <= 1  # its lane is shut
        assert _pings(host, ip, storage) == 3               # the other lane flows
        _change_gate(host.pid, gate.message(closed=False))
        assert _pings(host, ip, collective) == 3  # what waited in its queue goes too


def _change_gate(pid: int, message: bytes) -> None:
    """Send a gate change from the namespace of process ``pid``, as the daemon does."""
    proc = subprocess.run(
        ["nsenter", "-t", str(pid), "-n", sys.executable, "-c", "import sys; from fabric.host.tcgate import GateSocket; "
         "GateSocket().send(bytes.fromhex(sys.argv[1]))", message.hex()],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
