"""ECMP app: static per-flow hashing over all equal-cost next hops."""

from __future__ import annotations

from controllers.base import IntentApp
from fabric.intents import SwitchIntent
from fabric.routing import ecmp_intents


class EcmpApp(IntentApp):
    """Installs :func:`fabric.routing.ecmp_intents` on every switch."""

    policy = "ecmp"

    def compute_intents(self) -> dict[str, SwitchIntent]:
        """Per-destination routes over OpenFlow 1.5 ``dp_hash`` select groups."""
        return ecmp_intents(self.graph)
