#!/usr/bin/env bash
# HTTP load on POST /v1/retrieve with the postgres backend: DOCS one-chunk documents (hashed
# embedder) in one database, served by 1 and then 2 warrant nodes on that database, ROUNDS
# interleaved rounds. With 2 nodes, one wrk per node with half the connections each. Prints per
# round: nodes, requests/s (sum), latency p50/p99 (the worse node's), and CPU per request of the
# warrant nodes and of PostgreSQL (utime + stime over the wrk window, from /proc). Needs wrk,
# python3, curl, psql and a PostgreSQL with pgvector (`tests/postgres.sh start` starts one).
#
# The nodes connect as `warrant_app`, a role that is neither a superuser nor BYPASSRLS and owns the
# database, so row-level security binds them as in a deployment. CITUS=1 runs the same on the
# Citus cluster of `tests/citus.sh start` (a database distributed by benches/citus_database.sh
# over its two workers) instead of the single node.
#
#   benches/http/retrieve_load_postgres.sh          # DOCS=100000 ROUNDS=3 DURATION=20s
#   DOCS=20000 ROUNDS=1 benches/http/retrieve_load_postgres.sh
#   CITUS=1 DOCS=20000 benches/http/retrieve_load_postgres.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN="${BIN:-${CARGO_TARGET_DIR:-target}/release/warrant}"
DOCS="${DOCS:-100000}"
if [ "${CITUS:-0}" = 1 ]; then
  BASE="${WARRANT_TEST_CITUS_URL:?run tests/citus.sh start first}"
  DATABASE="warrant_load_citus_$DOCS"
else
  BASE="${DATABASE_URL:-postgres://warrant@127.0.0.1:25432/postgres}"
  DATABASE="warrant_load_app_$DOCS"
fi
ROLE=warrant_app
PORT="${PORT:-18490}"
DURATION="${DURATION:-20s}"
ROUNDS="${ROUNDS:-3}"
CONNECTIONS="${CONNECTIONS:-4}"
SERVER="${BASE#postgres://}"; SERVER="${SERVER#*@}"; SERVER="${SERVER%%/*}"
export WARRANT_LOAD_DATABASE_URL="postgres://$ROLE@$SERVER/$DATABASE"
SUPER_DATABASE_URL="${BASE%/*}/$DATABASE"
export WARRANT__STORAGE__BACKEND=postgres WARRANT__STORAGE__POSTGRES__URL_ENV=WARRANT_LOAD_DATABASE_URL
export WARRANT__EMBEDDER__KIND=hashed WARRANT__DEMO__LOAD=false RUST_LOG=warn
export WARRANT__STORAGE__POSTGRES__CA_FILE="${WARRANT_TEST_DATABASE_CA:-}"
HERE=benches/http
WORK="$(mktemp -d)"
PIDS=()
trap 'for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT

# shellcheck source=benches/http/nodes.sh
. "$HERE/nodes.sh"
ticks() { # utime + stime of the given pids
  local total=0
  for pid in "$@"; do total=$(( total + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0) )); done
  echo "$total"
}

exists=$(psql "$BASE" -Atc "SELECT 1 FROM pg_database WHERE datname = '$DATABASE'")
if [ "$exists" != 1 ]; then
  if [ "${CITUS:-0}" = 1 ]; then
    BIN="$BIN" benches/citus_database.sh "$DATABASE" >/dev/null
  else
    psql "$BASE" -qc "DO \$\$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$ROLE') THEN
      CREATE ROLE $ROLE LOGIN NOSUPERUSER NOBYPASSRLS; END IF; END \$\$" -c "CREATE DATABASE $DATABASE OWNER $ROLE"
    # A superuser's: warrant's role may not create extensions (migration 0001 finds it).
    psql "$SUPER_DATABASE_URL" -qc "CREATE EXTENSION vector"
  fi
fi
ADMIN="$("$BIN" token --tenant bench --sub loader --groups all --admin)"
export TOKEN="$("$BIN" token --tenant bench --sub reader --groups all --ttl-seconds 86400)"
export QUERIES="$WORK/queries.txt"
python3 "$HERE/corpus.py" queries 1000 >"$QUERIES"

