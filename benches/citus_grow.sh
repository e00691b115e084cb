#!/usr/bin/env bash
# Growing a Citus cluster while two warrant nodes serve (issue 46, item 3; the CI-sized version
# is tests/it/citus_grow.rs). On the cluster of `tests/citus.sh start` (a coordinator, two
# workers and a spare node):
#   1. a fresh database distributed over the two workers (benches/citus_database.sh: warrant's
#      role, `warrant db migrate`, docs/citus.sql), DOCS one-chunk documents of tenant `big` and DOCS/10 of tenant `small`
#      loaded through the admin API (benches/http/corpus.py), the HNSW index built after the load;
#   2. two warrant nodes serve it; wrk asks POST /v1/retrieve on both (half the connections
#      each, tenant `big`), in back-to-back windows of WINDOW, while a revoker (this script's
#      Python part) upserts a fresh document through node 0, revokes it through node 1 and, right
#      after the acknowledgement, asks both nodes for it;
#   3. meanwhile: the spare joins (`citus_add_node`), the shards are rebalanced
#      (`citus_rebalance_start`, then `citus_rebalance_wait`; REBALANCE_TRANSFER, default `block_writes`)
#      and `big` moves to shards of its own (`isolate_tenant_to_new_shard(..., 'CASCADE',
#      shard_transfer_mode => ISOLATE_TRANSFER)`, default `block_writes`), then ANALYZE
#      (ANALYZE_AFTER=0 leaves the new shards to autovacuum).
# Prints one line per wrk window (phase, requests/s, p50/p99, non-2xx and socket errors), the
# time each step took, and the revoker's counts (acknowledged, still visible on a node after
# the acknowledgement, failed requests). Needs wrk, psql, python3, curl and a release binary.
#
#   eval "$(tests/citus.sh start | tail -n 1)"
#   DOCS=100000 benches/citus_grow.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${BIN:-${CARGO_TARGET_DIR:-target}/release/warrant}"
DOCS="${DOCS:-100000}"
SHARDS="${SHARDS:-32}"
# Citus' shard_transfer_mode. `block_writes` copies a shard group with its writes waiting (reads
# go on). `auto` (logical replication, writes go on) cannot move warrant's shards on PostgreSQL
# 15: the tenant tables FORCE row-level security, and the apply worker of Citus' shard-move
# subscription refuses to replicate into them, so the move never ends (tests/it/citus_grow.rs).
REBALANCE_TRANSFER="${REBALANCE_TRANSFER:-block_writes}"
ISOLATE_TRANSFER="${ISOLATE_TRANSFER:-block_writes}"
WINDOW="${WINDOW:-10s}"
CONNECTIONS="${CONNECTIONS:-4}"
PORT="${PORT:-18590}"
: "${WARRANT_TEST_CITUS_URL:?run tests/citus.sh start first}"
: "${WARRANT_TEST_CITUS_WORKERS:?run tests/citus.sh start first}"
: "${WARRANT_TEST_CITUS_SPARE:?tests/citus.sh start prints WARRANT_TEST_CITUS_SPARE}"
for tool in wrk psql python3 curl bc; do
  command -v "$tool" >/dev/null || { echo "citus_grow.sh needs $tool" >&2; exit 1; }
done
SUPER="$WARRANT_TEST_CITUS_URL"                 # postgres://USER@HOST:PORT/postgres
USER_AT="${SUPER#postgres://}"; USER_NAME="${USER_AT%%@*}"
COORDINATOR="${USER_AT#*@}"; COORDINATOR="${COORDINATOR%%/*}"
ROLE=warrant_app
DATABASE="warrant_grow_$(date +%s)"
APP_URL="postgres://$ROLE@$COORDINATOR/$DATABASE"
HERE=benches/http
WORK="$(mktemp -d)"
PIDS=()
trap 'for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done; touch "$WORK/stop"; rm -rf "$WORK"' EXIT

