#!/usr/bin/env bash
# The transport floor beside the Rust gateway, in one interleaved run of the shared harness:
# bench/floor_proxy.py's bare aiohttp relay (as `ours1`) and bare httptools relay (as
# `ours_grpc1`: the harness's second free slot; it only names the command) against `smg_rr1`
# and `direct`, non-streaming chat. What smg costs above the aiohttp floor is ours to cut; what
# the aiohttp floor costs above the raw one is the price of the framework.
#
#   bench/floor.sh                         # CONC=1,64 REPS=3 DURATION=4
#   FLOOR_PYTHON=/path/python bench/floor.sh   # an interpreter with uvloop, aiohttp, httptools
# Env: CONC, REPS, DURATION, WARMUP as the harness; SHARED_BENCH; RESULTS [bench/results].
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
SHARED_BENCH=${SHARED_BENCH:-$REPO/../shared/bench}
printf -v py '%q' "${FLOOR_PYTHON:-$REPO/.venv/bin/python}"
printf -v script '%q' "$REPO/bench/floor_proxy.py"
export OURS_CMD="$py $script --impl aiohttp --port {port} --upstream {worker}"
export OURS_GRPC_CMD="$py $script --impl raw --port {port} --upstream {worker}"
export SYSTEMS=${SYSTEMS:-"direct smg_rr1 ours1 ours_grpc1"}
export MODES=chat CONC=${CONC:-1,64} REPS=${REPS:-3} DURATION=${DURATION:-4}
export RESULTS=${RESULTS:-$REPO/bench/results} TAG=${TAG:-floor}
echo "floor: ours1 = bare aiohttp relay, ours_grpc1 = bare httptools relay"
exec "$SHARED_BENCH/run_anchor.sh" "$@"
