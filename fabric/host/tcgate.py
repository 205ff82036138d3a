"""Open and close a queue's gate: a TBF qdisc whose rate is changed over rtnetlink.

A gate is a TBF qdisc between an HTB class and its FIFO leaf. Open, its rate is far
above the link's (the HTB class above it shapes); closed, it is 8 bit/s, so nothing
but the bytes of its burst can leave. Changing a TBF resets its tokens, so a gate
that opens sends at once (HTB's own rate change would leave it owing the tokens of
the packet it let out while closed). A ``tc`` process per change takes 5-7 ms; one
prebuilt netlink message takes tens of microseconds.

TBF passes its ``limit`` on to its FIFO child at every change (``fifo_set_limit``):
the message carries the leaf's own limit, in packets, so the leaf keeps it.
"""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass

from fabric.errors import UserError

RTM_NEWQDISC = 36
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4
NLMSG_ERROR = 2
TCA_KIND, TCA_OPTIONS = 1, 2
TCA_TBF_PARMS, TCA_TBF_BURST = 1, 6
TC_LINKLAYER_ETHERNET = 1
CLOSED_BYTES_PER_S = 1  # 8 bit/s: the slowest rate TBF takes


class GateError(UserError, RuntimeError):
    """The kernel refused a gate change."""


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


@dataclass(frozen=True)
class Gate:
    """One lane's gate on one interface: TBF ``handle`` under HTB class ``parent``,
    with a FIFO leaf of ``leaf_limit`` packets. Handles are 32-bit tc handles
    (``major << 16 | minor``)."""

    ifindex: int
    parent: int
    handle: int
    open_bytes_per_s: int
    burst_bytes: int
    leaf_limit: int

    def message(self, closed: bool, seq: int = 0) -> bytes:
        """The RTM_NEWQDISC message that closes (or opens) the gate (pure)."""
        rate = CLOSED_BYTES_PER_S if closed else self.open_bytes_per_s
        # struct tc_ratespec: cell_log, linklayer, overhead, cell_align, mpu, rate
        ratespec = struct.pack("=BBHhHI", 0, TC_LINKLAYER_ETHERNET, 0, 0, 0, rate)
        no_peak = struct.pack("=BBHhHI", 0, 0, 0, 0, 0, 0)
        qopt = ratespec + no_peak + struct.pack("=III", self.leaf_limit, 0, 0)
        options = _attr(TCA_TBF_PARMS, qopt) + _attr(TCA_TBF_BURST,
                                                     struct.pack("=I", self.burst_bytes))
        body = (struct.pack("=BxxxiIII", socket.AF_UNSPEC, self.ifindex, self.handle,
                            self.parent, 0)
                + _attr(TCA_KIND, b"tbf\0") + _attr(TCA_OPTIONS, options))
        return struct.pack("=IHHII", 16 + len(body), RTM_NEWQDISC, NLM_F_REQUEST | NLM_F_ACK,
                           seq, 0) + body


def ack_error(reply: bytes) -> int:
    """The error of an NLMSG_ERROR reply (0: an acknowledgement); pure."""
    if len(reply) < 20:
        raise GateError(f"short netlink reply ({len(reply)} bytes)")
    _, kind, _, _, _ = struct.unpack_from("=IHHII", reply)
    if kind != NLMSG_ERROR:
        raise GateError(f"unexpected netlink reply type {kind}")
    return -struct.unpack_from("=i", reply, 16)[0]


class GateSocket:
    """An rtnetlink socket of the network namespace it was opened in."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self.sock.bind((0, 0))

    def send(self, message: bytes) -> None:
        """Send a prebuilt change and wait for the kernel's answer."""
        self.sock.send(message)
        err = ack_error(self.sock.recv(65536))
        if err:
            raise GateError(f"gate change refused: {os.strerror(err)}")

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()
