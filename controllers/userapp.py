"""Your own os-ken app as the fabric's controller: ``MODULE:CLASS`` or ``path/app.py:CLASS``.

The app runs under the same launcher as the built-in policies (loopback
only, the same port checks and cleanup). Its context is
:func:`controllers.runtime.current`: the fabric graph (``.graph``), the
controller config with the emulation's rate scale (``.config``) and, for
apps built on :class:`controllers.base.PolicyApp`, the status file the
emulation reads to know routes are in place (``.status_path``).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from controllers import ryu_compat

_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_CLASS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class AppSpecError(ValueError):
    """An app spec that names no usable os-ken app."""


@dataclass(frozen=True)
class AppSpec:
    """Where an app lives: a module name or a ``.py`` file, and its class."""

    module: str
    class_name: str

    @property
    def is_file(self) -> bool:
        """True when ``module`` is a path to a Python file."""
        return self.module.endswith(".py")

    def __str__(self) -> str:
        return f"{self.module}:{self.class_name}"


def parse_app_spec(text: str) -> AppSpec:
    """Check the form of ``MODULE:CLASS`` or ``path/to/app.py:CLASS`` (no import)."""
    module, sep, class_name = text.rpartition(":")
    if not sep or not module or not _CLASS.fullmatch(class_name):
        raise AppSpecError(f"{text!r} is not MODULE:CLASS or path/to/app.py:CLASS")
    if module.endswith(".py"):
        if not Path(module).is_file():
            raise AppSpecError(f"no such file: {module}")
        return AppSpec(str(Path(module).resolve()), class_name)
    if not _MODULE.fullmatch(module):
        raise AppSpecError(f"{module!r} is neither a module name nor a .py file")
    return AppSpec(module, class_name)


def _module_dir(module: str) -> Path | None:
    try:
        found = importlib.util.find_spec(module)
    except Exception:  # importing the module itself reports what is wrong
        return None
    if found is None or not found.has_location or not found.origin:
        return None
    return Path(found.origin).parent


def _install_ryu_layer(spec: AppSpec) -> bool:
    """Put Ryu's module paths on os-ken in place for ``spec``'s app, with ``ryu.app.NAME``
    beside it (False: a real Ryu is importable and left alone)."""
    if spec.is_file:
        return ryu_compat.install(Path(spec.module).parent)
    # finding a module's file imports its parent packages, which may use ryu.* already
    return ryu_compat.install(None) and ryu_compat.install(_module_dir(spec.module))


def _ryu_note(ryu_on_os_ken: bool) -> str:
    if ryu_on_os_ken:
        return ""
    return (f" (the Ryu at {ryu_compat.real_ryu()} was left alone: the app imports it, "
            "not Ryu's module paths on os-ken)")


def _import(spec: AppSpec) -> ModuleType:
    # a user's app, and only a user's app, gets ryu.*: before its module runs
    ryu_on_os_ken = _install_ryu_layer(spec)
    if not spec.is_file:
        try:
            return importlib.import_module(spec.module)
        except ImportError as exc:
            raise AppSpecError(f"cannot import {spec.module}: {exc}{_ryu_note(ryu_on_os_ken)}"
                               ) from None
    name = f"fabric_user_app_{Path(spec.module).stem}"
    if name in sys.modules:
        return sys.modules[name]
    loader_spec = importlib.util.spec_from_file_location(name, spec.module)
    if loader_spec is None or loader_spec.loader is None:
        raise AppSpecError(f"cannot load {spec.module} as Python")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module  # os-ken finds an app's handlers through its module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise AppSpecError(f"{spec.module} failed to load: {type(exc).__name__}: {exc}"
                           f"{_ryu_note(ryu_on_os_ken)}") from None
    return module


def load_app_class(spec: AppSpec) -> type:
    """Import the app's module and return its class, an ``OSKenApp`` subclass."""
    from os_ken.base.app_manager import OSKenApp

    cls = getattr(_import(spec), spec.class_name, None)
    if cls is None:
        raise AppSpecError(f"{spec.module} has no {spec.class_name}")
    if not (isinstance(cls, type) and issubclass(cls, OSKenApp)):
        raise AppSpecError(f"{spec} is not an os-ken app (a subclass of OSKenApp)")
    return cls


def app_spec_argument(text: str) -> str:
    """An argparse type: ``text`` names an app whose class imports and is an os-ken app
    (checked before anything is brought up); its spec, with a file's path made absolute."""
    try:
        spec = parse_app_spec(text)
        load_app_class(spec)
    except AppSpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return str(spec)


def write_plain_status(path: Path, spec: str) -> None:
    """The status file of an app that writes none: it cannot report ready switches."""
    path.write_text(json.dumps({"pid": os.getpid(), "app": spec, "reports_ready": False,
                                "ready": [], "errors": [], "events": []}))


def run_app(cls: type) -> None:
    """Run ``cls`` (and the services it needs) under os-ken's app manager until it stops.

    os-ken's manager loads the first app a module defines; this one loads
    exactly ``cls``, which may share its module with other apps.
    """
    from os_ken.base.app_manager import AppManager

    class _OneApp(AppManager):
        def load_app(self, name: str) -> type | None:
            return cls if name == key else super().load_app(name)

    key = f"{cls.__module__}:{cls.__qualname__}"
    AppManager._instance = _OneApp()
    AppManager.run_apps([key])
