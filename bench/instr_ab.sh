#!/usr/bin/env bash
# User-space instructions per non-streaming chat request, this checkout against BASE_REV, counted
# by valgrind's callgrind in a real gateway process (HTTP mode, the shared harness's fake worker):
# a number that does not move with the box's load (three runs agree to ~0.2 %), unlike CPU-µs
# on a shared 2-core machine (per-rep ratios there spread 0.8-1.25x). It leaves out the kernel
# (syscalls, the loopback TCP path): that side is what bench/ab.sh's CPU-µs show.
#
# Per target: start the gateway under callgrind with instrumentation off (~15 s to come up),
# warm up with WARM requests, then RUNS times: zero, instrument N sequential keep-alive requests
# (c=1, http.client), dump; prints Ir per request for each run.
#
#   bench/instr_ab.sh                    # against where this branch left main
#   BASE_REV=main bench/instr_ab.sh
#   MODE=grpc bench/instr_ab.sh          # gRPC mode: the harness's fake vLLM engine behind
#                                        # (both gateways templating and tokenizing, tiny-tok)
#   STREAM=1 N=300 bench/instr_ab.sh     # per streamed request: max_tokens 64, SSE read to its end
#   STREAM=1 N=50 WORKER_ARGS="--token-rate 200" bench/instr_ab.sh   # one upstream read a token
#   STREAM=1 MAX_TOKENS=8 ...           # another length (default 64 streamed, 8 not)
#   (STREAM [0], WORKER_ARGS [] for the fake worker or engine. Syscall counts under valgrind are
#   not the gateway's own: its thread lock is a pipe; count them without it, from /proc/PID/io.)
# Env: BASE_REV [merge-base of HEAD and main]  N [1000]  RUNS [3]  WARM [300]  PORT_BASE [18700] (worker +51,
#   gateways +61/+62)  SHARED_BENCH [<repo>/../shared/bench]  SMG_BENCH_HOME [~/.cache/smg-bench]
#   SMG_PYTHON [.venv/bin/python]  OUT [/tmp/smg-instr-ab] (emptied first)  MODE [http]  CONC [1]
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
SHARED_BENCH=${SHARED_BENCH:-$REPO/../shared/bench}
SMG_BENCH_HOME=${SMG_BENCH_HOME:-$HOME/.cache/smg-bench}
SMG_PYTHON=${SMG_PYTHON:-$REPO/.venv/bin/python}
BENCH_PY=$SMG_BENCH_HOME/venv-bench/bin/python
BASE_REV=${BASE_REV:-$(git -C "$REPO" merge-base HEAD main)}; N=${N:-1000}; RUNS=${RUNS:-3}; WARM=${WARM:-300}
PORT_BASE=${PORT_BASE:-18700}; OUT=${OUT:-/tmp/smg-instr-ab}; MODE=${MODE:-http}
CONC=${CONC:-1}  # clients at once (keep-alive connections), N split between them (N % CONC == 0)
case $MODE in http|grpc) ;; *) echo "instr_ab: MODE is http or grpc" >&2; exit 2 ;; esac
GRPC_PY=${VENV_GRPC:-$SMG_BENCH_HOME/venv-grpc-proto}/bin/python
TOKDIR=${TOKDIR:-$SMG_BENCH_HOME/tiny-tok}
WORKER_ARGS=${WORKER_ARGS:-}; export STREAM=${STREAM:-0} MAX_TOKENS=${MAX_TOKENS:-}
W=$((PORT_BASE+51))
command -v valgrind >/dev/null && command -v callgrind_control >/dev/null \
  || { echo "instr_ab: valgrind not found" >&2; exit 1; }
