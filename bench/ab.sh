#!/usr/bin/env bash
# This checkout against an earlier revision, side by side in one run of the shared bench harness
# (../shared/bench/matrix.py: interleaved wrk runs, order rotated each rep, CPU-µs per request
# from the OS, added p50, peak RSS), in HTTP mode or gRPC mode.
#
# Targets, all in front of the same worker (http: the harness's fake_worker.py; grpc: its fake
# vLLM engine, fake_grpc_engine.py, with both gateways templating and tokenizing on its tiny
# tokenizer):
#   direct     the fake HTTP worker itself (the reference for +p50; in gRPC mode a reference only)
#   base       BASE_REV's gateway
#   ours       this checkout's gateway
#   ours_open  with KEY=1 only: this checkout with no key, loopback only (OPEN=0 leaves it out)
# KEY=1 gives base and ours `--api-key` and makes every request of theirs carry it (issue 10's
# "authenticated path against today's"; `bench/auth_cost.sh` is that).
#
# Usage (the harness's ./setup.sh must have been run once, for wrk, its venvs and tiny-tok):
#   bench/ab.sh http                        # BASE_REV=HEAD~1, chat + chat_stream, c=1,16,64
#   bench/ab.sh grpc
#   BASE_REV=df438de CONC=1,64 REPS=5 bench/ab.sh grpc
# Env: BASE_REV [HEAD~1]  KEY [0]  OPEN [1]  POLICY [round_robin]  MODES [chat,chat_stream]
#   CONC [1,16,64]  REPS [3]
#   DURATION [5]  WARMUP [1]  PORT_BASE [18700]  SMG_PYTHON [.venv/bin/python]
#   SHARED_BENCH [<repo>/../shared/bench]  SMG_BENCH_HOME [~/.cache/smg-bench]
#   RESULTS [<repo>/bench/results]
# Output: $RESULTS/ab-<mode>-<time>.jsonl (raw), .md (the harness summary + paired ratios).
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
SHARED_BENCH=${SHARED_BENCH:-$REPO/../shared/bench}
SMG_BENCH_HOME=${SMG_BENCH_HOME:-$HOME/.cache/smg-bench}
BENCH_PY=${VENV_BENCH:-$SMG_BENCH_HOME/venv-bench}/bin/python
SMG_PYTHON=${SMG_PYTHON:-$REPO/.venv/bin/python}
MODE=${1:-http}
case $MODE in http|grpc) ;; *) echo "usage: bench/ab.sh [http|grpc]" >&2; exit 2 ;; esac
BASE_REV=${BASE_REV:-HEAD~1}
TOKDIR=${TOKDIR:-$SMG_BENCH_HOME/tiny-tok}
GRPC_PY=${VENV_GRPC:-$SMG_BENCH_HOME/venv-grpc-proto}/bin/python
PORT_BASE=${PORT_BASE:-18700}
RESULTS=${RESULTS:-$REPO/bench/results}
SECRET=""; [ "${KEY:-0}" = 1 ] && SECRET="bench-key-$RANDOM$RANDOM"
STAMP=$(date +%Y%m%d-%H%M%S)
OUT=$RESULTS/ab-$MODE-$STAMP.jsonl
LOGDIR=$RESULTS/logs
mkdir -p "$RESULTS" "$LOGDIR"
[ -x "$BENCH_PY" ] || { echo "ab: $BENCH_PY missing: run $SHARED_BENCH/setup.sh" >&2; exit 1; }
command -v wrk >/dev/null || { echo "ab: wrk missing: run $SHARED_BENCH/setup.sh" >&2; exit 1; }

