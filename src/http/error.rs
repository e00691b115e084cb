//! The one place where layer errors become HTTP statuses and `{code, message}` bodies.
//!
//! Every mapping is an exhaustive `match` without a wildcard, so a new error variant cannot
//! compile until it is given a status here. Internal errors get a generic message: paths,
//! tokens and document text never reach a client.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;

use crate::acl::AclError;
use crate::answer::AnswerError;
use crate::documents::DocumentsError;
use crate::embed::EmbedError;
use crate::extract::ExtractError;
use crate::index::IndexError;
use crate::oidc::Refusal;
use crate::retrieval::{DatabaseCause, DatabaseOperation, RetrievalError};
use crate::review::ReviewError;
use crate::snapshot::SnapshotError;
use crate::storage::StorageError;

/// The JSON error body.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// snake_case code.
    pub code: String,
    /// Lowercase human-readable message.
    pub message: String,
}

/// 401: the route needs a bearer token (listed by every route with `security(("bearer" = []))`).
/// This and the markers below are the error responses of the OpenAPI document that routes share:
/// they live here, beside [`ErrorBody`], so a handler names them without importing the document
/// ([`super::openapi`]), which imports every handler.
#[derive(utoipa::IntoResponses)]
pub enum Unauthenticated {
    /// `missing_token`, `invalid_token` or `token_expired`: no valid bearer token; with an
    /// identity provider (`[auth.oidc]`) also `missing_claim` (a provider token lacks a claim of
    /// `[auth.claims]`) and `keys_unavailable` (no usable key of the provider).
    #[response(status = 401)]
    Unauthorized(ErrorBody),
}

/// 403: the route needs a role the token lacks (listed after [`Unauthenticated`]).
#[derive(utoipa::IntoResponses)]
pub enum Forbidden {
    /// `forbidden`: a valid token without the role this route needs.
    #[response(status = 403)]
    Forbidden(ErrorBody),
}

/// 400, 413, 415: what any route reading a JSON body answers to a body it cannot take.
#[derive(utoipa::IntoResponses)]
pub enum JsonBodyRejected {
    /// `invalid_json`, `invalid_body` (a wrong type, an unknown or a missing field), or a field
    /// outside its declared constraints (the code names it, e.g. `empty_question`).
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// `payload_too_large`: the body is over `server.max_body_bytes`.
    #[response(status = 413)]
    PayloadTooLarge(ErrorBody),
    /// `unsupported_media_type`: the body is not `application/json`.
    #[response(status = 415)]
    UnsupportedMediaType(ErrorBody),
}

/// 500, 502, 503: the engine behind a route that embeds or searches cannot serve the request.
#[derive(utoipa::IntoResponses)]
pub enum EngineUnavailable {
    /// An internal failure (`internal error`; details are only logged).
    #[response(status = 500)]
    Internal(ErrorBody),
    /// `embedder_error`: the embedding provider failed.
    #[response(status = 502)]
    BadGateway(ErrorBody),
    /// `overloaded` (with `Retry-After`), `replica_stale` (a replica that cannot confirm its ACL
    /// state is fresh), `storage_unavailable` (the database failed: a read changed nothing, a
    /// write was not applied; with `Retry-After`), `storage_timeout` (a database statement ran
    /// past its deadline, rolled back whole; with `Retry-After`), `request_timeout` (a read ran
    /// past `server.request_timeout_ms` and was stopped: nothing was changed; with `Retry-After`),
    /// or the embedder or an index is unavailable.
    #[response(status = 503, headers(("Retry-After" = u64, description = "seconds to wait (with `overloaded`)")))]
    Unavailable(ErrorBody),
}

/// 503: an admin write that could not be made durable, or beyond the tenant's admission bound.
#[derive(utoipa::IntoResponses)]
pub enum WriteUnavailable {
    /// `storage_unavailable` (the change could not be made durable and was not applied; reads go
    /// on), `storage_timeout` (a statement ran past its deadline and the change was rolled back
    /// whole) or `overloaded` (the tenant's admission bound for admin writes), with `Retry-After`.
    #[response(status = 503, headers(("Retry-After" = u64, description = "seconds to wait")))]
    Unavailable(ErrorBody),
}

