"""Argument types of the ``fabric`` command: every value is checked as it is parsed.

Each type raises :class:`argparse.ArgumentTypeError` saying what is allowed,
so a bad value ends in one line that names its option (``fabric up: argument
--port: must be an integer in 1..65535, got '70000'``) before anything on
the system changes. Checks that need the fabric graph (ranks, servers) come
later, but still before the system is touched.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import re
from pathlib import Path
from typing import Callable

MAX_PORT = 65535
MAX_QUEUE_PKTS = 100_000  # far beyond any buffer a switch of the modelled fabrics has
MAX_SEEDS = 1000
FIGURE_SUFFIXES = (".png", ".pdf", ".svg")


class ArgumentParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block), exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        """Print ``prog: message`` on stderr and exit with status 2."""
        self.exit(2, f"{self.prog}: {message}\n")


def _fail(what: str, text: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"must be {what}, got {text!r}")


def integer(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    """A type for whole numbers in ``minimum..maximum`` (either end may be open)."""
    if minimum is not None and maximum is not None:
        what = f"an integer in {minimum}..{maximum}"
    elif minimum is not None:
        what = f"an integer >= {minimum}"
    else:
        what = "an integer" if maximum is None else f"an integer <= {maximum}"

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise _fail(what, text) from None
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            raise _fail(what, text)
        return value

    parse.__name__ = "integer"
    return parse


def positive_number(maximum: float | None = None) -> Callable[[str], float]:
    """A type for finite numbers > 0 (and <= ``maximum`` when given)."""
    what = "a finite number > 0" + (f" and <= {maximum:g}" if maximum is not None else "")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise _fail(what, text) from None
        if not math.isfinite(value) or value <= 0 or (maximum is not None and value > maximum):
            raise _fail(what, text)
        return value

    parse.__name__ = "number"
    return parse


port = integer(1, MAX_PORT)
port.__doc__ = "A TCP port, 1..65535 (0 would make the controller listen on a random port)."


def name(text: str) -> str:
    """A short lowercase identifier (letters, digits, ``_``), such as a kernel module's."""
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,31}", text):
        raise _fail("a name of lowercase letters, digits and _", text)
    return text


def ip_address(text: str) -> str:
    """An IPv4 or IPv6 address literal (never a name: nothing is looked up)."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise _fail("an IP address such as 127.0.0.1", text) from None


def existing_file(text: str) -> Path:
    """A readable regular file."""
    path = Path(text)
    if not path.is_file() or not os.access(path, os.R_OK):
        raise _fail("a readable file", text)
    return path


def existing_path(text: str) -> Path:
    """A readable file or a directory that exists."""
    path = Path(text)
    if not (path.is_dir() or (path.is_file() and os.access(path, os.R_OK))):
        raise _fail("a readable file or an existing directory", text)
    return path


def existing_dir(text: str) -> Path:
    """A directory that exists."""
    path = Path(text)
    if not path.is_dir():
        raise _fail("an existing directory", text)
    return path


def _writable_parent(path: Path, text: str) -> None:
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text!r}: its directory {str(parent)!r} does not "
                                         f"exist or is not writable")


def output_file(text: str) -> Path:
    """A file to write, in a directory that exists and is writable."""
    path = Path(text)
    if path.is_dir():
        raise _fail("a file name, not a directory", text)
    _writable_parent(path, text)
    return path


def figure_file(text: str) -> Path:
    """An :func:`output_file` named ``.png``, ``.pdf`` or ``.svg``."""
    path = output_file(text)
    if path.suffix.lower() not in FIGURE_SUFFIXES:
        raise _fail(f"a file ending in {', '.join(FIGURE_SUFFIXES)}", text)
    return path


def new_dir(text: str) -> Path:
    """A directory for results: new or empty (results are never overwritten); missing
    parents are made, under a writable directory."""
    path = Path(text)
    if path.exists():
        if not path.is_dir() or any(path.iterdir()):
            raise argparse.ArgumentTypeError(f"{text!r} already exists and is not an empty "
                                             f"directory; name a new one (earlier results "
                                             f"are never overwritten)")
        return path
    ancestor = path.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir() or not os.access(ancestor, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text!r}: cannot be made under {str(ancestor)!r}")
    return path