BASE_DIR=$(mktemp -d /tmp/smg-ab-base.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 0.5
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  git -C "$REPO" worktree remove --force "$BASE_DIR" 2>/dev/null || rm -rf "$BASE_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

git -C "$REPO" worktree add --detach -q "$BASE_DIR" "$BASE_REV"

wait_up() { # pid url [bearer]
  local i=0 auth=(); [ -n "${3:-}" ] && auth=(-H "Authorization: Bearer $3")
  while [ $i -lt 240 ]; do
    kill -0 "$1" 2>/dev/null || { echo "ab: process $1 died (logs: $LOGDIR)" >&2; exit 1; }
    if curl -sf -m 2 "${auth[@]}" "$2" 2>/dev/null | grep -q fake-model; then return 0; fi
    sleep 0.25; i=$((i+1))
  done
  echo "ab: timeout waiting for $2" >&2; exit 1
}

W=$((PORT_BASE+1))
"$BENCH_PY" "$SHARED_BENCH/fake_worker.py" --host 127.0.0.1 --port "$W" >"$LOGDIR/ab-worker.log" 2>&1 &
HPID=$!; WPID=$HPID; PIDS+=("$HPID")
i=0; until curl -sf -m 1 "http://127.0.0.1:$W/health" >/dev/null; do
  sleep 0.25; i=$((i+1)); [ $i -lt 120 ] || { echo "ab: worker did not start" >&2; exit 1; }
done

UPSTREAM="http://127.0.0.1:$W"; GW_ARGS=()
if [ "$MODE" = grpc ]; then
  [ -x "$GRPC_PY" ] || { echo "ab: $GRPC_PY missing: run $SHARED_BENCH/setup.sh" >&2; exit 1; }
  [ -f "$TOKDIR/tokenizer.json" ] || "$GRPC_PY" "$SHARED_BENCH/make_tokenizer.py" "$TOKDIR" >/dev/null
  E=$((PORT_BASE+51))
  "$GRPC_PY" "$SHARED_BENCH/fake_grpc_engine.py" --host 127.0.0.1 --port "$E" --tokenizer-dir "$TOKDIR" \
    >"$LOGDIR/ab-engine.log" 2>&1 &
  EPID=$!; PIDS+=("$EPID")
  i=0; until grep -q listening "$LOGDIR/ab-engine.log"; do
    sleep 0.25; i=$((i+1)); [ $i -lt 120 ] || { echo "ab: engine did not start" >&2; exit 1; }
  done
  UPSTREAM="grpc://127.0.0.1:$E"; GW_ARGS=(--model-path "$TOKDIR"); WPID=$EPID
fi

gateway() { # name dir port extra-flags...: start `python -m smg launch` from `dir`
  local name=$1 dir=$2 port=$3; shift 3
  # `env` execs python, so the pid measured is the gateway itself; PYTHONPATH picks the revision
  # (PYTHONSAFEPATH: `-m` would put the working directory, maybe another checkout, first).
  env PYTHONSAFEPATH=1 PYTHONPATH="$dir" "$SMG_PYTHON" -m smg launch --host 127.0.0.1 --port "$port" \
    --policy "${POLICY:-round_robin}" --prometheus-port 0 --log-level warn \
    --worker-urls "$UPSTREAM" "${GW_ARGS[@]}" "$@" >"$LOGDIR/ab-$name.log" 2>&1 &
  LAST=$!; PIDS+=("$LAST")
}
target() { # name port pid bearer
  TARGETS+=", \"$1\": {\"url\": \"http://127.0.0.1:$2\", \"auth\": \"$4\", \"pids\": {\"gateway\": [$3], \"worker\": [$WPID]}}"
}
keyflag=(); [ -n "$SECRET" ] && keyflag=(--api-key "$SECRET")

TARGETS="\"direct\": {\"url\": \"http://127.0.0.1:$W\", \"auth\": \"\", \"pids\": {\"worker\": [$HPID]}}"
gateway base "$BASE_DIR" $((PORT_BASE+11)) "${keyflag[@]}"
wait_up "$LAST" "http://127.0.0.1:$((PORT_BASE+11))/v1/models" "$SECRET"
target base $((PORT_BASE+11)) "$LAST" "$SECRET"
gateway ours "$REPO" $((PORT_BASE+12)) "${keyflag[@]}"
wait_up "$LAST" "http://127.0.0.1:$((PORT_BASE+12))/v1/models" "$SECRET"
target ours $((PORT_BASE+12)) "$LAST" "$SECRET"
if [ -n "$SECRET" ] && [ "${OPEN:-1}" = 1 ]; then
  gateway ours_open "$REPO" $((PORT_BASE+13))
  wait_up "$LAST" "http://127.0.0.1:$((PORT_BASE+13))/v1/models"
  target ours_open $((PORT_BASE+13)) "$LAST" ""
fi
echo "{ $TARGETS }" >"${OUT%.jsonl}.targets.json"

echo "ab ($MODE): base=$BASE_REV ($(git -C "$REPO" rev-parse --short "$BASE_REV")) ours=$(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet || echo '+dirty')"
"$BENCH_PY" "$SHARED_BENCH/matrix.py" run --targets "${OUT%.jsonl}.targets.json" \
  --modes "${MODES:-chat,chat_stream}" --conc "${CONC:-1,16,64}" --reps "${REPS:-3}" \
  --duration "${DURATION:-5}" --warmup "${WARMUP:-1}" --max-total-s 3600 --tag "ab-$MODE" --out "$OUT"
{
  "$BENCH_PY" "$SHARED_BENCH/matrix.py" summarize "$OUT" --baseline direct
  echo
  echo "## ours vs base (paired per rep)"
  "$SMG_PYTHON" "$REPO/bench/pair_ratios.py" "$OUT" --ours ours --ref base
} | tee "${OUT%.jsonl}.md"
echo "raw: $OUT  summary: ${OUT%.jsonl}.md  logs: $LOGDIR/ab-*.log"
