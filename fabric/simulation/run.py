"""Run the ns-3 simulator on a scenario and read its answer.

The answer has one row per transfer in the emulator's terms (``send_start``,
``recv_end``, ``fct_s``, the transport's counters), the bytes, packets and
drops of every link direction, and for per-flow ECMP the path each transfer
took: the simulator hashes exactly as :func:`ecmp_path` replays it.
"""

from __future__ import annotations

import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import networkx as nx

from fabric.errors import UserError
from fabric.model import graph as fg
from fabric.routing.adaptive import AdaptiveParams
from fabric.routing.hashing import IPPROTO_UDP, pick_weighted, select_hash
from fabric.routing.tables import hash_basis
from fabric.simulation import scenario as sc
from fabric.simulation.adaptive import SimulatedController
from fabric.simulation.build import simulator_binary
from fabric.traffic.model import ROCE_PORT, Plan, Transfer, TransportSpec

# the simulator's per-transfer fields after the index, in order (-1: never happened)
TRANSFER_FIELDS = ("send_start", "send_end", "recv_start", "recv_end", "recv_bytes",
                   "send_packets_sent", "send_retransmitted", "send_lost_detected",
                   "send_rto_count", "send_acks_received", "recv_packets_received",
                   "recv_duplicates", "recv_out_of_order", "recv_acks_sent", "send_failed",
                   "send_delay_cuts", "recv_bytes_at_window_start", "recv_bytes_at_window_end")
TIMES = {"send_start", "send_end", "recv_start", "recv_end"}


class SimulationError(UserError, RuntimeError):
    """The simulator stopped with an error."""


# simulators running now, from any thread: an interrupted caller stops them all
_running: set[subprocess.Popen] = set()
_running_lock = threading.Lock()


def stop_all() -> None:
    """Kill every simulator still running (their callers then raise SimulationError)."""
    with _running_lock:
        for proc in _running:
            proc.kill()


@dataclass
class LinkLoad:
    """One direction of a link over the run."""

    packets: int
    bytes: int
    drops: int


class LinkLoads(dict):
    """``{(a, b): LinkLoad}`` of every directed link."""

    def totals(self) -> dict[tuple[str, str], int]:
        """Bytes each directed link carried (as the emulator's link samples give them)."""
        return {link: load.bytes for link, load in self.items()}


@dataclass
class SimResult:
    """What a simulation measured (see the module docstring); ``plan`` holds the
    transfers as simulated (addresses and hop counts filled in)."""

    rows: list[dict[str, Any]]  # with ``path``: the nodes of a per-flow ECMP transfer
    links: LinkLoads
    sim_s: float
    wall_s: float
    memory_mb: float  # the simulator's own peak resident memory
    plan: Plan
    ports: dict[str, tuple[int, ...]]  # each transfer's UDP source ports (its connection's)
    telemetry: dict[str, int] | None = None  # adaptive: rounds, groups re-weighted
    # as fabric.traffic.result.RunResult: a simulation has no load checks (a run's
    # completion is checked by the runner), errors or flow control
    fidelity: list[Any] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    flow_control: list[dict[str, Any]] = field(default_factory=list)
    deadlocks: list[dict[str, Any]] = field(default_factory=list)

    def transfer_rows(self) -> list[dict[str, Any]]:
        """One row per transfer, as the emulator's ``TrafficResult.transfer_rows``."""
        return self.rows

    @property
    def complete(self) -> bool:
        """True when every transfer's last byte arrived."""
        return all(r["fct_s"] is not None for r in self.rows)

    @property
    def drops(self) -> int:
        """Packets the switches' buffers dropped."""
        return sum(load.drops for load in self.links.values())


def ecmp_path(graph: nx.Graph, tables: dict[str, dict[str, tuple[int, ...]]], src: str,
              src_ip: str, dst_ip: str, sport: int, dport: int = ROCE_PORT) -> list[str]:
    """The nodes a UDP packet from ``src_ip:sport`` to ``dst_ip:dport`` crosses, each
    switch choosing among its equal-cost ports by the documented select hash."""
    fields = {"ipv4_src": _ip(src_ip), "ipv4_dst": _ip(dst_ip), "ip_proto": IPPROTO_UDP,
              "udp_src": sport, "udp_dst": dport}
    by_port = {sw: {fg.port(graph, sw, n): n for n in graph.neighbors(sw)} for sw in tables}
    path = [src]
    node = next(n for n in graph.neighbors(src)
                if fg.port(graph, src, n) == _nic_port(graph, src, src_ip))
    while True:
        path.append(node)
        if not fg.is_switch(graph, node):
            return path
        ports = tables[node][dst_ip]
        picked = pick_weighted(select_hash(fields, hash_basis(node)), [1] * len(ports))
        assert picked is not None  # None only without an eligible port; a route has one
        chosen = ports[picked]
        node = by_port[node][chosen]


def _ip(text: str) -> int:
    a, b, c, d = (int(x) for x in text.split("."))
    return a << 24 | b << 16 | c << 8 | d


def _nic_port(graph: nx.Graph, node: str, ip: str) -> int:
    return next(nic["port"] for nic in graph.nodes[node]["nics"] if nic["ip"] == ip)


