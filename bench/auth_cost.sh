#!/usr/bin/env bash
# CPU per request of the authenticated path, this checkout against an earlier revision, side by
# side in one run of the shared bench harness (../shared/bench/matrix.py: interleaved wrk runs,
# order rotated each rep, CPU-µs per request from the OS, added p50, peak RSS).
#
# Targets, all in front of one fake OpenAI worker (the harness's fake_worker.py):
#   direct     the worker itself (reference)
#   base_key   BASE_REV's gateway with --api-key (the old path: one `!=` on the raw key)
#   ours_key   this checkout's gateway with --api-key (the new path: hashed-key lookup, route
#              classes, tenant identity, ...) — every request of both carries the bearer key
#   ours_open  this checkout's gateway with no key, loopback only (left out with OPEN=0)
#
# Usage (the harness's ./setup.sh must have been run once, for wrk and its venv):
#   bench/auth_cost.sh                          # BASE_REV=7fd1313, chat,chat_stream, c=1,16,64
#   BASE_REV=HEAD~3 CONC=1,64 REPS=5 bench/auth_cost.sh
# Env: BASE_REV [7fd1313: main before issue 10]  MODES [chat,chat_stream]  CONC [1,16,64]
#   REPS [3]  DURATION [5]  WARMUP [1]  PORT_BASE [18700]  OPEN [1]  SMG_PYTHON [.venv/bin/python]
#   SHARED_BENCH [<repo>/../shared/bench]  SMG_BENCH_HOME [~/.cache/smg-bench]
#   RESULTS [<repo>/bench/results]
# Output: $RESULTS/auth-<time>.jsonl (raw), .md (the harness summary + paired ratios).
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
SHARED_BENCH=${SHARED_BENCH:-$REPO/../shared/bench}
SMG_BENCH_HOME=${SMG_BENCH_HOME:-$HOME/.cache/smg-bench}
BENCH_PY=${VENV_BENCH:-$SMG_BENCH_HOME/venv-bench}/bin/python
SMG_PYTHON=${SMG_PYTHON:-$REPO/.venv/bin/python}
BASE_REV=${BASE_REV:-7fd1313}
PORT_BASE=${PORT_BASE:-18700}
RESULTS=${RESULTS:-$REPO/bench/results}
KEY="bench-key-$RANDOM$RANDOM"
STAMP=$(date +%Y%m%d-%H%M%S)
OUT=$RESULTS/auth-$STAMP.jsonl
LOGDIR=$RESULTS/logs
mkdir -p "$RESULTS" "$LOGDIR"
[ -x "$BENCH_PY" ] || { echo "auth_cost: $BENCH_PY missing: run $SHARED_BENCH/setup.sh" >&2; exit 1; }
command -v wrk >/dev/null || { echo "auth_cost: wrk missing: run $SHARED_BENCH/setup.sh" >&2; exit 1; }

BASE_DIR=$(mktemp -d /tmp/smg-auth-base.XXXXXX)
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
    kill -0 "$1" 2>/dev/null || { echo "auth_cost: process $1 died (logs: $LOGDIR)" >&2; exit 1; }
    if curl -sf -m 2 "${auth[@]}" "$2" 2>/dev/null | grep -q fake-model; then return 0; fi
    sleep 0.25; i=$((i+1))
  done
  echo "auth_cost: timeout waiting for $2" >&2; exit 1
}

W=$((PORT_BASE+1))
"$BENCH_PY" "$SHARED_BENCH/fake_worker.py" --host 127.0.0.1 --port "$W" >"$LOGDIR/auth-worker.log" 2>&1 &
WPID=$!; PIDS+=("$WPID")
i=0; until curl -sf -m 1 "http://127.0.0.1:$W/health" >/dev/null; do
  sleep 0.25; i=$((i+1)); [ $i -lt 120 ] || { echo "auth_cost: worker did not start" >&2; exit 1; }
done

gateway() { # name dir port extra-flags...: start `python -m smg launch` from `dir`
  local name=$1 dir=$2 port=$3; shift 3
  # `env` execs python, so the pid measured is the gateway itself; PYTHONPATH picks the revision.
  env PYTHONPATH="$dir" "$SMG_PYTHON" -m smg launch --host 127.0.0.1 --port "$port" \
    --policy round_robin --prometheus-port 0 --log-level warn \
    --worker-urls "http://127.0.0.1:$W" "$@" >"$LOGDIR/auth-$name.log" 2>&1 &
  LAST=$!; PIDS+=("$LAST")
}

TARGETS="\"direct\": {\"url\": \"http://127.0.0.1:$W\", \"auth\": \"\", \"pids\": {\"worker\": [$WPID]}}"
gateway base_key "$BASE_DIR" $((PORT_BASE+11)) --api-key "$KEY"
wait_up "$LAST" "http://127.0.0.1:$((PORT_BASE+11))/v1/models" "$KEY"
TARGETS+=", \"base_key\": {\"url\": \"http://127.0.0.1:$((PORT_BASE+11))\", \"auth\": \"$KEY\", \"pids\": {\"gateway\": [$LAST], \"worker\": [$WPID]}}"
gateway ours_key "$REPO" $((PORT_BASE+12)) --api-key "$KEY"
wait_up "$LAST" "http://127.0.0.1:$((PORT_BASE+12))/v1/models" "$KEY"
TARGETS+=", \"ours_key\": {\"url\": \"http://127.0.0.1:$((PORT_BASE+12))\", \"auth\": \"$KEY\", \"pids\": {\"gateway\": [$LAST], \"worker\": [$WPID]}}"
if [ "${OPEN:-1}" = 1 ]; then
  gateway ours_open "$REPO" $((PORT_BASE+13))
  wait_up "$LAST" "http://127.0.0.1:$((PORT_BASE+13))/v1/models"
  TARGETS+=", \"ours_open\": {\"url\": \"http://127.0.0.1:$((PORT_BASE+13))\", \"auth\": \"\", \"pids\": {\"gateway\": [$LAST], \"worker\": [$WPID]}}"
fi
echo "{ $TARGETS }" >"${OUT%.jsonl}.targets.json"

echo "auth_cost: base=$BASE_REV ($(git -C "$REPO" rev-parse --short "$BASE_REV")) ours=$(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet || echo '+dirty')"
"$BENCH_PY" "$SHARED_BENCH/matrix.py" run --targets "${OUT%.jsonl}.targets.json" \
  --modes "${MODES:-chat,chat_stream}" --conc "${CONC:-1,16,64}" --reps "${REPS:-3}" \
  --duration "${DURATION:-5}" --warmup "${WARMUP:-1}" --max-total-s 3600 --tag auth --out "$OUT"
{
  "$BENCH_PY" "$SHARED_BENCH/matrix.py" summarize "$OUT" --baseline direct
  echo
  echo "## ours_key vs base_key (paired per rep)"
  "$SMG_PYTHON" "$REPO/bench/pair_ratios.py" "$OUT" --ours ours_key --ref base_key
} | tee "${OUT%.jsonl}.md"
echo "raw: $OUT  summary: ${OUT%.jsonl}.md  logs: $LOGDIR/auth-*.log"
