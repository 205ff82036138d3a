"""fabric's own child Pythons: the controller, the flow-control daemon, the host agents.

Every child runs this checkout's code whatever the caller's working directory or
``PYTHONPATH``: the source root goes first on the child's path, the caller's path
stays after it (a user's controller app may live there).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

SOURCE_ROOT = Path(__file__).resolve().parents[1]


def child_env() -> dict[str, str]:
    """This process's environment with the source root first on ``PYTHONPATH``."""
    path = [str(SOURCE_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(path))


def start_python(module: str, args: Sequence[str], **popen: Any) -> subprocess.Popen:
    """Start ``python -m module args...`` with this interpreter and this checkout's code.

    The child runs in the source root: ``python -m`` puts its working directory first
    on the path, where a ``fabric`` folder beside the caller would shadow this one.
    Paths among ``args`` must therefore be absolute.

    Parameters
    ----------
    module : str
        The module to run (``controllers``, ``fabric.agent``, ...).
    args : sequence of str
        Its arguments, as a list: never a shell string.
    **popen
        Passed to :class:`subprocess.Popen` (stdin, stdout, stderr, start_new_session).
    """
    return subprocess.Popen([sys.executable, "-m", module, *args], env=child_env(),
                            cwd=SOURCE_ROOT, **popen)


def log_tail(path: Path, lines: int = 5) -> str:
    """The last ``lines`` of a child's log, on one line (for an error message)."""
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"
