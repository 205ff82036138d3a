"""The controller the switches connect to: an os-ken process of ours on loopback,
or a remote one that is already running.

Ours writes a status file (switches whose routes are confirmed, links it knows
down or slow, errors); a remote one writes none, so its switches' connections
are all there is to wait for.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import networkx as nx

from fabric.children import log_tail, start_python
from fabric.emulation import ovs, runstate
from fabric.emulation.errors import EmulationError
from fabric.host import ports, system
from fabric.model import graph as fg
from fabric.routing.config import ControllerConfig, controller_config_to_dict

READY_TIMEOUT_S = 20.0
# Status keys that list what is broken: links down, and (adaptive) links found slow.
HEALTH_KEYS = ("down_links", "slow_ports")


class ControllerError(EmulationError):
    """The controller cannot be started, exited, or did not confirm the routes."""


class ControllerProcess:
    """The fabric's controller: started, watched and stopped.

    Parameters
    ----------
    graph : networkx.Graph
        The fabric; its ``spec`` is what our controller process rebuilds.
    policy : str
        The routing policy our controller runs (ignored with ``app`` or ``remote``).
    port : int
        Our controller's port on loopback.
    app : str or None
        A user's os-ken app (``MODULE:CLASS`` or ``app.py:CLASS``) run instead of ``policy``.
    remote : str or None
        ``remote:HOST:PORT`` of a controller already running on loopback.
    """

    def __init__(self, graph: nx.Graph, policy: str, port: int, app: str | None = None,
                 remote: str | None = None):
        self.graph = graph
        self.policy = policy
        self.port = port
        self.app = app
        self.remote = remote
        self.workdir: Path | None = None
        self._process: subprocess.Popen | None = None

    @property
    def address(self) -> tuple[str, int]:
        """Where the switches connect: the remote controller's, or ours on loopback."""
        if self.remote:
            return ports.parse_remote_controller(self.remote)
        return "127.0.0.1", self.port

    def check(self) -> None:
        """Before any change: a remote one listens, or our port is free."""
        if self.remote and self.app:
            raise ControllerError("a remote controller and a controller app exclude each other")
        if self.remote:
            try:
                ports.check_listening(*self.address)
            except (ValueError, ports.NotListeningError) as exc:
                raise ControllerError(f"remote controller: {exc}") from None
        else:
            ports.check_port_free(*self.address)

    def start(self, workdir: Path, state: runstate.RunState, config: ControllerConfig) -> None:
        """Start ours (nothing for a remote one), recorded in the run's undo log."""
        self.workdir = workdir
        if self.remote:
            return
        config_path = workdir / "controller-config.json"
        config_path.write_text(json.dumps(controller_config_to_dict(config)))
        app = ["--app", self.app] if self.app else [self.policy]
        with open(workdir / "controller.log", "wb") as log:
            self._process = start_python(
                "controllers", [*app, "--topo", self.graph.graph["spec"], "--host", "127.0.0.1",
                                "--port", str(self.port),
                                "--status-file", str(workdir / "controller.json"),
                                "--config", str(config_path)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        state.add_process(self._process.pid, expect="controllers")

    def status(self) -> dict:
        """Its status report (ready switches, down links, events); empty when none."""
        if self.workdir is None:  # not started
            return {}
        try:
            return json.loads((self.workdir / "controller.json").read_text())
        except (OSError, ValueError, TypeError):
            return {}

    def wait_until_routed(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Block until it has confirmed every switch's routes.

        An app that cannot say when its routes are in (your own, not built on
        :class:`controllers.base.PolicyApp`: its status says
        ``"reports_ready": false``) is waited for until every switch's
        controller connection is up.
        """
        switches = fg.switches(self.graph)
        deadline = time.monotonic() + timeout_s
        done, reports = 0, True
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise ControllerError(f"the controller exited ({self._process.returncode}): "
                                      f"{self._log_tail()}")
            status = self.status()
            if status.get("errors"):
                raise ControllerError(f"the controller reported: {status['errors'][0]}")
            reports = status.get("reports_ready", self._process is not None)
            done = (len(status.get("ready", [])) if reports
                    else len(ovs.connected_bridges(switches)))
            if done == len(switches):
                return
            time.sleep(0.02 if reports else 0.2)
        what = "had their routes confirmed" if reports else "connected"
        raise ControllerError(f"only {done} of {len(switches)} switches {what} within "
                              f"{timeout_s:.0f} s; controller log: {self._log_tail()}")

    def wait_until_healed(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Block until it knows no link down or slow and has confirmed every switch's
        routes (after links were restored)."""
        deadline = time.monotonic() + timeout_s
        while any((status := self.status()).get(key) for key in HEALTH_KEYS):
            if time.monotonic() > deadline:
                raise ControllerError(f"the controller still reports links down or slow after "
                                      f"{timeout_s:.0f} s: " + "; ".join(
                                          f"{key} {status[key]}" for key in HEALTH_KEYS
                                          if status.get(key)))
            time.sleep(0.02)
        self.wait_until_routed(max(1.0, deadline - time.monotonic()))

    def save_log(self, path: Path) -> bool:
        """Copy our controller's log to ``path`` (the scratch copy goes at teardown);
        False when there is none (remote)."""
        log = self.workdir / "controller.log" if self.workdir else None
        if log is None or not log.exists():
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, path)
        return True

    def stop(self) -> None:
        """Stop ours and its children; idempotent."""
        if self._process is not None:
            system.kill_tree(self._process.pid, expect="controllers")
            self._process.wait(timeout=10)
            self._process = None

    def _log_tail(self) -> str:
        return log_tail(self.workdir / "controller.log") if self.workdir else "(no log)"
