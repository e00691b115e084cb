#!/usr/bin/env bash
# What abandoned statements cost PostgreSQL: /v1/answer on the postgres backend with a request
# deadline shorter than the lexical statement of the corpus's common terms, so retrieval runs out
# of time and the pipeline drops it. For each binary of BINS, in turn (ROUNDS times): one node,
# wrk for DURATION, then REST seconds without load. Prints answers/s, PostgreSQL's CPU during
# the load and during the rest (work still running for requests already answered), and the
# statements still active when the load stopped. The database is the one
# retrieve_load_postgres.sh loads (DOCS one-chunk documents, loaded first if missing).
#
#   BINS="/tmp/warrant-before target/release/warrant" DOCS=20000 benches/http/abandoned_postgres.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BINS="${BINS:-${CARGO_TARGET_DIR:-target}/release/warrant}"
DOCS="${DOCS:-20000}"
BASE="${DATABASE_URL:-postgres://warrant@127.0.0.1:25432/postgres}"
DEADLINE_MS="${DEADLINE_MS:-100}"
DURATION="${DURATION:-20s}"
REST="${REST:-10}"
ROUNDS="${ROUNDS:-2}"
CONNECTIONS="${CONNECTIONS:-4}"
PORT="${PORT:-18491}"
first_bin="${BINS%% *}"
BIN="$first_bin" DOCS="$DOCS" ROUNDS=0 benches/http/retrieve_load_postgres.sh >&2
export WARRANT_LOAD_DATABASE_URL="${BASE%/*}/warrant_load_$DOCS"
export WARRANT__STORAGE__BACKEND=postgres WARRANT__STORAGE__POSTGRES__URL_ENV=WARRANT_LOAD_DATABASE_URL
export WARRANT__EMBEDDER__KIND=hashed WARRANT__DEMO__LOAD=false RUST_LOG=warn
export WARRANT__STORAGE__POSTGRES__CA_FILE="${WARRANT_TEST_DATABASE_CA:-}"
export WARRANT__SERVER__BIND="127.0.0.1:$PORT" DEADLINE_MS
WORK="$(mktemp -d)"
PID=""
trap 'kill "$PID" 2>/dev/null || true; rm -rf "$WORK"' EXIT
export QUERIES="$WORK/queries.txt"
python3 benches/http/corpus.py queries 1000 >"$QUERIES"
ticks() { # utime + stime of the given pids
  local total=0
  for pid in "$@"; do total=$(( total + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0) )); done
  echo "$total"
}
active() {
  psql "$WARRANT_LOAD_DATABASE_URL" -Atc "SELECT count(*) FROM pg_stat_activity
    WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()"
}
TICK=$(getconf CLK_TCK)
echo "round binary answers/s non_2xx postgres_cpu_ms_per_answer active_at_stop postgres_cpu_s_after_stop"
for round in $(seq 1 "$ROUNDS"); do
  for bin in $BINS; do
    export TOKEN="$("$bin" token --tenant bench --sub reader --groups all --ttl-seconds 86400)"
    "$bin" serve >"$WORK/server.log" 2>&1 &
    PID=$!
    until curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; do
      kill -0 "$PID" 2>/dev/null || { cat "$WORK/server.log" >&2; exit 1; }
      sleep 0.3
    done
    database_pids=$(pgrep -x postgres | tr '\n' ' ')
    # shellcheck disable=SC2086
    before=$(ticks $database_pids)
    wrk -t1 -c"$CONNECTIONS" -d"$DURATION" --timeout 30s --latency -s benches/http/answer_deadline.lua \
      "http://127.0.0.1:$PORT" >"$WORK/wrk.txt"
    # shellcheck disable=SC2086
    stopped=$(ticks $database_pids)
    still=$(active)
    sleep "$REST"
    # shellcheck disable=SC2086
    after=$(ticks $database_pids)
    kill -TERM "$PID"; wait "$PID" || true; PID=""
    python3 - "$WORK/wrk.txt" "$round" "$bin" "$(( stopped - before ))" "$(( after - stopped ))" "$TICK" "$still" <<'PY'
import sys
sys.path.insert(0, "benches/http")
from wrk_report import parse
path, round_, binary, during, rest, tick, still = sys.argv[1:]
wrk = parse(path)
per_answer = int(during) * 1000 / int(tick) / max(wrk["requests"], 1)
print(f"{round_} {binary} {wrk['rps']:.1f} {wrk['errors']} {per_answer:.1f} {still} {int(rest) / int(tick):.2f}")
PY
  done
done
