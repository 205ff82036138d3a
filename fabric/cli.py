"""The ``fabric`` command: topo, up, controller, clean.

Every expected failure (bad spec, rate this machine cannot shape, not root,
busy port) ends in one line on stderr and exit status 2, before anything on
the system has changed.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import signal
import sys
from typing import Any, Callable

from fabric import argtypes
from fabric.emulation import capacity, shaping
from fabric.emulation.capture import DEFAULT_MAX_PACKETS as DEFAULT_PCAP_PACKETS
from fabric.emulation.capture import MAX_PACKETS_LIMIT as MAX_PCAP_PACKETS
from fabric.emulation.traffic import MIN_RTO_ROUTE_FLOOR_MS
from fabric.model.graph import TopologyError
from fabric.routing.policies import POLICIES
from fabric.traffic.model import (CONGESTION_CONTROLS, DEFAULT_ROCE_MTU, ENTROPY, ROCE_MTUS,
                                  SPRAYING, TCP_SEGMENT_BYTES)
from fabric.traffic.patterns import PATTERNS

# fabric run --attempts: beyond this, repeating hides a machine too busy for the experiment
MAX_ATTEMPTS = 10


class UsageError(ValueError):
    """Options that are valid one by one but not together."""


class _Terminated(BaseException):
    """SIGTERM/SIGHUP, raised so that teardown runs as for Ctrl-C."""


def _raise_terminated(signum: int, _frame: Any) -> None:
    raise _Terminated(signum)


def _build_graph(spec: str | None, option: str | None = None) -> Any:
    """The fabric of ``spec`` (default: rail-clos); ``option`` names where a bad spec
    came from."""
    import topologies

    try:
        return topologies.build(spec or topologies.DEFAULT_SPEC)
    except TopologyError as exc:
        if option is None:
            raise
        raise TopologyError(f"argument {option}: {exc}") from None


def cmd_topo(args: argparse.Namespace) -> int:
    """Print a fabric's summary, or its JSON, or draw it."""
    from fabric.analysis.summary import format_summary, summarize
    from fabric.model.graph import to_json_dict

    graph = _build_graph(args.spec)
    if args.png:
        from fabric.analysis.draw import draw_png

        print(f"wrote {draw_png(graph, args.png)}", file=sys.stderr)
    if args.json:
        print(json.dumps(to_json_dict(graph), indent=1))
    elif not args.png:
        print(format_summary(summarize(graph)))
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    """Bring a fabric up, check all-pairs reachability, report, tear down."""
    from fabric.analysis.summary import format_summary, summarize
    from fabric.emulation import Emulation, EmulationOptions
    from fabric.emulation.reachability import check_all_pairs

    graph = _build_graph(args.spec)
    options = EmulationOptions(policy=args.routing, host_mbps=args.host_mbps,
                               queue_pkts=args.queue_pkts, datapath=args.datapath,
                               controller_port=args.port, lanes=_lanes(args),
                               tcp_cc=args.tcp_cc, controller_app=args.controller_app,
                               remote_controller=args.controller)
    print(format_summary(summarize(graph)))
    with Emulation(graph, options) as emu:
        print(bring_up_text(emu.report))
        print(f"controller: {controller_text(args)}")
        reach = check_all_pairs(graph, emu.host)
        print(f"reachability: {reach.pairs - len(reach.failed)}/{reach.pairs} endpoint pairs "
              f"answered ping in {reach.seconds:.2f} s")
        for src, dst in reach.failed[:20]:
            print(f"  unreachable: {src} -> {dst}")
        if args.cli:
            emu.interact()
    left = emu.leftovers()
    print("teardown: verified clean (bridges, interfaces, host namespaces, processes, sysctls)"
          if not left else f"teardown: LEFT BEHIND {', '.join(left)}; run `fabric clean`")
    return 0 if reach.ok and not left else 1


def _lanes(args: argparse.Namespace) -> Any:
    from fabric.model.lanes import SINGLE_LANE, THREE_LANES, LaneConfigError, load_lane_config

    if args.lanes:
        try:
            return load_lane_config(args.lanes)
        except LaneConfigError as exc:
            raise UsageError(f"argument --lanes: {exc}") from None
    return THREE_LANES if args.isolation else SINGLE_LANE


