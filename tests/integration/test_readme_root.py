"""The README's Python snippets that bring up a fabric run as written (root)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests import readme_snippets

ROOT_BLOCKS = [(n, code) for n, code in readme_snippets.blocks("python")
               if readme_snippets.needs_root(code)]


@pytest.mark.parametrize("line, code", ROOT_BLOCKS, ids=[f"README:{n}" for n, _ in ROOT_BLOCKS])
def test_python_snippet_runs_on_a_fabric(line, code, tmp_path):
    proc = subprocess.run([sys.executable, "-c", readme_snippets.runner(code)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"README line {line}:\n{proc.stderr[-3000:]}"
