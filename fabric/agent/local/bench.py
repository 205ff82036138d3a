"""Measure one RoCE flow between two local agents: goodput, CPU, repairs.

``python -m fabric.agent.local.bench --rate 20 --seconds 2 [--entropy packet]
[--loss 0.05 --hold 0.5 --delay-ms 4]`` runs a sender and a receiver agent on
fresh loopback addresses (optionally through :mod:`fabric.agent.local.impair`) and
prints goodput against the configured rate and each agent's CPU use per
Mbit/s and per data packet it sent or received. Loopback only: nothing
leaves the machine.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from fabric.agent.local.impair import Impairment, ImpairmentProxy
from fabric.agent.local.processes import loopback_hosts, run_plan, spare_address
from fabric.agent.roce.bth import DATA_OVERHEAD
from fabric.traffic.model import DEFAULT_ROCE_MTU, ENTROPY, ROCE_MTUS, Plan, Transfer, TransportSpec


def main(argv: list[str] | None = None) -> int:
    """Run the measurement and print one line per agent; return 0 on success."""
    parser = argparse.ArgumentParser(prog="python -m fabric.agent.local.bench")
    parser.add_argument("--rate", type=float, default=20.0, help="Mbit/s (wire)")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--entropy", choices=ENTROPY, default="packet")
    parser.add_argument("--mtu", type=int, default=DEFAULT_ROCE_MTU,
                        help=f"payload bytes per packet, {ROCE_MTUS[0]}-{ROCE_MTUS[-1]}")
    parser.add_argument("--loss", type=float, default=0.0, help="proxy drop probability")
    parser.add_argument("--hold", type=float, default=0.0, help="proxy delay probability")
    parser.add_argument("--delay-ms", type=float, default=4.0, help="largest proxy delay")
    args = parser.parse_args(argv)
    if not ROCE_MTUS[0] <= args.mtu <= ROCE_MTUS[-1]:
        parser.error(f"--mtu must be {ROCE_MTUS[0]}-{ROCE_MTUS[-1]}")
    hosts = loopback_hosts(["snd", "rcv"])
    size = int(args.rate * 1e6 / 8 * args.seconds * args.mtu / (args.mtu + DATA_OVERHEAD))
    impaired = args.loss > 0 or args.hold > 0
    proxy_ip = spare_address(hosts) if impaired else None
    plan = Plan([Transfer("flow", "snd", "rcv", size, dst_ip=proxy_ip)], hosts,
                TransportSpec(kind="roce", rate_mbps=args.rate, entropy=args.entropy,
                              mtu_payload=args.mtu),
                start_at=time.time() + 0.6, deadline_s=args.seconds * 5 + 5)
    with tempfile.TemporaryDirectory() as tmp:
        if impaired:
            assert proxy_ip is not None
            how = Impairment(args.loss, args.hold, args.delay_ms / 1000)
            with ImpairmentProxy(proxy_ip, hosts["rcv"][0].split("/")[0], forward=how):
                runs = run_plan(plan, Path(tmp))
        else:
            runs = run_plan(plan, Path(tmp))
    ok = True
    for host, role in (("snd", "send"), ("rcv", "recv")):
        result = runs[host].result
        if result is None:
            print(f"{host}: no result; {runs[host].stderr.strip()}")
            ok = False
            continue
        row = result["transfers"][0]
        if row["end"] is None:
            print(f"{host}: failed: {row['error']}")
            ok = False
            continue
        busy = result["finished_at"] - result["start_at"]
        goodput = row["bytes"] * 8 / (row["end"] - row["start"]) / 1e6
        cpu = result["cpu_s"] / busy * 100
        packets = row.get("packets_sent" if role == "send" else "packets_received") or 1
        counters = {k: row[k] for k in ("packets_sent", "retransmitted", "lost_detected",
                                        "out_of_order", "duplicates", "cwnd_final")
                    if row.get(k) is not None}
        print(f"{host} ({role}): goodput {goodput:.2f} Mbit/s of {args.rate:g} configured "
              f"(wire {goodput * (args.mtu + DATA_OVERHEAD) / args.mtu:.2f}); "
              f"CPU {cpu:.1f}% of a core = {cpu / goodput:.3f}% per Mbit/s = "
              f"{result['cpu_s'] / packets * 1e6:.1f} us per data packet {role[:4]}; "
              f"{counters}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
