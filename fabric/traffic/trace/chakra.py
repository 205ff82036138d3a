"""Read MLCommons Chakra execution traces (protobuf, one file per rank) (pure).

A Chakra ET file, as ASTRA-sim reads it, is a stream of length-delimited
protobuf messages (varint length, then the message; gzip allowed): one
``GlobalMetadata``, then ``Node`` messages of the ``ChakraProtoMsg`` schema
(``et_def.proto``; files of schema ``1.0.2-chakra.1.0.0`` checked). The
message classes come from ``mlc-chakra`` (``chakra.schema.protobuf.et_def_pb2``,
checked with mlc-chakra 1.0.0, which needs ``protobuf>=6.31.1``), imported only
when a Chakra file is read; its torch-dependent tools are not used.

A file's rank is the number before ``.et`` in its name
(``<workload>.<rank>.et``, as ASTRA-sim names them). Each rank's node graph
is flattened into one program order: a topological order of the data and
control dependencies, lowest node id first among the ready nodes (the order
the converters issue nodes in). In that order:

- ``COMP_NODE``: ``duration_micros`` adds to the compute gap before the next
  communication node. The replay runs compute and communication one after
  the other, so a trace that overlaps them (a backward pass running beside
  the gradient all-reduce) replays as the longer, unoverlapped job;
- ``COMM_COLL_NODE``: ``comm_type`` ``ALL_REDUCE``, ``ALL_GATHER``,
  ``REDUCE_SCATTER`` (and ``REDUCE_SCATTER_BLOCK``) or ``ALL_TO_ALL`` with
  ``comm_size`` bytes, on the group ``pg_name`` or, without one, on every
  rank (group ``"world"``). ``comm_size`` is what the rank contributes (the
  input tensors, as mlc-chakra's PyTorch converter computes it), so an
  all-gather's nccl-tests size is ``comm_size`` times the group size; the
  other sizes are taken as they are. ``BROADCAST``, ``REDUCE``, ``GATHER``,
  ``SCATTER`` and ``BARRIER`` are refused;
- ``COMM_SEND_NODE`` / ``COMM_RECV_NODE``: ``comm_size`` bytes to
  ``comm_dst`` / from ``comm_src``;
- a node named ``ProfilerStep#N`` starts step ``N`` (Chakra has no other
  iteration marker; without one everything is step 0). Other nodes
  (metadata, memory) are skipped.

Process groups: ASTRA-sim's communicator-group file, ``comm_group.json``
beside the traces (``{"<pg_name>": [ranks...]}``), names them when present.
"""

from __future__ import annotations

import gzip
import heapq
import json
import re
from pathlib import Path
from typing import Any, Iterator, Sequence

from fabric.traffic.trace.schema import Collective, Compute, Op, TraceError, Workload, validate

INSTALL_HINT = "pip install 'mlc-chakra>=1.0,<1.1' (it needs protobuf>=6.31.1)"
COMM_GROUP_FILE = "comm_group.json"
WORLD = "world"
_RANK = re.compile(r"\.(\d+)\.et(?:\.gz)?$")
_STEP = re.compile(r"ProfilerStep#(\d+)")
_COLLECTIVES = {"ALL_REDUCE": "all_reduce", "ALL_GATHER": "all_gather",
                "REDUCE_SCATTER": "reduce_scatter", "REDUCE_SCATTER_BLOCK": "reduce_scatter",
                "ALL_TO_ALL": "all_to_all"}


def _schema() -> Any:
    """``et_def_pb2`` of mlc-chakra, or a one-line :class:`TraceError` saying how to get it."""
    try:
        from chakra.schema.protobuf import et_def_pb2
    except ImportError:
        raise TraceError(f"reading Chakra traces needs mlc-chakra: {INSTALL_HINT}") from None
    except Exception as exc:  # protobuf's runtime version check raises its own errors
        raise TraceError(f"mlc-chakra cannot load ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0]}): {INSTALL_HINT}") from None
    return et_def_pb2


def rank_of(path: Path) -> int:
    """The rank in a ``<workload>.<rank>.et`` file name."""
    match = _RANK.search(path.name)
    if match is None:
        raise TraceError(f"{path.name}: a Chakra trace is named <workload>.<rank>.et")
    return int(match.group(1))


