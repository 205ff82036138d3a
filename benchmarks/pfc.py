"""What link-level flow control costs: the pause reaction time and the CPU.

``sudo python benchmarks/pfc.py [--topo SPEC] [--rate MBPS] [--repeat N]`` brings the
fabric up lossy and lossless in turn, at the same rate, and runs the same traffic on
each (roce senders): a permutation at line rate (every packet crosses the accounting,
nothing pauses; swift) and a striped read from every other endpoint to one client (the
incast; no congestion control, so only flow control keeps it lossless). It prints, per
fabric and workload, the machine's CPU share while the traffic ran (the fidelity check's
figure), the flow-control daemon's CPU (cores), the packets dropped and, lossless, the
pauses and their reaction time: from the packet that crossed Xoff to the sender's gate
closing, in ms and in packet times of the emulated rate. A real switch reacts in ~1 us,
a few packet times at 400 Gbit/s. Run it alone: anything else on the machine is counted.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import topologies
from fabric.emulation import Emulation, EmulationOptions, shaping
from fabric.traffic.result import TrafficResult
from fabric.errors import UserError
from fabric.experiment.emulated import traffic_run
from fabric.model import graph as fg
from fabric.model.flowcontrol import FlowControl
from fabric.traffic import sizing, storage
from fabric.traffic.model import TransportSpec
from fabric.traffic.workloads import pattern_transfers

DEFAULT_TOPO = "leaf-spine"
READ_PACKETS = 1_000  # the incast's bytes, in packets of the client's link
PERMUTATION_PACKETS = 2_000
CLOCK_TICKS = 100  # /proc/<pid>/stat's unit (USER_HZ)


def daemon_cpu_s(pid: int | None) -> float:
    """User and system CPU seconds of a process so far (0 without one)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def reactions_ns(events_csv: Path, skip: int) -> tuple[list[int], int]:
    """Reaction times of the pause events after the first ``skip`` rows, and the row
    count (to skip next time)."""
    if not events_csv.exists():
        return [], 0
    with events_csv.open() as handle:
        rows = list(csv.DictReader(handle))
    return [int(r["reaction_ns"]) for r in rows[skip:]
            if r["event"] == "pause" and r["reaction_ns"]], len(rows)


def workloads(graph: Any) -> dict[str, tuple[list, TransportSpec]]:
    """The permutation and the incast (in packets: the same at every rate), with their
    transports."""
    swift, none = TransportSpec("roce", cc="swift"), TransportSpec("roce", cc="none")
    perm, _, _ = pattern_transfers(graph, "permutation", 0, swift, PERMUTATION_PACKETS)
    ends = fg.endpoints(graph)
    read = storage.striped_read(ends[0], ends[1:], sizing.bytes_of(READ_PACKETS, none), 1)
    return {"permutation": (perm, swift), "incast": (read, none)}


def measure(emu: Emulation, transfers: list, transport: TransportSpec, workdir: Path,
            skip: int) -> tuple[dict[str, Any], int]:
    """One run: machine CPU, daemon cores, drops, pauses and reaction times."""
    pid = emu.flow_control.pid
    cpu_before = daemon_cpu_s(pid)
    result: TrafficResult = traffic_run(emu, transfers, transport, workdir, seed=0)
    checks = {c.name: c.value for c in result.fidelity}
    seconds = max(r["recv_end"] or 0 for r in result.transfer_rows()) - min(
        r["send_start"] or 0 for r in result.transfer_rows())
    sent = sum(r.get("send_packets_sent") or 0 for r in result.transfer_rows())
    got = sum(r.get("recv_packets_received") or 0 for r in result.transfer_rows())
    reactions, skip = reactions_ns(emu.workdir / "pfc-events.csv", skip)
    return {"complete": result.complete, "machine_cpu": checks.get("machine_cpu"),
            "daemon_cores": (daemon_cpu_s(pid) - cpu_before) / seconds if pid else None,
            "dropped": sent - got, "pauses": sum(r["pauses"] for r in result.flow_control),
            "reactions_ns": reactions}, skip


def summarize(rows: list[dict[str, Any]], packet_s: float) -> str:
    """One line: medians over repeats, reaction percentiles over every pause."""
    cpu = [r["machine_cpu"] for r in rows if r["machine_cpu"] is not None]
    cores = [r["daemon_cores"] for r in rows if r["daemon_cores"] is not None]
    reactions = sorted(ns for r in rows for ns in r["reactions_ns"])
    text = (f"machine_cpu median {statistics.median(cpu):.3f}" if cpu else "machine_cpu -")
    text += f"; daemon {statistics.median(cores):.3f} cores" if cores else ""
    text += (f"; dropped {sum(r['dropped'] for r in rows)}; pauses "
             f"{sum(r['pauses'] for r in rows)}; complete {all(r['complete'] for r in rows)}")
    if reactions:
        pct = {p: reactions[min(len(reactions) - 1, int(p / 100 * len(reactions)))] / 1e9
               for p in (50, 99)}
        top = reactions[-1] / 1e9
        text += ("; reaction " + ", ".join(f"p{p} {s * 1e3:.3f} ms ({s / packet_s:.2f} pkt)"
                                           for p, s in pct.items())
                 + f", max {top * 1e3:.3f} ms ({top / packet_s:.2f} pkt)")
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topo", default=DEFAULT_TOPO)
    parser.add_argument("--rate", type=float, default=None,
                        help="host link rate, Mbit/s (default: the fabric's auto rate)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    try:
        graph = topologies.build(args.topo)
    except ValueError as exc:
        parser.error(str(exc))
    packet_bytes = TransportSpec("roce").packet_bytes
    with tempfile.TemporaryDirectory(prefix="pfc-bench-") as tmp:
        for fabric, fc in (("lossy", None), ("lossless", FlowControl())):
            options = EmulationOptions(host_mbps=args.rate, packet_bytes=packet_bytes,
                                       flow_control=fc)
            with Emulation(graph, options) as emu:
                mbps = emu.report.rate_plan.host_mbps
                packet_s = (packet_bytes + shaping.ETHERNET_HEADER_BYTES) * 8 / (mbps * 1e6)
                skip = 0
                for name, (transfers, transport) in workloads(graph).items():
                    rows = []
                    for i in range(args.repeat):
                        row, skip = measure(emu, transfers, transport,
                                            Path(tmp) / f"{fabric}-{name}-{i}", skip)
                        rows.append(row)
                    print(f"{fabric:>8} {name:>11} at {mbps:g} Mbit/s ({args.topo}): "
                          f"{summarize(rows, packet_s)}", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UserError as exc:  # a rate it cannot emulate, not root, ...: no traceback
        raise SystemExit(f"pfc.py: {exc}")
    except KeyboardInterrupt:  # the emulation has cleaned up on its way out
        print("pfc.py: interrupted; cleaned up", file=sys.stderr)
        raise SystemExit(130) from None
