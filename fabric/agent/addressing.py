"""Which own address a transfer leaves from and which address it goes to."""

from __future__ import annotations

import ipaddress
from typing import Sequence

from fabric.traffic.model import Plan, Transfer, destination_ip


def nic_interfaces(nics: Sequence[str]) -> list[ipaddress.IPv4Interface]:
    """Parse a host's ``"ip/prefixlen"`` strings (a bare ip counts as /32)."""
    return [ipaddress.IPv4Interface(nic) for nic in nics]


def nic_addresses(nics: Sequence[str]) -> list[str]:
    """The bare addresses of a host's NICs, in plan order."""
    return [str(iface.ip) for iface in nic_interfaces(nics)]


def source_address(nics: Sequence[str], destination: str) -> str:
    """The own NIC address whose prefix holds ``destination``, longest first.

    Mirrors the kernel's connected routes: a dual-homed host reaches each
    zone through the NIC on that zone's subnet. When no prefix matches, the
    first NIC (the default route's) is used.

    Raises
    ------
    ValueError
        If the host has no NIC.
    """
    ifaces = nic_interfaces(nics)
    if not ifaces:
        raise ValueError("host has no NIC")
    dst = ipaddress.IPv4Address(destination)
    best = None
    for iface in ifaces:
        if dst in iface.network and (best is None or iface.network.prefixlen
                                     > best.network.prefixlen):
            best = iface
    return str((best or ifaces[0]).ip)


def destination_address(plan: Plan, transfer: Transfer) -> str:
    """``transfer.dst_ip`` if set, else the first NIC of ``transfer.dst``.

    :func:`fabric.traffic.model.destination_ip`, checked to be an IPv4
    address (``ValueError`` otherwise) so a typo fails the transfer, not the agent.
    """
    return str(ipaddress.IPv4Address(destination_ip(plan, transfer)))
