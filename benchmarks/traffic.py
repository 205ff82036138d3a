"""What the traffic engine plus the emulated fabric sustain, with fidelity intact (root).

Prints, per fabric:

* single-flow efficiency: goodput of one transfer on an idle path over the
  emulated host rate, for the tcp and roce transports;
* fairness: Jain's index of two flows sharing one receiver's link;
* aggregate: a permutation (every host sends to one other host across the
  fabric) at increasing host rates, sprayed packet by packet over all paths
  (roce, the default) so that every link carries full load, or as TCP
  flows under ECMP; with the fidelity checks (OVS input delay, hidden
  drops, machine CPU), the agents' CPU per flow and how late their event
  loops woke for their timers (a loop that waits for a core wakes late). Rates beyond the
  forwarding budget of ``fabric/emulation/capacity.py`` are run too (marked): this
  is how that budget is calibrated. Each rate's line starts with the machine speed
  probe read just before it (``fabric/emulation/machine_speed.py``): a
  calibration holds for the probe reading it was made at.
* cost per packet-hop: with two or more rates, a least-squares line through the
  cores each part of the machine took (ovs-vswitchd, the agents, softirq, the
  whole machine) against the fabric's full-load packet-hops/s: what one more
  thousand packet-hops/s costs, and (``--project K``) what K thousand would
  take on this machine as it runs now, if the costs stay linear (run rates
  far apart: run to run the cores vary by a few hundredths). The parts
  overlap (kernel work done in a process's context can show in its time and in
  softirq), so the whole machine's line is the one to read for a total; and
  ovs-vswitchd forwards in one thread, which no line can take past one core.

Usage::

    sudo .venv/bin/python benchmarks/traffic.py [SPEC ...] [--rates 2,3,4.5,6] [--roce-mtu 4096]
        [--project 44]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import topologies
from fabric.agent.runner import per_process
from fabric.emulation import Emulation, EmulationOptions
from fabric.emulation.capacity import CapacityError
from fabric.emulation.machine_speed import probe_round_us, speed_factor
from fabric.emulation.traffic import build_plan, run_plan
from fabric.errors import UserError
from fabric.model import graph as fg
from fabric.traffic.metrics import jain_fairness
from fabric.traffic.model import DEFAULT_ROCE_MTU, ROCE_MTUS, Transfer, TransportSpec


def goodputs(result) -> list[float]:
    """Mbit/s of every finished transfer."""
    return [r["bytes"] * 8 / r["fct_s"] / 1e6 for r in result.transfer_rows() if r["fct_s"]]


def single_and_fair(spec: str, workdir: Path) -> None:
    """Single-flow efficiency and two-flow fairness at 20 Mbit/s (two busy links at most)."""
    graph = topologies.build(spec)
    hosts = [e for e in fg.endpoints(graph) if graph.nodes[e]["role"] == "host"]
    far = hosts[len(hosts) // 2]
    with Emulation(graph, EmulationOptions(policy="spray", host_mbps=20.0, busy_links=2)) as emu:
        for kind, entropy in (("tcp", "flow"), ("roce", "flow"), ("roce", "packet")):
            transport = TransportSpec(kind, entropy=entropy, rate_mbps=20.0)
            one = run_plan(emu, build_plan(emu, [Transfer("one", hosts[0], far, 2_000_000)],
                                           transport), workdir / f"one-{kind}-{entropy}")
            two = run_plan(emu, build_plan(emu, [Transfer("a", hosts[0], far, 2_000_000),
                                                 Transfer("b", hosts[1], far, 2_000_000)],
                                           transport), workdir / f"two-{kind}-{entropy}")
            rates = goodputs(two)
            print(f"  {kind:4s} entropy={entropy:6s} single flow {goodputs(one)[0] / 20:6.1%} "
                  f"of 20 Mbit/s; two flows into one link: {rates[0]:.1f} + {rates[1]:.1f} "
                  f"Mbit/s, Jain {jain_fairness(rates):.3f}")


CORE_PARTS = ("ovs-vswitchd", "agents", "softirq", "machine")


def cost_lines(points: list[tuple[float, dict[str, float]]]) -> dict[str, tuple[float, float]]:
    """Least-squares lines of each part's cores against thousands of packet-hops/s.

    Parameters
    ----------
    points : list of (float, dict)
        Per run: thousands of full-load packet-hops/s, and the cores each of
        ``CORE_PARTS`` took.

    Returns
    -------
    dict
        Part -> (cores per thousand packet-hops/s, cores at none); empty when the
        runs do not span two different loads.
    """
    loads = [load for load, _ in points]
    if len(set(loads)) < 2:
        return {}
    return {part: tuple(statistics.linear_regression(loads, [cores[part] for _, cores in points]))
            for part in CORE_PARTS}


def print_costs(points: list[tuple[float, dict[str, float]]], project: float | None) -> None:
    """Print :func:`cost_lines` (and their value at ``project`` k packet-hops/s)."""
    lines = cost_lines(points)
    if not lines:
        return
    print(f"  cores per 1 k packet-hops/s (a line through {len(points)} runs; at none): "
          + ", ".join(f"{part} {slope:+.3f} ({base:.2f})"
                      for part, (slope, base) in lines.items()))
    if project is not None:
        print(f"  extrapolated to {project:g} k packet-hops/s on this machine now: "
              + ", ".join(f"{part} {base + slope * project:.2f}"
                          for part, (slope, base) in lines.items())
              + f" cores of {os.cpu_count()}")


def aggregate(spec: str, rate: float, workdir: Path, kind: str,
              roce_mtu: int = DEFAULT_ROCE_MTU) -> tuple[float, dict[str, float]] | None:
    """A permutation at ``rate`` per host link: sustained goodput and fidelity.

    Returns thousands of full-load packet-hops/s and the cores each of
    ``CORE_PARTS`` took (None when the rate was refused or the run reports no
    per-part CPU)."""
    graph = topologies.build(spec)
    hosts = [e for e in fg.endpoints(graph) if graph.nodes[e]["role"] == "host"]
    half = len(hosts) // 2
    nbytes = int(rate * 1e6 / 8 * 3)  # about three seconds at line rate
    transfers = [Transfer(f"p{i}", h, hosts[(i + half) % len(hosts)], nbytes)
                 for i, h in enumerate(hosts)]
    transport = TransportSpec(kind, entropy="packet" if kind == "roce" else "flow",
                              rate_mbps=rate, mtu_payload=roce_mtu)
    round_us = probe_round_us()  # before the bring-up: the machine is idle
    try:
        emu = Emulation(graph, EmulationOptions(policy="spray", host_mbps=rate,
                                                enforce_budget=False,
                                                packet_bytes=transport.packet_bytes))
        emu.start()
    except CapacityError as exc:
        print(f"  {rate:5g} Mbit/s per host: refused: {exc}")
        return None
    plan = emu.report.rate_plan
    try:
        result = run_plan(emu, build_plan(emu, transfers, transport), workdir / f"perm-{rate:g}")
    finally:
        emu.stop()
    print(f"  [probe {round_us:.2f} us, machine speed {speed_factor(round_us):.2f}]")
    cores = report_run(result, plan, rate, transport.packet_bytes)
    return (plan.demand_pkt_hops / 1e3, cores) if cores else None


def report_run(result: Any, plan: Any, rate: float, packet_bytes: int
               ) -> dict[str, float] | None:
    """Print one rate's goodput, fidelity and CPU; return the cores each of
    ``CORE_PARTS`` took (None when the run reports no per-part CPU)."""
    rows = result.transfer_rows()
    start = min(r["send_start"] for r in rows)
    end = max(r["recv_end"] or 0 for r in rows)
    span = end - start if end > start else float("nan")  # nan: nothing finished
    flows = sum(goodputs(result))  # each flow's bytes over its own completion time
    checks = {c.name: c for c in result.fidelity}
    processes = per_process(result.agents.values())
    agents = sum(a.get("cpu_s", 0) for a in processes) / span
    incomplete = sum(1 for r in rows if r["recv_end"] is None)
    failed = [f"{c.name} {c.value:.3g}" if isinstance(c.value, float) else c.name
              for c in checks.values() if not c.ok]
    verdict = ("ok" if not failed and not incomplete and not result.errors
               else f"FAILED ({', '.join(failed) or 'errors'})")
    if incomplete:
        verdict += f" ({incomplete} of {len(rows)} flows did not finish)"
    beyond = " (beyond the budget)" if plan.headroom < 1 else ""
    print(f"  {rate:5g} Mbit/s{beyond} x {len(rows)} flows of {packet_bytes}-byte "
          f"packets ({plan.demand_pkt_hops / 1e3:.1f} k packet-hops/s at full load): "
          f"sum of flow goodputs {flows:6.1f} Mbit/s "
          f"({flows / rate / len(rows):5.1%} of offered), "
          f"OVS input delay {checks['ovs_input_delay_ms'].value:.2f} ms, "
          f"machine CPU {checks['machine_cpu'].value:.0%}, hidden drops "
          f"{checks['hidden_socket_drops'].value}, agent CPU {agents / len(rows):.1%} of a "
          f"core per flow, fidelity {verdict}")
    cores = None
    if "ovs_cpu_cores" in checks:
        cores = dict(zip(CORE_PARTS, (checks["ovs_cpu_cores"].value, agents,
                                      checks["softirq_cores"].value,
                                      checks["machine_cpu"].value * (os.cpu_count() or 1))))
        print(f"      cores busy: ovs-vswitchd {cores['ovs-vswitchd']:.2f}, agents "
              f"{agents:.2f}, softirq {cores['softirq']:.2f}, whole machine "
              f"{cores['machine']:.2f} of {os.cpu_count()}")
    print_agent_loops(result, processes, plan.packet_s, span)
    return cores


def print_agent_loops(result: Any, processes: list[dict], packet_s: float, span: float
                      ) -> None:
    """How late the agents' timers woke, and how often their loops woke per packet."""
    late = [a["wake_late"] for a in processes if a.get("wake_late")]
    wakeups = sum(a.get("wakeups", 0) for a in processes)
    packets = sum(a.get("roce", {}).get(k, 0) for a in result.agents.values()
                  for k in ("packets_sent", "packets_received"))
    if late:
        print(f"      agents' timer wake-ups late by (median over processes) p50 "
              f"{statistics.median(w['p50_ms'] for w in late):.2f} ms, p99 "
              f"{statistics.median(w['p99_ms'] for w in late):.2f} ms; worst process p99 "
              f"{max(w['p99_ms'] for w in late):.2f} ms, longest stall "
              f"{max(w['max_ms'] for w in late):.1f} ms (a packet takes "
              f"{packet_s * 1e3:.1f} ms)")
    if wakeups and packets:
        print(f"      {len(processes)} agent processes for {len(result.agents)} hosts; their "
              f"loops woke {wakeups / packets:.2f} times per data packet sent or received "
              f"({wakeups / span / len(processes):.0f} wake-ups/s per process)")


