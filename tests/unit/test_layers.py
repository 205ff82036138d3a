"""The dependency rule, checked on the import statements.

``fabric/`` is one folder per layer. :data:`LAYERS` says which layers each may
import (its own modules always); every layer's ``__init__`` docstring states
the same in a ``May import:`` line. fabric's top-level modules (:data:`SHARED`:
the user-error base class, the argument types and how child Pythons start)
import nothing of fabric and every layer and package may use them. The command line (``fabric.cli``) sits
above everything. Mininet is imported only by the emulation layer, lazily;
os-ken only by ``controllers/`` and ``fabric/testing/``. Nothing is allowed by
name: there is no exception list.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("topologies", "fabric", "controllers", "experiments", "benchmarks")

# Layers of fabric/ and the other layers each may import.
LAYERS: dict[str, frozenset[str]] = {
    "fabric.model": frozenset(),
    "fabric.routing": frozenset({"fabric.model"}),
    "fabric.traffic": frozenset({"fabric.model"}),
    "fabric.agent": frozenset({"fabric.traffic"}),
    "fabric.host": frozenset(),
    "fabric.emulation": frozenset({"fabric.model", "fabric.routing", "fabric.traffic",
                                   "fabric.host"}),
    # a run's result is read through fabric.traffic.result, whichever backend made it
    "fabric.analysis": frozenset({"fabric.model", "fabric.traffic"}),
    # it builds the fabrics an experiment names: the builders sit beside fabric
    "fabric.experiment": frozenset({"fabric.model", "fabric.routing", "fabric.traffic",
                                    "fabric.host", "fabric.emulation", "fabric.analysis",
                                    "fabric.simulation", "topologies"}),
    "fabric.testing": frozenset({"fabric.model", "fabric.routing"}),
    # the transport's timers and parameters come from the agent's own (pure) modules
    "fabric.simulation": frozenset({"fabric.model", "fabric.routing", "fabric.traffic",
                                    "fabric.agent"}),
}
# fabric's top-level modules: they import nothing of fabric; everyone may import them.
SHARED = frozenset({"fabric.errors", "fabric.argtypes", "fabric.children"})
TOP_LEVEL = frozenset({"fabric/__init__.py", "fabric/errors.py", "fabric/argtypes.py",
                       "fabric/children.py"})
CLI = "fabric.cli"  # above everything: it may import every layer and package
# Packages beside fabric/: the layers of fabric and the other packages each may import.
CLIENTS: dict[str, frozenset[str]] = {
    "topologies": frozenset({"fabric.model"}),
    "controllers": frozenset({"fabric.model", "fabric.routing", "fabric.host", "topologies"}),
    "experiments": frozenset({"fabric.model", "fabric.routing", "fabric.traffic", "fabric.host",
                              "fabric.emulation", "fabric.analysis", "fabric.experiment",
                              "topologies", "controllers"}),
    # performance scripts: the layers and the builders, never an experiment or the CLI
    "benchmarks": frozenset({"fabric.model", "fabric.routing", "fabric.traffic",
                             "fabric.agent", "fabric.host", "fabric.emulation",
                             "fabric.analysis", "fabric.experiment", "fabric.simulation",
                             "topologies"}),
}
PROJECT_PACKAGES = ("fabric", "topologies", "controllers", "experiments", "benchmarks")
MININET_LAYER = "fabric.emulation"
OS_KEN_ALLOWED = ("controllers", "fabric.testing")
PURE_LAYERS = ("fabric.model", "fabric.routing")
IMPURE = ("time", "random", "subprocess", "os", "datetime")


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


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def home_of(path: Path) -> str:
    """The layer (``fabric.model``, ...), top-level module, CLI or package of ``path``."""
    rel = _rel(path)
    if rel in TOP_LEVEL:
        return rel[:-3].replace("/", ".").removesuffix(".__init__")
    parts = Path(rel).parts
    if parts[0] == "fabric":
        layer = f"fabric.{parts[1]}"
        if len(parts) < 3 or layer not in LAYERS | {CLI: frozenset()}:
            raise AssertionError(f"{rel}: not in a layer folder of fabric/ ({sorted(LAYERS)}) "
                                 f"nor one of its top-level modules ({sorted(TOP_LEVEL)})")
        return layer
    if parts[0] in CLIENTS:
        return parts[0]
    raise AssertionError(f"{rel}: outside the checked packages")


def target_of(module: str) -> str | None:
    """The layer, top-level module or package ``module`` belongs to (None: not the
    project's, or the ``fabric`` package itself)."""
    parts = module.split(".")
    if parts[0] not in PROJECT_PACKAGES or module == "fabric":
        return None
    return ".".join(parts[:2]) if parts[0] == "fabric" else parts[0]


def may_import(home: str) -> frozenset[str] | None:
    """What ``home`` may import of the project besides itself and :data:`SHARED`
    (None: anything, the CLI)."""
    if home == CLI:
        return None
    return LAYERS.get(home, CLIENTS.get(home, frozenset()))


def violations(path: Path, text: str | None = None) -> list[str]:
    """Every import in ``path`` (or ``text`` read as ``path``) that breaks the rules."""
    home = home_of(path)
    rel = _rel(path)
    allowed = may_import(home)
    problems = []
    for imp in imports_of(path, text):
        mod, top = imp.module, _top(imp.module)
        where = f"{rel}:{imp.lineno} imports {mod}"
        target = target_of(mod)
        if top == "mininet":
            if home != MININET_LAYER:
                problems.append(f"{where}: Mininet outside the emulation layer")
            elif not imp.lazy:
                problems.append(f"{where}: Mininet at module level (import it lazily)")
        elif top in ("os_ken", "ryu"):
            if not any(_within(home, a) for a in OS_KEN_ALLOWED):
                problems.append(f"{where}: os-ken outside controllers/ and fabric/testing/")
        elif (target is not None and target != home and target not in SHARED
              and allowed is not None and target not in allowed):
            problems.append(f"{where}: {home} may import only "
                            f"{', '.join(sorted(allowed)) or 'nothing of the project'}")
    return problems


ALL_FILES = [p for pkg in PACKAGES for p in _files(pkg)]


def test_import_parser_sees_lazy_and_relative_imports():
    text = ("import os\nfrom . import graph\nfrom .intents import Flow\n"
            "try:\n    import numpy\nexcept ImportError:\n    pass\n"
            "def f():\n    import mininet.net\n    from os_ken import cfg\n"
            "class C:\n    def m(self):\n        import subprocess\n")
    found = imports_of(ROOT / "fabric" / "model" / "probe.py", text)
    by_module = {i.module: i.lazy for i in found}
    assert by_module["os"] is False
    assert by_module["numpy"] is False  # module level even inside try
    assert by_module["fabric.model"] is False and by_module["fabric.model.graph"] is False
    assert by_module["fabric.model.intents"] is False
    assert by_module["mininet.net"] is True
    assert by_module["os_ken"] is True
    assert by_module["subprocess"] is True


@pytest.mark.parametrize("rel, text, expected", [
    ("fabric/model/probe.py", "from fabric.routing import policies\n", "fabric.model may import"),
    ("fabric/routing/probe.py", "def f():\n    from fabric.emulation import ovs\n",
     "fabric.routing may import only fabric.model"),
    ("fabric/traffic/probe.py", "import fabric.analysis.results\n", "fabric.traffic may import"),
    ("fabric/agent/probe.py", "from fabric.emulation.network import Emulation\n",
     "fabric.agent may import only fabric.traffic"),
    ("fabric/emulation/probe.py", "from fabric.analysis import plotstyle\n",
     "fabric.emulation may import"),
    ("fabric/emulation/probe.py", "from fabric.cli import main\n", "fabric.emulation may import"),
    ("fabric/analysis/probe.py", "from fabric.routing.tables import next_hops\n",
     "fabric.analysis may import"),
    ("fabric/testing/probe.py", "from fabric.traffic import model\n", "fabric.testing may"),
    ("fabric/analysis/probe.py", "def f():\n    import mininet.net\n",
     "Mininet outside the emulation layer"),
    ("fabric/emulation/probe.py", "from mininet.net import Mininet\n", "Mininet at module level"),
    ("fabric/routing/probe.py", "from os_ken.ofproto import ofproto_v1_5\n",
     "os-ken outside controllers/"),
    ("fabric/emulation/probe.py", "import ryu.base.app_manager\n", "os-ken outside"),
    ("fabric/emulation/probe.py", "def f():\n    import controllers.launcher\n",
     "fabric.emulation may import only"),
    ("fabric/analysis/probe.py", "from experiments import EXPERIMENTS\n",
     "fabric.analysis may import only"),
    ("fabric/testing/probe.py", "def f():\n    from controllers import runtime\n",
     "fabric.testing may import only"),
    ("fabric/host/probe.py", "from fabric.model import graph\n",
     "fabric.host may import only nothing"),
    ("fabric/experiment/probe.py", "import experiments\n", "fabric.experiment may import"),
    ("topologies/probe.py", "from fabric.emulation import capacity\n",
     "topologies may import only fabric.model"),
    ("topologies/probe.py", "import mininet.topo\n", "Mininet outside"),
    ("controllers/probe.py", "from fabric.analysis import results\n", "controllers may import"),
    ("controllers/probe.py", "from fabric.emulation import system\n", "controllers may import"),
    ("controllers/probe.py", "from experiments import collisions\n", "controllers may import"),
    ("benchmarks/probe.py", "from experiments.collisions import norm_throughput\n",
     "benchmarks may import only"),
    ("benchmarks/probe.py", "from fabric.cli import main\n", "benchmarks may import only"),
])
def test_rules_report_a_wrong_import(rel, text, expected):
    problems = violations(ROOT / rel, text)
    assert problems and expected in problems[0], problems


@pytest.mark.parametrize("rel, text", [
    ("fabric/routing/probe.py", "from fabric.model import graph as fg\nfrom . import tables\n"),
    ("fabric/emulation/probe.py", "def f():\n    from mininet.net import Mininet\n"),
    ("fabric/testing/probe.py", "from os_ken.ofproto import ofproto_v1_5\n"
     "from fabric.routing import runtime\n"),
    ("controllers/probe.py", "from fabric.host.ports import check_port_free\n"
     "from fabric import argtypes\nfrom fabric.errors import UserError\n"),
    ("fabric/model/probe.py", "from fabric.errors import UserError\n"),
    ("fabric/cli/probe.py", "def f():\n    import experiments\nimport controllers.launcher\n"
     "from fabric.emulation import Emulation\n"),
    ("experiments/probe.py", "from fabric.emulation import Emulation\n"
     "from fabric.experiment import Runner\nfrom controllers import userapp\n"),
    ("benchmarks/probe.py", "from fabric.experiment.emulated import traffic_run\n"
     "from fabric.agent.runner import per_process\n"),
])
def test_rules_accept_an_allowed_import(rel, text):
    assert violations(ROOT / rel, text) == []


def test_a_module_outside_the_layer_folders_is_refused():
    with pytest.raises(AssertionError, match="not in a layer folder"):
        home_of(ROOT / "fabric" / "helpers.py")


@pytest.mark.parametrize("path", ALL_FILES, ids=_rel)
def test_module_keeps_the_layer_rules(path):
    problems = violations(path)
    assert not problems, "\n".join(problems)


def test_fabric_holds_its_layers_the_cli_and_the_shared_modules_only():
    top = {_rel(p) for p in (ROOT / "fabric").glob("*.py")}
    assert top <= TOP_LEVEL, f"modules outside a layer: {sorted(top - TOP_LEVEL)}"
    folders = {f"fabric.{d.name}" for d in (ROOT / "fabric").iterdir()
               if d.is_dir() and (d / "__init__.py").exists()}
    assert folders == set(LAYERS) | {CLI}


@pytest.mark.parametrize("rel", sorted(TOP_LEVEL))
def test_shared_modules_import_nothing_of_fabric(rel):
    found = {i.module for i in imports_of(ROOT / rel)}
    assert not {m for m in found if _top(m) in PROJECT_PACKAGES}, found


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_layer_docstring_states_what_it_may_import(layer):
    init = ROOT / Path(*layer.split(".")) / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    paragraphs = [p.replace("\n", " ") for p in doc.split("\n\n")]
    lines = [p for p in paragraphs if p.startswith("May import:")]
    assert len(lines) == 1, f"{_rel(init)}: no 'May import:' paragraph in its docstring"
    stated = lines[0].removeprefix("May import:").split("(")[0].strip().rstrip(".")
    names = set() if stated.startswith("nothing") else {s.strip() for s in stated.split(",")}
    assert names == set(LAYERS[layer]), f"{_rel(init)} says {names}, the rule is {LAYERS[layer]}"


@pytest.mark.parametrize("path", [p for layer in PURE_LAYERS
                                  for p in _files(layer.replace(".", "/"))], ids=_rel)
def test_routing_and_model_are_pure(path):
    bad = [i for i in imports_of(path) if _top(i.module) in IMPURE]
    assert not bad, f"{_rel(path)} imports {bad}"
    names = {n.id for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Name)}
    assert not names & set(IMPURE), _rel(path)


