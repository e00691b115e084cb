#!/usr/bin/env bash
# The web console in a real headless browser: Debian's chromium + chromium-driver, driven over
# the W3C WebDriver protocol by tests/console/browser.py (Python standard library only, nothing
# from PyPI), against the debug `warrant serve` on a loopback port the kernel picks, in demo mode
# (the demo corpus, the published demo key, the hashed embedder, a throwaway data directory).
#
# The flow: demo sign-in, ask, open a citation and check the highlighted span against the corpus,
# compare two principals, revoke as admin and ask again (abstention), upload a document carrying
# <img onerror> and <script> and check nothing runs and the text shows literally, upload a 4.5 MB
# PDF (past the JSON body limit) and a Markdown file and check the chips and the source view say
# "p. 3" and "Travel › Hotels", the ops view,
# and the Review view: with [review] on (every answer sampled, the abstentions the flow produces
# queued), a reviewer token minted by `warrant token --reviewer` pages the queue, sees a claim's
# cited span highlighted, a revoked source withheld, gives verdicts by keyboard and by click; a
# non-reviewer gets no Review tab and the API's 403. Then a second server whose generator is a
# test fake (tests/console/fake_generator.py) answers partially: the reviewer sees the rejected
# claim with its code and judges it.
# Screenshots of each view go to $CONSOLE_SCREENSHOTS (default target/console-screenshots/).
#
# Usage: tests/console/run.sh          (.ci/run calls it; installs chromium when missing)
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tests/lib/serve.sh
source tests/lib/serve.sh

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
screenshots="${CONSOLE_SCREENSHOTS:-$PWD/target/console-screenshots}"

if ! command -v chromedriver >/dev/null || ! command -v chromium >/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "chromium and chromium-driver are missing; install them (apt-get install chromium chromium-driver)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
fi

cargo build --quiet --bin warrant
binary="$CARGO_TARGET_DIR/debug/warrant"

use_workdir

# Demo mode needs the published demo key, which serve accepts only on loopback.
unset WARRANT__AUTH__HS256_SECRET
export WARRANT__EMBEDDER__KIND=hashed
export WARRANT__SERVER__BIND=127.0.0.1:0
export WARRANT__DEMO__LOAD=true
export WARRANT__SNAPSHOTS__DIR="$workdir/snapshots"
export WARRANT__STORAGE__DIR="$workdir/data"
export WARRANT__REVIEW__ENABLED=true
export WARRANT__REVIEW__SAMPLE_ANSWERED=1.0
export WARRANT__REVIEW__ABSTENTIONS='["no_authorized_evidence", "insufficient_evidence", "source_revoked"]'
start_server
REVIEWER_TOKEN="$("$binary" token --tenant acme --sub rita --groups everyone --reviewer)"
export REVIEWER_TOKEN

mkdir -p "$screenshots"
rm -f "$screenshots"/*.png
status=0
python3 tests/console/browser.py "$base" "$screenshots" "$workdir" || status=$?
if [ "$status" -ne 0 ]; then
  echo "console browser test failed (exit $status); the server's log:" >&2
  tail -n 30 "$workdir/server.log" >&2
  exit "$status"
fi

# Rejected claims in the Review view. The extractive generator never writes a claim validation
# rejects, so a second server's `openai` generator calls tests/console/fake_generator.py (a test
# fake: one claim its source supports, one it does not, so the answer is partial).
kill "$server_pid" && wait "$server_pid" 2>/dev/null || true
python3 tests/console/fake_generator.py "$workdir/fake.port" &
fake_pid=$!
trap 'kill "$fake_pid" 2>/dev/null || true; stop_server' EXIT
for _ in $(seq 1 100); do [ -s "$workdir/fake.port" ] && break; sleep 0.1; done
export WARRANT__GENERATOR__KIND=openai
export WARRANT__GENERATOR__BASE_URL="http://127.0.0.1:$(cat "$workdir/fake.port")/v1"
export WARRANT__GENERATOR__MODEL=fake
export WARRANT__STORAGE__DIR="$workdir/data-partial"
export WARRANT__SNAPSHOTS__DIR="$workdir/snapshots-partial"
start_server
python3 tests/console/browser.py "$base" "$screenshots" "$workdir" partial || status=$?
if [ "$status" -ne 0 ]; then
  echo "console browser test (rejected claims) failed (exit $status); the server's log:" >&2
  tail -n 30 "$workdir/server.log" >&2
fi
exit "$status"
