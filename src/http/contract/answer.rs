//! Wire types of `/v1/answer` and `/v1/retrieve` responses (see the HTTP contract): mirrors of
//! [`crate::answer::pipeline::response`] and [`crate::answer::grounding::validate::AbstentionReason`] that carry the
//! OpenAPI schema, built from them with `From`.
//!
//! Invariant: each type serializes exactly as the answer-layer type it mirrors (same fields, same
//! order, same names); the conversions destructure their source without `..` and match enums
//! without `_`, so a field or variant added there does not compile until it is added here.

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::ToSchema;

use crate::answer::grounding::validate;
use crate::answer::pipeline::response as layer;

/// `answered` or `abstained`.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AnswerStatus {
    /// Claims with validated citations.
    Answered,
    /// No answer; see `abstention`.
    Abstained,
}

impl From<layer::AnswerStatus> for AnswerStatus {
    fn from(status: layer::AnswerStatus) -> Self {
        match status {
            layer::AnswerStatus::Answered => Self::Answered,
            layer::AnswerStatus::Abstained => Self::Abstained,
        }
    }
}

/// Where a chunk comes from: identity and source coordinates (shared by citations and
/// retrieved chunks; serialized flat into both).
#[derive(Debug, Serialize, ToSchema)]
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
    /// Extension (issue 49): where the span is (the chunk; for a citation, its quote), for
    /// documents extracted from a file; absent when nothing is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
}

impl From<layer::ChunkRef> for ChunkRef {
    fn from(chunk: layer::ChunkRef) -> Self {
        let layer::ChunkRef { chunk_id, doc_id, doc_version, start, end, title, location } = chunk;
        Self { chunk_id, doc_id, doc_version, start, end, title, location: location.map(Location::from) }
    }
}

/// Where a span of a document is, as a reader follows it; each field present when known.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"page": 4, "pages": [4, 5], "section": ["Travel", "Hotels"]}))]
pub struct Location {
    /// Page the span starts on (from 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub page: Option<u32>,
    /// Every page the span touches, ascending.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pages: Vec<u32>,
    /// Heading path of the section the span starts in, outermost first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub section: Vec<String>,
}

impl From<crate::domain::Location> for Location {
    fn from(location: crate::domain::Location) -> Self {
        let crate::domain::Location { page, pages, section } = location;
        Self { page, pages, section }
    }
}

/// A citation resolved server-side.
#[derive(Debug, Serialize, ToSchema)]
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

impl From<layer::CitationOut> for CitationOut {
    fn from(citation: layer::CitationOut) -> Self {
        let layer::CitationOut { label, chunk, quote, quote_start, quote_end } = citation;
        Self { label, chunk: chunk.into(), quote, quote_start, quote_end }
    }
}

/// One claim with its citations.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClaimOut {
    /// Claim text.
    pub text: String,
    /// Citations (at least one).
    pub citations: Vec<CitationOut>,
}

impl From<layer::ClaimOut> for ClaimOut {
    fn from(claim: layer::ClaimOut) -> Self {
        let layer::ClaimOut { text, citations } = claim;
        Self { text, citations: citations.into_iter().map(CitationOut::from).collect() }
    }
}

/// The answer body.
#[derive(Debug, Serialize, ToSchema)]
pub struct AnswerBody {
    /// Validated claims.
    pub claims: Vec<ClaimOut>,
    /// Extension: `true` when claims the generator wrote were withheld by validation (the
    /// claims above are not all it said); absent otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    #[schema(required = false)]
    pub partial: bool,
    /// Extension: one entry per withheld claim, in the generator's order, with its rejection
    /// code only (never its text); absent when none was withheld.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(required = false)]
    pub withheld: Vec<Withheld>,
}

impl From<layer::AnswerBody> for AnswerBody {
    fn from(body: layer::AnswerBody) -> Self {
        let layer::AnswerBody { claims, partial, withheld } = body;
        Self {
            claims: claims.into_iter().map(ClaimOut::from).collect(),
            partial,
            withheld: withheld.into_iter().map(Withheld::from).collect(),
        }
    }
}

/// A claim validation withheld: its rejection code (no text).
#[derive(Debug, Serialize, ToSchema)]
pub struct Withheld {
    /// The claim's rejection code, e.g. `unsupported_claim`.
    #[schema(example = "unsupported_claim")]
    pub reason: String,
}

impl From<layer::Withheld> for Withheld {
    fn from(withheld: layer::Withheld) -> Self {
        let layer::Withheld { reason } = withheld;
        Self { reason }
    }
}

/// Abstention reason codes of the HTTP contract.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AbstentionReason {
    /// Nothing authorized and relevant was retrieved.
    NoAuthorizedEvidence,
    /// The generator said the context does not answer the question.
    InsufficientEvidence,
    /// Output unparseable or off-schema, also after repair.
    InvalidOutput,
    /// Unknown labels, chunks outside the context, or unsupported text, also after repair.
    UnsupportedCitation,
    /// Factual claims without citations, also after repair.
    MissingCitation,
    /// A cited source was revoked or deleted between retrieval and response.
    SourceRevoked,
    /// The generator did not answer within its stage deadline.
    GeneratorTimeout,
    /// The generator failed.
    GeneratorError,
    /// Not even the smallest useful context fits the token budget.
    ContextOverflow,
    /// The request deadline ran out in another stage.
    DeadlineExceeded,
    /// Extension: claims stand, but a claim validation withheld is material to the question
    /// (it holds as many of the question's content terms as every claim that stands, and one none
    /// of them holds), also after repair; the diagnostics carry the withheld claims' codes.
    MaterialClaimUnsupported,
}

