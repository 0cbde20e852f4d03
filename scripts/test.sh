#!/usr/bin/env bash
# Install everything the tests need into .venv and run them. Used by README and .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
# DeepSpeed's config parser (tests only) needs torch; the CPU build 2.13.0 is enough.
python -c "import torch" 2>/dev/null || python -m pip install -q "torch==2.13.0"
python -c "import deepspeed" 2>/dev/null || DS_BUILD_OPS=0 python -m pip install -q --no-build-isolation "deepspeed==0.16.2"
python -m pip install -q -e ".[test,postgres]"
if [ -x scripts/postgres.sh ] && [ "${PLANNER_SKIP_POSTGRES:-0}" != "1" ]; then
  eval "$(bash scripts/postgres.sh)" || echo "PostgreSQL unavailable: the multi-worker test will be skipped" >&2
  if [ -n "${PLANNER_TEST_POSTGRES_STARTED:-}" ]; then
    # stop the server this run started (one that was already running is left alone)
    trap 'bash scripts/postgres.sh stop "$PLANNER_TEST_POSTGRES_STARTED"' EXIT
  fi
fi
python -m pytest "$@"
