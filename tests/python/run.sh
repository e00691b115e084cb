#!/usr/bin/env bash
# The Python client and its LangChain and LlamaIndex retrievers (clients/python): its types
# (mypy --strict), then pytest against a real `warrant serve` that the tests start themselves
# (clients/python/tests/conftest.py: the debug binary on a loopback port, the hashed embedder, the
# demo corpus, a throwaway data directory and secret).
#
# The virtual environment lives outside the clone, under /var/cache/warrant-py (WARRANT_PY_VENV
# overrides it), with every version pinned by clients/python/constraints.txt; it is made again
# when the pins, the package's metadata, this script or the Python version change, and reused
# otherwise (then only the package itself is reinstalled from this checkout, offline). The server
# binary is $WARRANT_BIN, default $CARGO_TARGET_DIR/debug/warrant (built here when not given).
#
# Usage: tests/python/run.sh [pytest arguments]     (.ci/run calls it after the OpenAPI stage)
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/warrant-target}"
package=clients/python
venv="${WARRANT_PY_VENV:-/var/cache/warrant-py}"

if [ -z "${WARRANT_BIN:-}" ]; then
  cargo build --quiet --bin warrant
  WARRANT_BIN="$CARGO_TARGET_DIR/debug/warrant"
fi
export WARRANT_BIN

pip=(-m pip install --quiet --disable-pip-version-check --constraint "$package/constraints.txt")
stamp="$({ python3 --version; cat "$package/constraints.txt" "$package/pyproject.toml" "$0"; } | sha256sum | cut -c1-16)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "making $venv (pinned by $package/constraints.txt)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  # The build backend first, so the package builds without an isolated environment of its own.
  "$venv/bin/python" "${pip[@]}" hatchling
  "$venv/bin/python" "${pip[@]}" --no-build-isolation "./$package[langchain,llamaindex,test]"
  echo "$stamp" >"$venv/.stamp"
else
  "$venv/bin/python" "${pip[@]}" --no-deps --no-build-isolation --force-reinstall "./$package"
fi

cd "$package"
echo "mypy --strict src/warrant_client"
"$venv/bin/python" -m mypy --strict --cache-dir "$venv/mypy-cache" src/warrant_client
PYTHONDONTWRITEBYTECODE=1 exec "$venv/bin/python" -m pytest -q tests "$@"
