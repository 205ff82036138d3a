"""``fabric status``: the fabrics running now and, under flow control, which links have
a lane paused (root; run it beside ``fabric up --cli`` or an experiment)."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any


def add_parser(sub: Any) -> None:
    """Add ``status`` to the subcommands ``sub``."""
    status = sub.add_parser("status", help="running fabrics and their paused links (root)")
    status.set_defaults(func=cmd_status)


def cmd_status(_args: argparse.Namespace) -> int:
    """Print every running fabric, and its paused links and flow-control totals."""
    from fabric.emulation import runstate
    from fabric.host import system

    if os.geteuid() != 0:
        raise system.HostSetupError("fabric status needs root: run with sudo")
    running = [s for s in runstate.load_all() if system.running(s.owner_pid)]
    if not running:
        print("no fabric is running")
    for state in running:
        print(f"run {state.run_id} (pid {state.owner_pid}): {len(state.bridges)} switches")
        print("\n".join(f"  {line}" for line in flow_control_lines(state.workdir)))
    return 0


def flow_control_lines(workdir: Any) -> list[str]:
    """What a run's flow control is doing now (nothing without flow control)."""
    from fabric.emulation.flowcontrol import Counters

    status_path, config_path = workdir / "pfc-status.json", workdir / "pfc-config.json"
    if not status_path.exists():
        return ["flow control: none (lossy)"]
    config = json.loads(config_path.read_text())
    counters = Counters(json.loads(status_path.read_text()), len(config["links"]))
    try:
        lanes = [lane["index"] for lane in config["lanes"]]
        now = counters.read(lanes)
    finally:
        counters.close()
    names = {link["id"]: link["name"] for link in config["links"]}
    paused = [f"{names[link]} lane {lane}" for (link, lane), c in sorted(now.items())
              if c["paused_now"]]
    pauses = sum(c["pauses"] for c in now.values())
    drops = sum(c["drops"] for c in now.values())
    return [f"flow control: pfc on lanes {lanes}; {pauses} pauses so far, {drops} packets "
            f"dropped at a full headroom",
            f"paused now: {', '.join(paused) if paused else 'nothing'}"]
