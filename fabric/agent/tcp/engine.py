"""The kernel-TCP transport: persistent connections, parts, DONE frames.

A transfer is split evenly over ``spec.connections`` connections to its
destination (as NCCL spreads a peer's traffic over several queue pairs);
connections are keyed by (destination address, channel, DSCP, index)
(:func:`fabric.traffic.model.tcp_connection_keys`), opened on first use
from the source port the plan assigns the key
(:func:`fabric.traffic.model.source_ports`, so ECMP hashes are
reproducible) and kept for later transfers, which queue on them in FIFO
order. The receiver answers each complete part with a DONE frame; the
sender then reads ``tcp_info`` for that part's retransmissions and RTT.
The receiving side (listeners, parts arriving, DONE frames) is
:class:`~fabric.agent.tcp.receiver.TcpReceiver`.
"""

from __future__ import annotations

import errno
import functools
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from selectors import EVENT_READ as READ, EVENT_WRITE as WRITE
from typing import Any, Callable, Mapping

from fabric.agent.core.engine import Engine
from fabric.agent.core.loop import EventLoop
from fabric.agent.core.records import TransferRecord
from fabric.agent.tcp import framing
from fabric.agent.tcp.receiver import TcpReceiver
from fabric.agent.tcp.tcpinfo import tcp_info
from fabric.traffic.model import TCP_DATA_PORT, TransportSpec

_RETRY_ERRNOS = {errno.ECONNREFUSED, errno.ETIMEDOUT, errno.EHOSTUNREACH, errno.ENETUNREACH,
                 errno.ECONNRESET, errno.EADDRNOTAVAIL}


@dataclass(frozen=True)
class TcpConfig:
    """Tunables of the TCP engine."""

    port: int = TCP_DATA_PORT
    connect_timeout_s: float = 5.0  # peers may start a little after us
    retry_s: float = 0.1
    chunk: int = 256 * 1024


@dataclass
class _Part:
    """One connection's share of one transfer, on the sending side."""

    state: "_SendState"
    index: int
    length: int
    sent: int = 0
    start: float | None = None
    end: float | None = None
    confirmed: int = 0
    retrans_before: int = 0
    retransmits: int | None = None
    rtt_us: int | None = None
    mss: int | None = None  # data bytes per segment the connection sent
    local_port: int | None = None

    def row(self) -> dict[str, Any]:
        return {"index": self.index, "bytes": self.confirmed, "length": self.length,
                "local_port": self.local_port, "start": self.start, "end": self.end,
                "retransmits": self.retransmits, "rtt_us": self.rtt_us, "mss": self.mss}


@dataclass
class _SendState:
    record: TransferRecord
    parts: list[_Part] = field(default_factory=list)
    left: int = 0


class _SendConn:
    """A persistent connection we opened, carrying parts in FIFO order."""

    def __init__(self, key: tuple[str, int, int, int], src_ip: str) -> None:
        self.key = key
        self.src_ip = src_ip
        self.sock: socket.socket | None = None
        self.connected = False
        self.deadline = 0.0
        self.queue: deque[_Part] = deque()
        self.current: _Part | None = None
        self.pending: memoryview | None = None  # bytes of the current write not yet taken
        self.awaiting: deque[_Part] = deque()
        self.reader = framing.FrameReader()
        self.events = 0
        self.local_port: int | None = None


