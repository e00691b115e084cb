#!/usr/bin/env bash
# A real OpenID provider on 127.0.0.1 for the OIDC tests (tests/it/oidc.rs): NanoIDP 3.4.0 from
# PyPI (discovery, JWKS with previous keys kept published across rotations, password and
# client-credentials grants, custom claims, key rotation over its API), in a venv under a cache
# directory outside the clone, every package pinned (tests/oidc/requirements.txt).
#
#   tests/oidc/provider.sh start    # venv if missing + one shared provider on a free port; prints
#                                   # `export WARRANT_TEST_OIDC_ISSUER=... WARRANT_TEST_OIDC_DIR=...
#                                   # WARRANT_TEST_OIDC_VENV=...` on its last line
#   tests/oidc/provider.sh stop     # stops the shared provider (by its pid), removes its directory
#   tests/oidc/provider.sh install  # the venv only
#   tests/oidc/provider.sh run DIR PORT
#                                   # a provider in the foreground with its configuration, keys
#                                   # and log in DIR (the tests start private ones this way, for
#                                   # rotation and for stopping one)
#
# Environment: WARRANT_OIDC_CACHE (default /var/cache/warrant-oidc) holds the venv;
# WARRANT_TEST_OIDC_VENV names a venv to use instead; PYTHON (default python3, at least 3.10).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VERSION=3.4.0
CACHE="${WARRANT_OIDC_CACHE:-/var/cache/warrant-oidc}"
VENV="${WARRANT_TEST_OIDC_VENV:-$CACHE/venv-nanoidp-$VERSION}"
SHARED="${WARRANT_OIDC_SHARED_DIR:-/tmp/warrant-oidc-shared}"
PYTHON="${PYTHON:-python3}"

install() {
  if [ -f "$VENV/.complete" ]; then
    return
  fi
  "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "python 3.10 or newer is needed for nanoidp")'
  # A venv records its own path, so it is built where it lives; the marker, written last, tells
  # a finished one from one an interrupted install left (rebuilt from scratch).
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$HERE/requirements.txt"
  "$VENV/bin/python" -c 'import nanoidp' # fails the install if the package does not import
  touch "$VENV/.complete"
}

free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The provider's configuration for 127.0.0.1:PORT in DIR: issuer http://127.0.0.1:PORT (requests
# naming Host localhost:PORT get tokens with iss http://localhost:PORT, which warrant must refuse),
# audience `warrant`, one confidential client, one previous key kept published after a rotation.
configure() {
  local dir="$1" port="$2"
  mkdir -p "$dir/keys"
  cat >"$dir/settings.yaml" <<YAML
config_version: 1
server:
  host: "127.0.0.1"
  port: $port
oauth:
  issuer: "http://127.0.0.1:$port"
  issuer_from_request: true
  issuer_allowlist: ["http://127.0.0.1:$port", "http://localhost:$port"]
  audience: "warrant"
  token_expiry_minutes: 10
  clients:
    - client_id: "warrant-test"
      client_secret: "warrant-test-secret"
jwt:
  keys_dir: "$dir/keys"
  max_previous_keys: 1
logging:
  level: "INFO"
YAML
  cp "$HERE/users.yaml" "$dir/users.yaml"
}

run() {
  local dir="$1" port="$2"
  install >&2
  configure "$dir" "$port"
  cd "$dir"
  exec "$VENV/bin/python" -m nanoidp --config "$dir" --host 127.0.0.1 --port "$port"
}

wait_ready() {
  local url="$1" pid="$2"
  for _ in $(seq 1 300); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "the provider exited; its log:" >&2
      tail -n 40 "$SHARED/log" >&2 || true
      return 1
    fi
    if "$VENV/bin/python" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' \
      "$url/.well-known/openid-configuration" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  echo "the provider did not answer within 30 s" >&2
  return 1
}

start() {
  install
  if [ -f "$SHARED/pid" ] && kill -0 "$(cat "$SHARED/pid")" 2>/dev/null; then
    echo "the shared provider already runs: $(cat "$SHARED/issuer")" >&2
  else
    rm -rf "$SHARED"
    mkdir -p "$SHARED"
    local port
    port="$(free_port)"
    "$0" run "$SHARED" "$port" >"$SHARED/log" 2>&1 &
    echo $! >"$SHARED/pid"
    echo "http://127.0.0.1:$port" >"$SHARED/issuer"
    wait_ready "http://127.0.0.1:$port" "$(cat "$SHARED/pid")"
  fi
  echo "export WARRANT_TEST_OIDC_ISSUER=$(cat "$SHARED/issuer") WARRANT_TEST_OIDC_DIR=$SHARED WARRANT_TEST_OIDC_VENV=$VENV"
}

stop() {
  if [ -f "$SHARED/pid" ]; then
    local pid
    pid="$(cat "$SHARED/pid")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
  fi
  rm -rf "$SHARED"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  install) install ;;
  run) [ $# -eq 3 ] || { echo "usage: $0 run DIR PORT" >&2; exit 2; }; run "$2" "$3" ;;
  *) echo "usage: $0 start|stop|install|run DIR PORT" >&2; exit 2 ;;
esac
