"""The code of the README and the docs, for tests that check it against the real parser
and run it as written.

Sources: ``README.md`` and every ``docs/**/*.md`` but ``docs/reference/cli.md`` (generated
from the parser, see :mod:`fabric.cli.reference`).

What is collected:

- fenced ``python`` blocks (:func:`blocks`): run as written, from a directory that looks
  like the repository root (:func:`workdir`); those that bring up a fabric
  (:func:`needs_root`) only as root;
- fenced ``sh`` (or ``bash``, ``shell``) blocks (:func:`shell_commands`): every command
  line, comments and ``sudo`` removed, continuations joined. A ``fabric`` (or
  ``.venv/bin/fabric``) line is checked by :func:`check_fabric`; any other line must name
  a file of the repository (``scripts/...``, or the script a ``python`` runs);
- inline code spans that start with ``fabric``, ``sudo fabric`` or ``.venv/bin/fabric``
  (:func:`inline_commands`), checked by :func:`check_fabric` too.

How a ``fabric`` command line is checked (:func:`check_fabric`): it is parsed by
``fabric.cli.build_parser().parse_args`` and argparse's error is the failure, so a missing
required argument (``fabric run collisions --quick`` without ``--out``), an unknown option
or a bad choice or value fails. ``--help`` succeeds. Options must be spelled in full (no
abbreviations). Besides:

- **Placeholders.** A word with a capital letter and no lowercase one (``NAME``, ``DIR``,
  ``N``, ``MODULE:CLASS``) stands for a valid value of the argument in whose place it is.
  In a subcommand's or an experiment's place it stands for each of them in turn, and the
  line is valid if it parses with one (``fabric run NAME --help``). Elsewhere it is
  replaced by the argument's first choice, or else by the first of :data:`STAND_INS` that
  the argument's type accepts.
- **Elisions.** A word holding ``...`` (``...``, ``[...]``) ends the checked part of the
  line: the words before it must name existing subcommands, experiments and options, and
  values given there must be valid, but required arguments are not asked for
  (``fabric controller --app ...``).
- **Names in prose.** An inline span of ``fabric`` followed only by subcommand and
  experiment names (``fabric up``, ``fabric run collisions``) names a command rather than
  giving one: the names must exist.
- **Output.** An inline span whose first word after ``fabric`` ends in ``:`` is an error
  line the command prints (``fabric topo: rail-clos: ...``), not a command: skipped.
- **Files.** The argument types that look at the file system (an existing file or
  directory, a new directory, a file to write) are checked for their shape only (any path;
  a figure file's suffix), so the check does not depend on what this machine holds.
  Everything else is checked as the command would: an app spec
  (``--controller-app examples/flowlet_switching.py:FlowletSwitching``) must load, from the
  repository root, where the documented commands run.
"""

from __future__ import annotations

