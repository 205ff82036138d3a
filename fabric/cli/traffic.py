"""``fabric traffic``: replay one traffic pattern on a fabric (root)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from fabric import argtypes
from fabric.cli.common import (UsageError, add_emulation_args, add_pcap_args, bring_up_text,
                               build_graph, check_pcap_args, controller_text, emulation_options,
                               preset_of, print_csv, spec_of)
from fabric.emulation.traffic import MIN_RTO_ROUTE_FLOOR_MS
from fabric.traffic.model import (CONGESTION_CONTROLS, DEFAULT_ROCE_MTU, ENTROPY, ROCE_MTUS,
                                  TransportSpec)
from fabric.traffic.patterns import PATTERNS


def add_parser(sub: Any) -> None:
    """Add ``traffic`` to the subcommands ``sub``."""
    count = argtypes.integer(1)
    traffic = sub.add_parser("traffic", help="replay one traffic pattern on a fabric (root)")
    traffic.add_argument("spec", nargs="?", help="topology spec (default: rail-clos)")
    traffic.add_argument("--pattern", default="ring-allreduce", choices=PATTERNS)
    traffic.add_argument("--size", type=count, default=2 * 1024 * 1024,
                         help="bytes: collective size, block per round, shard or object")
    traffic.add_argument("--ranks", type=argtypes.integer(2), default=None,
                         help="collective ranks (default: every compute endpoint)")
    traffic.add_argument("--placement", choices=("rail", "random"), default="rail")
    traffic.add_argument("--seed", type=argtypes.integer(0), default=0,
                         help="placement and source ports")
    traffic.add_argument("--chunks", type=count, default=1,
                         help="collectives: pieces per step, each forwarded once it arrived")
    traffic.add_argument("--channels", type=count, default=1,
                         help="collectives: parallel rings or trees, a connection each")
    traffic.add_argument("--slots", type=count, default=8,
                         help="collectives: pieces in flight per connection (NCCL_STEPS, 8); "
                              "1: each send waits for the previous one's acknowledgement")
    traffic.add_argument("--clients", type=count, default=1)
    traffic.add_argument("--servers", type=count, default=4, help="storage senders (incast)")
    traffic.add_argument("--rounds", type=count, default=4)
    traffic.add_argument("--admission", type=count, default=None,
                         help="at most W stripes outstanding at a client")
    traffic.add_argument("--rto-min-ms", type=argtypes.integer(MIN_RTO_ROUTE_FLOOR_MS),
                         default=None, help=f"per-route minimum RTO (>= "
                                            f"{MIN_RTO_ROUTE_FLOOR_MS}: the kernel's floor)")
    _transport_args(traffic)
    traffic.add_argument("--deadline", type=argtypes.positive_number(), default=120.0,
                         help="seconds")
    add_pcap_args(traffic, "while the traffic runs", "the first endpoint of the pattern")
    traffic.add_argument("--format", choices=("json", "csv"), default="json")
    traffic.add_argument("--keep", metavar="DIR", type=argtypes.new_dir,
                         help="keep plan, agent reports and logs (the controller's too) in this "
                              "new directory")
    traffic.add_argument("--backend", choices=("emulator", "ns3"), default="emulator",
                         help="ns3: simulate the pattern in ns-3 (no root; roce only; links at "
                              "the graph's physical rates unless --host-mbps)")
    add_emulation_args(traffic)
    traffic.set_defaults(func=cmd_traffic)


def _transport_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--transport", choices=("tcp", "roce"), default="tcp")
    parser.add_argument("--connections", type=argtypes.integer(1), default=1,
                        help="tcp: connections per peer")
    parser.add_argument("--entropy", choices=ENTROPY, default="flow",
                        help="roce: one UDP source port per flow, a new one per packet, or "
                             "per packet recycling the ports that did not queue (REPS)")
    parser.add_argument("--cc", choices=CONGESTION_CONTROLS, default=None,
                        help="roce: congestion control, delay-based swift, ECN-driven "
                             "dcqcn, loss-based AIMD, or none (line rate; only a lossless "
                             "fabric keeps it from dropping) (default: swift)")
    parser.add_argument("--roce-mtu", type=int, choices=ROCE_MTUS, default=None,
                        help=f"roce: payload bytes per packet, the RoCE path MTU (default: "
                             f"{DEFAULT_ROCE_MTU}; 1024 is the largest a 1500-byte "
                             f"Ethernet MTU carries)")


def check_traffic_args(args: argparse.Namespace) -> None:
    """Refuse options that the chosen transport (or a missing --pcap) would silently
    ignore."""
    check_pcap_args(args)
    if args.transport != "roce" and args.entropy != "flow":
        raise UsageError("argument --entropy: applies to --transport roce only")
    if args.transport != "tcp" and args.connections != 1:
        raise UsageError("argument --connections: applies to --transport tcp only")
    if args.transport != "roce" and args.cc is not None:
        raise UsageError("argument --cc: applies to --transport roce only (TCP: --tcp-cc)")
    if args.transport != "roce" and args.roce_mtu is not None:
        raise UsageError("argument --roce-mtu: applies to --transport roce only "
                         "(TCP sends 1448-byte segments)")
    if args.backend == "ns3":
        check_simulated_traffic(args)


def check_simulated_traffic(args: argparse.Namespace) -> None:
    """``--backend ns3``: refuse, in one line, what the simulator does not model."""
    from fabric.simulation.scenario import NOT_MODELLED_CC

    if args.transport != "roce":
        raise UsageError("argument --backend: the ns-3 backend models the roce transport only "
                         "(kernel TCP is not modelled): add --transport roce")
    if args.cc in NOT_MODELLED_CC:
        raise UsageError(f"argument --cc: {NOT_MODELLED_CC[args.cc]}")
    for flag, given in (("--pcap", args.pcap is not None), ("--rto-min-ms", args.rto_min_ms),
                        ("--preset", args.preset), ("--flow-control", args.flow_control),
                        ("--lanes", args.lanes), ("--isolation", args.isolation),
                        ("--controller-app", args.controller_app),
                        ("--controller", args.controller),
                        ("--datapath", args.datapath != "auto")):
        if given:
            raise UsageError(f"argument {flag}: not modelled by --backend ns3")


def cmd_traffic(args: argparse.Namespace) -> int:
    """Run one traffic pattern on a fabric; print its summary and transfers."""
    from fabric.analysis.report import summarize
    from fabric.emulation import Emulation
    from fabric.traffic.patterns import PatternSpec, make_transfers

    check_traffic_args(args)
    graph = build_graph(spec_of(args))
    spec = PatternSpec(args.pattern, size_bytes=args.size, ranks=args.ranks,
                       placement=args.placement, seed=args.seed, chunks=args.chunks,
                       channels=args.channels, slots=args.slots, clients=args.clients,
                       servers=args.servers, rounds=args.rounds, admission=args.admission)
    transfers, participants = make_transfers(graph, spec)
    points = _capture_points(graph, args, participants)
    preset = preset_of(args)
    transport = TransportSpec(args.transport, connections=args.connections,
                              entropy=args.entropy,
                              cc=args.cc or (preset.cc if preset else "swift"),
                              mtu_payload=args.roce_mtu or DEFAULT_ROCE_MTU)
    if args.backend == "ns3":
        return _simulated(args, graph, spec, transfers, participants, transport)
    options = emulation_options(args, packet_bytes=transport.packet_bytes)
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="fabric-traffic-"))
    with Emulation(graph, options) as emu:
        print(bring_up_text(emu.report), file=sys.stderr)
        print(f"controller: {controller_text(args)}", file=sys.stderr)
        result = _run(emu, args, transfers, participants, transport, points, workdir)
    plan = emu.report.rate_plan
    assert plan is not None  # bring-up planned the rates
    summary = {**summarize(result, spec, participants, plan.host_mbps),
               "controller": controller_text(args)}
    return _print(args, summary, result)


def _print(args: argparse.Namespace, summary: dict[str, Any], result: Any) -> int:
    """The run's transfers (CSV) or its summary and transfers (JSON); 1 if incomplete."""
    rows = result.transfer_rows()
    if args.format == "csv":
        print_csv(rows)
    else:
        print(json.dumps({"summary": summary, "transfers": rows}, indent=1, default=str))
    return 0 if result.complete else 1


