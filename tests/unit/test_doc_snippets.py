"""The README's and the docs' snippets are right as written: every ``fabric`` command line
(of an ``sh`` block or an inline code span) parses with the real parser, required
arguments included; every other command names a real file; the Python blocks that need no
root run; the README's relative links lead to files. The rules (placeholders such as
``NAME``, elisions, spans that only name a command) are in :mod:`tests.doc_snippets`."""

from __future__ import annotations

from pathlib import Path

import pytest

import experiments
from tests import doc_snippets

ROOT = Path(__file__).resolve().parents[2]
PYTHON = [s for s in doc_snippets.blocks("python") if not doc_snippets.needs_root(s.code)]
SHELL = doc_snippets.shell_commands()
INLINE = doc_snippets.inline_commands()


def _id(command: doc_snippets.Command) -> str:
    return f"{command.where}:{' '.join(command.argv[:3])}"


def _is_fabric(command: doc_snippets.Command) -> bool:
    return command.argv[0] in doc_snippets.FABRIC


def test_the_docs_have_snippets():
    assert PYTHON and SHELL and INLINE
    assert any(doc_snippets.needs_root(s.code) for s in doc_snippets.blocks("python"))
    assert any(_is_fabric(c) for c in SHELL)
    sources = {p.relative_to(ROOT).as_posix() for p in doc_snippets.documents()}
    assert "README.md" in sources and "docs/guide/traffic.md" in sources
    assert "docs/reference/cli.md" not in sources  # generated from the parser


@pytest.mark.parametrize("snippet", PYTHON, ids=[s.where for s in PYTHON])
def test_python_snippet_runs(snippet, tmp_path):
    failure = doc_snippets.run_python(snippet, tmp_path)
    assert failure is None, failure


@pytest.mark.parametrize("command", SHELL + INLINE, ids=[_id(c) for c in SHELL + INLINE])
def test_command_line_is_valid(command):
    if _is_fabric(command):
        problem = doc_snippets.check_fabric(command.argv, inline=command.inline)
    else:
        problem = doc_snippets.check_script(command.argv)
    assert problem is None, f"{command.where}: `{' '.join(command.argv)}`: {problem}"


@pytest.mark.parametrize("target", [line for line in doc_snippets.relative_links(
    doc_snippets.README)], ids=lambda t: f"README.md:{t[0]}:{t[1]}")
def test_readme_link_leads_to_a_file(target):
    line, path = target
    assert (doc_snippets.README.parent / path).exists(), f"README.md:{line}: no {path}"


def test_the_docs_show_the_example_experiment_as_it_is():
    example = (ROOT / "examples" / "all_to_all.py").read_text()
    shown = [s for s in doc_snippets.blocks("python") if s.code == example]
    assert "docs/experiments/index.md" in [s.source for s in shown]


# --- the checker itself ------------------------------------------------------------------


@pytest.mark.parametrize("line, problem", [
    ("fabric run collisions --quick", "required: --out"),
    ("fabric run collisions --quick --out results/x --spray-entropy sideways", "invalid choice"),
    ("fabric run incast --out results/x --cc swift", "fabric run incast has no option --cc"),
    ("fabric up rail-clos fat-tree", "fabric up takes no argument fat-tree"),
    ("fabric run collision --out results/x", "has no EXPERIMENT collision"),
    ("fabric run collisions --quik --out results/x", "has no option --quik"),
    ("fabric up --host-mbps fast", "--host-mbps"),
    ("fabric topo rail-clos --png ft.gif", "--png"),
    ("fabric frob", "no subcommand frob"),
    ("fabric run NAME --pcap-at", "expected one argument"),
    ("fabric controller --ap ...", "has no option --ap"),
    ("fabric traffic --pattern sideways ...", "invalid value 'sideways'"),
])
def test_the_checker_refuses(line, problem):
    found = doc_snippets.check_fabric(tuple(line.split()))
    assert found is not None and problem in found, found


@pytest.mark.parametrize("line, inline", [
    ("fabric run collisions --quick --out results/collisions-1", False),
    ("fabric plot results/not-made-here", False),  # an existing dir: its shape only
    ("fabric topo fat-tree,k=4 --png ft.png", False),
    ("fabric controller adaptive --config no-such-file.json", False),
    ("fabric run NAME --out DIR", True),
    ("fabric run NAME --help", True),
    ("fabric run collisions --seeds N --out DIR", True),
    ("fabric run collisions", True),   # names the command
    ("fabric run", True),
    ("fabric controller --app ...", True),
    ("fabric topo: rail-clos: servers must be >= 1, got 0", True),
])
def test_the_checker_accepts(line, inline):
    assert doc_snippets.check_fabric(tuple(line.split()), inline=inline) is None


@pytest.mark.parametrize("line, problem", [
    ("python3 -m venv .venv", None),
    (".venv/bin/python -m pip install .[test]", None),
    ("pip install -e .[test]", None),
    (".venv/bin/python -m pytest tests/unit/test_harness.py examples", None),
    ("scripts/test.sh", None),
    ("python3 -m pip install .[nosuch]", "no extra nosuch"),
    ("pip install ./nowhere", "no project at ./nowhere"),
    ("pytest tests/unit/test_nosuch.py", "no file tests/unit/test_nosuch.py"),
    ("python3 -m http.server", "not a command the docs check"),
    ("scripts/nosuch.sh", "no file scripts/nosuch.sh"),
])
def test_the_checker_of_other_commands(line, problem):
    found = doc_snippets.check_script(tuple(line.split()))
    if problem is None:
        assert found is None, found
    else:
        assert found is not None and problem in found, found


def test_a_command_only_named_in_prose_is_strict_in_a_shell_block():
    assert "required: --out" in doc_snippets.check_fabric(("fabric", "run", "collisions"))


def test_an_experiment_placeholder_stands_for_every_experiment():
    variants = doc_snippets._variants(["run", "NAME", "--out", "DIR"])
    assert [v[1] for v in variants] == list(experiments.EXPERIMENTS)
    assert all(v[3] == "1" for v in variants)  # a new directory: any path


def test_an_app_spec_is_loaded_from_the_repository():
    assert doc_snippets.check_fabric(
        ("fabric", "up", "--controller-app", "examples/flowlet_switching.py:FlowletSwitching")
    ) is None
    assert "--controller-app" in doc_snippets.check_fabric(
        ("fabric", "up", "--controller-app", "examples/no_such_app.py:App"))


def test_shell_lines_lose_comments_sudo_and_continuations():
    code = ("sudo fabric up \\\n    --cli   # a comment\n"
            "OSKEN_HUB_TYPE=eventlet sudo -E fabric status\n")
    assert doc_snippets.numbered_commands(code) == [(0, ["fabric", "up", "--cli"]),
                                                    (2, ["fabric", "status"])]
