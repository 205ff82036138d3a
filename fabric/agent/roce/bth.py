"""Wire format of the RoCEv2-like transport: BTH, AETH and our ACK extension.

A data packet is ``UDP(dport=4791) / BTH / payload (+pad to 4 bytes) / ICRC``
with an RC SEND opcode (FIRST, MIDDLE, LAST or ONLY). An acknowledgement is
``BTH(ACKNOWLEDGE) / AETH / AckExt / SACK bitmap / ICRC``; a congestion
notification (``dcqcn``) is ``BTH(CNP) / 16 reserved bytes / ICRC``. These
decode with ``scapy.contrib.roce.BTH`` (and Wireshark's RoCEv2 dissector) as
RoCE.

The ICRC is written as zero: it covers the IP identification the kernel
picks after we hand over the datagram, and no RDMA NIC checks it here.

``AckExt`` (after the AETH, which scapy shows as Raw) is our own selective
acknowledgement, because spraying reorders packets heavily and a cumulative
ACK alone would stall the sender: ``kind`` (0 ACK, 1 CLOSE from the sender
once it has seen everything acknowledged), the bitmap length in bytes, the
PSN that triggered the ACK (for RTT samples), the receiver's duplicate
and out-of-order counts, and the one-way delay in microseconds of the packet
that triggered it (0: not measured). Data packets carry their send time
(monotonic nanoseconds, all emulated hosts share the clock) in the first 8
payload bytes, which is how the receiver measures that delay. Bit ``j`` of
the bitmap (little-endian bit order) says PSN ``cum + 1 + j`` arrived, where
``cum`` = BTH.psn + 1 is the next PSN expected in order.

Entropy recycling (``entropy="recycle"``, after REPS): a data packet with the
BTH MigReq bit (:data:`ECHO_FLAG`, which RoCE does not use otherwise) asks the
receiver to echo the UDP source ports of packets that arrived without
queueing. The ACK then lists them, 16 bits each, after the bitmap, and the
AckExt's reserved 16-bit field holds their count (0: none).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

ROCE_PORT = 4791
PSN_MASK = 0xFFFFFF
PSN_HALF = 0x800000
PKEY_DEFAULT = 0xFFFF
ICRC = b"\x00\x00\x00\x00"
ICRC_LEN = 4
BTH_LEN = 12
AETH_LEN = 4

# RC opcodes (IBTA vol. 1, table 38): the transport is RC (0x00 | op).
SEND_FIRST = 0x00
SEND_MIDDLE = 0x01
SEND_LAST = 0x02
SEND_ONLY = 0x04
ACKNOWLEDGE = 0x11
CNP = 0x81  # RoCEv2 congestion notification (CNP opcode, annex A17)
CNP_RESERVED = 16  # zero bytes after a CNP's BTH
DATA_OPCODES = frozenset((SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY))

# AETH syndrome: bits 7:5 = 000 (ACK), bits 4:0 = 0x1F (no end-to-end credit).
AETH_ACK = 0x1F

ACK_KIND = 0
CLOSE_KIND = 1
MAX_BITMAP_BYTES = 128  # SACK covers 1024 PSNs beyond the cumulative point
MAX_ECHO = 32           # source ports one ACK echoes at most
ECHO_FLAG = 0x40        # BTH MigReq bit of a data packet: echo my uncongested entropies

_BTH = struct.Struct("!BBHII")
_AETH_EXT = struct.Struct("!BBH" "BBHIIII")  # AETH(syndrome, msn hi, msn lo) + AckExt
ACK_FIXED_LEN = BTH_LEN + _AETH_EXT.size  # 32
SEND_TIME = struct.Struct("!Q")  # a data packet's send time, ns, at the start of its payload
# Header bytes a data packet adds on the wire beyond its payload:
# Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4. The pacer charges these.
DATA_OVERHEAD = 14 + 20 + 8 + BTH_LEN + ICRC_LEN


class Bth(NamedTuple):
    """A decoded Base Transport Header."""

    opcode: int
    solicited: bool
    padcount: int
    pkey: int
    dqpn: int
    ackreq: bool
    psn: int


class Ack(NamedTuple):
    """A decoded ACKNOWLEDGE packet (BTH fields plus AETH and AckExt)."""

    dqpn: int
    cum: int  # next PSN expected in order (24-bit)
    msn: int
    kind: int
    trigger_psn: int
    duplicates: int
    out_of_order: int
    bitmap: bytes
    owd_us: int = 0  # mean one-way delay of the packets it acknowledges; 0: not measured
    echo: tuple[int, ...] = ()  # source ports of packets that arrived without queueing


def data_opcode(index: int, count: int) -> int:
    """RC SEND opcode of packet ``index`` of a ``count``-packet message."""
    if count == 1:
        return SEND_ONLY
    if index == 0:
        return SEND_FIRST
    return SEND_LAST if index == count - 1 else SEND_MIDDLE


def pack_bth_into(buf: bytearray, opcode: int, dqpn: int, psn: int, ackreq: bool = False,
                  padcount: int = 0, solicited: bool = False) -> None:
    """Write a 12-byte BTH at the start of ``buf`` (P_Key 0xFFFF, TVer 0)."""
    _BTH.pack_into(buf, 0, opcode, (solicited << 7) | (padcount << 4), PKEY_DEFAULT,
                   dqpn & PSN_MASK, (ackreq << 31) | (psn & PSN_MASK))


def data_packet(opcode: int, dqpn: int, psn: int, payload: bytes, ackreq: bool = False
                ) -> bytes:
    """A whole data datagram (BTH, payload padded to 4 bytes, ICRC)."""
    pad = -len(payload) % 4
    buf = bytearray(BTH_LEN)
    pack_bth_into(buf, opcode, dqpn, psn, ackreq, pad, solicited=opcode in
                  (SEND_LAST, SEND_ONLY))
    return bytes(buf) + payload + b"\x00" * pad + ICRC


def parse_bth(data: bytes | bytearray | memoryview) -> Bth:
    """Decode the BTH at the start of a UDP payload.

    Raises
    ------
    ValueError
        If the datagram is shorter than a BTH plus ICRC.
    """
    if len(data) < BTH_LEN + ICRC_LEN:
        raise ValueError(f"datagram too short for BTH+ICRC: {len(data)} bytes")
    opcode, flags, pkey, qp_word, psn_word = _BTH.unpack_from(data)
    return Bth(opcode, bool(flags & 0x80), (flags >> 4) & 3, pkey, qp_word & PSN_MASK,
               bool(psn_word >> 31), psn_word & PSN_MASK)


def ack_packet(dqpn: int, cum: int, msn: int, kind: int, trigger_psn: int, duplicates: int,
               out_of_order: int, bitmap: bytes = b"", owd_us: int = 0,
               echo: tuple[int, ...] | list[int] = ()) -> bytes:
    """An ACKNOWLEDGE datagram (see the module docstring for the fields).

    Parameters
    ----------
    dqpn : int
        The requester's queue pair.
    cum : int
        Next PSN expected in order; BTH.psn carries ``cum - 1`` as in IB.
    bitmap : bytes
        SACK bitmap for PSNs ``cum + 1 ...``; at most
        :data:`MAX_BITMAP_BYTES`.
    echo : sequence of int
        UDP source ports to echo (entropy recycling); at most :data:`MAX_ECHO`.
    """
    if len(bitmap) > MAX_BITMAP_BYTES:
        raise ValueError(f"SACK bitmap too long: {len(bitmap)} bytes")
    if len(echo) > MAX_ECHO:
        raise ValueError(f"too many echoed ports: {len(echo)}")
    buf = bytearray(ACK_FIXED_LEN)
    pack_bth_into(buf, ACKNOWLEDGE, dqpn, (cum - 1) & PSN_MASK)
    _AETH_EXT.pack_into(buf, BTH_LEN, AETH_ACK, (msn >> 16) & 0xFF, msn & 0xFFFF, kind,
                        len(bitmap), len(echo), trigger_psn & PSN_MASK, duplicates & 0xFFFFFFFF,
                        out_of_order & 0xFFFFFFFF, min(max(owd_us, 0), 0xFFFFFFFF))
    ports = struct.pack(f"!{len(echo)}H", *echo) if echo else b""
    return bytes(buf) + bitmap + ports + ICRC


def cnp_packet(dqpn: int) -> bytes:
    """A congestion notification for queue pair ``dqpn`` (BTH, 16 reserved bytes, ICRC)."""
    buf = bytearray(BTH_LEN)
    pack_bth_into(buf, CNP, dqpn, 0)
    return bytes(buf) + bytes(CNP_RESERVED) + ICRC


def parse_ack(data: bytes | bytearray | memoryview) -> Ack:
    """Decode an ACKNOWLEDGE datagram made by :func:`ack_packet`.

    Raises
    ------
    ValueError
        If it is not an ACKNOWLEDGE or is truncated.
    """
    if len(data) < ACK_FIXED_LEN + ICRC_LEN:
        raise ValueError(f"ACK too short: {len(data)} bytes")
    opcode, _, _, qp_word, psn_word = _BTH.unpack_from(data)
    if opcode != ACKNOWLEDGE:
        raise ValueError(f"not an ACKNOWLEDGE: opcode {opcode:#x}")
    (_, msn_hi, msn_lo, kind, nbitmap, necho, trigger, dups,
     ooo, owd_us) = _AETH_EXT.unpack_from(data, BTH_LEN)
    end = ACK_FIXED_LEN + nbitmap
    if len(data) < end + 2 * necho + ICRC_LEN:
        raise ValueError("ACK bitmap or echo truncated")
    echo = struct.unpack_from(f"!{necho}H", data, end) if necho else ()
    return Ack(qp_word & PSN_MASK, ((psn_word & PSN_MASK) + 1) & PSN_MASK,
               (msn_hi << 16) | msn_lo, kind, trigger & PSN_MASK, dups, ooo,
               bytes(data[ACK_FIXED_LEN:end]), owd_us, echo)


def unwrap(psn: int, reference: int) -> int:
    """Absolute packet index of a 24-bit ``psn`` nearest to ``reference``.

    PSNs wrap at 2**24; both ends keep absolute indexes and only the wire
    carries 24 bits, which is unambiguous while the window is < 2**23.
    """
    diff = (psn - reference) & PSN_MASK
    if diff >= PSN_HALF:
        diff -= PSN_MASK + 1
    return reference + diff
