"""Every subcommand with wrong values of each of its options.

Each case runs the real command line in a fresh directory and must end with a
non-zero exit and one line on stderr that names what was wrong, with no
traceback, and without changing anything: no bridge, interface, namespace,
process, listener, sysctl or undo log, and no file anywhere in its directory.
As root these commands would otherwise build fabrics, so a case that is
accepted by mistake shows up as a changed system, not only as a wrong exit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import system_state

ROOT = Path(__file__).resolve().parents[2]

# (argv, what the one-line message must name); "{d}" is the case's own directory,
# which holds lanes.json (bad lanes), bad.json (not JSON), full/ (a directory with a
# file), empty/ (an empty directory) and nosummary/ (a directory without summary.json).
CASES = [
    # fabric itself
    ([], "command"),
    (["nosuch"], "nosuch"),
    (["topo", "--nosuch"], "--nosuch"),
    # topo
    (["topo", "nosuch"], "nosuch"),
    (["topo", "rail-clos,servers=0"], "servers"),
    (["topo", "rail-clos,servers=abc"], "servers"),
    (["topo", "rail-clos,bogus=1"], "bogus"),
    (["topo", "fat-tree,k=3"], "k must be even"),
    (["topo", "leaf-spine,oversub=0"], "oversub"),
    (["topo", "two-zone,interzone_links=9"], "interzone_links"),
    (["topo", "rail-clos", "--png", "/nonexistent/dir/x.png"], "--png"),
    (["topo", "rail-clos", "--png", "{d}/x.txt"], "--png"),
    (["topo", "rail-clos", "--png", "{d}/full"], "--png"),
    # up
    (["up", "--queue-pkts", "0"], "--queue-pkts"),
    (["up", "--queue-pkts", "-5"], "--queue-pkts"),
    (["up", "--queue-pkts", "abc"], "--queue-pkts"),
    (["up", "--queue-pkts", "1000001"], "--queue-pkts"),
    (["up", "--port", "70000"], "--port"),
    (["up", "--controller-app", "nosuch"], "--controller-app"),
    (["up", "--controller", "remote:10.1.2.3:6653"], "loopback"),
    (["up", "--controller", "remote:localhost:6653"], "--controller"),
    (["up", "--controller", "remote:127.0.0.1:0"], "--controller"),
    (["up", "--controller", "127.0.0.1:6653"], "remote:HOST:PORT"),
    (["up", "--controller", "remote:127.0.0.1:1", "--controller-app", "controllers.ecmp:EcmpApp"],
     "not allowed"),
    (["traffic", "--controller", "remote:::1:6653"], "--controller"),
    (["up", "--controller-app", "fabric.routing.probes:Nope"], "has no Nope"),
    (["up", "--controller-app", "fabric.routing.probes:ProbeRounds"], "os-ken app"),
    (["up", "--controller-app", "{d}/lanes.json:App"], "--controller-app"),
    (["up", "--port", "0"], "--port"),
    (["up", "--port", "-1"], "--port"),
    (["up", "--port", "http"], "--port"),
    (["up", "--host-mbps", "0"], "--host-mbps"),
    (["up", "--host-mbps", "-3"], "--host-mbps"),
    (["up", "--host-mbps", "nan"], "--host-mbps"),
    (["up", "--host-mbps", "inf"], "--host-mbps"),
    (["up", "--host-mbps", "fast"], "--host-mbps"),
    (["up", "--host-mbps", "100000"], "Mbit/s"),
    (["up", "--routing", "nosuch"], "--routing"),
    (["up", "--datapath", "nosuch"], "--datapath"),
    (["up", "--lanes", "/nonexistent.json"], "--lanes"),
    (["up", "--lanes", "{d}/bad.json"], "lanes"),
    (["up", "--lanes", "{d}/lanes.json"], "share"),
    (["up", "--isolation", "--lanes", "{d}/lanes.json"], "--isolation"),
    (["up", "nosuch"], "nosuch"),
    (["up", "rail-clos,gpus=0"], "gpus"),
    (["up", "--cli=yes"], "--cli"),
    (["up", "--tcp-cc", "nosuch"], "nosuch"),
    (["up", "--tcp-cc", "Bad!"], "--tcp-cc"),
    (["up", "--flow-control", "lossless"], "--flow-control"),
    # traffic
    (["traffic", "--size", "0"], "--size"),
    (["traffic", "--size", "-1"], "--size"),
    (["traffic", "--size", "1.5"], "--size"),
    (["traffic", "--ranks", "1000"], "ranks"),
    (["traffic", "--ranks", "1"], "--ranks"),
    (["traffic", "--ranks", "0"], "--ranks"),
    (["traffic", "--pattern", "striped-read", "--servers", "0"], "--servers"),
    (["traffic", "--pattern", "striped-read", "--servers", "1000"], "servers"),
    (["traffic", "--pattern", "checkpoint-write", "--clients", "1000"], "clients"),
    (["traffic", "--admission", "0"], "--admission"),
    (["traffic", "--admission", "-2"], "--admission"),
    (["traffic", "--chunks", "0"], "--chunks"),
    (["traffic", "--channels", "0"], "--channels"),
    (["traffic", "--slots", "0"], "--slots"),
    (["traffic", "--clients", "0"], "--clients"),
    (["traffic", "--rounds", "0"], "--rounds"),
    (["traffic", "--connections", "0"], "--connections"),
    (["traffic", "--deadline", "0"], "--deadline"),
    (["traffic", "--deadline", "-1"], "--deadline"),
    (["traffic", "--rto-min-ms", "1"], "--rto-min-ms"),
    (["traffic", "--rto-min-ms", "0"], "--rto-min-ms"),
    (["traffic", "--seed", "-1"], "--seed"),
    (["traffic", "--pattern", "nosuch"], "--pattern"),
    (["traffic", "--transport", "nosuch"], "--transport"),
    (["traffic", "--entropy", "nosuch"], "--entropy"),
    (["traffic", "--entropy", "packet"], "--entropy"),
    (["traffic", "--transport", "roce", "--connections", "2"], "--connections"),
    (["traffic", "--format", "xml"], "--format"),
    (["traffic", "--cc", "nosuch"], "--cc"),
    (["traffic", "--cc", "loss"], "--cc"),
    (["run", "collisions", "--cc", "nosuch", "--out", "{d}/out"], "--cc"),
    (["traffic", "--placement", "nosuch"], "--placement"),
    (["traffic", "--keep", "{d}/full"], "--keep"),
    (["traffic", "--port", "70000"], "--port"),
    (["traffic", "--controller-app", "{d}/nosuch.py:App"], "--controller-app"),
    (["traffic", "--pcap-at", "h0g0"], "--pcap"),
    (["traffic", "--pcap-packets", "5"], "--pcap"),
    (["traffic", "--pcap", "{d}/pc", "--pcap-at", "nosuch"], "--pcap-at"),
    (["traffic", "--pcap", "{d}/pc", "--pcap-at", "r0l0-r0l1"], "--pcap-at"),
    (["traffic", "--pcap", "{d}/pc", "--pcap-packets", "0"], "--pcap-packets"),
    (["traffic", "--pcap", "{d}/full"], "--pcap"),
    (["traffic", "--queue-pkts", "0"], "--queue-pkts"),
    (["traffic", "fat-tree,k=5"], "k must be even"),
    (["traffic", "--flow-control", "pause"], "--flow-control"),
    # run
    (["run", "collisions", "--seeds", "0", "--out", "{d}/out"], "--seeds"),
    (["run", "collisions", "--policies", "ecmp,nosuch", "--out", "{d}/out"], "--policies"),
    (["run", "collisions", "--policies", "static,static", "--out", "{d}/out"], "--policies"),
    (["run", "scaling", "--policies", "", "--out", "{d}/out"], "--policies"),
    (["run", "collisions", "--backend", "ns2", "--out", "{d}/out"], "--backend"),
    (["run", "scaling", "--backend", "ns3", "--topo", "fat-tree,k=3", "--out", "{d}/out"],
     "k must be even"),
    (["run", "scaling", "--backend", "ns3", "--cc", "dcqcn", "--out", "{d}/out"],
     "ECN marking"),
    (["traffic", "--backend", "ns3"], "--transport roce"),
    (["traffic", "--backend", "ns4", "--transport", "roce"], "--backend"),
    (["traffic", "--backend", "ns3", "--transport", "roce", "--cc", "dcqcn"], "ECN marking"),
    (["traffic", "--backend", "ns3", "--transport", "roce", "--pcap", "{d}/pc"],
     "--pcap: not modelled"),
    (["traffic", "--backend", "ns3", "--transport", "roce", "--isolation"],
     "--isolation: not modelled"),
    (["traffic", "--backend", "ns3", "--transport", "roce", "--flow-control", "pfc"],
     "--flow-control: not modelled"),
    (["run", "incast", "--backend", "ns3", "--out", "{d}/out"], "incast runs on the emulator"),
    (["run", "collisions", "--backend", "ns3", "--flow-control", "pfc", "--out", "{d}/out"],
     "--flow-control: not modelled by --backend ns3"),
    (["run", "collisions", "--backend", "ns3", "--preset", "rsc", "--out", "{d}/out"],
     "--preset: not modelled"),
    (["run", "collisions", "--backend", "ns3", "--pcap", "{d}/pc", "--out", "{d}/out"],
     "--pcap: not modelled"),
    (["run", "collisions", "--backend", "ns3", "--controller-app", "controllers.spray:SprayApp",
      "--out", "{d}/out"], "--controller-app"),
    (["run", "collisions", "--backend", "ns3", "--cc", "dcqcn", "--out", "{d}/out"],
     "dcqcn needs ECN marking"),
    (["run", "collisions", "--attempts", "0", "--out", "{d}/out"], "--attempts"),
    (["run", "incast", "--attempts", "11", "--out", "{d}/out"], "--attempts"),
    (["run", "collisions", "--controller-app", "nosuch", "--out", "{d}/out"],
     "--controller-app"),
    (["run", "incast", "--controller-app", "controllers.ecmp:EcmpApp", "--out", "{d}/out"],
     "unrecognized arguments: --controller-app"),
    (["run", "isolation", "--cc", "dcqcn", "--out", "{d}/out"], "unrecognized arguments: --cc"),
    (["run", "collisions", "--app-entropy", "packet", "--out", "{d}/out"], "--app-entropy"),
    (["run", "collisions", "--controller-app", "controllers.spray:SprayApp", "--app-entropy",
      "spray", "--out", "{d}/out"], "--app-entropy"),
    (["run", "zones", "--transport", "tcp", "--cc", "dcqcn", "--out", "{d}/out"],
     "--cc: applies to the roce transport only"),
    (["run", "placement", "--transport", "tcp", "--roce-mtu", "1024", "--out", "{d}/out"],
     "--roce-mtu: applies to the roce transport only"),
    (["run", "placement", "--transport", "udp", "--out", "{d}/out"], "--transport"),
    (["run", "zones", "--spray-entropy", "recycle", "--out", "{d}/out"],
     "unrecognized arguments: --spray-entropy"),
    (["run", "collisions", "--spray-entropy", "flow", "--out", "{d}/out"], "--spray-entropy"),
    (["traffic", "--entropy", "sometimes"], "--entropy"),
    (["run", "zones", "--pcap-at", "h0", "--out", "{d}/out"], "--pcap"),
    (["run", "zones", "--pcap-packets", "9", "--out", "{d}/out"], "--pcap"),
    (["run", "zones", "--pcap", "{d}/pc", "--pcap-at", "nosuch", "--out", "{d}/out"],
     "--pcap-at"),
    # a full collisions run also brings up a fat-tree, which has no r0h0
    (["run", "collisions", "--pcap", "{d}/pc", "--pcap-at", "h0g0", "--out", "{d}/out"],
     "on fat-tree"),
    (["run", "zones", "--pcap", "{d}/out", "--out", "{d}/out"], "apart from --out"),
    (["run", "zones", "--pcap", "{d}/full", "--out", "{d}/out"], "--pcap"),
    (["run", "collisions", "--seeds", "-3", "--out", "{d}/out"], "--seeds"),
    (["run", "collisions", "--seeds", "x", "--out", "{d}/out"], "--seeds"),
    (["run", "collisions", "--seeds", "100000", "--out", "{d}/out"], "--seeds"),
    (["run", "nosuch", "--out", "{d}/out"], "nosuch"),
    (["run", "collisions"], "--out"),
    (["run", "collisions", "--out", "{d}/full"], "--out"),
    (["run", "collisions", "--out", "/proc/version/out"], "--out"),
    (["run", "collisions", "--host-mbps", "0", "--out", "{d}/out"], "--host-mbps"),
    (["run", "collisions", "--topo", "nosuch", "--out", "{d}/out"], "--topo"),
    (["run", "collisions", "--topo", "rail-clos,servers=0", "--out", "{d}/out"], "servers"),
    (["run", "zones", "--topo", "rail-clos", "--out", "{d}/out"], "--topo"),
    (["run", "placement", "--topo", "fat-tree", "--out", "{d}/out"], "--topo"),
    (["run", "isolation", "--topo", "leaf-spine,leaves=1,hosts_per_leaf=2", "--out", "{d}/out"],
     "--topo"),
    (["run", "incast", "--topo", "rail-clos,servers=2", "--out", "{d}/out"], "--topo"),
    (["run", "incast", "--flow-control", "lossless", "--out", "{d}/out"], "--flow-control"),
    # a 41-port leaf: more ports than the flow-control accounting holds
    (["run", "collisions", "--flow-control", "pfc", "--topo",
      "leaf-spine,leaves=2,spines=1,hosts_per_leaf=40", "--out", "{d}/out"],
     "--flow-control: on leaf-spine,leaves=2,spines=1,hosts_per_leaf=40"),
    (["run", "lossless", "--flow-control", "none", "--out", "{d}/out"],
     "--flow-control: lossless sets each fabric's flow control"),
    (["run", "incast", "--flow-control", "pfc", "--out", "{d}/out"],
     "--flow-control: incast sets each fabric's flow control"),
    (["run", "isolation", "--preset", "rsc", "--out", "{d}/out"],
     "--preset: isolation sets each fabric's flow control"),
    (["run", "lossless", "--topo", "leaf-spine,leaves=2", "--out", "{d}/out"],
     "--topo: lossless needs 3 leaves"),
    (["run", "lossless", "--cc", "none", "--out", "{d}/out"], "--cc"),
    (["run", "lossless", "--preset", "nosuch", "--out", "{d}/out"], "--preset"),
    (["run", "lossless", "--preset", "fire-flyer", "--out", "{d}/out"],
     "--preset: lossless sets each fabric's"),
    # plot
    (["plot", "/nonexistent"], "dir"),
    (["plot", "{d}/nosummary"], "summary.json"),
    (["plot"], "dir"),
    # controller
    (["controller", "nosuch"], "policy"),
    (["controller", "--app", "nosuch"], "--app"),
    (["controller", "--app", "nosuch.module:App"], "--app"),
    (["controller", "--app", "fabric.routing.probes:ProbeRounds"], "os-ken app"),
    (["controller", "ecmp", "--app", "fabric.routing.probes:ProbeRounds"], "one of the two"),
    (["controller"], "policy"),
    (["controller", "ecmp", "--port", "70000"], "--port"),
    (["controller", "ecmp", "--port", "0"], "--port"),
    (["controller", "ecmp", "--host", "not-an-ip"], "--host"),
    (["controller", "ecmp", "--topo", "nosuch"], "nosuch"),
    (["controller", "ecmp", "--config", "/nonexistent.json"], "--config"),
    (["controller", "ecmp", "--config", "{d}/bad.json"], "config"),
    (["controller", "ecmp", "--status-file", "/nonexistent/dir/s.json"], "--status-file"),
    # clean
    (["clean", "extra"], "extra"),
]


# Checked only after the root check (the congestion-control module is loaded as root): run
# without root, these cases must end at that check, still in one line that changes nothing.
AFTER_ROOT_CHECK = {("up", "--tcp-cc", "nosuch")}
ROOT_MESSAGE = "needs root: run with sudo"


def _expected(argv: list[str], names: str) -> str:
    """What the one line must name: ``names``, or the root check for a case checked as root
    only when this test runs without root."""
    if os.geteuid() != 0 and tuple(argv) in AFTER_ROOT_CHECK:
        return ROOT_MESSAGE
    return names


def _case_id(case: tuple[list[str], str]) -> str:
    return " ".join(case[0]) or "(none)"


@pytest.fixture
def case_dir(tmp_path: Path) -> Path:
    (tmp_path / "lanes.json").write_text(json.dumps(
        {"lanes": [{"name": "a", "dscp": [26], "share": 1.5, "prio": 0}]}))
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "old-result.csv").write_text("x\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "nosummary").mkdir()
    return tmp_path


def _listing(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


def test_there_are_enough_cases():
    assert len(CASES) >= 60
    assert {argv[0] for argv, _ in CASES if argv} >= {"topo", "up", "traffic", "run", "plot",
                                                     "controller", "clean"}


@pytest.mark.parametrize("argv, names", CASES, ids=[_case_id(c) for c in CASES])
def test_bad_input_is_one_line_and_changes_nothing(argv, names, case_dir):
    names = _expected(argv, names)
    argv = [a.replace("{d}", str(case_dir)) for a in argv]
    files = _listing(case_dir)
    before = system_state.snapshot()
    proc = subprocess.run([sys.executable, "-m", "fabric.cli", *argv], cwd=case_dir,
                          capture_output=True, text=True, timeout=60)
    after = system_state.snapshot()
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0, f"accepted: {proc.stdout[-500:]} {proc.stderr[-500:]}"
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("fabric"), lines[0]
    assert names in lines[0], lines[0]
    assert not system_state.differences(before, after)
    assert _listing(case_dir) == files


@pytest.mark.parametrize("argv", [["run", "collisions", "--quick", "--out", "{d}/r"], ["up"]],
                         ids=["run", "up"])
def test_a_bad_machine_speed_in_the_environment_is_one_line_and_changes_nothing(
        argv, case_dir, monkeypatch):
    monkeypatch.setenv("FABRIC_MACHINE_SPEED", "fast")
    argv = [a.replace("{d}", str(case_dir)) for a in argv]
    files = _listing(case_dir)
    before = system_state.snapshot()
    proc = subprocess.run([sys.executable, "-m", "fabric.cli", *argv], cwd=case_dir,
                          capture_output=True, text=True, timeout=60)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    # `fabric run` checks root first, `fabric up` the machine speed first
    names = ROOT_MESSAGE if os.geteuid() != 0 and argv[0] == "run" else "FABRIC_MACHINE_SPEED"
    assert len(lines) == 1 and names in lines[0], proc.stderr
    assert not system_state.differences(before, system_state.snapshot())
    assert _listing(case_dir) == files
