#!/usr/bin/env bash
# The main job: set up if needed, then run the headline experiment (flow
# collisions: ECMP vs packet spraying vs adaptive routing, quick variant) on
# the default rail-optimised fabric. Needs root (Mininet). Results go to a new
# directory under results/; extra arguments go to `fabric run collisions`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
out="results/collisions-$(date +%Y%m%d-%H%M%S)"
exec .venv/bin/fabric run collisions --quick --out "$out" "$@"
