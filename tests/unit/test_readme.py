"""The README's snippets run as written: Python blocks that need no root here, and every
command line of its shell blocks names a real subcommand, option and file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fabric import cli
from tests import readme_snippets

ROOT = Path(__file__).resolve().parents[2]
PYTHON = [(n, code) for n, code in readme_snippets.blocks("python")
          if not readme_snippets.needs_root(code)]
COMMANDS = [(n, argv) for n, code in readme_snippets.blocks("sh")
            for argv in readme_snippets.commands(code)]


def test_the_readme_has_snippets():
    assert PYTHON and COMMANDS
    assert any(readme_snippets.needs_root(c) for _, c in readme_snippets.blocks("python"))


@pytest.mark.parametrize("line, code", PYTHON, ids=[f"README:{n}" for n, _ in PYTHON])
def test_python_snippet_runs(line, code, tmp_path):
    proc = subprocess.run([sys.executable, "-c", readme_snippets.runner(code)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"README line {line}:\n{proc.stderr[-3000:]}"


def _subparser(argv: list[str]) -> tuple[object | None, str]:
    """The parser of ``fabric argv...`` (through ``run NAME``), or None and why not."""
    parser = cli.build_parser()
    words = [a for a in argv[1:] if not a.startswith("-")]
    for depth, word in enumerate(words[:2]):
        action = next((a for a in parser._actions if a.dest in ("command", "name")), None)
        if action is None:
            break
        if word not in action.choices:
            return None, f"no {'subcommand' if depth == 0 else 'experiment'} {word}"
        parser = action.choices[word]
    return parser, ""


@pytest.mark.parametrize("line, argv", COMMANDS,
                         ids=[f"README:{n}:{' '.join(a[:3])}" for n, a in COMMANDS])
def test_shell_command_exists(line, argv):
    program = argv[0]
    if program == "fabric":
        parser, why = _subparser(argv)
        assert parser is not None, f"README line {line}: {why}"
        known = {opt for a in parser._actions for opt in a.option_strings}
        options = {a.split("=")[0] for a in argv[2:] if a.startswith("--")}
        unknown = options - known
        assert not unknown, f"README line {line}: {' '.join(argv[:3])} has no {unknown}"
    else:
        script = argv[1] if program.endswith("python") else program
        assert (ROOT / script).is_file(), f"README line {line}: no {script}"


def test_the_readme_shows_the_example_experiment_as_it_is():
    example = (ROOT / "examples" / "all_to_all.py").read_text()
    assert any(code == example for _, code in readme_snippets.blocks("python"))
