"""Ryu's module paths on os-ken, put in place only when a user's app is loaded.

Ryu does not run on Python 3.11; os-ken is its maintained fork, with the
same modules under ``os_ken.*``. After :func:`install`, importing ``ryu.X``
imports ``os_ken.X`` and registers the very same module object under both
names, so classes are shared: an app written against
``ryu.controller.ofp_event`` gets os-ken's events, and os-ken's app manager
runs it. ``RyuApp`` (the one name os-ken changed that apps use) is os-ken's
``OSKenApp``.

``ryu.app.NAME`` is ``os_ken.app.NAME`` when os-ken has it; otherwise it is
``NAME.py`` in the directory of the user's app, imported as
``ryu.app.NAME``: Ryu's tutorial apps import one another that way
(``from ryu.app import simple_switch_13``) and os-ken ships none of them.
Nothing else is invented: what os-ken lacks raises ``ModuleNotFoundError``.

Nothing named ``ryu`` is installed as a package. :func:`install` is called
by :mod:`controllers.userapp` before a user's app is imported, never for
fabric's own policies, and it stays out of the way of a real Ryu: if one is
importable, ``ryu`` remains that Ryu.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import sys
from pathlib import Path
from types import ModuleType

logger = logging.getLogger(__name__)

TOP = "ryu"
APPS = "ryu.app"
# fabric's own empty packages: ``from ryu.app import X`` imports ``<package>.__name__ + .X``,
# which must stay ``ryu.app.X`` (os-ken's ``os_ken.app`` would look for ``os_ken.app.X``)
_OWN_PACKAGES = (TOP, APPS)


class _RyuOnOsKen(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``ryu.*`` as the matching ``os_ken.*`` module, or beside the user's app."""

    def __init__(self) -> None:
        self.app_dirs: list[Path] = []  # where ``ryu.app.NAME`` is looked for, newest first
        self._own_specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(self, fullname: str, path: object = None, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        """A spec for ``ryu`` and ``ryu.*``; None for every other name and for what
        neither os-ken nor the app's directory has."""
        if fullname in _OWN_PACKAGES:
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        if not fullname.startswith(TOP + "."):
            return None
        target_spec = _os_ken_spec("os_ken." + fullname[len(TOP) + 1:])
        if target_spec is not None:
            return importlib.util.spec_from_loader(
                fullname, self, is_package=target_spec.submodule_search_locations is not None)
        package, _, name = fullname.rpartition(".")
        if package == APPS:
            return self._beside_app(fullname, name)
        return None

    def _beside_app(self, fullname: str, name: str) -> importlib.machinery.ModuleSpec | None:
        for directory in self.app_dirs:
            candidate = directory / f"{name}.py"
            if candidate.is_file():
                return importlib.util.spec_from_file_location(fullname, candidate)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        """os-ken's module itself (None for ``ryu`` and ``ryu.app``: a new empty one)."""
        if spec.name in _OWN_PACKAGES:
            return None
        module = importlib.import_module("os_ken." + spec.name[len(TOP) + 1:])
        self._own_specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Give an os-ken module back its own spec, which the import machinery replaced
        with the alias's (the module itself has run already)."""
        assert module.__spec__ is not None  # the import machinery set it before this call
        name = module.__spec__.name
        if name in _OWN_PACKAGES:
            module.__doc__ = "Ryu's module paths on os-ken (fabric's controllers.ryu_compat)."
            return
        module.__spec__ = self._own_specs.pop(name, module.__spec__)


def _os_ken_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    try:
        return importlib.util.find_spec(name)
    except ModuleNotFoundError:  # a parent package os-ken does not have
        return None


def _installed() -> _RyuOnOsKen | None:
    return next((f for f in sys.meta_path if isinstance(f, _RyuOnOsKen)), None)


def is_installed() -> bool:
    """True when ``ryu.*`` resolves to os-ken in this process.

    Returns
    -------
    bool
        Whether :func:`install` has put the module paths in place.
    """
    return _installed() is not None


def real_ryu() -> str | None:
    """Where a ``ryu`` that is not this layer is importable from.

    A folder named ``ryu`` without ``__init__.py`` (a namespace package,
    such as the ``__pycache__`` an old checkout of fabric leaves behind) is
    not a Ryu and does not count.

    Returns
    -------
    str or None
        The file (or the module's repr) of that ``ryu``; None when there is
        none, or when ``ryu`` is this layer.
    """
    module = sys.modules.get(TOP)
    if module is not None:
        spec = getattr(module, "__spec__", None)
        if spec is None:  # put in sys.modules by hand: not this layer's doing
            return repr(module)
    else:
        spec = importlib.util.find_spec(TOP)  # a top-level name: nothing is imported
    if spec is None or isinstance(spec.loader, _RyuOnOsKen):
        return None
    return spec.origin  # None for a namespace package


def install(app_dir: Path | None = None) -> bool:
    """Make ``ryu.*`` import os-ken's modules, unless a real Ryu is importable.

    Idempotent: a second call adds ``app_dir`` to where ``ryu.app.NAME`` is
    looked for (the newest first) and changes nothing else.

    Parameters
    ----------
    app_dir : pathlib.Path, optional
        The directory of the user's app being loaded: ``ryu.app.NAME`` that
        os-ken lacks is ``NAME.py`` there.

    Returns
    -------
    bool
        True when ``ryu.*`` is os-ken's; False when a ``ryu`` that is not this
        layer is importable (see :func:`real_ryu`) and was left alone.
    """
    finder = _installed()
    if finder is None:
        other = real_ryu()
        if other is not None:
            logger.info("a Ryu is importable from %s: left alone, so ryu.* is that Ryu "
                        "and not os-ken", other)
            return False
        # ``from ryu.base import app_manager`` can find os-ken's module as an attribute of
        # its package, past the finder: the name goes in now
        app_manager = importlib.import_module("os_ken.base.app_manager")
        app_manager.RyuApp = app_manager.OSKenApp  # type: ignore[attr-defined]
        finder = _RyuOnOsKen()
        sys.meta_path.insert(0, finder)
    if app_dir is not None:
        directory = Path(app_dir).resolve()
        if directory in finder.app_dirs:
            finder.app_dirs.remove(directory)
        finder.app_dirs.insert(0, directory)
    return True
