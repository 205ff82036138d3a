"""Build ``idle_accept.c``, the library fabric preloads into ovs-vswitchd.

ovs-vswitchd's main loop, which also forwards every packet in userspace, calls
``accept`` on each of its listening sockets on every iteration: two per bridge
(``<bridge>.mgmt``, which ``ovs-ofctl`` uses, and ``<bridge>.snoop``) and its
control socket. An ``accept`` that finds no connection still allocates and
frees a socket in the kernel, and each packet waits in its socket for part of
an iteration. The library answers ``EAGAIN`` without a system call for a
non-blocking socket that the thread's last ``poll`` found idle (the next
``poll`` wakes the loop when a connection arrives), so ``ovs-ofctl`` works as
before (measured: docs/benchmarks.md, "Where its main loop goes").

The object is built with clang (which ``scripts/setup.sh`` installs) into
``/run/fabric/preload``, once per source version.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("idle_accept.c")
CACHE_DIR = Path("/run/fabric/preload")


class BuildError(RuntimeError):
    """The library cannot be built here (no clang, or the build failed)."""


def library(cache_dir: Path = CACHE_DIR) -> Path:
    """Path of the built library, building it if this source version is not cached.

    Parameters
    ----------
    cache_dir : Path
        Where built objects are kept (created, mode 0700).

    Raises
    ------
    BuildError
        When clang is missing or fails.
    """
    source = SOURCE.read_bytes()
    built = cache_dir / f"idle_accept-{hashlib.sha256(source).hexdigest()[:16]}.so"
    if built.exists():
        return built
    if shutil.which("clang") is None:
        raise BuildError("clang is missing (scripts/setup.sh installs it)")
    partial = built.with_suffix(f".{os.getpid()}.tmp")
    try:
        cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        proc = subprocess.run(["clang", "-O2", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror",
                               str(SOURCE), "-o", str(partial), "-ldl"],
                              capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise BuildError(f"clang failed: {proc.stderr.strip()[-600:]}")
        partial.replace(built)  # atomic: a concurrent start never preloads half a file
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"building in {cache_dir} failed: {exc}") from None
    finally:
        with contextlib.suppress(OSError):  # a failed or interrupted build leaves nothing
            partial.unlink(missing_ok=True)
    return built
