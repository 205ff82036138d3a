"""Link-level flow control on a running fabric: build its accounting, start its daemon,
read what it did.

Under flow control every link direction is shaped at its sender (switch ports
towards endpoints too: an endpoint's IFB would hold the queue after the point the
accounting sees a packet leave its switch), and every lossless lane has a gate
(:mod:`fabric.emulation.shaping`). The accounting (``pfc.bpf.c``, XDP on every
port) charges each lossless packet to the switch that holds it, by the link it
arrived on, and the daemon (:mod:`fabric.emulation.pfc_daemon`) closes the gate
of that lane on that link's sender when the switch asks for a pause.

A link's id is its position in :func:`directed_links` plus one (0 means "came from
an endpoint" in a packet's tag).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import networkx as nx

from fabric.children import log_tail, start_python
from fabric.emulation import bpf_build, shaping
from fabric.emulation.ovs import STATE_DIR
from fabric.errors import UserError
from fabric.host import libbpf
from fabric.model import graph as fg
from fabric.model.flowcontrol import (FlowControl, FlowControlError, leaf_limits,
                                      lossless_lanes, mmu_bytes, watchdog_packets)
from fabric.model.lanes import LaneConfig

SOURCE = Path(__file__).with_name("pfc.bpf.c")
HEADER = Path(__file__).with_name("pfc_mmu.h")
CACHE_DIR = STATE_DIR / "pfc"
MAX_PORTS = 32      # pfc_mmu.h's PFC_MAX_PORTS
MAX_LANES = 8
MAX_LINKS = 2048
MAX_SWITCHES = 256
READY_TIMEOUT_S = 20.0
# The daemon reacts to pause events at real-time priority (below the forwarding thread's,
# on the agents' cores): behind the agents it reacts too late for any headroom
# (docs/benchmarks.md, "Flow control (PFC)"); it sleeps in poll between events.
DAEMON_RT_PRIORITY = 5
LINK_STAT = struct.Struct("=QQQQ")   # struct link_stat: max_held, drops, drop_bytes, pauses
GATE_STAT = struct.Struct("=QQQQQQQQ")


class FlowControlSetupError(UserError, RuntimeError):
    """Flow control cannot be set up here (no clang, no libbpf, a refused program)."""


@dataclass(frozen=True)
class DirectedLink:
    """A link direction into a switch: ``src`` sends, ``dst`` (a switch) receives on
    its port number ``port_index`` (0-based among its ports)."""

    src: str
    dst: str
    port_index: int


def link_directions(graph: nx.Graph) -> list[DirectedLink]:
    """Every link direction into a switch, switch by switch in port order; the flow
    control's link ids are their positions, from 1 (pure; no limits checked)."""
    out = []
    for sw in fg.switches(graph):
        nbrs = sorted(graph.neighbors(sw), key=lambda n: fg.port(graph, sw, n))
        out += [DirectedLink(n, sw, i) for i, n in enumerate(nbrs)]
    return out


def directed_links(graph: nx.Graph) -> list[DirectedLink]:
    """Every link direction into a switch, switch by switch in port order (pure).

    Raises
    ------
    FlowControlError
        When a switch has more ports than the accounting holds.
    """
    for sw in fg.switches(graph):
        if graph.degree(sw) > MAX_PORTS:
            raise FlowControlError(f"flow control: switch {sw} has {graph.degree(sw)} ports; "
                                   f"the accounting holds {MAX_PORTS}")
    out = link_directions(graph)
    if len(out) >= MAX_LINKS or len(fg.switches(graph)) > MAX_SWITCHES:
        raise FlowControlError(f"flow control: {len(out)} link directions into "
                               f"{len(fg.switches(graph))} switches is more than the "
                               f"accounting holds ({MAX_LINKS - 1}, {MAX_SWITCHES})")
    return out


def check(graph: nx.Graph, lanes: LaneConfig) -> None:
    """Refuse what flow control cannot apply, before anything changes."""
    directed_links(graph)
    if not lossless_lanes(lanes):
        raise FlowControlError("flow control: no lane is lossless (every lane says "
                               "\"lossless\": false)")
    if shutil.which("clang") is None:
        raise FlowControlSetupError("flow control needs clang to build its accounting: run "
                                    "scripts/setup.sh")
    libbpf.lib()  # raises when libbpf is missing


