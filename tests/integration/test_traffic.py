"""Traffic replay on real fabrics: collectives, RoCE spraying, incast."""

from __future__ import annotations

from pathlib import Path

import pytest

import topologies
from fabric.analysis.report import summarize
from fabric.emulation import Emulation, EmulationOptions
from fabric.emulation.traffic import build_plan, run_plan
from fabric.traffic.model import TCP_SEGMENT_BYTES, Transfer, TransportSpec
from fabric.traffic.patterns import PatternSpec, make_transfers


def test_ring_allreduce_puts_the_right_bytes_on_each_link(tmp_path: Path) -> None:
    graph = topologies.build("rail-clos")
    spec = PatternSpec("ring-allreduce", size_bytes=800_000, ranks=4)
    transfers, ranks = make_transfers(graph, spec)
    with Emulation(graph, EmulationOptions()) as emu:
        result = run_plan(emu, build_plan(emu, transfers, TransportSpec()), tmp_path)
        nic_classes = {rank: _nic_class_stats(emu, graph, rank) for rank in ranks}
    assert result.complete, result.errors
    totals = result.links.totals()
    per_rank = 2 * (4 - 1) / 4 * spec.size_bytes  # ring all-reduce: 2(N-1)/N * S
    for rank, (control, data) in nic_classes.items():
        # each NIC sends its ACKs and DONE frames ahead of its data, and only those
        assert data[0] >= per_rank and data[1] >= per_rank / TCP_SEGMENT_BYTES, rank
        assert control[1] >= 50 and control[0] < 100 * control[1], (rank, control)
    for rank, nxt in zip(ranks, ranks[1:] + ranks[:1]):
        sent = sum(r["bytes"] for r in result.transfer_rows() if r["src"] == rank)
        assert sent == pytest.approx(per_rank, abs=4)
        leaf = next(iter(graph.neighbors(rank)))
        # Payload plus TCP/IP/Ethernet headers and the ACKs of the traffic it receives.
        assert per_rank <= totals[(rank, leaf)] <= 1.12 * per_rank, (rank, totals[(rank, leaf)])
        assert result.transfer_rows() and all(r["path"] for r in result.transfer_rows())
    idle = [link for link, n in totals.items() if link[0] not in ranks and link[1] not in ranks]
    assert all(totals[link] < 20_000 for link in idle)
    # the links carry jumbo frames, but TCP keeps a 1500-byte MTU's segments
    assert {part["mss"] for r in result.transfer_rows() for part in r["send_parts"]} == \
        {TCP_SEGMENT_BYTES}


def test_roce_delivers_every_byte_once_when_sprayed_over_a_slow_path(tmp_path: Path) -> None:
    graph = topologies.build("rail-clos")
    transfers = [Transfer("spray", "h0g0", "h4g0", 3_000_000)]  # across the spines
    transport = TransportSpec("roce", entropy="packet", entropy_ports=64)
    with Emulation(graph, EmulationOptions(policy="spray")) as emu:
        # One of the four uplinks at a third of the rate: a packet sprayed onto it
        # takes 3x as long to serialise there as one sent next over another spine,
        # so it arrives after it. The path carries a quarter of the packets, less
        # than its capacity, so the delay is fixed rather than a growing queue.
        host_mbps = emu.report.rate_plan.host_mbps
        emu.links.set_rate("r0l0", "sp0", host_mbps / 3)
        result = run_plan(emu, build_plan(emu, transfers, transport), tmp_path)
    assert result.complete, result.errors
    (row,) = result.transfer_rows()
    assert row["recv_bytes"] == 3_000_000
    # every PSN delivered once: anything received twice is counted, never delivered
    assert row["recv_bad_packets"] == 0
    assert row["recv_packets_received"] == row["recv_packets"] + row["recv_duplicates"]
    spines = {n for n in graph.nodes if graph.nodes[n]["role"] == "spine"}
    used = {sw for link, n in result.links.totals().items() if n > 100_000
            for sw in link if sw in spines}
    assert used == spines
    assert row["recv_out_of_order"] > 0, row  # the slow path reorders by construction
    # one agent process served both hosts, each from its own namespace
    assert len({a["pid"] for a in result.agents.values()}) == 1
    assert all(a["process_hosts"] == 2 for a in result.agents.values())
    goodput = row["bytes"] * 8 / row["fct_s"] / 1e6
    print(f"sprayed roce over a slow path: {goodput:.1f} Mbit/s, "
          f"{row['recv_out_of_order']} of {row['recv_packets']} out of order, "
          f"{row.get('send_retransmitted')} retransmitted")