on() { psql "postgres://$USER_NAME@$1/${2:-postgres}" -qAt -v ON_ERROR_STOP=1 -c "$3"; }
BIN="$BIN" SPARE=1 benches/citus_database.sh "$DATABASE" "$SHARDS" >/dev/null
export WARRANT_GROW_DATABASE_URL="$APP_URL"
export WARRANT__STORAGE__BACKEND=postgres WARRANT__STORAGE__POSTGRES__URL_ENV=WARRANT_GROW_DATABASE_URL
export WARRANT__STORAGE__POSTGRES__CA_FILE="${WARRANT_TEST_DATABASE_CA:-}"
export WARRANT__EMBEDDER__KIND=hashed WARRANT__DEMO__LOAD=false RUST_LOG=warn

# shellcheck source=benches/http/nodes.sh
. "$HERE/nodes.sh"
start_nodes 2
big_admin="$("$BIN" token --tenant big --sub loader --groups all --admin --ttl-seconds 86400)"
small_admin="$("$BIN" token --tenant small --sub loader --groups all --admin --ttl-seconds 86400)"
started=$(date +%s)
on "$COORDINATOR" "$DATABASE" "DROP INDEX IF EXISTS chunks_embedding_hnsw"
python3 "$HERE/corpus.py" load "http://127.0.0.1:$PORT" "$big_admin" "$DOCS"
python3 "$HERE/corpus.py" load "http://127.0.0.1:$PORT" "$small_admin" $(( DOCS / 10 ))
loaded=$(date +%s)
# The definition is migration 0001's; Citus builds it on every shard.
# One command per -c: Citus refuses DDL sent as several commands at once.
psql "postgres://$USER_NAME@$COORDINATOR/$DATABASE" -qAt -v ON_ERROR_STOP=1 -c "SET maintenance_work_mem = '512MB'" \
  -c "CREATE INDEX chunks_embedding_hnsw ON chunks USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 100)"
on "$COORDINATOR" "$DATABASE" "VACUUM ANALYZE"
echo "loaded $DOCS + $(( DOCS / 10 )) documents in $(( loaded - started )) s, indexed in $(( $(date +%s) - loaded )) s"

export TOKEN="$("$BIN" token --tenant big --sub reader --groups all --ttl-seconds 86400)"
export QUERIES="$WORK/queries.txt"
python3 "$HERE/corpus.py" queries 1000 >"$QUERIES"
echo "baseline" >"$WORK/phase"
# wrk in back-to-back windows on both nodes until the stop file appears.
(
  window=0
  while [ ! -e "$WORK/stop" ]; do
    phase=$(cat "$WORK/phase")
    for node in 0 1; do
      wrk -t1 -c$(( CONNECTIONS / 2 )) -d"$WINDOW" --timeout 30s --latency -s "$HERE/retrieve.lua" \
        "http://127.0.0.1:$(( PORT + node ))" >"$WORK/wrk.$window.$node" &
    done
    wait
    echo "$window $phase" >>"$WORK/windows"
    window=$(( window + 1 ))
  done
) &
load_pid=$!
# The revoker.
python3 - "$WORK" "$PORT" "$big_admin" "$small_admin" "$BIN" <<'PY' &
import json, os, subprocess, sys, time, urllib.error, urllib.request
work, port, big_admin, small_admin, binary = sys.argv[1:]
admins = {"big": big_admin, "small": small_admin}
readers = {tenant: subprocess.run([binary, "token", "--tenant", tenant, "--sub", "reader", "--groups", "all",
                                   "--ttl-seconds", "86400"], capture_output=True, text=True, check=True).stdout.strip()
           for tenant in admins}
def call(node, method, path, token, body):
    request = urllib.request.Request(f"http://127.0.0.1:{int(port) + node}{path}", method=method,
                                     data=json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read() or b"{}")
