#!/usr/bin/env bash
# Build the documentation site into site/ with MkDocs (warnings are errors).
#   scripts/docs.sh            build (set-up first if needed; no root)
#   scripts/docs.sh --figures  first regenerate the command-line reference, and the
#                              experiment pages' figures and measured tables from the
#                              results directories in docs/results
#   scripts/docs.sh --serve    serve the site on 127.0.0.1:8000 while you edit
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "" | --figures | --serve) ;;
  *) echo "usage: scripts/docs.sh [--figures | --serve]" >&2; exit 2 ;;
esac
if [[ ! -x .venv/bin/mkdocs ]]; then
  scripts/setup.sh
fi
export NO_MKDOCS_2_WARNING=1
if [[ "${1:-}" == --figures ]]; then
  .venv/bin/python -m fabric.cli.reference --write
  .venv/bin/python scripts/docs_results.py write
fi
if [[ "${1:-}" == --serve ]]; then
  exec .venv/bin/mkdocs serve --strict --dev-addr 127.0.0.1:8000
fi
exec .venv/bin/mkdocs build --strict --quiet
