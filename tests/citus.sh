#!/usr/bin/env bash
# Installs (if missing) and starts or stops a throwaway Citus 13.2.2 cluster on 127.0.0.1: a
# coordinator, two workers, a spare node that a test adds as a third worker, and a freezable node
# that only the freeze test registers as a worker of its own database, so stopping it disturbs no
# other test running beside it (PostgreSQL 15, pgvector 0.8 and Citus on all five;
# `wal_level = logical`, so the rebalancer moves shards online) for the PostgreSQL backend's tests
# on a distributed engine (issues 46 and 59).
#
#   tests/citus.sh start   # prints `export WARRANT_TEST_CITUS_URL=... WARRANT_TEST_CITUS_WORKERS=...
#                          # WARRANT_TEST_CITUS_SPARE=... WARRANT_TEST_CITUS_FREEZABLE=...` on its last line
#   tests/citus.sh stop
#   tests/citus.sh freeze PORT   # SIGSTOP the node on PORT: its postmaster, then every child
#   tests/citus.sh thaw PORT     # SIGCONT them (children first); a node not frozen is left alone
#   tests/citus.sh kill PORT     # stop the node on PORT at once (pg_ctl -m immediate)
#   tests/citus.sh revive PORT   # start it again
#
# Citus is not packaged for Debian: it is built from ../shared/vendor/citus-13.2.2-src.tar.xz
# (checksum verified; about a minute on 2 cores) and installed into PostgreSQL 15's extension
# directory, once per machine (a later start finds it installed and builds nothing).
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${WARRANT_CITUS_PORT:-25439}" # the coordinator; the workers listen on PORT+1 and PORT+2, the spare on
# PORT+3, the freezable node on PORT+4
# (below the kernel's ephemeral range, 32768-60999, so no outgoing connection can hold them)
ROOT="${WARRANT_CITUS_DIR:-/tmp/warrant-citus-$PORT}"
SOURCE="${WARRANT_CITUS_SOURCE:-../shared/vendor/citus-13.2.2-src.tar.xz}"
SHA256=14a2f4bea6a25fb4b9e8d0a50c54fef4421526e6e6d92465dd7dae52e7a6248c

# shellcheck source=tests/lib/pg.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/pg.sh"
psql_at() { # $1: port, $2: database, then psql arguments
  local port=$1 database=$2
  shift 2
  as_postgres "$PG_BIN/psql" -h 127.0.0.1 -p "$port" -U postgres -v ON_ERROR_STOP=1 -qAt "$@" "$database"
}

install_citus() {
  tests/postgres.sh install
  if [ -f /usr/share/postgresql/15/extension/citus.control ]; then
    return
  fi
  if [ ! -f "$SOURCE" ]; then
    echo "citus: $SOURCE is missing and Citus is not installed" >&2
    exit 3
  fi
  echo "$SHA256  $SOURCE" | sha256sum -c --quiet -
  local packages=(postgresql-server-dev-15 gcc make liblz4-dev libzstd-dev libkrb5-dev)
  if ! dpkg -s "${packages[@]}" >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
  fi
  local build
  build="$(mktemp -d)"
  tar -xJf "$SOURCE" -C "$build"
  (
    cd "$build"/citus-*
    # Recent PostgreSQL 15 minor releases (15.20 in Debian bookworm) declare
    # have_createdb_privilege() in dbcommands.h, which Citus 13.2.2 still defines as a static
    # compatibility function for 15: with them the build failed ("static declaration follows non-static
    # declaration"). Where the server declares it, the compatibility copy goes.
    if grep -q 'have_createdb_privilege' "$("$PG_BIN/pg_config" --includedir-server)/commands/dbcommands.h"; then
      perl -0pi -e 's/static inline bool\nhave_createdb_privilege\(void\)\n\{.*?\n\}\n//s' \
        src/include/pg_version_compat.h
      if grep -q '^have_createdb_privilege(void)' src/include/pg_version_compat.h; then
        echo "citus: could not take the compatibility have_createdb_privilege out" >&2
        exit 1
      fi
    fi
    ./configure -q PG_CONFIG="$PG_BIN/pg_config" --without-libcurl >/dev/null
    make -s -j"$(nproc)" with_llvm=no >/dev/null
    make -s with_llvm=no install >/dev/null
  )
  rm -rf "$build"
}

