"""The wire types of warrant's HTTP API as frozen dataclasses.

Responses are decoded by :func:`decode` from the field types declared here: a field the server
does not send takes its default, and a field the server sends that is not declared here is
ignored (the contract may grow optional fields; see ``../shared/spec/API.md``). Field names are
the server's, so ``tests/test_contract.py`` can hold every dataclass to the schema of the same
name in the running server's ``/openapi.json``.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import types
import typing
from dataclasses import dataclass
from typing import IO, Any, Literal, Mapping, Union

__all__ = [
    "Abstention",
    "AbstentionVerdict",
    "AbstentionVerdictView",
    "AbstentionView",
    "AnswerBody",
    "AnswerMetrics",
    "AnswerResponse",
    "AttemptView",
    "Citation",
    "CitationView",
    "Claim",
    "ClaimVerdict",
    "ClaimVerdictView",
    "ClaimView",
    "Document",
    "DocumentChunk",
    "DocumentInput",
    "Epoch",
    "Location",
    "RetrieveResponse",
    "RetrievedChunk",
    "Review",
    "ReviewPage",
    "ReviewSummary",
    "ReviewTicket",
    "SourceView",
    "StageEvent",
    "UploadFile",
    "UpsertResult",
    "VerdictResult",
    "VerdictView",
    "Withheld",
    "chunk_metadata",
    "decode",
]

AbstentionReason = Literal[
    "no_authorized_evidence",
    "insufficient_evidence",
    "invalid_output",
    "unsupported_citation",
    "missing_citation",
    "source_revoked",
    "generator_timeout",
    "generator_error",
    "context_overflow",
    "deadline_exceeded",
]
"""The abstention reason codes of the HTTP contract (a newer server may send others)."""

ClaimVerdictKind = Literal["supported", "partially_supported", "unsupported", "wrong_citation"]
AbstentionVerdictKind = Literal["correct_abstention", "should_have_answered"]


@dataclass(frozen=True)
class Location:
    """Where a span is in a document uploaded as a file: the page it starts on, every page it
    touches, and the heading path it starts in (each empty when unknown)."""

    page: int | None = None
    pages: tuple[int, ...] = ()
    section: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The location as plain JSON values (for framework metadata)."""
        return {"page": self.page, "pages": list(self.pages), "section": list(self.section)}


@dataclass(frozen=True)
class Citation:
    """A citation the server validated: the cited chunk (``start``/``end``, character offsets
    in the document text) and the quote that supports the claim inside it."""

    label: str
    chunk_id: str
    doc_id: str
    doc_version: int
    start: int
    end: int
    title: str
    quote: str
    quote_start: int
    quote_end: int
    location: Location | None = None


@dataclass(frozen=True)
class Claim:
    """A validated claim and its citations."""

    text: str
    citations: tuple[Citation, ...]


@dataclass(frozen=True)
class Withheld:
    """A claim validation withheld: its code only, never its text."""

    reason: str


@dataclass(frozen=True)
class AnswerBody:
    """The claims of an answer; ``partial`` when validation withheld some (``withheld``)."""

    claims: tuple[Claim, ...]
    partial: bool = False
    withheld: tuple[Withheld, ...] = ()


@dataclass(frozen=True)
class Abstention:
    """Why the server did not answer (``reason`` is an :data:`AbstentionReason`)."""

    reason: str
    diagnostics: tuple[str, ...] = ()


@dataclass(frozen=True)
class AnswerMetrics:
    """Per-request figures: stage timings in ms, candidates retrieved, sources in the context."""

    stages_ms: dict[str, float]
    retrieved: int
    context: int
    generator_attempts: int
    citations_rejected: dict[str, int]
    claims_anchored: int = 0


@dataclass(frozen=True)
class ReviewTicket:
    """Present when the answer was routed to human review."""

    queued: bool
    review_id: str


@dataclass(frozen=True)
class AnswerResponse:
    """``POST /v1/answer``: an answer (``status == "answered"``) or a typed abstention."""

    request_id: str
    status: Literal["answered", "abstained"]
    acl_epoch: int
    metrics: AnswerMetrics
    answer: AnswerBody | None = None
    abstention: Abstention | None = None
    review: ReviewTicket | None = None

    @property
    def claims(self) -> tuple[Claim, ...]:
        """The validated claims (empty for an abstention)."""
        return self.answer.claims if self.answer is not None else ()


@dataclass(frozen=True)
class StageEvent:
    """A streamed answer's ``stage`` event: a pipeline stage ended after ``ms`` milliseconds."""

    stage: str
    ms: float


