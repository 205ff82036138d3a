"""The dependency rule of DESIGN.md section 1, checked on the import statements."""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("topologies", "fabric", "controllers")
MININET_ALLOWED = {"fabric/emulation.py", "fabric/cli.py"}
CONTROLLERS_ALLOWED = {"fabric/emulation.py", "fabric/cli.py",
                       "fabric/testing/connection.py"}  # make_app: controllers.runtime, lazily
# The fake-fabric test harness is a testing tool built on os-ken (and scapy),
# like Faucet's clib/fakeoftable.py; the rest of fabric stays free of os-ken.
OS_KEN_ALLOWED_PACKAGE = "fabric/testing/"
PURE_MODULES = ("fabric/routing.py", "fabric/intents.py")
IMPURE = ("time", "random", "subprocess", "os")


@dataclass(frozen=True)
class Import:
    module: str     # absolute dotted name of what is imported
    lineno: int
    lazy: bool      # inside a function body


def _resolve(path: Path, node: ast.ImportFrom) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        package = list(path.relative_to(ROOT).with_suffix("").parts)
        if path.name != "__init__.py":
            package = package[:-1]
        package = package[:len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    # "from pkg import mod" may import a submodule: record both.
    return [base] + [f"{base}.{alias.name}" for alias in node.names if alias.name != "*"]


def imports_of(path: Path, text: str | None = None) -> list[Import]:
    """Every import in ``path`` (or in ``text`` read as if it were ``path``)."""
    tree = ast.parse(path.read_text() if text is None else text, filename=str(path))
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                      ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend(Import(a.name, child.lineno, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                found.extend(Import(m, child.lineno, in_function)
                             for m in _resolve(path, child))
            visit(child, inner)

    visit(tree, False)
    # importlib.import_module("...") with a literal also counts
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module"
                and node.args and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)):
            found.append(Import(node.args[0].value, node.lineno, True))
    return found


def _top(module: str) -> str:
    return module.split(".")[0]


def _files(package: str) -> list[Path]:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no Python files under {package}/"
    return files


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


ALL_FILES = [p for pkg in PACKAGES for p in _files(pkg)]


def test_import_parser_sees_lazy_and_relative_imports():
    text = ("import os\nfrom . import graph\nfrom .intents import Flow\n"
            "try:\n    import numpy\nexcept ImportError:\n    pass\n"
            "def f():\n    import mininet.net\n    from os_ken import cfg\n"
            "class C:\n    def m(self):\n        import subprocess\n")
    found = imports_of(ROOT / "fabric" / "probe.py", text)
    by_module = {i.module: i.lazy for i in found}
    assert by_module["os"] is False
    assert by_module["numpy"] is False  # module level even inside try
    assert by_module["fabric"] is False and by_module["fabric.graph"] is False
    assert by_module["fabric.intents"] is False
    assert by_module["mininet.net"] is True
    assert by_module["os_ken"] is True
    assert by_module["subprocess"] is True


@pytest.mark.parametrize("path", _files("topologies"), ids=_rel)
def test_topologies_import_no_emulation_or_controllers(path):
    bad = [i for i in imports_of(path)
           if _top(i.module) in ("controllers", "experiments", "mininet", "os_ken", "ryu")]
    assert not bad, f"{_rel(path)} imports {bad}"


@pytest.mark.parametrize("path", _files("fabric"), ids=_rel)
def test_fabric_mininet_only_lazily_in_the_adapter(path):
    rel = _rel(path)
    mininet = [i for i in imports_of(path) if _top(i.module) == "mininet"]
    if rel not in MININET_ALLOWED:
        assert not mininet, f"{rel} imports Mininet: {mininet}"
    eager = [i for i in mininet if not i.lazy]
    assert not eager, f"{rel} imports Mininet at module level: {eager}"


@pytest.mark.parametrize("path", [p for p in _files("fabric")
                                  if not _rel(p).startswith(OS_KEN_ALLOWED_PACKAGE)], ids=_rel)
def test_fabric_never_imports_os_ken(path):
    bad = [i for i in imports_of(path) if _top(i.module) in ("os_ken", "ryu")]
    assert not bad, f"{_rel(path)} imports os-ken: {bad}"


@pytest.mark.parametrize("path", _files("fabric"), ids=_rel)
def test_fabric_imports_controllers_only_from_adapter_and_cli(path):
    rel = _rel(path)
    uses = [i for i in imports_of(path) if _top(i.module) in ("controllers", "experiments")]
    if rel in CONTROLLERS_ALLOWED:
        assert all(i.lazy for i in uses), f"{rel} imports controllers eagerly: {uses}"
    else:
        assert not uses, f"{rel} imports {uses}"


@pytest.mark.parametrize("rel", PURE_MODULES)
def test_routing_logic_is_pure(rel):
    bad = [i for i in imports_of(ROOT / rel) if _top(i.module) in IMPURE]
    assert not bad, f"{rel} imports {bad}"


@pytest.mark.parametrize("rel", PURE_MODULES)
def test_routing_logic_never_reads_clock_or_global_rng(rel):
    tree = ast.parse((ROOT / rel).read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert not names & {"time", "random", "subprocess", "os", "datetime"}, rel


@pytest.mark.parametrize("path", _files("controllers"), ids=_rel)
def test_controllers_never_import_mininet(path):
    bad = [i for i in imports_of(path) if _top(i.module) == "mininet"]
    assert not bad, f"{_rel(path)} imports Mininet: {bad}"


def test_rules_see_every_package():
    assert {p.relative_to(ROOT).parts[0] for p in ALL_FILES} == set(PACKAGES)
    assert (ROOT / "fabric" / "routing.py") in ALL_FILES
    assert (ROOT / "fabric" / "emulation.py") in ALL_FILES


def test_test_harness_never_imports_mininet():
    files = sorted((ROOT / OS_KEN_ALLOWED_PACKAGE).rglob("*.py"))
    assert files
    for path in files:
        bad = [i for i in imports_of(path) if _top(i.module) == "mininet"]
        assert not bad, f"{_rel(path)} imports Mininet: {bad}"


def test_fresh_import_of_harness_loads_no_mininet_or_controllers():
    code = ("import sys\n"
            "import fabric.testing\n"
            "bad = sorted(m for m in sys.modules\n"
            "             if m.split('.')[0] in ('mininet', 'controllers'))\n"
            "print(','.join(bad))\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "", f"importing fabric.testing loaded {res.stdout.strip()}"


@pytest.mark.parametrize("modules", [
    "topologies, fabric.routing, fabric.graph",
    "fabric.intents, fabric.capacity, fabric.shaping",
    "fabric.cli",
    "fabric.emulation",
])
def test_fresh_import_loads_no_mininet_or_os_ken(modules):
    code = ("import sys\n"
            f"import {modules}\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('mininet', 'os_ken'))\n"
            "print(','.join(bad))\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "", f"importing {modules} loaded {res.stdout.strip()}"
