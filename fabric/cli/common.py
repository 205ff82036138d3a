"""What several subcommands share: the bring-up options, argument types that check
what they name, and how a bring-up and its controller are described."""

from __future__ import annotations

import argparse
import csv
import sys
from typing import Any

from fabric import argtypes
from fabric.emulation import shaping
from fabric.emulation.capture import DEFAULT_MAX_PACKETS as DEFAULT_PCAP_PACKETS
from fabric.emulation.capture import MAX_PACKETS_LIMIT as MAX_PCAP_PACKETS
from fabric.errors import UserError
from fabric.model.flowcontrol import MODES, FlowControl
from fabric.model.presets import PRESETS, Preset
from fabric.model.graph import TopologyError
from fabric.routing.policies import POLICIES
from fabric.routing.switch_ar import MAX_FLOWLET_GAP_PKTS, MAX_THRESHOLD_PKTS, ArParams


class UsageError(UserError, ValueError):
    """Options that are valid one by one but not together."""


def spec_of(args: argparse.Namespace) -> str | None:
    """The topology spec of ``fabric up/traffic``: the one given, or the preset's."""
    preset = preset_of(args)
    return args.spec or (preset.topology if preset else None)


def build_graph(spec: str | None, option: str | None = None) -> Any:
    """The fabric of ``spec`` (default: rail-clos); ``option`` names where a bad spec
    came from."""
    import topologies

    try:
        return topologies.build(spec or topologies.DEFAULT_SPEC)
    except TopologyError as exc:
        if option is None:
            raise
        raise TopologyError(f"argument {option}: {exc}") from None


def controller_app(text: str) -> str:
    """An app spec whose class imports and is an os-ken app (checked before bring-up)."""
    from controllers import userapp

    return userapp.app_spec_argument(text)


def remote_controller(text: str) -> str:
    """A ``remote:HOST:PORT`` on loopback (whether it listens is checked at bring-up)."""
    from fabric.host.ports import parse_remote_controller

    try:
        parse_remote_controller(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_emulation_args(parser: argparse.ArgumentParser) -> None:
    """The options of a bring-up: routing, lanes, rates, buffers, datapath, controller."""
    parser.add_argument("--routing", default=None, choices=POLICIES,
                        help="routing policy (default: the preset's, or ecmp)")
    add_adaptive_routing_args(parser, "--routing ar")
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
    add_flow_control_arg(parser)
    parser.add_argument("--tcp-cc", type=argtypes.name, default="cubic",
                        help="TCP congestion control of every emulated host, one this kernel "
                             "has (default: cubic)")
    parser.add_argument("--port", type=argtypes.port, default=6653,
                        help="controller port on loopback (default: 6653)")
    controller = parser.add_mutually_exclusive_group()
    controller.add_argument("--controller-app", metavar="MODULE:CLASS", type=controller_app,
                            default=None,
                            help="run your own os-ken app (MODULE:CLASS or path/to/app.py:CLASS) "
                                 "instead of --routing's; it reads the fabric graph and rate "
                                 "scale from controllers.runtime.current()")
    controller.add_argument("--controller", metavar="remote:HOST:PORT", type=remote_controller,
                            default=None,
                            help="use a controller that is already running on loopback (e.g. "
                                 "remote:127.0.0.1:6633) instead of starting one")


def add_adaptive_routing_args(parser: argparse.ArgumentParser, applies: str) -> None:
    """``--ar-threshold`` and ``--ar-flowlet-gap``: the switches' choice under ``ar``."""
    parser.add_argument("--ar-threshold", metavar="PKTS", default=None,
                        type=argtypes.integer(0, MAX_THRESHOLD_PKTS),
                        help=f"{applies}: keep the port the flow hash picked while it holds at "
                             "most PKTS packets (default: none, every packet goes to the least "
                             "occupied port)")
    parser.add_argument("--ar-flowlet-gap", metavar="PKTS", default=None,
                        type=argtypes.positive_number(MAX_FLOWLET_GAP_PKTS),
                        help=f"{applies}: keep a flow on its last port until it has been idle "
                             "this many packet times of a host link (flowlet switching; "
                             "default: decide every packet)")


def adaptive_routing_of(args: argparse.Namespace) -> ArParams:
    """The :class:`ArParams` of ``--ar-threshold`` and ``--ar-flowlet-gap``."""
    return ArParams(args.ar_threshold, args.ar_flowlet_gap)


def add_flow_control_arg(parser: argparse.ArgumentParser, experiment: bool = False) -> None:
    """``--flow-control none|pfc`` and ``--preset NAME`` (for ``fabric run`` if
    ``experiment``: the experiment keeps its topology and lanes)."""
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None,
                        help="a seed system's fabric: " + (
                            "its flow control, congestion control and, where the experiment "
                            "sets none, routing and lanes (the experiment keeps its topology "
                            "unless --topo)" if experiment else
                            "its topology (when none is given), routing, lanes, flow control "
                            "and congestion control"))
    lanes = ("every lane the experiment's fabrics keep lossless" if experiment else
             "a lane is lossless unless its --lanes entry says \"lossless\": false")
    parser.add_argument("--flow-control", choices=MODES, default=None,
                        help="link-level flow control: none (lossy Ethernet, the default) or "
                             "pfc (lossless lanes pause their upstream link instead of "
                             f"dropping; {lanes}; default: the preset's, or none)")


