#!/usr/bin/env bash
# A Citus worker frozen, then killed, under load, measured from outside (issue 59): one
# `warrant serve` on the PostgreSQL backend (default deadlines: statement_timeout 2 s,
# request_timeout_ms 5 s) over a database distributed on the first worker of `tests/citus.sh start`
# and its freezable node, a tenant on each. A client reads both tenants without pause (the frozen
# worker's tenant from 4 threads at once, beyond its share of the pool) and asks /readyz every
# 200 ms, through four phases: before, the freezable node frozen (SIGSTOP of its postmaster and
# children: tests/citus.sh freeze), after the thaw, and the node killed (pg_ctl -m immediate).
# Prints, per phase: the healthy tenant's reads, errors and p50/p99; the frozen tenant's answers
# by status and code with their latency; /readyz's statuses and slowest answer; the time from the
# thaw to the frozen tenant's first 200.
#
#   eval "$(tests/citus.sh start | tail -n 1)"
#   BIN=target/release/warrant benches/citus_freeze.sh      # FREEZE=30 (s), PHASE=10 (s), PORT=18590
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${BIN:-${CARGO_TARGET_DIR:-target}/release/warrant}"
FREEZE="${FREEZE:-30}"
PHASE="${PHASE:-10}"
PORT="${PORT:-18590}"
: "${WARRANT_TEST_CITUS_URL:?run tests/citus.sh start first}"
: "${WARRANT_TEST_CITUS_WORKERS:?run tests/citus.sh start first}"
: "${WARRANT_TEST_CITUS_FREEZABLE:?tests/citus.sh start prints WARRANT_TEST_CITUS_FREEZABLE}"
for tool in psql python3 curl; do
  command -v "$tool" >/dev/null || { echo "citus_freeze.sh needs $tool" >&2; exit 1; }
done
USER_AT="${WARRANT_TEST_CITUS_URL#postgres://}"; USER_NAME="${USER_AT%%@*}"
COORDINATOR="${USER_AT#*@}"; COORDINATOR="${COORDINATOR%%/*}"
HEALTHY_WORKER="${WARRANT_TEST_CITUS_WORKERS%%,*}"
FROZEN_WORKER="$WARRANT_TEST_CITUS_FREEZABLE"
DATABASE="warrant_freeze_$(date +%s)"
WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  tests/citus.sh thaw "${FROZEN_WORKER##*:}" 2>/dev/null || true
  tests/citus.sh revive "${FROZEN_WORKER##*:}" >/dev/null 2>&1 || true
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

WARRANT_TEST_CITUS_WORKERS="$HEALTHY_WORKER,$FROZEN_WORKER" BIN="$BIN" benches/citus_database.sh "$DATABASE" >/dev/null
export WARRANT_FREEZE_DATABASE_URL="postgres://warrant_app@$COORDINATOR/$DATABASE"
export WARRANT__STORAGE__BACKEND=postgres WARRANT__STORAGE__POSTGRES__URL_ENV=WARRANT_FREEZE_DATABASE_URL
export WARRANT__EMBEDDER__KIND=hashed WARRANT__DEMO__LOAD=false RUST_LOG=warn
# shellcheck source=benches/http/nodes.sh
. benches/http/nodes.sh
start_nodes 1

# A tenant name whose shard group is on the worker at $1 (host:port).
tenant_on() {
  local prefix=$2 number port
  for number in $(seq 0 499); do
    port=$(psql "postgres://$USER_NAME@$COORDINATOR/$DATABASE" -qAt -c \
      "SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = get_shard_id_for_distribution_column('warrant_tenants', '$prefix$number'::text)")
    [ "$port" = "${1##*:}" ] && { echo "$prefix$number"; return; }
  done
  echo "no tenant on $1" >&2; exit 1
}
HEALTHY="$(tenant_on "$HEALTHY_WORKER" healthy)"
FROZEN="$(tenant_on "$FROZEN_WORKER" frozen)"
token() { "$BIN" token --tenant "$1" --sub "$2" --groups travel ${3:+--admin} --ttl-seconds 86400; }
for tenant in "$HEALTHY" "$FROZEN"; do
  curl -fsS -X PUT "http://127.0.0.1:$PORT/v1/admin/documents" -H "Authorization: Bearer $(token "$tenant" root admin)" \
    -H 'Content-Type: application/json' -d '{"documents": [{"doc_id": "hotels", "title": "Hotels",
      "text": "Hotel stays are reimbursed up to 180 euros per night in London.", "acl": {"groups": ["travel"]}}]}' >/dev/null