def build_object(cache_dir: Path = CACHE_DIR) -> Path:
    """The compiled accounting, built once per source (cached like the ECN marker)."""
    return bpf_build.compile_object(SOURCE, cache_dir, "pfc", FlowControlSetupError, (HEADER,))


def daemon_config(graph: nx.Graph, host_pids: dict[str, int], link_mbps: dict[frozenset, float],
                  fc: FlowControl, lanes: LaneConfig, queue_pkts: int, frame_bytes: int,
                  obj: Path, events_csv: Path) -> dict[str, Any]:
    """The daemon's config (pure but for the object path): lanes, switches' buffers,
    links with their senders' gates, ports to attach to."""
    links = directed_links(graph)
    lossless = lossless_lanes(lanes)
    index = {sw: i for i, sw in enumerate(fg.switches(graph))}
    switches = [{"index": index[sw], **_mmu(graph, sw, fc, frame_bytes, len(lossless),
                                            queue_pkts)} for sw in fg.switches(graph)]
    entries, ports = [], []
    for ident, link in enumerate(links, start=1):
        mbps = link_mbps[frozenset((link.src, link.dst))]
        packet_ns = frame_bytes * 8 / (mbps * 1e6) * 1e9
        gbps = graph.edges[link.src, link.dst]["gbps"]
        entries.append({
            "id": ident, "name": f"{link.src}>{link.dst}", "sw": index[link.dst],
            "port": link.port_index,
            "watchdog_ns": int(watchdog_packets(fc, gbps, frame_bytes) * packet_ns),
            "reaction_ns": int(fc.reaction_pkts * packet_ns), "packet_ns": packet_ns,
            "upstream": {"pid": host_pids.get(link.src),
                         "dev": fg.intf_name(link.src, fg.port(graph, link.src, link.dst)),
                         "open_bytes_per_s": shaping.gate_open_bytes_per_s(mbps),
                         "leaf_limits": {str(k): v for k, v in leaf_limits(
                             graph, link.src, fc, queue_pkts, lanes).items()}}})
        ports.append({"dev": fg.intf_name(link.dst, fg.port(graph, link.dst, link.src)),
                      "link": ident, "from_switch": fg.is_switch(graph, link.src)})
    return {"object": str(obj), "events_csv": str(events_csv),
            "lossless_mask": sum(1 << i for i in lossless),
            "dscp_lane": [lanes.queue_for_dscp(d) for d in range(64)],
            "switches": switches, "links": entries, "switch_ports": ports,
            "host_nics": [{"pid": host_pids[ep], "dev": fg.intf_name(ep, nic["port"])}
                          for ep in fg.endpoints(graph) for nic in graph.nodes[ep]["nics"]],
            "lanes": [{"index": i, "parent": shaping.lane_class(i),
                       "handle": shaping.gate_handle(i)} for i in lossless],
            "burst_bytes": frame_bytes}


def _mmu(graph: nx.Graph, sw: str, fc: FlowControl, frame_bytes: int, lossless: int,
         queue_pkts: int) -> dict[str, int]:
    mmu = mmu_bytes(fc, frame_bytes, graph.degree(sw), lossless, queue_pkts)
    return {"shared_total": mmu.shared_total, "reserve": mmu.reserve,
            "headroom": mmu.headroom, "resume_offset": mmu.resume_offset,
            "alpha_shift": mmu.alpha_shift}


