"""The emulation's user-facing error (bring-up, link changes, the controller)."""

from __future__ import annotations

from fabric.errors import UserError


class EmulationError(UserError, RuntimeError):
    """Bring-up or a change to a running fabric failed; a failed bring-up has
    removed everything it made."""