/// An error answered to a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// Status.
    pub status: StatusCode,
    /// Code.
    pub code: &'static str,
    /// Message (safe to show).
    pub message: String,
    /// Seconds for `Retry-After`.
    pub retry_after: Option<u64>,
    /// The methods for `Allow` (405).
    pub allow: Option<String>,
}

impl ApiError {
    /// A new error.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), retry_after: None, allow: None }
    }

    /// 400 with a code.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 401.
    pub fn unauthorized(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, code, message)
    }

    /// 403.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 404.
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    /// 503 `overloaded` with `Retry-After`.
    pub fn overloaded(retry_after: u64) -> Self {
        Self {
            retry_after: Some(retry_after),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded", "server is overloaded, retry later")
        }
    }

    /// 503 `starting` with `Retry-After: 1`: the server is still opening its data.
    pub fn starting() -> Self {
        Self {
            retry_after: Some(1),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "starting", "the server is still loading its data")
        }
    }

    /// 409: the request conflicts with what this server is (a replica, a backend, a lineage).
    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    /// 410: what was asked for is gone for good (compacted changes).
    pub fn gone(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::GONE, code, message)
    }

    /// 503 without `Retry-After`: a part of this server cannot serve the request now.
    pub fn unavailable(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
    }

    /// 405 `method_not_allowed` with `Allow: allow` (RFC 9110 §15.5.6).
    pub fn method_not_allowed(allow: impl Into<String>) -> Self {
        Self {
            allow: Some(allow.into()),
            ..Self::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "method not allowed on this route")
        }
    }

    /// 413 `payload_too_large`.
    pub fn payload_too_large() -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", "request body is too large")
    }

    /// 415 `unsupported_media_type`.
    pub fn unsupported_media_type() -> Self {
        Self::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", "content type must be application/json")
    }

    /// 421 `host_not_allowed` (DNS rebinding: [`super::host`]).
    pub fn host_not_allowed() -> Self {
        Self::new(
            StatusCode::MISDIRECTED_REQUEST,
            "host_not_allowed",
            "this server does not answer requests for that host name",
        )
    }

    /// 500 with a generic message (the cause goes to the log, never to the client).
    pub fn internal(code: &'static str) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, code, "internal error")
    }
}

/// A 503 answer with a body of its own (`/readyz` while not ready).
pub fn not_ready(body: &impl Serialize) -> HttpResponse {
    HttpResponse::ServiceUnavailable().json(body)
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{}: {}", self.code, self.message)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status);
        if let Some(seconds) = self.retry_after {
            response.insert_header(("Retry-After", seconds.to_string()));
        }
        if let Some(allow) = &self.allow {
            response.insert_header((actix_web::http::header::ALLOW, allow.as_str()));
        }
        response.json(ErrorBody { code: self.code.to_owned(), message: self.message.clone() })
    }
}

impl From<AclError> for ApiError {
    fn from(error: AclError) -> Self {
        let status = match &error {
            AclError::UnknownDocument { .. } => StatusCode::NOT_FOUND,
            AclError::StaleVersion { .. } => StatusCode::CONFLICT,
            AclError::DuplicateDocument { .. } | AclError::TooLarge { .. } => StatusCode::BAD_REQUEST,
            AclError::Exhausted { .. } | AclError::Conflict => StatusCode::CONFLICT,
            AclError::Compacted { .. } => StatusCode::GONE,
            AclError::OutOfOrder { .. } => StatusCode::BAD_REQUEST,
        };
        Self::new(status, error.code(), error.to_string())
    }
}

impl From<DocumentsError> for ApiError {
    fn from(error: DocumentsError) -> Self {
        let message = error.to_string();
        match error {
            DocumentsError::ReadOnly => Self::conflict(error.code(), message),
            DocumentsError::EmptyBatch
            | DocumentsError::BatchTooLarge { .. }
            | DocumentsError::EmptyGrant
            | DocumentsError::EmptyRevoke
            | DocumentsError::InvalidAclName
            | DocumentsError::FileTooLarge { .. } => Self::bad_request(error.code(), message),
            DocumentsError::Extraction { error: ref extraction, .. } => {
                let status = match extraction {
                    ExtractError::UnsupportedType { .. }
                    | ExtractError::TypeMismatch { .. }
                    | ExtractError::InvalidUtf8 { .. }
                    | ExtractError::Encrypted
                    | ExtractError::Malformed { .. }
                    | ExtractError::TooLarge { .. }
                    | ExtractError::NoText
                    | ExtractError::TimedOut { .. } => StatusCode::BAD_REQUEST,
                    // The service reports a busy extraction as `Overloaded` (with Retry-After).
                    ExtractError::Busy => StatusCode::SERVICE_UNAVAILABLE,
                };
                Self::new(status, error.code(), message)
            }
            DocumentsError::Overloaded { retry_after_seconds } => Self::overloaded(retry_after_seconds),
            DocumentsError::Acl(inner) => inner.into(),
            DocumentsError::Retrieval(inner) => inner.into(),
        }
    }
}

