"""Every error code maps to its exception.

Against the real server: every code a client call can meet with the server as the tests run it
is met through the client, and must raise the class of its status carrying the server's code.
Against a FAKE (fakes.FakeWarrantServer): every code of the client's table, including those a
healthy server cannot be made to answer on demand (storage_unavailable, replica_stale,
embedder_error, ...), answered with the status the table gives, raises that class and code.
"""

from __future__ import annotations

import json
from typing import Any, Callable

import pytest

from conftest import Server, Users, forged
from fakes import FakeWarrantServer, Scripted
from reviews import queued_review
from warrant_client import (
    ERROR_CODES,
    STATUS_CLASSES,
    AbstentionVerdict,
    AsyncWarrantClient,
    AuthenticationError,
    BadGatewayError,
    BadRequestError,
    ClaimVerdict,
    ClientError,
    ConflictError,
    DocumentInput,
    MisdirectedRequestError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RetryPolicy,
    ServerError,
    ServiceUnavailableError,
    UnexpectedResponseError,
    UploadFile,
    WarrantError,
    WarrantClient,
)

TRAVEL = "How much are hotel stays reimbursed per night in London?"
UNANSWERABLE = "Which submarine colour do penguins prefer on Tuesdays?"
REORG = "When will the support and success teams merge?"


@pytest.fixture(scope="module")
def items(server: Server, users: Users) -> dict[str, str]:
    """Review ids: an answer anyone in acme may judge, an abstention, an answer citing alice's
    own document (rita may not read it), and one for the verdict limit."""
    with WarrantClient(server.url) as client:
        return {
            "answered": queued_review(client, TRAVEL, users.alice, users.reviewer),
            "abstained": queued_review(client, UNANSWERABLE, users.alice, users.reviewer),
            "reorg": queued_review(client, REORG, users.alice, users.reviewer),
            "limit": queued_review(client, TRAVEL, users.bob, users.reviewer),
        }


def _document(doc_id: str, **fields: Any) -> DocumentInput:
    return DocumentInput(doc_id=doc_id, text=fields.pop("text", "A short note about errors."), groups=["everyone"], **fields)


def _stale_version(client: WarrantClient, users: Users) -> None:
    client.upsert_documents([_document("errors-stale", version=5)], token=users.root)
    client.upsert_documents([_document("errors-stale", version=5)], token=users.root)


def _too_many_verdicts(client: WarrantClient, users: Users, items: dict[str, str]) -> None:
    for _ in range(4):  # the tests' server keeps 3 per item
        client.submit_verdict(items["limit"], claims=[ClaimVerdict(0, "supported")], token=users.reviewer)


Case = Callable[[WarrantClient, Users, dict[str, str]], object]

