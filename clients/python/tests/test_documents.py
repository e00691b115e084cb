"""Documents (JSON upsert, file upload, read), ACL changes and reviews through the client."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from conftest import Server, Users
from reviews import queued_review
from warrant_client import (
    AbstentionVerdict,
    AsyncWarrantClient,
    ClaimVerdict,
    DocumentInput,
    NotFoundError,
    UploadFile,
    WarrantClient,
)

HANDBOOK = b"""# Expenses

## Hotels

Cabin crews are reimbursed up to 95 euros per night in harbour towns.

## Meals

Harbour lunches are covered up to 20 euros.
"""


def _doc_ids(client: WarrantClient, query: str, token: str) -> set[str]:
    return {chunk.doc_id for chunk in client.retrieve(query, k=20, token=token).chunks}


def test_upsert_read_grant_revoke_delete(server: Server, users: Users) -> None:
    with WarrantClient(server.url, token=users.root) as client:
        result = client.upsert_documents(
            [DocumentInput("docs-lighthouse", text="The lighthouse keeper logs the fog horn hours.", title="Lighthouse", groups=["everyone"])]
        )
        assert (result.documents, result.chunks) == (1, 1)
        document = client.get_document("docs-lighthouse", token=users.bob)
        assert (document.title, document.doc_version) == ("Lighthouse", 1)
        assert document.chunks[0].text.startswith("The lighthouse keeper")
        assert "docs-lighthouse" in _doc_ids(client, "lighthouse fog horn", users.bob)
        assert "docs-lighthouse" not in _doc_ids(client, "lighthouse fog horn", users.gina)

        revoked = client.revoke("docs-lighthouse", groups=["everyone"])
        assert revoked.acl_epoch > result.acl_epoch
        assert "docs-lighthouse" not in _doc_ids(client, "lighthouse fog horn", users.bob)
        with pytest.raises(NotFoundError):
            client.get_document("docs-lighthouse", token=users.bob)

        granted = client.grant("docs-lighthouse", users=["bob"])
        assert granted.acl_epoch > revoked.acl_epoch
        assert "docs-lighthouse" in _doc_ids(client, "lighthouse fog horn", users.bob)
        assert "docs-lighthouse" not in _doc_ids(client, "lighthouse fog horn", users.alice)
        assert client.grant("docs-lighthouse", users=["bob"]).acl_epoch == granted.acl_epoch  # a no-op

        updated = client.upsert_documents([DocumentInput("docs-lighthouse", text="The keeper now logs rain.", users=["bob"])])
        assert client.get_document("docs-lighthouse", token=users.bob).doc_version == 2
        assert updated.acl_epoch >= granted.acl_epoch

        client.delete_document("docs-lighthouse")
        with pytest.raises(NotFoundError):
            client.get_document("docs-lighthouse", token=users.bob)
        with pytest.raises(NotFoundError):
            client.delete_document("docs-lighthouse")


def test_file_content_in_json_and_multipart_upload(server: Server, users: Users, tmp_path: Path) -> None:
    path = tmp_path / "harbour-handbook.md"
    path.write_bytes(HANDBOOK)
    with WarrantClient(server.url, token=users.root) as client:
        as_json = client.upsert_documents(
            [DocumentInput("docs-json-md", content=HANDBOOK, content_type="text/markdown", groups=["everyone"])]
        )
        assert as_json.documents == 1
        uploaded = client.upload_files(
            [
                path,  # a path: doc id and title are the file name, the format its extension
                UploadFile(io.BytesIO(b"Ferry tickets are refunded within 10 days."), filename="ferry.txt", doc_id="docs-ferry", title="Ferry"),
                UploadFile(b"<html><body><h1>Tides</h1><p>High tide is at noon.</p></body></html>", filename="tides.html", version=3),
            ],
            groups=["everyone"],
            users=["gina"],  # a user name of another tenant changes nothing there
        )
        assert uploaded.documents == 3
        handbook = client.get_document("harbour-handbook.md", token=users.bob)
        assert handbook.title == "harbour-handbook.md"
        sections = {tuple(chunk.location.section) for chunk in handbook.chunks if chunk.location is not None}
        assert sections == {("Expenses",)}, sections  # one chunk, starting under the top heading
        assert client.get_document("docs-ferry", token=users.bob).title == "Ferry"
        assert client.get_document("tides.html", token=users.bob).doc_version == 3
        with pytest.raises(NotFoundError):
            client.get_document("docs-ferry", token=users.gina)
        chunks = client.retrieve("cabin crews harbour towns per night", k=5, token=users.bob).chunks
        located = [chunk for chunk in chunks if chunk.doc_id in ("harbour-handbook.md", "docs-json-md")]
        assert located and all(chunk.location is not None and chunk.location.section for chunk in located)


def test_upload_refuses_names_holding_a_comma(server: Server, users: Users) -> None:
    with WarrantClient(server.url, token=users.root) as client:
        with pytest.raises(ValueError, match="comma"):
            client.upload_files([UploadFile(b"x", filename="x.txt")], groups=["sales,finance"])


def test_reviews_list_get_and_verdict(server: Server, users: Users) -> None:
    with WarrantClient(server.url, token=users.reviewer) as client:
        answered = queued_review(client, "How many days of paid vacation do acme employees get?", users.alice, users.reviewer)
        abstained = queued_review(client, "What colour is the moon on Fridays?", users.bob, users.reviewer)
        pending = {item.review_id for item in client.iter_reviews(status="pending", limit=1)}
        assert {answered, abstained} <= pending
        page = client.list_reviews(limit=1)
        assert len(page.items) == 1 and page.next_cursor is not None

        item = client.get_review(answered)
        assert (item.asker, item.outcome, item.generated_text) == ("alice", "answered", "shown")
        assert item.sources and item.sources[0].readable and item.claims
        result = client.submit_verdict(answered, claims=[ClaimVerdict(0, "supported")], note="checked")
        assert (result.review_id, result.status, result.reviewer) == (answered, "reviewed", "rita")
        judged = client.get_review(answered)
        assert judged.status == "reviewed"
        assert [(v.reviewer, v.claims[0].verdict, v.note) for v in judged.verdicts] == [("rita", "supported", "checked")]

        abstention = client.get_review(abstained)
        assert abstention.outcome == "abstained" and abstention.abstention is not None
        client.submit_verdict(abstained, abstention=AbstentionVerdict("correct_abstention"))
        assert abstained in {item.review_id for item in client.iter_reviews(status="reviewed")}


async def test_async_documents_and_reviews(server: Server, users: Users) -> None:
    async with AsyncWarrantClient(server.url, token=users.root) as client:
        await client.upsert_documents([{"doc_id": "docs-async", "text": "Async otters hold hands.", "acl": {"groups": ["everyone"]}}])
        assert (await client.get_document("docs-async", token=users.bob)).chunks
        await client.upload_files([UploadFile(b"Async beavers build dams.", filename="beavers.txt")], groups=["everyone"])
        assert (await client.retrieve("beavers dams", k=3, token=users.bob)).chunks[0].doc_id == "beavers.txt"
        await client.revoke("docs-async")
        with pytest.raises(NotFoundError):
            await client.get_document("docs-async", token=users.bob)
        await client.grant("docs-async", groups=["everyone"])
        await client.delete_document("docs-async")
        reviews = [item async for item in client.iter_reviews(limit=2, token=users.reviewer)]
        assert reviews
        first = await client.get_review(reviews[0].review_id, token=users.reviewer)
        assert first.review_id == reviews[0].review_id
