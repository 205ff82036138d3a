"""``fabric clean``: undo the leftovers of runs that were killed (root)."""

from __future__ import annotations

import argparse
import os
from typing import Any


def add_parser(sub: Any) -> None:
    """Add ``clean`` to the subcommands ``sub``."""
    clean = sub.add_parser("clean", help="remove what killed runs left behind (root)")
    clean.set_defaults(func=cmd_clean)


def cmd_clean(_args: argparse.Namespace) -> int:
    """Undo the leftovers of runs that were killed."""
    from fabric.emulation import ovs, runstate
    from fabric.host import system

    if os.geteuid() != 0:
        raise system.HostSetupError("fabric clean needs root: run with sudo")
    states = runstate.load_all()
    for state in states:
        if system.running(state.owner_pid):
            print(f"run {state.run_id} is still active (pid {state.owner_pid}); skipped")
            continue
        for line in runstate.undo(state) or ["nothing left"]:
            print(f"{state.run_id}: {line}")
    if ovs.OVS_SCRIPTS.exists():
        ovs.ensure_db()  # bridges of a run whose state is gone live only in the database
    orphans = runstate.orphan_bridges()
    ovs.delete_bridges(orphans)
    if orphans:
        print(f"deleted {len(orphans)} bridges of runs that left no state: {', '.join(orphans)}")
    if not states and not orphans:
        print("no leftovers")
    return 0
