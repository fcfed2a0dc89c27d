#!/usr/bin/env bash
# The whole check: install into .venv from requirements/test.lock, lint, format check, type check, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
# .venv from the lock files, after checking for Python >= 3.11 and venv (scripts/setup.sh)
./scripts/setup.sh test
.venv/bin/ruff check smg tests bench
.venv/bin/ruff format --check smg tests bench
.venv/bin/mypy smg
# the layer order, the simulator's isolation and zero import cycles (pyproject [tool.importlinter])
.venv/bin/lint-imports --no-cache --no-logo
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
