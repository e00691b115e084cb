"""The clients: :class:`WarrantClient` (sync) and :class:`AsyncWarrantClient` (asyncio), on httpx.

Every call carries the token of the user it is made for. A client takes ``token`` as a string
or as a callable invoked for every request (a retried request asks again), e.g. one that reads
the current user's token from a context variable, so one client object (and its connection
pool) serves many users; any call's ``token=`` overrides it for that call. The async client
also takes a coroutine function. A client never holds a service credential of its own.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from types import TracebackType
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence, TypeVar, Union

import httpx

from . import _core
from ._core import USER_AGENT, Call, RetryPolicy, StreamItem
from ._sse import SseDecoder
from .models import (
    AbstentionVerdict,
    AnswerResponse,
    Claim,
    ClaimVerdict,
    Document,
    DocumentInput,
    Epoch,
    RetrieveResponse,
    Review,
    ReviewPage,
    ReviewSummary,
    UploadFile,
    UpsertResult,
    VerdictResult,
)

__all__ = ["AnswerStream", "AsyncAnswerStream", "AsyncWarrantClient", "Token", "AsyncToken", "WarrantClient"]

Token = Union[str, Callable[[], str]]
"""A bearer token, or a callable returning the current one (called for every request)."""

AsyncToken = Union[str, Callable[[], str], Callable[[], Awaitable[str]]]
"""As :data:`Token`, or a coroutine function returning the current one."""

T = TypeVar("T")
_DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=10.0)


def _checked(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"the token callable returned {type(value).__name__}, not str")
    if not value.strip():
        raise ValueError("the token is empty")
    return value


def _resolve(token: Token | None) -> str | None:
    if token is None:
        return None
    return _checked(token if isinstance(token, str) else token())


async def _resolve_async(token: AsyncToken | None) -> str | None:
    if token is None:
        return None
    if isinstance(token, str):
        return _checked(token)
    value: Any = token()
    if inspect.isawaitable(value):
        value = await value
    return _checked(value)


class WarrantClient:
    """A synchronous client.

    >>> client = WarrantClient("http://localhost:8080", token=lambda: current_user_token())
    >>> client.answer("How much is a hotel night in London?").claims[0].citations[0].doc_id

    ``retry`` governs 503 with ``Retry-After`` (see :class:`RetryPolicy`); ``http_client``
    replaces the httpx client (its ``base_url`` is then used; closing this client closes it).
    """

    def __init__(
        self,
        base_url: str = "http://localhost:8080",
        token: Token | None = None,
        *,
        timeout: float | httpx.Timeout = _DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        self._token = token
        self.retry = retry if retry is not None else RetryPolicy()
        self._http = http_client or httpx.Client(
            base_url=base_url, timeout=timeout, headers={"user-agent": USER_AGENT, **(headers or {})}
        )

    # -- plumbing --------------------------------------------------------------------------

    def close(self) -> None:
        """Closes the connection pool."""
        self._http.close()

    def __enter__(self) -> WarrantClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def _open(self, call: Call, token: Token | None) -> httpx.Response:
        """Sends ``call`` (again after each 503 with an honored ``Retry-After``) and returns the
        final response, unread; raises the error of an error status."""
        retries = 0
        while True:
            bearer = _resolve(token if token is not None else self._token)
            with call.open_files() as files:
                request = self._http.build_request(
                    call.method, call.path, json=call.json, params=call.params, files=files, headers=call.headers(bearer)
                )
                response = self._http.send(request, stream=True)
            if response.status_code < 400:
                return response
            body = response.read()
            response.close()
            delay = _core.retry_delay(response, retries, self.retry)
            if delay is None or not call.can_resend():
                raise _core.error_from_response(response, body)
            time.sleep(delay)
            retries += 1

    def _call(self, call: Call, token: Token | None, cls: type[T]) -> T:
        response = self._open(call, token)
        try:
            response.read()
        finally:
            response.close()
        return _core.decode_json(cls, response)

    # -- answers and retrieval -------------------------------------------------------------

    def answer(
        self, question: str, *, top_k: int | None = None, deadline_ms: int | None = None, token: Token | None = None
    ) -> AnswerResponse:
        """``POST /v1/answer``: validated claims with citations, or a typed abstention (both 200)."""
        return self._call(_core.answer_call(question, top_k, deadline_ms, stream=False), token, AnswerResponse)

    def stream_answer(
        self, question: str, *, top_k: int | None = None, deadline_ms: int | None = None, token: Token | None = None
    ) -> AnswerStream:
        """The answer as server-sent events: iterate for :class:`StageEvent`, each validated
        :class:`Claim` as it is sent, then the :class:`AnswerResponse`; or use :meth:`AnswerStream.claims`.
        The request is sent on first iteration (or ``with``); closing the stream cancels the work."""
        return AnswerStream(self, _core.answer_call(question, top_k, deadline_ms, stream=True), token)

    def retrieve(self, query: str, *, k: int | None = None, token: Token | None = None) -> RetrieveResponse:
        """``POST /v1/retrieve``: the caller's authorized chunks, best first."""
        return self._call(_core.retrieve_call(query, k), token, RetrieveResponse)

    # -- documents -------------------------------------------------------------------------

    def get_document(self, doc_id: str, *, token: Token | None = None) -> Document:
        """``GET /v1/documents/{doc_id}``: the live version as chunks (404 unless readable)."""
        return self._call(_core.document_call(doc_id), token, Document)

    def upsert_documents(
        self, documents: Sequence[DocumentInput | Mapping[str, Any]], *, token: Token | None = None
    ) -> UpsertResult:
        """``PUT /v1/admin/documents`` (role admin): all or nothing."""
        return self._call(_core.upsert_call(documents), token, UpsertResult)

    def upload_files(
        self,
        files: Sequence[UploadFile | str | os.PathLike[str]],
        *,
        groups: Sequence[str] = (),
        users: Sequence[str] = (),
        token: Token | None = None,
    ) -> UpsertResult:
        """``POST /v1/admin/files`` (role admin): files as one multipart request, all or
        nothing; ``groups`` and ``users`` may read every file."""
        return self._call(_core.upload_call(files, groups, users), token, UpsertResult)

    def delete_document(self, doc_id: str, *, token: Token | None = None) -> Epoch:
        """``DELETE /v1/admin/documents/{doc_id}`` (role admin)."""
        return self._call(_core.delete_call(doc_id), token, Epoch)

    # -- access control --------------------------------------------------------------------

    def grant(
        self,
        doc_id: str,
        *,
        groups: Sequence[str] | None = None,
        users: Sequence[str] | None = None,
        token: Token | None = None,
    ) -> Epoch:
        """``POST /v1/admin/acl/grant`` (role admin)."""
        return self._call(_core.acl_call("grant", doc_id, groups, users), token, Epoch)

    def revoke(
        self,
        doc_id: str,
        *,
        groups: Sequence[str] | None = None,
        users: Sequence[str] | None = None,
        token: Token | None = None,
    ) -> Epoch:
        """``POST /v1/admin/acl/revoke`` (role admin); neither list revokes all access. Once it
        returns, no request that starts afterwards cites or returns the document."""
        return self._call(_core.acl_call("revoke", doc_id, groups, users), token, Epoch)

    # -- reviews ---------------------------------------------------------------------------

    def list_reviews(
        self,
        *,
        status: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
        token: Token | None = None,
    ) -> ReviewPage:
        """``GET /v1/reviews`` (role reviewer): one page, newest first."""
        return self._call(_core.reviews_call(status, cursor, limit), token, ReviewPage)

    def iter_reviews(
        self, *, status: str | None = None, limit: int | None = None, token: Token | None = None
    ) -> Iterator[ReviewSummary]:
        """Every item of the queue, page after page."""
        cursor: str | None = None
        while True:
            page = self.list_reviews(status=status, cursor=cursor, limit=limit, token=token)
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def get_review(self, review_id: str, *, token: Token | None = None) -> Review:
        """``GET /v1/reviews/{review_id}`` (role reviewer): the item as the caller may see it."""
        return self._call(_core.review_call(review_id), token, Review)

    def submit_verdict(
        self,
        review_id: str,
        *,
        claims: Sequence[ClaimVerdict | Mapping[str, Any]] | None = None,
        abstention: AbstentionVerdict | Mapping[str, Any] | None = None,
        note: str | None = None,
        token: Token | None = None,
    ) -> VerdictResult:
        """``POST /v1/reviews/{review_id}/verdicts`` (role reviewer)."""
        return self._call(_core.verdict_call(review_id, claims, abstention, note), token, VerdictResult)