def controller_text(args: argparse.Namespace) -> str:
    """Which controller routed the fabric: a built-in policy, your app or a remote one."""
    if args.controller_app:
        return f"your app {args.controller_app}"
    if args.controller:
        return f"{args.controller.replace(':', ' ', 1)} (already running)"
    return f"{args.routing} (built-in)"


def bring_up_text(report: Any) -> str:
    """Format a :class:`fabric.emulation.BringUpReport`."""
    plan = report.rate_plan
    phases = ", ".join(f"{k} {v:.2f}" for k, v in report.phases_s.items())
    lines = [f"datapath: {report.datapath}space Open vSwitch",
             f"rates: host links at {plan.host_mbps:g} Mbit/s "
             f"({plan.scale_mbps_per_gbps * 1000:.3g} Mbit/s emulated per physical Tbit/s); "
             f"full-load forwarding headroom x{plan.machine_headroom:.2f} "
             f"({plan.demand_pkt_hops / 1e3:.0f} of "
             f"{plan.budget_pkt_hops * plan.speed / 1e3:.0f} k packet-hops/s, "
             f"{plan.switch_ports} switch ports"
             + (f"; this machine runs at {plan.speed:.2f} of the speed the budget of "
                f"{plan.budget_pkt_hops / 1e3:.0f} k was measured at)" if plan.speed < 1
                else ")"),
             f"bring-up: {report.total_s:.2f} s ({phases})"]
    lines += [f"fidelity warning: {w}" for w in report.warnings]
    return "\n".join(lines)


def cmd_traffic(args: argparse.Namespace) -> int:
    """Run one traffic pattern on a fabric; print its summary and transfers."""
    import tempfile
    from pathlib import Path

    from fabric.analysis.report import summarize
    from fabric.emulation import Emulation, EmulationOptions
    from fabric.emulation.capture import capture
    from fabric.emulation.traffic import build_plan, idle_path_check, run_plan, set_rto_min
    from fabric.traffic.model import TransportSpec
    from fabric.traffic.patterns import PatternSpec, make_transfers

    check_traffic_args(args)
    graph = _build_graph(args.spec)
    spec = PatternSpec(args.pattern, size_bytes=args.size, ranks=args.ranks,
                       placement=args.placement, seed=args.seed, chunks=args.chunks,
                       channels=args.channels, clients=args.clients, servers=args.servers,
                       rounds=args.rounds, admission=args.admission)
    transfers, participants = make_transfers(graph, spec)
    points = _capture_points(graph, args, participants)
    transport = TransportSpec(args.transport, connections=args.connections,
                              entropy=args.entropy, cc=args.cc,
                              mtu_payload=args.roce_mtu or DEFAULT_ROCE_MTU)
    options = EmulationOptions(policy=args.routing, host_mbps=args.host_mbps,
                               queue_pkts=args.queue_pkts, datapath=args.datapath,
                               controller_port=args.port, lanes=_lanes(args),
                               tcp_cc=args.tcp_cc, controller_app=args.controller_app,
                               remote_controller=args.controller,
                               packet_bytes=transport.packet_bytes)
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="fabric-traffic-"))
    with Emulation(graph, options) as emu:
        print(bring_up_text(emu.report), file=sys.stderr)
        print(f"controller: {controller_text(args)}", file=sys.stderr)
        idle = idle_path_check(emu, transport, workdir / "idle-path")
        if args.rto_min_ms:
            set_rto_min(emu, participants, args.rto_min_ms)
        plan = build_plan(emu, transfers, transport, deadline_s=args.deadline,
                          port_seed=args.seed)
        print(f"running {len(transfers)} transfers of {spec.name} on {len(participants)} "
              f"endpoints...", file=sys.stderr)
        try:
            with (capture(points, args.pcap, emu.state, args.pcap_packets) if args.pcap
                  else contextlib.nullcontext([])) as pcaps:
                result = run_plan(emu, plan, workdir)
        finally:
            if args.keep:  # the controller's log is kept with the plan and agent reports
                emu.save_controller_log(workdir / "controller.log")
        if pcaps:
            print(f"pcap: {len(pcaps)} files in {args.pcap} "
                  f"({', '.join(p.name for p in pcaps)})", file=sys.stderr)
    result.fidelity.append(idle)
    summary = {**summarize(result, spec, participants, emu.report.rate_plan.host_mbps),
               "controller": controller_text(args)}
    rows = result.transfer_rows()
    if args.format == "csv":
        _print_csv(rows)
    else:
        print(json.dumps({"summary": summary, "transfers": rows}, indent=1, default=str))
    return 0 if result.complete else 1


