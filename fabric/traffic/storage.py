"""Storage traffic patterns as transfer schedules (pure).

Reads are request/response: the client sends a small request and the
server's data depends on receiving it, so the incast a striped read causes
starts when the requests land, as in a real distributed file system. Writes
are pushes and need no request.

Round numbers live in the tags (``{tag}/round{k}``); :func:`incast_rounds`
parses them back for :func:`fabric.traffic.metrics.round_times`.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

from fabric.traffic.collectives import split_bytes
from fabric.traffic.model import Transfer

REQUEST_BYTES = 64
_ROUND_RE = re.compile(r"(?:^|/)round(\d+)(?:/|$)")


def _check_endpoints(clients: Sequence[str], servers: Sequence[str], dscp: int) -> None:
    if not servers:
        raise ValueError("at least one storage server is needed")
    if len(set(servers)) != len(servers) or len(set(clients)) != len(clients):
        raise ValueError("clients and servers must be distinct")
    both = set(clients) & set(servers)
    if both:
        raise ValueError(f"endpoints both client and server: {sorted(both)}")
    if not 0 <= dscp <= 63:
        raise ValueError(f"dscp must be 0..63, got {dscp}")


def striped_read(client: str, servers: Sequence[str], block_bytes: int, rounds: int,
                 admission: int | None = None, *, dscp: int = 0, tag: str = "striped-read",
                 request_bytes: int = REQUEST_BYTES, barrier: bool = True) -> list[Transfer]:
    """Read ``rounds`` blocks, each striped over all ``servers`` (the incast pattern).

    In round ``k`` the client requests stripe ``j`` from ``servers[j]``; the
    stripe (``block_bytes / len(servers)``, exact total) depends on its
    request. With ``barrier`` the requests of round ``k+1`` wait until the
    client received every stripe of round ``k``.

    With ``admission=W`` (request-to-send admission, as DeepSeek's 3FS) at
    most ``W`` stripes are outstanding at the client: numbering stripes
    ``g = k * len(servers) + j`` over all rounds, request ``g`` waits until
    stripe ``g - W`` was received.

    Parameters
    ----------
    client : str
        The reading endpoint.
    servers : sequence of str
        Storage endpoints holding the stripes, in stripe order.
    block_bytes : int
        Bytes per round, at least ``len(servers)``.
    rounds : int
        Number of blocks read, >= 1.
    admission : int, optional
        Window ``W >= 1`` of outstanding stripes; None for no limit.
    dscp : int
        Traffic class of requests and stripes.
    tag : str
        Prefix; transfer tags are ``{tag}/round{k}``, ids
        ``{tag}/round{k}/req{j}`` and ``{tag}/round{k}/stripe{j}``.
    request_bytes : int
        Size of one request.
    barrier : bool
        Whether each round waits for the previous one to complete.

    Returns
    -------
    list of Transfer
    """
    _check_endpoints([client], servers, dscp)
    m = len(servers)
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if block_bytes < m:
        raise ValueError(f"block_bytes {block_bytes} < {m} servers: a stripe would be empty")
    if admission is not None and admission < 1:
        raise ValueError(f"admission must be >= 1, got {admission}")
    if request_bytes < 1:
        raise ValueError(f"request_bytes must be >= 1, got {request_bytes}")
    stripes = split_bytes(block_bytes, m)

    def stripe_id(g: int) -> str:
        return f"{tag}/round{g // m}/stripe{g % m}"

    out: list[Transfer] = []
    for k in range(rounds):
        round_tag = f"{tag}/round{k}"
        for j, server in enumerate(servers):
            g = k * m + j
            after: list[str] = []
            if barrier and k > 0:
                after += [stripe_id((k - 1) * m + i) for i in range(m)]
            if admission is not None and g >= admission and stripe_id(g - admission) not in after:
                after.append(stripe_id(g - admission))
            req = f"{round_tag}/req{j}"
            out.append(Transfer(req, client, server, request_bytes, tuple(after), dscp,
                                round_tag))
            out.append(Transfer(stripe_id(g), server, client, stripes[j], (req,), dscp,
                                round_tag))
    return out


def round_of(tag: str) -> int | None:
    """Return the round number in a tag like ``striped-read/round3`` (None if absent)."""
    match = _ROUND_RE.search(tag)
    return int(match.group(1)) if match else None


def incast_rounds(transfers: Iterable[Transfer]) -> dict[int, list[str]]:
    """Group transfer ids (requests and stripes) by the round in their tag."""
    rounds: dict[int, list[str]] = {}
    for t in transfers:
        k = round_of(t.tag)
        if k is not None:
            rounds.setdefault(k, []).append(t.id)
    return dict(sorted(rounds.items()))


def checkpoint_write(writers: Sequence[str], storage: Sequence[str], bytes_per_writer: int, *,
                     dscp: int = 0, tag: str = "checkpoint") -> list[Transfer]:
    """Every writer pushes its shard striped over all storage nodes, all at once.

    Writer ``i`` sends ``bytes_per_writer / len(storage)`` (exact total) to
    each storage node; no dependencies. Ids ``{tag}/w{i}/s{j}``.
    """
    _check_endpoints(writers, storage, dscp)
    if bytes_per_writer < len(storage):
        raise ValueError(f"bytes_per_writer {bytes_per_writer} < {len(storage)} storage nodes")
    parts = split_bytes(bytes_per_writer, len(storage))
    return [Transfer(f"{tag}/w{i}/s{j}", w, s, parts[j], (), dscp, tag)
            for i, w in enumerate(writers) for j, s in enumerate(storage)]


def restart_stampede(clients: Sequence[str], storage_nodes: Sequence[str], object_bytes: int, *,
                     stripe: bool = False, dscp: int = 0, tag: str = "restart",
                     request_bytes: int = REQUEST_BYTES) -> list[Transfer]:
    """Every client reads the same object at once (a job restart loading one checkpoint).

    The object sits on ``storage_nodes[0]``, or with ``stripe`` is split over
    all storage nodes (exact total). Each client requests its part from each
    holder; a response depends on its request. Ids ``{tag}/c{i}/req{j}`` and
    ``{tag}/c{i}/resp{j}``.
    """
    _check_endpoints(clients, storage_nodes, dscp)
    holders = list(storage_nodes) if stripe else [storage_nodes[0]]
    if object_bytes < len(holders):
        raise ValueError(f"object_bytes {object_bytes} < {len(holders)} holders")
    if request_bytes < 1:
        raise ValueError(f"request_bytes must be >= 1, got {request_bytes}")
    parts = split_bytes(object_bytes, len(holders))
    out: list[Transfer] = []
    for i, client in enumerate(clients):
        for j, node in enumerate(holders):
            req = f"{tag}/c{i}/req{j}"
            out.append(Transfer(req, client, node, request_bytes, (), dscp, tag))
            out.append(Transfer(f"{tag}/c{i}/resp{j}", node, client, parts[j], (req,), dscp,
                                tag))
    return out
