"""Spray app: the ECMP switch state, for senders that vary entropy per packet.

Open vSwitch has no per-packet select method; spraying comes from senders
that change the UDP source port on every packet, hashed by the switches'
5-tuple ``dp_hash`` groups (see :mod:`fabric.routing.policies`).
"""

from __future__ import annotations

from controllers.base import PolicyApp


class SprayApp(PolicyApp):
    """Equal-weight select groups over every equal-cost next hop."""

    policy = "spray"
