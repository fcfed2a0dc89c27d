#!/usr/bin/env bash
# Install smg into .venv and start dev mode: a gateway on 127.0.0.1:30000 with simulated workers.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e .
exec .venv/bin/smg dev "$@"
