"""A stand-in for ``os_ken.controller.controller.Datapath`` without a socket."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from os_ken.controller.handler import HANDSHAKE_DISPATCHER

from fabric.testing.of13 import OF15, VERSIONS

if TYPE_CHECKING:
    from fabric.testing.connection import AppConnection


class FakeDatapath:
    """What an os-ken app sees of one switch connection.

    ``send_msg`` serializes the message exactly as os-ken's datapath does
    (so a malformed message fails here) and hands the message object to the
    fake switch. Every message is kept in :attr:`sent`.

    Parameters
    ----------
    fabric : AppConnection
        The harness that applies the messages (a ``FakeFabric``).
    switch : str
        Switch name in the fabric graph.
    dpid : int
        Datapath id (:attr:`id`).
    address : tuple
        The peer address an app may log.
    version : int
        The negotiated OpenFlow version (``OFP_VERSION`` of 1.3 or 1.5): it
        chooses :attr:`ofproto` and :attr:`ofproto_parser`.
    """

    def __init__(self, fabric: "AppConnection", switch: str, dpid: int,
                 address: tuple[str, int] = ("127.0.0.1", 0), version: int = OF15):
        if version not in VERSIONS:
            raise ValueError(f"OpenFlow version {version:#x} is not modelled "
                             f"(the fake switch speaks {sorted(VERSIONS)})")
        self.ofproto, self.ofproto_parser = VERSIONS[version]
        self.fabric = fabric
        self.switch = switch
        self.id = dpid
        self.address = address
        self.xid = 0
        self.state = HANDSHAKE_DISPATCHER
        self.ports: dict[int, Any] = {}
        self.is_active = True
        self.sent: list[Any] = []
        self.sent_types: Counter = Counter()

    def set_xid(self, msg: Any) -> int:
        """Give ``msg`` the next transaction id (as os-ken does)."""
        self.xid = (self.xid + 1) & self.ofproto.MAX_XID
        msg.set_xid(self.xid)
        return self.xid

    def send_msg(self, msg: Any, close_socket: bool = False) -> bool:
        """Serialize ``msg``, record it and apply it to the fake switch.

        Returns False (and applies nothing) once the connection is closed,
        as a real datapath drops what is sent to a dead connection.
        """
        assert isinstance(msg, self.ofproto_parser.MsgBase), f"not an OpenFlow message: {msg!r}"
        if msg.xid is None:
            self.set_xid(msg)
        msg.serialize()
        if not self.is_active:
            return False
        self.sent.append(msg)
        self.sent_types[type(msg).__name__] += 1
        self.fabric._receive(self, msg)
        return True

    def close(self) -> None:
        """Close the connection (the harness delivers the disconnect)."""
        self.fabric.disconnect(self.switch)

    @property
    def flow_mods(self) -> int:
        """How many flow-mods this connection sent."""
        return self.sent_types["OFPFlowMod"]

    @property
    def group_mods(self) -> int:
        """How many group-mods this connection sent."""
        return self.sent_types["OFPGroupMod"]

    def __repr__(self) -> str:
        return (f"FakeDatapath({self.switch!r}, id={self.id:#018x}, "
                f"version={self.ofproto.OFP_VERSION:#x})")