import argparse
import configparser
import contextlib
import functools
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from fabric import argtypes

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GENERATED = frozenset({ROOT / "docs" / "reference" / "cli.md"})
SHELLS = ("sh", "bash", "shell")  # the languages of shell blocks
OUTPUTS = ("results", "site", "build", "dist")  # what runs write: never linked by workdir()
FABRIC = ("fabric", ".venv/bin/fabric")
# what a placeholder outside a subcommand's place may stand for, tried in this order
STAND_INS = ("1", "2", "8", "rail-clos", "cubic", "figure.png", "127.0.0.1",
             "remote:127.0.0.1:6653", "examples/flowlet_switching.py:FlowletSwitching",
             str(ROOT / "tests" / "data" / "traces" / "example.json"))
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[^\n]*\n(?P<code>.*?)^(?P=indent)```",
                   re.M | re.S)
SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")


@dataclass(frozen=True)
class Snippet:
    """A fenced block's code, or one command line, and where it is."""

    source: str  # the file, relative to the repository root
    line: int    # where the block or span starts, 1-based
    code: str

    @property
    def where(self) -> str:
        """``file:line``."""
        return f"{self.source}:{self.line}"


@dataclass(frozen=True)
class Command:
    """One command line of the docs: its words (``sudo`` removed) and where it is."""

    source: str
    line: int
    argv: tuple[str, ...]
    inline: bool  # an inline code span (else a line of an ``sh`` block)

    @property
    def where(self) -> str:
        """``file:line``."""
        return f"{self.source}:{self.line}"


def documents() -> list[Path]:
    """README.md and every Markdown file under docs/ but the generated ones and the
    changelog."""
    docs = sorted(p for p in (ROOT / "docs").rglob("*.md") if p not in GENERATED)
    return [README, *docs]


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _fences(path: Path) -> Iterator[tuple[str, int, str, re.Match]]:
    """``(language, line, code, match)`` of every fenced block of ``path``, dedented."""
    text = path.read_text()
    for match in FENCE.finditer(text):
        code = match.group("code")
        indent = match.group("indent")
        if indent:
            code = "".join(line[len(indent):] if line.startswith(indent) else line.lstrip()
                           for line in code.splitlines(keepends=True))
        yield match.group("lang"), text.count("\n", 0, match.start()) + 1, code, match


def blocks(language: str) -> list[Snippet]:
    """Every fenced block in ``language`` of the README and the docs."""
    return [Snippet(_rel(path), line, code) for path in documents()
            for lang, line, code, _ in _fences(path) if lang == language]


def needs_root(code: str) -> bool:
    """A Python block that brings up a fabric."""
    return "Emulation(" in code


def workdir(tmp: Path) -> Path:
    """``tmp`` made to look like the repository root, where the docs' snippets run: a
    symlink to each of the root's entries but hidden ones and outputs (``results``,
    ``site``), so a snippet's relative paths (``examples/...``) resolve while what it
    writes stays in ``tmp``."""
    for entry in ROOT.iterdir():
        if not entry.name.startswith(".") and entry.name not in OUTPUTS:
            (tmp / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    return tmp


def run_python(snippet: "Snippet", tmp: Path) -> str | None:
    """Run a Python snippet as written, in :func:`workdir` of ``tmp``: None when it
    succeeded, else where it is and the end of its error output."""
    proc = subprocess.run([sys.executable, "-c", runner(snippet.code)], cwd=workdir(tmp),
                          capture_output=True, text=True, timeout=300)
    return None if proc.returncode == 0 else f"{snippet.where}:\n{proc.stderr[-3000:]}"


def runner(code: str) -> str:
    """``code`` followed by calls of the ``test_*`` functions it defines, as pytest would."""
    tests = re.findall(r"^def (test_\w+)\(\):", code, re.M)
    return code + "".join(f"\n{name}()" for name in tests) + "\n"


def commands(code: str) -> list[list[str]]:
    """The command lines of a shell block, comments, ``sudo`` and leading ``VAR=value``
    removed, continuations joined."""
    return [argv for _, argv in numbered_commands(code)]


def numbered_commands(code: str) -> list[tuple[int, list[str]]]:
    """:func:`commands` with the index of the line each starts on."""
    found, start, pending = [], 0, ""
    for i, line in enumerate(code.splitlines()):
        start = start if pending else i
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        text, pending = (pending + line).split("#", 1)[0].strip(), ""
        if text:
            found.append((start, _without_sudo(shlex.split(text))))
    return found


def _without_sudo(argv: list[str]) -> list[str]:
    """``argv`` without leading environment assignments and ``sudo [-E]``."""
    while argv and (re.fullmatch(r"[A-Za-z_]\w*=\S*", argv[0]) or argv[0] in ("sudo", "-E")):
        argv = argv[1:]
    return argv


def shell_commands() -> list[Command]:
    """Every command line of the shell blocks of the README and the docs."""
    found = []
    for block in [b for language in SHELLS for b in blocks(language)]:
        for offset, argv in numbered_commands(block.code):
            found.append(Command(block.source, block.line + 1 + offset, tuple(argv),
                                 inline=False))
    return found


def inline_commands() -> list[Command]:
    """Every inline code span of the README and the docs that starts with ``fabric``,
    ``sudo fabric`` or ``.venv/bin/fabric`` (outside fenced blocks)."""
    found = []
    for path in documents():
        text = path.read_text()
        for *_, match in _fences(path):  # blank the blocks out, keeping the line count
            text = (text[:match.start()] + re.sub(r"[^\n]", " ", match.group(0))
                    + text[match.end():])
        for span in SPAN.finditer(text):
            words = span.group(1).split()
            if words[:1] == ["sudo"]:
                words = words[1:]
            if len(words) > 1 and words[0] in FABRIC:
                found.append(Command(_rel(path), text.count("\n", 0, span.start()) + 1,
                                     tuple(_split(" ".join(words))), inline=True))
    return found


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:  # unbalanced quotes: the parse says what is wrong
        return text.split()


def check_script(argv: tuple[str, ...]) -> str | None:
    """What is wrong with a command line that is not ``fabric``'s: the file it runs
    must exist; or, for Python's own tools (``python3 -m venv``, ``pip install``,
    ``pytest``, run as ``python -m`` or not), what they name of the repository: test
    paths, a local project and its extras (None: nothing)."""
    program = Path(argv[0]).name
    is_python = re.fullmatch(r"python[\d.]*", program) is not None
    if is_python and argv[1:2] == ("-m",) and len(argv) > 2:
        return _check_tool(argv[2], argv[3:])
    if program in ("pip", "pip3", "pytest"):
        return _check_tool(program.rstrip("3"), argv[1:])
    script = argv[1] if is_python and len(argv) > 1 else argv[0]
    return None if (ROOT / script).is_file() else f"no file {script}"


def _check_tool(tool: str, args: tuple[str, ...]) -> str | None:
    """:func:`check_script` for ``python -m tool args...``."""
    operands = [a for a in args if not a.startswith("-")]
    if tool == "venv":
        return None if len(operands) == 1 else "python -m venv takes one directory"
    if tool == "pytest":
        missing = [a for a in operands if not (ROOT / a.split("::")[0]).exists()]
        return f"no file {missing[0]}" if missing else None
    if tool == "pip" and operands[:1] == ["install"]:
        for spec in operands[1:]:
            local = re.fullmatch(r"(\.[^\[]*)(?:\[([\w,-]+)\])?", spec)
            if local is None:
                continue  # a package of the index
            if not (ROOT / local.group(1) / "setup.cfg").is_file():
                return f"pip install {spec}: no project at {local.group(1)}"
            extras = set((local.group(2) or "").split(",")) - {""}
            unknown = sorted(extras - _extras(ROOT / local.group(1) / "setup.cfg"))
            if unknown:
                return f"pip install {spec}: no extra {unknown[0]} in setup.cfg"
        return None
    return f"python -m {tool} {' '.join(operands[:1])}: not a command the docs check"


def _extras(setup_cfg: Path) -> set[str]:
    """The extras (``[options.extras_require]``) of ``setup_cfg``."""
    config = configparser.ConfigParser()
    config.read(setup_cfg)
    return set(config["options.extras_require"]) if config.has_section(
        "options.extras_require") else set()


# --- fabric command lines --------------------------------------------------------------


def check_fabric(argv: tuple[str, ...], inline: bool = False) -> str | None:
    """What is wrong with the ``fabric`` command line ``argv`` (None: nothing), by the
    rules of the module docstring; ``inline``: it is an inline code span of prose."""
    words = list(argv[1:])
    if inline and words and words[0].endswith(":"):
        return None  # an error line the command prints
    elided = next((i for i, w in enumerate(words) if "..." in w), None)
    if elided is not None:
        return _check_prefix(words[:elided])
    if inline and all(isinstance(b.action, argparse._SubParsersAction) for b in _bind(words)):
        return _check_words(words)  # names a command
    problems = []
    for variant in _variants(words):
        problem = _check_words(variant) or _parse(variant)
        if problem is None:
            return None
        problems.append(problem)
    return problems[0]


def is_placeholder(word: str) -> bool:
    """A word that stands for a value: a capital letter and no lowercase one."""
    return (not word.startswith("-") and re.search("[A-Z]", word) is not None
            and re.search("[a-z]", word) is None)


@functools.lru_cache(maxsize=1)
def parser() -> argparse.ArgumentParser:
    """``fabric``'s parser, its file-system types checking only the shape of a path."""
    from fabric.cli import build_parser

    shape_only = {argtypes.existing_file: Path, argtypes.existing_dir: Path,
                  argtypes.new_dir: Path, argtypes.output_file: Path,
                  argtypes.figure_file: _figure_name}
    root = build_parser()
    for action in _all_actions(root):
        if action.type in shape_only:
            action.type = shape_only[action.type]
    return root


def _all_actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        yield action
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _all_actions(sub)


def _figure_name(text: str) -> Path:
    """The shape of :func:`fabric.argtypes.figure_file`: a path with a figure's suffix."""
    path = Path(text)
    if path.suffix.lower() not in argtypes.FIGURE_SUFFIXES:
        raise argparse.ArgumentTypeError(f"must be a file ending in "
                                         f"{', '.join(argtypes.FIGURE_SUFFIXES)}, got {text!r}")
    return path


@dataclass
class _Bound:
    """A word of a command line and the argument it is (or is the value of)."""

    word: str
    action: argparse.Action | None  # None: no argument takes it
    is_value: bool                  # the value of ``action`` (else a flag or a positional)
    parser: argparse.ArgumentParser


def _bind(words: list[str]) -> list[_Bound]:
    """Each word with the argument argparse would give it (options spelled in full)."""
    current = parser()
    positionals = [a for a in current._actions if not a.option_strings]
    bound, pending = [], 0
    option: argparse.Action | None = None
    for word in words:
        if pending:
            bound.append(_Bound(word, option, True, current))
            pending -= 1
        elif word.startswith("-") and len(word) > 1:
            flag, equals, _ = word.partition("=")
            option = current._option_string_actions.get(flag)
            bound.append(_Bound(word, option, False, current))
            pending = 0 if option is None or option.nargs == 0 or equals else _arity(option)
        else:
            action = positionals.pop(0) if positionals else None
            bound.append(_Bound(word, action, True, current))
            if isinstance(action, argparse._SubParsersAction):
                current = action.choices.get(word) or next(iter(action.choices.values()))
                positionals = [a for a in current._actions if not a.option_strings]
    return bound


def _arity(action: argparse.Action) -> int:
    """How many words an option takes (``*``/``+``: one is enough for a check)."""
    return action.nargs if isinstance(action.nargs, int) else 1


def _variants(words: list[str]) -> list[list[str]]:
    """``words`` with every placeholder replaced: in a subcommand's or experiment's place
    by each choice in turn (one variant each), elsewhere by a stand-in value."""
    for i, item in enumerate(_bind(words)):
        if is_placeholder(item.word) and isinstance(item.action, argparse._SubParsersAction):
            return [v for choice in item.action.choices
                    for v in _variants([*words[:i], choice, *words[i + 1:]])]
    return [[_stand_in(b) if is_placeholder(b.word) and b.action is not None else b.word
             for b in _bind(words)]]


def _stand_in(item: _Bound) -> str:
    """A value that the argument ``item`` is in the place of accepts (the placeholder
    itself when none is: the parse then says what is wrong)."""
    action = item.action
    if action.choices:
        return str(next(iter(action.choices)))
    for value in STAND_INS:
        if _accepts(action, value):
            return value
    return item.word


def _accepts(action: argparse.Action, value: str) -> bool:
    try:
        converted = action.type(value) if callable(action.type) else value
    except (argparse.ArgumentTypeError, TypeError, ValueError):
        return False
    return not action.choices or converted in action.choices


def _check_words(words: list[str]) -> str | None:
    """Unknown subcommands, experiments and options (abbreviations included), and
    words no argument takes."""
    for item in _bind(words):
        if item.action is None:
            where = item.parser.prog
            return (f"{where} has no option {item.word.split('=')[0]}"
                    if item.word.startswith("-") else f"{where} takes no argument {item.word}")
        if (isinstance(item.action, argparse._SubParsersAction) and not is_placeholder(item.word)
                and item.word not in item.action.choices):
            return f"{item.parser.prog} has no {item.action.metavar or 'subcommand'} {item.word}"
    return None


def _check_prefix(words: list[str]) -> str | None:
    """The words before an elision: names and options exist, and the values given are
    valid ones (required arguments are not asked for)."""
    problem = _check_words(words)
    if problem:
        return problem
    for item in _bind(words):
        if (item.is_value and not is_placeholder(item.word)
                and not isinstance(item.action, argparse._SubParsersAction)
                and not _accepts(item.action, item.word)):
            name = "/".join(item.action.option_strings) or item.action.dest
            return f"argument {name}: invalid value {item.word!r}"
    return None


@contextlib.contextmanager
def _cwd(path: Path) -> Iterator[None]:
    """Run the block in ``path`` (``contextlib.chdir``, which Python 3.10 lacks)."""
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def _parse(words: list[str]) -> str | None:
    """argparse's error for ``fabric words...`` (None: it parses), run from the
    repository root."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err), \
            _cwd(ROOT):
        try:
            parser().parse_args(words)
        except SystemExit as exc:
            if exc.code not in (0, None):
                return err.getvalue().strip() or f"exit status {exc.code}"
    return None


# --- links -------------------------------------------------------------------------------


def relative_links(path: Path) -> list[tuple[int, str]]:
    """``(line, target)`` of every relative link and image of the Markdown file ``path``
    (outside code), without its ``#fragment``."""
    text = path.read_text()
    for *_, match in _fences(path):
        text = text[:match.start()] + re.sub(r"[^\n]", " ", match.group(0)) + text[match.end():]
    text = SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    found = []
    pattern = r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)"
    for match in re.finditer(pattern, text, re.M):
        target = match.group(1) or match.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue  # a URL (http:, mailto:) or an anchor of the same page
        found.append((text.count("\n", 0, match.start()) + 1, target.split("#", 1)[0]))
    return found
