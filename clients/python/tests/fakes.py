"""Test FAKES (standard library HTTP servers on loopback, each in a thread of the test process).

- :class:`FakeWarrantServer` is NOT warrant: it answers each request with the next scripted
  response and records what it received. It stands in for states a real server cannot be put in
  on demand (overloaded with `Retry-After`, a stale replica, a failing embedder, ...).
- :class:`FakeChatCompletions` is NOT a model: an OpenAI-compatible chat completions endpoint that
  a real `warrant serve` calls as its generator. Every completion claims two things citing the
  source that holds "250 euros": one the source supports and one it does not, so validation
  withholds the second and the answer is partial.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Scripted:
    """One scripted response."""

    status: int
    body: bytes | dict[str, Any] = b""
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"


@dataclass(frozen=True)
class Received:
    """One request the fake received, with its arrival time (monotonic seconds)."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


class _Quiet(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass


class FakeWarrantServer:
    """A scripted stand-in for warrant (see the module's description). Use as a context manager;
    ``script`` holds the responses still to give (the last one repeats)."""

    def __init__(self, *script: Scripted) -> None:
        self.script = list(script)
        self.received: list[Received] = []
        fake = self

        class Handler(_Quiet):
            def _handle(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                fake.received.append(
                    Received(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic())
                )
                answer = fake.script.pop(0) if len(fake.script) > 1 else fake.script[0]
                data = json.dumps(answer.body).encode() if isinstance(answer.body, dict) else answer.body
                self.send_response(answer.status)
                self.send_header("content-type", answer.content_type)
                self.send_header("content-length", str(len(data)))
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _handle

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._thread = threading.Thread(target=self._http.serve_forever, args=(0.02,), daemon=True)

    def __enter__(self) -> FakeWarrantServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()


SOURCE = re.compile(r'<source label="(S\d+)">\n(.*?)\n</source>', re.S)
SUPPORTED = "Hotel stays are reimbursed up to 250 euros per night in London, Paris and New York."
UNSUPPORTED = "Employees receive a company car after two years of service."


class FakeChatCompletions:
    """A fake OpenAI-compatible generator (see the module's description)."""

    def __init__(self) -> None:
        class Handler(_Quiet):
            def _reply(self, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._reply({"data": [{"id": "fake"}]})

            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                user = "\n".join(m.get("content") or "" for m in request.get("messages", []) if m.get("role") == "user")
                label = next((s.group(1) for s in SOURCE.finditer(user) if "250 euros" in s.group(2)), "S1")
                output = {
                    "answerable": True,
                    "claims": [{"text": SUPPORTED, "citations": [label]}, {"text": UNSUPPORTED, "citations": [label]}],
                }
                self._reply({"choices": [{"message": {"role": "assistant", "content": json.dumps(output)}}]})

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._thread = threading.Thread(target=self._http.serve_forever, args=(0.02,), daemon=True)

    def __enter__(self) -> FakeChatCompletions:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()
