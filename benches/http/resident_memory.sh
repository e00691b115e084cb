#!/usr/bin/env bash
# Resident memory of `warrant serve` on a durable data directory, per chunk, for several store
# cache sizes (storage.cache_mb), one start each, in order: RSS once ready (indexes loaded from
# the index set) and after LOAD_SECONDS of /v1/retrieve load. Uses the data directory that
# benches/http/retrieve_load.sh fills (DIR, default /tmp/warrant-load-$DOCS); needs curl and wrk.
#
#   BIN=target/release/warrant DOCS=100000 benches/http/resident_memory.sh        # CACHES="1024 32"
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN="${BIN:-${CARGO_TARGET_DIR:-target}/release/warrant}"
DOCS="${DOCS:-100000}"
DIR="${DIR:-/tmp/warrant-load-$DOCS}"
PORT="${PORT:-18495}"
CACHES="${CACHES:-1024 32}"
LOAD_SECONDS="${LOAD_SECONDS:-10}"
[ -f "$DIR/warrant.redb" ] || { echo "no data directory at $DIR (run benches/http/retrieve_load.sh first)" >&2; exit 1; }
export WARRANT__EMBEDDER__KIND=hashed WARRANT__DEMO__LOAD=false WARRANT__STORAGE__DIR="$DIR"
export WARRANT__SERVER__BIND="127.0.0.1:$PORT" RUST_LOG=warn
export TOKEN="$("$BIN" token --tenant bench --sub reader --groups all --ttl-seconds 3600)"
export QUERIES="$(mktemp)"
python3 benches/http/corpus.py queries 1000 >"$QUERIES"
trap 'rm -f "$QUERIES"' EXIT
kib() { awk -v key="$1:" '$1 == key {print $2}' "/proc/$2/status"; }
echo "cache_mb ready_s chunks rss_ready_mib rss_loaded_mib bytes_per_chunk_loaded peak_mib"
for cache in $CACHES; do
  WARRANT__STORAGE__CACHE_MB="$cache" "$BIN" serve >/dev/null 2>&1 &
  pid=$!
  started=$(date +%s.%N)
  until curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || { echo "server exited" >&2; exit 1; }
    sleep 0.2
  done
  ready=$(echo "$(date +%s.%N) - $started" | bc)
  chunks=$(curl -fs "http://127.0.0.1:$PORT/metrics" | awk '$1 == "warrant_index_chunks" {print $2}')
  rss_ready=$(kib VmRSS "$pid")
  wrk -t1 -c4 -d"${LOAD_SECONDS}s" -s benches/http/retrieve.lua "http://127.0.0.1:$PORT" >/dev/null
  rss_loaded=$(kib VmRSS "$pid")
  peak=$(kib VmHWM "$pid")
  kill -TERM "$pid"
  wait "$pid" || true
  printf '%s %.1f %s %d %d %d %d\n' "$cache" "$ready" "$chunks" $(( rss_ready / 1024 )) $(( rss_loaded / 1024 )) \
    $(( rss_loaded * 1024 / chunks )) $(( peak / 1024 ))
done