done

python3 - "$PORT" "$(token "$HEALTHY" alice)" "$(token "$FROZEN" alice)" "${FROZEN_WORKER##*:}" "$FREEZE" "$PHASE" "$BIN" <<'PY'
import json, subprocess, sys, threading, time, urllib.error, urllib.request
port, healthy, frozen, frozen_port, freeze, phase, binary = sys.argv[1:]
freeze, phase = float(freeze), float(phase)
base = f"http://127.0.0.1:{port}"
records = []  # (kind, phase, start, seconds, status, code)
lock = threading.Lock()
state = {"phase": "before", "stop": False}

def call(kind, method, path, token=None, body=None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, method=method, data=data, headers=headers)
    phase_now, started = state["phase"], time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            status, payload = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, payload = error.code, error.read()
    except Exception as error:  # a reset or a client timeout: counted, never hidden
        status, payload = 0, json.dumps({"code": type(error).__name__}).encode()
    seconds = time.monotonic() - started
    try:
        code = json.loads(payload).get("code", "") if status != 200 else ""
    except ValueError:
        code = ""
    with lock:
        records.append((kind, phase_now, started, seconds, status, code))
    return status

def reads(kind, token):
    while not state["stop"]:
        call(kind, "POST", "/v1/retrieve", token, {"query": "hotel stays per night"})

def readiness():
    while not state["stop"]:
        call("readyz", "GET", "/readyz")
        time.sleep(0.2)

threads = [threading.Thread(target=reads, args=("healthy", healthy))]
threads += [threading.Thread(target=reads, args=("frozen", frozen)) for _ in range(4)]
threads += [threading.Thread(target=readiness)]
for thread in threads:
    thread.start()
def citus(*arguments):
    subprocess.run(["tests/citus.sh", *arguments], check=True, stdout=subprocess.DEVNULL)
thawed = None
try:
    time.sleep(phase)
    state["phase"] = "frozen"
    citus("freeze", frozen_port)
    time.sleep(freeze)
    citus("thaw", frozen_port)
    thawed = time.monotonic()
    state["phase"] = "thawed"
    time.sleep(phase)
    state["phase"] = "killed"
    citus("kill", frozen_port)
    time.sleep(phase)
finally:
    subprocess.run(["tests/citus.sh", "thaw", frozen_port], stdout=subprocess.DEVNULL)
    state["stop"] = True
    for thread in threads:
        thread.join()

def quantile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")
print(f"worker {frozen_port} frozen {freeze:.0f} s, then killed; phases of {phase:.0f} s; binary {binary}")
for name in ("before", "frozen", "thawed", "killed"):
    for kind in ("healthy", "frozen", "readyz"):
        rows = [row for row in records if row[0] == kind and row[1] == name]
        if not rows:
            continue
        ok = [row[3] for row in rows if row[4] == 200]
        failed = [row for row in rows if row[4] != 200]
        by_answer = {}
        for row in rows:
            key = f"{row[4]}{' ' + row[5] if row[5] else ''}"
            by_answer.setdefault(key, []).append(row[3])
        answers = ", ".join(f"{key}: {len(times)} (p50 {quantile(times, .5)*1000:.0f} ms, max {max(times)*1000:.0f} ms)"
                            for key, times in sorted(by_answer.items()))
        print(f"  {name:7} {kind:8} {len(rows):5} requests, {len(failed):4} not 200; "
              f"200s p50 {quantile(ok, .5)*1000:.1f} ms p99 {quantile(ok, .99)*1000:.1f} ms | {answers}")
if thawed is not None:
    served = [row[2] + row[3] for row in records if row[0] == "frozen" and row[4] == 200 and row[2] >= thawed]
    first = min(served) - thawed if served else float("nan")
    print(f"  the frozen worker's tenant answered 200 again {first*1000:.0f} ms after the thaw")
PY
