"""``fabric run NAME``: run an experiment into a new directory, then draw its figures.

Each experiment has its own parser (``fabric run NAME --help``): the options
every experiment takes, and the ones it declares itself
(:attr:`fabric.experiment.Experiment.options`).
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path
from typing import Any

from fabric import argtypes
from fabric.cli.common import (UsageError, adaptive_routing_of, add_adaptive_routing_args,
                               add_flow_control_arg, add_pcap_args, build_graph,
                               check_pcap_args, flow_control_of, preset_of)
from fabric.model import graph as fg
from fabric.model.flowcontrol import FlowControl, FlowControlError, mmu_bytes
from fabric.traffic.model import TCP_SEGMENT_BYTES

# --attempts: beyond this, repeating hides a machine too busy for the experiment
MAX_ATTEMPTS = 10


def add_parser(sub: Any) -> None:
    """Add ``run`` to the subcommands ``sub``, with one subcommand per experiment."""
    import experiments

    run = sub.add_parser("run", help="run an experiment into a new directory (root)",
                         description="Run an experiment into a new directory (root); "
                                     "`fabric run NAME --help` lists its options.")
    names = run.add_subparsers(dest="name", required=True, metavar="EXPERIMENT")
    for name in experiments.EXPERIMENTS:
        experiment = experiments.load(name)
        parser = names.add_parser(name, help=experiment.question,
                                  description=experiment.question)
        _common_args(parser)
        for option in experiment.options:
            option.add_to(parser)
        parser.set_defaults(func=cmd_run, experiment=experiment)


def _common_args(parser: argparse.ArgumentParser) -> None:
    """The options every experiment takes."""
    parser.add_argument("--quick", action="store_true",
                        help="the short variant (a few minutes; the test suite runs it)")
    parser.add_argument("--seeds", type=argtypes.integer(1, argtypes.MAX_SEEDS), default=None,
                        help="number of seeds (default: the experiment's, per variant)")
    parser.add_argument("--topo", default=None, help="topology spec (default: the experiment's)")
    parser.add_argument("--host-mbps", type=argtypes.positive_number(), default=None,
                        help="emulated host link rate (default: what the fabric sustains)")
    parser.add_argument("--out", required=True, type=argtypes.new_dir,
                        help="new directory for data, manifest, figures")
    parser.add_argument("--tcp-cc", type=argtypes.name, default="cubic",
                        help="TCP congestion control of every emulated host (default: cubic)")
    add_flow_control_arg(parser, experiment=True)
    add_adaptive_routing_args(parser, "runs routed by ar")
    parser.add_argument("--backend", choices=("emulator", "ns3"), default="emulator",
                        help="emulator: Mininet, Open vSwitch and real stacks (root; the "
                             "default); ns3: the same fabric, routes and roce transport in the "
                             "ns-3 simulator, at the graph's physical rates unless --host-mbps "
                             "is given (no root; needs scripts/setup.sh --ns3)")
    parser.add_argument("--attempts", type=argtypes.integer(1, MAX_ATTEMPTS), default=None,
                        help="how often to try a run that failed only the load-dependent "
                             "fidelity checks (OVS input delay, machine CPU); the attempts given "
                             "up are listed in discarded.csv (default: 3; 1: never repeat)")
    add_pcap_args(parser, "of every run, one subdirectory per run", "the fabric's first endpoint")


def run_context(args: argparse.Namespace) -> Any:
    """The :class:`RunContext` of ``args``, checked against the experiment (pure: a bad
    option or topology is refused before anything changes)."""
    from fabric.experiment import RunContext

    experiment = args.experiment
    if args.topo:
        build_graph(args.topo, "--topo")  # a bad spec fails here, before anything changes
    check_pcap_args(args)
    values = {o.dest: getattr(args, o.dest) for o in experiment.options}
    if values.get("transport") == "tcp":
        for dest in ("cc", "roce_mtu", "spray_entropy"):
            if values.get(dest) is not None:
                raise UsageError(f"argument --{dest.replace('_', '-')}: applies to the roce "
                                 f"transport only, not --transport tcp")
    if _takes_seed_preset(args, experiment, values):
        args.preset = experiment.seed_preset
    preset = preset_of(args)
    if preset and values.get("cc", "") is None:  # a roce experiment takes its cc
        values["cc"] = preset.cc
    for option in experiment.options:
        needed = option.requires and option.requires.lstrip("-").replace("-", "_")
        if values[option.dest] is not None and needed and values.get(needed) is None:
            raise UsageError(f"argument {option.flag}: applies to {option.requires} only")
    if experiment.sets_flow_control and (args.flow_control or preset):
        raise UsageError(f"argument {'--flow-control' if args.flow_control else '--preset'}: "
                         f"{experiment.name} sets each fabric's flow control and lanes itself")
    if args.backend == "ns3":
        _check_simulated(args, experiment)
    ctx = RunContext(Path(args.out), quick=args.quick, seeds=args.seeds, topo=args.topo,
                     host_mbps=args.host_mbps, tcp_cc=args.tcp_cc,
                     flow_control=flow_control_of(args), preset=preset, values=values,
                     backend=args.backend, adaptive_routing=adaptive_routing_of(args))
    if args.attempts is not None:
        ctx.attempts = args.attempts
    try:
        experiment.check(ctx)  # the experiment can run on this topology
    except ValueError as exc:
        raise UsageError(f"argument --topo: {exc}" if args.topo else str(exc)) from None
    if ctx.flow_control:
        _check_flow_control(ctx.flow_control, experiment.topologies(ctx))
    if args.pcap is not None:
        ctx.capture = _capture_spec(args, ctx, experiment.topologies(ctx))
    return ctx


def _takes_seed_preset(args: argparse.Namespace, experiment: Any, values: dict[str, Any]
                       ) -> bool:
    """A run of an experiment with a seed preset on its default transport (roce), with
    neither ``--preset`` nor ``--flow-control``, runs as its seed system: the preset's
    flow control, lanes, routing and congestion control (the simulator models none of
    its flow control: an ns3 run stays lossy)."""
    return bool(experiment.seed_preset and values.get("transport") in (None, "roce")
                and args.preset is None and args.flow_control is None
                and args.backend == "emulator")


def _check_simulated(args: argparse.Namespace, experiment: Any) -> None:
    """``--backend ns3``: refuse what the simulator does not model, in one line."""
    from fabric.simulation.scenario import NOT_MODELLED_CC

    if not experiment.simulates:
        raise UsageError(f"argument --backend: {experiment.name} runs on the emulator only "
                         f"(ns3 runs: {', '.join(_simulating())})")
    if getattr(args, "cc", None) in NOT_MODELLED_CC:
        raise UsageError(f"argument --cc: {NOT_MODELLED_CC[args.cc]}")
    for flag, given in (("--flow-control", args.flow_control == "pfc"),
                        ("--preset", args.preset), ("--pcap", args.pcap is not None),
                        ("--controller-app", getattr(args, "controller_app", None))):
        if given:
            raise UsageError(f"argument {flag}: not modelled by --backend ns3")


def _simulating() -> list[str]:
    import experiments

    return [name for name in experiments.EXPERIMENTS if experiments.load(name).simulates]


def _check_flow_control(fc: FlowControl, specs: list[str]) -> None:
    """Flow control ``fc`` fits every fabric the run brings up: each switch's ports fit
    the accounting and leave it a shared buffer (pure)."""
    from fabric.emulation.flowcontrol import directed_links
    from fabric.emulation.shaping import DEFAULT_FRAME_BYTES, DEFAULT_QUEUE_PKTS

    for spec in specs:
        graph = build_graph(spec, "--topo")
        try:
            directed_links(graph)
            for switch in fg.switches(graph):
                # one lossless lane, the fewest a lossless run has
                mmu_bytes(fc, DEFAULT_FRAME_BYTES, graph.degree(switch), 1, DEFAULT_QUEUE_PKTS)
        except FlowControlError as exc:
            raise UsageError(f"argument --flow-control: on {spec}: {exc}") from None


def _capture_spec(args: argparse.Namespace, ctx: Any, specs: list[str]) -> Any:
    """``fabric run --pcap``: what to capture, checked on every fabric the run brings up."""
    from fabric.experiment import CaptureSpec

    if args.pcap.absolute() == ctx.run_dir.absolute():
        raise UsageError("argument --pcap: name a directory apart from --out")
    spec = CaptureSpec(args.pcap, ctx.run_dir / "work", tuple(args.pcap_at or ()),
                       args.pcap_packets)
    for topo in specs:
        try:
            spec.points(build_graph(topo, "--topo"))
        except ValueError as exc:
            raise UsageError(f"argument --pcap-at: on {topo}: {exc}") from None
    return spec


def cmd_run(args: argparse.Namespace) -> int:
    """Run an experiment into a new directory, then draw its figures."""
    from fabric.analysis import results
    from fabric.emulation.machine_speed import machine_speed
    from fabric.host import system

    experiment = args.experiment
    ctx = run_context(args)
    if ctx.backend == "ns3":
        from fabric.simulation import simulator_binary

        simulator_binary()  # not installed: say how, before making the run directory
        speed = None  # a simulation does not depend on this machine's speed
    else:
        system.preflight()  # not root or tools missing: say so before making the run directory
        try:
            speed = machine_speed()  # before anything runs: the probe wants an idle machine
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    commit = results.git_commit()  # the code that runs: read before, not after, the run
    made = not ctx.run_dir.exists()
    run_dir = results.new_run_dir(ctx.run_dir)
    try:
        outcome = experiment.run(ctx)
    except BaseException:
        if made and not any(run_dir.iterdir()):
            run_dir.rmdir()  # refused before it wrote anything (a rate it cannot shape)
        raise
    pcap = ({"pcap": {"dir": str(args.pcap), "at": args.pcap_at or "first endpoint",
                      "packets_per_file": args.pcap_packets}} if ctx.capture else {})
    results.write_manifest(run_dir, args.name, {**outcome.parameters, "quick": args.quick,
                                                "flow_control": ("pfc" if ctx.flow_control
                                                                 else "none"),
                                                "preset": args.preset,
                                                "backend": ctx.backend,
                                                "started": ctx.started,
                                                "machine_speed": speed and speed.as_dict(),
                                                **pcap},
                           outcome.seeds, outcome.fidelity, commit=commit)
    figures = experiment.plot(run_dir)
    print(format_table(args.name, outcome))
    print("\n".join(_context_lines(args, outcome.parameters, speed)))
    print(f"results: {run_dir}  (figures: "
          f"{', '.join(p.name for p in figures if p.suffix == '.png')})")
    return 0 if outcome.valid else 1


def _context_lines(args: argparse.Namespace, parameters: dict[str, Any], speed: Any
                   ) -> list[str]:
    """The transport, the machine's speed and the captures of a finished run."""
    lines = []
    if "tcp_cc" in parameters:
        lines.append(f"transport: TCP, {parameters['tcp_cc']} congestion control in every "
                     f"host, {TCP_SEGMENT_BYTES}-byte segments")
    if "cc" in parameters:
        lines.append(f"transport: roce, {parameters['cc']} congestion control, "
                     f"{parameters['roce_mtu']}-byte payloads (RoCE path MTU)")
    if args.backend == "ns3":
        lines.append("backend: ns-3 simulation (" + (f"links scaled to {args.host_mbps:g} "
                                                     f"Mbit/s per host, as the emulator's"
                                                     if args.host_mbps else
                                                     "the graph's physical rates") + ")")
    elif speed.factor < 1 and not args.host_mbps:
        lines.append(f"machine: running at {speed.factor:.2f} of the speed the forwarding "
                     f"budget was measured at ({speed.describe()}), so the default rates are "
                     f"that share of the measured ones")
    if args.pcap is not None:
        lines.append(f"pcap: {sum(1 for _ in args.pcap.rglob('*.pcap'))} files in {args.pcap}")
    return lines


def _columns(row: dict[str, Any]) -> tuple[str, ...]:
    return tuple(row)


def format_table(name: str, outcome: Any) -> str:
    """The experiment's headline table as aligned text, theory notes and validity.

    Consecutive rows with the same columns make one block (an experiment of
    several parts has one block per part)."""
    if not outcome.table:
        return f"{name}: no rows"
    lines: list[str] = []
    for columns, rows in itertools.groupby(outcome.table, key=_columns):
        cells = [[_cell(row.get(c)) for c in columns] for row in rows]
        widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
        lines += [""] if lines else []
        lines.append("  ".join(c.rjust(w) for c, w in zip(columns, widths)))
        lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
    lines += outcome.notes
    fid = outcome.fidelity
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
