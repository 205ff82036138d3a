"""The flow-control daemon of a running fabric (root).

``python -m fabric.emulation.pfc_daemon CONFIG STATUS`` loads the accounting
programs (``pfc.bpf.c``), fills their maps from CONFIG (written by
:mod:`fabric.emulation.flowcontrol`), attaches them to every switch port and
endpoint NIC, then turns their pause and resume events into gate changes on the
upstream sender's egress (:mod:`fabric.host.tcgate`), with a watchdog that breaks
pauses that last too long. It writes STATUS (``{"ready": true, "maps": ...}``)
once it runs, appends every event to the events CSV, keeps per-gate counters in
the ``gate_stats`` map, and exits on SIGTERM or SIGINT.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabric.host import libbpf
from fabric.host.system import netns
from fabric.host.tcgate import Gate, GateError, GateSocket

PAUSE, RESUME = 1, 2  # pfc_mmu.h's verdicts
# struct event in pfc.bpf.c: link, lane, verdict, seq, ns, held
EVENT = struct.Struct("=IBBHQQ")
LINK_CFG = struct.Struct("=II")
PORT_CFG = struct.Struct("=II")
MMU_CFG = struct.Struct("=QQQQII")  # struct pfc_mmu_cfg
SPIN_LOCK_BYTES = 4
MMU_CFG_OFFSET = 8  # struct switch_mmu: the lock, padded to 8, then the config
# struct gate_stat: pauses, pause_ns, since_ns, watchdog_trips, ignored, reactions,
# reaction_sum_ns, reaction_max_ns
GATE_STAT = struct.Struct("=QQQQQQQQ")
MAX_LANES = 8
KICK_ETHERTYPE = 0x88B5
KICK = b"\xff" * 6 + b"\x02" + b"\0" * 5 + struct.pack("!H", KICK_ETHERTYPE) + b"\0" * 46


@dataclass
class GateState:
    """One lane's gate on one link's sender, and what the daemon knows of it."""

    gate: Gate
    sock: GateSocket
    kick: socket.socket
    dev: str
    watchdog_ns: int
    reaction_ns: int = 0  # the modelled reaction: a change waits this long after its event
    seq: int | None = None  # the verdict count of the last event taken (pfc_mmu.h)
    closed_since: int | None = None
    holdoff_until: int = 0
    stat: list[int] = field(default_factory=lambda: [0] * 8)


class Daemon:
    """Loads the accounting, attaches it, and serves its events until stopped."""

    def __init__(self, config: dict[str, Any], status: Path) -> None:
        self.config = config
        self.status = status
        self.stop = False
        self.obj = libbpf.BpfObject(Path(config["object"]))
        self.maps = {name: self.obj.map_fd(name)
                     for name in ("ports", "links", "mmus", "stats", "dscp_lane", "config",
                                  "events", "gate_stats")}
        self.gates: dict[tuple[int, int], GateState] = {}
        self.errors = 0
        self.sockets: dict[int | None, tuple[GateSocket, socket.socket]] = {}
        self.log = open(config["events_csv"], "a", buffering=1)
        if self.log.tell() == 0:
            self.log.write("ns,link,lane,event,held_bytes,reaction_ns\n")

    # --- set-up ---------------------------------------------------------------------

    def fill_maps(self) -> None:
        """The lanes, the switches' buffers, the links and the ports."""
        cfg = self.config
        libbpf.map_update(self.maps["config"], _u32(0), struct.pack("=II", cfg["lossless_mask"],
                                                                    0))
        for dscp, lane in enumerate(cfg["dscp_lane"]):
            libbpf.map_update(self.maps["dscp_lane"], _u32(dscp), _u32(lane))
        size = self.obj.value_size("mmus")
        for sw in cfg["switches"]:
            value = bytearray(size)
            MMU_CFG.pack_into(value, MMU_CFG_OFFSET, sw["shared_total"], sw["reserve"],
                              sw["headroom"], sw["resume_offset"], sw["alpha_shift"], 0)
            libbpf.map_update(self.maps["mmus"], _u32(sw["index"]), bytes(value))
        for link in cfg["links"]:
            libbpf.map_update(self.maps["links"], _u32(link["id"]),
                              LINK_CFG.pack(link["sw"], link["port"]))

    def attach(self) -> None:
        """The switch program on every switch port, the host program on every NIC."""
        switch_prog = self.obj.program_fd("pfc_switch")
        for port in self.config["switch_ports"]:
            ifindex = socket.if_nametoindex(port["dev"])
            libbpf.map_update(self.maps["ports"], _u32(ifindex),
                              PORT_CFG.pack(port["link"], int(port["from_switch"])))
            libbpf.xdp_attach(ifindex, switch_prog)
        host_prog = self.obj.program_fd("pfc_host")
        for nic in self.config["host_nics"]:
            with netns(nic["pid"]):
                libbpf.xdp_attach(socket.if_nametoindex(nic["dev"]), host_prog)

    def open_gates(self) -> None:
        """A netlink socket and a kick socket per namespace; a gate per link and lane."""
        for link in self.config["links"]:
            up = link["upstream"]
            pid = up["pid"]
            with netns(pid):
                if pid not in self.sockets:
                    kick = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
                    self.sockets[pid] = (GateSocket(), kick)
                ifindex = socket.if_nametoindex(up["dev"])
            sock, kick = self.sockets[pid]
            for lane in self.config["lanes"]:
                gate = Gate(ifindex, lane["parent"], lane["handle"], up["open_bytes_per_s"],
                            self.config["burst_bytes"], up["leaf_limits"][str(lane["index"])])
                self.gates[(link["id"], lane["index"])] = GateState(
                    gate, sock, kick, up["dev"], link["watchdog_ns"], link["reaction_ns"])

    # --- serving events -------------------------------------------------------------

    def handle(self, record: bytes) -> None:
        """One event from the ring buffer: close or open the gate it names. A change the
        kernel refuses is logged and the daemon goes on (the run's checks see the
        consequences: a lossless lane that drops). An event older than one already
        taken is skipped: two CPUs' events can reach the ring buffer swapped, and the
        gate must end as the accounting's latest verdict says (else a pause taken
        after its resume would hold a lane that is not paused, or a resume after its
        pause open one that is, until the headroom overflows)."""
        link, lane, verdict, seq, ns, held = EVENT.unpack_from(record)
        state = self.gates.get((link, lane))
        if state is not None:
            if state.seq is not None and not _newer(seq, state.seq):
                self._log(ns, link, lane, "stale", held, None)
                return
            state.seq = seq
            wait = ns + state.reaction_ns - time.monotonic_ns()
            if wait > 0:  # events come in time order: each waits for its own moment
                time.sleep(wait / 1e9)
        try:
            self._apply(link, lane, verdict, ns, held)
        except (GateError, OSError) as exc:
            self._refused(ns, link, lane, exc, held)

    def _refused(self, ns: int, link: int, lane: int, exc: Exception, held: int | None
                 ) -> None:
        self.errors += 1
        self._log(ns, link, lane, f"error: {exc}".replace(",", ";"), held, None)

    def _apply(self, link: int, lane: int, verdict: int, ns: int, held: int) -> None:
        state = self.gates.get((link, lane))
        if state is None:
            return
        now = time.monotonic_ns()
        if verdict == PAUSE:
            if now < state.holdoff_until or state.closed_since is not None:
                state.stat[4] += 1  # ignored: the watchdog holds it open, or already shut
                self._log(ns, link, lane, "ignored", held, None)
                self._store(link, lane, state)
                return
            state.sock.send(state.gate.message(closed=True))
            state.closed_since = time.monotonic_ns()
            state.stat[0] += 1
            state.stat[2] = state.closed_since
            reaction = state.closed_since - ns
            state.stat[5] += 1
            state.stat[6] += reaction
            state.stat[7] = max(state.stat[7], reaction)
            self._log(ns, link, lane, "pause", held, reaction)
        elif verdict == RESUME and state.closed_since is not None:
            self._open(state)
            self._log(ns, link, lane, "resume", held, time.monotonic_ns() - ns)
        self._store(link, lane, state)

    def _open(self, state: GateState) -> None:
        state.sock.send(state.gate.message(closed=False))
        # a resumed queue is served at the next enqueue on its device: give it one (the
        # receiver's program drops the frame on arrival)
        state.kick.sendto(KICK, (state.dev, 0))
        assert state.closed_since is not None  # every caller opens a closed gate
        state.stat[1] += time.monotonic_ns() - state.closed_since
        state.closed_since = None
        state.stat[2] = 0

    def watchdog(self) -> int:
        """Open the gates closed for longer than their watchdog (and keep them open as
        long again); return milliseconds until the next one is due."""
        now = time.monotonic_ns()
        due = []
        for (link, lane), state in self.gates.items():
            if state.closed_since is None:
                continue
            if now - state.closed_since >= state.watchdog_ns:
                try:
                    self._open(state)
                except (GateError, OSError) as exc:
                    # still closed: the next round tries again
                    self._refused(now, link, lane, exc, None)
                    continue
                state.holdoff_until = now + state.watchdog_ns
                state.stat[3] += 1
                self._log(now, link, lane, "watchdog", None, None)
                self._store(link, lane, state)
            else:
                due.append(state.closed_since + state.watchdog_ns - now)
        return max(1, min(due, default=1_000_000_000) // 1_000_000)

    def _store(self, link: int, lane: int, state: GateState) -> None:
        libbpf.map_update(self.maps["gate_stats"], _u32(link * MAX_LANES + lane),
                          GATE_STAT.pack(*state.stat))

    def _log(self, ns: int, link: int, lane: int, what: str, held: int | None,
             reaction: int | None) -> None:
        self.log.write(f"{ns},{link},{lane},{what},{'' if held is None else held},"
                       f"{'' if reaction is None else reaction}\n")

    def serve(self) -> None:
        """Serve events until asked to stop."""
        ring = libbpf.RingBuffer(self.maps["events"], self.handle)
        self.status.write_text(json.dumps({
            "ready": True, "pid": os.getpid(),
            "maps": {name: libbpf.map_id(fd) for name, fd in self.maps.items()}}))
        try:
            while not self.stop:
                ring.poll(min(self.watchdog(), 200))
        finally:
            ring.close()

    def close(self) -> None:
        """Open every closed gate and let go of the sockets."""
        for state in self.gates.values():
            if state.closed_since is not None:
                try:
                    self._open(state)
                except (GateError, OSError):
                    pass  # the device is gone (teardown came first): netlink refuses
        for sock, kick in self.sockets.values():
            sock.close()
            kick.close()
        self.log.close()
        self.obj.close()


def _newer(seq: int, than: int) -> bool:
    """True when verdict count ``seq`` comes after ``than`` (16-bit, wrapping)."""
    return 0 < (seq - than) & 0xFFFF < 0x8000


def _u32(value: int) -> bytes:
    return struct.pack("=I", value)


def main(argv: list[str]) -> int:
    """Run the daemon of ``argv[0]``'s config, reporting to ``argv[1]``."""
    config = json.loads(Path(argv[0]).read_text())
    daemon = Daemon(config, Path(argv[1]))

    def stop(_signum: int, _frame: Any) -> None:
        daemon.stop = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        daemon.fill_maps()
        daemon.attach()
        daemon.open_gates()
        daemon.serve()
    finally:
        daemon.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
