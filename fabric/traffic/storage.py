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


def dataloader(client: str, servers: Sequence[str], batch_bytes: int, steps: int,
               compute_s: float, *, dscp: int = 0, tag: str = "load",
               request_bytes: int = REQUEST_BYTES) -> list[Transfer]:
    """A training host's data loader: one batch per step, prefetched while a step computes.

    Batch ``k`` (``0..steps-1``) is read as one round of :func:`striped_read`.
    Batch 0 is read before the first step (the warm-up). Step ``k`` starts
    when batch ``k`` has arrived and step ``k-1`` has computed for
    ``compute_s``; at that moment the loader asks for batch ``k+1``. So the
    requests of batch ``k+1`` wait for the stripes of batch ``k`` and, from
    ``k >= 1`` on, for ``compute_s`` after the requests of batch ``k`` left
    (``after_start``). :func:`step_times` recovers the steps from the
    arrivals.

    Parameters
    ----------
    client : str
        The training host.
    servers : sequence of str
        Storage endpoints; each batch is striped over all of them.
    batch_bytes : int
        Bytes per batch, at least ``len(servers)``.
    steps : int
        Training steps (= batches), >= 2.
    compute_s : float
        Compute time of one step, > 0.
    dscp : int
        Traffic class of requests and stripes.
    tag : str
        Prefix: tags ``{tag}/batch{k}``, ids ``{tag}/batch{k}/req{j}`` and
        ``{tag}/batch{k}/stripe{j}``.
    request_bytes : int
        Size of one request.

    Returns
    -------
    list of Transfer
    """
    _check_endpoints([client], servers, dscp)
    if steps < 2:
        raise ValueError(f"steps must be >= 2, got {steps}")
    if not compute_s > 0:
        raise ValueError(f"compute_s must be > 0, got {compute_s}")
    if batch_bytes < len(servers):
        raise ValueError(f"batch_bytes {batch_bytes} < {len(servers)} servers: a stripe "
                         f"would be empty")
    if request_bytes < 1:
        raise ValueError(f"request_bytes must be >= 1, got {request_bytes}")
    stripes = split_bytes(batch_bytes, len(servers))
    out: list[Transfer] = []
    for k in range(steps):
        batch = f"{tag}/batch{k}"
        after = tuple(f"{tag}/batch{k - 1}/stripe{j}" for j in range(len(servers))) if k else ()
        # the previous step's compute started when batch k-1 was requested (k >= 2)
        compute = (f"{tag}/batch{k - 1}/req0", float(compute_s)) if k >= 2 else None
        for j, server in enumerate(servers):
            out.append(Transfer(f"{batch}/req{j}", client, server, request_bytes, after, dscp,
                                batch, after_start=compute))
            out.append(Transfer(f"{batch}/stripe{j}", server, client, stripes[j],
                                (f"{batch}/req{j}",), dscp, batch))
    return out


def step_times(arrivals: Sequence[float], compute_s: float) -> list[float]:
    """When each training step starts, given when its batch arrived (the loop's rule).

    Step 0 starts when batch 0 arrives; step ``k`` at ``max(start[k-1] +
    compute_s, arrivals[k])``. The stall of step ``k`` is ``start[k] -
    start[k-1] - compute_s``.
    """
    starts: list[float] = []
    for k, arrived in enumerate(arrivals):
        starts.append(arrived if k == 0 else max(starts[-1] + compute_s, arrived))
    return starts


def storage_sources(clients: int, storage_nodes: Sequence[str], shards: int
                    ) -> list[list[str | None]]:
    """Where each client reads each shard when every read goes to storage.

    Shard ``s`` lives on ``storage_nodes[s % len(storage_nodes)]``.
    """
    if shards < 1 or not storage_nodes:
        raise ValueError("a checkpoint needs >= 1 shard and >= 1 storage node")
    return [[storage_nodes[s % len(storage_nodes)] for s in range(shards)]
            for _ in range(clients)]


def cache_sources(clients: Sequence[str], storage_nodes: Sequence[str], cache_hosts:
                  Sequence[str], shards: int, hit_rate: float) -> list[list[str | None]]:
    """Where each client reads each shard with a peer cache in front of storage.

    ``round(hit_rate * shards)`` shards, spread evenly over the checkpoint,
    are cached: cached shard ``c`` (in order) is held by ``cache_hosts[c %
    len(cache_hosts)]``, and a client that holds it reads it locally
    (``None``: no transfer). The other shards are read from storage, miss
    ``m`` from ``storage_nodes[m % len(storage_nodes)]``.
    """
    if not 0 <= hit_rate <= 1:
        raise ValueError(f"hit_rate must be in [0, 1], got {hit_rate}")
    if shards < 1 or not storage_nodes or not cache_hosts:
        raise ValueError("a cache needs >= 1 shard, storage node and cache host")
    misses = shards - round(hit_rate * shards)
    # shard s is a miss when the running count of misses steps up at s: evenly spread
    miss = [(s + 1) * misses // shards > s * misses // shards for s in range(shards)]
    holder: list[str] = []
    hits = missed = 0
    for s in range(shards):
        if miss[s]:
            holder.append(storage_nodes[missed % len(storage_nodes)])
            missed += 1
        else:
            holder.append(cache_hosts[hits % len(cache_hosts)])
            hits += 1
    return [[None if h == client else h for h in holder] for client in clients]


def checkpoint_restore(clients: Sequence[str], sources: Sequence[Sequence[str | None]],
                       shard_bytes: int, *, admission: int | None = None, dscp: int = 0,
                       tag: str = "restore", request_bytes: int = REQUEST_BYTES
                       ) -> list[Transfer]:
    """Every client reads every shard of one checkpoint at once (a restart).

    Client ``i`` reads shard ``s`` from ``sources[i][s]`` (None: it holds
    the shard itself, no transfer): a request, then the shard, which depends
    on it. Client ``i`` reads its shards in order starting from shard ``i``
    (modulo their number), so that clients reading a few at a time do not all
    ask the same holder first. With ``admission=W`` (request-to-send
    admission) at most ``W`` reads are outstanding per client: its ``g``-th
    request (in its order) waits for its ``(g-W)``-th shard. Ids
    ``{tag}/c{i}/req{s}`` and ``{tag}/c{i}/shard{s}``.
    """
    if len(sources) != len(clients):
        raise ValueError(f"{len(clients)} clients but {len(sources)} source lists")
    if shard_bytes < 1 or request_bytes < 1:
        raise ValueError("shard_bytes and request_bytes must be >= 1")
    if admission is not None and admission < 1:
        raise ValueError(f"admission must be >= 1, got {admission}")
    if len(set(clients)) != len(clients):
        raise ValueError("clients must be distinct")
    out: list[Transfer] = []
    for i, (client, row) in enumerate(zip(clients, sources)):
        first = i % len(row) if row else 0
        order = list(range(first, len(row))) + list(range(first))
        reads = [(s, src) for s in order for src in [row[s]] if src is not None]
        if any(src == client for _, src in reads):
            raise ValueError(f"{client} cannot read from itself over the network (use None)")
        for g, (s, src) in enumerate(reads):
            after = ((f"{tag}/c{i}/shard{reads[g - admission][0]}",)
                     if admission is not None and g >= admission else ())
            req = f"{tag}/c{i}/req{s}"
            out.append(Transfer(req, client, src, request_bytes, after, dscp, tag))
            out.append(Transfer(f"{tag}/c{i}/shard{s}", src, client, shard_bytes, (req,),
                                dscp, tag))
    return out
