"""Each congestion control of the roce transport on one shared bottleneck (root).

Four senders under one leaf send to four receivers under the other leaf of a
leaf-spine fabric whose only leaf-spine link runs at the host rate
(``leaves=2,spines=1,hosts_per_leaf=4,oversub=4``): every flow crosses that
one link. Per congestion control it prints the aggregate goodput over the
ideal (the link rate less the data's headers), Jain's fairness index, the
bottleneck queue sampled every 20 ms from its HTB leaf (mean, p99 and
maximum, in packets), the packets lost and the retransmission timeouts.
Then the same for TCP with each congestion control the kernel offers.

At every sample it also reads the bottleneck's ECN marker (its virtual queue,
:mod:`fabric.emulation.ecn`) just before and just after tc reads the real
backlog, and prints how far the real backlog was from the virtual one over
that window (0 when between the two readings): mean and p99 in full-size
packets, and how often the two disagreed about being above the marking
threshold ``kmin``. With ``dcqcn``
it prints the packets marked and CNPs.

Usage::

    sudo .venv/bin/python benchmarks/cc.py [--mbps 3] [--seconds 6] [--queue-pkts 64]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import topologies
from fabric import argtypes
from fabric.emulation import Emulation, EmulationOptions, ecn
from fabric.emulation.network import tcp_congestion_controls
from fabric.emulation.shaping import ETHERNET_HEADER_BYTES
from fabric.emulation.traffic import build_plan, run_plan
from fabric.errors import UserError
from fabric.model import graph as fg
from fabric.traffic import ideal
from fabric.traffic.metrics import jain_fairness, percentile
from fabric.traffic.model import CONGESTION_CONTROLS, Transfer, TransportSpec

SPEC = "leaf-spine,leaves=2,spines=1,hosts_per_leaf=4,oversub=4"


class QueueSampler:
    """Backlog of a device's qdiscs (packets), and of its ECN marker's virtual queue
    beside the real one (full-size packets' worth of bytes), sampled in a thread."""

    def __init__(self, dev: str, link_mbps: float, frame_bytes: int,
                 interval_s: float = 0.02) -> None:
        self.dev, self.interval_s, self.frame_bytes = dev, interval_s, frame_bytes
        self.bytes_per_s = link_mbps * 1e6 / 8
        self.samples: list[int] = []
        # (real, virtual before, virtual after tc read it), in full-size packets
        self.samples_ecn: list[tuple[float, float, float]] = []
        self.marker: ecn.MarkerReader | None = None
        self.counts = (0, 0)  # ECN-capable packets and marked ones during the sampling
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _virtual(self) -> float:
        assert self.marker is not None
        now = time.monotonic_ns()  # the marker's clock (bpf_ktime_get_ns)
        return self.marker.read().backlog_s(now) * self.bytes_per_s / self.frame_bytes

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            before = self._virtual() if self.marker else 0.0
            out = subprocess.run(["tc", "-s", "qdisc", "show", "dev", self.dev],
                                 capture_output=True, text=True).stdout
            after = self._virtual() if self.marker else 0.0
            # the leaves hold the packets: sum pfifo_head_drop backlogs
            leaves = re.findall(r"pfifo_head_drop.*?backlog (\S+) (\d+)p", out, re.S)
            self.samples.append(sum(int(p) for _, p in leaves))
            if self.marker:
                real = sum(_tc_bytes(b) for b, _ in leaves) / self.frame_bytes
                self.samples_ecn.append((real, before, after))

    def __enter__(self) -> "QueueSampler":
        shown = subprocess.run(["tc", "filter", "show", "dev", self.dev],
                               capture_output=True, text=True).stdout
        prog = ecn.marker_prog_id(shown)
        if prog is not None:
            self.marker = ecn.MarkerReader(prog)
            self._start = self.marker.read()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self.marker:
            end = self.marker.read()
            self.counts = (end.ect - self._start.ect, end.marked - self._start.marked)
            self.marker.close()


def _tc_bytes(size: str) -> float:
    """Bytes in tc's size notation: ``1514b``, ``84Kb`` (tc uses units near a
    multiple of 1024)."""
    for unit, scale in (("Mb", 1 << 20), ("Kb", 1 << 10), ("b", 1)):
        if size.endswith(unit):
            return float(size[:-len(unit)]) * scale
    raise ValueError(f"not a tc size: {size!r}")


def run_one(emu: Emulation, transport: TransportSpec, nbytes: int, workdir: Path,
            bottleneck: str, link_mbps: float) -> dict:
    graph = emu.graph
    senders = [h for h in fg.endpoints(graph) if h.startswith("l0")]
    receivers = [h for h in fg.endpoints(graph) if h.startswith("l1")]
    transfers = [Transfer(f"f{i}", s, r, nbytes) for i, (s, r) in
                 enumerate(zip(senders, receivers))]
    frame = transport.packet_bytes + ETHERNET_HEADER_BYTES
    with QueueSampler(bottleneck, link_mbps, frame) as queue:
        result = run_plan(emu, build_plan(emu, transfers, transport), workdir)
    rows = result.transfer_rows()
    rates = [r["bytes"] * 8 / r["fct_s"] / 1e6 for r in rows if r["fct_s"]]
    start = min(r["send_start"] for r in rows)
    end = max(r["recv_end"] or start for r in rows)
    sent = sum(r.get("send_packets_sent") or 0 for r in rows)
    received = sum(r.get("recv_packets_received") or 0 for r in rows)
    netstat = [a.get("netstat", {}) for a in result.agents.values()]
    return {"goodput": sum(r["bytes"] for r in rows) * 8 / (end - start) / 1e6,
            "jain": jain_fairness(rates) if len(rates) == len(rows) else float("nan"),
            "queue": queue.samples,
            "lost": (sent - received) if transport.kind == "roce"
            else sum(int(n.get("RetransSegs", 0)) for n in netstat),
            "rto": sum(r.get("send_rto_count") or 0 for r in rows) if transport.kind == "roce"
            else sum(int(n.get("TCPTimeouts", 0)) for n in netstat),
            "ecn_samples": queue.samples_ecn, "ecn": queue.counts,
            "cnps": sum(r.get("send_cnps_received") or 0 for r in rows)}


def report(label: str, out: dict, link_mbps: float, overhead: ideal.Overhead) -> None:
    best = link_mbps / overhead.data  # the ACKs go the other way
    q = out["queue"] or [0]
    print(f"  {label:18s} goodput {out['goodput']:5.2f} Mbit/s = {out['goodput'] / best:6.1%} "
          f"of ideal {best:.2f}; Jain {out['jain']:.3f}; queue mean "
          f"{statistics.fmean(q):5.1f} p99 {percentile(q, 99):5.1f} max {max(q):3d} pkts; "
          f"lost {out['lost']}, RTOs {out['rto']}")
    if out["ecn_samples"]:
        errors = [max(0.0, min(a, b) - real, real - max(a, b))
                  for real, a, b in out["ecn_samples"]]
        kmin = ecn.EcnMarking().kmin
        disagree = sum((real >= kmin) != (min(a, b) >= kmin) and (real >= kmin) != (
            max(a, b) >= kmin) for real, a, b in out["ecn_samples"])
        ect, marked = out["ecn"]
        print(f"  {'':18s} marker vs real backlog over {len(errors)} samples: |difference| "
              f"mean {statistics.fmean(errors):.2f} p99 {percentile(errors, 99):.2f} pkts, "
              f"real mean {statistics.fmean(r for r, _, _ in out['ecn_samples']):.1f}; above kmin "
              f"({kmin:g}) disagree in {disagree / len(errors):.1%}; marked {marked} of "
              f"{ect} ECN-capable packets, {out['cnps']} CNPs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mbps", type=argtypes.positive_number(), default=3.0,
                        help="host (and bottleneck) rate")
    parser.add_argument("--seconds", type=argtypes.positive_number(), default=6.0,
                        help="each flow's bytes in seconds of its fair share")
    parser.add_argument("--queue-pkts", type=argtypes.integer(1, argtypes.MAX_QUEUE_PKTS),
                        default=64)
    args = parser.parse_args()
    graph = topologies.build(SPEC)
    bottleneck = fg.intf_name("l0", fg.port(graph, "l0", "s0"))
    workdir = Path(tempfile.mkdtemp(prefix="fabric-cc-"))
    nbytes = int(args.mbps * 1e6 / 8 * args.seconds / 4)
    print(f"{SPEC}: 4 flows through {bottleneck} at {args.mbps:g} Mbit/s, "
          f"{args.queue_pkts}-packet buffers")
    roce = TransportSpec("roce")
    options = EmulationOptions(host_mbps=args.mbps, queue_pkts=args.queue_pkts, busy_links=4,
                               packet_bytes=roce.packet_bytes)
    with Emulation(graph, options) as emu:
        link = emu.report.rate_plan.link_mbps[frozenset(("l0", "s0"))]
        for cc in CONGESTION_CONTROLS:
            out = run_one(emu, replace(roce, cc=cc), nbytes, workdir / cc, bottleneck, link)
            report(f"roce {cc}", out, link, ideal.transport_overhead("roce", roce.mtu_payload))
    for cc in tcp_congestion_controls():
        with Emulation(graph, EmulationOptions(host_mbps=args.mbps, queue_pkts=args.queue_pkts,
                                               busy_links=4, tcp_cc=cc)) as emu:
            out = run_one(emu, TransportSpec("tcp"), nbytes, workdir / f"tcp-{cc}", bottleneck,
                          link)
            report(f"tcp {cc}", out, link, ideal.transport_overhead("tcp"))


if __name__ == "__main__":
    try:
        main()
    except UserError as exc:  # a rate it cannot emulate, not root, ...: no traceback
        raise SystemExit(f"cc.py: {exc}")
