"""Collectives of a gloo-backend Kineto trace, which names no process group (pure).

torch 2.13 on CPU with gloo records, per collective, a dispatcher op on the
main thread (``c10d::allreduce_``, ``c10d::_allgather_base_``,
``c10d::_reduce_scatter_base_``, ``c10d::alltoall_base_``, ``c10d::send``...,
with ``Input Dims`` and ``Input type`` but no group, and no dtype for tensor
lists) and, on a worker thread of the process group that ran it, a
``gloo:<collective>`` span covering the actual work (gloo runs a
reduce-scatter as ``gloo:all_reduce`` of the whole input).

Each dispatcher op is matched with the earliest unmatched backend span of a
compatible name that starts at or after it (a group's work queue runs in issue
order). The group comes from the worker thread: every gloo process group starts
its worker threads when it is created, one after another, so a rank's worker
threads form runs of consecutive thread ids, one run per group, in the order
the groups were created (the order of ``distributedInfo.pg_config``). When the
runs do not pair one-to-one with the rank's groups (a group that ran nothing
while profiled), the reader says it cannot tell; a rank in a single group
needs none of this. A wrong attribution would break the per-group agreement
that :func:`~fabric.traffic.trace.schema.validate` checks afterwards.

Sizes: the numel of the tensor argument the nccl-tests size is about (the
output of an all-gather, the input of a reduce-scatter), times the element
size of its ``Input type`` or, for tensor lists, of the backend span. The
list forms (``c10d::allgather_``, ``c10d::reduce_scatter_``) record one
rank's part: it is multiplied by the group size. Send and receive peers are
read from the op's ``Concrete Inputs`` as ranks of the default group.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabric.traffic.trace.dtypes import dtype_bytes
from fabric.traffic.trace.schema import TraceError

# dispatcher op -> (operation, index of the sized argument, recorded for one rank only)
C10D_OPS: dict[str, tuple[str, int, bool]] = {
    "c10d::allreduce_": ("all_reduce", 0, False),
    "c10d::allreduce_coalesced_": ("all_reduce", 0, False),
    "c10d::_allgather_base_": ("all_gather", 0, False),
    "c10d::allgather_into_tensor_coalesced_": ("all_gather", 0, False),
    "c10d::allgather_": ("all_gather", 1, True),
    "c10d::allgather_coalesced_": ("all_gather", 1, True),
    "c10d::_reduce_scatter_base_": ("reduce_scatter", 1, False),
    "c10d::reduce_scatter_tensor_coalesced_": ("reduce_scatter", 1, False),
    "c10d::reduce_scatter_": ("reduce_scatter", 0, True),
    "c10d::alltoall_base_": ("all_to_all", 1, False),
    "c10d::alltoall_": ("all_to_all", 1, False),
    "c10d::barrier": ("barrier", 0, False),
    "c10d::broadcast_": ("broadcast", 0, False),
    "c10d::reduce_": ("reduce", 0, False),
    "c10d::gather_": ("gather", 0, False),
    "c10d::scatter_": ("scatter", 0, False),
    "c10d::send": ("send", 0, False),
    "c10d::recv_": ("recv", 0, False),
    "c10d::recv_any_source_": ("recv", 0, False),
}
# backend span names (letters only) that can do each operation's work
_BACKEND = {"all_reduce": {"allreduce"}, "all_gather": {"allgather", "allgatherbase"},
            "reduce_scatter": {"reducescatter", "allreduce"}, "all_to_all": {"alltoall",
                                                                            "alltoallbase"},
            "barrier": {"barrier", "allreduce"}, "broadcast": {"broadcast"},
            "reduce": {"reduce"}, "gather": {"gather"}, "scatter": {"scatter"},
            "send": {"send"}, "recv": {"recv", "recvanysource"}}

_NEEDS_GROUP = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier")


@dataclass(frozen=True)
class Comm:
    """One communication event of a rank's trace, before it becomes an operation.

    ``bytes`` is the nccl-tests size, or None with ``per_rank_bytes`` set
    when only one rank's part is known (times the group size).
    """

    index: int
    label: str
    name: str
    start: float  # microseconds
    end: float
    bytes: int | None
    per_rank_bytes: int | None
    group: str | None
    group_ranks: tuple[int, ...] | None
    peer: int | None
    rank: int | None
    tid: Any


def _letters(name: str) -> str:
    return "".join(ch for ch in name.split(":", 1)[-1].lower() if ch.isalpha())


def _backend_spans(events: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    return sorted(((i, e) for i, e in enumerate(events)
                   if str(e.get("name", "")).startswith(("gloo:", "nccl:"))
                   and e.get("ph") == "X"), key=lambda ie: (float(ie[1].get("ts", 0)), ie[0]))


def _match(ops: list[tuple[int, dict[str, Any]]],
           spans: list[tuple[int, dict[str, Any]]]) -> dict[int, dict[str, Any]]:
    """Op index -> the backend span that did its work (see the module docstring)."""
    used: set[int] = set()
    found = {}
    for index, op in ops:
        kind = C10D_OPS[op["name"]][0]
        for span_index, span in spans:
            if (span_index not in used and float(span.get("ts", 0)) >= float(op.get("ts", 0))
                    and _letters(span["name"]) in _BACKEND[kind]):
                used.add(span_index)
                found[index] = span
                break
    return found


def _thread_groups(main_tids: set[Any], spans: list[dict[str, Any]],
                   groups: dict[str, tuple[int, ...]]) -> dict[Any, str] | None:
    """Worker thread id -> group, or None when the runs do not pair with the groups."""
    tids = sorted({tid for s in spans for tid in [s.get("tid")]
                   if isinstance(tid, int) and tid not in main_tids})
    runs: list[list[int]] = []
    for tid in tids:
        if runs and tid == runs[-1][-1] + 1:
            runs[-1].append(tid)
        else:
            runs.append([tid])
    if len(runs) != len(groups):
        return None
    return {tid: name for run, name in zip(runs, groups) for tid in run}


def _size(path: Path, index: int, op: dict[str, Any], span: dict[str, Any] | None) -> int:
    """Bytes of the sized argument: its numel times its element size."""
    _, arg, _ = C10D_OPS[op["name"]]
    args = op.get("args") or {}
    dims = (args.get("Input Dims") or [[]] * (arg + 1))[arg]
    shapes = dims if dims and isinstance(dims[0], list) else [dims]
    numel = sum(_product(shape) for shape in shapes)
    dtype = (args.get("Input type") or [""] * (arg + 1))[arg]
    if dtype in ("", "TensorList") or dtype is None:
        dtype = ((span or {}).get("args", {}).get("Input type") or [None])[0]
    if dtype is None:
        raise TraceError(f"{path.name}: event {index} ({op['name']}): the trace records no "
                         f"element type for it")
    return numel * dtype_bytes(path, index, dtype)


def _product(shape: list[Any]) -> int:
    out = 1
    for n in shape:
        out *= int(n)
    return out


def _peer(op: dict[str, Any], groups: dict[str, tuple[int, ...]]) -> int | None:
    """The peer of a send or receive: its rank argument, a rank of the default group."""
    concrete = (op.get("args") or {}).get("Concrete Inputs") or []
    try:
        peer = int(concrete[2])
    except (IndexError, ValueError, TypeError):
        return None
    default = groups.get("0")
    return default[peer] if default and 0 <= peer < len(default) else peer


def c10d_comms(path: Path, events: list[dict[str, Any]], groups: dict[str, tuple[int, ...]],
               rank: int) -> list[Comm]:
    """The collectives of a trace without ``record_param_comms`` (see the module docstring)."""
    ops = sorted(((i, e) for i, e in enumerate(events) if e.get("name") in C10D_OPS
                  and e.get("ph") == "X"), key=lambda ie: (float(ie[1].get("ts", 0)), ie[0]))
    spans = _backend_spans(events)
    matched = _match(ops, spans)
    by_thread = _thread_groups({e.get("tid") for _, e in ops}, list(matched.values()), groups)
    only = next(iter(groups)) if len(groups) == 1 else None
    out = []
    for index, op in ops:
        name, _, one_rank = C10D_OPS[op["name"]]
        span = matched.get(index)
        start = float(op.get("ts", 0.0))
        end = max(start + float(op.get("dur", 0.0)),
                  float(span["ts"]) + float(span.get("dur", 0.0)) if span else 0.0)
        group = only
        if group is None and span is not None and by_thread is not None:
            group = by_thread.get(span.get("tid"))
        size = _size(path, index, op, span)
        p2p = name in ("send", "recv")
        if group is None and name in _NEEDS_GROUP:
            raise TraceError(f"{path.name}: event {index} ({op['name']} on rank {rank}): cannot "
                             f"tell which process group ran it (gloo traces name none)")
        out.append(Comm(index, op["name"], name, start, end, None if one_rank else size,
                        size if one_rank else None, group, groups.get(group or ""),
                        _peer(op, groups) if p2p else None, rank, op.get("tid")))
    return out
