#!/usr/bin/env bash
# Install smg into .venv (scripts/setup.sh) and start dev mode: a gateway on 127.0.0.1:30000 with
# simulated workers.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/bin/smg dev "$@"
