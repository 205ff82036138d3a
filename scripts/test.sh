#!/usr/bin/env bash
# The test suite: set up if needed (with the ns-3 backend, which the suite
# cross-checks against the emulator), then unit tests (anywhere) and the Mininet
# integration tests (as root; they skip otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --ns3
exec .venv/bin/python -m pytest tests examples "$@"