def start_daemon(config: dict[str, Any], workdir: Path, cpus: set[int] | None = None
                 ) -> tuple[subprocess.Popen, dict, list[str]]:
    """Start the daemon on ``config`` (at real-time priority, on ``cpus``: None,
    anywhere) and wait until it serves; return it, its status (the ids of its maps)
    and a fidelity warning when the priority could not be set.

    Raises
    ------
    FlowControlSetupError
        When it exits or does not come up within :data:`READY_TIMEOUT_S`.
    """
    config_path, status_path = workdir / "pfc-config.json", workdir / "pfc-status.json"
    config_path.write_text(json.dumps(config, indent=1))
    status_path.unlink(missing_ok=True)
    log = open(workdir / "pfc.log", "wb")
    proc = start_python("fabric.emulation.pfc_daemon", [str(config_path), str(status_path)],
                        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                        start_new_session=True)
    log.close()
    warnings = _prioritize(proc.pid, cpus)
    end = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < end:
        if status_path.exists():
            return proc, json.loads(status_path.read_text()), warnings
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    raise FlowControlSetupError(f"the flow-control daemon did not come up: "
                                f"{log_tail(workdir / 'pfc.log')}")


def _prioritize(pid: int, cpus: set[int] | None) -> list[str]:
    try:
        os.sched_setscheduler(pid, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK,
                              os.sched_param(DAEMON_RT_PRIORITY))
        if cpus:
            os.sched_setaffinity(pid, cpus)
    except OSError as exc:
        return [f"the flow-control daemon could not get real-time priority ({exc.strerror}): "
                f"its pauses may come late, beyond the headroom (lossless_drops says)"]
    return []


def _array_value(fd: int, key: bytes, size: int) -> bytes:
    """The value of ``key`` in the array map ``fd``, which holds every key it has room for."""
    value = libbpf.map_lookup(fd, key, size)
    if value is None:
        raise RuntimeError(f"bpf map fd {fd} has no key {key.hex()}")
    return value


class Counters:
    """Reads the accounting's and the daemon's per-link, per-lane counters."""

    def __init__(self, status: dict[str, Any], links: int) -> None:
        self.links = links
        self.stats_fd = libbpf.map_by_id(status["maps"]["stats"])
        self.gates_fd = libbpf.map_by_id(status["maps"]["gate_stats"])

    def read(self, lanes: list[int]) -> dict[tuple[int, int], dict[str, int]]:
        """(link id, lane) -> cumulative counters, and the ns closed so far of a gate
        that is closed now."""
        now = time.monotonic_ns()
        out = {}
        for link in range(1, self.links + 1):
            for lane in lanes:
                key = struct.pack("=I", link * MAX_LANES + lane)
                held, drops, drop_bytes, pauses = LINK_STAT.unpack(
                    _array_value(self.stats_fd, key, LINK_STAT.size))
                gate = GATE_STAT.unpack(_array_value(self.gates_fd, key, GATE_STAT.size))
                closed_ns = gate[1] + (now - gate[2] if gate[2] else 0)
                out[(link, lane)] = {"max_held_bytes": held, "drops": drops,
                                     "drop_bytes": drop_bytes, "pause_events": pauses,
                                     "pauses": gate[0], "paused_ns": closed_ns,
                                     "paused_now": bool(gate[2]),
                                     "watchdog_trips": gate[3], "reactions": gate[5],
                                     "reaction_sum_ns": gate[6], "reaction_max_ns": gate[7]}
        return out

    def closed_since(self, lanes: list[int]) -> dict[tuple[int, int], int]:
        """(link id, lane) -> ``time.monotonic_ns()`` its gate closed, for the gates
        closed now."""
        out = {}
        for link in range(1, self.links + 1):
            for lane in lanes:
                key = struct.pack("=I", link * MAX_LANES + lane)
                since = GATE_STAT.unpack(_array_value(self.gates_fd, key, GATE_STAT.size))[2]
                if since:
                    out[(link, lane)] = since
        return out

    def reset_max_held(self, lanes: list[int]) -> None:
        """Start a new maximum (the daemon's and the program's sums stay cumulative)."""
        for link in range(1, self.links + 1):
            for lane in lanes:
                key = struct.pack("=I", link * MAX_LANES + lane)
                value = bytearray(_array_value(self.stats_fd, key, LINK_STAT.size))
                value[:8] = bytes(8)
                libbpf.map_update(self.stats_fd, key, bytes(value))

    def close(self) -> None:
        """Release the maps."""
        os.close(self.stats_fd)
        os.close(self.gates_fd)


