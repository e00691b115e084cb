# Sourced by the load scripts: starts and stops warrant nodes on consecutive loopback ports.
# Uses BIN (the binary), PORT (the first node's port), WORK (logs: WORK/serverN.log) and the array
# PIDS of the nodes it started; the environment configures the nodes (WARRANT__*).

# start_nodes COUNT: starts COUNT nodes (node i on PORT + i) and waits until each is ready; exits
# the script, with the node's log, if one dies or is not ready in 300 s, or if a port already
# serves (an earlier run's node).
start_nodes() {
  local count=$1 node attempt
  PIDS=()
  for node in $(seq 0 $(( count - 1 ))); do
    if curl -fs "http://127.0.0.1:$(( PORT + node ))/healthz" >/dev/null 2>&1; then
      echo "something already serves 127.0.0.1:$(( PORT + node )) (an earlier run's node?)" >&2
      exit 1
    fi
  done
  for node in $(seq 0 $(( count - 1 ))); do
    WARRANT__SERVER__BIND="127.0.0.1:$(( PORT + node ))" "$BIN" serve >"$WORK/server$node.log" 2>&1 &
    PIDS+=($!)
  done
  for node in $(seq 0 $(( count - 1 ))); do
    for attempt in $(seq 1 600); do
      curl -fs "http://127.0.0.1:$(( PORT + node ))/readyz" >/dev/null 2>&1 && break
      kill -0 "${PIDS[$node]}" 2>/dev/null || { cat "$WORK/server$node.log"; exit 1; }
      [ "$attempt" = 600 ] && { echo "node $node did not become ready" >&2; exit 1; }
      sleep 0.5
    done
  done
}

# stop_nodes: SIGTERM to every started node, waiting for each.
stop_nodes() {
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid"; wait "$pid" || true; done
  PIDS=()
}
