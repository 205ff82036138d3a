"""Named traffic patterns on a fabric graph: collectives and storage (pure).

:func:`make_transfers` turns a :class:`PatternSpec` into the transfers of
one run. Collectives take their ranks from :mod:`fabric.traffic.placement`;
storage patterns use the fabric's storage nodes when it has enough of them,
otherwise compute endpoints act as storage servers (so incast can be studied
on any fabric).
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from fabric.model import graph as fg
from fabric.model.lanes import DSCP_COLLECTIVE, DSCP_STORAGE
from fabric.traffic import collectives, storage
from fabric.traffic.model import ScheduleError, Transfer
from fabric.traffic.placement import rank_hosts

COLLECTIVE_PATTERNS = ("ring-allreduce", "tree-allreduce", "all-gather", "reduce-scatter",
                       "all-to-all", "hierarchical-allreduce")
STORAGE_PATTERNS = ("striped-read", "checkpoint-write", "restart-stampede")
PATTERNS = COLLECTIVE_PATTERNS + STORAGE_PATTERNS


@dataclass(frozen=True)
class PatternSpec:
    """What to replay.

    Collectives: ``size_bytes`` (nccl-tests' size), ``ranks`` (default all
    compute endpoints), ``placement`` (``rail`` or ``random`` with
    ``seed``), ``chunks``, ``channels``, ``slots`` (pieces in flight per
    connection, NCCL's 8). Storage: ``clients`` readers or
    writers, ``servers`` storage endpoints, ``size_bytes`` per block (striped
    read), per writer (checkpoint) or per object (stampede), ``rounds`` and
    ``admission`` (striped read). ``dscp`` defaults to the collective or
    storage service level.
    """

    name: str
    size_bytes: int = 2 * 1024 * 1024
    ranks: int | None = None
    placement: str = "rail"
    seed: int = 0
    chunks: int = 1
    channels: int = 1
    slots: int = 8
    clients: int = 1
    servers: int = 4
    rounds: int = 4
    admission: int | None = None
    dscp: int | None = None

    def __post_init__(self) -> None:
        if self.name not in PATTERNS:
            raise ScheduleError(f"unknown pattern {self.name!r} (known: {', '.join(PATTERNS)})")
        if self.placement not in ("rail", "random"):
            raise ScheduleError(f"placement must be rail or random, got {self.placement!r}")
        least = {"size_bytes": 1, "ranks": 2, "seed": 0, "chunks": 1, "channels": 1,
                 "slots": 1, "clients": 1, "servers": 1, "rounds": 1, "admission": 1, "dscp": 0}
        for name, minimum in least.items():
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < minimum):
                raise ScheduleError(f"{name} must be an integer >= {minimum}, got {value!r}")
        if self.dscp is not None and self.dscp > 63:
            raise ScheduleError(f"dscp must be at most 63, got {self.dscp}")

    @property
    def is_collective(self) -> bool:
        """True for collectives (reported as nccl-tests does)."""
        return self.name in COLLECTIVE_PATTERNS


def make_transfers(graph: nx.Graph, spec: PatternSpec) -> tuple[list[Transfer], list[str]]:
    """Return the transfers and the participating endpoints (ranks or clients first).

    Raises
    ------
    ScheduleError
        When the fabric has too few endpoints for the request.
    """
    if spec.is_collective:
        compute = len(fg.nodes_with_role(graph, "host"))
        if compute < 2 or (spec.ranks or 0) > compute:
            raise ScheduleError(f"{spec.name}: ranks must be 2..{compute} (the fabric's compute "
                                f"endpoints), got {spec.ranks or compute}")
        ranks = rank_hosts(graph, spec.ranks, spec.placement, spec.seed)
        dscp = DSCP_COLLECTIVE if spec.dscp is None else spec.dscp
        transfers = collectives.generate(spec.name, ranks, spec.size_bytes, graph,
                                         chunks=spec.chunks, channels=spec.channels,
                                         slots=spec.slots, dscp=dscp)
        return transfers, ranks
    clients, servers = storage_roles(graph, spec)
    dscp = DSCP_STORAGE if spec.dscp is None else spec.dscp
    if spec.name == "striped-read":
        transfers = []
        for i, client in enumerate(clients):
            transfers += storage.striped_read(client, servers, spec.size_bytes, spec.rounds,
                                              spec.admission, dscp=dscp,
                                              tag=f"striped-read/c{i}")
    elif spec.name == "checkpoint-write":
        transfers = storage.checkpoint_write(clients, servers, spec.size_bytes, dscp=dscp)
    else:
        transfers = storage.restart_stampede(clients, servers, spec.size_bytes, dscp=dscp)
    return transfers, clients + servers


def storage_roles(graph: nx.Graph, spec: PatternSpec) -> tuple[list[str], list[str]]:
    """Pick clients (compute endpoints) and servers for a storage pattern."""
    compute = rank_hosts(graph, None, spec.placement, spec.seed)
    stores = fg.nodes_with_role(graph, "storage")
    if len(stores) >= spec.servers:
        servers = stores[:spec.servers]
        clients = compute[:spec.clients]
    else:  # compute endpoints stand in for storage servers
        clients = compute[:spec.clients]
        servers = [h for h in reversed(compute) if h not in clients][:spec.servers]
    if len(clients) < spec.clients or len(servers) < spec.servers:
        raise ScheduleError(f"{spec.name} needs {spec.clients} clients and {spec.servers} "
                            f"servers; the fabric has {len(compute)} compute and "
                            f"{len(stores)} storage endpoints")
    return clients, servers
