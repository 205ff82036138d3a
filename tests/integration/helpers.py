"""Shared helpers for integration tests."""

from __future__ import annotations

import re
import subprocess


def port_tx_packets(switch: str) -> dict[int, int]:
    """Return ``{port: tx packets}`` from ``ovs-ofctl dump-ports``."""
    out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow15", "dump-ports", switch],
                         capture_output=True, text=True, check=True).stdout
    counts = {}
    for block in re.split(r"\n\s*port\s+", out)[1:]:
        number = block.split(":", 1)[0].strip()
        if not number.isdigit():
            continue
        tx = re.search(r"tx pkts=(\d+)", block)
        counts[int(number)] = int(tx.group(1)) if tx else 0
    return counts


def group_weights(switch: str) -> dict[int, list[int]]:
    """Return ``{group_id: [bucket weights]}`` from OpenFlow 1.5 ``dump-groups``."""
    out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow15", "dump-groups", switch],
                         capture_output=True, text=True, check=True).stdout
    groups = {}
    for line in out.splitlines():
        found = re.search(r"group_id=(\d+)", line)
        if found:
            buckets = line.split("bucket=")[1:]
            groups[int(found.group(1))] = [
                int(m.group(1)) if (m := re.search(r"weight:(\d+)", b)) else 100
                for b in buckets]
    return groups


# Sends UDP datagrams round-robin from many source ports (the entropy a
# spraying NIC varies per packet), paced; args: dst_ip dst_port packets
# size rate_mbps first_src_port n_ports.
SPRAY_SENDER = r"""
import socket, sys, time
dst, dport, count, size, mbps, first, nports = sys.argv[1], *map(float, sys.argv[2:])
socks = []
for p in range(int(first), int(first + nports)):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", p))
    socks.append(s)
gap = size * 8 / (mbps * 1e6)
payload = bytes(int(size))
start = time.monotonic()
for i in range(int(count)):
    socks[i % len(socks)].sendto(payload, (dst, int(dport)))
    delay = start + (i + 1) * gap - time.monotonic()
    if delay > 0:
        time.sleep(delay)
"""

# Counts UDP datagrams until idle for 2 s; prints the count. args: port.
UDP_COUNTER = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.settimeout(5)
n = 0
try:
    while True:
        s.recv(65535)
        n += 1
        s.settimeout(2)
except socket.timeout:
    pass
print(n)
"""
