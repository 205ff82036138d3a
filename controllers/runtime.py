"""The fabric graph, status file and controller config of the app in this process.

An app reads them with :func:`current` (set by ``fabric controller``, the
emulation's launcher, or the test harness's ``make_app``); they live in
:mod:`fabric.routing.runtime`, where the harness can set them too.
"""

from fabric.routing.runtime import RuntimeConfig, configure, current

__all__ = ["RuntimeConfig", "configure", "current"]
