#!/usr/bin/env bash
# The no-root path, as a controller developer takes it: a fresh virtual environment
# that does not see the system's packages (so no Mininet), `pip install "<copy>[test]"`
# of a copy of this checkout, then the test suite (`pytest tests examples`), as a user
# who is not root: the unit tests and the examples run, the Mininet integration tests
# skip. Run as root (as CI does), it runs the tests as the unprivileged system user
# fabric-ci, which it creates if missing. The copy holds the files git tracks or would
# track (untracked ones not ignored; outside git, all but what .gitignore lists); it and
# the environment live in a temporary directory, removed on exit. Extra arguments go to
# pytest. PYTHON names the interpreter (default: python3 on PATH; 3.10 or newer, with
# venv).
set -euo pipefail
cd "$(dirname "$0")/.."
NOROOT_USER=fabric-ci
python=${PYTHON:-python3}

check_python() {
  if ! command -v "$python" >/dev/null; then
    echo "test-noroot: no $python on PATH; install Python 3.10 or newer" >&2
    exit 2
  fi
  if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "test-noroot: $python is $("$python" -c 'import sys; print(sys.version.split()[0])');" \
         "fabric needs Python 3.10 or newer (set PYTHON to another interpreter)" >&2
    exit 2
  fi
  if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
    echo "test-noroot: $python has no venv module (Debian/Ubuntu: apt-get install python3-venv)" >&2
    exit 2
  fi
}

if [[ "${1:-}" == --in-copy ]]; then
  # second half: in the copy, as the user who runs the tests
  shift
  work=$1
  shift
  check_python  # again: root's python3 may be one this user cannot run
  cd "$work/src"
  "$python" -m venv "$work/venv"
  echo "test-noroot: installing $work/src[test] into a fresh venv as $(id -un)"
  # (the filter hides warnings about local mirrors some machines configure)
  "$work/venv/bin/python" -m pip install -q --disable-pip-version-check "$work/src[test]" \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  "$work/venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
    "mlc-chakra>=1.0,<1.1" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  exec "$work/venv/bin/python" -m pytest -q -p no:cacheprovider tests examples "$@"
fi

project_files() {
  if command -v git >/dev/null && git -c safe.directory="$PWD" rev-parse --git-dir >/dev/null 2>&1
  then
    # tracked and untracked-but-not-ignored files that exist (not those deleted here)
    git -c safe.directory="$PWD" ls-files -z --cached --others --exclude-standard \
      | while IFS= read -r -d '' f; do if [[ -e "$f" ]]; then printf '%s\0' "$f"; fi; done
  else
    # not a git checkout: everything but what .gitignore lists (environments, outputs)
    find . \( -name .git -o -name .venv -o -name __pycache__ -o -name .pytest_cache \
              -o -name '*.egg-info' -o -path ./build -o -path ./dist -o -path ./results \
              -o -path ./site \) -prune -o -type f -print0
  fi
}

check_python
work=$(mktemp -d "${TMPDIR:-/tmp}/fabric-noroot.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/src"
project_files | tar --null -T - -cf - | tar -xf - -C "$work/src"

if [[ $EUID -ne 0 ]]; then
  "$work/src/scripts/test-noroot.sh" --in-copy "$work" "$@"
  exit
fi

if ! id -u "$NOROOT_USER" >/dev/null 2>&1; then
  echo "test-noroot: creating the system user $NOROOT_USER to run the tests without root"
  useradd --system --create-home --shell /usr/sbin/nologin "$NOROOT_USER"
fi
chown -R "$NOROOT_USER": "$work"
# runuser keeps the environment (PATH, pip's settings) but HOME, USER and the like
runuser -u "$NOROOT_USER" -- "$work/src/scripts/test-noroot.sh" --in-copy "$work" "$@"
