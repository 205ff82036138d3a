"""Run a controller: ``python -m controllers POLICY --topo SPEC``."""

import sys

from controllers.launcher import main

sys.exit(main())
