"""``python -m fabric.agent --plan PLAN.json --host NAME --out RESULT.json``.

Several ``--host`` run in one process (one event loop); ``--out`` then names
each result with ``{host}``, e.g. ``--out 'agent-{host}.json'``. A host given
``--netns-pid HOST=PID`` is served from outside its network namespace: its
sockets are opened in that of process PID.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from fabric.agent.runner import AgentOptions, run_agent


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the agent, return its exit code (0: all complete)."""
    parser = argparse.ArgumentParser(prog="python -m fabric.agent",
                                     description="Run hosts' shares of a traffic plan.")
    parser.add_argument("--plan", type=Path, required=True, help="plan JSON (Plan.to_json)")
    parser.add_argument("--host", required=True, action="append", dest="hosts",
                        help="an endpoint's name in the plan (repeat to serve several)")
    parser.add_argument("--out", required=True,
                        help="where to write the result; with several hosts a path "
                             "containing {host}")
    parser.add_argument("--netns-pid", action="append", default=[], metavar="HOST=PID",
                        help="open HOST's sockets in the network namespace of process PID")
    parser.add_argument("--tcp-port", type=int, default=None, help="default 7100")
    parser.add_argument("--roce-port", type=int, default=None, help="default 4791")
    parser.add_argument("--connect-timeout", type=float, default=None,
                        help="seconds to keep retrying a TCP connect (default 5)")
    parser.add_argument("--start-gate", action="store_true",
                        help="print READY once listening, then read the start time "
                             "(wall-clock seconds) from stdin instead of the plan's")
    args = parser.parse_args(argv)
    if len(set(args.hosts)) != len(args.hosts):
        parser.error("--host: each host once")
    if len(args.hosts) > 1 and "{host}" not in args.out:
        parser.error("--out must contain {host} when several hosts are given")
    outs = {host: Path(args.out.replace("{host}", host)) for host in args.hosts}
    netns_pids: dict[str, int] = {}
    for item in args.netns_pid:
        host, _, pid = item.partition("=")
        if host not in args.hosts or not pid.isdigit() or int(pid) <= 0:
            parser.error(f"--netns-pid {item!r}: expected HOST=PID for a --host and a "
                         f"positive process id")
        netns_pids[host] = int(pid)
    options = AgentOptions(start_gate=args.start_gate)
    tcp, roce = options.tcp, options.roce
    if args.tcp_port is not None:
        tcp = dataclasses.replace(tcp, port=args.tcp_port)
    if args.connect_timeout is not None:
        tcp = dataclasses.replace(tcp, connect_timeout_s=args.connect_timeout)
    if args.roce_port is not None:
        roce = dataclasses.replace(roce, port=args.roce_port)
    return run_agent(args.plan, args.hosts, outs,
                     dataclasses.replace(options, tcp=tcp, roce=roce), netns_pids)


if __name__ == "__main__":
    sys.exit(main())
