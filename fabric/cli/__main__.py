"""``python -m fabric.cli``: the ``fabric`` command."""

import sys

from fabric.cli.main import main

sys.exit(main())