# code -> (exception class, a call through the client that meets it)
REAL: dict[str, tuple[type[WarrantError], Case]] = {
    "missing_token": (AuthenticationError, lambda c, u, i: c.retrieve("hotel")),
    "invalid_token": (AuthenticationError, lambda c, u, i: c.retrieve("hotel", token=forged("another-secret-of-32-bytes-or-more"))),
    "token_expired": (AuthenticationError, lambda c, u, i: c.retrieve("hotel", token=forged(expires_in=-3600))),
    "forbidden": (PermissionDeniedError, lambda c, u, i: c.upsert_documents([_document("x")], token=u.alice)),
    "empty_question": (BadRequestError, lambda c, u, i: c.answer("   ", token=u.alice)),
    "question_too_long": (BadRequestError, lambda c, u, i: c.answer("why " * 501, token=u.alice)),
    "empty_query": (BadRequestError, lambda c, u, i: c.retrieve("\t", token=u.alice)),
    "query_too_long": (BadRequestError, lambda c, u, i: c.retrieve("q" * 2001, token=u.alice)),
    "invalid_body": (BadRequestError, lambda c, u, i: c.answer(TRAVEL, top_k="many", token=u.alice)),  # type: ignore[arg-type]
    "empty_batch": (BadRequestError, lambda c, u, i: c.upsert_documents([], token=u.root)),
    "batch_too_large": (
        BadRequestError,
        lambda c, u, i: c.upsert_documents([_document(f"errors-{n}") for n in range(6)], token=u.root),
    ),
    "duplicate_document": (
        BadRequestError,
        lambda c, u, i: c.upsert_documents([_document("errors-dup"), _document("errors-dup")], token=u.root),
    ),
    "acl_too_large": (
        BadRequestError,
        lambda c, u, i: c.grant("travel-policy", groups=[f"group-{n}" for n in range(9)], token=u.root),
    ),
    "invalid_base64": (
        BadRequestError,
        lambda c, u, i: c.upsert_documents(
            [{"doc_id": "errors-b64", "content": "not base64!", "content_type": "text/plain"}], token=u.root
        ),
    ),
    "file_too_large": (
        BadRequestError,
        lambda c, u, i: c.upload_files([UploadFile(b"big words " * 7000, filename="big.txt")], token=u.root),
    ),
    "unsupported_content_type": (
        BadRequestError,
        lambda c, u, i: c.upload_files([UploadFile(b"x", filename="a.bin", content_type="application/zip")], token=u.root),
    ),
    "content_type_mismatch": (
        BadRequestError,
        lambda c, u, i: c.upload_files(
            [UploadFile(b"plain words", filename="a.pdf", content_type="application/pdf")], token=u.root
        ),
    ),
    "invalid_utf8": (
        BadRequestError,
        lambda c, u, i: c.upload_files([UploadFile(b"caf\xe9 au lait", filename="a.txt")], token=u.root),
    ),
    "malformed_document": (
        BadRequestError,
        lambda c, u, i: c.upload_files([UploadFile(b"%PDF-1.7\n1 0 obj\n<<", filename="cut.pdf")], token=u.root),
    ),
    "no_text": (
        BadRequestError,
        lambda c, u, i: c.upload_files([UploadFile(b"<html><body><nav>menu</nav></body></html>", filename="e.html")], token=u.root),
    ),
    "invalid_multipart": (
        BadRequestError,
        lambda c, u, i: c.upload_files([UploadFile(b"words", filename="a.txt", title="t" * 70_000)], token=u.root),
    ),
    "invalid_document": (
        BadRequestError,
        lambda c, u, i: c.upsert_documents([_document("errors-title", title="t" * 1001)], token=u.root),
    ),
    "empty_grant": (BadRequestError, lambda c, u, i: c.grant("travel-policy", token=u.root)),
    "empty_revoke": (BadRequestError, lambda c, u, i: c.revoke("travel-policy", groups=[], users=[], token=u.root)),
    "invalid_acl_name": (BadRequestError, lambda c, u, i: c.grant("travel-policy", groups=["  "], token=u.root)),
    "document_not_found": (NotFoundError, lambda c, u, i: c.revoke("no-such-document", token=u.root)),
    "not_found": (NotFoundError, lambda c, u, i: c.get_document("reorg-plan", token=u.bob)),
    "stale_version": (ConflictError, lambda c, u, i: _stale_version(c, u)),
    "payload_too_large": (
        PayloadTooLargeError,
        lambda c, u, i: c.upsert_documents([_document("errors-big", text="word " * 250_000)], token=u.root),
    ),
    "host_not_allowed": (
        MisdirectedRequestError,
        lambda c, u, i: WarrantClient(str(c._http.base_url), headers={"host": "rebound.example"}).retrieve("q", token=u.alice),
    ),
    "invalid_query": (BadRequestError, lambda c, u, i: c.list_reviews(status="judged", token=u.reviewer)),
    "invalid_cursor": (BadRequestError, lambda c, u, i: c.list_reviews(cursor="not-a-cursor", token=u.reviewer)),
    "review_not_found": (NotFoundError, lambda c, u, i: c.get_review("0b7e-no-such-item", token=u.reviewer)),
    "empty_verdict": (BadRequestError, lambda c, u, i: c.submit_verdict(i["answered"], token=u.reviewer)),
    "unknown_verdict": (
        BadRequestError,
        lambda c, u, i: c.submit_verdict(i["answered"], claims=[ClaimVerdict(0, "brilliant")], token=u.reviewer),
    ),
    "claim_out_of_range": (
        BadRequestError,
        lambda c, u, i: c.submit_verdict(i["answered"], claims=[ClaimVerdict(99, "supported")], token=u.reviewer),
    ),
    "duplicate_claim_verdict": (
        BadRequestError,
        lambda c, u, i: c.submit_verdict(
            i["answered"], claims=[ClaimVerdict(0, "supported"), ClaimVerdict(0, "unsupported")], token=u.reviewer
        ),
    ),
    "no_abstention": (
        BadRequestError,
        lambda c, u, i: c.submit_verdict(i["answered"], abstention=AbstentionVerdict("correct_abstention"), token=u.reviewer),
    ),
    "invalid_doc_id": (
        BadRequestError,
        lambda c, u, i: c.submit_verdict(
            i["abstained"], abstention=AbstentionVerdict("should_have_answered", doc_id="   "), token=u.reviewer
        ),
    ),
    "note_too_long": (
        BadRequestError,
        lambda c, u, i: c.submit_verdict(i["answered"], claims=[ClaimVerdict(0, "supported")], note="n" * 101, token=u.reviewer),
    ),
    "claims_not_readable": (
        PermissionDeniedError,
        lambda c, u, i: c.submit_verdict(i["reorg"], claims=[ClaimVerdict(0, "supported")], token=u.reviewer),
    ),
    "too_many_verdicts": (ConflictError, _too_many_verdicts),
}