def test_incast_round_reports_drops_and_retransmissions_that_agree(tmp_path: Path) -> None:
    graph = topologies.build("leaf-spine")
    spec = PatternSpec("striped-read", size_bytes=8 * 64 * 1024, servers=8, rounds=1)
    transfers, participants = make_transfers(graph, spec)
    with Emulation(graph, EmulationOptions(queue_pkts=16)) as emu:
        result = run_plan(emu, build_plan(emu, transfers, TransportSpec()), tmp_path)
    assert result.complete, result.errors
    summary = summarize(result, spec, participants, emu.report.rate_plan.host_mbps)
    drops = summary["ingress_drops"]
    retrans = summary["tcp_retransmitted_segments"]
    print(f"incast 8 senders: {drops} drops at the client, {retrans} retransmitted segments, "
          f"{summary['tcp_timeouts']} timeouts, round {summary['round_p99_ms']:.0f} ms")
    assert drops > 0, "8 senders into a 16-packet buffer must overflow it"
    # Every dropped data segment is retransmitted; beyond that only what a timeout
    # resends again. Per connection up to four packets into the client carry no data
    # counted here: the handshake's last ACK and the ACK of the DONE frame (later
    # ACKs cover them) and the sender's FIN and the ACK of the client's FIN (resent,
    # if at all, after the agents have read their counters).
    unretransmitted = 4 * len(transfers) * TransportSpec().connections
    assert drops - unretransmitted <= retrans
    assert retrans <= 1.3 * drops + 10 * summary["tcp_timeouts"] + 8


def test_a_capture_of_sprayed_roce_decodes_as_rocev2(tmp_path: Path) -> None:
    import subprocess
    import sys

    from scapy.contrib.roce import BTH
    from scapy.layers.inet import UDP
    from scapy.utils import rdpcap

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "pcap"
    proc = subprocess.run([sys.executable, "-m", "fabric.cli", "traffic", "leaf-spine",
                           "--transport", "roce", "--entropy", "packet", "--size", "200000",
                           "--pcap", str(out), "--pcap-at", "l0h0", "--pcap-at", "l0-s1",
                           "--pcap-packets", "300"], cwd=root, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == ["l0-s1.pcap", "l0h0-l0.pcap"]
    for name in files:
        packets = rdpcap(str(out / name))
        assert 0 < len(packets) <= 300                    # the cap holds
        roce = [p for p in packets if p.haslayer(BTH)]
        assert roce and all(p[UDP].dport == 4791 for p in roce)
    host_side = [p for p in rdpcap(str(out / "l0h0-l0.pcap")) if p.haslayer(BTH)]
    assert len({p[UDP].sport for p in host_side}) > 10   # sprayed: many source ports


def _nic_class_stats(emu: Emulation, graph, endpoint: str) -> tuple[tuple[int, int], ...]:
    """(bytes, packets) its first NIC sent from its control class and its data class."""
    from fabric.emulation import shaping
    from fabric.model import graph as fg

    dev = fg.intf_name(endpoint, graph.nodes[endpoint]["nics"][0]["port"])
    out = emu.host(endpoint).cmd(f"tc -s class show dev {dev}")
    stats = {}
    for block in out.split("class htb ")[1:]:
        sent = block.split("Sent ")[1].split()
        stats[block.split()[0]] = (int(sent[0]), int(sent[2]))
    order = f"{shaping.ACK_FIRST_HANDLE:x}:"
    return stats[f"{order}1"], stats[f"{order}2"]


# Sends ``count`` datagrams of ``size`` bytes from port 5000 back to back (they queue in
# the NIC's egress), then one from the RoCE port (an ACK) and one more from 5000.
# args: dst_ip dst_port count size
_BURST_THEN_ACK = r"""
import socket, sys
dst, dport, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
data, ack = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2))
data.bind(("0.0.0.0", 5000))
ack.bind(("0.0.0.0", 4791))
for i in range(count):
    data.sendto(b"d%04d" % i + bytes(size), (dst, dport))
ack.sendto(b"ack", (dst, dport))
data.sendto(b"last", (dst, dport))
"""

# Prints the first bytes of every datagram on ``port``, in arrival order, until idle 2 s.
_ARRIVAL_ORDER = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.settimeout(2.0)
try:
    while True:
        print(s.recv(65536)[:5].decode())
except socket.timeout:
    pass
"""


def test_an_ack_leaves_the_nic_ahead_of_the_data_queued_there() -> None:
    """A responder's ACK is not queued behind its own NIC's data: 30 datagrams fill the
    sender's egress queue at 2 Mbit/s (about 5 ms each), the ACK sent after them
    arrives within the first few, the datagram sent after the ACK last."""
    import subprocess
    import sys
    import time

    graph = topologies.build("leaf-spine,leaves=2,spines=1,hosts_per_leaf=1")
    src, dst = sorted(n for n in graph if graph.nodes[n]["role"] == "host")
    with Emulation(graph, EmulationOptions(host_mbps=2.0)) as emu:
        receiver = emu.host(dst).popen([sys.executable, "-c", _ARRIVAL_ORDER, "9000"],
                                       stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)
        sender = emu.host(src).popen([sys.executable, "-c", _BURST_THEN_ACK,
                                      graph.nodes[dst]["ip"], "9000", "30", "1200"])
        assert sender.wait(timeout=30) == 0
        order = receiver.communicate(timeout=30)[0].split()
    assert len(order) == 32, order
    assert order.index("ack") <= 3, order
    assert order[-1] == "last", order
