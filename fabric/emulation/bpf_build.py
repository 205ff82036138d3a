"""Compiling the datapath's BPF programs with clang, cached by source and parameters.

Each object is named by a hash of its sources and ``-D`` constants and kept in a
root-owned cache directory (``/run/fabric/...``, like the run state), so a fabric
brought up again loads what it built before. A build writes beside the target and
renames it: a concurrent build never loads half an object, a failed one leaves nothing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Mapping, Sequence


def include_dirs() -> list[str]:
    """``-I`` flags clang needs for the kernel headers: Debian keeps ``asm/`` under the
    multiarch directory, which ``-target bpf`` does not search."""
    arch_dir = Path(f"/usr/include/{os.uname().machine}-linux-gnu")
    return [f"-I{arch_dir}"] if arch_dir.is_dir() else []


def compile_object(source: Path, cache_dir: Path, prefix: str, error: type[Exception],
                   headers: Sequence[Path] = (),
                   defines: Mapping[str, int] | None = None) -> Path:
    """Path of ``source`` compiled for BPF, building it if not cached.

    Parameters
    ----------
    source : Path
        The program's C file.
    cache_dir : Path
        Where objects are kept.
    prefix : str
        The start of the object's file name.
    error : type
        The exception raised when clang is missing or fails (with its last lines).
    headers : sequence of Path
        Headers it includes (their directories are searched; their text is hashed).
    defines : mapping, optional
        Integer ``-D`` constants.
    """
    defines = dict(defines or {})
    text = source.read_bytes() + b"".join(h.read_bytes() for h in headers)
    key = hashlib.sha256(text + repr(sorted(defines.items())).encode()).hexdigest()[:16]
    obj = cache_dir / f"{prefix}-{key}.o"
    if obj.exists():
        return obj
    if shutil.which("clang") is None:
        raise error(f"{source.name} needs clang to be built: run scripts/setup.sh to install it")
    cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = obj.with_suffix(f".{os.getpid()}.tmp")
    args = ["clang", "-O2", "-g", "-target", "bpf", "-Wall", "-Werror",
            *(f"-D{name}={value}ULL" for name, value in defines.items()),
            *dict.fromkeys(f"-I{h.parent}" for h in headers), *include_dirs(),
            "-c", str(source), "-o", str(partial)]
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise error(f"building {source.name} failed: {proc.stderr.strip()[-800:]}")
        partial.replace(obj)
    finally:
        partial.unlink(missing_ok=True)
    return obj
