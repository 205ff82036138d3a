"""How much CPU the default rates leave spare: the quick runs' load-dependent checks.

``sudo python benchmarks/headroom.py [--experiments collisions failures] [--repeat 1]``
runs each experiment's quick variant at its default rate (run it alone: anything else
on the machine is counted) and prints, per experiment and policy, the worst and the
median of each run's machine CPU, OVS input delay and (roce) link time the agents lost
to their lateness against their thresholds, and the host agents' CPU (cores, while the
traffic ran). The integration tests do not assert these checks (they depend on what
else the VM's host is doing): this is where their margin is measured.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from fabric.agent.runner import per_process
from fabric.emulation import fidelity

ROOT = Path(__file__).resolve().parents[1]
CHECKS = {"machine_cpu": fidelity.MAX_MACHINE_CPU,
          "ovs_input_delay_ms": fidelity.MAX_OVS_INPUT_DELAY_MS,
          "agent_late_share": fidelity.MAX_AGENT_LATE_SHARE}


def agent_cores(run_dir: Path) -> float | None:
    """Cores the run's agents used while their traffic ran (None without results)."""
    results = [json.loads(p.read_text()) for p in run_dir.glob("agent-*.json")]
    spans = [r["finished_at"] - r["start_at"] for r in results if r.get("finished_at")]
    if not results or not spans or max(spans) <= 0:
        return None
    return sum(r.get("cpu_s", 0.0) for r in per_process(results)) / max(spans)


def one_run(name: str, out: Path) -> list[dict[str, str]]:
    """Run ``fabric run NAME --quick`` into ``out``, each run tried once (the margin is
    what is measured here, repeats would hide it); return its runs.csv rows."""
    with subprocess.Popen([sys.executable, "-m", "fabric.cli", "run", name, "--quick",
                           "--attempts", "1", "--out", str(out)], cwd=ROOT,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        try:
            _, stderr = proc.communicate()
        except KeyboardInterrupt:
            # Ctrl-C reached the run too: let it tear its fabric down (subprocess.run
            # would kill it half-way and leave the system changed)
            proc.wait()
            sys.exit(f"headroom: interrupted during {name} (its run cleaned up)")
    if proc.returncode not in (0, 1):  # 1: a run was invalid, which is what we measure
        sys.exit(f"headroom: {name} failed (exit {proc.returncode}): {stderr[-500:]}")
    with (out / "runs.csv").open() as handle:
        return list(csv.DictReader(handle))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", nargs="+", default=["collisions", "failures"])
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    with tempfile.TemporaryDirectory(prefix="headroom-") as tmp:
        for name in args.experiments:
            values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
            rate = None
            for i in range(args.repeat):
                out = Path(tmp) / f"{name}-{i}"
                for row in one_run(name, out):
                    rate = row.get("host_mbps", rate)
                    for check in CHECKS:
                        if row.get(check):  # empty: not measured, or not in this run (TCP)
                            values[row["policy"]][check].append(float(row[check]))
                for run_dir in out.glob("work/*/*-[0-9]"):
                    cores = agent_cores(run_dir)
                    policy = next((p for p in values if p in run_dir.name), None)
                    if cores is not None and policy:
                        values[policy]["agent_cores"].append(cores)
            print(f"{name} --quick at {rate} Mbit/s per host, {args.repeat} time(s):")
            for policy, checks in values.items():
                cells = []
                for check, numbers in checks.items():
                    limit = CHECKS.get(check)
                    cells.append(f"{check} max {max(numbers):.3f} median "
                                 f"{statistics.median(numbers):.3f}"
                                 + (f" (limit {limit:g})" if limit else ""))
                print(f"  {policy:>9}: " + "; ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
