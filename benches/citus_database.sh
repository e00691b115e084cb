#!/usr/bin/env bash
# A database on the Citus cluster of `tests/citus.sh start`, distributed as an operator would
# (docs/citus.sql, "Roles" and the header): warrant's role `warrant_app` (neither a superuser nor
# BYPASSRLS) on every node, the database owned by it on every node with Citus and pgvector, the
# workers registered, `warrant db migrate` as that role, then docs/citus.sql as the superuser.
# Prints the database's URL for `warrant_app`. Used by benches/citus_grow.sh and
# benches/http/retrieve_load_postgres.sh (CITUS=1).
#
#   benches/citus_database.sh NAME [SHARDS]     # BIN: the warrant binary (db migrate)
#   SPARE=1 ...                                 # also prepare $WARRANT_TEST_CITUS_SPARE to join later
set -euo pipefail
cd "$(dirname "$0")/.."
NAME="${1:?usage: benches/citus_database.sh NAME [SHARDS]}"
SHARDS="${2:-32}"
BIN="${BIN:-${CARGO_TARGET_DIR:-target}/release/warrant}"
: "${WARRANT_TEST_CITUS_URL:?run tests/citus.sh start first}"
: "${WARRANT_TEST_CITUS_WORKERS:?run tests/citus.sh start first}"
USER_AT="${WARRANT_TEST_CITUS_URL#postgres://}"; USER_NAME="${USER_AT%%@*}"
COORDINATOR="${USER_AT#*@}"; COORDINATOR="${COORDINATOR%%/*}"
ROLE=warrant_app
on() { psql "postgres://$USER_NAME@$1/${2:-postgres}" -qAt -v ON_ERROR_STOP=1 -c "$3" >/dev/null; }
IFS=',' read -r -a WORKERS <<<"$WARRANT_TEST_CITUS_WORKERS"
NODES=("$COORDINATOR" "${WORKERS[@]}")
if [ "${SPARE:-0}" = 1 ]; then
  NODES+=("${WARRANT_TEST_CITUS_SPARE:?tests/citus.sh start prints WARRANT_TEST_CITUS_SPARE}")
fi
for node in "${NODES[@]}"; do
  on "$node" postgres "DO \$\$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$ROLE') THEN
    CREATE ROLE $ROLE LOGIN NOSUPERUSER NOBYPASSRLS; END IF; END \$\$"
  on "$node" postgres "CREATE DATABASE $NAME OWNER $ROLE"
  on "$node" "$NAME" "CREATE EXTENSION citus"
  on "$node" "$NAME" "CREATE EXTENSION vector"
done
on "$COORDINATOR" postgres "ALTER DATABASE $NAME SET citus.shard_count = $SHARDS"
on "$COORDINATOR" "$NAME" "SELECT citus_set_coordinator_host('${COORDINATOR%:*}', ${COORDINATOR#*:})"
for worker in "${WORKERS[@]}"; do
  on "$COORDINATOR" "$NAME" "SELECT citus_add_node('${worker%:*}', ${worker#*:})"
done
URL="postgres://$ROLE@$COORDINATOR/$NAME"
WARRANT_CITUS_DATABASE_URL="$URL" WARRANT__STORAGE__BACKEND=postgres \
  WARRANT__STORAGE__POSTGRES__URL_ENV=WARRANT_CITUS_DATABASE_URL WARRANT__EMBEDDER__KIND=hashed \
  RUST_LOG=warn "$BIN" db migrate >/dev/null
psql "postgres://$USER_NAME@$COORDINATOR/$NAME" -qAt -v ON_ERROR_STOP=1 -f docs/citus.sql >/dev/null 2>&1
echo "$URL"
