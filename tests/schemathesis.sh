#!/usr/bin/env bash
# OpenAPI conformance: schemathesis (pinned) against a real `warrant serve` — the debug binary, the
# hashed embedder, the demo corpus, a loopback port the kernel picks — with a token holding the admin, operator and replica roles (every route is exercised).
#
# Every check schemathesis has is on: no server error; every status, content type, header and
# body the server sends is the one /openapi.json documents; data the schema forbids is refused and
# data it allows is not refused with 400; a missing token is 401; an undocumented method is 405
# with `Allow`. No check is excluded; the one filter (tests/schemathesis_hooks.py) drops valid-
# looking upsert batches that repeat a doc_id, a rule JSON Schema cannot state; and one operation
# is left out, the replication stream (GET /v1/replica/stream), which by design never ends while
# its replica keeps up, so a request/response fuzzer can only time out on it (its refusals are
# probed in tests/it/openapi.rs, its frames in tests/it/replication.rs); and the multipart upload
# (POST /v1/admin/files), whose every schema-valid case carries a file that must be a document of
# its format, which random bytes are not (its refusals, each a documented 400, are probed in
# tests/it/files.rs; the same files given as `content` are dropped by the hooks). The seed and the
# example budget are fixed, so a run is repeatable and short (about 30 s of testing). Destructive
# calls (delete, revoke, snapshots) hit a throwaway server, in any order.
#
# Usage: tests/schemathesis.sh            (.ci/run calls it after `cargo test`)
#   SCHEMATHESIS_SEED=n SCHEMATHESIS_MAX_EXAMPLES=n tests/schemathesis.sh   to explore further.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tests/lib/serve.sh
source tests/lib/serve.sh

schemathesis_version=4.32.5
seed="${SCHEMATHESIS_SEED:-20250101}"
max_examples="${SCHEMATHESIS_MAX_EXAMPLES:-50}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/warrant-target}"

cargo build --quiet --bin warrant
binary="$CARGO_TARGET_DIR/debug/warrant"

# Installed under the target dir, never into the system Python (Debian marks it externally
# managed): a virtual environment, or, where Python has no venv module, a private --target
# directory. A second run reuses the install.
install="$CARGO_TARGET_DIR/schemathesis-$schemathesis_version"
schemathesis() {
  if [ -x "$install/venv/bin/python" ]; then
    "$install/venv/bin/python" -m schemathesis.cli "$@"
  else
    PYTHONPATH="$install/site" python3 -m schemathesis.cli "$@"
  fi
}
if ! schemathesis --version 2>/dev/null | grep -qF "$schemathesis_version"; then
  rm -rf "$install"
  pip_install=(-m pip install --quiet --disable-pip-version-check "schemathesis==$schemathesis_version")
  if python3 -m venv "$install/venv"; then
    "$install/venv/bin/python" "${pip_install[@]}"
  else
    rm -rf "$install/venv"
    python3 "${pip_install[@]}" --break-system-packages --target "$install/site"
  fi
  schemathesis --version
fi

use_workdir

# A fresh secret per run (never the demo key), the hashed embedder (no model download), snapshots
# written into the throwaway directory, port 0: the server prints the address it bound.
export WARRANT__AUTH__HS256_SECRET="schemathesis-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
export WARRANT__EMBEDDER__KIND=hashed
export WARRANT__SERVER__BIND=127.0.0.1:0
export WARRANT__DEMO__LOAD=true
export WARRANT__SNAPSHOTS__DIR="$workdir/snapshots"
export WARRANT__STORAGE__DIR="$workdir/data"
# The token below holds role replica: its subject must be a configured replica.
export WARRANT__AUTH__REPLICA_SUBJECTS='["schemathesis"]'
start_server

token="$("$binary" token --tenant acme --sub schemathesis --groups everyone,engineering --admin --operator --replica --ttl-seconds 900)"

echo "schemathesis $schemathesis_version against $base (seed $seed, at most $max_examples examples per operation)"
# The hooks drop generated upsert batches that repeat a doc_id (the one rule JSON Schema cannot
# state; see the file).
export SCHEMATHESIS_HOOKS="$PWD/tests/schemathesis_hooks.py"
# Run from the throwaway directory: schemathesis keeps its crash cache in ./.schemathesis (and
# would read a schemathesis.toml found there or above), neither of which belongs to the repo.
status=0
(cd "$workdir" && schemathesis run "$base/openapi.json" \
  --header "Authorization: Bearer $token" \
  --checks all \
  --seed "$seed" \
  --max-examples "$max_examples" \
  --workers 1 \
  --generation-database none \
  --request-timeout 30 \
  --exclude-path /v1/replica/stream \
  --exclude-path /v1/admin/files \
  --no-color) \
  || status=$?

if [ "$status" -ne 0 ]; then
  echo "schemathesis failed (exit $status); the server's log:" >&2
  tail -n 50 "$workdir/server.log" >&2
fi
exit "$status"
