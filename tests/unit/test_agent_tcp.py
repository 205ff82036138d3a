"""The TCP transport of the host agent: tcp_info parsing, framing, and real
agents on loopback (exact bytes, parts over N connections, FIFO reuse)."""

from __future__ import annotations

import random
import socket
import struct
import time
from pathlib import Path

from fabric.agent.local.processes import loopback_hosts, run_plan
from fabric.agent.tcp import framing
from fabric.agent.tcp.tcpinfo import SIZE, U32_FIELDS, parse_tcp_info, tcp_info
from fabric.traffic.model import (Plan, Transfer, TransportSpec, source_ports,
                                  tcp_connection_keys)


def _row(run, transfer_id: str, role: str) -> dict:
    assert run.result is not None, run.stderr
    return next(r for r in run.result["transfers"] if r["id"] == transfer_id
                and r["role"] == role)


def test_tcp_info_layout():
    values = list(range(1000, 1000 + len(U32_FIELDS)))
    raw = bytes([1, 0, 2, 0, 0, 7, 0x77, 0]) + struct.pack(f"={len(values)}I", *values)
    raw += b"\xff" * 128  # newer kernels append fields we ignore
    info = parse_tcp_info(raw)
    assert SIZE == 104
    assert info["state"] == 1 and info["retransmits"] == 2 and info["options"] == 7
    assert info["rto"] == 1000 and info["rtt"] == 1000 + U32_FIELDS.index("rtt")
    assert info["total_retrans"] == 1000 + 23   # the 24th u32, at byte offset 100


def test_tcp_info_of_a_live_connection():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    try:
        client.sendall(b"x" * 10000)
        peer.recv(10000)
        info = tcp_info(client)
        assert info is not None
        assert info["state"] == 1                  # TCP_ESTABLISHED
        assert info["snd_mss"] > 0 and info["snd_cwnd"] > 0
        assert info["total_retrans"] == 0
    finally:
        for sock in (client, peer, server):
            sock.close()


def test_frames_parse_across_arbitrary_chunk_boundaries():
    stream = (framing.encode(framing.DATA, "t/é", 3, 5000) + bytes(5000)
              + framing.encode(framing.DONE, "x", 0, 77)
              + framing.encode(framing.DATA, "y", 1, 0))
    rng = random.Random(4)
    for _ in range(20):
        reader, pos, events = framing.FrameReader(), 0, []
        while pos < len(stream):
            step = rng.randint(1, 700)
            events += reader.feed(memoryview(stream)[pos:pos + step])
            pos += step
        headers = [v for k, v in events if k == "header"]
        ends = [v for k, v in events if k == "end"]
        assert [(h.kind, h.transfer_id, h.part, h.length) for h in headers] == [
            (framing.DATA, "t/é", 3, 5000), (framing.DONE, "x", 0, 77),
            (framing.DATA, "y", 1, 0)]
        assert ends == headers                       # each frame ends with its own header
        assert sum(v for k, v in events if k == "payload") == 5000


def test_split_parts_is_even_and_exact():
    assert framing.split_parts(10, 4) == [3, 3, 2, 2]
    assert framing.split_parts(2, 4) == [1, 1, 0, 0]
    assert sum(framing.split_parts(1_000_003, 7)) == 1_000_003


def test_tcp_single_transfer_exact_bytes(tmp_path: Path):
    hosts = loopback_hosts(["a", "b"])
    plan = Plan([Transfer("t1", "a", "b", 3_000_017, dscp=10)], hosts, TransportSpec(),
                start_at=time.time() + 0.6, deadline_s=8)
    runs = run_plan(plan, tmp_path)
    assert runs["a"].returncode == 0 and runs["b"].returncode == 0, \
        (runs["a"].result, runs["b"].stderr)
    sent, got = _row(runs["a"], "t1", "send"), _row(runs["b"], "t1", "recv")
    assert sent["bytes"] == got["bytes"] == 3_000_017
    assert sent["error"] is None and got["error"] is None
    assert sent["start"] >= plan.start_at
    assert sent["start"] <= got["start"] <= got["end"] <= sent["end"]
    assert sent["peer"] == "b" and got["peer"] == "a"
    assert sent["src_ip"] == hosts["a"][0].split("/")[0]
    # loopback may still retransmit (tail loss probes under CPU contention)
    assert sent["retransmits"] >= 0 and sent["rtt_us"] is not None
    assert all(p["mss"] > 0 for p in sent["parts"])  # the segment size it sent
    for result in (runs["a"].result, runs["b"].result):
        assert set(result["netstat"]) == {"TCPTimeouts", "TCPLossProbes", "TCPSackRecovery",
                                          "TCPLostRetransmit", "RetransSegs", "RcvbufErrors",
                                          "SndbufErrors"}
        assert result["errors"] == [] and result["finished_at"] >= result["started_at"]


def test_tcp_splits_over_four_connections_and_reuses_them_in_order(tmp_path: Path):
    hosts = loopback_hosts(["a", "b"])
    transfers = [Transfer("big", "a", "b", 1_000_003), Transfer("next", "a", "b", 400_000),
                 Transfer("tiny", "a", "b", 2)]
    plan = Plan(transfers, hosts, TransportSpec(connections=4),
                start_at=time.time() + 0.6, deadline_s=8)
    runs = run_plan(plan, tmp_path)
    assert runs["a"].returncode == 0 and runs["b"].returncode == 0, runs["a"].result
    big, nxt = _row(runs["a"], "big", "send"), _row(runs["a"], "next", "send")
    assert [p["length"] for p in big["parts"]] == [250001, 250001, 250001, 250000]
    assert [p["bytes"] for p in big["parts"]] == [250001, 250001, 250001, 250000]
    ports = [p["local_port"] for p in big["parts"]]
    assert len(set(ports)) == 4                                  # four connections
    planned = source_ports(plan)["a"]                            # seeded, reproducible
    assert ports == [planned[key][0] for key in tcp_connection_keys(plan, transfers[0])]
    assert [p["local_port"] for p in nxt["parts"]] == ports      # persistent, same order
    for first, second in zip(big["parts"], nxt["parts"]):
        assert second["start"] >= first["start"]                 # FIFO per connection
    got = _row(runs["b"], "big", "recv")
    assert got["bytes"] == 1_000_003 and len({p["peer_port"] for p in got["parts"]}) == 4
    tiny = _row(runs["a"], "tiny", "send")
    assert tiny["bytes"] == 2 and len(tiny["parts"]) == 2        # empty parts are not sent
    assert _row(runs["b"], "tiny", "recv")["bytes"] == 2
