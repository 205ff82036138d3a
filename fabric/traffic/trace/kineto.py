"""Read PyTorch profiler (Kineto, Chrome JSON) traces into a :class:`Workload` (pure).

One JSON file per rank, as ``torch.profiler`` writes it with
``export_chrome_trace`` or ``tensorboard_trace_handler``; checked with the
traces torch 2.13.0 writes (``schemaVersion`` 1). What a file holds:

- ``distributedInfo``: the rank, the world size and, in ``pg_config``, every
  process group the rank belongs to (``pg_name`` and global ``ranks``). The
  groups keep torch's names (``"0"`` is the default group).
- With the NCCL backend, ``record_param_comms`` events whose arguments name the
  collective (``Collective name``), its sizes (``In msg nelems``, ``Out msg
  nelems``, ``dtype``) and group (``Process Group Name``, ``Process Group
  Ranks``); for ``send``/``recv`` torch puts the peer in ``Rank``. When a file
  has them, only they are read.
- With gloo (torch 2.13 on CPU records no ``record_param_comms``): the
  dispatcher ops ``c10d::allreduce_``, ``c10d::_allgather_base_``, ... on the
  main thread with ``Input Dims`` and ``Input type`` (tensor lists have no
  type) and, on the process group's worker threads, ``gloo:all_reduce``,
  ``gloo:all_gather``... events spanning the actual work, without a group.
  See :mod:`fabric.traffic.trace.kineto_gloo` for how the two are matched.

Timing: a collective runs from the start of its event on the main thread to
the end of the backend event that did the work (``gloo:*``, or a GPU kernel
with the same ``External id``), or of its own event when there is none. A
rank's compute gap before a collective is the time from the end of its
previous collective (or from the start of the first ``ProfilerStep#N``) to
its start, zero when they overlap (asynchronous collectives). Steps come from
the ``ProfilerStep#N`` spans: an operation belongs to the last step that
started at or before it (the first step if it comes before them all; step 0
without steps). Barriers become one-element all-reduces, as NCCL runs them;
``broadcast``, ``reduce``, ``gather`` and ``scatter`` are refused.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence, cast

from fabric.traffic.trace import kineto_gloo
from fabric.traffic.trace.dtypes import dtype_bytes
from fabric.traffic.trace.kineto_gloo import Comm
from fabric.traffic.trace.schema import (Collective, Compute, Op, TraceError, Workload,
                                         validate)

_STEP = re.compile(r"ProfilerStep#(\d+)")
# record_param_comms "Collective name" -> operation (names torch 2.x uses)
_PARAM_COMMS = {
    "allreduce": "all_reduce", "allreduce_coalesced": "all_reduce",
    "allgather": "all_gather", "_allgather_base": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather", "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "all_to_all": "all_to_all", "all_to_allv": "all_to_all", "alltoall": "all_to_all",
    "alltoall_base": "all_to_all", "send": "send", "recv": "recv", "barrier": "barrier",
    "broadcast": "broadcast", "reduce": "reduce", "gather": "gather", "scatter": "scatter",
}
_NOT_COMMUNICATION = {"wait", "init", "coalesced", "", "startCoalescing", "endCoalescing"}


@dataclass(frozen=True)
class RankTrace:
    """What one rank's file says: its rank, world size, groups and operations."""

    rank: int
    world: int
    groups: dict[str, tuple[int, ...]]
    ops: tuple[Op, ...]


def read_kineto(paths: Sequence[Path], source: str) -> Workload:
    """Read one Kineto JSON file per rank into a validated :class:`Workload`.

    Parameters
    ----------
    paths : sequence of Path
        The files, in any order: each names its rank in ``distributedInfo``.
    source : str
        How messages name the whole trace (a directory or file name).

    Raises
    ------
    TraceError
        On a file that is not a Kineto trace, a missing or repeated rank,
        groups the files disagree on, no communication at all, an operation
        the transport cannot run, or a failure of
        :func:`~fabric.traffic.trace.schema.validate`.
    """
    traces = [read_rank(Path(p)) for p in paths]
    by_rank: dict[int, RankTrace] = {}
    for path, trace in zip(paths, traces):
        if trace.rank in by_rank:
            raise TraceError(f"{Path(path).name}: rank {trace.rank} appears in two files")
        by_rank[trace.rank] = trace
    world = max(max(t.world for t in traces), len(traces))
    missing = [r for r in range(world) if r not in by_rank]
    if missing:
        raise TraceError(f"{source}: no file for rank {missing[0]} of {world}")
    groups: dict[str, tuple[int, ...]] = {}
    for path, trace in zip(paths, traces):
        for name, members in trace.groups.items():
            if groups.setdefault(name, members) != members:
                raise TraceError(f"{Path(path).name}: group {name!r} holds ranks "
                                 f"{list(members)}, another file says {list(groups[name])}")
    if not any(isinstance(op, Collective) for t in traces for op in t.ops):
        raise TraceError(f"{source}: no communication events (record_param_comms, c10d::*) "
                         f"in any file")
    workload = Workload(world, groups, tuple(by_rank[r].ops for r in range(world)), source)
    validate(workload)
    return workload


