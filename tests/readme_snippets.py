"""The code blocks of the README, for tests that run them as written."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def blocks(language: str) -> list[tuple[int, str]]:
    """``(line number, code)`` of every fenced block in ``language``."""
    text = README.read_text()
    found = []
    for match in re.finditer(rf"^```{language}\n(.*?)^```", text, re.M | re.S):
        found.append((text.count("\n", 0, match.start()) + 1, match.group(1)))
    return found


def needs_root(code: str) -> bool:
    """A Python block that brings up a fabric."""
    return "Emulation(" in code


def commands(code: str) -> list[list[str]]:
    """The command lines of a shell block, comments and ``sudo`` removed, continuations
    joined."""
    joined = re.sub(r"\\\n\s*", " ", code)
    lines = []
    for line in joined.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            argv = shlex.split(line)
            lines.append(argv[1:] if argv[0] == "sudo" else argv)
    return lines


def runner(code: str) -> str:
    """``code`` followed by calls of the ``test_*`` functions it defines, as pytest would."""
    tests = re.findall(r"^def (test_\w+)\(\):", code, re.M)
    return code + "".join(f"\n{name}()" for name in tests) + "\n"
