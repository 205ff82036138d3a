"""ECMP app: static per-flow hashing over all equal-cost next hops."""

from __future__ import annotations

from controllers.base import PolicyApp


class EcmpApp(PolicyApp):
    """Per-destination routes over OpenFlow 1.5 ``dp_hash`` select groups."""

    policy = "ecmp"
