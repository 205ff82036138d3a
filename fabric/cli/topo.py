"""``fabric topo``: describe a topology (no root needed)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from fabric import argtypes
from fabric.cli.common import build_graph


def add_parser(sub: Any) -> None:
    """Add ``topo`` to the subcommands ``sub``."""
    topo = sub.add_parser("topo", help="describe a topology (no root needed)")
    topo.add_argument("spec", nargs="?", help="e.g. rail-clos,servers=8,gpus=2")
    topo.add_argument("--json", action="store_true", help="print nodes and links as JSON")
    topo.add_argument("--png", metavar="FILE", type=argtypes.figure_file,
                      help="draw the fabric into FILE (.png, .pdf or .svg)")
    topo.set_defaults(func=cmd_topo)


def cmd_topo(args: argparse.Namespace) -> int:
    """Print a fabric's summary, or its JSON, or draw it."""
    from fabric.analysis.summary import format_summary, summarize
    from fabric.model.graph import to_json_dict

    graph = build_graph(args.spec)
    if args.png:
        from fabric.analysis.draw import draw_png

        print(f"wrote {draw_png(graph, args.png)}", file=sys.stderr)
    if args.json:
        print(json.dumps(to_json_dict(graph), indent=1))
    elif not args.png:
        print(format_summary(summarize(graph)))
    return 0
