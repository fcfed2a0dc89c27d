#!/usr/bin/env bash
# The transport floor beside the Rust gateway, in one interleaved run of the shared harness:
# bench/floor_proxy.py's bare relays in the harness's two free slots, `ours1` and `ours_grpc1`
# (that name only names the command), against `smg_rr1` (the Rust gateway) and `direct`. What smg
# costs above a floor is ours to cut; what a floor costs above a lower one is the price of that
# layer.
#
#   bench/floor.sh                         # non-streaming chat: aiohttp relay vs bare httptools
#   FLOOR_PYTHON=/path/python bench/floor.sh   # an interpreter with uvloop, aiohttp, httptools
#   FLOOR_OURS=lean bench/floor.sh         # ours1 = smg's lean server (smg/edge) + bare upstream
#   MODES=chat,chat_stream FLOOR_OURS=smg FLOOR_OURS_GRPC=splice bench/floor.sh
#                                          # per streamed token: our whole gateway vs the splice
# FLOOR_OURS / FLOOR_OURS_GRPC pick what runs in each slot: a floor_proxy.py impl (aiohttp, raw,
# lean, aioserver: whole answers only; splice, reframe: streams too) or `smg` (this checkout's
# `smg launch`, round robin, as vs_rust.sh starts it). The per-token table needs both chat and
# chat_stream in MODES.
# Env: MODES [chat], CONC, REPS, DURATION, WARMUP, PORT_BASE as the harness; SHARED_BENCH;
# RESULTS [bench/results].
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
SHARED_BENCH=${SHARED_BENCH:-$REPO/../shared/bench}
printf -v py '%q' "${FLOOR_PYTHON:-$REPO/.venv/bin/python}"
printf -v script '%q' "$REPO/bench/floor_proxy.py"
printf -v q_repo '%q' "$REPO"
slot() { # impl -> command template for the harness
  if [ "$1" = smg ]; then
    echo "env PYTHONSAFEPATH=1 PYTHONPATH=$q_repo $py -m smg launch --host 127.0.0.1 --port {port}" \
      "--policy round_robin --prometheus-host 127.0.0.1 --prometheus-port {metrics_port}" \
      "--log-level warn --worker-urls {worker}"
  else
    echo "$py $script --impl $1 --port {port} --upstream {worker}"
  fi
}
ours=${FLOOR_OURS:-aiohttp} ours_grpc=${FLOOR_OURS_GRPC:-raw}
OURS_CMD=$(slot "$ours") OURS_GRPC_CMD=$(slot "$ours_grpc")
export OURS_CMD OURS_GRPC_CMD
export SYSTEMS=${SYSTEMS:-"direct smg_rr1 ours1 ours_grpc1"}
export MODES=${MODES:-chat} CONC=${CONC:-1,64} REPS=${REPS:-3} DURATION=${DURATION:-4}
export RESULTS=${RESULTS:-$REPO/bench/results} TAG=${TAG:-floor}
echo "floor: ours1 = $ours, ours_grpc1 = $ours_grpc, MODES=$MODES"
exec "$SHARED_BENCH/run_anchor.sh" "$@"
