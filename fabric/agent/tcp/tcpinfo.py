"""Read ``struct tcp_info`` (``getsockopt(IPPROTO_TCP, TCP_INFO)``).

Layout (linux/tcp.h): eight single-byte fields (state, ca_state, retransmits,
probes, backoff, options, snd/rcv_wscale nibbles, a bit-field byte), then
u32s in the order of :data:`U32_FIELDS`. Only the prefix up to
``tcpi_total_retrans`` is parsed; newer kernels append more fields, older
ones (before 2.6.x) may return less, which reads as missing.
"""

from __future__ import annotations

import socket
import struct

U32_FIELDS = ("rto", "ato", "snd_mss", "rcv_mss", "unacked", "sacked", "lost", "retrans",
              "fackets", "last_data_sent", "last_ack_sent", "last_data_recv",
              "last_ack_recv", "pmtu", "rcv_ssthresh", "rtt", "rttvar", "snd_ssthresh",
              "snd_cwnd", "advmss", "reordering", "rcv_rtt", "rcv_space", "total_retrans")
BYTE_FIELDS = ("state", "ca_state", "retransmits", "probes", "backoff", "options",
               "wscale", "flags")
_STRUCT = struct.Struct("=8B%dI" % len(U32_FIELDS))  # native byte order, no padding
SIZE = _STRUCT.size  # 104
TCP_INFO = getattr(socket, "TCP_INFO", 11)


def parse_tcp_info(raw: bytes) -> dict[str, int]:
    """Decode the first :data:`SIZE` bytes of a ``tcp_info`` buffer.

    Raises
    ------
    ValueError
        If ``raw`` is shorter than :data:`SIZE`.
    """
    if len(raw) < SIZE:
        raise ValueError(f"tcp_info too short: {len(raw)} < {SIZE} bytes")
    values = _STRUCT.unpack_from(raw)
    return dict(zip(BYTE_FIELDS + U32_FIELDS, values))


def tcp_info(sock: socket.socket) -> dict[str, int] | None:
    """``tcp_info`` of a connected TCP socket, or None if unavailable."""
    try:
        return parse_tcp_info(sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, SIZE))
    except (OSError, ValueError):
        return None
