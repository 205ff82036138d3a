#!/usr/bin/env bash
# The test suite: set up if needed, then unit tests (anywhere) and the
# Mininet integration tests (as root; they skip otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m pytest tests examples "$@"
