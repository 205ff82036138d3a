"""How fast this machine runs now, against the machine the forwarding budget was measured on.

The budget in :mod:`fabric.emulation.capacity` was measured on a 2-core VM when it
ran at full speed. The same kind of VM, on a host shared with other tenants, runs
the same work markedly slower at other times, and the emulation then loses
fidelity at the budget's rates. So before a run picks its default rate it times
a small probe, the work both OVS and the host agents do per packet in miniature
(a Python loop packing a header, sending a 4 kB datagram and reading it back
through the kernel), and scales the budget by how much slower the machine runs:
``factor = min(1, REFERENCE_ROUND_US / measured)``.

The median of many short samples, not the fastest, is taken: the fastest shows
what the CPU can do, the median what it does while the neighbours run, which is
what a run of several minutes gets. ``FABRIC_MACHINE_SPEED`` (a factor in
(0, 1]) skips the probe, e.g. to keep the default rate of a series of runs.
How the probe tracked the emulation's fidelity: docs/benchmarks.md, "Machine
speed calibration".
"""

from __future__ import annotations

import functools
import os
import socket
import statistics
import struct
import time
from dataclasses import dataclass

import networkx as nx

from fabric.emulation import capacity
from fabric.traffic.model import TCP_PACKET_BYTES

# The median round at which the measured budget holds (its derivation from a contended
# hour's probe and stride: docs/benchmarks.md, "Machine speed calibration").
REFERENCE_ROUND_US = 4.2
ENV_OVERRIDE = "FABRIC_MACHINE_SPEED"
PROBE_SAMPLES = 3000  # ~1 s: shorter probes scattered too widely (same section)
PROBE_ROUNDS = 50  # per sample: ~0.3 ms, short enough for many samples between preemptions
_DATAGRAM_BYTES = 4140  # a roce data packet's IP bytes
_HEADER = struct.Struct("!BBHII")


@dataclass(frozen=True)
class MachineSpeed:
    """What the probe measured and the factor the budget is scaled by.

    Attributes
    ----------
    round_us : float or None
        Median microseconds of one probe round; None when the factor was given.
    factor : float
        Share of the measured budget this machine forwards faithfully now, in (0, 1].
    source : str
        ``"probe"`` or the environment variable that set the factor.
    """

    round_us: float | None
    factor: float
    source: str

    def describe(self) -> str:
        """Where the factor came from, in words."""
        if self.round_us is None:
            return f"set by {self.source}"
        return f"probe: {self.round_us} us per round against {REFERENCE_ROUND_US} us"

    def as_dict(self) -> dict[str, float | str | None]:
        """The JSON form, for manifests."""
        return {"round_us": self.round_us, "reference_round_us": REFERENCE_ROUND_US,
                "factor": self.factor, "source": self.source}


def speed_factor(round_us: float) -> float:
    """Budget factor for a probe round of ``round_us`` microseconds (at most 1)."""
    if not round_us > 0:
        raise ValueError(f"a probe round must take a positive time, got {round_us} us")
    return min(1.0, REFERENCE_ROUND_US / round_us)


def probe_round_us(samples: int = PROBE_SAMPLES, rounds: int = PROBE_ROUNDS) -> float:
    """Median microseconds of one round: pack a header, send a 4 kB UDP datagram on
    loopback and read it back (``samples`` samples of ``rounds`` rounds; ~1 s)."""
    if samples < 1 or rounds < 1:
        raise ValueError("samples and rounds must be at least 1")
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        receiver.bind(("127.0.0.1", 0))
        sender.bind(("127.0.0.1", 0))
        sender.connect(receiver.getsockname())
        receiver.settimeout(1.0)  # loopback delivers within the send; never hang on a loss
        payload = bytearray(_DATAGRAM_BYTES)
        view = memoryview(payload)
        rx = bytearray(65536)
        per_sample: list[float] = []
        for sample in range(samples):
            start = time.perf_counter()
            for i in range(rounds):
                _HEADER.pack_into(payload, 0, 4, 0, 0xFFFF, sample, i)
                sender.send(view)
                receiver.recv_into(rx)
                _HEADER.unpack_from(rx)
            per_sample.append((time.perf_counter() - start) / rounds * 1e6)
    finally:
        sender.close()
        receiver.close()
    return statistics.median(per_sample)


def _from_environment(value: str) -> MachineSpeed:
    try:
        factor = float(value)
    except ValueError:
        factor = float("nan")
    if not 0 < factor <= 1:
        raise ValueError(f"{ENV_OVERRIDE} must be a factor in (0, 1], got {value!r}")
    return MachineSpeed(None, factor, ENV_OVERRIDE)


@functools.cache
def machine_speed() -> MachineSpeed:
    """This machine's speed, probed once per process (or taken from
    ``FABRIC_MACHINE_SPEED``).

    Raises
    ------
    ValueError
        When ``FABRIC_MACHINE_SPEED`` is not a number in (0, 1].
    """
    value = os.environ.get(ENV_OVERRIDE)
    if value is not None:
        return _from_environment(value)
    round_us = probe_round_us()
    return MachineSpeed(round(round_us, 2), round(speed_factor(round_us), 3), "probe")


def default_host_mbps(graph: nx.Graph, datapath: str = "user", busy_links: int | None = None,
                      packet_bytes: int = TCP_PACKET_BYTES, headroom: float = 1.0) -> float:
    """:func:`fabric.emulation.capacity.auto_host_mbps` on this machine as it runs now
    (the budget scaled by :func:`machine_speed`); the arguments are the same.

    Raises
    ------
    CapacityError
        When not even the smallest rate step fits.
    ValueError
        When ``FABRIC_MACHINE_SPEED`` is not a number in (0, 1].
    """
    return capacity.auto_host_mbps(graph, datapath, busy_links, packet_bytes, headroom,
                                   machine_speed().factor)
