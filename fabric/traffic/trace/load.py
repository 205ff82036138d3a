"""Load any supported trace into a :class:`~fabric.traffic.trace.schema.Workload` (pure).

The format is told by the path: a directory holding ``*.et`` files is a
Chakra trace (:mod:`~fabric.traffic.trace.chakra`), one holding ``*.json``
files a PyTorch profiler trace, one file per rank
(:mod:`~fabric.traffic.trace.kineto`); a ``.et`` file is read with its
siblings of the same workload; a JSON file is either a ``fabric-trace``
(:mod:`~fabric.traffic.trace.schema`) or one rank's profiler trace.
"""

from __future__ import annotations

from pathlib import Path

from fabric.traffic.trace import chakra, kineto, schema
from fabric.traffic.trace.schema import TraceError, Workload

_HEAD = 4096  # enough of a file to see a fabric-trace's "format" field


def _chakra_files(directory: Path, prefix: str = "") -> list[Path]:
    return sorted(p for p in directory.iterdir()
                  if p.name.startswith(prefix) and (p.suffix == ".et" or p.name.endswith(".et.gz")))


def _looks_own(path: Path) -> bool:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f'"{schema.FORMAT}"' in f.read(_HEAD)


def _load_directory(directory: Path) -> Workload:
    ets = _chakra_files(directory)
    if ets:
        return chakra.read_chakra(ets, directory.name)
    jsons = sorted(p for p in directory.glob("*.json") if p.name != chakra.COMM_GROUP_FILE)
    if not jsons:
        raise TraceError(f"{directory.name}: no trace files (*.json or *.et) in the directory")
    own = [p for p in jsons if _looks_own(p)]
    if own:
        if len(jsons) > 1:
            raise TraceError(f"{directory.name}: {own[0].name} is a {schema.FORMAT} file "
                             f"beside other JSON files: name the file")
        return schema.load(own[0])
    return kineto.read_kineto(jsons, directory.name)


def _load_json(path: Path) -> Workload:
    data = schema.read_json(path)
    if schema.is_own_format(data):
        return schema.from_dict(data, path.name)
    if kineto.is_kineto(data):
        return kineto.read_kineto([path], path.name)
    raise TraceError(f"{path.name}: not a trace (neither {schema.FORMAT}, a PyTorch profiler "
                     f"trace nor Chakra)")


def load_trace(path: Path | str) -> Workload:
    """Read a trace of any supported format and validate it.

    Parameters
    ----------
    path : Path or str
        A ``fabric-trace`` JSON file; a PyTorch profiler JSON file or a
        directory of them (one per rank); a Chakra ``.et`` file (its
        siblings ``<workload>.<rank>.et`` are read too) or a directory of them.

    Returns
    -------
    Workload
        Every rank's program and the process groups.

    Raises
    ------
    TraceError
        One line naming the file (and event): missing, not JSON, not a trace,
        no communication events, a collective the transport cannot run, ranks
        that disagree.
    """
    path = Path(path)
    if path.is_dir():
        return _load_directory(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such file or directory")
    if path.suffix == ".et" or path.name.endswith(".et.gz"):
        prefix = path.name[:path.name.rfind(".", 0, path.name.index(".et"))] + "."
        return chakra.read_chakra(_chakra_files(path.parent, prefix), path.name)
    return _load_json(path)