def _capture_points(graph: Any, args: argparse.Namespace, participants: list[str]) -> list:
    """What ``--pcap-at`` names (default: the first participant), checked on the graph."""
    from fabric.emulation.capture import capture_points

    if args.pcap is None:
        return []
    try:
        return capture_points(graph, args.pcap_at or sorted(participants)[:1])
    except ValueError as exc:
        raise UsageError(f"argument --pcap-at: {exc}") from None


def _print_csv(rows: list[dict]) -> None:
    import csv

    keys = sorted({k for row in rows for k in row})
    writer = csv.DictWriter(sys.stdout, fieldnames=keys)
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("/".join(map(str, v)) if isinstance(v, list) else v)
                         for k, v in row.items()})


def cmd_run(args: argparse.Namespace) -> int:
    """Run an experiment into a new directory, then draw its figures."""
    import importlib
    from pathlib import Path

    from experiments import EXPERIMENTS
    from experiments.common import RunContext
    from fabric.analysis import results
    from fabric.emulation import system
    from fabric.emulation.machine_speed import machine_speed

    if args.topo:
        _build_graph(args.topo, "--topo")  # a bad spec fails here, before anything changes
    module = importlib.import_module(EXPERIMENTS[args.name])
    _check_controller_app(args, module)
    _check_pcap_args(args)
    if args.spray_entropy and not getattr(module, "TAKES_SPRAY_ENTROPY", False):
        raise UsageError(f"argument --spray-entropy: {args.name} has no spraying senders "
                         f"(collisions and failures have)")
    if args.roce_mtu and not getattr(module, "TAKES_ROCE_MTU", False):
        raise UsageError(f"argument --roce-mtu: {args.name} has no roce senders "
                         f"(collisions and failures have)")
    ctx = RunContext(Path(args.out), quick=args.quick, seeds=args.seeds, topo=args.topo,
                     host_mbps=args.host_mbps, cc=args.cc, tcp_cc=args.tcp_cc,
                     controller_app=args.controller_app,
                     app_entropy=args.app_entropy or "flow",
                     spray_entropy=args.spray_entropy or "recycle",
                     roce_mtu=args.roce_mtu or DEFAULT_ROCE_MTU)
    if args.attempts is not None:
        ctx.attempts = args.attempts
    try:
        module.check(ctx)  # the experiment can run on this topology
    except ValueError as exc:
        raise UsageError(f"argument --topo: {exc}" if args.topo else str(exc)) from None
    if args.pcap is not None:
        ctx.capture = _run_capture(args, ctx, module.fabric_specs(ctx))
    system.preflight()  # not root or tools missing: say so before making the run directory
    try:
        speed = machine_speed()  # before anything runs: the probe wants an idle machine
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    made = not ctx.run_dir.exists()
    run_dir = results.new_run_dir(ctx.run_dir)
    try:
        outcome = module.run(ctx)
    except BaseException:
        if made and not any(run_dir.iterdir()):
            run_dir.rmdir()  # refused before it wrote anything (a rate it cannot shape)
        raise
    pcap = ({"pcap": {"dir": str(args.pcap), "at": args.pcap_at or "first endpoint",
                      "packets_per_file": args.pcap_packets}} if ctx.capture else {})
    results.write_manifest(run_dir, args.name, {**outcome["parameters"], "quick": args.quick,
                                                "started": ctx.started,
                                                "machine_speed": speed.as_dict(), **pcap},
                           outcome["seeds"], outcome["fidelity"])
    figures = module.plot(run_dir)
    print(format_table(args.name, outcome))
    parameters = outcome["parameters"]
    if "tcp_cc" in parameters:
        print(f"transport: TCP, {parameters['tcp_cc']} congestion control in every host, "
              f"{TCP_SEGMENT_BYTES}-byte segments")
    if "cc" in parameters:
        print(f"transport: roce, {parameters['cc']} congestion control, "
              f"{parameters['roce_mtu']}-byte payloads (RoCE path MTU)")
    if speed.factor < 1 and not args.host_mbps:
        print(f"machine: running at {speed.factor:.2f} of the speed the forwarding budget "
              f"was measured at ({speed.describe()}), so the default rates are that share "
              f"of the measured ones")
    if ctx.capture:
        print(f"pcap: {sum(1 for _ in args.pcap.rglob('*.pcap'))} files in {args.pcap}")
    print(f"results: {run_dir}  (figures: {', '.join(p.name for p in figures if p.suffix == '.png')})")
    return 0 if outcome["fidelity"]["valid"] else 1