def _messages(path: Path) -> Iterator[bytes]:
    """The length-delimited messages of a (possibly gzipped) file."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    pos = 0
    while pos < len(raw):
        size, shift = 0, 0
        while True:
            if pos >= len(raw) or shift > 63:
                raise TraceError(f"{path.name}: truncated or not a Chakra trace")
            byte = raw[pos]
            pos += 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if pos + size > len(raw):
            raise TraceError(f"{path.name}: truncated or not a Chakra trace")
        yield raw[pos:pos + size]
        pos += size


def read_nodes(path: Path) -> list[Any]:
    """The ``Node`` messages of one file (the metadata message skipped)."""
    pb = _schema()
    nodes = []
    for index, blob in enumerate(_messages(path)):
        message = pb.GlobalMetadata() if index == 0 else pb.Node()
        try:
            message.ParseFromString(blob)
        except Exception:  # protobuf's DecodeError is not importable without it
            raise TraceError(f"{path.name}: message {index} is not a Chakra "
                             f"{type(message).__name__}") from None
        if index:
            nodes.append(message)
    return nodes


def _attrs(node: Any) -> dict[str, Any]:
    out = {}
    for attr in node.attr:
        kind = attr.WhichOneof("value")
        if kind is not None:
            out[attr.name] = getattr(attr, kind)
    return out


def flatten(path: Path, nodes: list[Any]) -> list[Any]:
    """Nodes in a topological order of their dependencies, lowest id first when free."""
    by_id = {n.id: n for n in nodes}
    waiting = {n.id: {d for d in list(n.data_deps) + list(n.ctrl_deps) if d in by_id}
               for n in nodes}
    users: dict[int, list[int]] = {}
    for nid, deps in waiting.items():
        for dep in deps:
            users.setdefault(dep, []).append(nid)
    ready = [nid for nid, deps in waiting.items() if not deps]
    heapq.heapify(ready)
    order = []
    while ready:
        nid = heapq.heappop(ready)
        order.append(by_id[nid])
        for user in users.get(nid, []):
            waiting[user].discard(nid)
            if not waiting[user]:
                heapq.heappush(ready, user)
    if len(order) != len(nodes):
        stuck = min(nid for nid, deps in waiting.items() if deps)
        raise TraceError(f"{path.name}: node {stuck} is on a dependency cycle")
    return order


def _program(path: Path, rank: int, nodes: list[Any], group_size: dict[str, int]) -> list[Op]:
    pb = _schema()
    ops: list[Op] = []
    step, gap = 0, 0.0
    for node in flatten(path, nodes):
        where = f"{path.name}: node {node.id} ({node.name} on rank {rank})"
        match = _STEP.search(node.name)
        if match:
            step = int(match.group(1))
        kind = pb.NodeType.Name(node.type)
        if kind == "COMP_NODE":
            gap += node.duration_micros * 1e-6
            continue
        if kind not in ("COMM_COLL_NODE", "COMM_SEND_NODE", "COMM_RECV_NODE"):
            continue
        if gap > 0:
            ops.append(Compute(gap, step, where))
            gap = 0.0
        ops.append(_communication(pb, node, kind, step, where, group_size))
    return ops


def _communication(pb: Any, node: Any, kind: str, step: int, where: str,
                   group_size: dict[str, int]) -> Collective:
    attrs = _attrs(node)
    size = int(attrs.get("comm_size", 0))
    if kind == "COMM_SEND_NODE":
        return Collective("send", size, step, None, _int(attrs.get("comm_dst")), where)
    if kind == "COMM_RECV_NODE":
        return Collective("recv", size, step, None, _int(attrs.get("comm_src")), where)
    comm = pb.CollectiveCommType.Name(int(attrs.get("comm_type", 0)))
    name = _COLLECTIVES.get(comm)
    if name is None:
        raise TraceError(f"{where}: the transport cannot run {comm} (it runs ALL_REDUCE, "
                         f"ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, send, recv)")
    group = str(attrs.get("pg_name") or WORLD)
    if name == "all_gather":
        size *= group_size.get(group, 1)
    return Collective(name, size, step, group, None, where)


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) else None


def read_groups(directory: Path, ranks: int) -> dict[str, tuple[int, ...]]:
    """``"world"`` and the groups of ``comm_group.json`` in ``directory`` (if any)."""
    groups = {WORLD: tuple(range(ranks))}
    path = directory / COMM_GROUP_FILE
    if path.is_file():
        try:
            data = json.loads(path.read_text())
            groups.update({str(k): tuple(int(r) for r in v) for k, v in data.items()})
        except (ValueError, TypeError, AttributeError):
            raise TraceError(f"{path.name}: not a communicator-group file "
                             f"({{\"name\": [ranks...]}})") from None
    return groups


def read_chakra(paths: Sequence[Path], source: str) -> Workload:
    """Read one Chakra ET file per rank into a validated :class:`Workload`.

    Raises
    ------
    TraceError
        When mlc-chakra is missing, a file is not a Chakra trace or misses a
        rank, there is no communication node, a node's collective cannot run,
        or :func:`~fabric.traffic.trace.schema.validate` fails.
    """
    by_rank: dict[int, Path] = {}
    for path in map(Path, paths):
        rank = rank_of(path)
        if rank in by_rank:
            raise TraceError(f"{path.name}: rank {rank} appears in two files")
        by_rank[rank] = path
    ranks = max(by_rank) + 1
    missing = [r for r in range(ranks) if r not in by_rank]
    if missing:
        raise TraceError(f"{source}: no Chakra file for rank {missing[0]} of {ranks}")
    groups = read_groups(by_rank[0].parent, ranks)
    sizes = {name: len(members) for name, members in groups.items()}
    programs = tuple(tuple(_program(by_rank[r], r, read_nodes(by_rank[r]), sizes))
                     for r in range(ranks))
    if not any(isinstance(op, Collective) for program in programs for op in program):
        raise TraceError(f"{source}: no communication nodes in any Chakra file")
    workload = Workload(ranks, groups, programs, source)
    validate(workload)
    return workload
