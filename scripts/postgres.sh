#!/usr/bin/env bash
# Start a throw-away PostgreSQL server on 127.0.0.1 for the multi-worker Optuna test.
# Installs Debian's postgresql package when missing. Prints the lines to eval:
#   export PLANNER_TEST_POSTGRES=postgresql://postgres@127.0.0.1:PORT/postgres
#   export PLANNER_TEST_POSTGRES_STARTED=/tmp/planner-pg.XXXXXX   (only when this call started it)
# `bash scripts/postgres.sh stop DIR` stops the server started in DIR and removes DIR (scripts/test.sh
# does so when the run ends); a server that was already running is left alone.
set -euo pipefail
PORT=${PLANNER_PG_PORT:-55432}
if [ "${1:-}" = stop ]; then
  DATA=${2:?usage: postgres.sh stop DIR}
  case "$DATA" in /tmp/planner-pg.*) ;; *) echo "postgres.sh: refusing to stop $DATA" >&2; exit 2 ;; esac
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  RUN=""
  [ "$(id -u)" = 0 ] && RUN="runuser -u postgres --"
  if [ -n "$PGBIN" ] && [ -d "$DATA/db" ]; then
    $RUN "$PGBIN/pg_ctl" -D "$DATA/db" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$DATA"
  exit 0
fi
if command -v pg_isready >/dev/null 2>&1 && pg_isready -q -h 127.0.0.1 -p "$PORT"; then
  echo "export PLANNER_TEST_POSTGRES=postgresql://postgres@127.0.0.1:$PORT/postgres"
  exit 0
fi
if ! ls -d /usr/lib/postgresql/*/bin >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql) >/dev/null 2>&1 || true
  fi
fi
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -z "$PGBIN" ]; then
  echo "echo 'PostgreSQL is not installed; skipping' >&2"
  exit 1
fi
DATA=$(mktemp -d /tmp/planner-pg.XXXXXX)
RUN=""
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || useradd -r -m postgres
  chown postgres "$DATA"
  RUN="runuser -u postgres --"
fi
$RUN "$PGBIN/initdb" -D "$DATA/db" -A trust -U postgres >/dev/null
$RUN "$PGBIN/pg_ctl" -D "$DATA/db" -l "$DATA/db/server.log" -w \
  -o "-p $PORT -c listen_addresses=127.0.0.1 -k $DATA -c max_connections=100" start >/dev/null
echo "export PLANNER_TEST_POSTGRES=postgresql://postgres@127.0.0.1:$PORT/postgres"
echo "export PLANNER_TEST_POSTGRES_STARTED=$DATA"
