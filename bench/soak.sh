#!/usr/bin/env bash
# The soak (issue 15): the bench matrix repeated for SOAK_S seconds (default 30 minutes), all
# targets interleaved on ONE fake worker (and one fake gRPC engine), each gateway started ONCE
# and loaded for the whole time, so its RSS growth means something. It runs the shared harness
# (via bench/vs_rust.sh: run_anchor.sh starts every worker, engine and gateway once, runs
# matrix.py over REPS reps until MAX_TOTAL_S, then stops them) with REPS unbounded and
# MAX_TOTAL_S=SOAK_S, then bench/soak_summary.py judges the raw lines.
#
# Usage (the harness's ./setup.sh must have been run once):
#   bench/soak.sh                      # 30 minutes: the must-show (run it on a quiet box)
#   SOAK_S=180 DURATION=2 bench/soak.sh  # a short check of the script itself
#
# Env knobs [defaults]; everything else vs_rust.sh / run_anchor.sh read passes through
# (SMG_BENCH_HOME, WARMUP [1], PORT_BASE, OURS_ARGS, OURS_GRPC_ARGS, SMG_PYTHON, ...):
#   SOAK_S [1800]  how long the matrix repeats (run_anchor.sh's MAX_TOTAL_S)
#   SYSTEMS [direct smg_rr1 ours1 smg_grpc_rr1 ours_grpc1]  MODES [chat,chat_stream]  CONC [1,64]
#   DURATION [3]  seconds of load per run (a rep is targets x modes x conc runs: ~90 s)
#   MAX_RSS_GROWTH_PCT [10]  RESULTS [<repo>/bench/results]  OUT [$RESULTS/soak-<time>.jsonl]
# Output: $OUT (raw, one line per run), ${OUT%.jsonl}.md (the harness's tables),
# ${OUT%.jsonl}.soak.md (per target: requests, non-2xx, socket errors; RSS of ours at the first
# and last rep, peak, growth %; the verdict). Exit 1 when one of ours has any error or its RSS
# grows >= MAX_RSS_GROWTH_PCT % (or the harness itself failed).
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
case ${1:-} in
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
esac
SOAK_S=${SOAK_S:-1800}
export SYSTEMS=${SYSTEMS:-"direct smg_rr1 ours1 smg_grpc_rr1 ours_grpc1"}
export MODES=${MODES:-chat,chat_stream}
export CONC=${CONC:-1,64}
export DURATION=${DURATION:-3}
export REPS=1000000  # unbounded: MAX_TOTAL_S ends the soak
export MAX_TOTAL_S=$SOAK_S
export RESULTS=${RESULTS:-$REPO/bench/results}
export OUT=${OUT:-$RESULTS/soak-$(date +%Y%m%d-%H%M%S).jsonl}
mkdir -p "$RESULTS"
PY=${SUMMARY_PYTHON:-$(command -v python3)}

echo "soak: ${SOAK_S}s of SYSTEMS='$SYSTEMS' MODES=$MODES CONC=$CONC DURATION=$DURATION -> $OUT"
rc=0
"$REPO/bench/vs_rust.sh" || rc=$?
[ -s "$OUT" ] || { echo "soak: the harness wrote no results (exit $rc)" >&2; exit 1; }
verdict=0
"$PY" "$REPO/bench/soak_summary.py" "$OUT" --max-rss-growth-pct "${MAX_RSS_GROWTH_PCT:-10}" \
  --out "${OUT%.jsonl}.soak.md" || verdict=$?
[ "$rc" -eq 0 ] || { echo "soak: the harness exited $rc" >&2; exit 1; }
exit "$verdict"
