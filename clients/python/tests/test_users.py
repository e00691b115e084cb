"""Two users through one client object: each call carries the current user's token (the
client's token callable is invoked per request), and each user sees only their own tenant's
documents, and within a tenant only what their groups and name may read."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from conftest import Server, Users
from warrant_client import AsyncWarrantClient, NotFoundError, WarrantClient

TRAVEL = "How much are hotel stays reimbursed per night in London?"
# globex holds only its demo documents (no test writes there); acme also what other tests upload.
GLOBEX = {"travel-policy", "security-handbook", "benefits"}
current: contextvars.ContextVar[str] = contextvars.ContextVar("current")


def _titles(response: object) -> set[str]:
    return {chunk.title for chunk in response.chunks}  # type: ignore[attr-defined]


def test_one_client_two_tenants_by_token_callable(server: Server, users: Users) -> None:
    calls = []

    def token() -> str:
        calls.append(current.get())
        return current.get()

    with WarrantClient(server.url, token=token) as client:
        for _ in range(2):  # alternate on the same connection pool
            current.set(users.alice)
            alice_answer = client.answer(TRAVEL)
            alice_chunks = client.retrieve("travel policy hotel vacation", k=20)
            current.set(users.gina)
            gina_answer = client.answer(TRAVEL)
            gina_chunks = client.retrieve("travel policy hotel vacation", k=20)
            assert {c.title for claim in alice_answer.claims for c in claim.citations} == {"Acme travel policy"}
            assert "250 euros" in alice_answer.claims[0].text
            assert {c.title for claim in gina_answer.claims for c in claim.citations} == {"Globex travel policy"}
            assert "210 euros" in gina_answer.claims[0].text
            assert _titles(alice_chunks) and not any("Globex" in title for title in _titles(alice_chunks))
            assert _titles(gina_chunks) and all(title.startswith("Globex") for title in _titles(gina_chunks))
            assert {chunk.doc_id for chunk in gina_chunks.chunks} <= GLOBEX
            assert not {chunk.doc_id for chunk in gina_chunks.chunks} & {"vacation-policy", "reorg-plan"}
    assert len(calls) == 8, "the token callable is invoked for every request"


def test_same_tenant_users_see_what_they_may_read(server: Server, users: Users) -> None:
    with WarrantClient(server.url) as client:
        assert client.get_document("reorg-plan", token=users.alice).doc_id == "reorg-plan"
        with pytest.raises(NotFoundError):
            client.get_document("reorg-plan", token=users.bob)
        with pytest.raises(NotFoundError):
            client.get_document("security-handbook", token=users.alice)  # globex's
        assert client.get_document("travel-policy", token=users.gina).title == "Globex travel policy"
        bob = {chunk.doc_id for chunk in client.retrieve("merge support success teams organization", k=20, token=users.bob).chunks}
        alice = {chunk.doc_id for chunk in client.retrieve("merge support success teams organization", k=20, token=users.alice).chunks}
        assert "reorg-plan" in alice and "reorg-plan" not in bob
        assert "oncall-runbook" not in bob  # engineering only


def test_per_call_token_overrides_the_client_s(server: Server, users: Users) -> None:
    with WarrantClient(server.url, token=users.alice) as client:
        assert client.get_document("travel-policy").title == "Acme travel policy"
        assert client.get_document("travel-policy", token=users.gina).title == "Globex travel policy"
        assert client.get_document("travel-policy", token=lambda: users.gina).title == "Globex travel policy"
        assert client.get_document("travel-policy").title == "Acme travel policy"


async def test_async_client_concurrent_users_each_with_their_context(server: Server, users: Users) -> None:
    async def token() -> str:
        await asyncio.sleep(0)
        return current.get()

    async with AsyncWarrantClient(server.url, token=token) as client:

        async def ask(user_token: str) -> tuple[str, set[str]]:
            current.set(user_token)  # each task runs in a copy of the context
            answer = await client.answer(TRAVEL)
            chunks = await client.retrieve("travel policy", k=20)
            return answer.claims[0].citations[0].title, {chunk.doc_id for chunk in chunks.chunks}

        results = await asyncio.gather(*(ask(token) for token in [users.alice, users.gina] * 4))
    for index, (title, doc_ids) in enumerate(results):
        if index % 2 == 0:
            assert title == "Acme travel policy" and not doc_ids & {"security-handbook", "benefits"}
        else:
            assert title == "Globex travel policy" and doc_ids <= GLOBEX
