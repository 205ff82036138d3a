"""Code a newcomer can read: no function longer than :data:`MAX_LINES` lines of code,
and no class in ``fabric/`` with more than :data:`MAX_METHODS` methods (one job each).

A function's length is counted from its ``def`` to its last line, without its
docstring (documentation is not length). Tables of data are not functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("fabric", "topologies", "controllers", "experiments", "benchmarks", "examples")
MAX_LINES = 60
MAX_METHODS = 20


def code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of ``node`` without its docstring."""
    length = node.end_lineno - node.lineno + 1
    first = node.body[0]
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        length -= first.end_lineno - first.lineno + 1
    return length


def long_functions(path: Path) -> list[str]:
    """``name (N lines)`` of every function in ``path`` longer than :data:`MAX_LINES`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [f"{node.name} at line {node.lineno} ({code_lines(node)} lines)"
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and code_lines(node) > MAX_LINES]


def large_classes(path: Path) -> list[str]:
    """``name (N methods)`` of every class in ``path`` with more than :data:`MAX_METHODS`
    methods (properties and static methods count; a nested class counts on its own)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            count = sum(isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                        for item in node.body)
            if count > MAX_METHODS:
                found.append(f"{node.name} at line {node.lineno} ({count} methods)")
    return found


FILES = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_the_count_leaves_the_docstring_out():
    text = 'def f():\n    """Doc\n\n    more.\n    """\n    return 1\n'
    (node,) = ast.parse(text).body
    assert code_lines(node) == 2


def test_a_long_function_is_found(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))
    path = tmp_path / "long.py"
    path.write_text(f"def long():\n{body}")
    assert long_functions(path) == [f"long at line 1 ({MAX_LINES + 1} lines)"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_function_is_longer_than_the_limit(path):
    assert long_functions(path) == []


def test_a_large_class_is_found(tmp_path):
    body = "".join(f"    def m{i}(self):\n        pass\n" for i in range(MAX_METHODS + 1))
    path = tmp_path / "large.py"
    path.write_text(f"class Large:\n{body}")
    assert large_classes(path) == [f"Large at line 1 ({MAX_METHODS + 1} methods)"]
    path.write_text("class Small:\n" + body.split("\n", 2)[2])
    assert large_classes(path) == []


@pytest.mark.parametrize("path", sorted((ROOT / "fabric").rglob("*.py")),
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_class_has_more_methods_than_the_limit(path):
    assert large_classes(path) == []