def _simulated(args: argparse.Namespace, graph: Any, spec: Any, transfers: list,
               participants: list[str], transport: TransportSpec) -> int:
    """The pattern simulated in ns-3 (``--backend ns3``): the same summary, with the
    simulator's wall time, memory and drops in place of the emulator's checks."""
    from fabric.analysis.report import pattern_summary
    from fabric.experiment.simulated import SIM_TIME_SCALE, completion, simulated_fabric
    from fabric.simulation import simulate

    policy = args.routing or "ecmp"
    # patterns are sized in bytes, not seconds; the time scale sets the adaptive
    # controller's shortest interval as an experiment's simulated runs have it
    fab = simulated_fabric(graph, 1.0 if args.host_mbps else SIM_TIME_SCALE,
                           host_mbps=args.host_mbps,
                           packet_bytes=transport.packet_bytes, queue_pkts=args.queue_pkts,
                           policy=policy)
    rate = fab.report.rate_plan.host_mbps
    print(f"simulating {len(transfers)} transfers of {args.pattern} on {len(participants)} "
          f"endpoints at {rate:g} Mbit/s per host ({policy}, ns-3)...", file=sys.stderr)
    if args.keep:  # the scenario the simulator read
        Path(args.keep).mkdir(parents=True, exist_ok=True)
    result = simulate(fab.fabric, transfers, transport, seed=args.seed, deadline_s=args.deadline,
                      workdir=Path(args.keep) if args.keep else None, adaptive=fab.adaptive)
    summary = {**pattern_summary(result, spec, participants, rate), "backend": "ns3",
               "host_mbps": rate, "policy": policy,
               "roce_retransmitted": sum(r["send_retransmitted"] for r in result.rows),
               "drops": result.drops, "simulated_s": result.sim_s,
               "wall_s": round(result.wall_s, 3), "memory_mb": round(result.memory_mb, 1),
               "telemetry": result.telemetry, "fidelity": completion(result)}
    return _print(args, summary, result)


