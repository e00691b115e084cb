# Sourced by tests/postgres.sh and tests/citus.sh: running PostgreSQL's tools as its user, and
# starting a server on a fixed port.

PG_BIN=/usr/lib/postgresql/15/bin

as_postgres() { if [ "$(id -un)" = postgres ]; then "$@"; else runuser -u postgres -- "$@"; fi; }

# pg_start DATA_DIR: `pg_ctl start`, tried again (up to 10 times, a second apart) while the port
# is taken. The default ports lie below the kernel's ephemeral range (32768-60999): inside it (the
# old 54339-54342), an outgoing connection held a Citus worker's port during two CI runs ("could
# not bind IPv4 address: Address already in use", nothing listening there after). A port given
# by WARRANT_PG_PORT or WARRANT_CITUS_PORT may still lie in the range; the retries cover a moment.
pg_start() {
  local data=$1 attempt seen
  for attempt in 1 2 3 4 5 6 7 8 9 10; do
    seen=$({ wc -l <"$data/log"; } 2>/dev/null || echo 0)
    if as_postgres "$PG_BIN/pg_ctl" -D "$data" -l "$data/log" -w start >/dev/null; then
      return 0
    fi
    tail -n +"$((seen + 1))" "$data/log" 2>/dev/null | grep -q "Address already in use" || return 1
    echo "port of $data taken (attempt $attempt); starting again in a second" >&2
    sleep 1
  done
  return 1
}
