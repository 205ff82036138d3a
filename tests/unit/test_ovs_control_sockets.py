"""Control sockets left by OVS daemons that died are removed before ovs-vswitchd starts."""

from __future__ import annotations

import os
import subprocess

from fabric.emulation import ovs


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_only_dead_daemons_sockets_go(tmp_path) -> None:
    dead, alive = dead_pid(), os.getpid()
    names = [f"ovs-vswitchd.{dead}.ctl", f"ovsdb-server.{dead}.ctl",
             f"ovs-vswitchd.{alive}.ctl", f"ovsdb-server.{alive}.ctl",
             "ovs-vswitchd.ctl", f"s1.{dead}.ctl", "db.sock", f"ovs-vswitchd.{dead}.ctl.x"]
    for name in names:
        (tmp_path / name).touch()
    assert ovs.remove_stale_control_sockets(tmp_path) == sorted(names[:2])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[2:])
    assert ovs.remove_stale_control_sockets(tmp_path) == []