def parse(output: str, scenario: sc.Scenario) -> tuple[list[dict[str, Any]], LinkLoads,
                                                      float, float]:
    """Rows, link loads, simulated seconds and the simulator's peak memory (MB) from its
    answer."""
    rows: dict[int, dict[str, Any]] = {}
    links = LinkLoads()
    sim_s = peak_mb = None
    for line in output.splitlines():
        kind, *values = line.split()
        if kind == "transfer":
            index = int(values[0])
            t = scenario.transfers[index]
            row: dict[str, Any] = {"id": t.id, "src": t.src, "dst": t.dst, "bytes": t.bytes,
                                   "tag": t.tag}
            for name, text in zip(TRANSFER_FIELDS, values[1:]):
                value = float(text)
                row[name] = (None if value < 0 else value) if name in TIMES else int(value)
            start, end = row["send_start"], row["recv_end"]
            row["fct_s"] = end - start if start is not None and end is not None else None
            rows[index] = row
        elif kind == "link":
            index, direction, packets, nbytes, drops = (int(v) for v in values)
            a, b = scenario.edges[index]
            links[(a, b) if direction == 0 else (b, a)] = LinkLoad(packets, nbytes, drops)
        elif kind == "end":
            sim_s, peak_mb = float(values[0]), int(values[2]) / 1024
    if sim_s is None or peak_mb is None or len(rows) != len(scenario.transfers):
        raise SimulationError("the ns-3 simulator's answer is incomplete")
    return [rows[i] for i in range(len(rows))], links, sim_s, peak_mb


def simulate(fabric: sc.Fabric, transfers: Iterable[Transfer], transport: TransportSpec,
             seed: int = 0, deadline_s: float = 120.0, workdir: Path | None = None,
             paths: dict[str, list[str]] | None = None,
             window: tuple[float, float] | None = None,
             adaptive: AdaptiveParams | None = None) -> SimResult:
    """Simulate ``transfers`` on ``fabric`` with ``transport`` (no root needed).

    Parameters
    ----------
    fabric : Fabric
        The graph, its rates and buffers.
    transfers : iterable of Transfer
        The schedule, as the emulator takes it.
    transport : TransportSpec
        A roce transport (``kind="roce"``).
    seed : int
        Seeds the source ports, hence every hash outcome (the emulator's ``port_seed``).
    deadline_s : float
        Simulated seconds after which unfinished transfers are failures.
    workdir : Path, optional
        Where the scenario file is kept (default: a temporary directory).
    paths : dict, optional
        Transfer id -> the nodes its connection's data crosses, in place of the
        hash's choice (e.g. the paths an emulated run measured, to compare the
        two on the same collisions).
    window : (float, float), optional
        Simulated seconds between which each transfer's delivered bytes are
        counted (``recv_bytes_at_window_start``/``_end``): a steady-state rate.
    adaptive : AdaptiveParams, optional
        Route by the adaptive policy, asked every ``interval_s`` simulated seconds
        (:mod:`fabric.simulation.adaptive`); ``telemetry`` counts its rounds.

    Raises
    ------
    ScheduleError
        For a schedule or transport the simulator cannot run (one line naming it).
    SimulatorMissing
        Without ns-3 installed.
    SimulationError
        When the simulator fails.
    """
    scen = sc.write(fabric, transfers, transport, seed=seed, deadline_s=deadline_s,
                    paths=paths, window=window, adaptive=adaptive)
    binary = simulator_binary()
    controller = SimulatedController(fabric, adaptive) if adaptive else None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(workdir or tmp) / "scenario.txt"
        path.write_text(scen.text)
        started = time.monotonic()
        stdout, stderr, returncode = _execute([str(binary), str(path)], Path(tmp), controller)
        wall = time.monotonic() - started
    if returncode != 0:
        raise SimulationError(stderr.strip().splitlines()[-1] if stderr.strip()
                              else f"the ns-3 simulator exited with {returncode}")
    rows, links, sim_s, peak_mb = parse(stdout, scen)
    ports = {t.id: scen.connections[conn][2]
             for t, conn in zip(scen.transfers, scen.connection_of)}
    taken: dict[str, list[str]] = {}
    if not transport.sprays and adaptive is None:  # re-weighted groups: not replayable
        tables = fabric.routes()
        for t, conn in zip(scen.transfers, scen.connection_of):
            src_ip, dst_ip, conn_ports = scen.connections[conn]
            taken[t.id] = scen.pins.get(conn) or ecmp_path(fabric.graph, tables, t.src, src_ip,
                                                           dst_ip, conn_ports[0])
    for row in rows:
        row["path"] = taken.get(row["id"])
    plan = Plan(scen.transfers, sc.host_addresses(fabric.graph), transport, port_seed=seed)
    telemetry = ({"rounds": controller.rounds, "weight_changes": controller.weight_changes}
                 if controller else None)
    return SimResult(rows, links, sim_s, wall, peak_mb, plan, ports, telemetry)


def _execute(argv: list[str], tmp: Path, controller: SimulatedController | None
             ) -> tuple[str, str, int]:
    """Run the simulator, answering its telemetry if there is a ``controller``; its
    standard output and error and its exit code."""
    out_path, err_path = tmp / "out.txt", tmp / "err.txt"
    with out_path.open("w") as out, err_path.open("w") as err:
        proc: subprocess.Popen[Any]  # bytes without a controller, text with one
        piped: subprocess.Popen[str] | None = None  # the one a controller converses with
        if controller is None:
            proc = subprocess.Popen(argv, stdout=out, stderr=err)
        else:
            proc = piped = subprocess.Popen(argv, stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=err, text=True)
        with _running_lock:
            _running.add(proc)
        try:
            if controller is not None:
                # started above with both pipes when there is a controller
                assert piped is not None and piped.stdout is not None and piped.stdin is not None
                out.write(controller.converse(piped.stdout, piped.stdin))
                piped.stdin.close()
                piped.stdout.close()
            proc.wait()
        except BaseException:  # interrupted (Ctrl-C): the simulator goes too
            proc.kill()
            proc.wait()
            raise
        finally:
            with _running_lock:
                _running.discard(proc)
    return out_path.read_text(), err_path.read_text(), proc.returncode
