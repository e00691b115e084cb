#!/usr/bin/env bash
# Installs (if missing) and starts or stops a throwaway PostgreSQL 15 + pgvector 0.8 on 127.0.0.1
# for the postgres backend's integration tests. Idempotent; runs as root (CI) or as a user that
# can run `runuser -u postgres`.
#
#   tests/postgres.sh start   # prints `export WARRANT_TEST_DATABASE_URL=... WARRANT_TEST_DATABASE_CA=...`
#                             # on its last line (TLS is on, with a CA of its own)
#   tests/postgres.sh stop
#   tests/postgres.sh install # PostgreSQL 15 and pgvector only (tests/citus.sh builds on them)
#
# pgvector: bookworm ships no pgvector package for PostgreSQL 15, so 0.8.0 is built from Debian
# trixie's source package (recipe measured in shared/notes/CRATES.md).
set -euo pipefail
PORT="${WARRANT_PG_PORT:-25432}"
DATA="${WARRANT_PG_DIR:-/tmp/warrant-pg-$PORT}"
URL="postgres://warrant@127.0.0.1:$PORT/postgres"

# shellcheck source=tests/lib/pg.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/pg.sh"

install_postgres() {
  if ! command -v openssl >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
  fi
  if [ ! -x "$PG_BIN/initdb" ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null
  fi
  if [ -f /usr/share/postgresql/15/extension/vector.control ]; then
    return
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-server-dev-15 gcc make dpkg-dev >/dev/null
  if [ ! -f /etc/apt/sources.list.d/trixie-src.sources ]; then
    cat >/etc/apt/sources.list.d/trixie-src.sources <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  fi
  apt-get update -qq
  local build
  build="$(mktemp -d)"
  (cd "$build" && apt-get source -qq --download-only pgvector=0.8.0-1 >/dev/null 2>&1 || apt-get source -qq --download-only pgvector >/dev/null)
  (cd "$build" && dpkg-source -x --no-check ./pgvector_*.dsc src >/dev/null)
  make -s -C "$build/src" PG_CONFIG="$PG_BIN/pg_config" with_llvm=no >/dev/null
  make -s -C "$build/src" PG_CONFIG="$PG_BIN/pg_config" with_llvm=no install >/dev/null
  rm -rf "$build"
}

start() {
  install_postgres
  if [ -f "$DATA/postmaster.pid" ] && as_postgres "$PG_BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    echo "postgres already running on 127.0.0.1:$PORT" >&2
  else
    rm -rf "$DATA"
    mkdir -p "$DATA"
    chown postgres:postgres "$DATA"
    as_postgres "$PG_BIN/initdb" -D "$DATA" -A trust -U postgres --no-sync >/dev/null
    cat >>"$DATA/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$DATA'
fsync = off
synchronous_commit = on
shared_buffers = 256MB
max_connections = 200
jit = off
CONF
    # TLS with a certificate authority of its own (what the tests verify the server against):
    # a CA, and a server certificate for 127.0.0.1 that it signs.
    openssl req -x509 -newkey rsa:2048 -nodes -days 7 -subj "/CN=warrant test CA" \
      -keyout "$DATA/ca.key" -out "$DATA/ca.crt" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
      -keyout "$DATA/server.key" -out "$DATA/server.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n' >"$DATA/server.ext"
    openssl x509 -req -in "$DATA/server.csr" -CA "$DATA/ca.crt" -CAkey "$DATA/ca.key" -CAcreateserial \
      -days 7 -extfile "$DATA/server.ext" -out "$DATA/server.crt" 2>/dev/null
    chown postgres:postgres "$DATA/server.key" "$DATA/server.crt" && chmod 600 "$DATA/server.key"
    cat >>"$DATA/postgresql.conf" <<CONF
ssl = on
ssl_cert_file = '$DATA/server.crt'
ssl_key_file = '$DATA/server.key'
CONF
    pg_start "$DATA"
    as_postgres "$PG_BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -qc \
      "CREATE ROLE warrant LOGIN SUPERUSER" postgres >/dev/null
  fi
  echo "export WARRANT_TEST_DATABASE_URL=$URL WARRANT_TEST_DATABASE_CA=$DATA/ca.crt"
}

stop() {
  if [ -f "$DATA/postmaster.pid" ]; then
    as_postgres "$PG_BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null || true
  fi
  rm -rf "$DATA"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  install) install_postgres ;;
  *) echo "usage: $0 start|stop|install" >&2; exit 2 ;;
esac
