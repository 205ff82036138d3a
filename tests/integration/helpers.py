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