def lane_drops(tc_stats: str, lanes: list[int]) -> dict[tuple[str, int], int]:
    """(device, lane) -> packets the leaf and the gate of a lane in ``lanes`` dropped,
    from ``tc -s qdisc show`` output (pure). A lane's leaf is qdisc ``(10 + lane):``
    (on an endpoint's NIC also its control band ``(0x50 + lane):``), its gate
    ``(0x20 + lane):`` (which drops a frame larger than its burst)."""
    handles = {f"{shaping.LEAF_HANDLE + lane:x}:": lane for lane in lanes}
    handles.update({f"{shaping.CONTROL_LEAF_HANDLE + lane:x}:": lane for lane in lanes})
    handles.update({f"{shaping.GATE_HANDLE + lane:x}:": lane for lane in lanes})
    out: dict[tuple[str, int], int] = {}
    for block in re.split(r"(?m)^qdisc ", tc_stats):
        head = re.match(r"(?:pfifo_head_drop|tbf) (\S+) dev (\S+)", block)
        if head and head.group(1) in handles:
            dropped = re.search(r"dropped (\d+)", block)
            key = (head.group(2), handles[head.group(1)])
            out[key] = out.get(key, 0) + (int(dropped.group(1)) if dropped else 0)
    return out


def pause_lateness(events: Iterable[Mapping[str, str]], links: Iterable[Mapping[str, Any]],
                   since_ns: int) -> dict[tuple[str, int], float]:
    """(link name, lane) -> the most any of its pauses since ``since_ns`` took effect
    after the modelled reaction, in packet times of the link (0: none late; pure).
    ``events`` are rows of the daemon's events CSV, ``links`` the daemon config's
    links. A pause the daemon itself applied late (the machine did not run it in
    time) lets more into the switch than the headroom assumes: the drops at a full
    headroom that follow are the emulator's load, not the fabric's."""
    by_id = {int(link["id"]): link for link in links}
    late: dict[tuple[str, int], float] = {}
    for row in events:
        link = by_id.get(int(row["link"]))
        if row["event"] != "pause" or not row["reaction_ns"] or link is None \
                or int(row["ns"]) < since_ns:
            continue
        key = (link["name"], int(row["lane"]))
        beyond = (int(row["reaction_ns"]) - link["reaction_ns"]) / link["packet_ns"]
        late[key] = max(late.get(key, 0.0), beyond)
    return late


def drops_behind_late_pauses(rows: Iterable[Mapping[str, Any]],
                             late: Mapping[tuple[str, int], float], spare_pkts: float) -> int:
    """Drops at a full headroom (``rows`` of :func:`link_rows`) on the links and lanes
    whose latest pause came more than ``spare_pkts`` late (:func:`pause_lateness`)."""
    return sum(row["drops"] for row in rows
               if late.get((row["link"], row["lane"]), 0.0) > spare_pkts)


def link_rows(graph: nx.Graph, before: dict, after: dict, seconds: float, frame_bytes: int
              ) -> list[dict[str, Any]]:
    """One row per link direction and lossless lane that paused, held or dropped anything
    between two :meth:`Counters.read` s ``seconds`` apart (pure)."""
    links = directed_links(graph)
    rows = []
    for (ident, lane), end in sorted(after.items()):
        start = before.get((ident, lane), {})

        def grew(key: str) -> int:
            return end[key] - start.get(key, 0)

        reactions = grew("reactions")
        if not (grew("pauses") or end["max_held_bytes"] or grew("drops")):
            continue
        link = links[ident - 1]
        rows.append({"link": f"{link.src}>{link.dst}", "lane": lane,
                     "pauses": grew("pauses"),
                     "pause_share": (round(grew("paused_ns") / 1e9 / seconds, 4)
                                     if seconds else None),
                     "max_held_pkts": round(end["max_held_bytes"] / frame_bytes, 2),
                     "drops": grew("drops"), "watchdog_trips": grew("watchdog_trips"),
                     "reaction_mean_ms": (round(grew("reaction_sum_ns") / reactions / 1e6, 3)
                                          if reactions else None),
                     "reaction_max_ms": (round(end["reaction_max_ns"] / 1e6, 3)
                                         if reactions else None)})
    return rows
