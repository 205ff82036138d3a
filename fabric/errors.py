"""The errors a user is meant to read: each message says all that went wrong.

Every layer raises a subclass of :class:`UserError` for an expected failure (a
bad topology spec, a rate this machine cannot shape, not root, a busy port).
The command line prints its message in one line and exits with status 2;
benchmarks and scripts catch it the same way, without importing the CLI.
"""

from __future__ import annotations


class UserError(Exception):
    """An expected failure whose message is all a user needs (no traceback)."""
