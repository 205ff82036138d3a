"""Host agent life cycle: addressing, dependencies, deadlines, result format,
process hygiene. Multi-host cases run one agent process per loopback address."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fabric.agent import addressing, netstat
from fabric.agent.local.processes import launch, loopback_hosts, run_plan
from fabric.agent.runner import Agent
from fabric.traffic.model import Plan, Transfer, TransportSpec

NETSTAT = """TcpExt: SyncookiesSent TCPTimeouts TCPLossProbes TCPSackRecovery TCPLostRetransmit
TcpExt: 0 4 9 2 1
IpExt: InNoRoutes
IpExt: 0
"""
SNMP = """Ip: Forwarding DefaultTTL
Ip: 1 64
Tcp: RtoAlgorithm RtoMin RetransSegs
Tcp: 1 200 17
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors
Udp: 100 0 3 90 3 0
"""


def _row(run, transfer_id: str, role: str) -> dict:
    assert run.result is not None, run.stderr
    return next(r for r in run.result["transfers"] if r["id"] == transfer_id
                and r["role"] == role)


def test_source_address_is_longest_prefix_match():
    nics = ["10.0.0.5/8", "10.1.2.5/24", "192.168.7.5/16"]
    assert addressing.source_address(nics, "10.1.2.9") == "10.1.2.5"
    assert addressing.source_address(nics, "10.9.9.9") == "10.0.0.5"
    assert addressing.source_address(nics, "192.168.200.1") == "192.168.7.5"
    assert addressing.source_address(nics, "172.16.0.1") == "10.0.0.5"   # default: first NIC
    plan = Plan([], {"s": ["10.0.0.9/8", "10.2.0.9/16"], "c": nics})
    assert addressing.destination_address(plan, Transfer("t", "c", "s", 1)) == "10.0.0.9"
    assert addressing.destination_address(
        plan, Transfer("t", "c", "s", 1, dst_ip="10.2.0.9")) == "10.2.0.9"


def test_netstat_counters_and_delta(tmp_path: Path):
    (tmp_path / "netstat").write_text(NETSTAT)
    (tmp_path / "snmp").write_text(SNMP)
    before = netstat.read_counters(tmp_path)
    assert before == {"TCPTimeouts": 4, "TCPLossProbes": 9, "TCPSackRecovery": 2,
                      "TCPLostRetransmit": 1, "RetransSegs": 17, "RcvbufErrors": 3,
                      "SndbufErrors": 0}
    after = dict(before, RetransSegs=20, TCPTimeouts=5)
    assert netstat.delta(before, after)["RetransSegs"] == 3
    assert netstat.delta(before, after)["TCPTimeouts"] == 1
    assert set(netstat.read_counters()) == set(before)             # the real /proc/net


@pytest.mark.parametrize("kind", ["tcp", "roce"])
def test_dependency_chain_runs_in_order(tmp_path: Path, kind: str):
    hosts = loopback_hosts(["a", "b", "c"])
    transfers = [Transfer("ab", "a", "b", 200_000), Transfer("bc", "b", "c", 150_000,
                                                              after=("ab",)),
                 Transfer("ca", "c", "a", 100_000, after=("bc",)),
                 Transfer("ab2", "a", "b", 5_000, after=("ab", "ca"))]
    plan = Plan(transfers, hosts, TransportSpec(kind=kind, rate_mbps=100),
                start_at=time.time() + 0.6, deadline_s=8)
    runs = run_plan(plan, tmp_path)
    assert all(r.returncode == 0 for r in runs.values()), [r.result for r in runs.values()]
    # each dependent starts after its dependency ended, as its sender recorded both
    assert _row(runs["b"], "bc", "send")["start"] >= _row(runs["b"], "ab", "recv")["end"]
    assert _row(runs["c"], "ca", "send")["start"] >= _row(runs["c"], "bc", "recv")["end"]
    ab2 = _row(runs["a"], "ab2", "send")
    assert ab2["start"] >= _row(runs["a"], "ab", "send")["end"]
    assert ab2["start"] >= _row(runs["a"], "ca", "recv")["end"]
    assert ab2["ready"] <= ab2["start"]
    for t in transfers:
        assert _row(runs[t.dst], t.id, "recv")["bytes"] == t.bytes


@pytest.mark.parametrize("kind", ["tcp", "roce"])
def test_deadline_fails_an_impossible_transfer(tmp_path: Path, kind: str):
    hosts = loopback_hosts(["a", "b"])          # b's agent never starts
    transfers = [Transfer("t1", "a", "b", 100_000), Transfer("t2", "a", "b", 10,
                                                              after=("t1",))]
    plan = Plan(transfers, hosts, TransportSpec(kind=kind), start_at=time.time() + 0.5,
                deadline_s=1.0)
    t0 = time.time()
    runs = run_plan(plan, tmp_path, hosts=["a"], timeout_s=10)
    assert runs["a"].returncode == 1
    assert time.time() - t0 < 4.0
    result = runs["a"].result
    t1, t2 = _row(runs["a"], "t1", "send"), _row(runs["a"], "t2", "send")
    assert t1["end"] is None and "deadline" in t1["error"]
    assert t1["bytes"] == 0 and t1["expected_bytes"] == 100_000
    assert t2["end"] is None and t2["start"] is None and "waiting for t1" in t2["error"]
    assert len(result["errors"]) == 2
    assert result["finished_at"] - plan.start_at < 1.5


def test_in_process_agent_leaves_no_threads_or_sockets(tmp_path: Path):
    hosts = loopback_hosts(["a", "b"])
    plan = Plan([Transfer("t1", "a", "b", 50_000)], hosts, TransportSpec(kind="roce",
                entropy="packet", entropy_ports=8), start_at=time.time() + 0.4, deadline_s=5)
    procs = launch(plan, ["b"], tmp_path)
    try:
        threads, fds = threading.active_count(), len(os.listdir("/proc/self/fd"))
        agent = Agent(plan, "a")
        assert agent.run() == 0, agent.result()
        assert threading.active_count() == threads
        assert len(os.listdir("/proc/self/fd")) == fds
        row = agent.result()["transfers"][0]
        assert row["bytes"] == 50_000 and row["entropy_ports"] == 8
        assert procs["b"].wait(5) == 0
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stderr.close()


def test_cpu_time_before_the_traffic_is_reported_apart():
    """``cpu_s`` is the traffic's (from the start gate on), ``setup_cpu_s`` the rest:
    the interpreter, the plan and the socket pools cost more than a short run."""
    agent = Agent(Plan([], loopback_hosts(["a"]), TransportSpec(kind="roce")), "a")
    assert agent.run() == 0, agent.result()
    result = agent.result()
    assert result["setup_cpu_s"] > 0 and 0 <= result["cpu_s"] < result["setup_cpu_s"]


def test_busy_port_is_an_error_not_shared():
    hosts = loopback_hosts(["a"])
    address = hosts["a"][0].split("/")[0]
    squatter = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    squatter.bind((address, 4791))
    try:
        agent = Agent(Plan([], hosts, TransportSpec(kind="roce")), "a")
        assert agent.run() == 1
        assert any("cannot bind" in e for e in agent.result()["errors"])
    finally:
        squatter.close()


def test_unknown_host_and_bad_plan_exit_1(tmp_path: Path):
    hosts = loopback_hosts(["a", "b"])
    plan = Plan([Transfer("t", "a", "b", 1)], hosts)
    agent = Agent(plan, "nobody")
    assert agent.run() == 1 and "not in the plan" in agent.result()["errors"][0]
    (tmp_path / "plan.json").write_text("{not json")
    out = tmp_path / "r.json"
    code = subprocess.run([sys.executable, "-m", "fabric.agent", "--plan",
                           str(tmp_path / "plan.json"), "--host", "a", "--out", str(out)],
                          timeout=30).returncode
    assert code == 1 and "cannot read plan" in json.loads(out.read_text())["errors"][0]


def test_sigterm_writes_partial_result(tmp_path: Path):
    hosts = loopback_hosts(["a", "b"])
    plan = Plan([Transfer("t1", "a", "b", 10**9)], hosts, TransportSpec(kind="roce"),
                start_at=time.time() + 0.3, deadline_s=30)
    procs = launch(plan, ["a", "b"], tmp_path)
    try:
        time.sleep(1.0)
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        codes = {h: p.wait(5) for h, p in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stderr.close()
    assert codes == {"a": 1, "b": 1}
    for host, role in (("a", "send"), ("b", "recv")):
        row = json.loads((tmp_path / f"{host}.json").read_text())["transfers"][0]
        assert row["role"] == role and row["end"] is None and "signal" in row["error"]
        assert 0 < row["bytes"] < 10**9                  # progress is reported, not lost


def test_connect_timeout_fails_dependents_before_the_deadline(tmp_path: Path):
    hosts = loopback_hosts(["a", "b"])          # b's agent never starts
    transfers = [Transfer("t1", "a", "b", 1000), Transfer("t2", "a", "b", 10, after=("t1",))]
    plan = Plan(transfers, hosts, TransportSpec(kind="tcp"), start_at=time.time() + 0.5,
                deadline_s=20)
    runs = run_plan(plan, tmp_path, hosts=["a"], timeout_s=10,
                    extra_args=["--connect-timeout", "0.3"])
    assert runs["a"].returncode == 1
    t1, t2 = _row(runs["a"], "t1", "send"), _row(runs["a"], "t2", "send")
    assert "cannot connect" in t1["error"] and "ECONNREFUSED" in t1["error"]
    assert t2["error"] == "dependency t1 failed"
    assert runs["a"].result["finished_at"] - plan.start_at < 2.0   # not the 20 s deadline


def test_start_at_zero_means_now(tmp_path: Path):
    hosts = loopback_hosts(["a", "b"])
    plan = Plan([Transfer("t1", "a", "b", 10_000)], hosts, TransportSpec(), deadline_s=5)
    assert plan.start_at == 0.0
    runs = run_plan(plan, tmp_path, timeout_s=10)
    assert all(r.returncode == 0 for r in runs.values()), runs["a"].result
    result = runs["a"].result
    assert result["start_at"] >= result["started_at"] - 0.001


def test_after_start_is_checked_and_survives_the_plan_file():
    from fabric.traffic.model import ScheduleError, validate_schedule

    base = [Transfer("t0", "a", "b", 10), Transfer("back", "b", "a", 10)]
    ok = Transfer("t1", "a", "b", 10, after=("t0",), after_start=("t0", 0.5))
    validate_schedule(base + [ok], ["a", "b"])
    plan = Plan(base + [ok], {"a": ["10.0.0.1/24"], "b": ["10.0.0.2/24"]})
    assert Plan.from_json(plan.to_json()).transfers[-1].after_start == ("t0", 0.5)
    for bad, match in [(("nope", 1.0), "after_start"), (("back", 1.0), "after_start"),
                       (("t0", -1.0), "seconds"), (("t1", 1.0), "cycle")]:
        with pytest.raises(ScheduleError, match=match):
            validate_schedule(base + [Transfer("t1", "a", "b", 10, after_start=bad)],
                              ["a", "b"])


def test_after_start_holds_a_send_for_its_compute_time(tmp_path: Path):
    """A three-step loop: each request leaves when the previous reply is in and at least
    0.4 s after the previous request left (the compute), whichever is later."""
    hosts = loopback_hosts(["a", "b"])
    transfers = [Transfer("req0", "a", "b", 64), Transfer("rep0", "b", "a", 2_000,
                                                          after=("req0",))]
    for k in (1, 2):
        transfers += [Transfer(f"req{k}", "a", "b", 64, after=(f"rep{k - 1}",),
                               after_start=(f"req{k - 1}", 0.4)),
                      Transfer(f"rep{k}", "b", "a", 2_000, after=(f"req{k}",))]
    plan = Plan(transfers, hosts, TransportSpec(kind="tcp"), start_at=time.time() + 0.5,
                deadline_s=8)
    runs = run_plan(plan, tmp_path)
    assert all(r.returncode == 0 for r in runs.values()), [r.result for r in runs.values()]
    for k in (1, 2):
        req, prev = _row(runs["a"], f"req{k}", "send"), _row(runs["a"], f"req{k - 1}", "send")
        assert req["ready"] - prev["ready"] == pytest.approx(0.4, abs=0.05)
        assert req["ready"] >= _row(runs["a"], f"rep{k - 1}", "recv")["end"]


@pytest.mark.slow
def test_a_failed_timing_transfer_fails_what_is_timed_from_it(tmp_path: Path):
    hosts = loopback_hosts(["a", "b", "c"])     # c's agent never starts
    transfers = [Transfer("dead", "a", "c", 100), Transfer("t", "a", "b", 10, after=("dead",)),
                 Transfer("timed", "a", "b", 10, after_start=("t", 0.1))]
    plan = Plan(transfers, hosts, TransportSpec(kind="tcp"), start_at=time.time() + 0.3,
                deadline_s=9.0)
    runs = run_plan(plan, tmp_path, hosts=["a", "b"], timeout_s=15)
    timed = _row(runs["a"], "timed", "send")
    # "t" never started, so nothing can time from it: failed at once, not at the deadline
    assert timed["start"] is None and "dependency t failed" in timed["error"]
    assert runs["a"].result["finished_at"] - plan.start_at < 8.0


def test_gated_agents_start_at_the_time_they_are_given(tmp_path: Path):
    """With --start-gate the plan's start time is ignored: each agent says READY once
    listening and starts at the time written to its stdin (here 1 s after both spoke)."""
    hosts = loopback_hosts(["a", "b"])
    plan = Plan([Transfer("t", "a", "b", 20_000)], hosts, TransportSpec(kind="roce"),
                start_at=time.time() - 100, deadline_s=20)  # long past: would start at once
    procs = launch(plan, ["a", "b"], tmp_path, ["--start-gate"], gated=True)
    try:
        assert [p.stdout.readline() for p in procs.values()] == [b"READY\n"] * 2
        start = time.time() + 1.0
        for proc in procs.values():
            proc.stdin.write(f"{start!r}\n".encode())
            proc.stdin.close()
        codes = [p.wait(30) for p in procs.values()]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    assert codes == [0, 0]
    sent = json.loads((tmp_path / "a.json").read_text())["transfers"][0]
    # (the plan's own start was 100 s ago: an ungated agent would have begun at once)
    assert start <= sent["start"] < start + 5


def test_a_gated_agent_without_a_start_time_fails_cleanly(tmp_path: Path):
    hosts = loopback_hosts(["a", "b"])
    plan = Plan([Transfer("t", "a", "b", 1000)], hosts, TransportSpec(kind="roce"))
    procs = launch(plan, ["a"], tmp_path, ["--start-gate"], gated=True)
    proc = procs["a"]
    try:
        assert proc.stdout.readline() == b"READY\n"
        proc.stdin.close()  # the launcher went away
        assert proc.wait(30) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    errors = json.loads((tmp_path / "a.json").read_text())["errors"]
    assert any("no start time" in e for e in errors)
