#!/usr/bin/env bash
# Recovery in seconds (issue 50; BENCHMARKS.md "Recovery"): for each size of SIZES, fills one data
# directory with `warrant-bench recovery-fill` (one-chunk documents of 60 words, 20 tenants,
# 500-document batches two in flight, hashed embedder at 384, an index set at the start and when
# the journals reach storage.index_journal_max_mb, a checkpoint (ACL checkpoint + index set) after
# every CHECKPOINT_EVERY chunks as the server's checkpointer writes them; the process then ends without closing
# anything, as kill -9 right after the last acknowledged batch does), prints the fill's write
# figures (JSON), then for each binary of BINS, on its own copy of that directory:
#   crash_ready_s     spawn of `warrant serve` to the first 200 of /readyz (polled every 0.1 s)
#   graceful_ready_s  the same after a SIGTERM (which writes an ACL checkpoint, an index set and
#                     the store's seal)
#   rss_mib           resident memory once ready after the crash
# A binary from before the index journal ignores the journal and indexes again what the last
# index set lacks; this build applies the journal. Needs curl, python3; disk: about 4 KB per chunk
# per copy plus the journal.
#
#   BINS="/tmp/warrant-before $CARGO_TARGET_DIR/release/warrant" SIZES="100000 300000" benches/recovery_curve.sh
set -euo pipefail
cd "$(dirname "$0")/.."
FILL_BIN="${FILL_BIN:-${CARGO_TARGET_DIR:-target}/release/warrant-bench}"
BINS="${BINS:-${CARGO_TARGET_DIR:-target}/release/warrant}"
SIZES="${SIZES:-100000}"
CHECKPOINT_EVERY="${CHECKPOINT_EVERY:-0}"
PORT="${PORT:-18499}"
WORK="$(mktemp -d "${WORK_DIR:-.}/.recovery-curve.XXXXXX")"
PID=""
trap 'kill -9 "$PID" 2>/dev/null || true; rm -rf "$WORK"' EXIT
export WARRANT__EMBEDDER__KIND=hashed WARRANT__EMBEDDER__DIM=384 WARRANT__DEMO__LOAD=false
export WARRANT__SERVER__BIND="127.0.0.1:$PORT" RUST_LOG="${RUST_LOG:-info}"
export WARRANT__STORAGE__CHECKPOINT_INTERVAL_SECONDS=3600
URL="http://127.0.0.1:$PORT"
ready_after() { # $1: binary, $2: directory, $3: log; sets READY: seconds to the first 200 of /readyz
  local started
  started=$(date +%s.%N)
  local config=()
  # A build older than the configuration's keys reads its own file, BINARY.toml, when there is one.
  [ -f "$1.toml" ] && config=(--config "$1.toml")
  WARRANT__STORAGE__DIR="$2" WARRANT__SNAPSHOTS__DIR="$2.snapshots" "$1" serve "${config[@]}" >>"$3" 2>&1 &
  PID=$!
  until [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$URL/readyz" 2>/dev/null)" = 200 ]; do
    kill -0 "$PID" 2>/dev/null || { tail -5 "$3" >&2; exit 1; }
    sleep 0.1
  done
  READY=$(echo "$(date +%s.%N) - $started" | bc)
}
echo "size binary crash_ready_s graceful_ready_s rss_mib"
for size in $SIZES; do
  source="$WORK/fill-$size"
  echo "fill $size: $("$FILL_BIN" recovery-fill --dir "$source" --chunks "$size" --checkpoint-every "$CHECKPOINT_EVERY")" >&2
  for bin in $BINS; do
    dir="$WORK/data-$size-$(basename "$bin")"
    cp -a "$source" "$dir"
    sync
    log="$WORK/$(basename "$bin")-$size.log"
    ready_after "$bin" "$dir" "$log"
    crash=$READY
    rss=$(awk '$1 == "VmRSS:" {print int($2 / 1024)}' "/proc/$PID/status")
    curl -s "$URL/readyz" | python3 -c 'import json,sys; print("readyz recovery:", json.load(sys.stdin).get("recovery"))' >&2 || true
    kill -TERM "$PID"; wait "$PID" || true
    ready_after "$bin" "$dir" "$log"
    graceful=$READY
    kill -TERM "$PID"; wait "$PID" || true; PID=""
    grep -aE "store read|acl state recovered|index set read|journals loaded|data directory opened" "$log" | sed 's/\x1b\[[0-9;]*m//g' | cut -c1-400 >&2 || true
    printf '%s %s %.2f %.2f %s\n' "$size" "$bin" "$crash" "$graceful" "$rss"
    rm -rf "$dir" "$dir.snapshots"
  done
  rm -rf "$source"
done