def _run(emu: Any, args: argparse.Namespace, transfers: list, participants: list[str],
         transport: TransportSpec, points: list, workdir: Path) -> Any:
    """The idle-path check, then the pattern (captured with ``--pcap``)."""
    from fabric.emulation.capture import capture
    from fabric.emulation.traffic import build_plan, idle_path_check, run_plan, set_rto_min

    idle = idle_path_check(emu, transport, workdir / "idle-path")
    if args.rto_min_ms:
        set_rto_min(emu, participants, args.rto_min_ms)
    plan = build_plan(emu, transfers, transport, deadline_s=args.deadline, port_seed=args.seed)
    print(f"running {len(transfers)} transfers of {args.pattern} on {len(participants)} "
          f"endpoints...", file=sys.stderr)
    try:
        pcapping: contextlib.AbstractContextManager[list[Path]] = (
            capture(points, args.pcap, emu.state, args.pcap_packets) if args.pcap
            else contextlib.nullcontext([]))
        with pcapping as pcaps:
            result = run_plan(emu, plan, workdir)
    finally:
        if args.keep:  # the controller's log is kept with the plan and agent reports
            emu.controller.save_log(workdir / "controller.log")
    if pcaps:
        print(f"pcap: {len(pcaps)} files in {args.pcap} "
              f"({', '.join(p.name for p in pcaps)})", file=sys.stderr)
    result.fidelity.append(idle)
    return result


def _capture_points(graph: Any, args: argparse.Namespace, participants: list[str]) -> list:
    """What ``--pcap-at`` names (default: the first participant), checked on the graph."""
    from fabric.emulation.capture import capture_points

    if args.pcap is None:
        return []
    try:
        return capture_points(graph, args.pcap_at or sorted(participants)[:1])
    except ValueError as exc:
        raise UsageError(f"argument --pcap-at: {exc}") from None
