"""A seeded UDP relay that drops and reorders datagrams (for loopback tests).

Loopback neither loses nor reorders, so the RoCE transport's repair paths
would go untested without Mininet. Point a transfer's ``dst_ip`` at the
proxy: it forwards every datagram to the real receiver from a socket of its
own per client port, bound to that same port number where it is free (so
ACKs find their way back to the exact port the data came from, as the agent
expects, and the receiver sees the sender's source ports), and relays the answers back from its
listening port. Each direction drops a fraction of datagrams and holds back
another fraction by a random delay, which reorders them behind later ones,
and can forward a fraction marked CE, as a congested ECN switch would.

The proxy runs in one thread of the calling process; :meth:`stop` joins it.
"""

from __future__ import annotations

import heapq
import itertools
import random
import selectors
import socket
import struct
import threading
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Impairment:
    """What happens to each datagram of one direction."""

    drop: float = 0.05          # probability of dropping
    hold: float = 0.5           # probability of delaying (reorders it)
    max_delay_s: float = 0.004  # delay is uniform in (0, max_delay_s]
    mark: float = 0.0           # probability of forwarding it marked CE

CE_TOS = 0b11  # the ECN field of a CE-marked packet (DSCP 0)


@dataclass
class ProxyStats:
    """Datagrams seen, dropped and delayed, per direction."""

    forward: dict[str, int] = field(default_factory=lambda: {"in": 0, "dropped": 0,
                                                              "held": 0, "marked": 0})
    backward: dict[str, int] = field(default_factory=lambda: {"in": 0, "dropped": 0,
                                                               "held": 0, "marked": 0})


class ImpairmentProxy:
    """UDP relay between senders and one receiver address.

    Parameters
    ----------
    listen_ip : str
        Address senders send to (use it as the transfer's ``dst_ip``).
    target_ip : str
        The real receiver's address.
    port : int
        UDP port on both sides (4791).
    forward, backward : Impairment
        Impairment of data (towards the target) and of ACKs (back).
    seed : int
        Seed of the drop/delay decisions.
    """

    def __init__(self, listen_ip: str, target_ip: str, port: int = 4791,
                 forward: Impairment = Impairment(), backward: Impairment | None = None,
                 seed: int = 1) -> None:
        self.listen_ip = listen_ip
        self.target = (target_ip, port)
        self.port = port
        self.forward = forward
        self.backward = forward if backward is None else backward
        self.rng = random.Random(seed)
        self.stats = ProxyStats()
        self._selector = selectors.DefaultSelector()
        self._front: socket.socket | None = None
        self._upstream: dict[tuple[str, int], socket.socket] = {}
        self._client_of: dict[socket.socket, tuple[str, int]] = {}
        self._heap: list[tuple[float, int, socket.socket, bytes, tuple[str, int] | None,
                               int]] = []
        self._seq = itertools.count()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "ImpairmentProxy":
        """Bind and start relaying (raises OSError if the port is busy)."""
        front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        front.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        front.bind((self.listen_ip, self.port))
        front.setblocking(False)
        self._front = front
        self._selector.register(front, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._run, name="impairment-proxy",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread and close every socket."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        for sock in [self._front, *self._upstream.values()]:
            if sock is not None:
                sock.close()
        self._selector.close()

    def __enter__(self) -> "ImpairmentProxy":
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def _upstream_for(self, client: tuple[str, int]) -> socket.socket:
        sock = self._upstream.get(client)
        if sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            try:  # the client's own port, as a switch keeps it: the receiver sees its entropy
                sock.bind((self.listen_ip, client[1]))
            except OSError:
                sock.bind((self.listen_ip, 0))
            sock.connect(self.target)
            sock.setblocking(False)
            self._upstream[client] = sock
            self._client_of[sock] = client
            self._selector.register(sock, selectors.EVENT_READ, client)
        return sock

    def _impair(self, how: Impairment, counts: dict[str, int], sock: socket.socket,
                data: bytes, addr: tuple[str, int] | None) -> None:
        counts["in"] += 1
        if self.rng.random() < how.drop:
            counts["dropped"] += 1
            return
        tos = 0
        if how.mark and self.rng.random() < how.mark:  # no draw unless marking: seeds stay
            counts["marked"] += 1
            tos = CE_TOS
        if self.rng.random() < how.hold:
            counts["held"] += 1
            when = time.monotonic() + self.rng.uniform(0, how.max_delay_s)
            heapq.heappush(self._heap, (when, next(self._seq), sock, data, addr, tos))
            return
        self._send(sock, data, addr, tos)

    @staticmethod
    def _send(sock: socket.socket, data: bytes, addr: tuple[str, int] | None,
              tos: int = 0) -> None:
        try:
            ancillary = [(socket.IPPROTO_IP, socket.IP_TOS, struct.pack("i", tos))] if tos else []
            sock.sendmsg([data], ancillary, 0, *([addr] if addr else []))
        except OSError:
            pass  # the receiver is gone; a lost datagram like any other

    def _run(self) -> None:
        front = self._front
        assert front is not None
        while not self._stop.is_set():
            timeout = 0.05
            if self._heap:
                timeout = max(0.0, min(timeout, self._heap[0][0] - time.monotonic()))
            for key, _ in self._selector.select(timeout):
                sock = key.fileobj
                while True:
                    try:
                        data, addr = sock.recvfrom(65536)  # type: ignore[union-attr]
                    except (BlockingIOError, ConnectionRefusedError):
                        break
                    except OSError:
                        break
                    if sock is front:
                        self._impair(self.forward, self.stats.forward,
                                     self._upstream_for(addr), data, None)
                    else:
                        self._impair(self.backward, self.stats.backward, front, data,
                                     key.data)
            now = time.monotonic()
            while self._heap and self._heap[0][0] <= now:
                _, _, sock, data, addr, tos = heapq.heappop(self._heap)
                self._send(sock, data, addr, tos)