impl From<IndexError> for ApiError {
    fn from(error: IndexError) -> Self {
        tracing::error!(code = error.code(), "index failure");
        match error {
            IndexError::Unavailable => Self::new(StatusCode::SERVICE_UNAVAILABLE, error.code(), "index unavailable"),
            IndexError::Lexical(_)
            | IndexError::Dimension { .. }
            | IndexError::NonFinite
            | IndexError::SlotOrder { .. } => Self::internal(error.code()),
        }
    }
}

impl From<EmbedError> for ApiError {
    fn from(error: EmbedError) -> Self {
        tracing::error!(code = error.code(), "embedder failure");
        match error {
            EmbedError::Timeout => Self::new(StatusCode::SERVICE_UNAVAILABLE, error.code(), "embedder timed out"),
            EmbedError::Provider(_) => Self::new(StatusCode::BAD_GATEWAY, error.code(), "embedder failed"),
            EmbedError::Shape { .. } | EmbedError::Model(_) => Self::internal(error.code()),
        }
    }
}

impl From<RetrievalError> for ApiError {
    fn from(error: RetrievalError) -> Self {
        match error {
            RetrievalError::Index(inner) => inner.into(),
            RetrievalError::Embed(inner) => inner.into(),
            RetrievalError::Acl(inner) => inner.into(),
            RetrievalError::Storage(inner) => inner.into(),
            RetrievalError::InvalidDocument { .. } => Self::bad_request("invalid_document", error.to_string()),
            RetrievalError::QueryVector(_) => {
                tracing::error!(code = error.code(), %error, "the embedder's query vector was refused");
                Self::internal(error.code())
            }
            RetrievalError::Database { operation, cause } => Self::database(error.code(), operation, cause),
        }
    }
}

impl ApiError {
    /// 503 with `Retry-After: 1` for a database request that failed (`code`: `storage_timeout`,
    /// `overloaded` or `storage_unavailable`), saying what was not done: a read changed nothing,
    /// a write was rolled back and not applied. The cause (SQLSTATE, server, message) was logged
    /// where it happened; the client is told neither.
    pub fn database(code: &'static str, operation: DatabaseOperation, cause: DatabaseCause) -> Self {
        let message = match (operation, cause) {
            (_, DatabaseCause::Busy) => {
                "too many of this tenant's requests are waiting for the database; nothing was changed, retry later"
            }
            (DatabaseOperation::Read, DatabaseCause::Timeout) => {
                "the read did not complete within the database's deadline; nothing was changed, retry later"
            }
            (DatabaseOperation::Read, DatabaseCause::Connection | DatabaseCause::Other) => {
                "the database could not serve this read; nothing was changed, retry later"
            }
            (DatabaseOperation::Write, DatabaseCause::Timeout) => {
                "the change was not applied: the database did not complete it within its deadline; retry later"
            }
            (DatabaseOperation::Write, DatabaseCause::Connection | DatabaseCause::Other) => {
                "the change was not applied: the database could not complete it; retry later"
            }
        };
        match operation {
            DatabaseOperation::Read => tracing::warn!(code, %cause, "database read failed: nothing was changed"),
            DatabaseOperation::Write => {
                tracing::warn!(code, %cause, "database write failed: rolled back, nothing was acknowledged")
            }
        }
        Self { retry_after: Some(1), ..Self::unavailable(code, message) }
    }
}

impl From<StorageError> for ApiError {
    fn from(error: StorageError) -> Self {
        // The message names the file for the operator's log only; clients get a generic text.
        tracing::error!(code = error.code(), %error, "storage failure: nothing was acknowledged");
        let retry = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            error.code(),
            "the change could not be made durable and was not applied; reads are still served",
        );
        match error {
            StorageError::Io { .. }
            | StorageError::Corrupted { .. }
            | StorageError::Embedder { .. }
            | StorageError::InUse { .. }
            | StorageError::Injected(_) => Self { retry_after: Some(1), ..retry },
        }
    }
}