impl From<validate::AbstentionReason> for AbstentionReason {
    fn from(reason: validate::AbstentionReason) -> Self {
        use validate::AbstentionReason as Reason;
        match reason {
            Reason::NoAuthorizedEvidence => Self::NoAuthorizedEvidence,
            Reason::InsufficientEvidence => Self::InsufficientEvidence,
            Reason::InvalidOutput => Self::InvalidOutput,
            Reason::UnsupportedCitation => Self::UnsupportedCitation,
            Reason::MissingCitation => Self::MissingCitation,
            Reason::SourceRevoked => Self::SourceRevoked,
            Reason::GeneratorTimeout => Self::GeneratorTimeout,
            Reason::GeneratorError => Self::GeneratorError,
            Reason::ContextOverflow => Self::ContextOverflow,
            Reason::DeadlineExceeded => Self::DeadlineExceeded,
            Reason::MaterialClaimUnsupported => Self::MaterialClaimUnsupported,
        }
    }
}

/// Why the server abstained, with safe diagnostic codes.
#[derive(Debug, Serialize, ToSchema)]
pub struct Abstention {
    /// Reason code.
    pub reason: AbstentionReason,
    /// Diagnostic codes only (no source text, no ids).
    pub diagnostics: Vec<String>,
}

impl From<layer::Abstention> for Abstention {
    fn from(abstention: layer::Abstention) -> Self {
        let layer::Abstention { reason, diagnostics } = abstention;
        Self { reason: reason.into(), diagnostics }
    }
}

/// Request metrics.
#[derive(Debug, Serialize, ToSchema)]
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

impl From<layer::AnswerMetrics> for AnswerMetrics {
    fn from(metrics: layer::AnswerMetrics) -> Self {
        let layer::AnswerMetrics {
            stages_ms,
            retrieved,
            context,
            generator_attempts,
            citations_rejected,
            claims_anchored,
        } = metrics;
        Self { stages_ms, retrieved, context, generator_attempts, citations_rejected, claims_anchored }
    }
}

/// Response of `POST /v1/answer`.
#[derive(Debug, Serialize, ToSchema)]
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
    #[schema(required = false)]
    pub review: Option<ReviewTicket>,
}

impl From<layer::AnswerResponse> for AnswerResponse {
    fn from(response: layer::AnswerResponse) -> Self {
        let layer::AnswerResponse { request_id, status, answer, abstention, acl_epoch, metrics, review } = response;
        Self {
            request_id,
            status: status.into(),
            answer: answer.map(AnswerBody::from),
            abstention: abstention.map(Abstention::from),
            acl_epoch,
            metrics: metrics.into(),
            review: review.map(ReviewTicket::from),
        }
    }
}

/// An answer routed to human review. The item is written after the response: an id whose
/// write failed, or that was still queued when the server stopped, is never found
/// (`GET /v1/reviews/{review_id}` answers 404 `review_not_found`).
#[derive(Debug, Serialize, ToSchema)]
pub struct ReviewTicket {
    /// Handed to the review queue (always `true` when present).
    pub queued: bool,
    /// The review item's id (a UUID).
    #[schema(example = "0b7e3c1a-5d2f-4e8a-9c6b-1f2e3d4c5b6a")]
    pub review_id: String,
}

impl From<layer::ReviewTicket> for ReviewTicket {
    fn from(ticket: layer::ReviewTicket) -> Self {
        let layer::ReviewTicket { queued, review_id } = ticket;
        Self { queued, review_id }
    }
}

/// One chunk of a `/v1/retrieve` response.
#[derive(Debug, Serialize, ToSchema)]
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

impl From<layer::RetrievedChunk> for RetrievedChunk {
    fn from(retrieved: layer::RetrievedChunk) -> Self {
        let layer::RetrievedChunk { chunk, text, score, retrievers } = retrieved;
        Self { chunk: chunk.into(), text, score, retrievers }
    }
}

/// Response of `POST /v1/retrieve`.
#[derive(Debug, Serialize, ToSchema)]
pub struct RetrieveResponse {
    /// Chunks, best first.
    pub chunks: Vec<RetrievedChunk>,
    /// ACL epoch of the scope used.
    pub acl_epoch: u64,
    /// Fewer than `k` authorized chunks exist.
    pub short: bool,
    // No per-shard vector search report (strategy, allowed, distance computations): how a
    // walk goes depends on every tenant's vectors in the shard, so its counts told a caller how
    // much other tenants hold. `warrant-bench filtered` prints them.
}

impl From<layer::RetrieveResponse> for RetrieveResponse {
    fn from(response: layer::RetrieveResponse) -> Self {
        let layer::RetrieveResponse { chunks, acl_epoch, short } = response;
        Self { chunks: chunks.into_iter().map(RetrievedChunk::from).collect(), acl_epoch, short }
    }
}
