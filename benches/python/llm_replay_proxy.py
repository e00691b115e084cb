#!/usr/bin/env python3
"""A recording and replaying proxy in front of an OpenAI-compatible server, for answer evaluations.

`warrant eval answers` with a real model spends almost all of its time in generation. When a
change only touches what the server does with the model's replies (validation, anchoring), two
runs send the same prompts, so the second can read the first's replies instead of asking again:
the comparison is then exactly paired (the same reply to the same prompt) and takes minutes.

Every POST is keyed by the SHA-256 of its path and body. A key seen before is answered from DIR; a new one
is forwarded to UPSTREAM, and a 200 reply is stored (written to a temporary file and renamed),
with the request beside it (`KEY.request.json`) for reading what the model was shown.
Requests that differ by one byte (a repair prompt that quotes a different rejected answer) go to
the model. The proxy never changes a body; it counts hits and misses on stderr.

    python3 benches/python/llm_replay_proxy.py --upstream http://127.0.0.1:18080 \
        --listen 127.0.0.1:18081 --dir /tmp/llm-replies
    # then WARRANT__GENERATOR__BASE_URL=http://127.0.0.1:18081/v1 warrant eval answers ...
"""

import argparse
import hashlib
import http.server
import os
import sys
import tempfile
import threading
import urllib.error
import urllib.request


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--upstream", required=True, help="base address of the real server")
    parser.add_argument("--listen", default="127.0.0.1:18081", help="HOST:PORT to listen on")
    parser.add_argument("--dir", required=True, help="directory of stored replies")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per upstream call")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    counts = {"hit": 0, "miss": 0}
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            key = hashlib.sha256(self.path.encode() + b"\0" + body).hexdigest()
            stored = os.path.join(args.dir, key + ".json")
            if os.path.exists(stored):
                with open(stored, "rb") as handle:
                    reply, status = handle.read(), 200
                kind = "hit"
            else:
                kind = "miss"
                request = urllib.request.Request(
                    args.upstream.rstrip("/") + self.path,
                    data=body,
                    headers={"Content-Type": "application/json"},
                    method="POST",
                )
                try:
                    with urllib.request.urlopen(request, timeout=args.timeout) as response:
                        reply, status = response.read(), response.status
                except urllib.error.HTTPError as error:
                    reply, status = error.read(), error.code
                if status == 200:
                    for path, data in ((stored[: -len(".json")] + ".request.json", body), (stored, reply)):
                        handle, temporary = tempfile.mkstemp(dir=args.dir, suffix=".tmp")
                        with os.fdopen(handle, "wb") as out:
                            out.write(data)
                        os.replace(temporary, path)
            with lock:
                counts[kind] += 1
                print(f"{kind} {key[:12]} hits={counts['hit']} misses={counts['miss']}", file=sys.stderr, flush=True)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *_: object) -> None:
            pass

    host, port = args.listen.rsplit(":", 1)
    http.server.ThreadingHTTPServer((host, int(port)), Handler).serve_forever()


if __name__ == "__main__":
    main()
