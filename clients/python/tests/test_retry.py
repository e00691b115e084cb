"""`Retry-After` on 503 is honored, within bounds. A real server cannot be made overloaded on
demand, so these run against fakes.FakeWarrantServer (a scripted FAKE, not warrant).

The waits are checked as lower bounds between the arrivals the fake records (the client must
not send again before the time the server named); no test asserts how fast anything is.
"""

from __future__ import annotations

import email.utils
import io
import json
import time
from pathlib import Path

import pytest

from fakes import FakeWarrantServer, Received, Scripted
from warrant_client import AsyncWarrantClient, RetryPolicy, ServiceUnavailableError, UploadFile, WarrantClient

OVERLOADED = {"code": "overloaded", "message": "server is overloaded, retry later"}
CHUNKS = {"chunks": [], "acl_epoch": 4, "short": True}


def _overloaded(seconds: str = "1") -> Scripted:
    return Scripted(503, OVERLOADED, {"retry-after": seconds})


def test_waits_retry_after_then_succeeds() -> None:
    tokens = iter(["first", "second"])
    with FakeWarrantServer(_overloaded("1"), Scripted(200, CHUNKS)) as fake:
        with WarrantClient(fake.url, token=lambda: next(tokens)) as client:
            response = client.retrieve("q")
    assert response.acl_epoch == 4
    first, second = fake.received
    assert second.at - first.at >= 1.0, "sent again before Retry-After elapsed"
    assert json.loads(second.body) == json.loads(first.body) == {"query": "q"}
    # The token callable is asked again for the resent request.
    assert (first.headers["authorization"], second.headers["authorization"]) == ("Bearer first", "Bearer second")


def test_retries_are_bounded() -> None:
    with FakeWarrantServer(_overloaded("0")) as fake:
        with WarrantClient(fake.url, token="t", retry=RetryPolicy(max_retries=2)) as client:
            with pytest.raises(ServiceUnavailableError) as raised:
                client.answer("q")
    assert len(fake.received) == 3  # the request and two retries
    assert (raised.value.code, raised.value.retry_after) == ("overloaded", 0.0)


def test_a_retry_after_beyond_max_wait_is_not_waited_for() -> None:
    with FakeWarrantServer(_overloaded("120")) as fake:
        with WarrantClient(fake.url, token="t", retry=RetryPolicy(max_wait=5)) as client:
            with pytest.raises(ServiceUnavailableError) as raised:
                client.retrieve("q")
    assert len(fake.received) == 1
    assert raised.value.retry_after == 120.0


def test_a_503_without_retry_after_is_not_retried() -> None:
    stale = Scripted(503, {"code": "replica_stale", "message": "replica cannot confirm its acl state is fresh"})
    with FakeWarrantServer(stale) as fake:
        with WarrantClient(fake.url, token="t") as client:
            with pytest.raises(ServiceUnavailableError) as raised:
                client.retrieve("q")
    assert len(fake.received) == 1
    assert raised.value.code == "replica_stale" and raised.value.retry_after is None


def test_retries_off() -> None:
    with FakeWarrantServer(_overloaded("0"), Scripted(200, CHUNKS)) as fake:
        with WarrantClient(fake.url, token="t", retry=RetryPolicy(max_retries=0)) as client:
            with pytest.raises(ServiceUnavailableError):
                client.retrieve("q")
    assert len(fake.received) == 1


def test_retry_after_as_an_http_date() -> None:
    # Whole seconds: the date is at least 2 s after now, so at least 1 s after the first request
    # arrives (which is well within a second of now).
    when = email.utils.formatdate(time.time() + 3, usegmt=True)
    with FakeWarrantServer(Scripted(503, OVERLOADED, {"retry-after": when}), Scripted(200, CHUNKS)) as fake:
        with WarrantClient(fake.url, token="t") as client:
            client.retrieve("q")
    first, second = fake.received
    assert second.at - first.at >= 1.0


def test_stream_is_retried_before_it_starts() -> None:
    envelope = {
        "request_id": "r",
        "status": "abstained",
        "answer": None,
        "abstention": {"reason": "no_authorized_evidence", "diagnostics": []},
        "acl_epoch": 1,
        "metrics": {"stages_ms": {}, "retrieved": 0, "context": 0, "generator_attempts": 0, "citations_rejected": {}, "claims_anchored": 0},
    }
    stream = b"event: answer\ndata: " + json.dumps(envelope).encode() + b"\n\n"
    with FakeWarrantServer(_overloaded("0"), Scripted(200, stream, content_type="text/event-stream")) as fake:
        with WarrantClient(fake.url, token="t") as client:
            assert client.stream_answer("q").final().status == "abstained"
    assert [r.headers["accept"] for r in fake.received] == ["text/event-stream"] * 2


def test_upload_is_resent_whole_from_a_file_object(tmp_path: Path) -> None:
    upserted = {"acl_epoch": 3, "documents": 1, "chunks": 1}
    path = tmp_path / "b.txt"
    path.write_bytes(b"from a path")
    source = io.BytesIO(b"the whole upload")
    source.read(5)
    with FakeWarrantServer(_overloaded("0"), Scripted(200, upserted)) as fake:
        with WarrantClient(fake.url, token="t") as client:
            client.upload_files([UploadFile(source, filename="a.txt"), path], groups=["everyone"])
    first, second = fake.received

    def without_boundary(received: Received) -> bytes:
        return received.body.replace(received.headers["content-type"].split("boundary=")[1].encode(), b"")

    assert b"the whole upload" in first.body and b"from a path" in first.body
    assert without_boundary(first) == without_boundary(second)


def test_upload_from_an_unseekable_stream_is_not_resent() -> None:
    class Pipe(io.RawIOBase):
        def __init__(self) -> None:
            self.data = io.BytesIO(b"once only")

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: bytearray) -> int:  # type: ignore[override]
            chunk = self.data.read(len(buffer))
            buffer[: len(chunk)] = chunk
            return len(chunk)

    with FakeWarrantServer(_overloaded("0"), Scripted(200, {"acl_epoch": 3, "documents": 1, "chunks": 1})) as fake:
        with WarrantClient(fake.url, token="t") as client:
            with pytest.raises(ServiceUnavailableError):
                client.upload_files([UploadFile(Pipe(), filename="pipe.txt")])
    assert len(fake.received) == 1


async def test_async_client_waits_retry_after() -> None:
    async def token() -> str:
        return "async-token"

    with FakeWarrantServer(_overloaded("1"), Scripted(200, CHUNKS)) as fake:
        async with AsyncWarrantClient(fake.url, token=token) as client:
            assert (await client.retrieve("q")).short
    first, second = fake.received
    assert second.at - first.at >= 1.0
    assert second.headers["authorization"] == "Bearer async-token"


async def test_async_retries_are_bounded() -> None:
    with FakeWarrantServer(_overloaded("0")) as fake:
        async with AsyncWarrantClient(fake.url, token="t", retry=RetryPolicy(max_retries=1)) as client:
            with pytest.raises(ServiceUnavailableError):
                await client.answer("q")
    assert len(fake.received) == 2


def test_policy_refuses_negative_bounds() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(max_retries=-1)
    with pytest.raises(ValueError):
        RetryPolicy(max_wait=-1)
