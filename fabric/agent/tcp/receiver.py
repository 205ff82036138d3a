"""The receiving side of the TCP engine: listeners, accepted connections, DONE frames.

A peer opens connections to our listener on port 7100 of every own NIC and
sends each part of a transfer as a header, its payload and an end frame; a
complete part is answered with a DONE frame on the same connection, and a
transfer whose every part arrived is complete.
"""

from __future__ import annotations

import functools
import socket
import time
from dataclasses import dataclass, field
from selectors import EVENT_READ as READ, EVENT_WRITE as WRITE
from typing import Any, Callable

from fabric.agent.core.loop import EventLoop
from fabric.agent.core.records import TransferRecord
from fabric.agent.tcp import framing
from fabric.traffic.model import TransportSpec


@dataclass
class _RecvState:
    """One transfer this agent receives: its parts' sizes and those complete."""

    record: TransferRecord
    sizes: list[int]
    done_parts: set[int] = field(default_factory=set)
    parts: list[dict[str, Any]] = field(default_factory=list)


class _RecvConn:
    """A connection a peer opened to our listener."""

    def __init__(self, sock: socket.socket, peer: tuple[str, int]) -> None:
        self.sock = sock
        self.peer = peer
        self.reader = framing.FrameReader()
        self.current: _RecvState | None = None
        self.current_bytes = 0
        self.out = bytearray()
        self.events = READ


class TcpReceiver:
    """The transfers one agent receives over TCP and the connections they come on.

    Parameters
    ----------
    loop : EventLoop
        The agent's loop.
    spec : TransportSpec
        ``connections`` per transfer (how a transfer is split into parts).
    config : TcpConfig
        The engine's tunables (its port).
    open_socket : callable
        ``(family, type) -> socket``: how listeners are opened.
    on_done : callable
        Called with the record when a transfer is complete.
    errors : list of str
        Where problems are reported (the engine's list).
    rx : bytearray
        The buffer connections are read into (the engine's, shared: one loop reads).
    """

    def __init__(self, loop: EventLoop, spec: TransportSpec, config: Any,
                 open_socket: Callable[[int, int], socket.socket],
                 on_done: Callable[[TransferRecord], None], errors: list[str],
                 rx: bytearray) -> None:
        self.loop = loop
        self.spec = spec
        self.config = config
        self.open_socket = open_socket
        self.on_done = on_done
        self.errors = errors
        self.listeners: list[socket.socket] = []
        self.accepted: list[_RecvConn] = []
        self.expect: dict[str, _RecvState] = {}
        self._rx = rx
        self._rxview = memoryview(rx)

    def bind(self, addresses: list[str]) -> None:
        """Listen on the engine's port (7100) of every address in ``addresses``.

        Raises
        ------
        OSError
            If a port is busy.
        """
        for address in addresses:
            sock = self.open_socket(socket.AF_INET, socket.SOCK_STREAM)
            self.listeners.append(sock)
            # TIME_WAIT from an earlier run must not block the bind; a live
            # listener still does (that is the busy-port check)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address, self.config.port))
            sock.listen(256)
            sock.setblocking(False)
            self.loop.register(sock, READ, functools.partial(self._on_accept, sock))

    def _on_accept(self, listener: socket.socket, _mask: int) -> None:
        while True:
            try:
                sock, peer = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self.errors.append(f"accept: {exc}")
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _RecvConn(sock, peer)
            self.accepted.append(conn)
            self.loop.register(sock, READ, functools.partial(self._on_recv_conn, conn))

    def add_recv(self, record: TransferRecord) -> None:
        """Expect ``record``'s parts on any connection."""
        sizes = framing.split_parts(record.transfer.bytes, self.spec.connections)
        self.expect[record.id] = _RecvState(record, sizes)
        record.extra["parts"] = []

    def _on_recv_conn(self, conn: _RecvConn, mask: int) -> None:
        if mask & WRITE:
            self._flush(conn)
        if not mask & READ:
            return
        try:
            n = conn.sock.recv_into(self._rx)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            n = 0
            self.errors.append(f"connection from {conn.peer[0]}:{conn.peer[1]}: {exc}")
        if n == 0:
            if conn.current is not None or conn.reader.in_payload:
                self.errors.append(f"connection from {conn.peer[0]}:{conn.peer[1]} closed "
                                   f"in the middle of a part")
            self._drop(conn)
            return
        try:
            events = conn.reader.feed(self._rxview[:n])
        except framing.FrameError as exc:
            self.errors.append(f"connection from {conn.peer[0]}: {exc}")
            self._drop(conn)
            return
        for kind, value in events:
            if kind == "payload":
                conn.current_bytes += value  # type: ignore[operator]
                if conn.current is not None:
                    conn.current.record.bytes += value  # type: ignore[operator]
            elif kind == "header":
                self._part_header(conn, value)  # type: ignore[arg-type]
            else:
                self._part_end(conn, value)  # type: ignore[arg-type]
        if conn.out:
            self._flush(conn)

    def _part_header(self, conn: _RecvConn, header: framing.Header) -> None:
        conn.current_bytes = 0
        conn.current = None
        if header.kind != framing.DATA:
            self.errors.append(f"unexpected frame kind {header.kind} from {conn.peer[0]}")
            return
        state = self.expect.get(header.transfer_id)
        if state is None:
            self.errors.append(f"data for unknown transfer {header.transfer_id!r} "
                               f"from {conn.peer[0]}")
            return
        if header.part >= len(state.sizes) or state.sizes[header.part] != header.length \
                or header.part in state.done_parts:
            self.errors.append(f"{header.transfer_id}: unexpected part {header.part} of "
                               f"{header.length} bytes")
            return
        conn.current = state
        if state.record.start is None:
            state.record.start = time.time()

    def _part_end(self, conn: _RecvConn, header: framing.Header) -> None:
        transfer_id, part = header.transfer_id, header.part
        state = conn.current
        conn.current = None
        if state is None:
            return
        now = time.time()
        state.done_parts.add(part)
        state.parts.append({"index": part, "bytes": conn.current_bytes, "end": now,
                            "peer_port": conn.peer[1]})
        conn.out += framing.encode(framing.DONE, transfer_id, part, conn.current_bytes)
        expected = sum(1 for size in state.sizes if size)
        record = state.record
        if len(state.done_parts) == expected and record.end is None:
            record.end = now
            record.extra["parts"] = sorted(state.parts, key=lambda p: p["index"])
            self.on_done(record)

    def _flush(self, conn: _RecvConn) -> None:
        try:
            sent = conn.sock.send(conn.out)
            del conn.out[:sent]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as exc:
            self.errors.append(f"DONE to {conn.peer[0]}: {exc}")
            conn.out.clear()
        want = READ | (WRITE if conn.out else 0)
        if want != conn.events:
            conn.events = want
            self.loop.modify(conn.sock, want, functools.partial(self._on_recv_conn, conn))

    def _drop(self, conn: _RecvConn) -> None:
        self.loop.unregister(conn.sock)
        conn.sock.close()
        if conn in self.accepted:
            self.accepted.remove(conn)

    def linger_until(self) -> float | None:
        """Keep the agent running while a DONE frame is still unsent (else None)."""
        if any(conn.out for conn in self.accepted):
            return time.monotonic() + 0.01
        return None

    def snapshot(self) -> None:
        """Copy per-part details into the records received."""
        for state in self.expect.values():
            if state.record.end is None:
                state.record.extra["parts"] = sorted(state.parts, key=lambda p: p["index"])
            state.record.extra["connections"] = len(state.parts)