@pytest.mark.parametrize("code", sorted(REAL))
def test_real_server_error_raises_its_class_with_the_code(code: str, server: Server, users: Users, items: dict[str, str]) -> None:
    expected, call = REAL[code]
    assert ERROR_CODES[code] is expected, f"the table maps {code} to {ERROR_CODES[code].__name__}"
    with WarrantClient(server.url) as client:
        with pytest.raises(WarrantError) as raised:
            call(client, users, items)
    error = raised.value
    assert type(error) is expected, repr(error)
    assert error.code == code, repr(error)
    assert error.status == expected.status
    assert error.message, repr(error)
    assert error.request_id, "the server's x-request-id is kept"


async def test_async_client_raises_the_same(server: Server, users: Users) -> None:
    async with AsyncWarrantClient(server.url, token=users.alice) as client:
        with pytest.raises(BadRequestError) as raised:
            await client.answer("  ")
        assert raised.value.code == "empty_question"
        with pytest.raises(AuthenticationError) as expired:
            await client.retrieve("hotel", token=forged(expires_in=-3600))
        assert expired.value.code == "token_expired"


@pytest.mark.parametrize("code", sorted(ERROR_CODES))
def test_every_code_of_the_table_raises_its_class(code: str) -> None:
    expected = ERROR_CODES[code]
    headers = {"retry-after": "7"} if expected is ServiceUnavailableError else {}
    body = {"code": code, "message": f"{code.replace('_', ' ')} happened"}
    with FakeWarrantServer(Scripted(expected.status, body, headers)) as fake:
        with WarrantClient(fake.url, token="t", retry=RetryPolicy(max_wait=1)) as client:
            with pytest.raises(WarrantError) as raised:
                client.retrieve("q")
    assert type(raised.value) is expected
    assert (raised.value.status, raised.value.code) == (expected.status, code)
    assert raised.value.message == body["message"]
    if headers:
        assert raised.value.retry_after == 7.0


def test_table_classes_are_the_status_classes() -> None:
    assert set(ERROR_CODES.values()) <= set(STATUS_CLASSES.values())
    for status, cls in STATUS_CLASSES.items():
        assert cls.status == status
        assert issubclass(cls, ClientError if status < 500 else ServerError)


@pytest.mark.parametrize(
    ("status", "body", "expected", "code"),
    [
        (418, {"code": "teapot", "message": "short and stout"}, ClientError, "teapot"),
        (599, {"code": "odd", "message": "odd"}, ServerError, "odd"),
        (502, b"<html>bad gateway</html>", BadGatewayError, "http_502"),
        (503, b"", ServiceUnavailableError, "http_503"),
    ],
)
def test_unknown_status_or_foreign_body_keeps_the_family(status: int, body: Any, expected: type, code: str) -> None:
    content_type = "application/json" if isinstance(body, dict) else "text/html"
    with FakeWarrantServer(Scripted(status, body, content_type=content_type)) as fake:
        with WarrantClient(fake.url, token="t") as client:
            with pytest.raises(expected) as raised:
                client.answer("q")
    assert type(raised.value) is expected
    assert raised.value.code == code and raised.value.status == status


def test_a_200_that_is_not_the_route_s_json_is_an_unexpected_response() -> None:
    with FakeWarrantServer(Scripted(200, b"<html>portal login</html>", content_type="text/html")) as fake:
        with WarrantClient(fake.url, token="t") as client:
            with pytest.raises(UnexpectedResponseError) as raised:
                client.retrieve("q")
    assert raised.value.code == "invalid_response"


def test_stream_error_event_raises_the_class_of_its_code() -> None:
    stream = b'event: stage\ndata: {"stage": "scope", "ms": 0.1}\n\nevent: error\ndata: ' + json.dumps(
        {"code": "replica_stale", "message": "replica is stale"}
    ).encode() + b"\n\n"
    with FakeWarrantServer(Scripted(200, stream, content_type="text/event-stream")) as fake:
        with WarrantClient(fake.url, token="t") as client:
            seen = []
            with pytest.raises(ServiceUnavailableError) as raised:
                for item in client.stream_answer("q"):
                    seen.append(item)
    assert raised.value.code == "replica_stale" and raised.value.status == 503
    assert len(seen) == 1


def test_an_empty_token_is_refused_before_sending() -> None:
    with WarrantClient("http://127.0.0.1:9", token=lambda: "") as client:
        with pytest.raises(ValueError, match="empty"):
            client.retrieve("q")
