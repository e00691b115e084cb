# Sourced by tests/postgres.sh and tests/citus.sh: running PostgreSQL's tools as its user, and
# starting a server on a fixed port.

PG_BIN=/usr/lib/postgresql/15/bin

as_postgres() { if [ "$(id -un)" = postgres ]; then "$@"; else runuser -u postgres -- "$@"; fi; }

# pg_start DATA_DIR: `pg_ctl start`, tried again (up to 10 times, a second apart) while the port
# is taken. The test ports lie in the kernel's ephemeral range (32768-60999), so an outgoing
# connection of an earlier stage can hold one for a moment: a Citus worker once failed to start
# with "could not bind IPv4 address: Address already in use" and nothing listening there.
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