def main() -> None:
    """Run the benchmarks for every spec given."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="*", default=["rail-clos", "fat-tree"])
    parser.add_argument("--rates", default="2,3,4.5,6", help="host link rates, Mbit/s")
    parser.add_argument("--transport", choices=("tcp", "roce"), default="roce",
                        help="aggregate runs: sprayed roce (full load) or tcp (ECMP, "
                             "collisions leave links idle)"),
    parser.add_argument("--roce-mtu", type=int, choices=ROCE_MTUS, default=DEFAULT_ROCE_MTU,
                        help="aggregate roce runs: payload bytes per packet "
                             f"(default {DEFAULT_ROCE_MTU})")
    parser.add_argument("--skip-single", action="store_true")
    parser.add_argument("--project", type=float, metavar="K",
                        help="also extrapolate the cores per packet-hop to K thousand "
                             "packet-hops/s (needs two rates or more)")
    args = parser.parse_args()
    if args.project is not None and not args.project > 0:
        parser.error("--project must be a positive number of thousands of packet-hops/s")
    try:
        rates = [float(rate) for rate in args.rates.split(",")]
    except ValueError:
        parser.error(f"--rates must be numbers separated by commas, got {args.rates!r}")
    if not all(rate > 0 for rate in rates):
        parser.error(f"--rates must be positive, got {args.rates!r}")
    workdir = Path(tempfile.mkdtemp(prefix="fabric-bench-"))
    for spec in args.specs:
        print(f"{spec}:")
        if not args.skip_single:
            single_and_fair(spec, workdir / spec)
        points = [point for point in (aggregate(spec, rate, workdir / spec, args.transport,
                                                args.roce_mtu) for rate in rates)
                  if point is not None]
        print_costs(points, args.project)


if __name__ == "__main__":
    try:
        main()
    except UserError as exc:  # a rate it cannot emulate, not root, ...: no traceback
        raise SystemExit(f"traffic.py: {exc}")
    except KeyboardInterrupt:  # the emulation has cleaned up on its way out
        print("traffic.py: interrupted; cleaned up", file=sys.stderr)
        raise SystemExit(130) from None
