"""The command-line reference (``docs/reference/cli.md``), rendered from the parser.

Every subcommand of :func:`fabric.cli.main.build_parser`, in the parser's
order, becomes one section: its description, its usage line and a table of its
arguments; ``fabric run`` gets one subsection per experiment, with the options
every experiment takes listed once. Nothing depends on the terminal: usage
lines are formatted at a fixed width.

``python -m fabric.cli.reference`` prints the page; ``--write`` writes it to
``docs/reference/cli.md`` (``tests/unit/test_cli_reference.py`` checks that the
file is up to date).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Iterable

from fabric.cli.main import build_parser

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md"
COMMAND = "python -m fabric.cli.reference --write"
USAGE_WIDTH = 90  # usage lines wrap here, whatever the terminal
TABLE_HEAD = ["| argument | values | default | description |", "|---|---|---|---|"]


def markdown() -> str:
    """The whole command line as Markdown, the page ``docs/reference/cli.md``.

    Returns
    -------
    str
        A title and an introduction, then one ``## fabric NAME`` section per
        subcommand in the parser's order (``fabric run``: one ``### fabric run
        EXPERIMENT`` subsection per experiment), ending in a newline. The same
        parser always gives the same text.
    """
    parser = build_parser()
    lines = ["# Command line", "",
             f"This page is generated from the parser of the `fabric` command "
             f"(`fabric.cli.build_parser()`) by `{COMMAND}`; do not edit it by hand. "
             f"{_sentence(parser.description or '')} Every command also takes `-h`/`--help` "
             f"(its usage and options, as below); a bad argument ends in one line on "
             f"stderr and exit status 2, before anything on the system changes.", "",
             *_usage_block(parser)]
    for name, sub, help_text in _subcommands(parser):
        lines += ["", f"## {sub.prog}", ""]
        lines += _section(sub, help_text)
        if name == "run":
            lines += _experiments(sub)
    return "\n".join(lines) + "\n"


def _subcommands(parser: argparse.ArgumentParser
                 ) -> list[tuple[str, argparse.ArgumentParser, str]]:
    """``(name, parser, help)`` of every subcommand of ``parser``, in the parser's order."""
    action = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)),
                  None)
    if action is None:
        return []
    helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
    return [(name, sub, helps.get(name, "")) for name, sub in action.choices.items()]


def _section(parser: argparse.ArgumentParser, help_text: str,
             skip: Iterable[argparse.Action] = ()) -> list[str]:
    """A parser's description, usage block and table of arguments (but ``skip``)."""
    lines = [_escape(_sentence(parser.description or help_text)), "", *_usage_block(parser)]
    skipped = set(map(id, skip))
    rows = [_row(a, parser.prog) for a in _arguments(parser) if id(a) not in skipped]
    if rows:
        lines += ["", *TABLE_HEAD, *rows]
    return lines


def _experiments(run: argparse.ArgumentParser) -> list[str]:
    """The options every experiment takes, once, then a subsection per experiment."""
    experiments = _subcommands(run)
    common = _common_options([sub for _, sub, _ in experiments])
    lines = ["", "Every experiment takes these options:", "", *TABLE_HEAD,
             *(_row(a, run.prog) for a in common)]
    for _, sub, help_text in experiments:
        shared = _matching(sub, common)
        lines += ["", f"### {sub.prog}", "", *_section(sub, help_text, skip=shared)]
        if len(shared) == len(_arguments(sub)):
            lines += ["", "It takes only the options every experiment takes."]
    return lines


def _common_options(parsers: list[argparse.ArgumentParser]) -> list[argparse.Action]:
    """The options of the first parser that every parser has, with the same help."""
    if not parsers:
        return []
    keys = [{_key(a) for a in _arguments(p)} for p in parsers]
    return [a for a in _arguments(parsers[0]) if all(_key(a) in k for k in keys)]


def _matching(parser: argparse.ArgumentParser, options: list[argparse.Action]
              ) -> list[argparse.Action]:
    """The actions of ``parser`` that are ``options`` (same flags and help)."""
    keys = {_key(a) for a in options}
    return [a for a in _arguments(parser) if _key(a) in keys]


def _key(action: argparse.Action) -> tuple:
    return tuple(action.option_strings), action.dest, action.help


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments of ``parser`` shown in its table: all but ``-h/--help``."""
    return [a for a in parser._actions
            if not isinstance(a, argparse._HelpAction) and a.help is not argparse.SUPPRESS]


def _usage_block(parser: argparse.ArgumentParser) -> list[str]:
    """The usage line of ``parser`` at :data:`USAGE_WIDTH` columns, in a text block."""
    formatter = argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return ["```text", formatter.format_help().strip(), "```"]


def _row(action: argparse.Action, prog: str) -> str:
    """One table row: the argument, its values, its default, its help."""
    cells = [_invocation(action), _values(action), _default(action),
             _escape(_expand_help(action, prog))]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _invocation(action: argparse.Action) -> str:
    """``--flag METAVAR`` (or the positional's name), as code."""
    if not action.option_strings:
        name = action.metavar or action.dest
        return f"`[{name}]`" if action.nargs == "?" else f"`{name}`"
    flags = ", ".join(action.option_strings)
    if action.nargs == 0:
        return f"`{flags}`"
    metavar = action.metavar or ("" if action.choices else action.dest.upper())
    return f"`{flags} {metavar}`" if metavar else f"`{flags}`"


def _values(action: argparse.Action) -> str:
    """The choices of ``action``, or its metavar's type in words."""
    if action.choices is not None:
        return ", ".join(f"`{choice}`" for choice in action.choices)
    if isinstance(action, argparse._AppendAction):
        return "repeatable"
    return ""


def _default(action: argparse.Action) -> str:
    """``required``, the default as code, or nothing (None, SUPPRESS, a flag's False)."""
    if action.required:
        return "required"
    default = action.default
    if default is None or default is argparse.SUPPRESS or action.nargs == 0:
        return ""
    return f"`{default}`"


def _expand_help(action: argparse.Action, prog: str) -> str:
    """The help of ``action`` with ``%(default)s`` and the like filled in, as argparse's
    help formatter does."""
    text = " ".join((action.help or "").split())
    if "%" not in text:
        return text
    params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    params["prog"] = prog
    if params.get("choices") is not None:
        params["choices"] = ", ".join(map(str, params["choices"]))
    for key, value in list(params.items()):
        if hasattr(value, "__name__"):
            params[key] = value.__name__
    return text % params


def _sentence(text: str) -> str:
    """``text`` on one line, starting with a capital and ending in a full stop."""
    text = " ".join(text.split())
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "?", "!")) else text + "."


def _escape(text: str) -> str:
    """Markdown-escape prose (``*``, ``_``, ``<``, backslashes), leaving code spans as
    they are."""
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(part if part.startswith("`") else
                   re.sub(r"([\\*_])", r"\\\1", part).replace("<", "&lt;") for part in parts)


def main(argv: list[str] | None = None) -> int:
    """``python -m fabric.cli.reference [--write]``: print the page, or write it to
    ``docs/reference/cli.md``."""
    parser = argparse.ArgumentParser(prog="python -m fabric.cli.reference",
                                     description="The command-line reference, as Markdown.")
    parser.add_argument("--write", action="store_true", help=f"write it to {PAGE}")
    args = parser.parse_args(argv)
    text = markdown()
    if args.write:
        PAGE.parent.mkdir(parents=True, exist_ok=True)
        PAGE.write_text(text)
        print(f"wrote {PAGE}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
