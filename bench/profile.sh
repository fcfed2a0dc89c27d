#!/usr/bin/env bash
# py-spy our gateway under closed-loop wrk load, in gRPC mode (the shared harness's fake vLLM
# gRPC engine, fake_grpc_engine.py, tiny tokenizer) or HTTP mode (its fake OpenAI worker,
# fake_worker.py): starts the backend and `smg launch` in front of it on 127.0.0.1, drives
# `wrk -cC` for WARMUP then DURATION+2 s, records py-spy raw stacks for DURATION s, prints their
# summary (bench/stacks.py), draws a flame graph (SVG) from the same stacks, and stops what it
# started (by pid). py-spy: `pip install py-spy` into the venv (SPY= to point elsewhere).
#
#   bench/profile.sh                             # gRPC, chat_stream, c=16, 15 s at 200 Hz
#   TRANSPORT=http MODE=chat CONC=64 bench/profile.sh
#   NATIVE=1 bench/profile.sh                    # py-spy --native (C and Rust frames too)
#   MODE=chat CONC=64 DURATION=10 bench/profile.sh
#
# Env [defaults]: TRANSPORT [grpc] (or http), MODE [chat_stream] (chat: max_tokens 8; chat_stream: 64 tokens, as the
# harness), CONC [16], DURATION [15], RATE [200], NATIVE [], WARMUP [2], PORT_BASE [18700]
# (backend +51, gateway +101, metrics +1101), SMG_BENCH_HOME [~/.cache/smg-bench], SHARED_BENCH,
# SMG_PYTHON, RESULTS [<repo>/bench/results], OURS_GRPC_ARGS (extra `smg launch` flags), SPY.
# Output: $RESULTS/profile-<transport>-<mode>-c<C>[-native]-<time>.txt (raw), .md (summary),
# .svg (flame graph), .log.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
SHARED_BENCH=${SHARED_BENCH:-$REPO/../shared/bench}
SMG_PYTHON=${SMG_PYTHON:-$REPO/.venv/bin/python}
SMG_BENCH_HOME=${SMG_BENCH_HOME:-$HOME/.cache/smg-bench}
TOKDIR=${TOKDIR:-$SMG_BENCH_HOME/tiny-tok}
MODE=${MODE:-chat_stream}; CONC=${CONC:-16}; DUR=${DURATION:-15}; RATE=${RATE:-200}
WARMUP=${WARMUP:-2}; PORT_BASE=${PORT_BASE:-18700}; RESULTS=${RESULTS:-$REPO/bench/results}
EP=$((PORT_BASE+51)); GP=$((PORT_BASE+101))
SPY=${SPY:-"$(dirname "$SMG_PYTHON")/py-spy"}
TRANSPORT=${TRANSPORT:-grpc}
case $TRANSPORT in grpc|http) ;; *) echo "profile: TRANSPORT must be grpc or http" >&2; exit 1 ;; esac
for f in "$SMG_BENCH_HOME/venv-grpc-proto/bin/python" "$SPY" "$SMG_PYTHON"; do
  [ -x "$f" ] || { echo "profile: $f not found" >&2; exit 1; }
done
command -v wrk >/dev/null || { echo "profile: wrk not found" >&2; exit 1; }
[ "$TRANSPORT" = http ] || [ -f "$TOKDIR/tokenizer.json" ] || { echo "profile: no $TOKDIR (run setup.sh)" >&2; exit 1; }
for p in "$EP" "$GP" $((GP+1000)); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    echo "profile: 127.0.0.1:$p is busy; pick another PORT_BASE" >&2; exit 1; fi
done

case $MODE in
  chat) BODY='{"model": "fake-model", "messages": [{"role": "user", "content": "Hello, how are you?"}], "max_tokens": 8}' ;;
  chat_stream) BODY='{"model": "fake-model", "messages": [{"role": "user", "content": "Hello, how are you?"}], "max_tokens": 64, "stream": true}' ;;
  *) echo "profile: MODE must be chat or chat_stream" >&2; exit 1 ;;
