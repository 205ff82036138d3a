"""Listen ports on this machine: a controller's port is free, a remote one listens.

Controllers listen on loopback only; a remote controller must be on loopback too.
"""

from __future__ import annotations

import errno
import ipaddress
import socket

from fabric.errors import UserError


class PortBusyError(UserError, RuntimeError):
    """A listen port is already taken (often by a stale controller)."""


def parse_remote_controller(text: str) -> tuple[str, int]:
    """``remote:HOST:PORT`` -> ``(host, port)``; only loopback hosts are accepted
    (switches never talk to anything outside this machine)."""
    kind, _, rest = text.partition(":")
    host, _, port_text = rest.rpartition(":")
    if kind != "remote" or not host or not port_text:
        raise ValueError(f"{text!r} is not remote:HOST:PORT (e.g. remote:127.0.0.1:6633)")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"{host!r} is not an IP address; a remote controller must listen "
                         f"on loopback, e.g. 127.0.0.1") from None
    if address.version != 4 or not address.is_loopback:
        raise ValueError(f"{host} is not an IPv4 loopback address; a remote controller must "
                         f"listen on loopback (127.0.0.0/8)")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"port must be an integer in 1..65535, got {port_text!r}")
    return str(address), int(port_text)


def check_listening(host: str, port: int) -> None:
    """Raise :class:`NotListeningError` when nothing accepts connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        if probe.connect_ex((host, port)) != 0:
            raise NotListeningError(f"no controller listens on {host}:{port}; start it first")


class NotListeningError(RuntimeError):
    """A remote controller that is not there."""


def check_port_free(host: str, port: int) -> None:
    """Raise :class:`PortBusyError` when ``host:port`` cannot be listened on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        if probe.connect_ex((host, port)) == 0:
            raise PortBusyError(f"port {host}:{port} is busy: another controller is listening "
                                f"(a stale run? try `fabric clean`)")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
                raise PortBusyError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
            raise