counts = {"acknowledged": 0, "visible_after_ack": 0, "failed": 0, "rounds": 0}
latencies = []
round_ = 0
while not os.path.exists(f"{work}/stop"):
    tenant = "big" if round_ % 2 == 0 else "small"
    doc_id, text = f"r{round_}", f"unique revocable memo number{round_} zebra"
    try:
        call(0, "PUT", "/v1/admin/documents", admins[tenant],
             {"documents": [{"doc_id": doc_id, "title": "", "text": text, "acl": {"groups": ["all"]}}]})
        begun = time.monotonic()
        call(1, "POST", "/v1/admin/acl/revoke", admins[tenant], {"doc_id": doc_id})
        latencies.append(time.monotonic() - begun)
        counts["acknowledged"] += 1
        for node in (0, 1):
            found = call(node, "POST", "/v1/retrieve", readers[tenant], {"query": text, "k": 10})
            if any(hit.get("doc_id") == doc_id for hit in found["chunks"]):
                counts["visible_after_ack"] += 1
    except (urllib.error.URLError, OSError, ValueError) as error:
        counts["failed"] += 1
        print(f"revoker: {error}", file=sys.stderr)
    counts["rounds"] += 1
    round_ += 1
latencies.sort()
counts["revoke_p50_ms"] = round(1000 * latencies[len(latencies) // 2], 1) if latencies else None
counts["revoke_max_ms"] = round(1000 * latencies[-1], 1) if latencies else None
with open(f"{work}/revoker.json", "w") as out:
    json.dump(counts, out)
PY
revoker_pid=$!

step() { # $1 phase, $2 SQL: runs it on the coordinator, prints how long it took
  echo "$1" >"$WORK/phase"
  local begun; begun=$(date +%s.%N)
  on "$COORDINATOR" "$DATABASE" "$2" >/dev/null
  printf '%-10s %6.1f s\n' "$1" "$(echo "$(date +%s.%N) - $begun" | bc)"
}
sleep "${WINDOW%s}"; sleep "${WINDOW%s}"
step add_node "SELECT citus_add_node('${WARRANT_TEST_CITUS_SPARE%:*}', ${WARRANT_TEST_CITUS_SPARE#*:})"
# Two statements, two transactions: the job must be committed before its workers see it.
step rebalance "SELECT citus_rebalance_start(shard_transfer_mode => '$REBALANCE_TRANSFER')"
step rebalance "SELECT citus_rebalance_wait()"
step isolate "SELECT isolate_tenant_to_new_shard('chunks', 'big', 'CASCADE', shard_transfer_mode => '$ISOLATE_TRANSFER')"
# The shards the split made have no statistics yet (autovacuum gets to them in its time): until
# then the planner guesses, and the isolated tenant's statements ran ~3x slower (measured).
if [ "${ANALYZE_AFTER:-1}" = 1 ]; then
  step analyze "ANALYZE"
fi
echo "after" >"$WORK/phase"
sleep "${WINDOW%s}"; sleep "${WINDOW%s}"
touch "$WORK/stop"
wait "$load_pid" "$revoker_pid"
on "$COORDINATOR" "$DATABASE" "SELECT 'placements on the new worker: ' || count(*) FROM pg_dist_shard_placement
  WHERE nodename = '${WARRANT_TEST_CITUS_SPARE%:*}' AND nodeport = ${WARRANT_TEST_CITUS_SPARE#*:}"
on "$COORDINATOR" "$DATABASE" "SELECT 'tenants on big''s shard: ' || count(DISTINCT tenant_id) FROM chunks
  WHERE get_shard_id_for_distribution_column('chunks', tenant_id) = get_shard_id_for_distribution_column('chunks', 'big'::text)"
echo "window phase requests/s p50_ms p99_ms non_2xx socket_errors"
python3 - "$WORK" <<'PY'
import sys
sys.path.insert(0, "benches/http")
from wrk_report import parse
work = sys.argv[1]
for line in open(f"{work}/windows"):
    window, phase = line.split()
    nodes = [parse(f"{work}/wrk.{window}.{node}") for node in (0, 1)]
    print(window, phase, f"{sum(n['rps'] for n in nodes):.0f}", f"{max(n['p50_ms'] for n in nodes):.2f}",
          f"{max(n['p99_ms'] for n in nodes):.2f}", sum(n["errors"] for n in nodes),
          sum(n.get("socket_errors", 0) for n in nodes))
PY
echo "revoker: $(cat "$WORK/revoker.json")"
