"""The LangChain and LlamaIndex retrievers return the calling user's scoped chunks with their
provenance as metadata, under the token of each call."""

from __future__ import annotations

import asyncio
import contextvars

import pytest
from langchain_core.documents import Document
from langchain_core.runnables import RunnableLambda
from llama_index.core.schema import MetadataMode, NodeWithScore

from conftest import Server, Users
from warrant_client import AsyncWarrantClient, UploadFile, WarrantClient
from warrant_client.langchain import WarrantRetriever
from warrant_client.llamaindex import WarrantLlamaRetriever

QUERY = "travel policy hotel nights merge teams"
# globex holds only its demo documents (no test writes there); acme also what other tests upload.
GLOBEX = {"travel-policy", "security-handbook", "benefits"}
METADATA = {"doc_id", "chunk_id", "title", "doc_version", "location", "start", "end", "score", "retrievers", "acl_epoch"}
current: contextvars.ContextVar[str] = contextvars.ContextVar("current")


@pytest.fixture(scope="module")
def sections_doc(server: Server, users: Users) -> str:
    """A document uploaded as a Markdown file: its chunks carry a location (section path)."""
    with WarrantClient(server.url, token=users.root) as client:
        client.upload_files(
            [UploadFile(b"# Fleet\n\n## Boats\n\nEvery sailing boat is inspected each spring.\n", filename="fleet.md")],
            groups=["everyone"],
        )
    return "fleet.md"


def _in_tenant(doc_id: str, title: str, tenant: str) -> bool:
    globex = doc_id in GLOBEX and title.startswith("Globex")
    return globex if tenant == "globex" else not title.startswith("Globex")


def _check_documents(documents: list[Document], tenant: str, client: WarrantClient, token: str) -> None:
    assert documents
    for document in documents:
        assert set(document.metadata) == METADATA
        assert _in_tenant(document.metadata["doc_id"], document.metadata["title"], tenant)
        assert document.id == document.metadata["chunk_id"]
        # The metadata points at the text: the document's chunk with that id is this text.
        source = client.get_document(document.metadata["doc_id"], token=token)
        chunk = next(chunk for chunk in source.chunks if chunk.chunk_id == document.metadata["chunk_id"])
        assert (chunk.text, chunk.start, chunk.end) == (document.page_content, document.metadata["start"], document.metadata["end"])
        assert document.metadata["doc_version"] == source.doc_version and document.metadata["title"] == source.title


def test_langchain_retriever_scopes_each_call_to_its_token(server: Server, users: Users) -> None:
    with WarrantClient(server.url) as client:
        retriever = WarrantRetriever(client=client, k=10)
        alice = retriever.invoke(QUERY, config={"configurable": {"warrant_token": users.alice}})
        gina = retriever.invoke(QUERY, token=users.gina)
        bob = retriever.invoke(QUERY, config={"configurable": {"warrant_token": users.bob}})
        _check_documents(alice, "acme", client, users.alice)
        _check_documents(gina, "globex", client, users.gina)
        _check_documents(bob, "acme", client, users.bob)
        assert {d.metadata["title"] for d in gina}.isdisjoint({d.metadata["title"] for d in alice})
        assert "reorg-plan" in {d.metadata["doc_id"] for d in alice}
        assert "reorg-plan" not in {d.metadata["doc_id"] for d in bob}
        # A keyword token wins over the config's.
        both = retriever.invoke(QUERY, config={"configurable": {"warrant_token": users.alice}}, token=users.gina)
        assert {d.metadata["doc_id"] for d in both} <= GLOBEX


def test_langchain_retriever_in_a_chain_takes_the_run_s_token(server: Server, users: Users) -> None:
    with WarrantClient(server.url) as client:
        chain = WarrantRetriever(client=client, k=3) | RunnableLambda(lambda docs: [d.metadata["title"] for d in docs])
        assert all(title.startswith("Globex") for title in chain.invoke(QUERY, config={"configurable": {"warrant_token": users.gina}}))
        assert not any(title.startswith("Globex") for title in chain.invoke(QUERY, config={"configurable": {"warrant_token": users.alice}}))