@dataclass(frozen=True)
class RetrievedChunk:
    """One authorized chunk of ``POST /v1/retrieve``, best first."""

    chunk_id: str
    doc_id: str
    doc_version: int
    start: int
    end: int
    title: str
    text: str
    score: float
    retrievers: tuple[str, ...]
    location: Location | None = None


@dataclass(frozen=True)
class RetrieveResponse:
    """``POST /v1/retrieve``; ``short`` when fewer than ``k`` authorized chunks exist."""

    chunks: tuple[RetrievedChunk, ...]
    acl_epoch: int
    short: bool


@dataclass(frozen=True)
class DocumentChunk:
    """A chunk of a document's live version with its character offsets."""

    chunk_id: str
    start: int
    end: int
    text: str
    location: Location | None = None


@dataclass(frozen=True)
class Document:
    """``GET /v1/documents/{doc_id}``: the live version as chunks (they may overlap)."""

    doc_id: str
    doc_version: int
    title: str
    acl_epoch: int
    chunks: tuple[DocumentChunk, ...]


@dataclass(frozen=True)
class UpsertResult:
    """``PUT /v1/admin/documents`` and ``POST /v1/admin/files``: the batch is readable."""

    acl_epoch: int
    documents: int
    chunks: int


@dataclass(frozen=True)
class Epoch:
    """The ACL epoch after a grant, revoke or delete (a no-op keeps it)."""

    acl_epoch: int


@dataclass(frozen=True)
class ReviewSummary:
    """One item of a review queue page."""

    review_id: str
    created_ms: int
    status: str
    route: str
    asker: str
    question: str
    outcome: str
    partial: bool
    claims: int
    verdicts: int
    reason: str | None = None


@dataclass(frozen=True)
class ReviewPage:
    """``GET /v1/reviews``: a page, newest first; pass ``next_cursor`` for the next one."""

    items: tuple[ReviewSummary, ...]
    next_cursor: str | None = None


@dataclass(frozen=True)
class SourceView:
    """A source of a review item; only its label when the reviewer may not read it."""

    label: str
    readable: bool
    chunk_id: str | None = None
    doc_id: str | None = None
    doc_version: int | None = None
    start: int | None = None
    end: int | None = None
    title: str | None = None
    text: str | None = None
    withheld: str | None = None


@dataclass(frozen=True)
class CitationView:
    """A citation as the generator wrote it (label, quote when located)."""

    label: str
    quote: str | None = None
    quote_start: int | None = None
    quote_end: int | None = None


@dataclass(frozen=True)
class ClaimView:
    """A claim of any attempt, returned or rejected with its codes."""

    index: int
    attempt: int
    position: int
    status: str
    codes: tuple[str, ...]
    anchored: bool
    citations: tuple[CitationView, ...]
    text: str | None = None
    answer: str | None = None


@dataclass(frozen=True)
class AttemptView:
    """One generator attempt of a review item."""

    attempt: int
    shown: tuple[str, ...]
    codes: tuple[str, ...]
    outcome: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class ClaimVerdictView:
    """A stored verdict on one claim."""

    index: int
    verdict: str


@dataclass(frozen=True)
class AbstentionVerdictView:
    """A stored verdict on an abstention."""

    verdict: str
    doc_id: str | None = None


@dataclass(frozen=True)
class VerdictView:
    """One reviewer's verdict on an item."""

    reviewer: str
    at_ms: int
    claims: tuple[ClaimVerdictView, ...]
    abstention: AbstentionVerdictView | None = None
    note: str | None = None


@dataclass(frozen=True)
class AbstentionView:
    """The abstention of a review item."""

    reason: str
    diagnostics: tuple[str, ...] = ()


@dataclass(frozen=True)
class Review:
    """``GET /v1/reviews/{review_id}``: the item as the calling reviewer may see it."""

    review_id: str
    request_id: str
    created_ms: int
    status: str
    route: str
    asker: str
    question: str
    outcome: str
    partial: bool
    acl_epoch: int
    generated_text: Literal["shown", "withheld"]
    sources: tuple[SourceView, ...]
    claims: tuple[ClaimView, ...]
    attempts: tuple[AttemptView, ...]
    stages_ms: dict[str, float]
    verdicts: tuple[VerdictView, ...]
    abstention: AbstentionView | None = None


@dataclass(frozen=True)
class VerdictResult:
    """``POST /v1/reviews/{review_id}/verdicts``: the verdict is stored."""

    review_id: str
    status: str
    reviewer: str
    at_ms: int


@dataclass(frozen=True)
class ClaimVerdict:
    """A verdict on the claim of index ``index`` (request)."""

    index: int
    verdict: ClaimVerdictKind | str

    def to_json(self) -> dict[str, Any]:
        """The JSON the server takes."""
        return {"index": self.index, "verdict": self.verdict}


