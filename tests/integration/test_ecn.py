"""ECN marking on real switch queues, and DCQCN reacting to it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import topologies
from fabric.emulation import Emulation, EmulationOptions, ecn, hostconfig
from fabric.emulation.traffic import build_plan, run_plan
from fabric.model import graph as fg
from fabric.traffic.model import Transfer, TransportSpec

# Sends ``count`` datagrams as fast as the socket takes them (the NIC's shaping paces
# them out) from ``time.time() >= start``; args: dst tos count start
SEND = r"""
import socket, sys, time
dst, tos, count, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
time.sleep(max(0.0, start - time.time()))
for _ in range(count):
    s.sendto(bytes(1400), (dst, 5000))
"""
# Counts datagrams and CE marks per source address until 1.5 s pass without one.
RECEIVE = r"""
import json, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
s.bind((sys.argv[1], 5000))
s.settimeout(float(sys.argv[2]))
got = {}
try:
    while True:
        _, anc, _, (src, _) = s.recvmsg(2048, socket.CMSG_SPACE(4))
        n, ce = got.get(src, (0, 0))
        got[src] = (n + 1, ce + (anc[0][2][0] & 3 == 3))
        s.settimeout(1.5)
except socket.timeout:
    pass
print(json.dumps(got))
"""


def _ip(graph, host: str) -> str:
    return graph.nodes[host]["nics"][0]["ip"]


def _filters(emu: Emulation, node: str, dev: str) -> str:
    args = ["tc", "filter", "show", "dev", dev]
    if fg.is_endpoint(emu.graph, node):
        args = ["nsenter", "-t", str(emu.host(node).pid), "-n", *args]
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def _reader(emu: Emulation, node: str, dev: str) -> ecn.MarkerReader:
    prog = ecn.marker_prog_id(_filters(emu, node, dev))
    assert prog is not None, f"no marker on {dev}"
    return ecn.MarkerReader(prog)


def test_switch_queues_carry_markers_that_count_ecn_capable_packets():
    graph = topologies.build("leaf-spine")
    with Emulation(graph, EmulationOptions()) as emu:
        for sw in fg.switches(graph):
            for nbr in graph.neighbors(sw):
                if not fg.is_endpoint(graph, nbr):
                    assert " name mark " in _filters(emu, sw, fg.intf_name(
                        sw, fg.port(graph, sw, nbr)))
        for ep in fg.endpoints(graph):
            assert " name mark " in _filters(emu, ep, hostconfig.ifb_name(ep, 0))
            assert " bpf " not in _filters(emu, ep, fg.intf_name(ep, 0))  # NIC egress
        into = _reader(emu, "l1h0", hostconfig.ifb_name("l1h0", 0))
        try:
            before = into.read()
            # ECT(0) echo requests and not-ECT ones into l1h0 through an idle fabric
            emu.host("l0h0").cmd(f"ping -c 5 -i 0.2 -Q 2 {_ip(graph, 'l1h0')}")
            emu.host("l0h0").cmd(f"ping -c 3 -i 0.2 {_ip(graph, 'l1h0')}")
            after = into.read()
        finally:
            into.close()
        assert after.ect - before.ect == 5
        assert after.marked == before.marked  # an idle queue marks nothing


def test_a_congested_queue_marks_ecn_capable_packets_by_its_backlog(tmp_path: Path):
    """Two ECN-capable senders and one that is not, at once into one host: its queue
    (the IFB) builds at twice the link rate. With step marking at 4 packets, the
    ECN-capable packets that found a backlog arrive CE (with valid checksums: every
    datagram arrives), exactly as many as the marker counted; the others never."""
    graph = topologies.build("leaf-spine")
    marking = ecn.EcnMarking(kmin=4, kmax=4, pmax=1.0)
    with Emulation(graph, EmulationOptions(ecn=marking, queue_pkts=128)) as emu:
        dst = _ip(graph, "l0h0")
        into = _reader(emu, "l0h0", hostconfig.ifb_name("l0h0", 0))
        try:
            start = into.read()
            receiver = emu.host("l0h0").popen([sys.executable, "-c", RECEIVE, dst, "10"],
                                              stdout=subprocess.PIPE, text=True)
            begin = time.time() + 1.0
            senders = [emu.host(h).popen([sys.executable, "-c", SEND, dst, str(tos), "40",
                                          str(begin)])
                       for h, tos in (("l0h1", 2), ("l0h2", 2), ("l0h3", 0))]
            for proc in senders:
                assert proc.wait(timeout=30) == 0
            out, _ = receiver.communicate(timeout=60)
            end = into.read()
        finally:
            into.close()
    got = json.loads(out)
    ect = [got[_ip(graph, h)] for h in ("l0h1", "l0h2")]
    plain = got[_ip(graph, "l0h3")]
    print(f"received (packets, CE): ECT senders {ect}, not-ECT {plain}")
    assert [n for n, _ in ect] == [40, 40] and plain[0] == 40
    assert plain[1] == 0
    marked = sum(ce for _, ce in ect)
    # 120 packets at once into a queue that drains one per packet time: most wait
    assert 10 < marked < 80
    assert end.marked - start.marked == marked
    assert end.ect - start.ect == 80


def test_a_rate_change_rebuilds_the_marker_for_the_new_rate():
    graph = topologies.build("leaf-spine")
    with Emulation(graph, EmulationOptions()) as emu:
        queue_pkts = emu.options.queue_pkts
        emu.links.set_rate("l0h0", "l0", 1.0)
        emu.links.set_rate("l0", "s0", 1.0)
        new = ecn.marker_object(1.0, queue_pkts, ecn.EcnMarking()).name
        assert new in _filters(emu, "l0h0", hostconfig.ifb_name("l0h0", 0))
        assert new in _filters(emu, "l0", fg.intf_name("l0", fg.port(graph, "l0", "s0")))
        assert new not in _filters(emu, "l0h1", hostconfig.ifb_name("l0h1", 0))


@pytest.mark.parametrize("cc", ["dcqcn", "swift"])
def test_dcqcn_senders_slow_down_on_marks_and_others_are_never_marked(tmp_path: Path, cc: str):
    graph = topologies.build("leaf-spine")
    transfers = [Transfer(f"t{i}", f"l0h{i}", "l0h0", 600_000) for i in (1, 2, 3)]
    transport = TransportSpec("roce", cc=cc)
    # jumbo frames from ovs-vswitchd hold only their Ethernet header in the skb's linear
    # part: the marker must pull the IP header in to mark them (it did not: no CE at all)
    with Emulation(graph, EmulationOptions(packet_bytes=transport.packet_bytes)) as emu:
        result = run_plan(emu, build_plan(emu, transfers, transport), tmp_path)
    assert result.complete, result.errors
    rows = result.transfer_rows()
    ce = sum(r["recv_ce_packets"] for r in rows)
    cnps_sent = sum(r["recv_cnps_sent"] for r in rows)
    cnps_received = sum(r["send_cnps_received"] for r in rows)
    print(f"{cc}: {ce} CE-marked packets, {cnps_sent} CNPs sent, {cnps_received} received")
    if cc == "dcqcn":
        # three senders at line rate into one link: its queue passes the threshold, and
        # full-size packets are marked, not only each message's short (linear) last one
        # (about 70 of 441 packets are marked; at most 3 were when full ones could not be)
        assert ce >= 10 and 0 < cnps_received <= cnps_sent
        assert all(r["send_rate_final_mbps"] is not None for r in rows)
    else:
        assert ce == cnps_sent == cnps_received == 0  # not ECN-capable: never marked
