#!/usr/bin/env bash
# Side by side: our gateway (ours1) vs the Rust Shepherd Model Gateway 1.13.0 (smg_rr1) vs the
# fake worker hit directly (direct), through the shared bench harness (run_anchor.sh): the same
# interleaved wrk matrix, CPU-µs per request from the OS, added p50, peak RSS.
#
# Usage (from anywhere; the harness's ./setup.sh must have been run once):
#   bench/vs_rust.sh                                   # the full matrix, ~8 min
#   CONC=1,64 REPS=3 DURATION=3 bench/vs_rust.sh       # quicker
#   SYSTEMS="direct ours1" MODES=chat bench/vs_rust.sh # ours alone
#
# Env knobs [defaults here]; everything else run_anchor.sh reads passes through unchanged
# (SMG_BENCH_HOME, DURATION [5], WARMUP [1], MAX_TOTAL_S, PORT_BASE, OUT, RESULTS, TAG, BASELINE,
# SMG_LOG_LEVEL, SMG_ARGS, WORKER_ARGS, VENV_*):
#   SYSTEMS [direct smg_rr1 ours1]  MODES [chat,chat_stream]  CONC [1,16,64,256]  REPS [3]
#   SHARED_BENCH [<repo>/../shared/bench]  where run_anchor.sh lives
#   SMG_PYTHON [<repo>/.venv/bin/python]   the interpreter that runs our gateway
#   OURS_LOG_LEVEL [warn]  OURS_POLICY [round_robin]
#   OURS_ARGS [--cb-failure-threshold 1000000]  extra flags for `smg launch`. The default works
#     around a gateway bug (2026-11-22): a client that hangs up mid-answer (wrk does, with every
#     open request, at the end of each run) is counted as a worker failure, so the breaker opens
#     and later runs measure 503s. Set OURS_ARGS= (empty) to measure without the workaround.
#   OURS_CMD  overrides the whole command template ({port} {metrics_port} {worker}, see harness)
#   RESULTS [<repo>/bench/results]  raw JSON lines, summary and gateway logs (gitignored)
# Output: $RESULTS/anchor-<time>.jsonl (raw), .md (the summary tables), logs/ours1.log.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
SHARED_BENCH=${SHARED_BENCH:-$REPO/../shared/bench}
SMG_PYTHON=${SMG_PYTHON:-$REPO/.venv/bin/python}

[ -x "$SHARED_BENCH/run_anchor.sh" ] || {
  echo "vs_rust: no run_anchor.sh in $SHARED_BENCH (set SHARED_BENCH)" >&2; exit 1; }
[ -x "$SMG_PYTHON" ] || { echo "vs_rust: $SMG_PYTHON not found (set SMG_PYTHON)" >&2; exit 1; }

# The harness runs the template as `bash -c "exec <template>"`: quote the paths we put in it, and
# start python through `env` (which execs it) so the measured pid is the gateway itself. PYTHONPATH
# makes `-m smg` load this checkout even when the venv's smg is installed from elsewhere.
CB_WORKAROUND="--cb-failure-threshold 1000000"  # see OURS_ARGS above
printf -v q_py '%q' "$SMG_PYTHON"
printf -v q_repo '%q' "$REPO"
export OURS_CMD=${OURS_CMD:-"env PYTHONPATH=$q_repo $q_py -m smg launch --host 127.0.0.1 --port {port} \
--worker-urls {worker} --policy ${OURS_POLICY:-round_robin} --prometheus-host 127.0.0.1 \
--prometheus-port {metrics_port} --log-level ${OURS_LOG_LEVEL:-warn} ${OURS_ARGS-$CB_WORKAROUND}"}
export RESULTS=${RESULTS:-$REPO/bench/results}  # gitignored; logs go to $RESULTS/logs
export SYSTEMS=${SYSTEMS:-"direct smg_rr1 ours1"}
export MODES=${MODES:-chat,chat_stream}
export CONC=${CONC:-1,16,64,256}
export REPS=${REPS:-3}

echo "vs_rust: SYSTEMS='$SYSTEMS' MODES=$MODES CONC=$CONC REPS=$REPS DURATION=${DURATION:-5} WARMUP=${WARMUP:-1}"
exec "$SHARED_BENCH/run_anchor.sh" "$@"
