"""Integration tests build real Mininet networks: root and Open vSwitch needed."""

from __future__ import annotations

import os
import shutil

import pytest


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    missing = [t for t in ("ovs-vsctl", "ovs-vswitchd", "mnexec") if shutil.which(t) is None]
    return f"missing {', '.join(missing)}" if missing else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _why_not()
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.mininet)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
