"""Static app: InfiniBand's planned routes, one output port per destination.

The routes are the subnet manager's (D-mod-k, :mod:`fabric.routing.static`), installed
as plain output actions: no select group, no hash. The base app recomputes them around
a link that goes down, as the subnet manager reroutes after a trap.
"""

from __future__ import annotations

from controllers.base import PolicyApp


class StaticApp(PolicyApp):
    """Destination-based routes planned from the graph, no hashing."""

    policy = "static"
