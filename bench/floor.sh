#!/usr/bin/env bash
# The transport floor beside the Rust gateway, in one interleaved run of the shared harness:
# bench/floor_proxy.py's bare aiohttp relay (as `ours1`) and bare httptools relay (as
# `ours_grpc1`: the harness's second free slot; it only names the command) against `smg_rr1`
# and `direct`, non-streaming chat. What smg costs above the aiohttp floor is ours to cut; what
# the aiohttp floor costs above the raw one is the price of the framework.
#
#   bench/floor.sh                         # CONC=1,64 REPS=3 DURATION=4
#   FLOOR_PYTHON=/path/python bench/floor.sh   # an interpreter with uvloop, aiohttp, httptools
#   FLOOR_OURS=lean bench/floor.sh         # ours1 = smg's lean server (smg/edge) + bare upstream
# FLOOR_OURS / FLOOR_OURS_GRPC pick the relay in each slot (aiohttp, raw, lean; floor_proxy.py).
# Env: CONC, REPS, DURATION, WARMUP as the harness; SHARED_BENCH; RESULTS [bench/results].
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
SHARED_BENCH=${SHARED_BENCH:-$REPO/../shared/bench}
printf -v py '%q' "${FLOOR_PYTHON:-$REPO/.venv/bin/python}"
printf -v script '%q' "$REPO/bench/floor_proxy.py"
ours=${FLOOR_OURS:-aiohttp} ours_grpc=${FLOOR_OURS_GRPC:-raw}
export OURS_CMD="$py $script --impl $ours --port {port} --upstream {worker}"
export OURS_GRPC_CMD="$py $script --impl $ours_grpc --port {port} --upstream {worker}"
export SYSTEMS=${SYSTEMS:-"direct smg_rr1 ours1 ours_grpc1"}
export MODES=chat CONC=${CONC:-1,64} REPS=${REPS:-3} DURATION=${DURATION:-4}
export RESULTS=${RESULTS:-$REPO/bench/results} TAG=${TAG:-floor}
echo "floor: ours1 = --impl $ours relay, ours_grpc1 = --impl $ours_grpc relay"
exec "$SHARED_BENCH/run_anchor.sh" "$@"
