"""What an agent knows about each of its transfers, and the result rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fabric.traffic.model import Transfer, result_dict

SEND, RECV = "send", "recv"


@dataclass
class TransferRecord:
    """One side (send or recv) of one transfer, as this agent saw it.

    ``start``/``end`` are wall-clock (``time.time()``) seconds. The engines
    fill ``bytes`` (received, or confirmed by the receiver) and ``extra``
    (transport counters); the runner owns the life cycle.
    """

    transfer: Transfer
    role: str
    qpn: int = 0
    src_ip: str | None = None
    dst_ip: str | None = None
    ready: float | None = None       # send: when its dependencies were all met
    start: float | None = None
    end: float | None = None
    bytes: int = 0
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """The transfer id."""
        return self.transfer.id

    @property
    def peer(self) -> str:
        """The endpoint at the other end."""
        return self.transfer.dst if self.role == SEND else self.transfer.src

    @property
    def finished(self) -> bool:
        """Completed or failed: nothing more will happen to it."""
        return self.end is not None or self.error is not None

    @property
    def ok(self) -> bool:
        """Completed with every byte."""
        return self.end is not None and self.error is None

    def row(self) -> dict[str, Any]:
        """The result row (:func:`fabric.traffic.model.result_dict` plus context)."""
        t = self.transfer
        # start is None for a side that never began (result_dict says float)
        return result_dict(t.id, self.role, self.start,  # type: ignore[arg-type]
                           self.end, self.bytes,
                           peer=self.peer, expected_bytes=t.bytes, tag=t.tag, dscp=t.dscp,
                           channel=t.channel, src_ip=self.src_ip, dst_ip=self.dst_ip,
                           ready=self.ready, error=self.error, **self.extra)
