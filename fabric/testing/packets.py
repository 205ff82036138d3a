"""Scapy packets in, OpenFlow match fields out; test-packet builders.

:func:`packet_fields` reads a frame the way a switch's parser does and names
what it finds with os-ken's OXM field names (``eth_type``, ``ipv4_dst``,
``ip_dscp``, ``udp_src``, ...), addresses as strings. The fake switch
normalises them (:func:`fabric.testing.tables.normalise`) before matching.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from scapy.contrib.roce import BTH, opcode
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.packet import Packet, Raw

ROCEV2_UDP_PORT = 4791
L4_PROTOS = ("tcp", "udp", "roce")


def packet_fields(packet: Packet | bytes) -> dict[str, Any]:
    """Return the OXM fields of an Ethernet frame (scapy packet or bytes).

    Parameters
    ----------
    packet : scapy.packet.Packet or bytes
        A frame starting with an Ethernet header.

    Returns
    -------
    dict
        OXM name -> value: MAC and IP addresses as strings, the rest as ints
        (``ip_dscp`` is the upper six bits of the TOS byte).
    """
    frame = Ether(bytes(packet)) if isinstance(packet, (bytes, bytearray)) else packet
    if not isinstance(frame, Ether):
        raise ValueError(f"expected an Ethernet frame, got {frame.summary()}")
    fields: dict[str, Any] = {"eth_src": frame.src, "eth_dst": frame.dst, "eth_type": frame.type}
    if Dot1Q in frame:
        fields["vlan_vid"] = 0x1000 | frame[Dot1Q].vlan  # OFPVID_PRESENT
        fields["eth_type"] = frame[Dot1Q].type
    if IP in frame:
        ip = frame[IP]
        fields.update(ipv4_src=ip.src, ipv4_dst=ip.dst, ip_proto=ip.proto,
                      ip_dscp=ip.tos >> 2, ip_ecn=ip.tos & 3)
    elif IPv6 in frame:
        ip6 = frame[IPv6]
        fields.update(ipv6_src=ip6.src, ipv6_dst=ip6.dst, ip_proto=ip6.nh,
                      ip_dscp=ip6.tc >> 2, ip_ecn=ip6.tc & 3)
    elif ARP in frame:
        arp = frame[ARP]
        fields.update(arp_op=arp.op, arp_spa=arp.psrc, arp_tpa=arp.pdst,
                      arp_sha=arp.hwsrc, arp_tha=arp.hwdst)
    if TCP in frame:
        fields.update(tcp_src=frame[TCP].sport, tcp_dst=frame[TCP].dport)
    elif UDP in frame:
        fields.update(udp_src=frame[UDP].sport, udp_dst=frame[UDP].dport)
    elif ICMP in frame:
        fields.update(icmpv4_type=frame[ICMP].type, icmpv4_code=frame[ICMP].code)
    return fields


def ip_packet(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, l4: str = "tcp",
              sport: int = 40000, dport: int = 5001, dscp: int = 0,
              payload: bytes = b"") -> Packet:
    """Build an Ethernet/IPv4 test packet.

    Parameters
    ----------
    src_mac, dst_mac, src_ip, dst_ip : str
        Addresses.
    l4 : str
        ``"tcp"``, ``"udp"`` or ``"roce"`` (UDP to port 4791 with an
        InfiniBand BTH, i.e. RoCEv2; ``dport`` is ignored).
    sport, dport : int
        L4 ports (for RoCEv2 the source port is the entropy NICs vary).
    dscp : int
        Service level (the TOS byte is ``dscp << 2``).
    payload : bytes
        Appended after the L4 header.
    """
    if l4 not in L4_PROTOS:
        raise ValueError(f"l4 must be one of {L4_PROTOS}, got {l4!r}")
    base = Ether(src=src_mac, dst=dst_mac) / IP(src=src_ip, dst=dst_ip, tos=dscp << 2)
    if l4 == "tcp":
        pkt = base / TCP(sport=sport, dport=dport, flags="S")
    elif l4 == "udp":
        pkt = base / UDP(sport=sport, dport=dport)
    else:
        pkt = (base / UDP(sport=sport, dport=ROCEV2_UDP_PORT)
               / BTH(opcode=opcode("RC", "SEND_ONLY")[0], dqpn=1, psn=0))
    return pkt / Raw(payload) if payload else pkt


def arp_request(src_mac: str, src_ip: str, target_ip: str) -> Packet:
    """A broadcast ARP who-has for ``target_ip``."""
    return (Ether(src=src_mac, dst="ff:ff:ff:ff:ff:ff")
            / ARP(op=1, hwsrc=src_mac, psrc=src_ip, hwdst="00:00:00:00:00:00", pdst=target_ip))


def arp_reply_mac(data: bytes, target_ip: str, requester_ip: str) -> str | None:
    """The MAC an ARP reply frame gives for ``target_ip`` to ``requester_ip``, or None."""
    frame = Ether(bytes(data))
    if ARP not in frame:
        return None
    arp = frame[ARP]
    if arp.op != 2 or arp.psrc != target_ip or arp.pdst != requester_ip:
        return None
    return arp.hwsrc


def write_pcap(path: str | Path, frames: Iterable[Any]) -> Path:
    """Write traced frames to a pcap file for Wireshark or scapy.

    ``frames`` holds :class:`fabric.testing.Trace` objects (their frame is
    written once), scapy packets or raw bytes; records are 1 µs apart, in
    order. roce frames (UDP port 4791) decode as RoCEv2.
    """
    from scapy.utils import wrpcap

    packets = []
    for i, frame in enumerate(frames):
        data = getattr(frame, "data", frame)
        packet = Ether(bytes(data))
        packet.time = i * 1e-6
        packets.append(packet)
    path = Path(path)
    wrpcap(str(path), packets)
    return path
