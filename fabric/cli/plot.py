"""``fabric plot``: redraw an experiment's figures from its run directory (no root)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fabric import argtypes


def add_parser(sub: Any) -> None:
    """Add ``plot`` to the subcommands ``sub``."""
    plot = sub.add_parser("plot", help="draw an experiment's figures from its directory")
    plot.add_argument("dir", type=argtypes.existing_dir)
    plot.add_argument("--no-provenance", dest="provenance", action="store_false",
                      help="leave out the footer naming the run (commit, date, topology, host "
                           "rate, transport, seeds...), e.g. for a paper that states it in the "
                           "caption; the PNG and PDF metadata keep it")
    plot.set_defaults(func=cmd_plot)


def cmd_plot(args: argparse.Namespace) -> int:
    """Redraw an experiment's figures from its run directory (no root)."""
    import experiments
    from fabric.analysis import results

    run_dir = Path(args.dir)
    try:
        name = results.read_json(run_dir / "summary.json")["experiment"]
        experiment = experiments.load(name)
    except (OSError, ValueError, KeyError):
        raise results.ResultsError(f"{run_dir} has no readable summary.json") from None
    print("\n".join(str(p) for p in experiment.plot(run_dir, args.provenance)))
    return 0
