#!/usr/bin/env bash
# The whole check: install into .venv from requirements/test.lock, lint, format check, type check, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
# .venv from the lock files, after checking for Python >= 3.11 and venv (scripts/setup.sh)
./scripts/setup.sh test
.venv/bin/ruff check smg tests bench
.venv/bin/ruff format --check smg tests bench
.venv/bin/mypy smg
# the layer order, the simulator's isolation and zero import cycles (pyproject [tool.importlinter])
.venv/bin/lint-imports --no-cache --no-logo
# Bytecode (and pytest's rewritten test modules) cached under .venv: with PYTHONDONTWRITEBYTECODE
# set, every `smg` process the suite starts (and every xdist worker) compiles its imports again.
export PYTHONPYCACHEPREFIX="$PWD/.venv/pycache"
unset PYTHONDONTWRITEBYTECODE
# Two phases (tests/support/phases.py): everything but the `serial` tests over SMG_TEST_JOBS
# xdist workers (most tests wait on processes and timers, so 3 beat 2 cores' worth), each test
# module on one worker (its module-scoped processes are started once); then the `serial` tests
# alone, since they measure time, memory or CPU. "$@" narrows both; either failing fails the run.
# Exit 5 (nothing selected) in one phase is fine when the other ran tests.
phase() { SMG_TEST_PHASE=$1 .venv/bin/python -m pytest -q -p no:cacheprovider "${@:2}"; }
rc1=0 rc2=0
# --durations: the slowest tests in the log (where the suite's time goes)
phase parallel -n "${SMG_TEST_JOBS:-3}" --dist loadscope --durations=15 "$@" || rc1=$?
phase serial -n 0 "$@" || rc2=$?
if [ "$rc1" = 5 ] && [ "$rc2" = 5 ]; then exit 5; fi
[ "$rc1" = 5 ] && rc1=0
[ "$rc2" = 5 ] && rc2=0
if [ "$rc1" != 0 ]; then exit "$rc1"; fi
exit "$rc2"
