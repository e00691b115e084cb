//! What `/v1/answer` and `/v1/retrieve` return (see the HTTP contract). These types serialize as
//! the wire JSON; the HTTP layer sends mirrors of them that carry the OpenAPI schema
//! (`crate::http::contract::answer`), and its tests hold the two to the same JSON.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::domain::{Chunk, Location};

use crate::answer::grounding::validate::AbstentionReason;

/// `answered` or `abstained`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerStatus {
    /// Claims with validated citations.
    Answered,
    /// No answer; see `abstention`.
    Abstained,
}

/// Where a chunk comes from: identity and source coordinates (shared by citations and
/// retrieved chunks; serialized flat into both).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChunkRef {
    /// Canonical chunk id.
    pub chunk_id: String,
    /// Document id.
    pub doc_id: String,
    /// Document version.
    pub doc_version: u64,
    /// Character offset of the chunk in the document text.
    pub start: usize,
    /// Character offset one past the chunk's end (`doc.text[start..end]` is the chunk).
    pub end: usize,
    /// Document title.
    pub title: String,
    /// Extension (issue 49): the pages and heading path of the span (the chunk; for a citation,
    /// its quote), for documents extracted from a file; absent when nothing is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
}

impl ChunkRef {
    /// The chunk's provenance with the location of its characters `[start, end)` (document
    /// offsets inside the chunk).
    pub fn located(chunk: &Chunk, start: usize, end: usize) -> Self {
        let location = chunk.layout.as_ref().map(|layout| layout.locate(start, end)).filter(|found| !found.is_empty());
        Self {
            chunk_id: chunk.id.to_string(),
            doc_id: chunk.doc_id.clone(),
            doc_version: chunk.doc_version,
            start: chunk.start,
            end: chunk.end,
            title: chunk.title.clone(),
            location,
        }
    }
}

impl From<&Chunk> for ChunkRef {
    fn from(chunk: &Chunk) -> Self {
        Self::located(chunk, chunk.start, chunk.end)
    }
}

/// A citation resolved server-side.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CitationOut {
    /// Label the generator used (`S1`…).
    pub label: String,
    /// The cited chunk's provenance.
    #[serde(flatten)]
    pub chunk: ChunkRef,
    /// Supporting span: a substring of the chunk (the generator's quote, located in the chunk,
    /// when it gave one).
    pub quote: String,
    /// Extension: character offset of `quote` in the document text (`doc.text[quote_start..quote_end]`
    /// in Unicode scalar values is `quote`; `start <= quote_start <= quote_end <= end`).
    pub quote_start: usize,
    /// Extension: character offset one past the end of `quote` in the document text.
    pub quote_end: usize,
}

/// One claim with its citations.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClaimOut {
    /// Claim text.
    pub text: String,
    /// Citations (at least one).
    pub citations: Vec<CitationOut>,
}

/// The answer body.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AnswerBody {
    /// Validated claims.
    pub claims: Vec<ClaimOut>,
    /// Extension: whether claims the generator wrote were withheld (dropped by validation under
    /// `claim_policy = "drop_claim"`), so the claims above are not all it said. Sent only when
    /// true.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    /// Extension: one entry per withheld claim, in the generator's order: its rejection code,
    /// never its text. Sent only when not empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub withheld: Vec<Withheld>,
}

/// A claim the generator wrote that validation withheld: why, as a code (no text).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Withheld {
    /// The rejection code of the claim (e.g. `unsupported_claim`).
    pub reason: String,
}

/// Why the server abstained, with safe diagnostic codes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Abstention {
    /// Reason code.
    pub reason: AbstentionReason,
    /// Diagnostic codes only (no source text, no ids).
    pub diagnostics: Vec<String>,
}

/// Request metrics.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AnswerMetrics {
    /// Milliseconds per stage.
    pub stages_ms: BTreeMap<String, f64>,
    /// Fused candidates retrieved.
    pub retrieved: usize,
    /// Chunks in the final context.
    pub context: usize,
    /// Generator calls made.
    pub generator_attempts: u32,
    /// Rejections by code.
    pub citations_rejected: BTreeMap<String, u32>,
    /// Claims whose citation the server chose: quoted claims whose own quotes did not state
    /// their answer, anchored in the sentence of the final context that does
    /// (`generator.anchor_answers`).
    pub claims_anchored: u32,
}

/// Response of `POST /v1/answer`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AnswerResponse {
    /// Request id (also in logs).
    pub request_id: String,
    /// Answered or abstained.
    pub status: AnswerStatus,
    /// The answer, when answered.
    pub answer: Option<AnswerBody>,
    /// The abstention, when abstained.
    pub abstention: Option<Abstention>,
    /// ACL epoch the response was validated against.
    pub acl_epoch: u64,
    /// Stage timings and counts.
    pub metrics: AnswerMetrics,
    /// Extension: present when the answer was routed to human review (`[review]`) and queued.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub review: Option<ReviewTicket>,
}

/// An answer routed to human review: `queued` (always `true`) and the item's id. The item is
/// written after the response; an id whose write failed, or that was still queued when the
/// server stopped, is never found (`GET /v1/reviews/{review_id}` answers 404).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReviewTicket {
    /// Handed to the review queue.
    pub queued: bool,
    /// The review item's id.
    pub review_id: String,
}

/// One chunk of a `/v1/retrieve` response.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RetrievedChunk {
    /// The chunk's provenance.
    #[serde(flatten)]
    pub chunk: ChunkRef,
    /// Chunk text.
    pub text: String,
    /// Fused (RRF) score.
    pub score: f64,
    /// `lexical` and/or `vector`.
    pub retrievers: Vec<String>,
}

/// Response of `POST /v1/retrieve`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RetrieveResponse {
    /// Chunks, best first.
    pub chunks: Vec<RetrievedChunk>,
    /// ACL epoch of the scope used.
    pub acl_epoch: u64,
    /// Fewer than `k` authorized chunks exist.
    pub short: bool,
}