class TcpEngine(Engine):
    """All TCP connections and transfers of one agent.

    Parameters
    ----------
    loop : EventLoop
        The agent's loop.
    spec : TransportSpec
        ``connections`` per transfer.
    addresses : list of str
        Own NIC addresses (a listener binds on each).
    on_done, on_fail : callable
        Called with the record when a transfer side completes or fails.
    config : TcpConfig
        Engine tunables.
    source_ports : mapping, optional
        This host's part of :func:`fabric.traffic.model.source_ports`:
        connection key -> ``(port,)``. Missing: an ephemeral port.
    open_socket : callable, optional
        How sockets are opened (see :class:`~fabric.agent.core.engine.Engine`).
    """

    def __init__(self, loop: EventLoop, spec: TransportSpec, addresses: list[str],
                 on_done: Callable[[TransferRecord], None],
                 on_fail: Callable[[TransferRecord, str], None],
                 config: TcpConfig = TcpConfig(),
                 source_ports: Mapping[tuple, tuple[int, ...]] | None = None,
                 open_socket: Callable[[int, int], socket.socket] = socket.socket) -> None:
        super().__init__(loop, spec, addresses, on_done, on_fail, config, source_ports,
                         open_socket)
        self.errors: list[str] = []
        self.conns: dict[tuple[str, int, int, int], _SendConn] = {}
        self.sends: dict[str, _SendState] = {}
        self._zeros = memoryview(bytes(config.chunk))
        self._rx = bytearray(1 << 20)  # shared with the receiver: one loop reads both
        self._rxview = memoryview(self._rx)
        self.receiver = TcpReceiver(loop, spec, config, open_socket, on_done, self.errors,
                                    self._rx)

    # -- receiving (see :class:`~fabric.agent.tcp.receiver.TcpReceiver`) ----------------
    def bind(self) -> None:
        """Listen on port 7100 of every own NIC.

        Raises
        ------
        OSError
            If a port is busy.
        """
        self.receiver.bind(self.addresses)

    def add_recv(self, record: TransferRecord) -> None:
        """Expect ``record``'s parts on any connection."""
        self.receiver.add_recv(record)

    # -- sending -----------------------------------------------------------------------
    def start_send(self, record: TransferRecord, now: float) -> None:
        """Queue ``record``'s parts on their connections (src_ip/dst_ip set)."""
        assert record.src_ip and record.dst_ip
        t = record.transfer
        state = _SendState(record)
        self.sends[record.id] = state
        for index, length in enumerate(framing.split_parts(t.bytes, self.spec.connections)):
            if not length:
                continue
            part = _Part(state, index, length)
            state.parts.append(part)
            key = (record.dst_ip, t.channel, t.dscp, index)
            conn = self.conns.get(key)
            if conn is None:
                conn = self.conns[key] = _SendConn(key, record.src_ip)
                conn.deadline = now + self.config.connect_timeout_s
                self._connect(conn)
            conn.queue.append(part)
            if conn.connected:
                self._want(conn)
        state.left = len(state.parts)

    def _bind_source(self, conn: _SendConn, sock: socket.socket) -> None:
        """Bind the planned source port, or an ephemeral one with a warning."""
        port = (self.source_ports.get(conn.key) or (0,))[0]
        if port:
            try:
                sock.bind((conn.src_ip, port))
                return
            except OSError as exc:
                self.warnings.append(f"connection {conn.key}: source port {conn.src_ip}:"
                                     f"{port} unavailable ({exc.strerror}); used an "
                                     f"ephemeral one")
                self.source_ports = {**self.source_ports, conn.key: (0,)}  # warn once
        sock.bind((conn.src_ip, 0))

    def _connect(self, conn: _SendConn) -> None:
        dst_ip, _, dscp, _ = conn.key
        sock = self.open_socket(socket.AF_INET, socket.SOCK_STREAM)
        conn.sock = sock
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # a retry or the next run may find the planned port in TIME_WAIT
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if dscp:
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
        try:
            self._bind_source(conn, sock)
            err = sock.connect_ex((dst_ip, self.config.port))
        except OSError as exc:
            err = exc.errno or errno.EINVAL
        if err in (0, errno.EINPROGRESS):
            conn.events = WRITE
            self.loop.register(sock, WRITE, functools.partial(self._on_send_conn, conn))
        else:
            self._connect_failed(conn, err)

    def _connect_failed(self, conn: _SendConn, err: int) -> None:
        if conn.sock is not None:
            self.loop.unregister(conn.sock)
            conn.sock.close()
            conn.sock = None
        if err in _RETRY_ERRNOS and time.monotonic() + self.config.retry_s < conn.deadline:
            self.loop.call_later(self.config.retry_s, lambda: self._connect(conn))
            return
        dst_ip, channel, _, index = conn.key
        self._fail_conn(conn, f"cannot connect to {dst_ip}:{self.config.port} "
                              f"(channel {channel}, connection {index}): "
                              f"{errno.errorcode.get(err, err)}")

    def _fail_conn(self, conn: _SendConn, reason: str) -> None:
        """Fail every transfer with a part on ``conn``; forget the connection."""
        if conn.sock is not None:
            self.loop.unregister(conn.sock)
            conn.sock.close()
            conn.sock = None
        self.conns.pop(conn.key, None)
        parts = list(conn.awaiting) + ([conn.current] if conn.current else []) \
            + list(conn.queue)
        conn.queue.clear()
        conn.awaiting.clear()
        conn.current = None
        for record in {id(p.state.record): p.state.record for p in parts}.values():
            if not record.finished:
                self.on_fail(record, reason)

    def _want(self, conn: _SendConn) -> None:
        want = READ | (WRITE if conn.current or conn.queue else 0)
        if want != conn.events and conn.sock is not None:
            conn.events = want
            self.loop.modify(conn.sock, want, functools.partial(self._on_send_conn, conn))

    def _on_send_conn(self, conn: _SendConn, mask: int) -> None:
        sock = conn.sock
        if sock is None:
            return
        if not conn.connected:
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self._connect_failed(conn, err)
                return
            conn.connected = True
            conn.local_port = sock.getsockname()[1]
            self._want(conn)
            mask = WRITE
        if mask & READ:
            self._read_done(conn)
            if conn.sock is None:
                return
        if mask & WRITE:
            self._write(conn)

    def _write(self, conn: _SendConn) -> None:
        sock = conn.sock
        assert sock is not None
        chunk = self.config.chunk
        try:
            while True:
                part = conn.current
                if part is None:
                    if not conn.queue:
                        break
                    part = conn.current = conn.queue.popleft()
                    header = framing.encode(framing.DATA, part.state.record.id, part.index,
                                            part.length)
                    first = min(part.length, chunk - len(header))
                    conn.pending = memoryview(header + bytes(first))
                    part.sent = first
                if conn.pending is None:
                    take = min(chunk, part.length - part.sent)
                    conn.pending = self._zeros[:take]
                    part.sent += take
                if part.start is None:
                    # stamped before the first send: on loopback the receiver
                    # can see the bytes before send() even returns
                    self._part_started(conn, part)
                n = sock.send(conn.pending)
                if n < len(conn.pending):
                    conn.pending = conn.pending[n:]
                    break
                conn.pending = None
                if part.sent >= part.length:
                    conn.awaiting.append(part)
                    conn.current = None
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as exc:
            self._fail_conn(conn, f"connection to {conn.key[0]} failed: {exc}")
            return
        self._want(conn)

    def _part_started(self, conn: _SendConn, part: _Part) -> None:
        part.start = time.time()
        part.local_port = conn.local_port
        info = tcp_info(conn.sock) if conn.sock else None
        part.retrans_before = info["total_retrans"] if info else 0
        record = part.state.record
        if record.start is None:
            record.start = part.start

    def _read_done(self, conn: _SendConn) -> None:
        sock = conn.sock
        assert sock is not None
        try:
            n = sock.recv_into(self._rx)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fail_conn(conn, f"connection to {conn.key[0]} failed: {exc}")
            return
        if n == 0:
            if conn.awaiting or conn.current or conn.queue:
                self._fail_conn(conn, f"{conn.key[0]} closed the connection")
            else:
                self.loop.unregister(sock)
                sock.close()
                conn.sock = None
                self.conns.pop(conn.key, None)
            return
        try:
            events = conn.reader.feed(self._rxview[:n])
        except framing.FrameError as exc:
            self._fail_conn(conn, f"from {conn.key[0]}: {exc}")
            return
        for kind, value in events:
            if kind == "end":
                self._on_done_frame(conn, value)  # type: ignore[arg-type]
                if conn.sock is None:
                    return

    def _on_done_frame(self, conn: _SendConn, reader: framing.Header) -> None:
        if reader.kind != framing.DONE or not conn.awaiting:
            self.errors.append(f"unexpected frame from {conn.key[0]} for "
                               f"{reader.transfer_id!r}")
            return
        part = conn.awaiting[0]
        if part.state.record.id != reader.transfer_id or part.index != reader.part:
            self.errors.append(f"DONE for {reader.transfer_id!r} part {reader.part} while "
                               f"waiting for {part.state.record.id!r} part {part.index}")
            return
        conn.awaiting.popleft()
        part.end = time.time()
        part.confirmed = reader.length
        info = tcp_info(conn.sock) if conn.sock else None
        if info:
            # total_retrans counts for the whole connection: the part's share
            # is the growth while it was on the wire
            part.retransmits = info["total_retrans"] - part.retrans_before
            part.rtt_us = info["rtt"]
            part.mss = info["snd_mss"]
        state = part.state
        state.left -= 1
        record = state.record
        record.bytes = sum(p.confirmed for p in state.parts)
        if state.left == 0 and not record.finished:
            if record.bytes != record.transfer.bytes:
                self.on_fail(record, f"receiver confirmed {record.bytes} of "
                                     f"{record.transfer.bytes} bytes")
                return
            record.end = part.end
            self.on_done(record)

    def linger_until(self) -> float | None:
        """Keep the agent running while a DONE frame is still unsent (else None)."""
        return self.receiver.linger_until()

    # -- results -----------------------------------------------------------------------
    def snapshot(self) -> None:
        """Copy per-part details and counters into the records."""
        for state in self.sends.values():
            record = state.record
            record.bytes = sum(p.confirmed for p in state.parts)
            rtts = [p.rtt_us for p in state.parts if p.rtt_us is not None]
            record.extra.update(
                connections=len(state.parts),
                retransmits=sum(p.retransmits or 0 for p in state.parts),
                rtt_us=round(sum(rtts) / len(rtts)) if rtts else None,
                parts=[p.row() for p in state.parts])
        self.receiver.snapshot()

    def close(self) -> None:
        """Close listeners and connections (a graceful FIN for open ones)."""
        receiver = self.receiver
        socks = list(receiver.listeners) + [c.sock for c in receiver.accepted] \
            + [c.sock for c in self.conns.values() if c.sock is not None]
        for sock in socks:
            self.loop.unregister(sock)
            try:
                sock.close()
            except OSError:
                pass
        receiver.listeners.clear()
        receiver.accepted.clear()
        self.conns.clear()
