"""The code runs on the oldest Python setup.cfg allows (3.10), though tested on a newer one.

Every project source file must parse as Python 3.10 (no ``except*``), unpack in no index
(``a[*b]``, which 3.11's parser lets through) and use nothing the standard library gained
later that can be seen without running it: a module (``tomllib``), a name imported or read
from a module (``typing.Self``, ``datetime.UTC``, ``enum.StrEnum``,
``asyncio.TaskGroup``...), a builtin (``ExceptionGroup``) or an exception's ``add_note``.
Behaviour that changed between versions (what ``datetime.fromisoformat`` accepts, say) is
beyond this check.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("fabric", "topologies", "controllers", "experiments", "examples", "benchmarks",
            "tests", "scripts")
OLDEST = (3, 10)

# standard-library modules newer than OLDEST
NEW_MODULES = {"tomllib", "wsgiref.types"}
# names newer than OLDEST in modules it has
NEW_NAMES = {
    "typing": {"Self", "LiteralString", "Never", "assert_never", "assert_type", "reveal_type",
               "Required", "NotRequired", "TypeVarTuple", "Unpack", "dataclass_transform",
               "get_overloads", "clear_overloads", "override", "TypeAliasType"},
    "datetime": {"UTC"},
    "enum": {"StrEnum", "ReprEnum", "EnumCheck", "FlagBoundary", "verify", "member",
             "nonmember", "global_enum", "property"},
    "asyncio": {"TaskGroup", "timeout", "timeout_at", "Timeout", "Runner"},
    "contextlib": {"chdir"},
    "hashlib": {"file_digest"},
    "operator": {"call"},
    "math": {"exp2", "cbrt"},
    "logging": {"getLevelNamesMapping"},
    "inspect": {"getmembers_static"},
    "sys": {"exception"},
    "re": {"NOFLAG"},
    "itertools": {"batched"},
}
NEW_BUILTINS = {"ExceptionGroup", "BaseExceptionGroup"}
NEW_METHODS = {"add_note"}  # BaseException.add_note


def source_files() -> list[Path]:
    """Every ``.py`` file of the project (not build output or caches)."""
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")
                  if "__pycache__" not in p.parts)


def _module_aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> module, for every ``import module [as name]`` in ``tree``."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    aliases[top] = top
    return aliases


def _imports(node: ast.AST) -> list[str]:
    """What an import statement uses that is newer than OLDEST."""
    if isinstance(node, ast.Import):
        return [f"import {a.name}" for a in node.names if a.name in NEW_MODULES]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        if node.module in NEW_MODULES:
            return [f"from {node.module} import"]
        return [f"from {node.module} import {a.name}" for a in node.names
                if a.name in NEW_NAMES.get(node.module, ())
                or f"{node.module}.{a.name}" in NEW_MODULES]
    return []


def _starred(index: ast.AST) -> bool:
    """An index that unpacks (``a[*b]``, ``a[x, *b]``: PEP 646, Python 3.11)."""
    return isinstance(index, ast.Starred) or (
        isinstance(index, ast.Tuple) and any(isinstance(e, ast.Starred) for e in index.elts))


def newer_than_oldest(text: str, filename: str = "<text>") -> list[str]:
    """``line N: what`` for each use in ``text`` of Python newer than :data:`OLDEST`."""
    try:
        tree = ast.parse(text, filename=filename, feature_version=OLDEST)
    except SyntaxError as exc:
        return [f"line {exc.lineno}: does not parse as Python {OLDEST[0]}.{OLDEST[1]}: {exc.msg}"]
    aliases = _module_aliases(tree)
    try_star = getattr(ast, "TryStar", None)
    found = []
    for node in ast.walk(tree):
        uses = _imports(node)
        if try_star is not None and isinstance(node, try_star):
            uses.append("except*")
        elif isinstance(node, ast.Subscript) and _starred(node.slice):
            uses.append("a[*b]")
        elif isinstance(node, ast.Name) and node.id in NEW_BUILTINS:
            uses.append(node.id)
        elif isinstance(node, ast.Attribute):
            module = aliases.get(node.value.id) if isinstance(node.value, ast.Name) else None
            if module is not None and node.attr in NEW_NAMES.get(module, ()):
                uses.append(f"{module}.{node.attr}")
            elif node.attr in NEW_METHODS:
                uses.append(f".{node.attr}()")
        found += [f"line {node.lineno}: {use}" for use in uses]
    return found


@pytest.mark.parametrize("text, use", [
    ("import tomllib\n", "import tomllib"),
    ("from wsgiref import types\n", "from wsgiref import types"),
    ("from typing import Self\n", "from typing import Self"),
    ("import typing as t\nx: t.Self\n", "typing.Self"),
    ("import datetime\nnow = datetime.datetime.now(datetime.UTC)\n", "datetime.UTC"),
    ("from enum import StrEnum\n", "from enum import StrEnum"),
    ("import asyncio\nasync def f():\n    async with asyncio.TaskGroup():\n        pass\n",
     "asyncio.TaskGroup"),
    ("try:\n    pass\nexcept* OSError:\n    pass\n", "Python 3.10"),
    ("raise ExceptionGroup('x', [])\n", "ExceptionGroup"),
    ("try:\n    pass\nexcept OSError as exc:\n    exc.add_note('x')\n", ".add_note()"),
    ("def f(a, b):\n    return a[*b]\n", "a[*b]"),
])
def test_the_check_finds_what_is_newer(text, use):
    (line,) = newer_than_oldest(text)
    assert use in line, line


def test_the_check_passes_what_3_10_has():
    text = ("import typing\nfrom typing import TypeAlias\nimport datetime\n"
            "x: typing.Optional[int] = None\ntz = datetime.timezone.utc\n"
            "match x:\n    case None:\n        pass\n")
    assert newer_than_oldest(text) == []


def test_every_package_is_checked():
    files = {p.relative_to(ROOT).parts[0] for p in source_files()}
    assert files >= set(PACKAGES) - {"scripts"}


@pytest.mark.parametrize("path", source_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_source_runs_on_the_oldest_python(path):
    assert newer_than_oldest(path.read_text(encoding="utf-8"), str(path)) == []
