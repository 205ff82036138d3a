"""Real fabrics: bring-up, ECMP reachability and spreading, teardown hygiene."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import topologies
from fabric.emulation import Emulation, EmulationOptions, ovs, runstate
from fabric.host import system
from fabric.emulation.reachability import check_all_pairs
from fabric.model import graph as fg
from tests.integration.helpers import port_tx_packets

ROOT = Path(__file__).resolve().parents[2]
FABRIC = [sys.executable, "-m", "fabric.cli"]


@pytest.mark.parametrize("spec", sorted(topologies.BUILDERS))
def test_default_instance_is_fully_reachable_with_ecmp(spec: str) -> None:
    graph = topologies.build(spec)
    emu = Emulation(graph, EmulationOptions(policy="ecmp"))
    with emu:
        report = check_all_pairs(graph, emu.host)
        assert report.ok, f"unreachable pairs: {report.failed[:10]}"
        if emu.report.datapath == "user":  # forwarding never waits behind the agents
            assert os.sched_getscheduler(ovs.vswitchd_pid()) == \
                os.SCHED_FIFO | os.SCHED_RESET_ON_FORK
            assert not any("real-time" in w for w in emu.report.warnings)
            if (os.cpu_count() or 1) >= 2:  # ... and is never throttled for a second's rest
                assert system.read_sysctl(ovs.RT_RUNTIME_SYSCTL) == "-1"
        assert report.pairs == sum(len(v) for v in __import__(
            "fabric.emulation.reachability", fromlist=["targets"]).targets(graph).values())
    assert emu.leftovers() == []


RAIL_UNIT_64 = "rail-clos,servers=16,gpus=4,servers_per_leaf=4,spines=4"


def test_rail_optimised_unit_of_64_endpoints_is_fully_reachable() -> None:
    # the size researchers ask for: 64 NICs, 20 switches, 192 switch ports
    graph = topologies.build(RAIL_UNIT_64)
    assert len(fg.endpoints(graph)) == 64
    emu = Emulation(graph, EmulationOptions(policy="ecmp"))
    with emu:
        report = check_all_pairs(graph, emu.host)
        assert report.ok, f"unreachable pairs: {report.failed[:10]}"
        assert report.pairs == 64 * 63
    assert emu.leftovers() == []


def _uplink_usage(emu: Emulation, leaf: str, flows: list[tuple[str, str, int]],
                  bytes_per_stream: str) -> dict[int, int]:
    """Run iperf3 flows (client, server, parallel streams); return uplink tx deltas."""
    graph = emu.graph
    uplinks = [fg.port(graph, leaf, n) for n in graph.neighbors(leaf)
               if graph.nodes[n]["role"] == "spine"]
    servers = []
    for _, server, _ in flows:
        servers.append(emu.host(server).popen(["iperf3", "-s", "-1", "-p", "5201"],
                                              stdout=subprocess.DEVNULL))
    time.sleep(0.5)
    before = port_tx_packets(leaf)
    clients = [emu.host(client).popen(
        ["iperf3", "-c", graph.nodes[server]["ip"], "-p", "5201", "-P", str(streams),
         "-n", bytes_per_stream], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for client, server, streams in flows]
    for proc in clients:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()
    # an iperf3 client ends once its bytes are in its socket buffer; its server ends
    # once they arrived: only then have they all crossed the uplinks
    for proc in servers:
        proc.wait(timeout=30)
    after = port_tx_packets(leaf)
    return {p: after[p] - before[p] for p in uplinks}


def test_ecmp_spreads_many_tcp_flows_and_pins_one() -> None:
    graph = topologies.build("rail-clos")
    # Rail 0: servers 0-3 sit under leaf r0l0, servers 4-7 under r0l1.
    with Emulation(graph, EmulationOptions(policy="ecmp")) as emu:
        # iperf3's -n is per client: 2 MB over 4 streams is ~360 segments a stream.
        many = _uplink_usage(emu, "r0l0", [(f"h{i}g0", f"h{i + 4}g0", 4) for i in range(4)],
                             "2M")
        one = _uplink_usage(emu, "r0l0", [("h0g0", "h4g0", 1)], "512K")
    data_threshold = 150  # packets: half a stream; iperf3's control connection sends ~20
    used_by_many = [p for p, n in many.items() if n > data_threshold]
    assert len(used_by_many) >= 3, f"16 flows used only uplinks {many}"
    used_by_one = [p for p, n in one.items() if n > data_threshold]
    assert len(used_by_one) == 1, f"one flow spread over uplinks {one}"


def test_failure_during_bring_up_leaves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = topologies.build("leaf-spine")
    emu = Emulation(graph, EmulationOptions())

    def boom(self: Emulation) -> None:
        raise RuntimeError("injected failure after the network was built")

    monkeypatch.setattr(Emulation, "_configure_hosts_and_shaping", boom)
    with pytest.raises(RuntimeError, match="injected"):
        emu.start()
    assert emu.leftovers() == []
    assert not list(runstate.RUNS_DIR.glob("*.json"))


def test_daemons_in_hosts_are_stopped_at_teardown() -> None:
    graph = topologies.build("leaf-spine")
    with Emulation(graph, EmulationOptions()) as emu:
        emu.host("l0h0").cmd("iperf3 -s -D")
        time.sleep(0.3)
        assert "iperf3" in emu.host("l0h0").cmd("ps -e -o comm")
    assert emu.leftovers() == []
    assert subprocess.run(["pgrep", "-f", "iperf3 -s -D"], capture_output=True).returncode == 1


def test_killed_run_is_cleaned_by_fabric_clean() -> None:
    script = ("import time, topologies\n"
              "from fabric.emulation import Emulation\n"
              "e = Emulation(topologies.build('leaf-spine')); e.start()\n"
              "print('up', flush=True); time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE,
                            start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == b"up"
        states = runstate.load_all()
        assert len(states) == 1
        assert ovs.tagged_bridges() == {br: states[0].run_id for br in states[0].bridges}
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert runstate.leftovers(states[0]), "a killed run should leave something to clean"
    clean = subprocess.run([*FABRIC, "clean"], cwd=ROOT, capture_output=True, text=True)
    assert clean.returncode == 0, clean.stderr
    assert "deleted" in clean.stdout
    assert runstate.leftovers(states[0]) == []


def test_bridges_of_a_run_that_left_no_state_are_cleaned_and_foreign_ones_kept() -> None:
    # what a reboot leaves: ovsdb keeps a run's bridges on disk, /run/fabric is gone
    lost, foreign = "fabtest-lost", "fabtest-own"
    wait = [] if ovs.vswitchd_pid() else ["--no-wait"]
    subprocess.run(["ovs-vsctl", *wait,
                    "--", "add-br", lost, "--", "set", "bridge", lost, "datapath_type=netdev",
                    f"external_ids:{ovs.RUN_TAG}=19700101-000000-1",
                    "--", "add-br", foreign, "--", "set", "bridge", foreign,
                    "datapath_type=netdev"], check=True, timeout=30)
    if not Path(f"/sys/class/net/{lost}").exists():  # no ovs-vswitchd: leave its tap ourselves
        subprocess.run(["ip", "tuntap", "add", "dev", lost, "mode", "tap"], check=True)
    try:
        clean = subprocess.run([*FABRIC, "clean"], cwd=ROOT, capture_output=True, text=True)
        assert clean.returncode == 0, clean.stderr
        assert f"deleted 1 bridges of runs that left no state: {lost}" in clean.stdout
        assert lost not in ovs.bridges() and foreign in ovs.bridges()
        assert not Path(f"/sys/class/net/{lost}").exists()
    finally:
        subprocess.run(["ovs-vsctl", *wait, "--", "--if-exists", "del-br", lost,
                        "--", "--if-exists", "del-br", foreign], timeout=30)
        subprocess.run(["ip", "link", "del", lost], capture_output=True)


def test_bad_spec_fails_cleanly_before_any_change() -> None:
    before = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout
    for spec, words in [("rail-clos,servers=0", "servers"), ("rail-clos,bogus=1", "bogus"),
                        ("rail-clos,servers=x", "servers")]:
        proc = subprocess.run([*FABRIC, "up", spec], cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0] and "Traceback" not in proc.stderr
    after = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout
    assert before == after
    assert not list(runstate.RUNS_DIR.glob("*.json"))


def test_unshapeable_rate_is_refused_before_any_change(tmp_path: Path) -> None:
    proc = subprocess.run([*FABRIC, "up", "fat-tree,k=8", "--host-mbps", "20"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "packet-hops/s" in proc.stderr and "Traceback" not in proc.stderr
    assert not list(runstate.RUNS_DIR.glob("*.json"))
    # an experiment refused for its rate leaves no empty results directory behind
    out = tmp_path / "refused"
    proc = subprocess.run([*FABRIC, "run", "collisions", "--quick", "--host-mbps", "500",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2
    assert "packet-hops/s" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


def test_busy_controller_port_is_refused() -> None:
    import socket

    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", 6653))
        squatter.listen()
        proc = subprocess.run([*FABRIC, "up", "leaf-spine"], cwd=ROOT, capture_output=True,
                              text=True)
    assert proc.returncode == 2 and "busy" in proc.stderr
    assert not list(runstate.RUNS_DIR.glob("*.json"))


@pytest.mark.parametrize("spec, app", [
    ("leaf-spine", f"{ROOT}/tests/data/user_apps.py:StaticEcmp"),
    ("leaf-spine", "controllers.spray:SprayApp"),
    ("leaf-spine,spines=1", "examples/ryu_learning_switch.py:LearningSwitch13"),
    ("leaf-spine", "examples/flowlet_switching.py:FlowletSwitching")])
def test_your_own_controller_app_routes_the_fabric(spec: str, app: str) -> None:
    """A plain os-ken app (readiness: every switch connected), a PolicyApp subclass
    (readiness from its status file), a classic Ryu app speaking OpenFlow 1.3 (on a
    loop-free fabric) and the flowlet example (OpenFlow 1.3, reactive on the multipath
    hops) each route every pair under `fabric up`."""
    proc = subprocess.run([*FABRIC, "up", spec, "--controller-app", app], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "reachability: 240/240" in proc.stdout and "verified clean" in proc.stdout


def test_a_remote_controller_already_running_routes_the_fabric() -> None:
    controller = subprocess.Popen([sys.executable, "-m", "controllers", "ecmp", "--topo",
                                   "leaf-spine", "--port", "6701"], cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while subprocess.run(["ss", "-Htln", "sport = :6701"], capture_output=True,
                             text=True).stdout.strip() == "":
            assert time.monotonic() < deadline, "the controller did not start listening"
            time.sleep(0.1)
        proc = subprocess.run([*FABRIC, "up", "leaf-spine", "--controller",
                               "remote:127.0.0.1:6701"], cwd=ROOT, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert "reachability: 240/240" in proc.stdout and "verified clean" in proc.stdout
        assert controller.poll() is None, "the user's controller is not ours to stop"
    finally:
        controller.terminate()
        controller.wait(timeout=10)


def test_a_remote_controller_that_is_not_there_is_refused_before_any_change() -> None:
    proc = subprocess.run([*FABRIC, "up", "leaf-spine", "--controller", "remote:127.0.0.1:6702"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "no controller listens" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not list(runstate.RUNS_DIR.glob("*.json"))
