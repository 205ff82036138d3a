"""Which of a sprayed queue pair's source ports the next packet leaves on.

Every source port (an *entropy* value) hashes onto one path through the
fabric. ``packet`` spraying takes the ports in turn. ``recycle`` (after REPS,
Recycled Entropy Packet Spraying) first takes a port the receiver echoed
because its packet arrived without queueing, each echo good for one more
packet, and takes the next port in turn only when no echo is waiting: ports
whose paths queue stop being reused, so the flow drifts to the paths that
do not, instead of splitting as unevenly as the hash maps its pool.
"""

from __future__ import annotations

from collections import deque
from typing import Iterable


class EntropyChoice:
    """The port order of one sender.

    Parameters
    ----------
    ports : list of int
        The local source ports, by index (the sender's sockets).
    start : int
        Index of the first port in turn (where the pool's last user stopped).
    recycle : bool
        Reuse echoed ports first.
    index_of : dict, optional
        ``port -> index`` of ``ports``, when the caller keeps one for a pool of
        sockets its senders share (a sprayed sender has hundreds of ports).
    """

    __slots__ = ("count", "rot", "recycled", "index_of", "reused")

    def __init__(self, ports: list[int], start: int = 0, recycle: bool = False,
                 index_of: dict[int, int] | None = None) -> None:
        self.count = len(ports)
        self.rot = start % self.count if self.count else 0
        self.recycled: deque[int] | None = deque(maxlen=self.count) if recycle else None
        if not recycle:
            index_of = {}
        elif index_of is None:
            index_of = {port: i for i, port in enumerate(ports)}
        self.index_of = index_of
        self.reused = 0  # packets sent on an echoed port

    @property
    def recycling(self) -> bool:
        """True when echoes are wanted (``recycle``)."""
        return self.recycled is not None

    def next(self) -> int:
        """Index of the port for the next packet."""
        if self.recycled:
            self.reused += 1
            return self.recycled.popleft()
        index = self.rot
        self.rot = index + 1 if index + 1 < self.count else 0
        return index

    def echoed(self, ports: Iterable[int]) -> None:
        """Ports the receiver saw arrive without queueing: each is reused once."""
        if self.recycled is not None:
            index_of = self.index_of
            self.recycled.extend(index_of[p] for p in ports if p in index_of)