def format_table(name: str, outcome: dict) -> str:
    """The experiment's headline table as aligned text, theory notes and validity.

    Consecutive rows with the same columns make one block (an experiment of
    several parts has one block per part)."""
    table = outcome["table"]
    if not table:
        return f"{name}: no rows"
    lines: list[str] = []
    for columns, rows in itertools.groupby(table, key=lambda row: tuple(row)):
        cells = [[_cell(row.get(c)) for c in columns] for row in rows]
        widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
        lines += [""] if lines else []
        lines.append("  ".join(c.rjust(w) for c, w in zip(columns, widths)))
        lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
    lines += outcome.get("notes", [])
    fid = outcome["fidelity"]
    failed = [c["name"] for c in fid["checks"] if not c["ok"]]
    repeated = fid.get("repeated_runs")
    lines.append(f"fidelity: {'valid' if fid['valid'] else 'INVALID (' + ', '.join(failed) + ')'}"
                 f" over {fid['runs']} runs"
                 + (f"; {repeated} repeated after the machine's load invalidated an attempt "
                    f"({fid['discarded_attempts']} discarded, see discarded.csv)"
                    if repeated else ""))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return "-" if value is None else str(value)


def cmd_plot(args: argparse.Namespace) -> int:
    """Redraw an experiment's figures from its run directory (no root)."""
    import importlib
    from pathlib import Path

    from experiments import EXPERIMENTS
    from fabric.analysis import results

    run_dir = Path(args.dir)
    try:
        name = results.read_json(run_dir / "summary.json")["experiment"]
    except (OSError, ValueError, KeyError):
        raise results.ResultsError(f"{run_dir} has no readable summary.json") from None
    figures = importlib.import_module(EXPERIMENTS[name]).plot(run_dir)
    print("\n".join(str(p) for p in figures))
    return 0


def cmd_controller(args: argparse.Namespace) -> int:
    """Run a controller in the foreground (delegates to the launcher)."""
    from controllers import launcher

    return launcher.run(args)


def cmd_clean(_args: argparse.Namespace) -> int:
    """Undo the leftovers of runs that were killed."""
    from fabric.emulation import ovs, runstate, system

    if not _is_root():
        raise system.HostSetupError("fabric clean needs root: run with sudo")
    states = runstate.load_all()
    for state in states:
        if system.running(state.owner_pid):
            print(f"run {state.run_id} is still active (pid {state.owner_pid}); skipped")
            continue
        for line in runstate.undo(state) or ["nothing left"]:
            print(f"{state.run_id}: {line}")
    if ovs.OVS_SCRIPTS.exists():
        ovs.ensure_db()  # bridges of a run whose state is gone live only in the database
    orphans = runstate.orphan_bridges()
    ovs.delete_bridges(orphans)
    if orphans:
        print(f"deleted {len(orphans)} bridges of runs that left no state: {', '.join(orphans)}")
    if not states and not orphans:
        print("no leftovers")
    return 0


def _is_root() -> bool:
    import os

    return os.geteuid() == 0


def _run_capture(args: argparse.Namespace, ctx: Any, specs: list[str]) -> Any:
    """``fabric run --pcap``: what to capture, checked on every fabric the run brings up."""
    from experiments.common import CaptureSpec

    if args.pcap.absolute() == ctx.run_dir.absolute():
        raise UsageError("argument --pcap: name a directory apart from --out")
    spec = CaptureSpec(args.pcap, ctx.run_dir / "work", tuple(args.pcap_at or ()),
                       args.pcap_packets)
    for topo in specs:
        try:
            spec.points(_build_graph(topo, "--topo"))
        except ValueError as exc:
            raise UsageError(f"argument --pcap-at: on {topo}: {exc}") from None
    return spec


