"""Ryu's module paths on os-ken, so classic Ryu apps run unchanged.

Ryu itself does not run on Python 3.11; os-ken is its maintained fork, with
the same modules under another top-level name. Importing ``ryu.X`` imports
``os_ken.X`` and registers the very same module object under both names, so
classes are shared: an app written against ``ryu.controller.ofp_event`` gets
os-ken's events, and os-ken's app manager runs it. ``RyuApp`` (the one name
os-ken changed that apps use) is os-ken's ``OSKenApp``.

This package is fabric's own layer; it is only importable where a real Ryu
is not installed (it would shadow it otherwise, and Ryu does not run here).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

_PREFIX = "ryu."


class _OsKenAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``ryu.*`` as the matching ``os_ken.*`` module."""

    def find_spec(self, fullname: str, path: object = None, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(_PREFIX):
            return None
        try:
            target_spec = importlib.util.find_spec("os_ken." + fullname[len(_PREFIX):])
        except ModuleNotFoundError:
            return None
        if target_spec is None:
            return None
        return importlib.util.spec_from_loader(
            fullname, self, is_package=target_spec.submodule_search_locations is not None)

    def __init__(self) -> None:
        self._own_specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module("os_ken." + spec.name[len(_PREFIX):])
        self._own_specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The os-ken module is already executed; give it back its own spec, which the
        import machinery replaced with the alias's."""
        module.__spec__ = self._own_specs.pop(module.__spec__.name, module.__spec__)


if not any(isinstance(finder, _OsKenAlias) for finder in sys.meta_path):
    sys.meta_path.insert(0, _OsKenAlias())
# ``from ryu.base import app_manager`` may find os-ken's module as an attribute of its
# package, past the finder: the name goes in now.
_app_manager = importlib.import_module("os_ken.base.app_manager")
_app_manager.RyuApp = _app_manager.OSKenApp  # type: ignore[attr-defined]
