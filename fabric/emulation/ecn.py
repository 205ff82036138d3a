"""ECN marking on the switches' egress queues: a compiled cls_bpf filter per rate.

This kernel has no marking qdisc, so each shaped switch queue (switch ports
towards switches, endpoints' IFBs for the way into an endpoint) gets a BPF
filter on its HTB root that keeps a virtual copy of the queue and marks
ECN-capable packets CE by RED's ramp (``ecn_marker.bpf.c`` says how).
Senders' own NIC queues are not marked, as an RDMA NIC's are not.

The rate and thresholds are compiled in (``clang -D``), one object per
parameter set, cached in ``/run/fabric/ecn`` (root's, like the run state).
Each queue's filter gets its own state: tc loads the object once per filter.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

from fabric.emulation import bpf_build
from fabric.emulation.ovs import STATE_DIR
from fabric.emulation.shaping import DEFAULT_FRAME_BYTES

SOURCE = Path(__file__).with_name("ecn_marker.bpf.c")
CACHE_DIR = STATE_DIR / "ecn"
MARKER_PRIO = 1  # tc filter priority: before the lanes' u32 filters
_U32_MAX = 2**32 - 1


class MarkerError(RuntimeError):
    """The marking filter cannot be built or read here (no clang, a failed build, no bpf(2))."""


@dataclass(frozen=True)
class EcnMarking:
    """RED-style marking thresholds, in full-size packets of backlog at the link rate.

    A packet that finds ``kmin`` packets queued is marked with a probability
    rising linearly to ``pmax`` at ``kmax``, and always beyond. Equal ``kmin``
    and ``kmax`` mark as a step (DCTCP's K).
    """

    kmin: float = 4.0
    kmax: float = 64.0
    pmax: float = 0.2

    def __post_init__(self) -> None:
        if not 0 < self.kmin <= self.kmax:
            raise ValueError(f"ECN thresholds need 0 < kmin <= kmax, got {self.kmin}, "
                             f"{self.kmax}")
        if not 0 < self.pmax <= 1:
            raise ValueError(f"ECN pmax must be in (0, 1], got {self.pmax}")


def marker_defines(rate_mbps: float, queue_pkts: int, marking: EcnMarking,
                   frame_bytes: int = DEFAULT_FRAME_BYTES) -> dict[str, int]:
    """The compile-time constants of one queue's marker (pure); thresholds and the
    queue's capacity count full-size frames of ``frame_bytes``."""
    ns_per_byte = 8e3 / rate_mbps  # 8 bits / (rate_mbps * 1e6 bit/s) in ns
    packet_ns = frame_bytes * ns_per_byte
    kmin = round(marking.kmin * packet_ns)
    # at kmin == kmax the ramp is empty (and its division never runs)
    kmax = max(round(marking.kmax * packet_ns), kmin + 1)
    return {"NS_PER_KBYTE": round(1000 * ns_per_byte), "KMIN_NS": kmin, "KMAX_NS": kmax,
            "CAP_NS": round(queue_pkts * packet_ns),
            "PMAX_U32": round(marking.pmax * _U32_MAX)}


def check_compiler() -> None:
    """Raise :class:`MarkerError` when clang is missing (before anything changes)."""
    if shutil.which("clang") is None:
        raise MarkerError("ECN marking needs clang to build its BPF filter: run "
                          "scripts/setup.sh to install it")


def marker_object(rate_mbps: float, queue_pkts: int, marking: EcnMarking,
                  frame_bytes: int = DEFAULT_FRAME_BYTES, cache_dir: Path = CACHE_DIR) -> Path:
    """Path of the compiled marker for one queue, building it if not cached.

    Raises
    ------
    MarkerError
        When clang is missing or fails.
    """
    defines = marker_defines(rate_mbps, queue_pkts, marking, frame_bytes)
    return bpf_build.compile_object(SOURCE, cache_dir, "marker", MarkerError, defines=defines)


def marker_line(dev: str, obj: Path, replace: bool = False) -> str:
    """The ``tc -batch`` line that puts marker ``obj`` on ``dev``'s HTB root."""
    if any(c.isspace() for c in str(obj)):
        raise MarkerError(f"marker path {obj} has whitespace (tc -batch splits on it)")
    verb = "replace" if replace else "add"
    return (f"filter {verb} dev {dev} parent 1: protocol ip prio {MARKER_PRIO} handle 1 "
            f"bpf obj {obj} sec classifier")


# -- reading a marker's state (bpf(2): the object ids tc reports, no bpftool needed) -----
_SYS_BPF = {"x86_64": 321, "aarch64": 280}
_BPF_MAP_LOOKUP_ELEM, _BPF_PROG_GET_FD_BY_ID, _BPF_MAP_GET_FD_BY_ID = 1, 13, 14
_BPF_OBJ_GET_INFO_BY_FD = 15
_PROG_INFO_LEN = 64  # struct bpf_prog_info up to map_ids
_QUEUE = struct.Struct("=QQQ")  # struct queue in ecn_marker.bpf.c


@dataclass(frozen=True)
class MarkerState:
    """One queue's marker: its virtual queue and counters."""

    empty_at_ns: int  # CLOCK_MONOTONIC ns at which the virtual queue drains
    ect: int          # ECN-capable packets seen
    marked: int       # of them, marked CE

    def backlog_s(self, now_ns: int) -> float:
        """Seconds of backlog at ``now_ns`` (0 when drained)."""
        return max(0, self.empty_at_ns - now_ns) / 1e9


def marker_prog_id(tc_filter_show: str) -> int | None:
    """The BPF program id of the marker in ``tc filter show`` output (pure)."""
    found = re.search(r" bpf .*\bname mark\b", tc_filter_show)
    if not found:
        return None
    prog = re.search(r"\bid (\d+)", found.group(0))
    return int(prog.group(1)) if prog else None


def _bpf(cmd: int, attr: ctypes.Array) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    number = _SYS_BPF.get(os.uname().machine)
    if number is None:
        raise MarkerError(f"reading BPF maps is not supported on {os.uname().machine}")
    ret = libc.syscall(number, cmd, ctypes.byref(attr), ctypes.sizeof(attr))
    if ret < 0:
        err = ctypes.get_errno()
        raise MarkerError(f"bpf({cmd}) failed: {os.strerror(err)}")
    return ret


class MarkerReader:
    """Reads one marker's state through its program's map (root only).

    Parameters
    ----------
    prog_id : int
        From :func:`marker_prog_id`.
    """

    def __init__(self, prog_id: int) -> None:
        attr = ctypes.create_string_buffer(struct.pack("=I", prog_id), 16)
        prog_fd = _bpf(_BPF_PROG_GET_FD_BY_ID, attr)
        try:
            map_ids = (ctypes.c_uint32 * 1)()
            info = ctypes.create_string_buffer(_PROG_INFO_LEN)
            struct.pack_into("=IQ", info, 52, 1, ctypes.addressof(map_ids))
            attr = ctypes.create_string_buffer(
                struct.pack("=IIQ", prog_fd, _PROG_INFO_LEN, ctypes.addressof(info)))
            _bpf(_BPF_OBJ_GET_INFO_BY_FD, attr)
        finally:
            os.close(prog_fd)
        self.map_fd = _bpf(_BPF_MAP_GET_FD_BY_ID,
                           ctypes.create_string_buffer(struct.pack("=I", map_ids[0]), 16))
        self._key = ctypes.c_uint32(0)
        self._value = ctypes.create_string_buffer(_QUEUE.size)
        self._attr = ctypes.create_string_buffer(struct.pack(
            "=IIQQQ", self.map_fd, 0, ctypes.addressof(self._key),
            ctypes.addressof(self._value), 0))

    def read(self) -> MarkerState:
        """The marker's current state."""
        _bpf(_BPF_MAP_LOOKUP_ELEM, self._attr)
        return MarkerState(*_QUEUE.unpack(self._value.raw))

    def close(self) -> None:
        """Release the map."""
        if self.map_fd >= 0:
            os.close(self.map_fd)
            self.map_fd = -1
