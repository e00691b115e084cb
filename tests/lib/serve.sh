# Sourced by the scripts that test a running server (tests/schemathesis.sh, tests/console/run.sh).
#
# use_workdir: makes a throwaway $workdir and, on exit, stops the server (if one was started)
# and removes the directory.
use_workdir() {
  workdir="$(mktemp -d)"
  server_pid=""
  trap stop_server EXIT
  trap 'exit 130' INT TERM
}

stop_server() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$workdir"
}
#
# start_server: runs "$binary" serve in the background with the WARRANT__* environment the caller
# exported (bind 127.0.0.1:0: the server prints the address it bound), logging to
# "$workdir/server.log", and waits until /readyz answers. Sets server_pid and base
# (http://127.0.0.1:PORT). Exits 1, printing the server's log, when it stops or is not ready
# after 120 s. use_workdir's EXIT trap stops it.
start_server() {
  "$binary" serve >"$workdir/server.log" 2>&1 &
  server_pid=$!
  base=""
  for _ in $(seq 1 600); do
    base="$(sed -n 's/^warrant listening on \(http:\/\/127\.0\.0\.1:[0-9]*\)$/\1/p' "$workdir/server.log" | head -n 1)"
    if [ -n "$base" ] && curl --silent --fail "$base/readyz" >/dev/null; then
      return 0
    fi
    if ! kill -0 "$server_pid" 2>/dev/null; then
      echo "warrant serve exited before it was ready:" >&2
      cat "$workdir/server.log" >&2
      exit 1
    fi
    base=""
    sleep 0.2
  done
  echo "warrant serve was not ready after 120 s:" >&2
  cat "$workdir/server.log" >&2
  exit 1
}
