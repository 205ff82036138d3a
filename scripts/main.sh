#!/usr/bin/env bash
# The main job: set up if needed, then run the headline run on the default
# fabric. Needs root (Mininet). Extra arguments go to `fabric up`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/fabric up rail-clos --routing ecmp "$@"
