"""Every experiment's quick variant on real fabrics: data, manifest, summary, figures,
and a complete, consistent fidelity verdict.

Only the load-dependent checks (``fabric.experiment.checks.RUN_CHECKS``: OVS's input delay,
the machine's CPU and the link time the agents lost waiting for it) may fail here: they measure how much CPU this machine had to
spare at that moment, and this VM's agents took 30-40 % more CPU time for the same
work at some hours than at others (its host is shared). That is a performance figure,
measured alone by ``benchmarks/headroom.py``; the default rates leave room for it. Every other
check (drops nobody counted, transfers left incomplete, an idle path below its rate)
is correctness and must pass.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import topologies
from fabric.experiment.checks import RUN_CHECKS

ROOT = Path(__file__).resolve().parents[2]
ROW_FIELDS = {
    "collisions": {"policy", "pattern", "norm_throughput", "collisions", "max_flows_per_link"},
    "incast": {"fabric", "senders", "buffer_pkts", "rto_min_ms", "admission", "goodput_frac",
               "round_p99_ms", "timeouts"},
    "isolation": {"fabric", "lanes", "collective_slowdown", "collective_p99_ms",
                  "storage_goodput_frac", "paused_links"},
    "lossless": {"part", "setting", "ring_slowdown", "storage_goodput_frac", "probe_p99_ms",
                 "paused_links", "pause_link_seconds"},
    "zones": {"placement", "busbw_frac"},
    "placement": {"oversubscription", "placement", "busbw_frac"},
    "failures": {"scenario", "policy", "slowdown", "ideal_slowdown", "reroute_ms", "stall_ms",
                 "timeouts", "lost_bytes"},
    "storage": {"part", "drops", "timeouts", "valid"},
    "replay": {"policy", "job", "step_ms", "ideal_ms", "exposed_ms", "together_ms",
               "slowdown"},
    "scaling": {"endpoints", "backend", "policy", "norm_throughput", "ideal", "steady",
                "htsim"},
    "deadlock": {"case", "verdicts", "static_cycle", "detected_cycle", "watchdog_trips",
                 "watchdog_drops", "delivered_frac"},
}
# what the deadlock case's routes do: the static check flags the valley routes only, the
# detector sees their ring, and only the short watchdog lets the flows end
DEADLOCK_VERDICTS = {"up-down": ("flowed", False), "valley": ("deadlocked", True),
                     "valley-watchdog": ("broken", True)}

LOSSLESS_ROWS = {"incast": 2, "isolation": 2, "lossless": 6}


@pytest.mark.parametrize("name", sorted(ROW_FIELDS))
def test_quick_run_writes_a_complete_result(name: str, tmp_path: Path) -> None:
    out = tmp_path / name
    proc = subprocess.run([sys.executable, "-m", "fabric.cli", "run", name, "--quick",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=420)
    summary = json.loads((out / "summary.json").read_text())
    print(f"{name}: valid={summary['valid']}\n{proc.stdout}")
    assert_verdict(name, summary, proc)
    assert summary["experiment"] == name
    assert summary["table"], "the summary needs its headline rows"
    for row in summary["table"]:
        assert ROW_FIELDS[name] <= set(row), set(row)
    if name in LOSSLESS_ROWS:  # its lossless rows are there, with their pauses measured
        rows = [r for r in summary["table"] if r.get("fabric", "lossless") == "lossless"]
        assert len(rows) >= LOSSLESS_ROWS[name], summary["table"]
        pause = "pause_hop1" if name == "incast" else "paused_links"
        assert all(r[pause] is not None for r in rows), rows
    if name == "deadlock":
        for row in summary["table"]:
            verdict, cyclic = DEADLOCK_VERDICTS[row["case"]]
            assert row["verdicts"] == verdict, row
            assert bool(row["static_cycle"]) == cyclic == bool(row["detected_cycle"]), row
            assert (row["watchdog_trips"] > 0) == (row["case"] == "valley-watchdog"), row
    manifest = json.loads((out / "manifest.json").read_text())
    assert {"command", "parameters", "seeds", "versions", "git_commit"} <= set(manifest)
    pngs = sorted(out.glob("*.png"))
    assert pngs and all(p.with_suffix(".pdf").exists() for p in pngs)
    assert list(out.glob("*.csv"))
    second = subprocess.run([sys.executable, "-m", "fabric.cli", "run", name, "--quick",
                             "--out", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert second.returncode == 2 and "never overwritten" in second.stderr


def test_the_example_experiment_runs_on_a_real_fabric(tmp_path: Path) -> None:
    """``examples/all_to_all.py``, the README's experiment of your own, run as written:
    both policies' all-to-alls finish and are tabled, the figure is drawn."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import all_to_all
    finally:
        sys.path.remove(str(ROOT / "examples"))
    from fabric.experiment import RunContext

    from fabric.emulation import capacity
    from fabric.traffic import sizing
    from fabric.traffic.model import TransportSpec

    outcome = all_to_all.EXPERIMENT.run(RunContext(tmp_path, quick=True))
    failed = {c["name"] for c in outcome.fidelity["checks"] if not c["ok"]}
    assert failed <= set(RUN_CHECKS), outcome.fidelity
    assert [row["policy"] for row in outcome.table] == ["ecmp", "spray"]
    # each rank sends 3/4 of a 300-packet buffer: no all-to-all beats that at line rate, and
    # no machine emulates faster than the forwarding budget at full speed allows
    graph, roce = topologies.build(all_to_all.AllToAll.default_topology), TransportSpec("roce")
    fastest = max(capacity.auto_host_mbps(graph, datapath, None, roce.packet_bytes)
                  for datapath in ("user", "kernel"))
    floor_s = 0.75 * sizing.seconds_of(300, roce, fastest)
    assert all(floor_s < row["seconds"] < 60 for row in outcome.table), (floor_s, outcome.table)
    assert [p.name for p in all_to_all.EXPERIMENT.plot(tmp_path)] == ["seconds.png",
                                                                     "seconds.pdf"]


