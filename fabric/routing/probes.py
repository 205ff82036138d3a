"""Link probes: queueing delay of every switch-to-switch port (pure).

Port counters show what a port sent, not what it could have sent: a link
that still works at a quarter of its rate (a gray failure) looks like a
lightly loaded one. Probes, after HULA's, show the difference. Every
telemetry interval the controller sends a small frame out of each
switch-to-switch port (a packet-out); it waits in that port's egress queue
behind the data, crosses the link, and the next switch returns it to the
controller (a table-0 entry for :data:`PROBE_ETHERTYPE`). Its delay minus
the smallest delay that port ever showed (the control-channel and
forwarding overhead), less what the whole round was late by, is the port's
queueing delay (:class:`ProbeRounds`).

This module builds and parses the frames and turns send and receive times
into queueing delays; :class:`fabric.routing.adaptive.AdaptiveBalancer`
decides what a delay means.
"""

from __future__ import annotations

import statistics
import struct
from dataclasses import dataclass, field

from fabric.model.intents import Flow, ToController
from fabric.routing.tables import PRIORITY_CONTROL

PROBE_ETHERTYPE = 0x88B5  # IEEE 802 local experimental ethertype 1
PROBE_MAC = bytes.fromhex("02fab1000001")  # locally administered, never a NIC's
_MAGIC = b"fabric-probe"
_HEADER = struct.Struct("!6s6sH12sQ")
FRAME_BYTES = 60  # the Ethernet minimum without FCS

# Table 0: a probe that arrives goes to the controller, ahead of every route.
PROBE_FLOW = Flow.make(PRIORITY_CONTROL, (ToController(),), eth_type=PROBE_ETHERTYPE)


def probe_frame(seq: int) -> bytes:
    """The 60-byte probe frame carrying sequence number ``seq``."""
    head = _HEADER.pack(PROBE_MAC, PROBE_MAC, PROBE_ETHERTYPE, _MAGIC, seq)
    return head.ljust(FRAME_BYTES, b"\0")


def probe_seq(frame: bytes) -> int | None:
    """The sequence number of a probe frame, or None for any other frame."""
    if len(frame) < _HEADER.size:
        return None
    _, _, ethertype, magic, seq = _HEADER.unpack_from(frame)
    if ethertype != PROBE_ETHERTYPE or magic != _MAGIC:
        return None
    return seq


@dataclass
class ProbeRounds:
    """Probe rounds: what was sent, what came back, each port's smallest delay.

    A round is every probe sent between two calls of :meth:`close_round`.
    Closing it gives each probed port's queueing delay: its delay minus the
    smallest delay that port ever showed, minus the round's median of that
    excess. The median removes what every probe of the round shared (a
    busy controller or switch answers all of them late); a queue at one
    port does not move it. A probe that has not returned by then waited at
    least as long as it has been out (a deep queue may also have dropped
    it).
    """

    _next_seq: int = 1
    _round: dict[int, tuple[str, int, float]] = field(default_factory=dict)
    _delays: dict[int, float] = field(default_factory=dict)
    _base: dict[tuple[str, int], float] = field(default_factory=dict)

    def sent(self, switch: str, port: int, now: float) -> int:
        """Record a probe leaving ``switch`` by ``port`` at ``now``; return its sequence."""
        seq = self._next_seq
        self._next_seq += 1
        self._round[seq] = (switch, port, now)
        return seq

    def received(self, seq: int, now: float) -> bool:
        """Record probe ``seq`` back at ``now``; False for a probe of an earlier
        round, a repeat or an unknown sequence (ignored)."""
        entry = self._round.get(seq)
        if entry is None or seq in self._delays:
            return False
        switch, port, sent_at = entry
        delay = max(0.0, now - sent_at)
        self._delays[seq] = delay
        self._base[(switch, port)] = min(delay, self._base.get((switch, port), delay))
        return True

    def close_round(self, now: float) -> dict[tuple[str, int], float]:
        """End the round: ``{(switch, port): queueing delay in seconds}``."""
        excess = {}
        for seq, (switch, port, sent_at) in self._round.items():
            if seq in self._delays:
                excess[(switch, port)] = self._delays[seq] - self._base[(switch, port)]
            else:
                excess[(switch, port)] = max(0.0, now - sent_at)
        self._round, self._delays = {}, {}
        if not excess:
            return {}
        common = statistics.median(excess.values())
        return {key: max(0.0, value - common) for key, value in excess.items()}

    def base_delay(self, switch: str, port: int) -> float | None:
        """The smallest delay a probe of ``(switch, port)`` has shown, or None."""
        return self._base.get((switch, port))

    def forget(self, switch: str, port: int) -> None:
        """Drop what is known of a port (its link changed state)."""
        self._base.pop((switch, port), None)
        for seq in [s for s, (sw, p, _) in self._round.items() if (sw, p) == (switch, port)]:
            del self._round[seq]
            self._delays.pop(seq, None)
