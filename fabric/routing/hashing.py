"""The select-group hash of the fake switch harness and the ns-3 simulator: deterministic
and documented.

A select group picks a bucket from the packet's 5-tuple and the group's hash
basis, in proportion to the weights of its live buckets:

1. Fields (missing ones count as 0): IPv4 source and destination as 32-bit
   integers (an IPv6 address is folded to 32 bits by XOR of its four words),
   IP protocol, L4 source and destination port (TCP, UDP or SCTP).
2. With a selection method property (Open vSwitch's NTR experimenter
   property, any method name, e.g. ``dp_hash``) the 5-tuple is hashed as
   is. Without one the fake reproduces Open vSwitch's default select hash:
   symmetric (addresses and ports sorted) and blind to UDP ports, which are
   taken as 0 -- so UDP spraying by source port does not spread.
3. ``key = struct.pack("!IIBHHI", src, dst, proto, sport, dport, basis)``
   where ``basis`` is the low 32 bits of the property's 64-bit parameter
   (its last two data words; 0 without a property).
4. ``h = fmix32(zlib.crc32(key))``: the MurmurHash3 finaliser breaks
   CRC-32's linearity, so switches with different bases choose
   independently (no hash polarisation across tiers).
5. Live buckets (watch port up, weight > 0) in bucket order:
   ``r = h % sum(weights)`` and the first bucket whose cumulative weight
   exceeds ``r`` wins.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any, Iterable, Mapping

NTR_VENDOR_ID = 0x0000154D
NTR_SELECTION_METHOD = 1
IPPROTO_TCP, IPPROTO_UDP, IPPROTO_SCTP = 6, 17, 132
_KEY = struct.Struct("!IIBHHI")
_MASK32 = 0xFFFFFFFF
_L4 = {IPPROTO_TCP: ("tcp_src", "tcp_dst"), IPPROTO_UDP: ("udp_src", "udp_dst"),
       IPPROTO_SCTP: ("sctp_src", "sctp_dst")}


def fmix32(h: int) -> int:
    """MurmurHash3's 32-bit finaliser (an invertible avalanche mix)."""
    h &= _MASK32
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK32
    return h ^ (h >> 16)


def _fold(addr: int) -> int:
    folded = 0
    while addr:
        folded ^= addr & _MASK32
        addr >>= 32
    return folded


def five_tuple(fields: Mapping[str, Any]) -> tuple[int, int, int, int, int]:
    """``(src, dst, proto, sport, dport)`` from normalised packet fields (ints)."""
    src = fields.get("ipv4_src", _fold(fields.get("ipv6_src", 0)))
    dst = fields.get("ipv4_dst", _fold(fields.get("ipv6_dst", 0)))
    proto = fields.get("ip_proto", 0)
    names = _L4.get(proto)
    sport, dport = (fields.get(names[0], 0), fields.get(names[1], 0)) if names else (0, 0)
    return src, dst, proto, sport, dport


def select_hash(fields: Mapping[str, Any], basis: int = 0, full_l4: bool = True) -> int:
    """The 32-bit select hash of a packet (see the module docstring).

    Parameters
    ----------
    fields : mapping
        Normalised packet fields (addresses as integers).
    basis : int
        The group's hash basis.
    full_l4 : bool
        True with a selection method property (the 5-tuple as is); False for
        Open vSwitch's default hash (symmetric, UDP ports ignored).
    """
    src, dst, proto, sport, dport = five_tuple(fields)
    if not full_l4:
        src, dst = sorted((src, dst))
        sport, dport = (0, 0) if proto == IPPROTO_UDP else sorted((sport, dport))
    key = _KEY.pack(src, dst, proto & 0xFF, sport, dport, basis & _MASK32)
    return fmix32(zlib.crc32(key))


def pick_weighted(h: int, weights: Iterable[int]) -> int | None:
    """Index chosen by hash ``h`` over ``weights`` (0 = not eligible), or None."""
    weights = list(weights)
    total = sum(w for w in weights if w > 0)
    if total == 0:
        return None
    r = h % total
    for index, weight in enumerate(weights):
        if weight <= 0:
            continue
        if r < weight:
            return index
        r -= weight
    raise AssertionError("unreachable: r < total")


def selection_method(properties: Iterable[Any]) -> tuple[str | None, int]:
    """``(method name, hash basis)`` of a group's properties.

    Reads Open vSwitch's selection method property (experimenter
    0x0000154d, exp_type 1; data words: 4 pad bytes, a 16-byte NUL-padded
    name, a 64-bit parameter whose low 32 bits are the basis). Returns
    ``(None, 0)`` when the group has none.
    """
    for prop in properties:
        if (getattr(prop, "experimenter", None) == NTR_VENDOR_ID
                and getattr(prop, "exp_type", None) == NTR_SELECTION_METHOD):
            words = list(prop.data or [])
            raw = struct.pack(f"!{len(words)}I", *words)
            name = raw[4:20].split(b"\0", 1)[0].decode(errors="replace") or None
            basis = words[-1] if len(words) >= 2 else 0
            return name, basis
    return None, 0