def _check_controller_app(args: argparse.Namespace, module: Any) -> None:
    """``fabric run``: a user's app goes only where the experiment takes one, under a
    name no built-in policy has."""
    if args.controller_app is None:
        if args.app_entropy is not None:
            raise UsageError("argument --app-entropy: applies to --controller-app only")
        return
    if not getattr(module, "TAKES_CONTROLLER_APP", False):
        raise UsageError(f"argument --controller-app: {args.name} runs its own policies; "
                         f"collisions takes your app as one more")
    name = args.controller_app.rpartition(":")[2]
    if name in POLICIES:
        raise UsageError(f"argument --controller-app: class {name!r} has a built-in policy's "
                         f"name; rename it")


def _controller_app(text: str) -> str:
    """An app spec whose class imports and is an os-ken app (checked before bring-up)."""
    from controllers import userapp

    try:
        spec = userapp.parse_app_spec(text)
        userapp.load_app_class(spec)
    except userapp.AppSpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return str(spec)


def _remote_controller(text: str) -> str:
    """A ``remote:HOST:PORT`` on loopback (whether it listens is checked at bring-up)."""
    from fabric.emulation.system import parse_remote_controller

    try:
        parse_remote_controller(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _emulation_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--routing", default="ecmp", choices=POLICIES,
                        help="routing policy (default: ecmp)")
    lanes = parser.add_mutually_exclusive_group()
    lanes.add_argument("--isolation", action="store_true",
                       help="three virtual lanes: collective (DSCP 26), storage (DSCP 10), rest")
    lanes.add_argument("--lanes", metavar="FILE", type=argtypes.existing_file,
                       help="SL/VL map and lane shares (JSON)")
    parser.add_argument("--host-mbps", type=argtypes.positive_number(), default=None,
                        help="emulated rate of the fastest host link; all links scale alike "
                             "(default: the highest rate, up to 20, at which the fabric's full "
                             "load stays within what this machine forwards faithfully)")
    parser.add_argument("--queue-pkts", type=argtypes.integer(1, argtypes.MAX_QUEUE_PKTS),
                        default=shaping.DEFAULT_QUEUE_PKTS,
                        help=f"egress buffer of every link, in packets "
                             f"(default: {shaping.DEFAULT_QUEUE_PKTS})")
    parser.add_argument("--datapath", choices=("auto", "kernel", "user"), default="auto")
    parser.add_argument("--tcp-cc", type=argtypes.name, default="cubic",
                        help="TCP congestion control of every emulated host, one this kernel "
                             "has (default: cubic)")
    parser.add_argument("--port", type=argtypes.port, default=6653,
                        help="controller port on loopback (default: 6653)")
    controller = parser.add_mutually_exclusive_group()
    controller.add_argument("--controller-app", metavar="MODULE:CLASS", type=_controller_app,
                            default=None,
                            help="run your own os-ken app (MODULE:CLASS or path/to/app.py:CLASS) "
                                 "instead of --routing's; it reads the fabric graph and rate "
                                 "scale from controllers.runtime.current()")
    controller.add_argument("--controller", metavar="remote:HOST:PORT", type=_remote_controller,
                            default=None,
                            help="use a controller that is already running on loopback (e.g. "
                                 "remote:127.0.0.1:6633) instead of starting one")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``fabric`` command."""
    from controllers import launcher
    from experiments import EXPERIMENTS

    count = argtypes.integer(1)
    parser = argtypes.ArgumentParser(prog="fabric", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    topo = sub.add_parser("topo", help="describe a topology (no root needed)")
    topo.add_argument("spec", nargs="?", help="e.g. rail-clos,servers=8,gpus=2")
    topo.add_argument("--json", action="store_true", help="print nodes and links as JSON")
    topo.add_argument("--png", metavar="FILE", type=argtypes.figure_file,
                      help="draw the fabric into FILE (.png, .pdf or .svg)")
    topo.set_defaults(func=cmd_topo)

    up = sub.add_parser("up", help="bring a fabric up, check reachability, tear down (root)")
    up.add_argument("spec", nargs="?", help="topology spec (default: rail-clos)")
    _emulation_args(up)
    up.add_argument("--cli", action="store_true", help="open the Mininet CLI before teardown")
    up.set_defaults(func=cmd_up)

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
    traffic.add_argument("--chunks", type=count, default=1)
    traffic.add_argument("--channels", type=count, default=1)
    traffic.add_argument("--clients", type=count, default=1)
    traffic.add_argument("--servers", type=count, default=4, help="storage senders (incast)")
    traffic.add_argument("--rounds", type=count, default=4)
    traffic.add_argument("--admission", type=count, default=None,
                         help="at most W stripes outstanding at a client")
    traffic.add_argument("--rto-min-ms", type=argtypes.integer(MIN_RTO_ROUTE_FLOOR_MS),
                         default=None, help=f"per-route minimum RTO (>= "
                                            f"{MIN_RTO_ROUTE_FLOOR_MS}: the kernel's floor)")
    traffic.add_argument("--transport", choices=("tcp", "roce"), default="tcp")
    traffic.add_argument("--connections", type=count, default=1,
                         help="tcp: connections per peer")
    traffic.add_argument("--entropy", choices=ENTROPY, default="flow",
                         help="roce: one UDP source port per flow, a new one per packet, or "
                              "per packet recycling the ports that did not queue (REPS)")
    traffic.add_argument("--cc", choices=CONGESTION_CONTROLS, default="swift",
                         help="roce: congestion control, delay-based swift, ECN-driven "
                              "dcqcn or loss-based AIMD (default: swift)")
    traffic.add_argument("--roce-mtu", type=int, choices=ROCE_MTUS, default=None,
                         help=f"roce: payload bytes per packet, the RoCE path MTU (default: "
                              f"{DEFAULT_ROCE_MTU}; 1024 is the largest a 1500-byte "
                              f"Ethernet MTU carries)")
    traffic.add_argument("--deadline", type=argtypes.positive_number(), default=120.0,
                         help="seconds")
    _pcap_args(traffic, "while the traffic runs", "the first endpoint of the pattern")
    traffic.add_argument("--format", choices=("json", "csv"), default="json")
    traffic.add_argument("--keep", metavar="DIR", type=argtypes.new_dir,
                         help="keep plan, agent reports and logs (the controller's too) in this "
                              "new directory")
    _emulation_args(traffic)
    traffic.set_defaults(func=cmd_traffic)

    run = sub.add_parser("run", help="run an experiment into a new directory (root)")
    run.add_argument("name", choices=sorted(EXPERIMENTS))
    run.add_argument("--quick", action="store_true", help="the short variant (< 2 min)")
    run.add_argument("--seeds", type=argtypes.integer(1, argtypes.MAX_SEEDS), default=None,
                     help="number of seeds")
    run.add_argument("--topo", default=None, help="topology spec (default: the experiment's)")
    run.add_argument("--host-mbps", type=argtypes.positive_number(), default=None,
                     help="emulated host link rate (default: what the fabric sustains)")
    run.add_argument("--out", required=True, type=argtypes.new_dir,
                     help="new directory for data, manifest, figures")
    run.add_argument("--cc", choices=CONGESTION_CONTROLS, default="swift",
                     help="congestion control of the roce transport (default: swift)")
    run.add_argument("--tcp-cc", type=argtypes.name, default="cubic",
                     help="TCP congestion control of every emulated host (default: cubic)")
    run.add_argument("--controller-app", metavar="MODULE:CLASS", type=_controller_app,
                     default=None,
                     help="collisions: your own os-ken app as one more policy, named by its "
                          "class")
    run.add_argument("--app-entropy", choices=ENTROPY, default=None,
                     help="with --controller-app: one UDP source port per flow (default), a "
                          "new one per packet (spraying), or spraying that recycles the ports "
                          "that did not queue")
    run.add_argument("--roce-mtu", type=int, choices=ROCE_MTUS, default=None,
                     help=f"collisions, failures: payload bytes per roce packet, the RoCE "
                          f"path MTU (default: {DEFAULT_ROCE_MTU}; 1024 is the largest a "
                          f"1500-byte Ethernet MTU carries)")
    run.add_argument("--spray-entropy", choices=SPRAYING, default=None,
                     help="collisions, failures: how the spray and adaptive senders pick "
                          "source ports: recycling the ones echoed as uncongested (REPS, "
                          "default) or simply the next one per packet")
    run.add_argument("--attempts", type=argtypes.integer(1, MAX_ATTEMPTS), default=None,
                     help="how often to try a run that failed only the load-dependent "
                          "fidelity checks (OVS input delay, machine CPU); the attempts given "
                          "up are listed in discarded.csv (default: 3; 1: never repeat)")
    _pcap_args(run, "of every run, one subdirectory per run", "the fabric's first endpoint")
    run.set_defaults(func=cmd_run)

    plot = sub.add_parser("plot", help="draw an experiment's figures from its directory")
    plot.add_argument("dir", type=argtypes.existing_dir)
    plot.set_defaults(func=cmd_plot)

    ctl = sub.add_parser("controller", parents=[launcher.build_parser(add_help=False)],
                         help="run a routing policy app in the foreground")
    ctl.set_defaults(func=cmd_controller)

    clean = sub.add_parser("clean", help="remove what killed runs left behind (root)")
    clean.set_defaults(func=cmd_clean)
    return parser


def _pcap_args(parser: argparse.ArgumentParser, when: str, default_at: str) -> None:
    parser.add_argument("--pcap", metavar="DIR", type=argtypes.new_dir, default=None,
                        help=f"write packet captures (pcap, headers only) into this new "
                             f"directory, {when}")
    parser.add_argument("--pcap-at", metavar="WHERE", action="append", default=None,
                        help=f"an endpoint (all its links) or a link a-b to capture; repeat "
                             f"for more (default: {default_at})")
    parser.add_argument("--pcap-packets", type=argtypes.integer(1, MAX_PCAP_PACKETS),
                        default=DEFAULT_PCAP_PACKETS,
                        help=f"at most this many packets per capture file (default: "
                             f"{DEFAULT_PCAP_PACKETS})")


def _check_pcap_args(args: argparse.Namespace) -> None:
    if args.pcap is None and (args.pcap_at or args.pcap_packets != DEFAULT_PCAP_PACKETS):
        raise UsageError("argument --pcap-at/--pcap-packets: give --pcap DIR as well")


def check_traffic_args(args: argparse.Namespace) -> None:
    """Refuse options that the chosen transport (or a missing --pcap) would silently
    ignore."""
    _check_pcap_args(args)
    if args.transport != "roce" and args.entropy != "flow":
        raise UsageError("argument --entropy: applies to --transport roce only")
    if args.transport != "tcp" and args.connections != 1:
        raise UsageError("argument --connections: applies to --transport tcp only")
    if args.transport != "roce" and args.cc != "swift":
        raise UsageError("argument --cc: applies to --transport roce only (TCP: --tcp-cc)")
    if args.transport != "roce" and args.roce_mtu is not None:
        raise UsageError("argument --roce-mtu: applies to --transport roce only "
                         "(TCP sends 1448-byte segments)")


def user_errors() -> tuple[type[BaseException], ...]:
    """The exceptions whose message is all a user needs (printed without a traceback);
    benchmarks catch the same ones."""
    from fabric.analysis.results import ResultsError
    from fabric.emulation import EmulationError
    from fabric.emulation.system import HostSetupError, PortBusyError
    from fabric.emulation.traffic import TrafficError
    from fabric.model.lanes import LaneConfigError
    from fabric.traffic.model import ScheduleError

    return (UsageError, TopologyError, capacity.CapacityError, HostSetupError, EmulationError,
            PortBusyError, LaneConfigError, ScheduleError, TrafficError, ResultsError)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fabric`` console script."""
    args = build_parser().parse_args(argv)
    expected = user_errors()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_terminated)
    # Python leaves SIGINT ignored when it started ignored (a background job of a script);
    # a Ctrl-C or `kill -INT` must still stop the run and clean up.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except expected as exc:
        print(f"fabric {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fabric: interrupted; cleaned up", file=sys.stderr)
        return 130
    except _Terminated as exc:
        print("fabric: terminated; cleaned up", file=sys.stderr)
        return 128 + int(exc.args[0])


if __name__ == "__main__":
    sys.exit(main())