def test_rules_see_every_package():
    assert {p.relative_to(ROOT).parts[0] for p in ALL_FILES} == set(PACKAGES)
    assert (ROOT / "fabric" / "routing" / "tables.py") in ALL_FILES
    assert (ROOT / "fabric" / "emulation" / "network.py") in ALL_FILES


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
    "topologies, fabric.routing.tables, fabric.model.graph",
    "fabric.model.intents, fabric.emulation.capacity, fabric.emulation.shaping",
    "fabric.cli",
    "fabric.emulation",
    "fabric.analysis.report, fabric.analysis.results",
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


def test_public_imports_keep_working():
    code = ("import topologies\n"
            "from fabric.testing import FakeFabric, Hop\n"
            "from fabric.emulation import Emulation, EmulationOptions\n"
            "assert callable(topologies.build)\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr


# --- the backend seam -----------------------------------------------------------------
# What one backend brings up or returns: code that runs on "a backend" never tests for one.
BACKEND_TYPES = frozenset({"Emulation", "SimulatedFabric", "EmulatorBackend",
                           "SimulatorBackend", "TrafficResult", "SimResult"})
RUN_LOOP_MODULES = ("loop", "emulated", "simulated", "backend")


def backend_isinstance(text: str) -> list[int]:
    """Lines of ``isinstance(x, T)`` calls whose ``T`` names a backend's type."""
    lines = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" \
                and len(node.args) == 2:
            names = {n.id if isinstance(n, ast.Name) else getattr(n, "attr", None)
                     for n in ast.walk(node.args[1])}
            if names & BACKEND_TYPES:
                lines.append(node.lineno)
    return lines


def run_loop_patches(text: str) -> list[int]:
    """Lines that patch a global of the run loop's modules (``setattr(loop, ...)`` or by
    dotted name) instead of handing the runner a backend."""
    lines = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "setattr" \
                and node.args:
            target = node.args[0]
            name = (target.id if isinstance(target, ast.Name) else
                    target.value if isinstance(target, ast.Constant) else "")
            if isinstance(name, str) and (name in RUN_LOOP_MODULES or any(
                    name.startswith(f"fabric.experiment.{m}") for m in RUN_LOOP_MODULES)):
                lines.append(node.lineno)
    return lines


def test_the_seam_checks_find_what_they_look_for():
    assert backend_isinstance("if isinstance(emu, SimulatedFabric):\n    pass\n") == [1]
    assert backend_isinstance("isinstance(r, (dict, simulated.SimResult))\n") == [1]
    assert backend_isinstance("isinstance(x, dict)\n") == []
    assert run_loop_patches("monkeypatch.setattr(loop, 'traffic_run', f)\n") == [1]
    assert run_loop_patches("mp.setattr('fabric.experiment.emulated.traffic_run', f)\n") == [1]
    assert run_loop_patches("monkeypatch.setattr(failures, 'FAIL_AT', 0.0)\n") == []


@pytest.mark.parametrize("path", [p for package in PACKAGES for p in _files(package)],
                         ids=_rel)
def test_no_code_asks_which_backend_it_has(path):
    assert backend_isinstance(path.read_text()) == [], \
        f"{_rel(path)}: an isinstance on a backend's type; ask the Runner or the Backend"


@pytest.mark.parametrize("path", sorted((ROOT / "tests").rglob("*.py"))
                         + sorted((ROOT / "examples").rglob("*.py")), ids=_rel)
def test_tests_hand_the_runner_backends_instead_of_patching_the_run_loop(path):
    assert run_loop_patches(path.read_text()) == [], \
        f"{_rel(path)}: patches the run loop; pass backends (tests/fake_emulation.backends)"
