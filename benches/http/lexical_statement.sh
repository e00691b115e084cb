#!/usr/bin/env bash
# The postgres backend's lexical statement alone, as the database runs it: for each git revision
# given, its `sql::LEXICAL_SEARCH` is prepared and executed for the first N queries of
# `corpus.py queries 1000` (the HTTP benchmark's queries) as a reader of each group in READERS,
# k = 30, and PostgreSQL's own execution time is read (EXPLAIN ANALYZE, timing off). Revisions run in turn,
# ROUNDS times. Prints per run: revision, group, p50/p90/p99/max/mean in ms, and how many top-k
# lists differ from the first revision's (doc ids and f32 scores).
#
# Needs the database `benches/http/retrieve_load_postgres.sh` loads (DOCS one-chunk documents of
# tenant "bench", groups "all" on every document and "g0".."g9" on a tenth each), psql, python3.
#
#   eval "$(tests/postgres.sh start | tail -n 1)"
#   DOCS=100000 READERS="all g3" benches/http/lexical_statement.sh 9b8058a HEAD
set -euo pipefail
cd "$(dirname "$0")/../.."
DOCS="${DOCS:-100000}"
N="${N:-100}"
ROUNDS="${ROUNDS:-2}"
READERS="${READERS:-all g3}"
BASE="${DATABASE_URL:-${WARRANT_TEST_DATABASE_URL:-postgres://warrant@127.0.0.1:25432/postgres}}"
URL="${BASE%/*}/warrant_load_$DOCS"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
python3 benches/http/corpus.py queries 1000 >"$WORK/all-queries.txt"
head -n "$N" "$WORK/all-queries.txt" >"$WORK/queries.txt"

for revision in "$@"; do
  git show "$revision:src/postgres/sql.rs" | python3 -c '
import sys
source = sys.stdin.read()
start = source.index("pub const LEXICAL_SEARCH: &str = \"") + len("pub const LEXICAL_SEARCH: &str = \"")
print(source[start:source.index("\";", start)].replace("\\\"", "\"").replace("\\\\", "\\"))
' >"$WORK/$revision.sql"
done

run() { # $1 revision, $2 group, $3 what: times | results
  {
    echo "PREPARE s(text, text, text[], text, bigint) AS $(cat "$WORK/$1.sql");"
    while read -r query; do
      if [ "$3" = times ]; then
        echo "EXPLAIN (ANALYZE, TIMING OFF, SUMMARY ON, COSTS OFF) EXECUTE s('bench', 'reader', ARRAY['$2'], '$query', 30);"
      else
        echo "\\echo QUERY $query"
        echo "EXECUTE s('bench', 'reader', ARRAY['$2'], '$query', 30);"
      fi
    done <"$WORK/queries.txt"
  } | psql -qAt "$URL" | if [ "$3" = times ]; then sed -n 's/^Execution Time: \([0-9.]*\) ms$/\1/p'; else awk -F'|' '/^QUERY/ {print; next} {print $2 "|" $10}'; fi
}

echo "revision group p50_ms p90_ms p99_ms max_ms mean_ms lists_differing_from_$1"
for round in $(seq 1 "$ROUNDS"); do
  for group in $READERS; do
    for revision in "$@"; do
      run "$revision" "$group" times >"$WORK/times"
      [ "$round" = 1 ] && run "$revision" "$group" results >"$WORK/results-$revision-$group"
      differing=$(python3 - "$WORK/results-$1-$group" "$WORK/results-$revision-$group" <<'PY'
import sys
def lists(path):
    out, current = [], None
    for line in open(path):
        if line.startswith("QUERY"):
            current = []
            out.append(current)
        else:
            current.append(line.strip())
    return out
print(sum(a != b for a, b in zip(lists(sys.argv[1]), lists(sys.argv[2]))))
PY
)
      python3 - "$WORK/times" "$revision" "$group" "$differing" <<'PY'
import sys
values = sorted(float(line) for line in open(sys.argv[1]))
pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]
print(sys.argv[2], sys.argv[3], *("%.1f" % v for v in (pick(0.5), pick(0.9), pick(0.99), values[-1],
      sum(values) / len(values))), sys.argv[4])
PY
    done
  done
done
