"""Streamed answers yield only validated claims: exactly the claims of the final answer, in
order, and nothing of what validation withheld."""

from __future__ import annotations

import pytest

from conftest import Server, Users, mint
from fakes import SUPPORTED, UNSUPPORTED
from warrant_client import AnswerResponse, AsyncWarrantClient, Claim, StageEvent, WarrantClient
from warrant_client._sse import ServerSentEvent, SseDecoder

TRAVEL = "How much are hotel stays reimbursed per night in London?"


def test_stream_yields_stages_then_the_final_claims_then_the_envelope(server: Server, users: Users) -> None:
    with WarrantClient(server.url, token=users.alice) as client:
        with client.stream_answer(TRAVEL) as stream:
            items = list(stream)
        assert stream.response is not None
        envelope = stream.response
    kinds = [type(item) for item in items]
    assert kinds[-1] is AnswerResponse and items[-1] == envelope
    stages = [item for item in items if isinstance(item, StageEvent)]
    claims = [item for item in items if isinstance(item, Claim)]
    assert [stage.stage for stage in stages][:2] == ["scope", "retrieval"]
    assert kinds.index(Claim) > max(i for i, kind in enumerate(kinds) if kind is StageEvent)
    assert envelope.status == "answered"
    assert tuple(claims) == envelope.claims and claims
    assert all(citation.doc_id == "travel-policy" for claim in claims for citation in claim.citations)


def test_stream_of_a_partial_answer_holds_only_the_supported_claim(partial_server: Server) -> None:
    with WarrantClient(partial_server.url, token=mint("acme", "alice", "everyone", "engineering")) as client:
        stream = client.stream_answer(TRAVEL)
        claims = list(stream.claims())
        envelope = stream.response
    assert envelope is not None and envelope.answer is not None
    # The fake generator wrote two claims; validation withheld the unsupported one.
    assert envelope.answer.partial and [w.reason for w in envelope.answer.withheld] == ["unsupported_claim"]
    assert [claim.text for claim in claims] == [SUPPORTED]
    assert all(UNSUPPORTED not in claim.text for claim in claims)
    assert tuple(claims) == envelope.claims


def test_stream_of_an_abstention_yields_no_claim(server: Server, users: Users) -> None:
    with WarrantClient(server.url, token=users.gina) as client:
        stream = client.stream_answer("When will the support and success teams merge?")
        claims = list(stream.claims())
    assert claims == []
    assert stream.response is not None and stream.response.status == "abstained"
    assert stream.response.abstention is not None


async def test_async_stream_yields_the_same_claims(server: Server, users: Users) -> None:
    async with AsyncWarrantClient(server.url, token=users.alice) as client:
        stream = client.stream_answer(TRAVEL)
        claims = [claim async for claim in stream.claims()]
        envelope = await client.answer(TRAVEL)
    assert stream.response is not None
    assert tuple(claims) == stream.response.claims
    assert [claim.text for claim in claims] == [claim.text for claim in envelope.claims]


def test_final_reads_to_the_end(server: Server, users: Users) -> None:
    with WarrantClient(server.url, token=users.gina) as client:
        envelope = client.stream_answer(TRAVEL).final()
    assert envelope.status == "answered"
    assert {c.title for claim in envelope.claims for c in claim.citations} == {"Globex travel policy"}


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["event: claim", "data: {}", ""], [ServerSentEvent("claim", "{}")]),
        ([": keep-alive", "", "data: a", "data: b", ""], [ServerSentEvent("message", "a\nb")]),
        (["event: stage", ""], []),  # no data line: not dispatched
        (["data:x", "id: 7", "retry: 10", ""], [ServerSentEvent("message", "x")]),
        (["event: answer", "data:  two spaces", "", "", "data: y", ""], [
            ServerSentEvent("answer", " two spaces"), ServerSentEvent("message", "y")
        ]),
    ],
)
def test_sse_decoder(lines: list[str], expected: list[ServerSentEvent]) -> None:
    decoder = SseDecoder()
    events = [event for event in map(decoder.feed, lines) if event is not None]
    assert events == expected
