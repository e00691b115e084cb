#!/usr/bin/env bash
# Time to ready of a durable node after a crash and after a graceful stop: `warrant serve` on an
# empty data directory (hashed embedder), DOCS one-chunk documents loaded over PUT
# /v1/admin/documents in batches of 500 (the corpus of benches/http/retrieve_load.sh; their rate
# is ingest_docs_per_s), then new documents loaded without pause (500 a batch, two batches in
# flight) and the server killed with SIGKILL after a random 5-15 s (seeded by SEED: the same delay
# for every binary). The seconds from spawning the same binary on the same directory to the first
# 200 of /readyz (polled every 0.1 s) are crash_ready_s, its RSS then rss_mib; after a SIGTERM
# (which writes the index set) the same measure is graceful_ready_s. Prints one line per binary of
# BINS, run in turn on fresh directories; on stderr, for each start, the log lines about recovery
# (data directory, index set, journal, rebuilt or re-inserted chunks, checkpoints) and the live
# documents after the crash against those acknowledged before it. The server logs are kept in
# LOGS (a new directory by default, printed at the end). CHECKPOINT_SECONDS sets
# storage.checkpoint_interval_seconds (other settings: WARRANT__... variables, e.g.
# WARRANT__STORAGE__CHECKPOINT_CHANGES). Needs curl, python3.
#
#   BINS="/tmp/warrant-before $CARGO_TARGET_DIR/release/warrant" DOCS=100000 benches/http/recovery.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BINS="${BINS:-${CARGO_TARGET_DIR:-target}/release/warrant}"
DOCS="${DOCS:-20000}"
PORT="${PORT:-18498}"
SEED="${SEED:-1}"
CHECKPOINT_SECONDS="${CHECKPOINT_SECONDS:-300}"
LOGS="${LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/warrant-recovery.XXXXXX")}"
mkdir -p "$LOGS"
export WARRANT__EMBEDDER__KIND=hashed WARRANT__DEMO__LOAD=false
export WARRANT__STORAGE__CHECKPOINT_INTERVAL_SECONDS="$CHECKPOINT_SECONDS"
export WARRANT__SERVER__BIND="127.0.0.1:$PORT" RUST_LOG="${RUST_LOG:-info}"
URL="http://127.0.0.1:$PORT"
WORK="$(mktemp -d)"
PID=""
LOADER=""
# On an early exit: no graceful stop (it would write an index set into a directory being removed).
trap 'kill -KILL ${PID:+"$PID"} ${LOADER:+"$LOADER"} 2>/dev/null || true; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM
now() { date +%s.%N; }
since() { awk -v from="$1" -v to="$(now)" 'BEGIN {printf "%.2f", to - from}'; }
kib() { awk -v key="$1:" '$1 == key {print $2}' "/proc/$PID/status"; }
start() { # $1: binary, $2: data directory, $3: log file; sets READY_S (spawn to the first 200 of /readyz)
  # The listener is bound only once the state is recovered, so before that curl is refused; a
  # bound server that is not ready answers 503 (-f makes both a failure).
  local began
  began=$(now)
  WARRANT__STORAGE__DIR="$2" WARRANT__SNAPSHOTS__DIR="$2.snapshots" "$1" serve >"$3" 2>&1 &
  PID=$!
  until curl -fs -o /dev/null --max-time 2 "$URL/readyz"; do
    kill -0 "$PID" 2>/dev/null || { echo "$1 exited before it was ready:" >&2; cat "$3" >&2; exit 1; }
    sleep 0.1
  done
  READY_S=$(since "$began")
}
stop() { kill -TERM "$PID"; wait "$PID" || true; PID=""; }
crash() { kill -KILL "$PID"; wait "$PID" 2>/dev/null || true; PID=""; }
recovery_lines() { # $1: label, $2: log file: what a run logged about recovery and its index set
  sed 's/\x1b\[[0-9;]*m//g' "$2" \
    | grep -aiE 'index set|indexes|journal|re-?insert|rebuil|replay|recover|data directory|compacted|checkpoint' \
    | grep -avE '"request"|[[:space:]]request[[:space:]]' | sed "s|^|[$1] |" >&2 || true
}
live_documents() { curl -fs "$URL/metrics" | awk '$1 == "warrant_live_documents" {printf "%d", $2}'; }
# Steady ingestion: new documents (ids from $3 on, so none is overwritten) in batches of 500, two
# in flight, until a request fails; prints "first end" for every acknowledged batch.
cat >"$WORK/steady.py" <<'PY'
import sys
import threading

