#!/usr/bin/env bash
# HTTP load on POST /v1/retrieve at DOCS one-chunk documents (hashed embedder, durable data
# directory so every start after the first loads its index set instead of re-ingesting), with
# the server pinned to 1 and to 2 cores in turn (taskset), ROUNDS interleaved rounds. Prints per
# round: cores, requests/s, latency p50/p99 (wrk), and server CPU per request (utime + stime of
# the server process over the wrk window, from /proc). Needs wrk, taskset, python3, curl.
#
#   benches/http/retrieve_load.sh                  # DOCS=100000 ROUNDS=3 DURATION=20s
#   BIN=target/release/warrant DOCS=20000 benches/http/retrieve_load.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN="${BIN:-${CARGO_TARGET_DIR:-target}/release/warrant}"
DOCS="${DOCS:-100000}"
DIR="${DIR:-/tmp/warrant-load-$DOCS}"
PORT="${PORT:-18480}"
DURATION="${DURATION:-20s}"
ROUNDS="${ROUNDS:-3}"
CONNECTIONS="${CONNECTIONS:-16}"
export WARRANT__EMBEDDER__KIND=hashed WARRANT__DEMO__LOAD=false WARRANT__STORAGE__DIR="$DIR"
export WARRANT__SERVER__BIND="127.0.0.1:$PORT" RUST_LOG=warn
URL="http://127.0.0.1:$PORT"
HERE=benches/http
WORK="$(mktemp -d)"
trap 'kill "$PID" 2>/dev/null || true; rm -rf "$WORK"' EXIT
PID=""

start() { # $1: cpu list
  taskset -c "$1" "$BIN" serve >"$WORK/server.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 600); do
    curl -fs "$URL/readyz" >/dev/null 2>&1 && return 0
    kill -0 "$PID" 2>/dev/null || { cat "$WORK/server.log"; exit 1; }
    sleep 0.5
  done
  echo "server did not become ready" >&2; exit 1
}
stop() { kill -TERM "$PID"; wait "$PID" || true; PID=""; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$PID/stat"; }

ADMIN="$("$BIN" token --tenant bench --sub loader --groups all --admin)"
export TOKEN="$("$BIN" token --tenant bench --sub reader --groups all --ttl-seconds 86400)"
export QUERIES="$WORK/queries.txt"
python3 "$HERE/corpus.py" queries 1000 >"$QUERIES"

if [ ! -s "$DIR/warrant.redb" ]; then
  start 0,1
  started=$(date +%s)
  python3 "$HERE/corpus.py" load "$URL" "$ADMIN" "$DOCS"
  echo "loaded $DOCS documents in $(( $(date +%s) - started )) s"
  stop # graceful: writes the index set
fi
TICK=$(getconf CLK_TCK)
echo "round cores requests/s p50_ms p99_ms cpu_ms_per_request load_average"
for round in $(seq 1 "$ROUNDS"); do
  for cpus in 0 0,1; do
    start "$cpus"
    wrk -t1 -c"$CONNECTIONS" -d2s -s "$HERE/retrieve.lua" "$URL" >/dev/null # warm-up
    before=$(cpu_ticks)
    wrk -t1 -c"$CONNECTIONS" -d"$DURATION" --latency -s "$HERE/retrieve.lua" "$URL" >"$WORK/wrk.txt"
    after=$(cpu_ticks)
    stop
    python3 - "$WORK/wrk.txt" "$round" "$cpus" "$(( after - before ))" "$TICK" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import sys
sys.path.insert(0, "benches/http")
from wrk_report import parse
wrk = parse(sys.argv[1])
cpu_ms = int(sys.argv[4]) * 1000 / int(sys.argv[5]) / max(wrk["requests"], 1)
cores = len(sys.argv[3].split(","))
print(f"{sys.argv[2]} {cores} {wrk['rps']:.0f} {wrk['p50_ms']:.2f} {wrk['p99_ms']:.2f} {cpu_ms:.3f} {sys.argv[6]}"
      + (f" NON-2XX {wrk['errors']}" if wrk["errors"] else ""))
PY
  done
done