start_node() { # $1: port
  local port=$1 data="$ROOT/$1"
  mkdir -p "$data"
  chown postgres:postgres "$data"
  as_postgres "$PG_BIN/initdb" -D "$data" -A trust -U postgres --no-sync >/dev/null
  cat >>"$data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$data'
shared_preload_libraries = 'citus'
fsync = off
shared_buffers = 128MB
# Every test database keeps Citus' maintenance daemon, whose connections to the workers (deadlock
# detection, 2PC recovery) stay open beside the tests' pools: with 200 a full run exhausted a
# worker ("sorry, too many clients already", once max_worker_processes let every daemon start).
max_connections = 1000
jit = off
citus.node_conninfo = 'sslmode=disable'
wal_level = logical
max_replication_slots = 20
max_wal_senders = 20
# Citus starts a maintenance daemon per database that has the extension (every test database),
# and background jobs (the rebalancer, shard moves) need workers of their own: with the default
# 8, a test run left none, and a rebalance stayed "scheduled" for ever.
max_worker_processes = 256
CONF
  pg_start "$data"
  psql_at "$port" postgres -c "CREATE ROLE warrant LOGIN SUPERUSER" >/dev/null
}

running() { # $1: port
  [ -f "$ROOT/$1/postmaster.pid" ] && as_postgres "$PG_BIN/pg_ctl" -D "$ROOT/$1" status >/dev/null 2>&1
}

start() {
  install_citus
  if running $((PORT + 3)); then
    echo "citus already running on 127.0.0.1:$PORT" >&2
    # A cluster started before the freezable node existed gets it beside the others.
    running $((PORT + 4)) || { rm -rf "${ROOT:?}/$((PORT + 4))" && start_node $((PORT + 4)); }
  else
    stop
    for port in "$PORT" $((PORT + 1)) $((PORT + 2)) $((PORT + 3)) $((PORT + 4)); do
      start_node "$port"
    done
  fi
  echo "export WARRANT_TEST_CITUS_URL=postgres://warrant@127.0.0.1:$PORT/postgres WARRANT_TEST_CITUS_WORKERS=127.0.0.1:$((PORT + 1)),127.0.0.1:$((PORT + 2)) WARRANT_TEST_CITUS_SPARE=127.0.0.1:$((PORT + 3)) WARRANT_TEST_CITUS_FREEZABLE=127.0.0.1:$((PORT + 4))"
}

# The postmaster of the node on port $1 and its children (the backends, the checkpointer, ...).
postmaster_of() {
  local pid
  pid="$(head -n 1 "$ROOT/$1/postmaster.pid" 2>/dev/null)" || { echo "citus: no node on port $1" >&2; exit 2; }
  echo "$pid"
}

freeze() { # $1: port. The postmaster first, so it starts no new child while the others stop.
  local postmaster
  postmaster="$(postmaster_of "$1")"
  kill -STOP "$postmaster"
  { pgrep -P "$postmaster" || true; } | xargs -r kill -STOP
}

thaw() { # $1: port. Children first, so none sees its postmaster run again before it does.
  local postmaster
  postmaster="$(postmaster_of "$1")"
  { pgrep -P "$postmaster" || true; } | xargs -r kill -CONT
  kill -CONT "$postmaster"
}

stop() {
  for data in "$ROOT"/*/; do
    if [ -f "$data/postmaster.pid" ]; then
      thaw "$(basename "$data")" 2>/dev/null || true # a frozen node would never stop
      as_postgres "$PG_BIN/pg_ctl" -D "$data" -m fast -w stop >/dev/null || true
    fi
  done
  rm -rf "$ROOT"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  freeze) freeze "${2:?port}" ;;
  thaw) thaw "${2:?port}" ;;
  kill) as_postgres "$PG_BIN/pg_ctl" -D "$ROOT/${2:?port}" -m immediate -w stop >/dev/null ;;
  revive) pg_start "$ROOT/${2:?port}" ;;
  *) echo "usage: $0 start|stop|freeze PORT|thaw PORT|kill PORT|revive PORT" >&2; exit 2 ;;
esac
