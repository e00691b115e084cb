#!/usr/bin/env bash
# Resident memory of a node that ingests: `warrant serve` on an empty durable data directory
# (hashed embedder), DOCS one-chunk documents loaded over PUT /v1/admin/documents (the corpus of
# benches/http/retrieve_load.sh), then RSS after LOAD_SECONDS of /v1/retrieve load, then the
# same after a restart (indexes loaded from the index set). Prints one line per binary of BINS,
# run in turn on fresh directories; an empty server's RSS is measured first and subtracted.
# Needs curl, wrk, python3.
#
#   BINS="/tmp/warrant-before target/release/warrant" DOCS=20000 benches/http/ingest_memory.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BINS="${BINS:-${CARGO_TARGET_DIR:-target}/release/warrant}"
DOCS="${DOCS:-20000}"
PORT="${PORT:-18497}"
LOAD_SECONDS="${LOAD_SECONDS:-10}"
export WARRANT__EMBEDDER__KIND=hashed WARRANT__DEMO__LOAD=false
export WARRANT__SERVER__BIND="127.0.0.1:$PORT" RUST_LOG=warn
URL="http://127.0.0.1:$PORT"
WORK="$(mktemp -d)"
PID=""
trap 'kill "$PID" 2>/dev/null || true; rm -rf "$WORK"' EXIT
kib() { awk -v key="$1:" '$1 == key {print $2}' "/proc/$PID/status"; }
start() { # $1: binary, $2: data directory
  WARRANT__STORAGE__DIR="$2" "$1" serve >"$WORK/server.log" 2>&1 &
  PID=$!
  until curl -fs "$URL/readyz" >/dev/null 2>&1; do
    kill -0 "$PID" 2>/dev/null || { cat "$WORK/server.log" >&2; exit 1; }
    sleep 0.2
  done
}
stop() { kill -TERM "$PID"; wait "$PID" || true; PID=""; }
settle() { # /v1/retrieve load, then a pause for the allocator to return freed pages
  wrk -t1 -c4 -d"${LOAD_SECONDS}s" -s benches/http/retrieve.lua "$URL" >/dev/null
  sleep 3
}
export QUERIES="$WORK/queries.txt"
python3 benches/http/corpus.py queries 1000 >"$QUERIES"
echo "binary docs load_s rss_empty_mib rss_ingested_mib bytes_per_chunk_ingested rss_restarted_mib bytes_per_chunk_restarted"
for bin in $BINS; do
  dir="$WORK/data-$(basename "$bin")-$RANDOM"
  admin="$("$bin" token --tenant bench --sub loader --groups all --admin)"
  export TOKEN="$("$bin" token --tenant bench --sub reader --groups all --ttl-seconds 86400)"
  start "$bin" "$dir"
  sleep 3
  empty=$(kib VmRSS)
  started=$(date +%s.%N)
  python3 benches/http/corpus.py load "$URL" "$admin" "$DOCS"
  loaded=$(echo "$(date +%s.%N) - $started" | bc)
  settle
  ingested=$(kib VmRSS)
  stop
  start "$bin" "$dir"
  settle
  restarted=$(kib VmRSS)
  stop
  printf '%s %s %.0f %d %d %d %d %d\n' "$bin" "$DOCS" "$loaded" $(( empty / 1024 )) $(( ingested / 1024 )) \
    $(( (ingested - empty) * 1024 / DOCS )) $(( restarted / 1024 )) $(( (restarted - empty) * 1024 / DOCS ))
  rm -rf "$dir"
done
