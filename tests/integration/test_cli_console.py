"""The Mininet CLI under ``fabric up --cli``: the standard commands, fed on stdin, print
what Mininet users expect, on every topology (dual-homed storage nodes included)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# small fabrics of every builder; the first host and last host of each are named
TOPOLOGIES = [
    ("leaf-spine,leaves=2,spines=2,hosts_per_leaf=2", "l0h0", "l1h1", ("l0", "s0")),
    ("rail-clos,servers=2,gpus=2,servers_per_leaf=1,spines=2", "h0g0", "h1g1", ("r0l0", "sp0")),
    ("two-zone,hosts_per_leaf=1,leaves=1,spines=1,storage=1", "z0h0", "st0", ("z0l0", "z0s0")),
    ("fat-tree,k=2", "p0e0h0", "p1e0h0", ("p0e0", "p0a0")),
]


def console(spec: str, commands: list[str]) -> str:
    # Mininet prints on stderr, the CLI's prompts on stdout: one unbuffered stream keeps order
    proc = subprocess.run([sys.executable, "-m", "fabric.cli", "up", spec, "--cli"],
                          input="".join(c + "\n" for c in commands), cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=180, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "Traceback" not in proc.stdout
    return proc.stdout


@pytest.mark.parametrize("spec, first, last, link", TOPOLOGIES,
                         ids=[t[0].split(",")[0] for t in TOPOLOGIES])
def test_standard_commands_print_their_output(spec, first, last, link):
    out = console(spec, ["nodes", "net", "dump", "intfs", "ports", "links",
                         f"{first} ip -br addr", "pingall", "pingpair", "sh echo shell-ok",
                         f"py {last}.IP()", f"link {link[0]} {link[1]} down",
                         f"link {link[0]} {link[1]} up", "sh sleep 1", "pingall",
                         "dpctl dump-flows", "time sh true"])
    assert "available nodes are:" in out and first in out
    assert re.search(rf"{first} {first}-eth0:", out)                         # net
    assert re.search(rf"<Host {first}: {first}-eth0:10\.\d+\.\d+\.\d+", out)  # dump
    assert re.search(rf"{first}-eth0@\S+\s+UP\s+10\.", out)                  # host command
    assert out.count("*** Results: 0% dropped") == 3         # pingall, pingpair, pingall
    assert "shell-ok" in out and re.search(r"(^|> )10\.\d+\.\d+\.\d+$", out, re.M)  # sh, py
    assert "actions=goto_table:1" in out and "*** Elapsed time:" in out  # dpctl, time
    assert "teardown: verified clean" in out


def test_iperf_and_iperfudp_report_rates():
    out = console(TOPOLOGIES[0][0], ["iperf l0h0 l1h1", "iperfudp 1M l0h0 l1h1"])
    tcp = re.search(r"Results: \['([\d.]+) Mbits/sec', '([\d.]+) Mbits/sec'\]", out)
    udp = re.search(r"Results: \['1M', '([\d.]+) [KM]bits/sec', '([\d.]+) [KM]bits/sec'\]", out)
    assert tcp and udp, out[-2000:]
    assert float(tcp.group(1)) > 0
