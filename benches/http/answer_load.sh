#!/usr/bin/env bash
# HTTP load on POST /v1/answer, binaries side by side: each round starts every binary in turn on
# the demo corpus (hashed embedder, extractive generator, a fresh data directory,
# `server.workers` = WORKERS, max_in_flight 512), 3 s of warm-up, then `wrk -t2 -cCONNECTIONS
# -dDURATION --latency` with the README's hotel question and alice's token. Prints per round and
# binary: answers/s, p50/p99, server CPU seconds over the window and CPU ms per answer (utime +
# stime from /proc). Needs wrk and curl. BACKEND=postgres serves from PostgreSQL instead: each run
# gets a fresh database (warrant_answer_load, on DATABASE_URL's server) with the demo corpus; the
# CPU figures are then the warrant node's only (`tests/postgres.sh start` starts a server; psql).
#
#   benches/http/answer_load.sh /tmp/warrant-before target/release/warrant   # ROUNDS=3 DURATION=15s
#   BACKEND=postgres benches/http/answer_load.sh /tmp/warrant-before target/release/warrant
# A BINARY may be `NAME=VALUE,NAME=VALUE:path` to run that binary with those settings
# (e.g. `WARRANT__REVIEW__ENABLED=true,WARRANT__REVIEW__SAMPLE_ANSWERED=0.02:target/release/warrant`,
# printed as its path plus a label). METRICS=pattern prints the /metrics lines matching it after
# each run; FILES=name prints the size of that file of the data directory after the stop.
# SCRIPTS="answer.lua mcp_answer.lua" measures each wrk script of benches/http in turn against the
# same running server (the REST route and the MCP `answer` tool side by side; default answer.lua);
# a script's first response must carry an answered status, or the run stops.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$#" -ge 1 ] || { echo "usage: $0 BINARY [BINARY ...]" >&2; exit 2; }
PORT="${PORT:-18470}"
ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-15s}"
CONNECTIONS="${CONNECTIONS:-32}"
WORKERS="${WORKERS:-2}"
export WARRANT__EMBEDDER__KIND=hashed WARRANT__SERVER__WORKERS="$WORKERS" WARRANT__SERVER__MAX_IN_FLIGHT=512
export WARRANT__SERVER__BIND="127.0.0.1:$PORT" RUST_LOG=warn
URL="http://127.0.0.1:$PORT"
BACKEND="${BACKEND:-embedded}"
if [ "$BACKEND" = postgres ]; then
  BASE="${DATABASE_URL:-postgres://warrant@127.0.0.1:25432/postgres}"
  export WARRANT_LOAD_DATABASE_URL="${BASE%/*}/warrant_answer_load"
  export WARRANT__STORAGE__BACKEND=postgres WARRANT__STORAGE__POSTGRES__URL_ENV=WARRANT_LOAD_DATABASE_URL
  export WARRANT__STORAGE__POSTGRES__CA_FILE="${WARRANT_TEST_DATABASE_CA:-}"
fi
WORK="$(mktemp -d)"
PID=""
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT
TICK=$(getconf CLK_TCK)
QUESTION="How much are hotel stays reimbursed per night in London?"
# The body of one request as the wrk script sends it (the REST route, or the MCP tool call).
first_response() {
  if [ "$1" = mcp_answer.lua ]; then
    curl -s "$URL/mcp" -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
      -H 'Accept: application/json, text/event-stream' \
      -d "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"tools/call\", \"params\": {\"name\": \"answer\", \"arguments\": {\"question\": \"$QUESTION\"}}}"
  else
    curl -s "$URL/v1/answer" -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
      -d "{\"question\": \"$QUESTION\"}"
  fi
}
echo "round binary answers/s p50_ms p99_ms cpu_s cpu_ms_per_answer load_average"
for round in $(seq 1 "$ROUNDS"); do
  for spec in "$@"; do
    binary="${spec##*:}"
    settings=()
    if [ "$binary" != "$spec" ]; then
      IFS=, read -r -a settings <<<"${spec%:*}"
    fi
    rm -rf "$WORK/data"
    if [ "$BACKEND" = postgres ]; then
      psql "$BASE" -qc "DROP DATABASE IF EXISTS warrant_answer_load" -c "CREATE DATABASE warrant_answer_load"
    fi
    env "${settings[@]}" WARRANT__STORAGE__DIR="$WORK/data" "$binary" serve >"$WORK/server.log" 2>&1 &
    PID=$!
    for _ in $(seq 1 600); do
      curl -fs "$URL/readyz" >/dev/null 2>&1 && break
      kill -0 "$PID" 2>/dev/null || { cat "$WORK/server.log"; exit 1; }
      sleep 0.2
    done
    export TOKEN="$("$binary" token --tenant acme --sub alice --groups everyone,engineering)"
    for script in ${SCRIPTS:-answer.lua}; do
    label="$spec"
    [ "$script" = answer.lua ] || label="$spec[$script]"
    first="$(first_response "$script")"
    grep -q '"status": *"answered"' <<<"$first" || { echo "$script: not an answer: ${first:0:300}" >&2; exit 1; }
    wrk -t2 -c"$CONNECTIONS" -d3s -s "benches/http/$script" "$URL" >/dev/null
    before=$(awk '{print $14 + $15}' "/proc/$PID/stat")
    wrk -t2 -c"$CONNECTIONS" -d"$DURATION" --latency -s "benches/http/$script" "$URL" >"$WORK/wrk.txt"
    after=$(awk '{print $14 + $15}' "/proc/$PID/stat")
    if [ -n "${METRICS:-}" ]; then
      curl -fs "$URL/metrics" | grep -E "$METRICS" | sed "s/^/  $round /" || true
    fi
    python3 - "$WORK/wrk.txt" "$round" "$label" "$(( after - before ))" "$TICK" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import sys
sys.path.insert(0, "benches/http")
from wrk_report import parse
wrk = parse(sys.argv[1])
cpu_s = int(sys.argv[4]) / int(sys.argv[5])
print(f"{sys.argv[2]} {sys.argv[3]} {wrk['rps']:.0f} {wrk['p50_ms']:.2f} {wrk['p99_ms']:.2f} {cpu_s:.1f} "
      f"{cpu_s * 1000 / max(wrk['requests'], 1):.3f} {sys.argv[6]}"
      + (f" NON-2XX {wrk['errors']}" if wrk["errors"] else ""))
PY
    done
    kill -TERM "$PID"; wait "$PID" || true; PID=""
    if [ -n "${FILES:-}" ] && [ -f "$WORK/data/$FILES" ]; then
      echo "  $round $FILES $(stat -c %s "$WORK/data/$FILES") bytes"
    fi
  done
done
