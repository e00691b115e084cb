"""The client against the running server's OpenAPI document (`GET /openapi.json`).

What a generated client would guarantee by construction, checked for the hand-written one:
every route the client calls is served with that method; every response dataclass has exactly
the properties of its schema (so no field the server sends is dropped, none is invented) and a
default for each property the schema does not require; every request body the client builds
uses only properties its schema declares; every error code the document lists is in
`ERROR_CODES` with the class of the status it is listed under.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import Server
from warrant_client import ERROR_CODES, models
from warrant_client import _core as core

RESPONSES: dict[type, str] = {
    models.AnswerResponse: "AnswerResponse",
    models.AnswerBody: "AnswerBody",
    models.Claim: "ClaimOut",
    models.Citation: "CitationOut",
    models.Location: "Location",
    models.Abstention: "Abstention",
    models.AnswerMetrics: "AnswerMetrics",
    models.Withheld: "Withheld",
    models.ReviewTicket: "ReviewTicket",
    models.RetrieveResponse: "RetrieveResponse",
    models.RetrievedChunk: "RetrievedChunk",
    models.Document: "DocumentOut",
    models.DocumentChunk: "DocumentChunk",
    models.UpsertResult: "UpsertOut",
    models.Epoch: "EpochOut",
    models.ReviewPage: "PageView",
    models.ReviewSummary: "SummaryView",
    models.Review: "ReviewView",
    models.SourceView: "SourceView",
    models.ClaimView: "ClaimView",
    models.CitationView: "CitationView",
    models.AttemptView: "AttemptView",
    models.VerdictView: "VerdictView",
    models.ClaimVerdictView: "ClaimVerdictView",
    models.AbstentionVerdictView: "AbstentionVerdictView",
    models.AbstentionView: "AbstentionView",
    models.VerdictResult: "VerdictOut",
}

# Backquoted words of the document's error texts that are not codes: fields and parameters.
NOT_CODES = {"content", "doc_id", "since"}


@pytest.fixture(scope="module")
def document(server: Server) -> dict[str, Any]:
    return httpx.get(f"{server.url}/openapi.json", timeout=10).json()


def _schema(document: dict[str, Any], name: str) -> dict[str, Any]:
    return document["components"]["schemas"][name]


def _properties(document: dict[str, Any], schema: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(properties, required) of a schema, through `$ref` and `allOf`."""
    if "$ref" in schema:
        return _properties(document, _schema(document, schema["$ref"].rsplit("/", 1)[-1]))
    properties, required = set(schema.get("properties", {})), set(schema.get("required", []))
    for part in schema.get("allOf", []):
        more, more_required = _properties(document, part)
        properties |= more
        required |= more_required
    return properties, required


@pytest.mark.parametrize("cls", list(RESPONSES), ids=lambda cls: cls.__name__)
def test_response_dataclass_has_the_schema_s_fields(cls: type, document: dict[str, Any]) -> None:
    properties, required = _properties(document, _schema(document, RESPONSES[cls]))
    fields = {field.name: field for field in dataclasses.fields(cls)}
    assert set(fields) == properties, f"{cls.__name__} vs {RESPONSES[cls]}"
    without_default = {
        name
        for name, field in fields.items()
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
    }
    assert without_default <= required, f"{cls.__name__}: fields the server may omit need a default"


def _calls() -> list[core.Call]:
    return [
        core.answer_call("q", 3, 100, stream=False),
        core.retrieve_call("q", 3),
        core.document_call("a/b c"),
        core.upsert_call([models.DocumentInput("d", text="t")]),
        core.delete_call("d"),
        core.acl_call("grant", "d", ["g"], ["u"]),
        core.acl_call("revoke", "d", None, None),
        core.upload_call([models.UploadFile(b"x", filename="x.txt")], ["g"], []),
        core.reviews_call("pending", "1", 5),
        core.review_call("r"),
        core.verdict_call("r", [models.ClaimVerdict(0, "supported")], models.AbstentionVerdict("correct_abstention", "d"), "n"),
    ]


