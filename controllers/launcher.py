"""Start one policy app (or your own, ``--app``) under os-ken's app manager, on
loopback by default.

os-ken 4.x has no ``osken-manager``; we load the app ourselves. The os-ken
modules that register configuration options must be imported before
``cfg.CONF`` is called, or os-ken raises ``ArgsAlreadyParsedError``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import cast

from controllers import POLICIES, runtime, userapp
from fabric import argtypes
from fabric.host.ports import PortBusyError, check_port_free
from fabric.routing.config import ControllerConfig, load_controller_config

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 6653


def build_parser(add_help: bool = True) -> argparse.ArgumentParser:
    """Arguments of ``fabric controller`` (``add_help=False`` to use it as a parent)."""
    parser = argtypes.ArgumentParser(prog="fabric controller", add_help=add_help,
                                     description="Run a routing policy as an os-ken app.")
    parser.add_argument("policy", nargs="?", choices=sorted(POLICIES),
                        help="a built-in routing policy (or give --app)")
    parser.add_argument("--app", default=None,
                        help="your own os-ken app instead: MODULE:CLASS or path/to/app.py:CLASS")
    parser.add_argument("--topo", default=None, help="topology spec (default: rail-clos)")
    parser.add_argument("--host", default=DEFAULT_HOST, type=argtypes.ip_address,
                        help="listen address (default: loopback)")
    parser.add_argument("--port", type=argtypes.port, default=DEFAULT_PORT,
                        help=f"OpenFlow listen port (default: {DEFAULT_PORT})")
    parser.add_argument("--status-file", type=argtypes.output_file, default=None,
                        help="write readiness and errors here as JSON")
    parser.add_argument("--config", type=argtypes.existing_file, default=None,
                        help="JSON: lanes (SL/VL map), rate scale, adaptive tuning")
    return parser


def main(argv: list[str] | None = None) -> int:
    """``python -m controllers``: parse arguments and :func:`run`."""
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Check the topology, config and port, then run the app until interrupted."""
    import topologies  # the builders; imported here to keep `controllers` light

    try:
        if (args.policy is None) == (args.app is None):
            raise ValueError("give either a policy or --app (one of the two)")
        graph = topologies.build(args.topo or topologies.DEFAULT_SPEC)
        try:
            config = load_controller_config(args.config) if args.config else ControllerConfig()
        except ValueError as exc:
            raise ValueError(f"argument --config: {exc}") from None
        # import the app before os-ken parses options: a broken app fails here, in one line
        # (and before the port check: what was typed wrong first, then the machine's state)
        app = (userapp.load_app_class(userapp.parse_app_spec(args.app)) if args.app
               else importlib.import_module(POLICIES[args.policy]))
        check_port_free(args.host, args.port)
    except userapp.AppSpecError as exc:
        print(f"fabric controller: argument --app: {exc}", file=sys.stderr)
        return 2
    except (ValueError, PortBusyError) as exc:
        print(f"fabric controller: {exc}", file=sys.stderr)
        return 2
    import os_ken.controller.controller  # noqa: F401  registers the ofp-* options
    from controllers.base import PolicyApp
    from os_ken import cfg
    from os_ken.base.app_manager import AppManager

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    runtime.configure(runtime.RuntimeConfig(graph, args.status_file, config))
    cfg.CONF(args=["--ofp-listen-host", args.host, "--ofp-tcp-listen-port", str(args.port)],
             project="os_ken")
    # with --app, app is the class load_app_class returned; without, the policy's module
    if args.app and args.status_file and not issubclass(cast(type, app), PolicyApp):
        # this app cannot say when its routes are in: the emulation waits for connections
        userapp.write_plain_status(args.status_file, args.app)
    try:
        if args.app:
            userapp.run_app(cast(type, app))
        else:
            AppManager.run_apps([POLICIES[args.policy]])
    except KeyboardInterrupt:
        pass
    return 0