sys.path.insert(0, "benches/http")
import corpus  # noqa: E402

url, token, first = sys.argv[1], sys.argv[2], int(sys.argv[3])
lock = threading.Lock()
following = [first]


def worker():
    while True:
        with lock:
            start = following[0]
            following[0] += 500
        try:
            corpus.put(url, token, range(start, start + 500))
        except Exception:
            return
        with lock:
            print(start, start + 500, flush=True)


threads = [threading.Thread(target=worker) for _ in range(2)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
PY
DELAY=$(python3 -c 'import random, sys; print(round(random.Random(int(sys.argv[1])).uniform(5, 15), 1))' "$SEED")
if curl -s -o /dev/null --max-time 2 "$URL/healthz"; then
  echo "something already listens on port $PORT; set PORT" >&2
  exit 1
fi
echo "binary docs ingest_docs_per_s crash_ready_s graceful_ready_s rss_mib"
run=0
for bin in $BINS; do
  run=$((run + 1))
  name="$run-$(basename "$bin")"
  dir="$WORK/data-$name"
  admin="$("$bin" token --tenant bench --sub loader --groups all --admin)"
  start "$bin" "$dir" "$LOGS/$name-ingest.log"
  began=$(now)
  python3 benches/http/corpus.py load "$URL" "$admin" "$DOCS"
  loaded=$(since "$began")
  python3 "$WORK/steady.py" "$URL" "$admin" "$DOCS" >"$LOGS/$name-steady.txt" 2>&1 &
  LOADER=$!
  sleep "$DELAY"
  crash
  kill -TERM "$LOADER" 2>/dev/null || true
  wait "$LOADER" 2>/dev/null || true
  LOADER=""
  acknowledged=$(( DOCS + 500 * $(grep -cE '^[0-9]+ [0-9]+$' "$LOGS/$name-steady.txt" || true) ))
  echo "[$name] SIGKILL after ${DELAY}s of steady ingestion; documents acknowledged: $acknowledged" >&2
  start "$bin" "$dir" "$LOGS/$name-crash.log"
  crash_ready=$READY_S
  rss=$(kib VmRSS)
  live=$(live_documents || true)
  echo "[$name crash] ready in ${crash_ready}s, rss $(( rss / 1024 )) MiB, live documents ${live:-?}" \
    "(acknowledged $acknowledged, at most 1000 more were in flight)" >&2
  if [[ -n "$live" && "$live" -lt "$acknowledged" ]]; then
    echo "[$name crash] LOST $(( acknowledged - live )) ACKNOWLEDGED DOCUMENTS" >&2
  fi
  began=$(now)
  stop
  echo "[$name crash] SIGTERM took $(since "$began")s" >&2
  recovery_lines "$name crash" "$LOGS/$name-crash.log"
  start "$bin" "$dir" "$LOGS/$name-graceful.log"
  graceful_ready=$READY_S
  echo "[$name graceful] ready in ${graceful_ready}s, rss $(( $(kib VmRSS) / 1024 )) MiB" >&2
  stop
  recovery_lines "$name graceful" "$LOGS/$name-graceful.log"
  awk -v bin="$bin" -v docs="$DOCS" -v loaded="$loaded" -v crash="$crash_ready" -v graceful="$graceful_ready" \
    -v rss="$rss" 'BEGIN {printf "%s %d %.0f %.2f %.2f %d\n", bin, docs, docs / loaded, crash, graceful, rss / 1024}'
  rm -rf "$dir" "$dir.snapshots"
done
echo "server logs: $LOGS" >&2
