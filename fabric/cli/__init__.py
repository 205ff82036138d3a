"""The ``fabric`` command: topo, up, traffic, run, plot, controller, clean.

One module per subcommand, each adding its own parser
(:func:`~fabric.cli.main.build_parser` assembles them). Every expected failure
(a :class:`fabric.errors.UserError`: bad spec, rate this machine cannot shape,
not root, busy port) ends in one line on stderr and exit status 2, before
anything on the system has changed.
"""

from fabric.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