def _route(document: dict[str, Any], call: core.Call) -> tuple[str, dict[str, Any]]:
    for template, operations in document["paths"].items():
        pattern = "^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, call.path) and call.method.lower() in operations:
            return template, operations[call.method.lower()]
    raise AssertionError(f"{call.method} {call.path} is not in /openapi.json")


@pytest.mark.parametrize("call", _calls(), ids=lambda call: f"{call.method} {call.path}")
def test_every_call_is_a_documented_route_with_a_documented_body(call: core.Call, document: dict[str, Any]) -> None:
    _, operation = _route(document, call)
    if call.json is not None:
        schema = operation["requestBody"]["content"]["application/json"]["schema"]
        _check_body(document, schema, call.json)
    if call.files is not None:
        schema = operation["requestBody"]["content"]["multipart/form-data"]["schema"]
        properties, _ = _properties(document, schema)
        assert {name for name, _ in call.files} <= properties
    for name in call.params or {}:
        assert name in {parameter["name"] for parameter in operation.get("parameters", [])}


def _check_body(document: dict[str, Any], schema: dict[str, Any], value: Any) -> None:
    """Every object key the client sends is a property its schema declares (recursively)."""
    if "$ref" in schema:
        schema = _schema(document, schema["$ref"].rsplit("/", 1)[-1])
    if isinstance(value, dict):
        properties, _ = _properties(document, schema)
        assert set(value) <= properties, f"{sorted(set(value) - properties)} not in the schema"
        for key, item in value.items():
            declared = _declared(document, schema, key)
            if declared is not None:
                _check_body(document, declared, item)
    elif isinstance(value, list):
        items = schema.get("items")
        for item in value:
            if items is not None:
                _check_body(document, items, item)


def _declared(document: dict[str, Any], schema: dict[str, Any], key: str) -> dict[str, Any] | None:
    if "$ref" in schema:
        schema = _schema(document, schema["$ref"].rsplit("/", 1)[-1])
    if key in schema.get("properties", {}):
        declared = schema["properties"][key]
        options = [option for option in declared.get("oneOf", []) if option.get("type") != "null"]
        return options[0] if options else declared
    for part in schema.get("allOf", []):
        found = _declared(document, part, key)
        if found is not None:
            return found
    return None


def _documented_codes(document: dict[str, Any]) -> dict[str, set[int]]:
    """Code -> statuses, from every error response's description and every operation's
    "NNN codes: `a`, `b`." sentences and "(NNN `code`)" mentions."""
    codes: dict[str, set[int]] = {}

    def add(text: str, status: int) -> None:
        for token in re.findall(r"`([^`]+)`", text):
            if re.fullmatch(r"[a-z][a-z0-9_]*", token) and token not in NOT_CODES:
                codes.setdefault(token, set()).add(status)

    for operations in document["paths"].values():
        for operation in operations.values():
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    add(response.get("description", ""), int(status))
            text = f"{operation.get('summary', '')} {operation.get('description', '')}"
            for status, sentence in re.findall(r"(\d{3})\s+codes?:(.*?)(?:\.\s|\.$|$)", text, re.S):
                add(sentence, int(status))
            for status, code in re.findall(r"(\d{3})\s+(`[a-z_]+`)", text):
                add(code, int(status))
    return codes


def test_every_documented_error_code_is_in_the_table_with_its_status(document: dict[str, Any]) -> None:
    documented = _documented_codes(document)
    assert len(documented) > 40, sorted(documented)  # the parse found the document's codes
    missing = sorted(code for code in documented if code not in ERROR_CODES)
    assert not missing, f"codes /openapi.json lists that ERROR_CODES lacks: {missing}"
    for code, statuses in documented.items():
        assert statuses == {ERROR_CODES[code].status}, f"{code}: documented {statuses}, table {ERROR_CODES[code].__name__}"


def test_the_readme_table_is_the_code_table() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \((\d{3})\) \| (.*) \|$", readme, re.M)
    table = {code: name for name, _, codes in rows for code in re.findall(r"`(\w+)`", codes)}
    assert table == {code: cls.__name__ for code, cls in ERROR_CODES.items()}
    assert all(ERROR_CODES[re.findall(r"`(\w+)`", codes)[0]].status == int(status) for _, status, codes in rows)
