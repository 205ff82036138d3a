"""``fabric controller``: run a routing policy app in the foreground."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    """Add ``controller`` to the subcommands ``sub`` (the launcher's own arguments)."""
    from controllers import launcher

    ctl = sub.add_parser("controller", parents=[launcher.build_parser(add_help=False)],
                         help="run a routing policy app in the foreground")
    ctl.set_defaults(func=cmd_controller)


def cmd_controller(args: argparse.Namespace) -> int:
    """Run a controller in the foreground (delegates to the launcher)."""
    from controllers import launcher

    return launcher.run(args)