loaded=$(psql "$SUPER_DATABASE_URL" -Atc "SELECT count(*) FROM chunks" 2>/dev/null || echo 0)
if [ "$loaded" -lt "$DOCS" ]; then
  start_nodes 1
  started=$(date +%s)
  # pgvector's HNSW index is built once after the load (CREATE INDEX is many times faster
  # than one graph insert per row); the definition is migration 0001's.
  psql "$SUPER_DATABASE_URL" -qc "DROP INDEX IF EXISTS chunks_embedding_hnsw"
  python3 "$HERE/corpus.py" load "http://127.0.0.1:$PORT" "$ADMIN" "$DOCS"
  echo "loaded $DOCS documents in $(( $(date +%s) - started )) s"
  stop_nodes
  psql "$SUPER_DATABASE_URL" -qc "SET maintenance_work_mem = '1GB'" \
    -c "CREATE INDEX chunks_embedding_hnsw ON chunks USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 100)" \
    -c "VACUUM ANALYZE"
  echo "indexed in $(( $(date +%s) - started )) s"
fi
psql "$SUPER_DATABASE_URL" -Atc "SELECT 'database bytes ' || pg_database_size(current_database()),
  'chunks table+indexes ' || pg_total_relation_size('chunks'),
  'postings table+indexes ' || coalesce(pg_total_relation_size(to_regclass('chunk_terms')), 0)"
TICK=$(getconf CLK_TCK)
echo "round nodes requests/s p50_ms p99_ms warrant_cpu_ms_per_request postgres_cpu_ms_per_request load_average"
for round in $(seq 1 "$ROUNDS"); do
  for nodes in 1 2; do
    start_nodes "$nodes"
    per_node=$(( CONNECTIONS / nodes ))
    warm=()
    for node in $(seq 0 $(( nodes - 1 ))); do
      wrk -t1 -c"$per_node" -d2s --timeout "${WRK_TIMEOUT:-30s}" -s "$HERE/retrieve.lua" "http://127.0.0.1:$(( PORT + node ))" >/dev/null &
      warm+=($!)
    done
    wait "${warm[@]}"
    database_pids=$(pgrep -x postgres | tr '\n' ' ')
    warrant_before=$(ticks "${PIDS[@]}")
    # shellcheck disable=SC2086
    postgres_before=$(ticks $database_pids)
    wrk_pids=()
    for node in $(seq 0 $(( nodes - 1 ))); do
      wrk -t1 -c"$per_node" -d"$DURATION" --timeout "${WRK_TIMEOUT:-30s}" --latency -s "$HERE/retrieve.lua" "http://127.0.0.1:$(( PORT + node ))" \
        >"$WORK/wrk$node.txt" &
      wrk_pids+=($!)
    done
    wait "${wrk_pids[@]}"
    warrant_after=$(ticks "${PIDS[@]}")
    # shellcheck disable=SC2086
    postgres_after=$(ticks $database_pids)
    stop_nodes
    python3 - "$WORK" "$nodes" "$round" "$(( warrant_after - warrant_before ))" "$(( postgres_after - postgres_before ))" \
      "$TICK" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import sys
sys.path.insert(0, "benches/http")
from wrk_report import parse
work, nodes, round_, warrant, postgres, tick, load = sys.argv[1:]
nodes_wrk = [parse(f"{work}/wrk{node}.txt") for node in range(int(nodes))]
rps = sum(wrk["rps"] for wrk in nodes_wrk)
requests = sum(wrk["requests"] for wrk in nodes_wrk)
p50 = max(wrk["p50_ms"] for wrk in nodes_wrk)
p99 = max(wrk["p99_ms"] for wrk in nodes_wrk)
errors = sum(wrk["errors"] for wrk in nodes_wrk)
per_request = lambda ticks: int(ticks) * 1000 / int(tick) / max(requests, 1)
print(f"{round_} {nodes} {rps:.0f} {p50:.2f} {p99:.2f} {per_request(warrant):.3f} {per_request(postgres):.3f} {load}"
      + (f" NON-2XX {errors}" if errors else ""))
PY
  done
done
