"""One agent process serving several hosts: one event loop, per-host results, the
launcher's split of endpoints over processes (no root: loopback addresses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fabric.agent.local.processes import loopback_hosts
from fabric.agent.netns import Namespace
from fabric.agent.runner import per_process
from fabric.emulation.traffic import agent_groups, agent_sockets, place_agent
from fabric.traffic.model import Plan, Transfer, TransportSpec


def _agent(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fabric.agent", "--plan",
                           str(tmp_path / "plan.json"), *args], capture_output=True, text=True,
                          timeout=60)


def test_one_process_serves_several_hosts_and_reports_each(tmp_path: Path) -> None:
    hosts = loopback_hosts(["a", "b", "c"])
    plan = Plan([Transfer("ab", "a", "b", 400_000), Transfer("ba", "b", "a", 300_000)], hosts,
                TransportSpec(kind="roce", entropy="packet", rate_mbps=20),
                start_at=time.time() + 0.5, deadline_s=20)
    plan.save(tmp_path / "plan.json")
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    done = _agent(tmp_path, "--out", str(tmp_path / "{host}.json"), "--host", "a", "--host",
                  "b", "--host", "c", "--netns-pid", f"c={pid_max + 1}")
    assert done.returncode == 1, done.stderr  # c could not run
    results = {h: json.loads((tmp_path / f"{h}.json").read_text()) for h in "abc"}
    assert results["a"]["ok"] and results["b"]["ok"], results
    rows = {(r["id"], r["role"]): r for h in "ab" for r in results[h]["transfers"]}
    assert rows[("ab", "recv")]["bytes"] == 400_000 and rows[("ba", "recv")]["bytes"] == 300_000
    # c never opened a socket outside the namespace it was given
    assert not results["c"]["ok"]
    assert "cannot enter the network namespace" in results["c"]["errors"][0]
    assert {r["pid"] for r in results.values()} == {results["a"]["pid"]}
    assert {r["process_hosts"] for r in results.values()} == {3}
    assert per_process(results.values()) == [results["a"]]


@pytest.mark.parametrize("args, message", [
    (["--host", "a", "--host", "a", "--out", "x-{host}"], "each host once"),
    (["--host", "a", "--host", "b", "--out", "x.json"], "must contain {host}"),
    (["--host", "a", "--out", "x.json", "--netns-pid", "b=5"], "expected HOST=PID"),
    (["--host", "a", "--out", "x.json", "--netns-pid", "a=0"], "expected HOST=PID"),
    (["--host", "a", "--out", "x.json", "--netns-pid", "a=me"], "expected HOST=PID"),
])
def test_bad_arguments_are_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    Plan([], loopback_hosts(["a", "b"])).save(tmp_path / "plan.json")
    done = _agent(tmp_path, *args)
    assert done.returncode == 2 and message in done.stderr


@pytest.mark.parametrize("pid", [0, -4, True, "12"])
def test_a_namespace_needs_a_process_id(pid) -> None:
    with pytest.raises(ValueError, match="positive integer"):
        Namespace(pid)


def test_per_process_counts_each_process_once() -> None:
    results = [{"pid": 7, "cpu_s": 1.0}, {"pid": 7, "cpu_s": 1.0}, {"pid": 8, "cpu_s": 2.0},
               {"cpu_s": 0.5}, {"cpu_s": 0.5}]
    assert sum(r["cpu_s"] for r in per_process(results)) == 4.0


def test_endpoints_share_processes_within_the_file_limit() -> None:
    endpoints = ["a", "b", "c", "d", "e"]
    assert agent_groups(endpoints, 1) == [endpoints]
    assert agent_groups(endpoints, 2) == [["a", "c", "e"], ["b", "d"]]
    assert agent_groups(["a"], 4) == [["a"]]
    assert agent_groups([], 2) == []
    sockets = {"a": 300, "b": 300, "c": 300, "d": 100, "e": 100}
    # 1100 sockets do not fit one process allowed 664 (64 kept for the interpreter)
    groups = agent_groups(endpoints, 1, sockets, fd_limit=664)
    assert groups == [["a", "c"], ["b", "d", "e"]]
    assert agent_groups(endpoints, 1, sockets, fd_limit=10_000) == [endpoints]
    with pytest.raises(ValueError, match="a needs 300 sockets"):
        agent_groups(endpoints, 1, sockets, fd_limit=300)
    with pytest.raises(ValueError, match="at least 1"):
        agent_groups(endpoints, 0)


def test_agent_sockets_counts_listeners_and_planned_ports() -> None:
    hosts = loopback_hosts(["a", "b", "c"])
    transfers = [Transfer("ab1", "a", "b", 1), Transfer("ab2", "a", "b", 1),
                 Transfer("ac", "a", "c", 1)]
    sprayed = Plan(transfers, hosts, TransportSpec(kind="roce", entropy="packet",
                                                   entropy_ports=16))
    # two listeners each; a sprays to b and to c from one set
    assert agent_sockets(sprayed) == {"a": 2 + 16, "b": 2, "c": 2}
    two_nics = dict(hosts, a=hosts["a"] + ["127.9.9.9/8"])  # each NIC binds its own set
    assert agent_sockets(Plan(transfers, two_nics, sprayed.transport))["a"] == 4 + 2 * 16
    tcp = Plan(transfers, hosts, TransportSpec(kind="tcp", connections=2))
    # a keeps two connections to each peer, whatever the transfers; b and c accept them
    assert agent_sockets(tcp) == {"a": 2 + 4, "b": 2 + 2, "c": 2 + 2}


def test_agents_are_kept_off_the_forwarding_core() -> None:
    cpus = {max(os.sched_getaffinity(0))}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        place_agent(child.pid, cpus)
        assert os.sched_getaffinity(child.pid) == cpus
        place_agent(child.pid, None)  # anywhere: left as it is
        assert os.sched_getaffinity(child.pid) == cpus
    finally:
        child.kill()
        child.wait()