for p in "$W" $((PORT_BASE+61)) $((PORT_BASE+62)); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    echo "instr_ab: 127.0.0.1:$p is busy; pick another PORT_BASE" >&2; exit 1; fi
done
rm -rf "$OUT"; mkdir -p "$OUT"
BASE_DIR=$(mktemp -d "$OUT/base.XXXX")
git -C "$REPO" worktree add --detach "$BASE_DIR" "$BASE_REV" >/dev/null
PIDS=()
cleanup() {
  local p; for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; wait 2>/dev/null || true
  git -C "$REPO" worktree remove --force "$BASE_DIR" 2>/dev/null || true
}
trap cleanup EXIT

cat >"$OUT/drive.py" <<'PY'
import http.client, json, os, sys, threading
port, n, conc = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
stream = os.environ.get("STREAM") == "1"
max_tokens = int(os.environ.get("MAX_TOKENS") or (64 if stream else 8))
body = json.dumps({"model": "fake-model", "max_tokens": max_tokens, "stream": stream,
                   "messages": [{"role": "user", "content": "Hello, how are you?"}]})
def client(k):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    for _ in range(k):
        c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        assert r.status == 200, r.status
threads = [threading.Thread(target=client, args=(n // conc,)) for _ in range(conc)]
for t in threads: t.start()
for t in threads: t.join()
PY

UPSTREAM="http://127.0.0.1:$W"; GW_ARGS=()
if [ "$MODE" = grpc ]; then
  [ -f "$TOKDIR/tokenizer.json" ] || "$GRPC_PY" "$SHARED_BENCH/make_tokenizer.py" "$TOKDIR" >/dev/null
  "$GRPC_PY" "$SHARED_BENCH/fake_grpc_engine.py" --host 127.0.0.1 --port "$W" \
    --tokenizer-dir "$TOKDIR" $WORKER_ARGS >"$OUT/worker.log" 2>&1 &
  UPSTREAM="grpc://127.0.0.1:$W"; GW_ARGS=(--model-path "$TOKDIR")
else
  "$BENCH_PY" "$SHARED_BENCH/fake_worker.py" --host 127.0.0.1 --port "$W" $WORKER_ARGS >"$OUT/worker.log" 2>&1 &
fi
PIDS+=($!)

measure() { # name dir port
  local name=$1 dir=$2 port=$3 pid i
  env PYTHONSAFEPATH=1 PYTHONPATH="$dir" valgrind --tool=callgrind --instr-atstart=no \
    --callgrind-out-file="$OUT/$name.%p.out" "$SMG_PYTHON" -m smg launch --host 127.0.0.1 \
    --port "$port" --policy round_robin --prometheus-port 0 --log-level warn \
    --worker-urls "$UPSTREAM" "${GW_ARGS[@]}" >"$OUT/$name.log" 2>&1 &
  pid=$!; PIDS+=("$pid")
  for i in $(seq 1 150); do
    curl -sf -m 5 "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
      -d '{"model":"fake-model","messages":[{"role":"user","content":"hi"}]}' >/dev/null && break
    [ "$i" -lt 150 ] || { echo "instr_ab: $name did not come up" >&2; exit 1; }
    sleep 2
  done
  "$BENCH_PY" "$OUT/drive.py" "$port" "$WARM" 1
  for i in $(seq 1 "$RUNS"); do
    callgrind_control -z "$pid" >/dev/null
    callgrind_control -i on "$pid" >/dev/null
    "$BENCH_PY" "$OUT/drive.py" "$port" "$N" "$CONC"
    callgrind_control -i off "$pid" >/dev/null
    callgrind_control -d "run$i" "$pid" >/dev/null
    sleep 0.5
  done
  kill -9 "$pid"; wait "$pid" 2>/dev/null || true  # the counts are dumped: no drain needed
  for f in $(ls "$OUT/$name.$pid.out".* | sort -t. -k4 -n); do
    awk -v n="$N" -v name="$name" '/^totals:/ {printf "%s %.0f Ir/request\n", name, $2 / n}' "$f"
  done
}
measure base "$BASE_DIR" $((PORT_BASE+61)) | tee "$OUT/base.txt"
measure ours "$REPO" $((PORT_BASE+62)) | tee "$OUT/ours.txt"
