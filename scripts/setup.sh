#!/usr/bin/env bash
# Make .venv and install smg into it from the committed lock files (pinned, hash-checked).
#   scripts/setup.sh           the gateway's dependencies (requirements/runtime.lock)
#   scripts/setup.sh test      and the test tools (requirements/test.lock)
#   scripts/setup.sh --check   only check the host: Python >= 3.11 with its venv module
# The Python used is $PYTHON, else python3 on PATH. A missing prerequisite exits 1 saying what to
# install. To refresh the locks after a change to pyproject.toml's dependencies:
#   pip install pip-tools
#   pip-compile --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url \
#     --no-emit-find-links -o requirements/runtime.lock pyproject.toml
#   (the same with --extra test -o requirements/test.lock)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
mode=${1:-runtime}

missing() {  # what is wrong, then what to install
  printf 'smg setup: %s\n  %s\n' "$1" "$2" >&2
  exit 1
}

if ! command -v "$PY" >/dev/null 2>&1; then
  missing "no '$PY' found; smg needs Python >= 3.11" \
    "Install it (Debian/Ubuntu: apt-get install python3 python3-venv) or set PYTHON=/path/to/python3.11"
fi
version=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)
major=${version%%.*}
minor=${version#*.}
if ! [[ "$major" =~ ^[0-9]+$ && "$minor" =~ ^[0-9]+$ ]] || ((major < 3 || (major == 3 && minor < 11))); then
  missing "'$PY' is Python ${version:-of unknown version}; smg needs Python >= 3.11" \
    "Install Python 3.11 or newer (Debian 12: apt-get install python3 python3-venv; elsewhere python3.11 python3.11-venv, or pyenv) and set PYTHON=/path/to/it"
fi
if ! "$PY" -m venv --help >/dev/null 2>&1 || ! "$PY" -c 'import ensurepip' >/dev/null 2>&1; then
  missing "Python $version has no working venv module (venv or ensurepip missing)" \
    "Install it: apt-get install python3-venv (or python$version-venv); on other systems reinstall Python with venv"
fi
case "$mode" in
  --check) exit 0 ;;
  runtime) lock=requirements/runtime.lock ;;
  test) lock=requirements/test.lock ;;
  *) echo "usage: scripts/setup.sh [runtime|test|--check]" >&2; exit 2 ;;
esac

if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
pip=(.venv/bin/python -m pip -q --disable-pip-version-check)
# a venv made before the rename holds the old distribution `smg`, which owns the same files
if "${pip[@]}" show smg >/dev/null 2>&1; then "${pip[@]}" uninstall -y smg; fi
"${pip[@]}" install --require-hashes -r "$lock"
"${pip[@]}" install --no-deps -e .
"${pip[@]}" install --no-deps --require-hashes -r requirements/data.lock
