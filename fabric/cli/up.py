"""``fabric up``: bring a fabric up, check all-pairs reachability, report, tear down."""

from __future__ import annotations

import argparse
from typing import Any

from fabric.cli.common import (add_emulation_args, bring_up_text, build_graph, controller_text,
                               emulation_options, spec_of)


def add_parser(sub: Any) -> None:
    """Add ``up`` to the subcommands ``sub``."""
    up = sub.add_parser("up", help="bring a fabric up, check reachability, tear down (root)")
    up.add_argument("spec", nargs="?", help="topology spec (default: rail-clos)")
    add_emulation_args(up)
    up.add_argument("--cli", action="store_true", help="open the Mininet CLI before teardown")
    up.set_defaults(func=cmd_up)


def cmd_up(args: argparse.Namespace) -> int:
    """Bring a fabric up, check all-pairs reachability, report, tear down."""
    from fabric.analysis.summary import format_summary, summarize
    from fabric.emulation import Emulation
    from fabric.emulation.reachability import check_all_pairs

    graph = build_graph(spec_of(args))
    options = emulation_options(args)
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