def test_langchain_retriever_token_callable_is_called_per_call(server: Server, users: Users) -> None:
    asked = []

    def token() -> str:
        asked.append(current.get())
        return current.get()

    with WarrantClient(server.url) as client:
        retriever = WarrantRetriever(client=client, token=token, k=5)
        current.set(users.gina)
        gina = retriever.invoke(QUERY)
        current.set(users.alice)
        alice = retriever.invoke(QUERY)
    assert asked == [users.gina, users.alice]
    assert {d.metadata["doc_id"] for d in gina} <= GLOBEX and {d.metadata["title"] for d in gina}.isdisjoint(
        {d.metadata["title"] for d in alice}
    )


def test_langchain_location_metadata(server: Server, users: Users, sections_doc: str) -> None:
    with WarrantClient(server.url, token=users.bob) as client:
        documents = WarrantRetriever(client=client, k=3).invoke("sailing boat inspected spring")
    fleet = [d for d in documents if d.metadata["doc_id"] == sections_doc]
    assert fleet and fleet[0].metadata["location"]["section"] == ["Fleet"]
    assert {d.metadata["location"] is None for d in documents if d.metadata["doc_id"] != sections_doc} <= {True}


async def test_langchain_ainvoke_sync_and_async_clients(server: Server, users: Users) -> None:
    async with AsyncWarrantClient(server.url) as async_client:
        retriever = WarrantRetriever(async_client=async_client, k=5)
        gina, alice = await asyncio.gather(
            retriever.ainvoke(QUERY, config={"configurable": {"warrant_token": users.gina}}),
            retriever.ainvoke(QUERY, token=users.alice),
        )
    assert {d.metadata["doc_id"] for d in gina} <= GLOBEX and all(d.metadata["title"].startswith("Globex") for d in gina)
    assert not any(d.metadata["title"].startswith("Globex") for d in alice)
    with WarrantClient(server.url) as client:
        on_executor = await WarrantRetriever(client=client, k=5).ainvoke(QUERY, token=users.gina)
    assert [d.id for d in on_executor] == [d.id for d in gina]


def _check_nodes(nodes: list[NodeWithScore], tenant: str) -> None:
    assert nodes
    for scored in nodes:
        node = scored.node
        assert set(node.metadata) == METADATA
        assert node.node_id == node.metadata["chunk_id"] and node.ref_doc_id == node.metadata["doc_id"]
        assert _in_tenant(node.metadata["doc_id"], node.metadata["title"], tenant)
        assert scored.score == node.metadata["score"]
        # A model sees where the text is from, not the bookkeeping.
        shown = node.get_content(metadata_mode=MetadataMode.LLM)
        assert node.metadata["title"] in shown and node.metadata["chunk_id"] not in shown


def test_llamaindex_retriever_scopes_each_call_to_its_token(server: Server, users: Users, sections_doc: str) -> None:
    with WarrantClient(server.url, token=lambda: current.get()) as client:
        retriever = WarrantLlamaRetriever(client, k=10)
        current.set(users.alice)
        alice = retriever.retrieve(QUERY)
        current.set(users.gina)
        gina = retriever.retrieve(QUERY)
        _check_nodes(alice, "acme")
        _check_nodes(gina, "globex")
        assert {n.node.metadata["title"] for n in gina}.isdisjoint({n.node.metadata["title"] for n in alice})
        bob = retriever.as_user(users.bob).retrieve(QUERY)
        _check_nodes(bob, "acme")
        assert "reorg-plan" in {n.node.ref_doc_id for n in alice} and "reorg-plan" not in {n.node.ref_doc_id for n in bob}
        fleet = retriever.as_user(users.bob).retrieve("sailing boat inspected spring")
        assert any(n.node.ref_doc_id == sections_doc and n.node.metadata["location"]["section"] == ["Fleet"] for n in fleet)


async def test_llamaindex_aretrieve_with_the_async_client(server: Server, users: Users) -> None:
    async with AsyncWarrantClient(server.url) as async_client:
        retriever = WarrantLlamaRetriever(async_client=async_client, k=5)
        gina, alice = await asyncio.gather(
            retriever.as_user(users.gina).aretrieve(QUERY), retriever.as_user(users.alice).aretrieve(QUERY)
        )
    _check_nodes(gina, "globex")
    _check_nodes(alice, "acme")
    assert all(n.node.metadata["title"].startswith("Globex") for n in gina)


def test_a_retriever_s_token_is_never_shown(server: Server, users: Users) -> None:
    with WarrantClient(server.url) as client:
        retriever = WarrantRetriever(client=client, token=users.alice)
        assert users.alice not in repr(retriever) and users.alice not in str(retriever.model_dump())
        assert retriever.invoke(QUERY)  # and it is used
