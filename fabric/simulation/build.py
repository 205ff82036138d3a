"""Compile the ns-3 program once per version of its sources (no root needed).

The binary is cached under ``$XDG_CACHE_HOME/fabric/ns3`` (default
``~/.cache``; the system's temporary directory for a user without a writable
home) in a directory named by the hash of every source and header, the compiler flags, the
ns-3 version and the CPU model, so an edited source, an upgraded ns-3 or
another machine sharing the home gets its own build and none overwrites
another's binary.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from fabric.errors import UserError

SOURCE_DIR = Path(__file__).with_name("ns3")
# the program, one concern a file (fabric_sim.cc holds main), compiled in one invocation
SOURCES = tuple(sorted(SOURCE_DIR.glob("*.cc")))
HEADERS = tuple(sorted(SOURCE_DIR.glob("*.h")))
# the adaptive-routing choice, shared with the emulator's datapath
AR_HEADER = Path(__file__).parents[1] / "routing" / "switch_ar.h"
NS3_HEADER = Path("/usr/include/ns3/core-module.h")
NS3_LIBRARIES = ("ns3-core", "ns3-network", "ns3-point-to-point")
# built where it runs, so tuned for this machine's CPU (-march=native: 10 % faster)
FLAGS = ("-O3", "-march=native", "-std=c++17")
INSTALL_HINT = "install it with: sudo scripts/setup.sh --ns3 (Debian's libns3-dev and g++)"


class SimulatorMissing(UserError):
    """ns-3's headers or a C++ compiler are not installed."""


def cache_dir() -> Path:
    """Where built simulators are kept (created if missing)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    path = Path(base) / "fabric" / "ns3"
    try:
        path.mkdir(parents=True, exist_ok=True)
        if os.access(path, os.W_OK):
            return path
    except OSError:
        pass
    path = Path(tempfile.gettempdir()) / f"fabric-ns3-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    if path.stat().st_uid != os.getuid():  # never run a binary someone else put there
        raise SimulatorMissing(f"{path} belongs to another user; set XDG_CACHE_HOME")
    return path


def _ns3_version() -> str:
    libs = sorted(Path("/usr/lib").glob("*/libns3-core.so.*")) or \
        sorted(Path("/usr/lib").glob("libns3-core.so.*"))
    return libs[-1].name if libs else "unknown"


def _cpu() -> str:
    """The CPU model (a binary built for one CPU may not run on another: a shared home)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    return next((line for line in text.splitlines() if line.startswith("model name")), "")


def simulator_binary() -> Path:
    """The built simulator, compiling it first if this source has no binary yet.

    Raises
    ------
    SimulatorMissing
        Without ns-3's development files or g++, in one line that says how to
        install them.
    """
    compiler = shutil.which("g++")
    if not NS3_HEADER.exists() or compiler is None:
        missing = "ns-3 (libns3-dev)" if not NS3_HEADER.exists() else "g++"
        raise SimulatorMissing(f"--backend ns3 needs {missing}; {INSTALL_HINT}")
    digest = hashlib.sha256()
    for path in (*SOURCES, *HEADERS, AR_HEADER):  # a renamed file is another program too
        digest.update(f"{path.name}\0".encode() + path.read_bytes() + b"\0")
    digest.update("|".join((_ns3_version(), " ".join(FLAGS), _cpu())).encode())
    target = cache_dir() / digest.hexdigest()[:16] / "fabric-sim"
    if target.exists():
        return target
    target.parent.mkdir(exist_ok=True)
    # build beside the target and rename: a concurrent build never sees half a binary
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / "fabric-sim"
        cmd = [compiler, *FLAGS, f"-I{SOURCE_DIR}", f"-I{AR_HEADER.parent}", "-o", str(out),
               *(str(source) for source in SOURCES), *(f"-l{lib}" for lib in NS3_LIBRARIES)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            first = next((line for line in done.stderr.splitlines() if "error" in line),
                         done.stderr.strip()[:300])
            raise SimulatorMissing(f"building the ns-3 simulator failed: {first}")
        os.replace(out, target)
    return target
