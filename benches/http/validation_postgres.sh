#!/usr/bin/env bash
# The validation stage of /v1/answer on the PostgreSQL backend (MiniLM, the extractive generator,
# the demo corpus), two binaries in turn, twice, a fresh database each, the verifier's sentence
# cache off (the cold path of a corpus larger than the cache); prints answers by status and the
# validation stage p50 / p95 and the retrieval stage p50 in ms. Needs the MiniLM model in models/, python3, curl, psql.
#
#   benches/http/validation_postgres.sh BEFORE_BINARY AFTER_BINARY
set -euo pipefail
cd "$(dirname "$0")/../.."
BEFORE="$1" AFTER="$2"
eval "$(tests/postgres.sh start | tail -n 1)"
BASE="${WARRANT_TEST_DATABASE_URL%/*}"
QUERY=""
case "$WARRANT_TEST_DATABASE_URL" in *\?*) QUERY="?${WARRANT_TEST_DATABASE_URL#*\?}";; esac
PORT=18490
for round in 1 2; do
for name in before after; do
  if [ "$name" = before ]; then BIN="$BEFORE"; else BIN="$AFTER"; fi
  db="val_${name}_${round}_$$"
  psql "$WARRANT_TEST_DATABASE_URL" -qc "CREATE DATABASE $db" >/dev/null
  export WARRANT_DATABASE_URL="$BASE/$db$QUERY"
  WARRANT__STORAGE__BACKEND=postgres WARRANT__STORAGE__POSTGRES__CA_FILE="$WARRANT_TEST_DATABASE_CA" \
    WARRANT__VERIFIER__SENTENCE_CACHE=0 WARRANT__SERVER__BIND=127.0.0.1:$PORT RUST_LOG=warn \
    "$BIN" serve > "${TMPDIR:-/tmp}"/validation-$name.log 2>&1 &
  PID=$!
  for _ in $(seq 1 240); do curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break; sleep 0.5; done
  TOKEN=$("$BIN" token --tenant acme --sub alice --groups everyone,engineering)
  : > "${TMPDIR:-/tmp}"/validation-$name-$round.txt
  for i in $(seq 1 30); do
    for q in "How much are hotel stays reimbursed per night in London?" "How often are laptops replaced?" "What is the reorganisation plan?"; do
      curl -s "http://127.0.0.1:$PORT/v1/answer" -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' \
        -d "{\"question\": \"$q\"}" | python3 -c 'import json,sys; r=json.load(sys.stdin); m=r.get("metrics",{}).get("stages_ms",{}); print(r.get("status"), m.get("validation"), m.get("retrieval"), r.get("metrics",{}).get("total_ms"))' >> "${TMPDIR:-/tmp}"/validation-$name-$round.txt
    done
  done
  kill -TERM $PID; wait $PID || true
  python3 - "$name" "$round" "${TMPDIR:-/tmp}"/validation-$name-$round.txt <<'PY'
import sys, statistics
rows=[l.split() for l in open(sys.argv[3]) if l.strip()]
val=[float(r[1]) for r in rows if r[1] != 'None']
ret=[float(r[2]) for r in rows if r[2] != 'None']
st={}
for r in rows: st[r[0]]=st.get(r[0],0)+1
q=lambda v,p: sorted(v)[min(len(v)-1,int(p*len(v)))] if v else None
print(sys.argv[1], sys.argv[2], 'answers', len(rows), st, 'validation p50', q(val,.5), 'p95', q(val,.95), 'retrieval p50', q(ret,.5))
PY
done
done
tests/postgres.sh stop >/dev/null 2>&1 || true
