#!/usr/bin/env bash
# Side by side: our gateway vs the Rust Shepherd Model Gateway 1.13.0 vs the fake backend hit
# directly (direct), through the shared bench harness (run_anchor.sh): the same interleaved wrk
# matrix, CPU-µs per request from the OS, added p50, peak RSS. Two modes, same harness:
#   http  ours1 vs smg_rr1: both relay to the fake OpenAI HTTP worker.
#   grpc  ours_grpc1 vs smg_grpc_rr1: both template, tokenize, call the fake vLLM gRPC engine
#         (fake_grpc_engine.py, smg-grpc-proto) and detokenize, with the harness's tiny
#         tokenizer (ChatML template); `direct` is still the HTTP worker (a reference only).
#
# Usage (from anywhere; the harness's ./setup.sh must have been run once):
#   bench/vs_rust.sh                                   # HTTP mode, the full matrix, ~8 min
#   bench/vs_rust.sh grpc                              # gRPC mode, c=1,16,64, ~6 min
#   CONC=1,64 REPS=3 DURATION=3 bench/vs_rust.sh       # quicker
#   SYSTEMS="direct ours1 ours_grpc1" bench/vs_rust.sh # both of ours in one matrix
#
# Env knobs [defaults here: http mode / grpc mode]; everything else run_anchor.sh reads passes
# through unchanged (SMG_BENCH_HOME, DURATION [5], WARMUP [1], MAX_TOTAL_S, PORT_BASE, OUT, TAG,
# BASELINE, SMG_LOG_LEVEL, SMG_ARGS, WORKER_ARGS, ENGINE_ARGS, TOKDIR, VENV_*):
#   SYSTEMS [direct smg_rr1 ours1 / direct smg_grpc_rr1 ours_grpc1]
#   MODES [chat,chat_stream]  CONC [1,16,64,256 / 1,16,64]  REPS [3]
#   SHARED_BENCH [<repo>/../shared/bench]  where run_anchor.sh lives
#   SMG_PYTHON [<repo>/.venv/bin/python]   the interpreter that runs our gateway
#   OURS_LOG_LEVEL [warn]  OURS_POLICY [round_robin]
#   OURS_ARGS []  extra `smg launch` flags for ours1. (Until issue 10 this defaulted to
#     --cb-failure-threshold 1000000: a client hanging up mid-answer, as wrk does at the end of
#     every run, counted as a worker failure and opened the breaker. It no longer does.)
#   OURS_GRPC_ARGS []  extra `smg launch` flags for ours_grpc1 (no breaker workaround: not needed)
#   OURS_CMD, OURS_GRPC_CMD  override the whole command templates (placeholders: see harness)
#   RESULTS [<repo>/bench/results]  raw JSON lines, summary and gateway logs (gitignored)
# Output: $RESULTS/anchor-<time>.jsonl (raw), .md (the summary tables), logs/<system>.log.
# Paired ratios: bench/pair_ratios.py F.jsonl [--ours ours_grpc1 --ref smg_grpc_rr1].
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
SHARED_BENCH=${SHARED_BENCH:-$REPO/../shared/bench}
SMG_PYTHON=${SMG_PYTHON:-$REPO/.venv/bin/python}
MODE=http
case ${1:-} in
  http|grpc) MODE=$1; shift ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
esac

[ -x "$SHARED_BENCH/run_anchor.sh" ] || {
  echo "vs_rust: no run_anchor.sh in $SHARED_BENCH (set SHARED_BENCH)" >&2; exit 1; }
[ -x "$SMG_PYTHON" ] || { echo "vs_rust: $SMG_PYTHON not found (set SMG_PYTHON)" >&2; exit 1; }

# The harness runs a template as `bash -c "exec <template>"`: quote the paths we put in it, and
# start python through `env` (which execs it) so the measured pid is the gateway itself. PYTHONPATH
# makes `-m smg` load this checkout even when the venv's smg is installed from elsewhere.
printf -v q_py '%q' "$SMG_PYTHON"
printf -v q_repo '%q' "$REPO"
SMG_LAUNCH="env PYTHONSAFEPATH=1 PYTHONPATH=$q_repo $q_py -m smg launch --host 127.0.0.1 --port {port} \
--policy ${OURS_POLICY:-round_robin} --prometheus-host 127.0.0.1 --prometheus-port {metrics_port} \
--log-level ${OURS_LOG_LEVEL:-warn}"
export OURS_CMD=${OURS_CMD:-"$SMG_LAUNCH --worker-urls {worker} ${OURS_ARGS:-}"}
export OURS_GRPC_CMD=${OURS_GRPC_CMD:-"$SMG_LAUNCH --worker-urls {grpc_worker} \
--model-path {tokenizer_dir} ${OURS_GRPC_ARGS:-}"}
export RESULTS=${RESULTS:-$REPO/bench/results}  # gitignored; logs go to $RESULTS/logs
if [ "$MODE" = grpc ]; then
  export SYSTEMS=${SYSTEMS:-"direct smg_grpc_rr1 ours_grpc1"}
  export CONC=${CONC:-1,16,64}
else
  export SYSTEMS=${SYSTEMS:-"direct smg_rr1 ours1"}
  export CONC=${CONC:-1,16,64,256}
fi
export MODES=${MODES:-chat,chat_stream}
export REPS=${REPS:-3}

echo "vs_rust ($MODE): SYSTEMS='$SYSTEMS' MODES=$MODES CONC=$CONC REPS=$REPS" \
  "DURATION=${DURATION:-5} WARMUP=${WARMUP:-1}"
exec "$SHARED_BENCH/run_anchor.sh" "$@"
