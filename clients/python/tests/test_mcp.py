"""The official MCP Python SDK's client (`mcp` on PyPI) against the real `warrant serve` over
streamable HTTP: it connects with a user's bearer token, lists the three tools, calls each (the
SDK validates every structured result against the tool's output schema), and alice's and gina's
tokens each reach only their own tenant. Without a token the endpoint answers 401 naming its
protected resource metadata (RFC 9728)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from conftest import Server, Users

TRAVEL = "How much are hotel stays reimbursed per night in London?"


async def _session_calls(server: Server, token: str, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Connects as the bearer of `token`, lists the tools, then makes `calls`; returns the tool
    names and each call's result."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with streamable_http_client(f"{server.url}/mcp", http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                initialized = await session.initialize()
                assert initialized.server_info.name == "warrant"
                listed = await session.list_tools()
                results: list[Any] = []
                for name, arguments in calls:
                    try:
                        results.append(await session.call_tool(name, arguments))
                    except MCPError as error:  # a JSON-RPC error reply, kept for the test to check
                        results.append(error)
    return {"tools": listed.tools, "results": results}


def _cited(result: Any) -> set[str]:
    assert not result.is_error, result
    structured = result.structured_content
    assert json.loads(result.content[0].text) == structured
    answer = structured.get("answer") or {}
    return {citation["title"] for claim in answer.get("claims", []) for citation in claim["citations"]}


@pytest.mark.asyncio
async def test_the_sdk_lists_three_tools_and_calls_each_under_the_users_token(server: Server, users: Users) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("answer", {"question": TRAVEL}),
        ("retrieve", {"query": "hotel stays per night", "k": 5}),
        ("read_document", {"doc_id": "travel-policy", "start": 0, "end": 40}),
    ]
    alice = await _session_calls(server, users.alice, calls)
    tools = {tool.name: tool for tool in alice["tools"]}
    assert set(tools) == {"answer", "retrieve", "read_document"}
    for tool in tools.values():
        assert tool.input_schema["type"] == "object" and tool.output_schema is not None
    answer, retrieved, read = alice["results"]
    assert _cited(answer) == {"Acme travel policy"}
    chunks = retrieved.structured_content["chunks"]
    assert chunks and not any(chunk["title"].startswith("Globex") for chunk in chunks)
    assert "travel-policy" in {chunk["doc_id"] for chunk in chunks}
    assert read.structured_content["title"] == "Acme travel policy"
    assert (read.structured_content["start"], read.structured_content["end"]) == (0, 40)
    assert len(read.structured_content["text"]) == 40

    gina = await _session_calls(server, users.gina, calls)
    answer, retrieved, read = gina["results"]
    assert _cited(answer) == {"Globex travel policy"}
    assert all(chunk["title"].startswith("Globex") for chunk in retrieved.structured_content["chunks"])
    assert read.structured_content["title"] == "Globex travel policy"


@pytest.mark.asyncio
async def test_a_document_of_another_tenant_does_not_exist_for_the_caller(server: Server, users: Users) -> None:
    # reorg-plan is acme's and readable by alice alone.
    calls: list[tuple[str, dict[str, Any]]] = [("read_document", {"doc_id": "reorg-plan"})]
    (alice,) = (await _session_calls(server, users.alice, calls))["results"]
    assert not alice.is_error and alice.structured_content["doc_id"] == "reorg-plan"
    for token in (users.gina, users.bob):
        (hidden,) = (await _session_calls(server, token, calls))["results"]
        assert hidden.is_error and hidden.content[0].text.startswith("not_found"), hidden


@pytest.mark.asyncio
async def test_an_unknown_tool_is_a_protocol_error(server: Server, users: Users) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [("shell", {"command": "id"}), ("answer", {"question": 42})]
    unknown, wrong_type = (await _session_calls(server, users.alice, calls))["results"]
    assert isinstance(unknown, MCPError) and unknown.code == -32602, unknown
    assert isinstance(wrong_type, MCPError) and wrong_type.code == -32602, wrong_type


def test_without_a_token_mcp_answers_401_naming_the_resource_metadata(server: Server) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    reply = httpx.post(f"{server.url}/mcp", json=message)
    assert reply.status_code == 401
    metadata_url = f"{server.url}/.well-known/oauth-protected-resource/mcp"
    assert reply.headers["www-authenticate"] == f'Bearer resource_metadata="{metadata_url}"'
    metadata = httpx.get(metadata_url).json()
    assert metadata["resource"] == f"{server.url}/mcp"
    assert metadata["bearer_methods_supported"] == ["header"]
