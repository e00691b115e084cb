#!/usr/bin/env bash
# Every test SECURITY.md names exists: each test filter it writes is checked against the tests
# `cargo test` really has (the library's unit tests and the `it` integration binary, from
# `cargo test ... -- --list`), so a renamed or moved test cannot leave the page citing nothing.
#
# The convention (SECURITY.md, "Defences and their tests"): a test is named in backticks by its
# path, every segment in lowercase snake case (`http::auth::tests::leeway_tolerates_small_clock_skew_only`);
# a path may end in a group (`config::tests::{a, b}`: each member is checked), in `*` or `…` (a
# prefix: some test must start with it), or at a module (`oidc::keys::tests`: some test must lie
# in it). Any other backticked text (a code path with a type, `oidc::Provider::verify`, a metric,
# a file) is not a test name and is not checked. A span may run over a line break.
#
# Usage: tests/doc_filters.sh [FILE...]      (default SECURITY.md; .ci/run calls it after
# `cargo test`, whose build it reuses). Exits 1 naming every filter that matches no test.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/warrant-target}"

files=("$@")
[ "${#files[@]}" -gt 0 ] || files=(SECURITY.md)

tests="$(mktemp)"
trap 'rm -f "$tests"' EXIT
# `--list` prints `name: test` per test (and `name: benchmark`); the summary lines are dropped.
for target in --lib "--test it"; do
  # shellcheck disable=SC2086 # `--test it` is two arguments
  if ! listed="$(cargo test -q $target -- --list 2>/dev/null)"; then
    echo "doc_filters: cargo test $target -- --list failed" >&2
    exit 2
  fi
  printf '%s\n' "$listed" | sed -n 's/: \(test\|benchmark\)$//p' >>"$tests"
done
if [ ! -s "$tests" ]; then
  echo "doc_filters: no test was listed" >&2
  exit 2
fi

# The backticked spans of a file, one a line, whitespace runs (line breaks) folded to one space;
# fenced code blocks are skipped.
spans() {
  awk '/^[ \t]*```/ { fenced = !fenced; next } !fenced' "$1" |
    awk 'BEGIN { RS = "`" } NR % 2 == 0 { gsub(/[ \t\n]+/, " "); print }'
}

name='[a-z_][a-z0-9_]*'
path="^${name}(::${name})*::"
checked=0
missing=0
for file in "${files[@]}"; do
  while IFS= read -r span; do
    filters=()
    if [[ "$span" =~ ${path}\{([a-z0-9_,\ ]+)\}$ ]]; then
      prefix="${span%%\{*}"
      IFS=', ' read -r -a members <<<"${BASH_REMATCH[2]}"
      for member in "${members[@]}"; do
        [ -n "$member" ] && filters+=("$prefix$member")
      done
    elif [[ "$span" =~ ${path}(${name})?(\*|…)?$ ]]; then
      filters=("$span")
    else
      continue
    fi
    for filter in "${filters[@]}"; do
      checked=$((checked + 1))
      case "$filter" in
        *'*' | *'…')
          stem="${filter%\*}"
          stem="${stem%…}"
          awk -v stem="$stem" 'index($0, stem) == 1 { found = 1; exit } END { exit !found }' "$tests" && continue
          ;;
        *)
          awk -v name="$filter" '$0 == name || index($0, name "::") == 1 { found = 1; exit } END { exit !found }' \
            "$tests" && continue
          ;;
      esac
      echo "$file names \`$filter\`, which matches no test (cargo test --lib / --test it -- --list)" >&2
      missing=$((missing + 1))
    done
  done < <(spans "$file")
done

if [ "$checked" -eq 0 ]; then
  echo "doc_filters: no test name found in ${files[*]}: the convention above is not being followed" >&2
  exit 1
fi
if [ "$missing" -gt 0 ]; then
  echo "doc_filters: $missing of $checked test names match no test" >&2
  exit 1
fi
echo "doc_filters: all $checked test names in ${files[*]} match a test"
