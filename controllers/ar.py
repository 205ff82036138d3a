"""Adaptive-routing app: the switches' equal-cost groups, chosen among per packet.

The OpenFlow state is ECMP's (``dp_hash`` select groups: the hashed port); the
per-packet choice by occupancy is the datapath's (the emulator's tc program,
:mod:`fabric.emulation.adaptive_routing`), as an InfiniBand or Spectrum-X switch
chooses in hardware while its subnet manager or controller installs the routes.
"""

from __future__ import annotations

from controllers.base import PolicyApp


class ArApp(PolicyApp):
    """ECMP's routes; the switch datapath adapts them per packet."""

    policy = "ar"
