"""``python -m fabric.agent --plan PLAN.json --host NAME --out RESULT.json``."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from fabric.agent.runner import AgentOptions, run_agent


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the agent, return its exit code (0: all complete)."""
    parser = argparse.ArgumentParser(prog="python -m fabric.agent",
                                     description="Run one host's share of a traffic plan.")
    parser.add_argument("--plan", type=Path, required=True, help="plan JSON (Plan.to_json)")
    parser.add_argument("--host", required=True, help="this endpoint's name in the plan")
    parser.add_argument("--out", type=Path, required=True, help="where to write the result")
    parser.add_argument("--tcp-port", type=int, default=None, help="default 7100")
    parser.add_argument("--roce-port", type=int, default=None, help="default 4791")
    parser.add_argument("--connect-timeout", type=float, default=None,
                        help="seconds to keep retrying a TCP connect (default 5)")
    parser.add_argument("--start-gate", action="store_true",
                        help="print READY once listening, then read the start time "
                             "(wall-clock seconds) from stdin instead of the plan's")
    args = parser.parse_args(argv)
    options = AgentOptions(start_gate=args.start_gate)
    tcp, roce = options.tcp, options.roce
    if args.tcp_port is not None:
        tcp = dataclasses.replace(tcp, port=args.tcp_port)
    if args.connect_timeout is not None:
        tcp = dataclasses.replace(tcp, connect_timeout_s=args.connect_timeout)
    if args.roce_port is not None:
        roce = dataclasses.replace(roce, port=args.roce_port)
    return run_agent(args.plan, args.host, args.out,
                     dataclasses.replace(options, tcp=tcp, roce=roce))


if __name__ == "__main__":
    sys.exit(main())
