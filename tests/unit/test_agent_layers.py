"""The host agent's inner dependency rule, checked on the import statements.

``fabric/agent/`` is split by transport: :data:`RULES` says what of fabric each
part may import (its own modules always). The top level (the runner, the
command line and what only the life cycle uses) drives both transports;
``core`` is what they share and imports none of them; ``roce`` and ``tcp``
never import each other, the runner or ``local``; ``local`` (agents as local
processes, for tests and benchmarks) uses what it needs. Nothing of fabric
outside the plan format (``fabric.traffic``) and fabric's shared top-level modules
(``fabric.errors``, ``fabric.argtypes``) is imported anywhere. Every
sub-package's ``__init__`` docstring states its rule in one ``May import:`` line,
and every ``__init__`` is a docstring only, so importing a package loads nothing
heavy.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.test_layers import SHARED, imports_of

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "fabric" / "agent"
TOP = "fabric.agent"  # the top level: __main__, the runner and its own helpers
CORE, ROCE, TCP, LOCAL = (f"{TOP}.{name}" for name in ("core", "roce", "tcp", "local"))
RUNNER = f"{TOP}.runner"
TRAFFIC = "fabric.traffic"

# What each part of the agent may import besides itself (the top level: besides its
# own modules, each of which is a part of its own for the others).
RULES: dict[str, frozenset[str]] = {
    TOP: frozenset({CORE, ROCE, TCP, TRAFFIC}),
    CORE: frozenset({TRAFFIC}),
    ROCE: frozenset({CORE, TRAFFIC}),
    TCP: frozenset({CORE, TRAFFIC}),
    LOCAL: frozenset({CORE, ROCE, TCP, RUNNER, TRAFFIC}),
}
SUBPACKAGES = tuple(sorted(part for part in RULES if part != TOP))
PROJECT = ("fabric", "topologies", "controllers", "experiments", "benchmarks", "tests")


def home_of(path: Path) -> str:
    """The part of the agent ``path`` belongs to: a sub-package or the top level."""
    parts = path.relative_to(AGENT).parts
    if len(parts) == 1:
        return TOP
    home = f"{TOP}.{parts[0]}"
    if home not in RULES:
        raise AssertionError(f"{path.relative_to(ROOT)}: sub-package without a rule "
                             f"(add it to RULES)")
    return home


def part_of(module: str) -> str | None:
    """The part an imported module belongs to: a sub-package of the agent, one of its
    top-level modules, a layer of fabric or a package beside it; None for what is not
    the project's (and for the bare ``fabric`` and ``fabric.agent`` packages, which are
    docstrings only)."""
    names = module.split(".")
    if names[0] not in PROJECT or module in ("fabric", TOP):
        return None
    if names[0] != "fabric":
        return names[0]
    if module.startswith(TOP + "."):
        return ".".join(names[:3])  # a sub-package, or a top-level module of the agent
    return ".".join(names[:2])


def violations(path: Path, text: str | None = None) -> list[str]:
    """Every import in ``path`` (or in ``text`` read as ``path``) that breaks :data:`RULES`."""
    home = home_of(path)
    allowed = RULES[home]
    problems = []
    for imp in imports_of(path, text):
        part = part_of(imp.module)
        if part is None or part == home or part in allowed or part in SHARED:
            continue
        if home == TOP and part.startswith(TOP + ".") and part not in RULES:
            continue  # another module of the top level
        problems.append(f"{path.relative_to(ROOT)}:{imp.lineno} imports {imp.module}: "
                        f"{home} may import only {', '.join(sorted(allowed))}")
    return problems


def stated_rule(docstring: str) -> set[str]:
    """The names on the docstring's one ``May import:`` line (text in parentheses is a
    comment).

    Raises
    ------
    AssertionError
        If the docstring has no such line or more than one.
    """
    lines = [line for line in docstring.splitlines() if line.startswith("May import:")]
    assert len(lines) == 1, f"expected one 'May import:' line, found {len(lines)}"
    stated = lines[0].removeprefix("May import:").split("(")[0].strip().rstrip(".")
    return set() if stated.startswith("nothing") else {s.strip() for s in stated.split(",")}


AGENT_FILES = sorted(AGENT.rglob("*.py"))
INITS = sorted(AGENT.rglob("__init__.py"))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("path", AGENT_FILES, ids=_rel)
def test_module_keeps_the_agent_rules(path):
    problems = violations(path)
    assert not problems, "\n".join(problems)


def test_the_rules_see_every_part_of_the_agent():
    homes = {home_of(p) for p in AGENT_FILES}
    assert homes == set(RULES)
    assert AGENT / "roce" / "engine.py" in AGENT_FILES
    assert AGENT / "runner.py" in AGENT_FILES


def test_the_agent_imports_nothing_of_fabric_but_the_plan_format():
    outside = {m for allowed in RULES.values() for m in allowed if not m.startswith(TOP + ".")}
    assert outside == {TRAFFIC}


@pytest.mark.parametrize("package", SUBPACKAGES)
def test_subpackage_docstring_states_its_rule(package):
    init = ROOT / Path(*package.split(".")) / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    assert stated_rule(doc) == set(RULES[package]), _rel(init)


@pytest.mark.parametrize("init", INITS, ids=_rel)
def test_package_init_is_a_docstring_only(init):
    body = ast.parse(init.read_text()).body
    assert body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    assert len(body) == 1, f"{_rel(init)}: code besides the docstring (keep imports lazy)"


def test_local_processes_put_this_copy_of_fabric_on_the_path():
    from fabric.children import SOURCE_ROOT

    assert SOURCE_ROOT == ROOT and (SOURCE_ROOT / "fabric" / "agent" / "__main__.py").exists()


@pytest.mark.parametrize("rel, text, expected", [
    ("core/probe.py", "from fabric.agent.roce.bth import PSN_MASK\n",
     "fabric.agent.core may import only fabric.traffic"),
    ("core/probe.py", "def f():\n    from fabric.agent.tcp import engine\n",
     "imports fabric.agent.tcp"),
    ("core/probe.py", "from fabric.agent import runner\n", "imports fabric.agent.runner"),
    ("roce/probe.py", "from fabric.agent.tcp.framing import DATA\n",
     "fabric.agent.roce may import only fabric.agent.core, fabric.traffic"),
    ("roce/probe.py", "from ..tcp import tcpinfo\n", "imports fabric.agent.tcp"),
    ("roce/probe.py", "from fabric.agent.runner import Agent\n", "imports fabric.agent.runner"),
    ("tcp/probe.py", "import fabric.agent.roce.engine\n", "imports fabric.agent.roce.engine"),
    ("tcp/probe.py", "from fabric.agent.local.processes import run_plan\n",
     "fabric.agent.tcp may import only"),
    ("local/probe.py", "from fabric.emulation.network import Emulation\n",
     "imports fabric.emulation.network"),
    ("local/probe.py", "from fabric.agent.netns import Namespace\n",
     "imports fabric.agent.netns"),
    ("runner.py", "from fabric.agent.local.processes import launch\n",
     "fabric.agent may import only"),
    ("probe.py", "from fabric.emulation import Emulation\n", "imports fabric.emulation"),
    ("core/probe.py", "import experiments\n", "imports experiments"),
])
def test_rules_report_a_wrong_import(rel, text, expected):
    problems = violations(AGENT / rel, text)
    assert problems and expected in problems[0], problems


@pytest.mark.parametrize("rel, text", [
    ("roce/probe.py", "from fabric.agent.core.loop import EventLoop\nfrom . import bth\n"
     "from ..core import records\nfrom fabric.traffic.model import Plan\n"),
    ("tcp/probe.py", "from fabric.agent.tcp import framing\nimport socket\n"),
    ("local/probe.py", "from fabric.agent.runner import per_process\n"
     "from fabric.agent.roce import bth\nfrom fabric.agent.tcp.engine import TcpConfig\n"),
    ("runner.py", "from fabric.agent import addressing, netstat\n"
     "from fabric.agent.roce.engine import RoceEngine\nfrom .tcp.engine import TcpEngine\n"),
    ("__main__.py", "from fabric.agent.runner import run_agent\n"),
])
def test_rules_accept_an_allowed_import(rel, text):
    assert violations(AGENT / rel, text) == []


def test_a_subpackage_without_a_rule_is_refused():
    with pytest.raises(AssertionError, match="without a rule"):
        home_of(AGENT / "udp" / "engine.py")


@pytest.mark.parametrize("doc, problem", [
    ("The RoCE transport.\n", "found 0"),
    ("May import: fabric.agent.core\nMay import: fabric.traffic\n", "found 2"),
])
def test_a_docstring_without_exactly_one_rule_line_is_refused(doc, problem):
    with pytest.raises(AssertionError, match=problem):
        stated_rule(doc)


def test_a_docstring_rule_is_read_as_stated():
    doc = "Transport.\n\nMay import: fabric.agent.core, fabric.traffic (the plan).\n"
    assert stated_rule(doc) == {"fabric.agent.core", "fabric.traffic"}
    assert stated_rule("May import: fabric.traffic, fabric.agent.tcp\n") != set(RULES[ROCE])
    assert stated_rule("May import: nothing of fabric.\n") == set()
