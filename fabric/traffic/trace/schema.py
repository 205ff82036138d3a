"""A training job's communication, per rank, and its own JSON file format (pure).

A :class:`Workload` holds ``ranks`` programs, one per global rank, and the
named process groups (tuples of global ranks). A program is the ordered list
of what the rank did: :class:`Collective` operations (collectives on a group,
or point-to-point ``send``/``recv`` with a ``peer``) and :class:`Compute`
gaps (seconds of computation between them). Every operation carries the
training ``step`` (iteration) it belongs to.

Sizes are nccl-tests sizes (:mod:`fabric.traffic.collectives`): the per-rank
buffer of ``all_reduce`` and ``all_to_all``, the total output of
``all_gather``, the total input of ``reduce_scatter``, the message of
``send``/``recv``.

The file format, ``fabric-trace`` version 1::

    {"format": "fabric-trace", "version": 1, "ranks": 2,
     "groups": {"world": [0, 1]},
     "programs": [
       [{"op": "compute", "seconds": 0.01, "step": 0},
        {"op": "all_reduce", "bytes": 4096, "group": "world", "step": 0}],
       [{"op": "compute", "seconds": 0.012, "step": 0},
        {"op": "all_reduce", "bytes": 4096, "group": "world", "step": 0}]]}

``send`` and ``recv`` name ``peer`` (a global rank) instead of ``group``.
:func:`validate` checks a workload as NCCL would run it: every rank of a
group issues the group's collectives in the same order with the same sizes,
and the ``k``-th send from ``a`` to ``b`` matches the ``k``-th receive of
``b`` from ``a`` in size.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union, cast

from fabric.errors import UserError

FORMAT = "fabric-trace"
VERSION = 1
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
POINT_TO_POINT = ("send", "recv")
OPERATIONS = COLLECTIVES + POINT_TO_POINT
# Group names become part of transfer ids: no "/" and nothing a shell quotes.
_GROUP_NAME = re.compile(r"[A-Za-z0-9_.:+-]{1,64}")


class TraceError(UserError, ValueError):
    """A trace that cannot be read or replayed; the message names the file and event."""


@dataclass(frozen=True)
class Collective:
    """One communication operation of a rank.

    ``name`` is one of :data:`OPERATIONS`; ``group`` names the process group
    of a collective (None for ``send``/``recv``), ``peer`` the other global
    rank of a ``send``/``recv`` (None for collectives). ``where`` says where
    the operation came from, for error messages (not compared, not saved).
    """

    name: str
    bytes: int
    step: int = 0
    group: str | None = None
    peer: int | None = None
    where: str = field(default="", compare=False)


@dataclass(frozen=True)
class Compute:
    """``seconds`` of computation between two communication operations."""

    seconds: float
    step: int = 0
    where: str = field(default="", compare=False)


Op = Union[Collective, Compute]


@dataclass(frozen=True)
class Workload:
    """Programs of ``ranks`` ranks (``programs[r]`` is rank ``r``'s) and their groups."""

    ranks: int
    groups: dict[str, tuple[int, ...]]
    programs: tuple[tuple[Op, ...], ...]
    source: str = ""  # the file or directory it was read from, for messages

    def collectives(self, rank: int) -> list[Collective]:
        """The communication operations of ``rank``, in program order."""
        return [op for op in self.programs[rank] if isinstance(op, Collective)]

    @property
    def steps(self) -> list[int]:
        """The steps any operation belongs to, sorted."""
        return sorted({op.step for program in self.programs for op in program})


def describe(where: str, default: str) -> str:
    """``where`` if set, else ``default`` (how a message names an operation)."""
    return where or default


def _op_label(op: Op, rank: int, index: int, source: str) -> str:
    name = op.name if isinstance(op, Collective) else "compute"
    return describe(op.where, f"{source}: event {index} ({name} on rank {rank})")


# --- checks --------------------------------------------------------------------------------

def validate(workload: Workload) -> None:
    """Check a workload can run as NCCL would run it.

    Raises
    ------
    TraceError
        Naming the file and the first offending event: a bad group, size,
        peer or step, or ranks of a group (or a send/receive pair) that
        disagree on the order or sizes of their operations.
    """
    src = workload.source or "trace"
    if workload.ranks < 1 or len(workload.programs) != workload.ranks:
        raise TraceError(f"{src}: {workload.ranks} ranks but {len(workload.programs)} programs")
    _check_groups(workload, src)
    for rank, program in enumerate(workload.programs):
        for index, op in enumerate(program):
            _check_op(workload, op, rank, _op_label(op, rank, index, src))
    _check_groups_agree(workload, src)
    _check_pairs_agree(workload, src)


def _check_groups(workload: Workload, src: str) -> None:
    for name, members in workload.groups.items():
        if not isinstance(name, str) or not _GROUP_NAME.fullmatch(name):
            raise TraceError(f"{src}: group name {name!r} must be 1-64 letters, digits or _.:+-")
        if not members or len(set(members)) != len(members):
            raise TraceError(f"{src}: group {name!r} needs distinct ranks, got {list(members)}")
        bad = [r for r in members if not 0 <= r < workload.ranks]
        if bad:
            raise TraceError(f"{src}: group {name!r} holds rank {bad[0]}, outside "
                             f"0..{workload.ranks - 1}")


def _check_op(workload: Workload, op: Op, rank: int, label: str) -> None:
    if isinstance(op.step, bool) or not isinstance(op.step, int) or op.step < 0:
        raise TraceError(f"{label}: step must be an integer >= 0, got {op.step!r}")
    if isinstance(op, Compute):
        if not (isinstance(op.seconds, (int, float)) and 0 <= op.seconds < math.inf):
            raise TraceError(f"{label}: seconds must be >= 0, got {op.seconds!r}")
        return
    if op.name not in OPERATIONS:
        raise TraceError(f"{label}: the transport cannot run {op.name!r} "
                         f"(it runs {', '.join(OPERATIONS)})")
    if isinstance(op.bytes, bool) or not isinstance(op.bytes, int) or op.bytes < 1:
        raise TraceError(f"{label}: bytes must be an integer >= 1, got {op.bytes!r}")
    if op.name in POINT_TO_POINT:
        if not isinstance(op.peer, int) or not 0 <= op.peer < workload.ranks or op.peer == rank:
            raise TraceError(f"{label}: peer must be another rank in 0..{workload.ranks - 1}, "
                             f"got {op.peer!r}")
        return
    if op.group not in workload.groups:
        raise TraceError(f"{label}: unknown group {op.group!r}")
    if rank not in workload.groups[op.group]:
        raise TraceError(f"{label}: group {op.group!r} does not contain rank {rank}")


def _group_sequences(workload: Workload) -> dict[str, dict[int, list[Collective]]]:
    seqs: dict[str, dict[int, list[Collective]]] = {g: {} for g in workload.groups}
    for rank in range(workload.ranks):
        for op in workload.collectives(rank):
            if op.group is not None:
                seqs[op.group].setdefault(rank, []).append(op)
    return seqs


def _check_groups_agree(workload: Workload, src: str) -> None:
    for group, by_rank in _group_sequences(workload).items():
        members = workload.groups[group]
        first = members[0]
        ref = by_rank.get(first, [])
        for rank in members[1:]:
            mine = by_rank.get(rank, [])
            for k, (a, b) in enumerate(zip(ref, mine)):
                if (a.name, a.bytes) != (b.name, b.bytes):
                    where = describe(b.where, f"{src}: rank {rank}")
                    raise TraceError(f"{where}: collective {k} of group {group!r} is {b.name} "
                                     f"of {b.bytes} bytes on rank {rank} but {a.name} of "
                                     f"{a.bytes} bytes on rank {first}")
            if len(mine) != len(ref):
                raise TraceError(f"{src}: rank {rank} issues {len(mine)} collectives on group "
                                 f"{group!r}, rank {first} issues {len(ref)}")


def _check_pairs_agree(workload: Workload, src: str) -> None:
    sends: dict[tuple[int, int], list[Collective]] = {}
    recvs: dict[tuple[int, int], list[Collective]] = {}
    for rank in range(workload.ranks):
        for op in workload.collectives(rank):
            if op.name in ("send", "recv"):
                assert op.peer is not None  # _check_op refused a send or recv without one
                if op.name == "send":
                    sends.setdefault((rank, op.peer), []).append(op)
                else:
                    recvs.setdefault((op.peer, rank), []).append(op)
    for (a, b) in sorted(set(sends) | set(recvs)):
        out, into = sends.get((a, b), []), recvs.get((a, b), [])
        for k, (s, r) in enumerate(zip(out, into)):
            if s.bytes != r.bytes:
                where = describe(r.where, f"{src}: rank {b}")
                raise TraceError(f"{where}: receive {k} from rank {a} is {r.bytes} bytes, "
                                 f"rank {a} sends {s.bytes}")
        if len(out) != len(into):
            raise TraceError(f"{src}: rank {a} sends {len(out)} messages to rank {b}, which "
                             f"receives {len(into)}")


# --- the JSON file -------------------------------------------------------------------------

def to_dict(workload: Workload) -> dict[str, Any]:
    """The ``fabric-trace`` document of a workload."""
    def op_dict(op: Op) -> dict[str, Any]:
        if isinstance(op, Compute):
            return {"op": "compute", "seconds": op.seconds, "step": op.step}
        out: dict[str, Any] = {"op": op.name, "bytes": op.bytes, "step": op.step}
        if op.group is not None:
            out["group"] = op.group
        if op.peer is not None:
            out["peer"] = op.peer
        return out

    return {"format": FORMAT, "version": VERSION, "ranks": workload.ranks,
            "groups": {g: list(m) for g, m in workload.groups.items()},
            "programs": [[op_dict(op) for op in program] for program in workload.programs]}


def save(workload: Workload, path: Path) -> None:
    """Write ``workload`` to ``path`` as a ``fabric-trace`` JSON file."""
    Path(path).write_text(json.dumps(to_dict(workload), indent=1) + "\n")


def is_own_format(data: Any) -> bool:
    """True when a parsed JSON document says it is a ``fabric-trace``."""
    return isinstance(data, dict) and data.get("format") == FORMAT


def from_dict(data: Any, source: str) -> Workload:
    """Read a parsed ``fabric-trace`` document and :func:`validate` it.

    Raises
    ------
    TraceError
        On a wrong format or version, a missing or mistyped field, or any
        failure of :func:`validate`.
    """
    if not is_own_format(data):
        raise TraceError(f"{source}: not a {FORMAT} file (no \"format\": \"{FORMAT}\")")
    if data.get("version") != VERSION:
        raise TraceError(f"{source}: {FORMAT} version {data.get('version')!r} is not "
                         f"supported (this reader reads version {VERSION})")
    ranks, groups, programs = data.get("ranks"), data.get("groups"), data.get("programs")
    if isinstance(ranks, bool) or not isinstance(ranks, int):
        raise TraceError(f"{source}: \"ranks\" must be an integer, got {ranks!r}")
    if not isinstance(groups, dict) or not all(isinstance(m, list) for m in groups.values()):
        raise TraceError(f"{source}: \"groups\" must map names to lists of ranks")
    if not isinstance(programs, list) or not all(isinstance(p, list) for p in programs):
        raise TraceError(f"{source}: \"programs\" must be a list of lists, one per rank")
    workload = Workload(ranks, {g: tuple(m) for g, m in groups.items()},
                        tuple(tuple(_op_from(item, source, r, i) for i, item in enumerate(p))
                              for r, p in enumerate(programs)), source)
    validate(workload)
    return workload


def _op_from(item: Any, source: str, rank: int, index: int) -> Op:
    name = item.get("op") if isinstance(item, dict) else None
    where = f"{source}: event {index} ({name} on rank {rank})"
    if not isinstance(item, dict) or not isinstance(name, str):
        raise TraceError(f"{source}: event {index} on rank {rank} is not an object with "
                         f"an \"op\"")
    known = {"op", "step", "seconds"} if name == "compute" else {"op", "step", "bytes",
                                                                   "group", "peer"}
    extra = sorted(set(item) - known)
    if extra:
        raise TraceError(f"{where}: unknown field {extra[0]!r}")
    step = item.get("step", 0)
    # the values as the file has them: validate() checks their types and ranges
    if name == "compute":
        return Compute(cast(float, item.get("seconds")), step, where)
    return Collective(name, cast(int, item.get("bytes")), step, item.get("group"),
                      item.get("peer"), where)


def load(path: Path) -> Workload:
    """Read and validate a ``fabric-trace`` JSON file.

    Raises
    ------
    TraceError
        When the file cannot be read, is not JSON or not a valid trace.
    """
    path = Path(path)
    return from_dict(read_json(path), path.name)


def read_json(path: Path) -> Any:
    """The JSON in ``path``.

    Raises
    ------
    TraceError
        In one line naming the file, when it cannot be read or is not JSON.
    """
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path.name}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path.name}: not JSON ({exc.msg} at line {exc.lineno})") from None