class AnswerStream:
    """A streamed answer (see :meth:`WarrantClient.stream_answer`). After iteration,
    :attr:`response` holds the envelope; an ``error`` event raises its exception."""

    def __init__(self, client: WarrantClient, call: Call, token: Token | None) -> None:
        self._client = client
        self._call = call
        self._token = token
        self._response: httpx.Response | None = None
        self._started = False
        self.response: AnswerResponse | None = None
        """The whole envelope, once the ``answer`` event arrived."""

    def __enter__(self) -> AnswerStream:
        self._start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connection (the server cancels the work if it is still running)."""
        if self._response is not None:
            self._response.close()

    def _start(self) -> httpx.Response:
        if self._started:
            if self._response is None:
                raise RuntimeError("the stream could not be opened")
            return self._response
        self._started = True
        self._response = self._client._open(self._call, self._token)
        return self._response

    def __iter__(self) -> Iterator[StreamItem]:
        response = self._start()
        request_id = response.headers.get("x-request-id")
        decoder = SseDecoder()
        try:
            for line in response.iter_lines():
                event = decoder.feed(line)
                if event is None:
                    continue
                item = _core.stream_item(event.event, event.data, request_id)
                if item is None:
                    continue
                if isinstance(item, AnswerResponse):
                    self.response = item
                yield item
                if isinstance(item, AnswerResponse):
                    return
        finally:
            self.close()
        raise _core.incomplete_stream(request_id)

    def claims(self) -> Iterator[Claim]:
        """Each validated claim as it arrives (stage events skipped)."""
        for item in self:
            if isinstance(item, Claim):
                yield item

    def final(self) -> AnswerResponse:
        """Reads the stream to its end and returns the envelope."""
        for _ in self:
            pass
        if self.response is None:  # iteration raises first; kept for the type checker
            raise _core.incomplete_stream(None)
        return self.response


class AsyncWarrantClient:
    """The asyncio client: the methods of :class:`WarrantClient`, awaited.

    ``token`` may also be a coroutine function (e.g. one that refreshes through your identity
    provider). Close it with ``await client.aclose()`` or ``async with``.
    """

    def __init__(
        self,
        base_url: str = "http://localhost:8080",
        token: AsyncToken | None = None,
        *,
        timeout: float | httpx.Timeout = _DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self._token = token
        self.retry = retry if retry is not None else RetryPolicy()
        self._http = http_client or httpx.AsyncClient(
            base_url=base_url, timeout=timeout, headers={"user-agent": USER_AGENT, **(headers or {})}
        )

    async def aclose(self) -> None:
        """Closes the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncWarrantClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _open(self, call: Call, token: AsyncToken | None) -> httpx.Response:
        retries = 0
        while True:
            bearer = await _resolve_async(token if token is not None else self._token)
            with call.open_files() as files:
                request = self._http.build_request(
                    call.method, call.path, json=call.json, params=call.params, files=files, headers=call.headers(bearer)
                )
                response = await self._http.send(request, stream=True)
            if response.status_code < 400:
                return response
            body = await response.aread()
            await response.aclose()
            delay = _core.retry_delay(response, retries, self.retry)
            if delay is None or not call.can_resend():
                raise _core.error_from_response(response, body)
            await asyncio.sleep(delay)
            retries += 1

    async def _call(self, call: Call, token: AsyncToken | None, cls: type[T]) -> T:
        response = await self._open(call, token)
        try:
            await response.aread()
        finally:
            await response.aclose()
        return _core.decode_json(cls, response)

    async def answer(
        self,
        question: str,
        *,
        top_k: int | None = None,
        deadline_ms: int | None = None,
        token: AsyncToken | None = None,
    ) -> AnswerResponse:
        """``POST /v1/answer``."""
        return await self._call(_core.answer_call(question, top_k, deadline_ms, stream=False), token, AnswerResponse)

    def stream_answer(
        self,
        question: str,
        *,
        top_k: int | None = None,
        deadline_ms: int | None = None,
        token: AsyncToken | None = None,
    ) -> AsyncAnswerStream:
        """The answer as server-sent events (``async for``; see :meth:`WarrantClient.stream_answer`)."""
        return AsyncAnswerStream(self, _core.answer_call(question, top_k, deadline_ms, stream=True), token)

    async def retrieve(self, query: str, *, k: int | None = None, token: AsyncToken | None = None) -> RetrieveResponse:
        """``POST /v1/retrieve``."""
        return await self._call(_core.retrieve_call(query, k), token, RetrieveResponse)

    async def get_document(self, doc_id: str, *, token: AsyncToken | None = None) -> Document:
        """``GET /v1/documents/{doc_id}``."""
        return await self._call(_core.document_call(doc_id), token, Document)

    async def upsert_documents(
        self, documents: Sequence[DocumentInput | Mapping[str, Any]], *, token: AsyncToken | None = None
    ) -> UpsertResult:
        """``PUT /v1/admin/documents``."""
        return await self._call(_core.upsert_call(documents), token, UpsertResult)

    async def upload_files(
        self,
        files: Sequence[UploadFile | str | os.PathLike[str]],
        *,
        groups: Sequence[str] = (),
        users: Sequence[str] = (),
        token: AsyncToken | None = None,
    ) -> UpsertResult:
        """``POST /v1/admin/files`` (the files are read on the event loop's thread)."""
        return await self._call(_core.upload_call(files, groups, users), token, UpsertResult)

    async def delete_document(self, doc_id: str, *, token: AsyncToken | None = None) -> Epoch:
        """``DELETE /v1/admin/documents/{doc_id}``."""
        return await self._call(_core.delete_call(doc_id), token, Epoch)

    async def grant(
        self,
        doc_id: str,
        *,
        groups: Sequence[str] | None = None,
        users: Sequence[str] | None = None,
        token: AsyncToken | None = None,
    ) -> Epoch:
        """``POST /v1/admin/acl/grant``."""
        return await self._call(_core.acl_call("grant", doc_id, groups, users), token, Epoch)

    async def revoke(
        self,
        doc_id: str,
        *,
        groups: Sequence[str] | None = None,
        users: Sequence[str] | None = None,
        token: AsyncToken | None = None,
    ) -> Epoch:
        """``POST /v1/admin/acl/revoke``."""
        return await self._call(_core.acl_call("revoke", doc_id, groups, users), token, Epoch)

    async def list_reviews(
        self,
        *,
        status: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
        token: AsyncToken | None = None,
    ) -> ReviewPage:
        """``GET /v1/reviews``."""
        return await self._call(_core.reviews_call(status, cursor, limit), token, ReviewPage)

    async def iter_reviews(
        self, *, status: str | None = None, limit: int | None = None, token: AsyncToken | None = None
    ) -> AsyncIterator[ReviewSummary]:
        """Every item of the queue, page after page."""
        cursor: str | None = None
        while True:
            page = await self.list_reviews(status=status, cursor=cursor, limit=limit, token=token)
            for item in page.items:
                yield item
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def get_review(self, review_id: str, *, token: AsyncToken | None = None) -> Review:
        """``GET /v1/reviews/{review_id}``."""
        return await self._call(_core.review_call(review_id), token, Review)

    async def submit_verdict(
        self,
        review_id: str,
        *,
        claims: Sequence[ClaimVerdict | Mapping[str, Any]] | None = None,
        abstention: AbstentionVerdict | Mapping[str, Any] | None = None,
        note: str | None = None,
        token: AsyncToken | None = None,
    ) -> VerdictResult:
        """``POST /v1/reviews/{review_id}/verdicts``."""
        return await self._call(_core.verdict_call(review_id, claims, abstention, note), token, VerdictResult)


