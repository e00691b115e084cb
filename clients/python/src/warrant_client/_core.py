"""What the sync and async clients share: requests as plain values, the retry rule for 503,
error decoding and response decoding. No I/O here except opening upload files."""

from __future__ import annotations

import contextlib
import email.utils
import json
import os
import time
from dataclasses import dataclass
from typing import IO, Any, Iterable, Iterator, Mapping, Sequence, TypeVar, cast
from urllib.parse import quote

import httpx

from . import models
from .errors import UnexpectedResponseError, WarrantError, error_for
from .models import (
    AbstentionVerdict,
    ClaimVerdict,
    DocumentInput,
    UploadFile,
    decode,
)

__version__ = "0.1.0"
USER_AGENT = f"warrant-client/{__version__}"

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How a client treats a 503 that carries ``Retry-After`` (``overloaded``, ``starting``,
    ``storage_unavailable``: the server did nothing and says when to come back).

    It waits the seconds the server names and sends the request again, at most
    ``max_retries`` times; a ``Retry-After`` longer than ``max_wait`` seconds is not waited
    for (the error is raised at once, ``retry_after`` set). A 503 without ``Retry-After``
    (``replica_stale``, ...) is never retried. ``RetryPolicy(max_retries=0)`` turns retries off.
    """

    max_retries: int = 3
    max_wait: float = 30.0

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError("max_retries must not be negative")
        if self.max_wait < 0:
            raise ValueError("max_wait must not be negative")


def retry_after_seconds(response: httpx.Response) -> float | None:
    """The ``Retry-After`` of a response in seconds (delta-seconds or an HTTP date), if any."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            moment = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if moment is None:
            return None
        seconds = moment.timestamp() - time.time()
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        return None
    return max(0.0, seconds)


def retry_delay(response: httpx.Response, retries_done: int, policy: RetryPolicy) -> float | None:
    """Seconds to wait before sending again, or ``None`` when the response stands."""
    if response.status_code != 503 or retries_done >= policy.max_retries:
        return None
    seconds = retry_after_seconds(response)
    if seconds is None or seconds > policy.max_wait:
        return None
    return seconds


def error_from_response(response: httpx.Response, body: bytes) -> WarrantError:
    """The exception for an error status (``body`` is the whole response body)."""
    code = f"http_{response.status_code}"
    message = body[:200].decode("utf-8", "replace").strip().lower() or response.reason_phrase.lower()
    with contextlib.suppress(ValueError):
        parsed = json.loads(body)
        if isinstance(parsed, dict) and isinstance(parsed.get("code"), str):
            code = parsed["code"]
            message = str(parsed.get("message", ""))
    return error_for(
        response.status_code,
        code,
        message,
        retry_after=retry_after_seconds(response),
        request_id=response.headers.get("x-request-id"),
    )


def decode_json(cls: type[T], response: httpx.Response) -> T:
    """The 200 body of ``response`` as ``cls``; :class:`UnexpectedResponseError` when it is not
    the JSON object the route answers."""
    try:
        return decode(cls, response.json())
    except (ValueError, TypeError, KeyError) as error:
        raise UnexpectedResponseError(
            "invalid_response",
            f"the response is not a {cls.__name__}: {error}",
            status=response.status_code,
            request_id=response.headers.get("x-request-id"),
        ) from error


def path_segment(value: str) -> str:
    """``value`` percent-encoded as one path segment (``/`` included)."""
    return quote(value, safe="")


@dataclass
class Call:
    """One API call as a value: built once, sent once per attempt.

    ``files`` holds the multipart parts of an upload in order; :meth:`open_files` gives the
    parts of one attempt (paths opened anew; httpx reads file objects from their start) and
    :meth:`can_resend` says whether every file object can be read again."""

    method: str
    path: str
    json: Any = None
    params: Mapping[str, Any] | None = None
    files: Sequence[tuple[str, Any]] | None = None
    accept: str = "application/json"

    def headers(self, token: str | None) -> dict[str, str]:
        headers = {"accept": self.accept}
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        return headers

    def can_resend(self) -> bool:
        """Whether every file object of the call can seek back to be read again."""
        for _, part in self.files or ():
            source = part[1] if isinstance(part, tuple) else None
            if _is_file_object(source):
                seekable = getattr(source, "seekable", None)
                if not (callable(seekable) and seekable()):
                    return False
        return True

    @contextlib.contextmanager
    def open_files(self) -> Iterator[list[tuple[str, Any]] | None]:
        """The multipart parts of one attempt (``None`` for a call without files)."""
        if self.files is None:
            yield None
            return
        with contextlib.ExitStack() as stack:
            parts: list[tuple[str, Any]] = []
            for name, part in self.files:
                if isinstance(part, tuple) and part[0] is not None and isinstance(part[1], (str, os.PathLike)):
                    filename, source, content_type = part
                    part = (filename, stack.enter_context(open(source, "rb")), content_type)
                parts.append((name, part))
            yield parts


def _is_file_object(value: Any) -> bool:
    return hasattr(value, "read") and not isinstance(value, (bytes, bytearray, str))


# -- the calls ------------------------------------------------------------------------------