def load_events(path: Path) -> dict[str, Any]:
    """The parsed JSON of a Kineto file; :class:`TraceError` when it is not one."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path.name}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path.name}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not is_kineto(data):
        raise TraceError(f"{path.name}: not a PyTorch profiler trace (no \"traceEvents\")")
    return data


def is_kineto(data: Any) -> bool:
    """True for a parsed Chrome-trace document with a ``traceEvents`` list."""
    return isinstance(data, dict) and isinstance(data.get("traceEvents"), list)


def read_rank(path: Path) -> RankTrace:
    """Read one rank's file (see the module docstring for what is read)."""
    data = load_events(path)
    events = [e for e in data["traceEvents"] if isinstance(e, dict)]
    info = data.get("distributedInfo") or {}
    comms = _param_comms(path, events)
    rank = info.get("rank", comms[0].rank if comms else None)
    if not isinstance(rank, int):
        if not any(e.get("name") in kineto_gloo.C10D_OPS for e in events):
            return RankTrace(0, 1, {}, ())  # not distributed: no communication to read
        raise TraceError(f"{path.name}: the trace names no rank (no distributedInfo)")
    world = int(info.get("world_size", 0) or 0)
    groups = _groups(info, comms, world, rank)
    if not comms:
        comms = kineto_gloo.c10d_comms(path, events, groups, rank)
    world = max([world, rank + 1] + [r + 1 for m in groups.values() for r in m])
    return RankTrace(rank, world, groups, tuple(_program(path, events, comms, rank, groups)))


def _groups(info: dict[str, Any], comms: list[Comm], world: int,
            rank: int) -> dict[str, tuple[int, ...]]:
    groups = {str(pg["pg_name"]): tuple(int(r) for r in pg["ranks"])
              for pg in info.get("pg_config", []) if isinstance(pg, dict) and "ranks" in pg}
    for comm in comms:
        if comm.group is not None and comm.group_ranks:
            groups.setdefault(comm.group, comm.group_ranks)
    if not groups and world:
        groups["0"] = tuple(range(world))  # only the default group
    return groups


def _param_comms(path: Path, events: list[dict[str, Any]]) -> list[Comm]:
    """The ``record_param_comms`` events, as :class:`Comm` (empty without them)."""
    kernels = {e["args"].get("External id"): e for e in events
               if e.get("cat") == "kernel" and "nccl" in str(e.get("name", "")).lower()
               and isinstance(e.get("args"), dict)}
    out = []
    for index, e in enumerate(events):
        args = e.get("args") or {}
        if e.get("name") != "record_param_comms" or not isinstance(args, dict):
            continue
        label = str(args.get("Collective name", ""))
        if label in _NOT_COMMUNICATION:
            continue
        name = _PARAM_COMMS.get(label, label)
        count = args.get("Out msg nelems" if name in ("all_gather", "recv") else "In msg nelems",
                         0)
        size = int(count) * dtype_bytes(path, index, args.get("dtype", "float"))
        start = float(e.get("ts", 0.0))
        kernel = kernels.get(args.get("External id"))
        end = max(start + float(e.get("dur", 0.0)),
                  float(kernel["ts"]) + float(kernel.get("dur", 0.0)) if kernel else 0.0)
        ranks = _ranks_arg(args.get("Process Group Ranks"))
        p2p = name in ("send", "recv")
        out.append(Comm(index, label, name, start, end, size, None,
                        str(args.get("Process Group Name", "")) or None, ranks,
                        int(args["Rank"]) if p2p and "Rank" in args else None,
                        None if p2p else args.get("Rank"), e.get("tid")))
    return out


def _ranks_arg(value: Any) -> tuple[int, ...] | None:
    """``Process Group Ranks`` (a JSON list, as a string or not)."""
    try:
        ranks = json.loads(value) if isinstance(value, str) else value
        return tuple(int(r) for r in ranks) if isinstance(ranks, list) and ranks else None
    except (ValueError, TypeError):
        return None


def _steps(events: list[dict[str, Any]]) -> list[tuple[float, int]]:
    """``(start, N)`` of every ``ProfilerStep#N`` span, by start."""
    found = []
    for e in events:
        match = _STEP.fullmatch(str(e.get("name", "")))
        if match and e.get("ph") == "X":
            found.append((float(e.get("ts", 0.0)), int(match.group(1))))
    return sorted(found)


def _step_of(steps: list[tuple[float, int]], ts: float) -> int:
    current = steps[0][1] if steps else 0
    for start, number in steps:
        if start <= ts:
            current = number
    return current


def _program(path: Path, events: list[dict[str, Any]], comms: list[Comm], rank: int,
             groups: dict[str, tuple[int, ...]]) -> list[Op]:
    """Collectives and the compute gaps between them, in start order."""
    steps = _steps(events)
    ops: list[Op] = []
    last_end = steps[0][0] if steps else None
    for comm in sorted(comms, key=lambda c: (c.start, c.index)):
        where = f"{path.name}: event {comm.index} ({comm.label} on rank {rank})"
        step = _step_of(steps, comm.start)
        if last_end is not None and comm.start > last_end:
            ops.append(Compute((comm.start - last_end) * 1e-6, step, where))
        last_end = comm.end if last_end is None else max(last_end, comm.end)
        ops.append(_collective(comm, where, step, groups))
    return ops


def _collective(comm: Comm, where: str, step: int,
                groups: dict[str, tuple[int, ...]]) -> Collective:
    name = "all_reduce" if comm.name == "barrier" else comm.name
    if name not in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send",
                    "recv"):
        raise TraceError(f"{where}: the transport cannot run {comm.name!r} (it runs "
                         f"all_reduce, all_gather, reduce_scatter, all_to_all, send, recv)")
    if name in ("send", "recv"):
        if comm.peer is None:
            raise TraceError(f"{where}: the trace does not say which rank is the peer")
        # a size the trace lacks fails validate() with the event's name
        return Collective(name, cast(int, comm.bytes), step, None, comm.peer, where)
    if comm.group is None:
        raise TraceError(f"{where}: the trace does not say which process group ran it")
    size = comm.bytes
    if comm.per_rank_bytes is not None:  # list-of-tensors forms record one rank's part
        size = comm.per_rank_bytes * len(groups.get(comm.group, ()))
    return Collective(name, cast(int, size), step, comm.group, None, where)