class AsyncAnswerStream:
    """A streamed answer of the async client (``async with`` / ``async for``)."""

    def __init__(self, client: AsyncWarrantClient, call: Call, token: AsyncToken | None) -> None:
        self._client = client
        self._call = call
        self._token = token
        self._response: httpx.Response | None = None
        self._started = False
        self.response: AnswerResponse | None = None
        """The whole envelope, once the ``answer`` event arrived."""

    async def __aenter__(self) -> AsyncAnswerStream:
        await self._start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Closes the connection (the server cancels the work if it is still running)."""
        if self._response is not None:
            await self._response.aclose()

    async def _start(self) -> httpx.Response:
        if self._started:
            if self._response is None:
                raise RuntimeError("the stream could not be opened")
            return self._response
        self._started = True
        self._response = await self._client._open(self._call, self._token)
        return self._response

    def __aiter__(self) -> AsyncIterator[StreamItem]:
        return self._events()

    async def _events(self) -> AsyncIterator[StreamItem]:
        response = await self._start()
        request_id = response.headers.get("x-request-id")
        decoder = SseDecoder()
        try:
            async for line in response.aiter_lines():
                event = decoder.feed(line)
                if event is None:
                    continue
                item = _core.stream_item(event.event, event.data, request_id)
                if item is None:
                    continue
                if isinstance(item, AnswerResponse):
                    self.response = item
                yield item
                if isinstance(item, AnswerResponse):
                    return
        finally:
            await self.aclose()
        raise _core.incomplete_stream(request_id)

    async def claims(self) -> AsyncIterator[Claim]:
        """Each validated claim as it arrives (stage events skipped)."""
        async for item in self:
            if isinstance(item, Claim):
                yield item

    async def final(self) -> AnswerResponse:
        """Reads the stream to its end and returns the envelope."""
        async for _ in self:
            pass
        if self.response is None:  # iteration raises first; kept for the type checker
            raise _core.incomplete_stream(None)
        return self.response