impl From<AnswerError> for ApiError {
    fn from(error: AnswerError) -> Self {
        match error {
            AnswerError::Retrieval(inner) => inner.into(),
            // Only raised once the handler waiting for it was dropped (the client went away), so
            // no client ever receives it.
            AnswerError::Cancelled => Self::new(StatusCode::SERVICE_UNAVAILABLE, error.code(), "request cancelled"),
        }
    }
}

impl From<SnapshotError> for ApiError {
    fn from(error: SnapshotError) -> Self {
        tracing::error!(code = error.code(), %error, "snapshot failure");
        match error {
            SnapshotError::Io { .. }
            | SnapshotError::Missing { .. }
            | SnapshotError::Size { .. }
            | SnapshotError::Checksum { .. }
            | SnapshotError::Format { .. }
            | SnapshotError::Invalid { .. }
            | SnapshotError::Embedder { .. }
            | SnapshotError::Index(_) => Self::internal(error.code()),
        }
    }
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        // A verified token's missing claim names the settings key and the claim path, which
        // helps whoever configures the mapping and reveals nothing of other tokens.
        let message = match &refusal {
            Refusal::Invalid | Refusal::UnknownKey | Refusal::Expired | Refusal::KeysUnavailable => refusal.to_string(),
            Refusal::MissingClaim(missing) => missing.to_string(),
        };
        Self::unauthorized(refusal.code(), message)
    }
}

impl From<ReviewError> for ApiError {
    fn from(error: ReviewError) -> Self {
        let message = error.to_string();
        match error {
            ReviewError::NotFound => Self::not_found(error.code(), message),
            ReviewError::UnknownVerdict(_)
            | ReviewError::ClaimOutOfRange { .. }
            | ReviewError::DuplicateClaim(_)
            | ReviewError::NoAbstention
            | ReviewError::EmptyVerdict
            | ReviewError::NoteTooLong(_)
            | ReviewError::InvalidDocId(_)
            | ReviewError::InvalidCursor => Self::bad_request(error.code(), message),
            ReviewError::NotReadable => Self::new(StatusCode::FORBIDDEN, error.code(), message),
            ReviewError::TooManyVerdicts(_) => Self::new(StatusCode::CONFLICT, error.code(), message),
            ReviewError::Storage(_) | ReviewError::Corrupted(_) => {
                // The cause names the file or the statement: the log's, never the client's.
                tracing::error!(code = error.code(), %error, "review store failure");
                Self::unavailable(error.code(), "the review store is unavailable; retry later")
            }
            ReviewError::Retrieval(inner) => inner.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapped(operation: DatabaseOperation, cause: DatabaseCause) -> ApiError {
        ApiError::from(RetrievalError::Database { operation, cause })
    }

    /// Issue 59: a failed read answered 503 "the change could not be made durable and was not
    /// applied", a write's message, though it changed nothing.
    #[test]
    fn a_failed_read_says_it_was_a_read_and_a_failed_write_says_it_was_not_applied() {
        for cause in [DatabaseCause::Timeout, DatabaseCause::Connection, DatabaseCause::Other] {
            let read = mapped(DatabaseOperation::Read, cause);
            assert_eq!((read.status, read.retry_after), (StatusCode::SERVICE_UNAVAILABLE, Some(1)));
            assert!(read.message.contains("read") && !read.message.contains("not applied"), "{}", read.message);
            let write = mapped(DatabaseOperation::Write, cause);
            assert_eq!((write.status, write.retry_after), (StatusCode::SERVICE_UNAVAILABLE, Some(1)));
            assert!(write.message.starts_with("the change was not applied"), "{}", write.message);
        }
        assert_eq!(mapped(DatabaseOperation::Read, DatabaseCause::Timeout).code, "storage_timeout");
        assert_eq!(mapped(DatabaseOperation::Write, DatabaseCause::Connection).code, "storage_unavailable");
        let busy = mapped(DatabaseOperation::Read, DatabaseCause::Busy);
        assert_eq!((busy.code, busy.retry_after), ("overloaded", Some(1)));
    }
}
