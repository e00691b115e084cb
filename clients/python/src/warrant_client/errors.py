"""Errors as exceptions: one class per HTTP status the server answers, each carrying the
server's ``code`` and ``message`` (the body is always ``{"code", "message"}``).

The class comes from the status (:data:`STATUS_CLASSES`); :data:`ERROR_CODES` lists every code
warrant's OpenAPI document, ``API.md`` and README name, with the class its status gives. The
table is used for an ``error`` event of a streamed answer (which arrives after a 200, so only its
code says what it is) and is held to the running server's ``/openapi.json`` by the tests.
Catch a family (:class:`ClientError`, :class:`ServerError`) or a status, then branch on
``error.code``.
"""

from __future__ import annotations

from typing import Mapping

__all__ = [
    "ERROR_CODES",
    "STATUS_CLASSES",
    "AuthenticationError",
    "BadGatewayError",
    "BadRequestError",
    "ClientError",
    "ConflictError",
    "GoneError",
    "InternalServerError",
    "MethodNotAllowedError",
    "MisdirectedRequestError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "ServerError",
    "ServiceUnavailableError",
    "UnexpectedResponseError",
    "UnsupportedMediaTypeError",
    "WarrantError",
    "error_for",
]


class WarrantError(Exception):
    """An error answered by warrant (or a response that is not one of warrant's).

    ``status`` is the HTTP status (for an ``error`` event of a stream: the status its code
    stands for), ``code`` the server's snake_case code, ``message`` its lowercase text,
    ``retry_after`` the seconds of ``Retry-After`` when the server sent one, ``request_id`` the
    ``x-request-id`` of the response."""

    status: int = 0

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        if status is not None:
            self.status = status
        self.retry_after = retry_after
        self.request_id = request_id

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status}, code={self.code!r}, message={self.message!r})"


class ClientError(WarrantError):
    """4xx: the request was refused; sending it again unchanged gives the same answer."""


class ServerError(WarrantError):
    """5xx: the server could not serve the request."""


class BadRequestError(ClientError):
    """400: invalid JSON, body or field (the code names which)."""

    status = 400


class AuthenticationError(ClientError):
    """401: no valid bearer token."""

    status = 401


class PermissionDeniedError(ClientError):
    """403: a valid token without the role (or the read access) the call needs."""

    status = 403


class NotFoundError(ClientError):
    """404: no such document, review item or route in the caller's tenant (indistinguishable
    from one the caller may not read)."""

    status = 404


class MethodNotAllowedError(ClientError):
    """405."""

    status = 405


class ConflictError(ClientError):
    """409: the request conflicts with stored state (a stale version, a replica, ...)."""

    status = 409


class GoneError(ClientError):
    """410: what was asked for is gone for good (compacted changes)."""

    status = 410


class PayloadTooLargeError(ClientError):
    """413: the body is over the server's limit."""

    status = 413


class UnsupportedMediaTypeError(ClientError):
    """415."""

    status = 415


class MisdirectedRequestError(ClientError):
    """421: the server does not answer that host name (DNS-rebinding guard)."""

    status = 421


class InternalServerError(ServerError):
    """500: an internal failure (details only in the server's log)."""

    status = 500


class BadGatewayError(ServerError):
    """502: a provider behind the server (the embedder) failed."""

    status = 502


class ServiceUnavailableError(ServerError):
    """503: overloaded, starting, a write that could not be made durable (these carry
    ``retry_after``, and the client retries them within its bounds), a stale replica, or a part
    of the server that is unavailable."""

    status = 503


class UnexpectedResponseError(WarrantError):
    """A response that is not one of warrant's: a body that is not the JSON the route answers
    (code ``invalid_response``; e.g. a proxy's page), or a streamed answer that ended before its
    ``answer`` event (code ``incomplete_stream``). An error status with a body that is not
    ``{code, message}`` gives the class of its status instead, with code ``http_<status>``."""


STATUS_CLASSES: Mapping[int, type[WarrantError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    405: MethodNotAllowedError,
    409: ConflictError,
    410: GoneError,
    413: PayloadTooLargeError,
    415: UnsupportedMediaTypeError,
    421: MisdirectedRequestError,
    500: InternalServerError,
    502: BadGatewayError,
    503: ServiceUnavailableError,
}
"""The exception class of each status warrant answers."""

_CODES_BY_CLASS: dict[type[WarrantError], tuple[str, ...]] = {
    BadRequestError: (
        # any JSON body
        "invalid_json", "invalid_body",
        # answer, retrieve
        "empty_question", "question_too_long", "empty_query", "query_too_long",
        # documents (JSON and files)
        "empty_batch", "batch_too_large", "duplicate_document", "invalid_document", "acl_too_large",
        "invalid_base64", "file_too_large", "unsupported_content_type", "content_type_mismatch",
        "invalid_utf8", "encrypted_document", "malformed_document", "document_too_large", "no_text",
        "extraction_timeout", "invalid_multipart", "invalid_path",
        # ACL changes
        "empty_grant", "empty_revoke", "invalid_acl_name",
        # reviews, the change feed
        "invalid_query", "invalid_cursor", "empty_verdict", "unknown_verdict", "claim_out_of_range",
        "duplicate_claim_verdict", "no_abstention", "invalid_doc_id", "note_too_long", "out_of_order",
    ),  # fmt: skip
    AuthenticationError: ("missing_token", "invalid_token", "token_expired", "missing_claim", "keys_unavailable"),
    PermissionDeniedError: ("forbidden", "claims_not_readable"),
    NotFoundError: ("not_found", "document_not_found", "review_not_found", "snapshot_not_found", "unknown_session"),
    MethodNotAllowedError: ("method_not_allowed",),
    ConflictError: (
        "stale_version", "read_only_replica", "too_many_verdicts", "backend_unsupported", "lineage_mismatch",
        "replication_off", "conflict", "counter_exhausted",
    ),  # fmt: skip
    GoneError: ("changes_compacted",),
    PayloadTooLargeError: ("payload_too_large",),
    UnsupportedMediaTypeError: ("unsupported_media_type",),
    MisdirectedRequestError: ("host_not_allowed",),
    InternalServerError: ("internal",),
    BadGatewayError: ("embedder_error",),
    ServiceUnavailableError: (
        "overloaded", "starting", "storage_unavailable", "storage_timeout", "request_timeout", "replica_stale",
        "reviews_unavailable",
        "embedder_timeout", "shard_unavailable", "snapshot_unavailable", "unavailable",
    ),  # fmt: skip
}

ERROR_CODES: Mapping[str, type[WarrantError]] = {
    code: cls for cls, codes in _CODES_BY_CLASS.items() for code in codes
}
"""Every error code warrant documents, with the exception class its status gives."""


def error_for(
    status: int | None,
    code: str,
    message: str,
    *,
    retry_after: float | None = None,
    request_id: str | None = None,
) -> WarrantError:
    """The exception for an error answer: by ``status`` (its family when the status is not one
    warrant documents), or by ``code`` alone when there is no status (a stream's ``error``)."""
    if status is None:
        by_code = ERROR_CODES.get(code, ServerError)
        return by_code(code, message, status=by_code.status or None, retry_after=retry_after, request_id=request_id)
    family = ClientError if 400 <= status < 500 else ServerError if status >= 500 else WarrantError
    by_status = STATUS_CLASSES.get(status, family)
    return by_status(code, message, status=status, retry_after=retry_after, request_id=request_id)
