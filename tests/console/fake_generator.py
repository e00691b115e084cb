#!/usr/bin/env python3
"""Test FAKE of an OpenAI-compatible chat completions server (standard library only), for the
console's Review view: the extractive generator never writes a claim that validation rejects,
so tests/console/run.sh starts a second server whose `openai` generator calls this one.

Every completion answers with two claims citing the source that holds "250 euros": one that
source supports and one it does not (validation withholds it: a partial answer, routed to review
with its rejection code). Usage: fake_generator.py PORT_FILE (binds 127.0.0.1:0, writes its port).
"""

import json
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SOURCE = re.compile(r'<source label="(S\d+)">\n(.*?)\n</source>', re.S)
SUPPORTED = "Hotel stays are reimbursed up to 250 euros per night in London, Paris and New York."
UNSUPPORTED = "Employees receive a company car after two years of service."


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.reply({"data": [{"id": "fake"}]})

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        user = "\n".join(m.get("content") or "" for m in request.get("messages", []) if m.get("role") == "user")
        label = next((found.group(1) for found in SOURCE.finditer(user) if "250 euros" in found.group(2)), "S1")
        output = {"answerable": True, "claims": [
            {"text": SUPPORTED, "citations": [label]},
            {"text": UNSUPPORTED, "citations": [label]},
        ]}
        self.reply({"choices": [{"message": {"role": "assistant", "content": json.dumps(output)}}]})


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(sys.argv[1], "w") as out:
        out.write(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main()
