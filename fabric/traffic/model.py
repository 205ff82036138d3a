"""Transfers, schedules and the plan file the host agents execute (pure).

A *transfer* moves ``bytes`` from endpoint ``src`` to endpoint ``dst``. It
starts once every transfer in ``after`` is complete *as seen by src*: a
transfer src received is complete when its last byte arrived; a transfer src
sent is complete when its receiver confirmed the last byte. Dependencies are
therefore local to the sender, as in NCCL where a rank forwards a chunk once
it has received it; :func:`validate_schedule` rejects any other.

A *plan* is what every host agent reads: the transfers, the addresses of the
endpoints (each NIC as ``ip/prefixlen``: a sender uses the NIC whose prefix
holds the destination, longest match first), the transport and a common
start time.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from fabric.errors import UserError

TRANSPORTS = ("tcp", "roce")
ENTROPY = ("flow", "packet", "recycle")
SPRAYING = ("packet", "recycle")  # entropies that vary the source port per packet
# Source ports of a spraying sender: many values even out the switches' hash
# (docs/benchmarks.md, "Sizing the collisions workloads").
SPRAY_ENTROPY_PORTS = 256
# of the roce transport (fabric.agent.roce.cc); "none" is an RDMA NIC with its congestion
# control off, which only a lossless fabric (link-level flow control) keeps from dropping
CONGESTION_CONTROLS = ("swift", "dcqcn", "loss", "none")
TCP_DATA_PORT = 7100
ROCE_PORT = 4791
SOURCE_PORTS = range(10000, 32768)  # below Linux's ephemeral range (32768-60999)
# TCP keeps the segments of a 1500-byte MTU on the jumbo links: the hosts' routes
# advertise this MSS (1448 bytes of data with timestamps), so incast figures compare
# with the literature.
TCP_ADVERTISED_MSS = 1460
TCP_SEGMENT_BYTES = TCP_ADVERTISED_MSS - 12  # data per segment, with timestamps
TCP_PACKET_BYTES = 1500
ROCE_PACKET_OVERHEAD = 20 + 8 + 12 + 4  # IPv4, UDP, BTH, ICRC
# RoCE path MTUs (payload bytes per packet) a NIC negotiates; AI fabrics run 4096.
ROCE_MTUS = (256, 512, 1024, 2048, 4096)
DEFAULT_ROCE_MTU = 4096


class ScheduleError(UserError, ValueError):
    """A schedule that cannot run (unknown host, cycle, non-local dependency)."""


@dataclass(frozen=True)
class Transfer:
    """One point-to-point transfer.

    ``tag`` names the pattern step (e.g. ``"ring-allreduce/step3"``);
    ``channel`` picks which of the connections (queue pairs) between the
    two endpoints carries it; ``dst_ip`` overrides the destination address
    (a dual-homed storage node has one per zone); ``hops`` is the number of
    links on its path (0: unknown), which delay-based control scales its
    target with. ``after_start = (id, seconds)`` also holds it back until
    ``seconds`` after ``src`` started transfer ``id`` (one it sends): the
    compute phase of a loop, e.g. a dataloader that asks for the next batch
    when a training step starts, and steps take at least their compute time.
    ``delay_s`` holds it back until ``delay_s`` seconds after its ``after``
    transfers completed: the compute between two collectives of a replayed job.
    """

    id: str
    src: str
    dst: str
    bytes: int
    after: tuple[str, ...] = ()
    dscp: int = 0
    tag: str = ""
    channel: int = 0
    dst_ip: str | None = None
    hops: int = 0
    after_start: tuple[str, float] | None = None
    delay_s: float = 0.0

    @property
    def connection(self) -> tuple[str, str, int, int]:
        """The connection (queue pair) it goes on: sender, receiver (or its address),
        class and channel. A connection sends its transfers in order."""
        return (self.src, self.dst_ip or self.dst, self.dscp, self.channel)

    @property
    def waits_for(self) -> tuple[str, ...]:
        """Every transfer this one waits for: ``after`` and the one of ``after_start``."""
        return self.after + ((self.after_start[0],) if self.after_start else ())


@dataclass(frozen=True)
class TransportSpec:
    """How bytes move: kernel TCP or the RoCEv2-like reliable UDP transport.

    ``connections``: TCP connections (queue pairs) per peer and channel, a
    transfer is split evenly over them. ``entropy``: ``flow`` keeps one UDP
    source port per connection (ECMP-like), ``packet`` varies it per packet
    over ``entropy_ports`` ports (spraying), ``recycle`` sprays too but sends
    again on the ports whose packets the receiver saw arrive without queueing
    (after REPS) and tries the next port of the pool only when it has none.
    ``rate_mbps``: pacing ceiling of a roce sender (the emulated host link rate). ``cc``: the roce congestion
    control (:mod:`fabric.agent.roce.cc`): ``swift`` (delay-based), ``dcqcn`` (ECN-driven
    rate control; needs the fabric's ECN marking) or ``loss``.
    ``mtu_payload``: payload bytes of a full roce packet (the RoCE path MTU; TCP
    always sends 1448-byte segments, see ``TCP_ADVERTISED_MSS``).
    ``timeline``: roce receivers report every newly delivered packet's arrival
    and send time (``arrivals``), for delivery timelines around failures.
    ``buffer_packets``: the switches' queue limit in full-size packets; the roce
    retransmission timeout stays above a full queue's drain.
    ``lossless_dscps``: the service classes flow control keeps lossless, and
    ``lossless_hold_packets`` the most full-size packets the lossless queues of a
    path can hold together (its switches' shared buffers): a roce queue pair in one of
    those classes keeps its timeout above their drain, since a paused packet is late,
    not lost (0 and none without flow control).
    """

    kind: str = "tcp"
    connections: int = 1
    entropy: str = "flow"
    entropy_ports: int = 64
    rate_mbps: float | None = None
    mtu_payload: int = DEFAULT_ROCE_MTU
    cc: str = "swift"
    timeline: bool = False
    buffer_packets: int = 64
    lossless_dscps: tuple[int, ...] = ()
    lossless_hold_packets: int = 0

    @property
    def packet_bytes(self) -> int:
        """IP bytes of a full-size data packet."""
        return self.mtu_payload + ROCE_PACKET_OVERHEAD if self.kind == "roce" else TCP_PACKET_BYTES

    @property
    def payload_bytes(self) -> int:
        """Payload bytes of a full-size data packet: the path MTU, or TCP's segment."""
        return self.mtu_payload if self.kind == "roce" else TCP_SEGMENT_BYTES

    @property
    def sprays(self) -> bool:
        """True when the source port varies per packet (``packet`` or ``recycle``)."""
        return self.entropy in SPRAYING

    def __post_init__(self) -> None:
        if self.kind not in TRANSPORTS:
            raise ScheduleError(f"transport must be one of {TRANSPORTS}, got {self.kind!r}")
        if self.entropy not in ENTROPY:
            raise ScheduleError(f"entropy must be one of {ENTROPY}, got {self.entropy!r}")
        if self.entropy in SPRAYING and self.kind != "roce":
            raise ScheduleError(f"entropy {self.entropy!r} needs the roce transport")
        if not 1 <= self.connections <= 64:
            raise ScheduleError(f"connections must be 1..64, got {self.connections}")
        if not 1 <= self.entropy_ports <= 1024:
            raise ScheduleError(f"entropy_ports must be 1..1024, got {self.entropy_ports}")
        if self.rate_mbps is not None and not self.rate_mbps > 0:
            raise ScheduleError(f"rate_mbps must be > 0, got {self.rate_mbps}")
        if not ROCE_MTUS[0] <= self.mtu_payload <= ROCE_MTUS[-1]:
            raise ScheduleError(f"mtu_payload must be {ROCE_MTUS[0]}..{ROCE_MTUS[-1]}, "
                                f"got {self.mtu_payload}")
        if self.buffer_packets < 1:
            raise ScheduleError(f"buffer_packets must be >= 1, got {self.buffer_packets}")
        if self.lossless_hold_packets < 0:
            raise ScheduleError(f"lossless_hold_packets must be >= 0, "
                                f"got {self.lossless_hold_packets}")
        if any(not 0 <= d <= 63 for d in self.lossless_dscps):
            raise ScheduleError(f"lossless_dscps must be DSCPs 0..63, got {self.lossless_dscps}")
        if self.cc not in CONGESTION_CONTROLS:
            raise ScheduleError(f"cc must be one of {CONGESTION_CONTROLS}, got {self.cc!r}")


@dataclass
class Plan:
    """Everything the agents need; serialised as JSON."""

    transfers: list[Transfer]
    hosts: dict[str, list[str]]  # endpoint -> its NICs as "ip/prefixlen"; first is default
    transport: TransportSpec = field(default_factory=TransportSpec)
    start_at: float = 0.0  # wall-clock time (all hosts share one clock); 0 starts at once
    deadline_s: float = 120.0  # after start_at; unfinished transfers are failures
    port_seed: int = 0  # seeds the source ports, hence the ECMP hash outcomes
    # seconds after start_at between which the roce receivers count each transfer's
    # delivered bytes (``bytes_at_window_start``/``_end``): a steady-state rate
    window: tuple[float, float] | None = None

    def to_json(self) -> str:
        """Serialise for the agents."""
        return json.dumps({"transfers": [asdict(t) for t in self.transfers],
                           "hosts": self.hosts, "transport": asdict(self.transport),
                           "start_at": self.start_at, "deadline_s": self.deadline_s,
                           "port_seed": self.port_seed, "window": self.window})

    @staticmethod
    def from_json(text: str) -> "Plan":
        """Parse what :meth:`to_json` wrote."""
        data = json.loads(text)
        transfers = [Transfer(**{**t, "after": tuple(t.get("after", ())),
                                 "after_start": _pair(t.get("after_start"))})
                     for t in data["transfers"]]
        hosts = {name: list(nics) for name, nics in data["hosts"].items()}
        window = data.get("window")
        transport = data["transport"]
        transport["lossless_dscps"] = tuple(transport.get("lossless_dscps", ()))
        return Plan(transfers, hosts, TransportSpec(**transport),
                    float(data["start_at"]), float(data["deadline_s"]),
                    int(data.get("port_seed", 0)),
                    None if window is None else (float(window[0]), float(window[1])))

    def save(self, path: Path) -> None:
        """Write the plan to ``path``."""
        path.write_text(self.to_json())


def _pair(value: Any) -> tuple[str, float] | None:
    """``after_start`` from JSON (a list) back to ``(id, seconds)``."""
    return None if value is None else (str(value[0]), float(value[1]))


def validate_schedule(transfers: Iterable[Transfer], hosts: Iterable[str]) -> None:
    """Check ids are unique, endpoints exist, dependencies are local and acyclic.

    Raises
    ------
    ScheduleError
        Naming the first offending transfer.
    """
    hosts = set(hosts)
    by_id: dict[str, Transfer] = {}
    for t in transfers:
        if t.id in by_id:
            raise ScheduleError(f"duplicate transfer id {t.id!r}")
        if t.src not in hosts or t.dst not in hosts:
            raise ScheduleError(f"{t.id}: unknown endpoint in {t.src} -> {t.dst}")
        if t.src == t.dst:
            raise ScheduleError(f"{t.id}: a transfer needs two endpoints")
        if t.bytes < 1:
            raise ScheduleError(f"{t.id}: bytes must be >= 1, got {t.bytes}")
        if not 0 <= t.dscp <= 63:
            raise ScheduleError(f"{t.id}: dscp must be 0..63, got {t.dscp}")
        if t.channel < 0:
            raise ScheduleError(f"{t.id}: channel must be >= 0, got {t.channel}")
        if not 0 <= t.delay_s < float("inf"):
            raise ScheduleError(f"{t.id}: delay_s must be >= 0, got {t.delay_s}")
        by_id[t.id] = t
    for t in by_id.values():
        for dep in t.after:
            if dep not in by_id:
                raise ScheduleError(f"{t.id}: depends on unknown transfer {dep!r}")
            if t.src not in (by_id[dep].src, by_id[dep].dst):
                raise ScheduleError(f"{t.id}: depends on {dep}, which {t.src} neither sends "
                                    f"nor receives")
        if t.after_start is not None:
            dep, seconds = t.after_start
            if dep not in by_id or by_id[dep].src != t.src:
                raise ScheduleError(f"{t.id}: after_start needs a transfer {t.src} sends, "
                                    f"got {dep!r}")
            if not 0 <= seconds < float("inf"):
                raise ScheduleError(f"{t.id}: after_start seconds must be >= 0, got {seconds}")
    _check_acyclic(by_id)


def _check_acyclic(by_id: dict[str, Transfer]) -> None:
    state: dict[str, int] = {}  # 1 visiting, 2 done
    for root in by_id:
        stack = [(root, iter(by_id[root].waits_for))]
        state[root] = state.get(root, 0) or 1
        if state[root] == 2:
            continue
        while stack:
            node, deps = stack[-1]
            dep = next(deps, None)
            if dep is None:
                state[node] = 2
                stack.pop()
            elif state.get(dep) == 1:
                raise ScheduleError(f"dependency cycle through {dep!r}")
            elif state.get(dep) != 2:
                state[dep] = 1
                stack.append((dep, iter(by_id[dep].waits_for)))


def dependency_order(transfers: Iterable[Transfer]) -> list[Transfer]:
    """Return transfers so that each comes after everything it depends on.

    Raises
    ------
    ScheduleError
        On an unknown dependency or a cycle.
    """
    transfers = list(transfers)
    by_id = {t.id: t for t in transfers}
    for t in transfers:
        missing = [d for d in t.waits_for if d not in by_id]
        if missing:
            raise ScheduleError(f"{t.id}: depends on unknown transfer {missing[0]!r}")
    _check_acyclic(by_id)
    done: set[str] = set()
    order: list[Transfer] = []

    def visit(tid: str) -> None:
        stack = [tid]
        while stack:
            cur = stack[-1]
            pending = [d for d in by_id[cur].waits_for if d not in done]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            if cur not in done:
                done.add(cur)
                order.append(by_id[cur])

    for tid in by_id:
        visit(tid)
    return order


def destination_ip(plan: Plan, transfer: Transfer) -> str:
    """The address a transfer is sent to: its override or the receiver's first NIC."""
    return transfer.dst_ip or plan.hosts[transfer.dst][0].split("/")[0]


def tcp_connection_keys(plan: Plan, transfer: Transfer) -> list[tuple]:
    """Connections (per sender) a TCP transfer's parts travel on, in part order.

    A key is ``(dst_ip, channel, dscp, index)``; connections persist across
    transfers with the same key, as NCCL keeps its queue pairs.
    """
    dst = destination_ip(plan, transfer)
    return [(dst, transfer.channel, transfer.dscp, i)
            for i in range(plan.transport.connections)]


def source_ports(plan: Plan, host: str | None = None) -> dict[str, dict[tuple, tuple[int, ...]]]:
    """The UDP/TCP source ports every sender uses, seeded by ``plan.port_seed``.

    Returns ``{src: {key: ports}}``: for TCP, key is a connection key (see
    :func:`tcp_connection_keys`) with one port; for roce, key is
    ``("roce", transfer id)`` with one port (``entropy="flow"``; the
    transfers of one connection, same receiver address, class and channel,
    share it, as the messages of one queue pair share its 5-tuple) or
    ``entropy_ports`` ports (spraying: every transfer of the sender in the
    same class shares one set, whatever its peer, as a NIC sprays over one
    range of entropy values; the destination address is in the hash too, so
    the paths still differ by peer; a set per peer costs the agents too many
    sockets: docs/benchmarks.md, "Entropy sockets"). The ports decide the 5-tuples,
    hence every ECMP hash: the same plan and seed take the same paths.
    ``host`` limits the work to one sender (each host's ports depend only
    on its own transfers).
    """
    spec = plan.transport
    # (key, the port set it uses, ports in that set)
    keys: dict[str, list[tuple[tuple, tuple, int]]] = {}
    for t in plan.transfers:
        if host is not None and t.src != host:
            continue
        if spec.kind == "tcp":
            wanted = [(key, key, 1) for key in tcp_connection_keys(plan, t)]
        elif spec.sprays:
            pool = ("roce-pool", t.dscp)
            wanted = [(("roce", t.id), pool, spec.entropy_ports)]
        else:  # one port per connection: its messages take one path, as a QP's do
            connection = ("roce", destination_ip(plan, t), t.dscp, t.channel)
            wanted = [(("roce", t.id), connection, 1)]
        keys.setdefault(t.src, []).extend(wanted)
    ports: dict[str, dict[tuple, tuple[int, ...]]] = {}
    for src, wanted in keys.items():
        rng = random.Random(f"{plan.port_seed}:{src}")
        free = list(SOURCE_PORTS)
        rng.shuffle(free)
        sets: dict[tuple, tuple[int, ...]] = {}
        for _, pool, count in sorted(set(wanted), key=repr):
            if pool not in sets:
                if count > len(free):
                    raise ScheduleError(f"{src} needs more than the {len(SOURCE_PORTS)} "
                                        f"planned source ports; use fewer entropy_ports")
                sets[pool] = tuple(free.pop() for _ in range(count))
        ports[src] = {key: sets[pool] for key, pool, _ in wanted}
    return ports


def result_dict(transfer_id: str, role: str, start: float | None, end: float | None, nbytes: int,
                **extra: Any) -> dict[str, Any]:
    """One row of an agent's report (``end`` None: not finished)."""
    return {"id": transfer_id, "role": role, "start": start, "end": end, "bytes": nbytes,
            **extra}