def preset_of(args: argparse.Namespace) -> Preset | None:
    """The preset ``--preset`` names (None: none)."""
    name = getattr(args, "preset", None)
    return PRESETS[name] if name else None


def flow_control_of(args: argparse.Namespace) -> FlowControl | None:
    """The flow control ``--flow-control`` (or else the preset) asks for; None: lossy."""
    preset = preset_of(args)
    mode = args.flow_control or ("pfc" if preset and preset.flow_control else "none")
    return FlowControl() if mode == "pfc" else None


def emulation_options(args: argparse.Namespace, **extra: Any) -> Any:
    """The :class:`EmulationOptions` the bring-up options of ``args`` ask for (what they
    leave out, from ``--preset``)."""
    from fabric.emulation import EmulationOptions

    preset = preset_of(args)
    policy = args.routing or (preset.policy if preset else "ecmp")
    for flag in ("--ar-threshold", "--ar-flowlet-gap"):
        if getattr(args, flag[2:].replace("-", "_")) is not None and policy != "ar":
            raise UsageError(f"argument {flag}: applies to --routing ar only")
    return EmulationOptions(policy=policy, adaptive_routing=adaptive_routing_of(args),
                            host_mbps=args.host_mbps,
                            queue_pkts=args.queue_pkts, datapath=args.datapath,
                            controller_port=args.port, lanes=lanes_of(args),
                            tcp_cc=args.tcp_cc, controller_app=args.controller_app,
                            remote_controller=args.controller,
                            flow_control=flow_control_of(args), **extra)


def lanes_of(args: argparse.Namespace) -> Any:
    """The lane config of ``--lanes FILE`` or ``--isolation`` (default: one lane)."""
    from fabric.model.lanes import SINGLE_LANE, THREE_LANES, LaneConfigError, load_lane_config

    if args.lanes:
        try:
            return load_lane_config(args.lanes)
        except LaneConfigError as exc:
            raise UsageError(f"argument --lanes: {exc}") from None
    if args.isolation:
        return THREE_LANES
    preset = preset_of(args)
    return preset.lanes if preset else SINGLE_LANE


def controller_text(args: argparse.Namespace) -> str:
    """Which controller routed the fabric: a built-in policy, your app or a remote one."""
    if args.controller_app:
        return f"your app {args.controller_app}"
    if args.controller:
        return f"{args.controller.replace(':', ' ', 1)} (already running)"
    preset = preset_of(args)
    return f"{args.routing or (preset.policy if preset else 'ecmp')} (built-in)"


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


def add_pcap_args(parser: argparse.ArgumentParser, when: str, default_at: str) -> None:
    """``--pcap DIR``, ``--pcap-at WHERE`` and ``--pcap-packets N``."""
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


def check_pcap_args(args: argparse.Namespace) -> None:
    """``--pcap-at`` and ``--pcap-packets`` need ``--pcap``."""
    if args.pcap is None and (args.pcap_at or args.pcap_packets != DEFAULT_PCAP_PACKETS):
        raise UsageError("argument --pcap-at/--pcap-packets: give --pcap DIR as well")


def print_csv(rows: list[dict]) -> None:
    """Rows as CSV on stdout (list values joined with ``/``)."""
    keys = sorted({k for row in rows for k in row})
    writer = csv.DictWriter(sys.stdout, fieldnames=keys)
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("/".join(map(str, v)) if isinstance(v, list) else v)
                         for k, v in row.items()})
