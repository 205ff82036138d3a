"""The ``fabric`` command's parser, built from one module per subcommand, and its entry
point: an expected failure ends in one line on stderr and exit status 2."""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any, Callable

from fabric import argtypes
from fabric.cli import clean, controller, plot, run, status, topo, traffic, up
from fabric.errors import UserError

SUBCOMMANDS = (topo, up, traffic, run, plot, controller, status, clean)


class _Terminated(BaseException):
    """SIGTERM/SIGHUP, raised so that teardown runs as for Ctrl-C."""


def _raise_terminated(signum: int, _frame: Any) -> None:
    raise _Terminated(signum)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``fabric`` command."""
    parser = argtypes.ArgumentParser(prog="fabric", description="The fabric emulator: "
                                     "topologies, bring-up, traffic, experiments, controllers.")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fabric`` console script."""
    args = build_parser().parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_terminated)
    # Python leaves SIGINT ignored when it started ignored (a background job of a script);
    # a Ctrl-C or `kill -INT` must still stop the run and clean up.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except UserError as exc:
        print(f"fabric {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fabric: interrupted; cleaned up", file=sys.stderr)
        return 130
    except _Terminated as exc:
        print("fabric: terminated; cleaned up", file=sys.stderr)
        return 128 + int(exc.args[0])