def _without_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def answer_call(question: str, top_k: int | None, deadline_ms: int | None, *, stream: bool) -> Call:
    return Call(
        "POST",
        "/v1/answer",
        json=_without_none({"question": question, "top_k": top_k, "deadline_ms": deadline_ms}),
        accept="text/event-stream" if stream else "application/json",
    )


def retrieve_call(query: str, k: int | None) -> Call:
    return Call("POST", "/v1/retrieve", json=_without_none({"query": query, "k": k}))


def document_call(doc_id: str) -> Call:
    return Call("GET", f"/v1/documents/{path_segment(doc_id)}")


def upsert_call(documents: Iterable[DocumentInput | Mapping[str, Any]]) -> Call:
    wire = [document.to_json() if isinstance(document, DocumentInput) else dict(document) for document in documents]
    return Call("PUT", "/v1/admin/documents", json={"documents": wire})


def delete_call(doc_id: str) -> Call:
    return Call("DELETE", f"/v1/admin/documents/{path_segment(doc_id)}")


def acl_call(action: str, doc_id: str, groups: Sequence[str] | None, users: Sequence[str] | None) -> Call:
    body: dict[str, Any] = {"doc_id": doc_id}
    if groups is not None:
        body["groups"] = list(groups)
    if users is not None:
        body["users"] = list(users)
    return Call("POST", f"/v1/admin/acl/{action}", json=body)


def _acl_field_names(kind: str, names: Sequence[str]) -> list[str]:
    # The server splits these fields on commas: a name holding one would grant two others.
    for name in names:
        if "," in name:
            raise ValueError(f"{kind} name {name!r} holds a comma, which an upload cannot send; use upsert_documents")
    return list(names)


def upload_call(files: Sequence[UploadFile | str | os.PathLike[str]], groups: Sequence[str], users: Sequence[str]) -> Call:
    parts: list[tuple[str, Any]] = []
    for name in _acl_field_names("group", groups):
        parts.append(("groups", (None, name)))
    for name in _acl_field_names("user", users):
        parts.append(("users", (None, name)))
    if not files:
        raise ValueError("upload_files needs at least one file")
    for item in files:
        upload = item if isinstance(item, UploadFile) else UploadFile(item)
        filename = upload.filename
        if filename is None:
            named = upload.source if isinstance(upload.source, (str, os.PathLike)) else getattr(upload.source, "name", None)
            if not isinstance(named, (str, os.PathLike)):
                raise ValueError("an UploadFile of bytes or an unnamed file object needs a filename")
            filename = os.path.basename(os.fspath(named))
        if upload.doc_id is not None:
            parts.append(("doc_id", (None, upload.doc_id)))
        if upload.title is not None:
            parts.append(("title", (None, upload.title)))
        if upload.version is not None:
            parts.append(("version", (None, str(upload.version))))
        # Without a declared type the server takes the format from the file name's extension.
        content_type = upload.content_type or "application/octet-stream"
        parts.append(("file", (filename, cast(IO[bytes], upload.source), content_type)))
    return Call("POST", "/v1/admin/files", files=parts)


def reviews_call(status: str | None, cursor: str | None, limit: int | None) -> Call:
    return Call("GET", "/v1/reviews", params=_without_none({"status": status, "cursor": cursor, "limit": limit}))


def review_call(review_id: str) -> Call:
    return Call("GET", f"/v1/reviews/{path_segment(review_id)}")


def verdict_call(
    review_id: str,
    claims: Sequence[ClaimVerdict | Mapping[str, Any]] | None,
    abstention: AbstentionVerdict | Mapping[str, Any] | None,
    note: str | None,
) -> Call:
    body: dict[str, Any] = {}
    if claims is not None:
        body["claims"] = [claim.to_json() if isinstance(claim, ClaimVerdict) else dict(claim) for claim in claims]
    if abstention is not None:
        body["abstention"] = abstention.to_json() if isinstance(abstention, AbstentionVerdict) else dict(abstention)
    if note is not None:
        body["note"] = note
    return Call("POST", f"/v1/reviews/{path_segment(review_id)}/verdicts", json=body)


# -- streamed answers -----------------------------------------------------------------------

StreamItem = models.StageEvent | models.Claim | models.AnswerResponse
"""What a streamed answer yields: stage timings, each validated claim, then the envelope."""


def stream_item(event: str, data: str, request_id: str | None) -> StreamItem | None:
    """The value of one server-sent event; raises the error an ``error`` event carries."""
    if event not in ("stage", "claim", "answer", "error"):
        return None  # an event a newer server may add
    try:
        payload = json.loads(data)
        if event == "stage":
            return decode(models.StageEvent, payload)
        if event == "claim":
            return decode(models.Claim, payload)
        if event == "answer":
            return decode(models.AnswerResponse, payload)
        code, message = str(payload["code"]), str(payload.get("message", ""))
    except (ValueError, TypeError, KeyError) as error:
        raise UnexpectedResponseError(
            "invalid_response", f"a {event} event is not what the stream sends: {error}", request_id=request_id
        ) from error
    raise error_for(None, code, message, request_id=request_id)


def incomplete_stream(request_id: str | None) -> UnexpectedResponseError:
    return UnexpectedResponseError(
        "incomplete_stream", "the stream ended before its answer event", status=200, request_id=request_id
    )
