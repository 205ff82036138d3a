"""What both transport engines of an agent hold: loop, plan transport, callbacks."""

from __future__ import annotations

import socket
from typing import Any, Callable, Mapping

from fabric.agent.core.loop import EventLoop
from fabric.agent.core.records import TransferRecord
from fabric.traffic.model import TransportSpec


class Engine:
    """Common state of :class:`~fabric.agent.tcp.engine.TcpEngine` and
    :class:`~fabric.agent.roce.engine.RoceEngine`.

    Parameters
    ----------
    loop : EventLoop
        The agent's loop (sockets are registered on it).
    spec : TransportSpec
        The plan's transport.
    addresses : list of str
        Own NIC addresses (a listener binds on each).
    on_done, on_fail : callable
        Called with the record when a transfer side completes or fails.
    config : object
        Engine tunables.
    source_ports : mapping, optional
        This host's part of :func:`fabric.traffic.model.source_ports`.
        Missing keys: ephemeral ports.
    open_socket : callable, optional
        ``(family, type) -> socket``: how the engine opens every socket. An
        agent that serves a host from outside its network namespace passes
        :meth:`fabric.agent.netns.Namespace.socket`.
    """

    def __init__(self, loop: EventLoop, spec: TransportSpec, addresses: list[str],
                 on_done: Callable[[TransferRecord], None],
                 on_fail: Callable[[TransferRecord, str], None], config: Any,
                 source_ports: Mapping[tuple, tuple[int, ...]] | None = None,
                 open_socket: Callable[[int, int], socket.socket] = socket.socket) -> None:
        self.loop = loop
        self.open_socket = open_socket
        self.spec = spec
        self.addresses = addresses
        self.on_done = on_done
        self.on_fail = on_fail
        self.config = config
        self.source_ports = source_ports or {}
        self.warnings: list[str] = []

    def prepare_send(self, record: TransferRecord) -> None:
        """Set up what a planned send needs before the common start (default: nothing)."""
        del record