esac
mkdir -p "$RESULTS"
STEM="$RESULTS/profile-$TRANSPORT-$MODE-c$CONC${NATIVE:+-native}-$(date +%Y%m%d-%H%M%S)"
LOG="$STEM.log"
PIDS=()
cleanup() { local p; for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "$TRANSPORT" = grpc ]; then
  "$SMG_BENCH_HOME/venv-grpc-proto/bin/python" "$SHARED_BENCH/fake_grpc_engine.py" --host 127.0.0.1 \
    --port "$EP" --tokenizer-dir "$TOKDIR" >>"$LOG" 2>&1 &
  BACKEND=(--worker-urls "grpc://127.0.0.1:$EP" --model-path "$TOKDIR")
else
  "$SMG_BENCH_HOME/venv-bench/bin/python" "$SHARED_BENCH/fake_worker.py" --host 127.0.0.1 \
    --port "$EP" >>"$LOG" 2>&1 &
  BACKEND=(--worker-urls "http://127.0.0.1:$EP")
fi
PIDS+=($!)
env PYTHONSAFEPATH=1 PYTHONPATH="$REPO" "$SMG_PYTHON" -m smg launch --host 127.0.0.1 --port "$GP" "${BACKEND[@]}" \
  --policy round_robin --prometheus-host 127.0.0.1 --prometheus-port $((GP+1000)) \
  --log-level warn ${OURS_GRPC_ARGS:-} >>"$LOG" 2>&1 &
GW=$!; PIDS+=("$GW")
for i in $(seq 1 240); do
  curl -sf -m 2 "http://127.0.0.1:$GP/v1/models" 2>/dev/null | grep -q fake-model && break
  kill -0 "$GW" 2>/dev/null || { echo "gateway exited; see $LOG" >&2; exit 1; }
  [ "$i" = 240 ] && { echo "gateway not ready after 60 s; see $LOG" >&2; exit 1; }
  sleep 0.25
done

URL="http://127.0.0.1:$GP/v1/chat/completions"
export BODY
wrk -t1 -c"$CONC" -d"${WARMUP}s" -s "$SHARED_BENCH/wrk/post.lua" "$URL" >/dev/null
wrk -t1 -c"$CONC" -d"$((DUR+2))s" --timeout=10s -s "$SHARED_BENCH/wrk/post.lua" "$URL" \
  >"$STEM.wrk" 2>&1 &
WRK=$!; PIDS+=("$WRK")
sleep 1
ticks() { local t; for t in /proc/"$GW"/task/*; do echo "${t##*/} $(cut -d')' -f2 "$t/stat" | awk '{print $12+$13}')"; done | sort; }
ticks >"$STEM.cpu0"; T0=$(date +%s.%N)
"$SPY" record -p "$GW" -d "$DUR" -r "$RATE" --format raw -o "$STEM.txt" ${NATIVE:+--native} \
  >>"$LOG" 2>&1
ticks >"$STEM.cpu1"; T1=$(date +%s.%N)
wait "$WRK" || true
grep -E "Requests/sec|Non-2xx|Socket errors" "$STEM.wrk" || true
# CPU per thread while py-spy sampled (py-spy sees Python threads only; gRPC core's C threads
# show up here). py-spy pauses the process per sample, so these run a little high.
join "$STEM.cpu0" "$STEM.cpu1" | awk -v gw="$GW" -v hz="$(getconf CLK_TCK)" -v t0="$T0" -v t1="$T1" '
  { pct = 100 * ($3 - $2) / hz / (t1 - t0); all += pct
    if ($1 == gw) main = pct; else if (pct >= 0.5) { n++; other += pct } }
  END { printf "gateway CPU while sampled: %.0f%% of a core: main thread %.0f%%, %d other threads %.0f%%\n", all, main, n, other }' \
  | tee "$STEM.threads"
rm -f "$STEM.cpu0" "$STEM.cpu1"
# Main thread only: py-spy counts the idle pool and poller threads as busy (/proc says otherwise).
"$SMG_PYTHON" "$REPO/bench/stacks.py" "$STEM.txt" --top 20 --main-thread ${NATIVE:+--drop-idle} \
  | tee "$STEM.md"
"$SMG_PYTHON" "$REPO/bench/flame.py" "$STEM.txt" -o "$STEM.svg" \
  --title "smg $TRANSPORT mode, $MODE, c=$CONC, $DUR s at $RATE Hz"
echo "raw: $STEM.txt  summary: $STEM.md  flame graph: $STEM.svg  wrk: $STEM.wrk  logs: $LOG"
