"""Frames of the TCP transport: a header naming transfer and part, then bytes.

``DATA`` is followed by ``length`` payload bytes; ``DONE`` travels back on
the same connection when the receiver has the whole part (``length`` then
says how many bytes it got). Header: magic, kind, reserved, part index,
length, id length, then the UTF-8 transfer id.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, Union

MAGIC = 0xFAB1
DATA = 1
DONE = 2
HEADER = struct.Struct("!HBBIQH")
MAX_ID_BYTES = 1024


class FrameError(ValueError):
    """Bytes that are not a frame of this protocol."""


class Header(NamedTuple):
    """A parsed frame header."""

    kind: int
    transfer_id: str
    part: int
    length: int


Event = tuple[str, Union[Header, int]]


def encode(kind: int, transfer_id: str, part: int, length: int) -> bytes:
    """A frame header (DONE frames are just this)."""
    tid = transfer_id.encode()
    if len(tid) > MAX_ID_BYTES:
        raise FrameError(f"transfer id longer than {MAX_ID_BYTES} bytes")
    return HEADER.pack(MAGIC, kind, 0, part, length, len(tid)) + tid


def split_parts(nbytes: int, connections: int) -> list[int]:
    """Bytes per connection: as even as possible, the first ones one byte larger.

    Both ends compute this from the plan; parts of length 0 (when ``nbytes <
    connections``) are not sent.
    """
    base, extra = divmod(nbytes, connections)
    return [base + (1 if i < extra else 0) for i in range(connections)]


class FrameReader:
    """Incremental parser: feed byte chunks, get header events and payload counts.

    Payload bytes are only counted, never copied: the transport carries
    filler, and TCP already guarantees integrity.
    """

    def __init__(self) -> None:
        self._head = bytearray()
        self.header: Header | None = None  # of the frame being read
        self.remaining = 0   # payload bytes of the current DATA frame still to come
        self.in_payload = False

    def feed(self, data: memoryview) -> list[Event]:
        """Consume ``data``; return events in order.

        Events are ``("header", Header)`` when a header is complete,
        ``("payload", n)`` for ``n`` payload bytes and ``("end", Header)``
        when the frame (just its header, for DONE) is complete. One chunk
        may hold the end of one frame and the start of the next, so events
        carry their header rather than leaving it on the reader.

        Raises
        ------
        FrameError
            On a bad magic number or id length.
        """
        events: list[Event] = []
        pos, size = 0, len(data)
        while pos < size:
            if self.in_payload:
                take = min(self.remaining, size - pos)
                pos += take
                self.remaining -= take
                events.append(("payload", take))
                if not self.remaining:
                    self.in_payload = False
                    events.append(("end", self.header))  # type: ignore[arg-type]
                continue
            head = self._head
            need = HEADER.size - len(head)
            if need > 0:
                head += data[pos:pos + need]
                pos += min(need, size - pos)
                if len(head) < HEADER.size:
                    break
            magic, kind, _, part, length, idlen = HEADER.unpack_from(head)
            if magic != MAGIC or idlen > MAX_ID_BYTES or kind not in (DATA, DONE):
                raise FrameError(f"bad frame header {bytes(head[:HEADER.size]).hex()}")
            need = HEADER.size + idlen - len(head)
            if need > 0:
                head += data[pos:pos + need]
                pos += min(need, size - pos)
                if len(head) < HEADER.size + idlen:
                    break
            header = Header(kind, bytes(head[HEADER.size:]).decode(errors="replace"), part,
                            length)
            self.header = header
            self._head = bytearray()
            events.append(("header", header))
            if kind == DATA and length:
                self.in_payload, self.remaining = True, length
            else:
                events.append(("end", header))
        return events
