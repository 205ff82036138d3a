"""Work sized in packets, so that a schedule is the same at every link rate (pure).

Experiments size every message in full-size packets of its transport, and every
phase of a schedule that is a time (a compute step, a flap period) in packet
times of the host link. A schedule is then the same sequence of packets whatever
rate the machine picks for the emulation, or the simulator runs at, and only its
length in seconds follows from the rate: at 8 Mbit/s or at 400 Gbit/s a flow of
1,000 packets meets the same buffers (in packets) and the same timers (in packet
times), so the ratios it gives do not move with the rate.
"""

from __future__ import annotations

from fabric.traffic.model import TransportSpec


def bytes_of(packets: float, transport: TransportSpec) -> int:
    """Payload bytes of ``packets`` full-size packets of ``transport``.

    Parameters
    ----------
    packets : float
        How many packets (a fraction is a last, shorter packet).
    transport : TransportSpec
        Its payload per packet: the roce path MTU, or TCP's segment.

    Raises
    ------
    ValueError
        For a negative count.
    """
    if packets < 0:
        raise ValueError(f"a message cannot have {packets} packets")
    return int(round(packets * transport.payload_bytes))


def packets_of(nbytes: int, transport: TransportSpec) -> float:
    """How many full-size packets of ``transport`` carry ``nbytes`` of payload."""
    return nbytes / transport.payload_bytes


def packet_time_s(transport: TransportSpec, host_mbps: float) -> float:
    """Seconds a full-size packet of ``transport`` takes on a host link of
    ``host_mbps`` (its IP bytes, as the rate plans count them).

    Raises
    ------
    ValueError
        For a rate that is not positive.
    """
    if not host_mbps > 0:
        raise ValueError(f"a host link needs a positive rate, got {host_mbps} Mbit/s")
    return transport.packet_bytes * 8 / (host_mbps * 1e6)


def seconds_of(packet_times: float, transport: TransportSpec, host_mbps: float) -> float:
    """Seconds of ``packet_times`` packet times of ``transport`` at ``host_mbps``."""
    return packet_times * packet_time_s(transport, host_mbps)
