//! `GET /v1/documents/{doc_id}`: one document as the caller may read it, for showing a cited
//! span in context (the web console opens it from a citation chip).
//!
//! Invariants: the same access rule as `/v1/answer` and `/v1/retrieve`, decided on one ACL
//! snapshot loaded at the start of the request (`AclSnapshot::allows` on the live version's
//! ordinal, the check validation uses); a document the caller may not read, a deleted one and a
//! missing one are the same 404 (a hidden document is simply absent); a replica that cannot
//! confirm its ACL state is fresh answers 503 `replica_stale`. The document's text is not stored
//! whole: the reply carries its live version's chunks with their character offsets
//! (`doc.text[start..end]` in Unicode scalar values), which together cover the text.

use actix_web::{HttpResponse, web};
use serde::Serialize;
use utoipa::ToSchema;

use super::auth::Authenticated;
use super::error::{ApiError, ErrorBody, Unauthenticated};
use super::{AppState, json};

/// One chunk of a document.
#[derive(Debug, Serialize, ToSchema)]
pub struct DocumentChunk {
    /// Canonical chunk id (the `chunk_id` of citations).
    pub chunk_id: String,
    /// Character offset of the chunk's first character in the document text.
    pub start: usize,
    /// Character offset one past its last character.
    pub end: usize,
    /// The chunk text, exactly `doc.text[start..end]` in characters.
    pub text: String,
    /// Extension (issue 49): the chunk's pages and heading path, for documents extracted from a
    /// file; absent when nothing is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<super::contract::answer::Location>,
}

/// Body of `GET /v1/documents/{doc_id}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct DocumentOut {
    /// Document id.
    pub doc_id: String,
    /// Live version.
    pub doc_version: u64,
    /// Title.
    pub title: String,
    /// ACL epoch of the snapshot the read was authorized under.
    pub acl_epoch: u64,
    /// The live version's chunks in document order (they overlap; together they cover the text).
    pub chunks: Vec<DocumentChunk>,
}

/// A document the caller may read: its live version's chunks with their offsets.
#[utoipa::path(get, path = "/v1/documents/{doc_id}",
    params(("doc_id" = String, Path, description = "document id", example = "travel-policy")),
    responses((status = 200, description = "the caller may read the document", body = DocumentOut),
              (status = 400, description = "`invalid_path`: the id is not UTF-8 after percent-decoding", body = ErrorBody),
              Unauthenticated,
              (status = 404, description = "`not_found`: no such document in the caller's tenant, deleted, or not readable by the caller (indistinguishable)", body = ErrorBody),
              (status = 503, description = "`replica_stale`: a replica that cannot confirm its ACL state is fresh", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn document(
    state: web::Data<AppState>,
    Authenticated(principal): Authenticated,
    request: actix_web::HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let doc_id = super::doc_id_of(&request)?;
    Ok(json(&document_out(&state, &principal, &doc_id).await?))
}

/// The document `doc_id` as `principal` may read it: what `GET /v1/documents/{doc_id}` and the
/// MCP tool `read_document` ([`super::mcp`]) both call (one access rule, one 404 for hidden,
/// deleted and missing documents, the same freshness checks).
pub(crate) async fn document_out(
    state: &AppState,
    principal: &crate::domain::Principal,
    doc_id: &str,
) -> Result<DocumentOut, ApiError> {
    let generation = state.ensure_fresh(principal)?;
    let document = state
        .reader
        .document(principal, doc_id)
        .await?
        .ok_or_else(|| ApiError::not_found("not_found", "no such document"))?;
    let chunks = document
        .chunks
        .iter()
        .map(|chunk| DocumentChunk {
            chunk_id: chunk.id.to_string(),
            start: chunk.start,
            end: chunk.end,
            text: chunk.text.clone(),
            location: chunk
                .layout
                .as_ref()
                .map(|layout| layout.locate(chunk.start, chunk.end))
                .filter(|location| !location.is_empty())
                .map(Into::into),
        })
        .collect();
    let body = DocumentOut {
        doc_id: document.doc_id,
        doc_version: document.version,
        title: document.title,
        acl_epoch: document.acl_epoch,
        chunks,
    };
    state.ensure_same_state(&generation)?;
    Ok(body)
}