@dataclass(frozen=True)
class AbstentionVerdict:
    """A verdict on an abstention, optionally naming the document that answers it (request)."""

    verdict: AbstentionVerdictKind | str
    doc_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON the server takes."""
        body: dict[str, Any] = {"verdict": self.verdict}
        if self.doc_id is not None:
            body["doc_id"] = self.doc_id
        return body


@dataclass(frozen=True)
class DocumentInput:
    """A document to upsert (request): ``text``, or ``content`` (the file's bytes, sent as
    base64) with ``content_type``. The tenant is always the caller's; ``version`` must be greater
    than the stored one (default: stored + 1)."""

    doc_id: str
    text: str | None = None
    title: str | None = None
    groups: tuple[str, ...] | list[str] = ()
    users: tuple[str, ...] | list[str] = ()
    version: int | None = None
    content: bytes | None = None
    content_type: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON the server takes (``content`` base64-encoded)."""
        body: dict[str, Any] = {"doc_id": self.doc_id, "acl": {"groups": list(self.groups), "users": list(self.users)}}
        if self.text is not None:
            body["text"] = self.text
        if self.content is not None:
            body["content"] = base64.b64encode(self.content).decode("ascii")
        if self.content_type is not None:
            body["content_type"] = self.content_type
        if self.title is not None:
            body["title"] = self.title
        if self.version is not None:
            body["version"] = self.version
        return body


FileSource = Union[str, "os.PathLike[str]", bytes, IO[bytes]]


@dataclass(frozen=True)
class UploadFile:
    """One file of ``POST /v1/admin/files``: a path, the bytes, or a binary file object.

    ``filename`` defaults to the path's name (required for bytes and file objects without a
    ``name``); the server takes the format from ``content_type``, else from the file name's
    extension (.pdf .docx .html .md .txt); ``doc_id`` and ``title`` default to the file name.
    A file object is sent whole, from its start (httpx seeks it to 0), and sent again after a 503
    only when it is seekable; a path is opened for each attempt."""

    source: FileSource
    filename: str | None = None
    content_type: str | None = None
    doc_id: str | None = None
    title: str | None = None
    version: int | None = None


def chunk_metadata(chunk: RetrievedChunk, acl_epoch: int) -> dict[str, Any]:
    """A retrieved chunk's metadata for LangChain and LlamaIndex: ``doc_id``, ``chunk_id``,
    ``title``, ``doc_version``, ``location`` (``{"page", "pages", "section"}`` for documents
    uploaded as files, else ``None``), the chunk's character offsets ``start``/``end`` in the
    document text, its fused ``score``, the ``retrievers`` that found it, and the ``acl_epoch``
    it was authorized at."""
    return {
        "doc_id": chunk.doc_id,
        "chunk_id": chunk.chunk_id,
        "title": chunk.title,
        "doc_version": chunk.doc_version,
        "location": chunk.location.to_dict() if chunk.location is not None else None,
        "start": chunk.start,
        "end": chunk.end,
        "score": chunk.score,
        "retrievers": list(chunk.retrievers),
        "acl_epoch": acl_epoch,
    }


# -- decoding -------------------------------------------------------------------------------

_hints_cache: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _hints_cache.get(cls)
    if hints is None:
        hints = typing.get_type_hints(cls)
        _hints_cache[cls] = hints
    return hints


def _decode_value(annotation: Any, value: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        if value is None:
            return None
        options = [option for option in typing.get_args(annotation) if option is not type(None)]
        return _decode_value(options[0], value)
    if origin is Literal:
        return value
    if origin is tuple:
        (item,) = typing.get_args(annotation)[:1]
        return tuple(_decode_value(item, element) for element in (value or ()))
    if origin is dict:
        return dict(value or {})
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return decode(annotation, value)
    if annotation is float and isinstance(value, int):
        return float(value)
    return value


T = typing.TypeVar("T")


def decode(cls: type[T], data: Mapping[str, Any]) -> T:
    """Decodes the JSON object ``data`` into the dataclass ``cls`` (nested types included).

    Raises :class:`TypeError` when ``data`` is not an object or lacks a field without default.
    """
    if not isinstance(data, Mapping):
        raise TypeError(f"expected a json object for {cls.__name__}, got {type(data).__name__}")
    hints = _hints(cls)
    values: dict[str, Any] = {}
    for declared in dataclasses.fields(cls):  # type: ignore[arg-type]
        if declared.name in data:
            values[declared.name] = _decode_value(hints[declared.name], data[declared.name])
    return cls(**values)