def test_the_flowlet_example_is_one_more_policy_in_collisions_with_captures(
        tmp_path: Path) -> None:
    """The worked example's last step (its own rows in a quick collisions run, beside
    ECMP's only: the built-in policies' quick run is the test above), with `--pcap`
    capturing every run at one link. A functional test: it runs at 2 Mbit/s, not the
    default 3, so that the captures' extra work leaves OVS margin under its 1 ms
    input-delay check (at 3 Mbit/s one sprayed run in several reached 1.0-1.5 ms)."""
    from scapy.contrib.roce import BTH
    from scapy.utils import rdpcap

    out, pcap = tmp_path / "collisions", tmp_path / "pcap"
    proc = subprocess.run([sys.executable, "-m", "fabric.cli", "run", "collisions", "--quick",
                           "--policies", "ecmp", "--controller-app",
                           "examples/flowlet_switching.py:FlowletSwitching",
                           "--pcap", str(pcap), "--pcap-at", "h0g0",
                           "--pcap-packets", "200", "--host-mbps", "2", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=420)
    summary = json.loads((out / "summary.json").read_text())
    policies = [r["policy"] for r in summary["table"]]
    assert policies == ["ecmp", "FlowletSwitching"]
    assert_verdict("collisions --controller-app", summary, proc)
    mine = next(r for r in summary["table"] if r["policy"] == "FlowletSwitching")
    assert mine["norm_throughput"] and mine["collisions"] is not None  # flows were traced
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parameters"]["controller_app"].endswith("flowlet_switching.py:"
                                                             "FlowletSwitching")
    assert manifest["parameters"]["pcap"]["at"] == ["h0g0"]
    logs = {p.parent.name: p for p in out.glob("work/*/controller.log")}
    assert len(logs) == 2, logs  # every bring-up keeps its controller's log
    assert "FlowletSwitching" in next(v for k, v in logs.items() if "Flowlet" in k).read_text()
    runs = len(list(csv_rows(out / "runs.csv")))
    files = sorted(pcap.rglob("*.pcap"))
    assert len(files) == runs * 1  # h0g0 has one NIC on rail-clos: one link per run
    for path in files:
        packets = rdpcap(str(path))
        assert 0 < len(packets) <= 200
        assert any(p.haslayer(BTH) for p in packets), path
    assert f"pcap: {runs} files" in proc.stdout


def assert_verdict(name: str, summary: dict, proc: subprocess.CompletedProcess) -> None:
    """Valid exactly when every check passed, exit status 0 or 1 to match, and nothing
    but a load-dependent check failed (see the module docstring): that one is reported
    as a warning, with its figures."""
    checks = summary["fidelity"]["checks"]
    assert checks and summary["fidelity"]["runs"] > 0
    failed = [c for c in checks if not c["ok"]]
    assert summary["valid"] == (not failed)
    assert proc.returncode == (0 if summary["valid"] else 1), proc.stderr[-2000:]
    assert {c["name"] for c in failed} <= set(RUN_CHECKS), failed
    if failed:
        warnings.warn(f"{name}: invalid on this machine's load at the time: {failed}")


def csv_rows(path: Path) -> list[dict]:
    import csv

    with path.open() as handle:
        return list(csv.DictReader(handle))
