"""The lossless switch's buffer accounting (``fabric/emulation/pfc_mmu.h``), compiled for
this machine and driven through ctypes: the very code the XDP programs run, without
root. The thresholds it is given come from :func:`fabric.model.flowcontrol.mmu_bytes`."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from fabric.model.flowcontrol import FlowControl, mmu_bytes

HEADER = Path(__file__).resolve().parents[2] / "fabric" / "emulation" / "pfc_mmu.h"
PORTS, LANES = 32, 8
NONE, PAUSE, RESUME, DROP = 0, 1, 2, 3
SHIM = """
#include "pfc_mmu.h"
int admit(const struct pfc_mmu_cfg *c, struct pfc_mmu_counts *m, pfc_u32 p, pfc_u32 q,
          pfc_u64 s) { return pfc_admit(c, m, p, q, s); }
int release(const struct pfc_mmu_cfg *c, struct pfc_mmu_counts *m, pfc_u32 p, pfc_u32 q,
            pfc_u64 s) { return pfc_release(c, m, p, q, s); }
pfc_u64 threshold(const struct pfc_mmu_cfg *c, const struct pfc_mmu_counts *m)
{ return pfc_threshold(c, m); }
"""


class Cfg(ctypes.Structure):
    _fields_ = [("shared_total", ctypes.c_uint64), ("reserve", ctypes.c_uint64),
                ("headroom", ctypes.c_uint64), ("resume_offset", ctypes.c_uint64),
                ("alpha_shift", ctypes.c_uint32), ("pad", ctypes.c_uint32)]


class Counts(ctypes.Structure):
    _fields_ = [("shared_used", ctypes.c_uint64),
                ("ingress", (ctypes.c_uint64 * LANES) * PORTS),
                ("hdrm", (ctypes.c_uint64 * LANES) * PORTS),
                ("paused", (ctypes.c_uint8 * LANES) * PORTS),
                ("verdicts", (ctypes.c_uint16 * LANES) * PORTS)]


@pytest.fixture(scope="module")
def mmu(tmp_path_factory):
    compiler = shutil.which("clang") or shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler (scripts/setup.sh installs clang)")
    build = tmp_path_factory.mktemp("mmu")
    (build / "shim.c").write_text(SHIM)
    lib = build / "libmmu.so"
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", f"-I{HEADER.parent}",
                    str(build / "shim.c"), "-o", str(lib)], check=True, capture_output=True)
    dll = ctypes.CDLL(str(lib))
    for name in ("admit", "release"):
        getattr(dll, name).argtypes = [ctypes.POINTER(Cfg), ctypes.POINTER(Counts),
                                       ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint64]
    dll.threshold.argtypes = [ctypes.POINTER(Cfg), ctypes.POINTER(Counts)]
    dll.threshold.restype = ctypes.c_uint64
    return dll


FRAME = 1000
# a 4-port switch of 10-frame ports, one lossless lane: 40 frames, 4 x (1 + 4) reserved
# and headroom, 20 to share; a port pauses at 1/2 of the free shared buffer (a reaction of
# one packet time: the headroom covers it and the 3 frames in flight)
FC = FlowControl(buffer_pkts_per_port=10, reserve_pkts=1, headroom_pkts=4, resume_pkts=1,
                 alpha_shift=1, reaction_pkts=1)


def _switch() -> tuple[Cfg, Counts]:
    b = mmu_bytes(FC, FRAME, ports=4, lossless_count=1, queue_pkts=64)
    return Cfg(b.shared_total, b.reserve, b.headroom, b.resume_offset, b.alpha_shift, 0), Counts()


def test_the_thresholds_in_bytes():
    b = mmu_bytes(FC, FRAME, ports=4, lossless_count=1, queue_pkts=64)
    assert (b.buffer, b.shared_total, b.reserve, b.headroom, b.resume_offset) == \
        (40_000, 20_000, 1000, 4000, 1000)


def test_a_port_pauses_when_its_shared_use_reaches_the_dynamic_threshold(mmu):
    cfg, m = _switch()
    verdicts = [mmu.admit(cfg, m, 0, 0, FRAME) for _ in range(8)]
    # 1 frame reserved; then shared use s pauses once s >= (20 - s) / 2, at s = 7
    assert verdicts == [NONE] * 7 + [PAUSE]
    assert m.shared_used == 7 * FRAME and m.paused[0][0] == 1
    assert mmu.threshold(cfg, m) == (20_000 - 7 * FRAME) >> 1


def test_a_paused_port_fills_its_headroom_then_drops(mmu):
    cfg, m = _switch()
    for _ in range(8):
        mmu.admit(cfg, m, 0, 0, FRAME)
    after = [mmu.admit(cfg, m, 0, 0, FRAME) for _ in range(6)]
    assert after == [NONE] * 4 + [DROP, DROP]  # 4 frames of headroom
    assert m.hdrm[0][0] == 4 * FRAME and m.ingress[0][0] == 8 * FRAME  # drops not charged


def test_resume_waits_for_an_empty_headroom_and_the_offset(mmu):
    cfg, m = _switch()
    for _ in range(10):
        mmu.admit(cfg, m, 0, 0, FRAME)  # 8 in reserve + shared, 2 in headroom
    verdicts = [mmu.release(cfg, m, 0, 0, FRAME) for _ in range(10)]
    # the headroom empties first; then the shared use s (7 frames) resumes once
    # s + 1 <= (20 - s) / 2, at s = 6: the third release
    assert verdicts[:2] == [NONE, NONE]
    assert verdicts.index(RESUME) == 2 and verdicts.count(RESUME) == 1
    assert (m.shared_used, m.ingress[0][0], m.hdrm[0][0]) == (0, 0, 0)


def test_each_pause_and_resume_counts_one_verdict_of_its_port_and_lane(mmu):
    # the daemon orders events by this count, whatever order the CPUs report them in
    cfg, m = _switch()
    m.verdicts[0][0] = 0xFFFF  # it wraps
    for _ in range(10):
        mmu.admit(cfg, m, 0, 0, FRAME)  # one pause; the headroom admits without another
    assert m.verdicts[0][0] == 0
    for _ in range(10):
        mmu.release(cfg, m, 0, 0, FRAME)  # one resume
    mmu.admit(cfg, m, 1, 0, FRAME)
    assert (m.verdicts[0][0], m.verdicts[1][0], m.verdicts[0][1]) == (1, 0, 0)


def test_every_byte_admitted_and_released_leaves_nothing_behind(mmu):
    cfg, m = _switch()
    sizes = [(p, q, 300 + 97 * i % 900) for i, (p, q) in
             enumerate([(0, 0), (1, 0), (0, 1), (3, 2)] * 6)]
    admitted = [(p, q, s) for p, q, s in sizes if mmu.admit(cfg, m, p, q, s) != DROP]
    for p, q, s in reversed(admitted):
        mmu.release(cfg, m, p, q, s)
    assert m.shared_used == 0
    assert all(m.ingress[p][q] == 0 and m.hdrm[p][q] == 0 for p, q, _ in sizes)


def test_one_port_filling_the_buffer_lowers_every_ports_threshold(mmu):
    cfg, m = _switch()
    alone = mmu.threshold(cfg, m)
    for _ in range(6):
        mmu.admit(cfg, m, 1, 0, FRAME)
    assert mmu.threshold(cfg, m) < alone
    assert [mmu.admit(cfg, m, 2, 0, FRAME) for _ in range(6)][-1] == PAUSE


def test_a_release_of_more_than_is_held_does_not_wrap(mmu):
    cfg, m = _switch()
    mmu.admit(cfg, m, 0, 0, FRAME)
    mmu.release(cfg, m, 0, 0, 5 * FRAME)
    assert (m.shared_used, m.ingress[0][0], m.hdrm[0][0]) == (0, 0, 0)
