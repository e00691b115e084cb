//! Retrieval: one read path for both backends. A backend supplies per-retriever ranked lists
//! inside a scope through [`CandidateSearch`] (the embedded shard actors of `crate::embedded`,
//! or PostgreSQL's two statements); the [`ReadPath`] embeds the question (per-principal cache)
//! and hands it to a [`Coordinator`] actor, which merges under the tenant check, fuses
//! (reciprocal rank fusion), reranks and budgets the final context. Also the sides every backend
//! implements ([`ReadSide`], [`WriteSide`]) and the validation of a document batch on its way
//! in ([`validate_batch`]), which both backends' write paths share.
//!
//! Backend-neutral: nothing here knows about shards, tantivy, the HNSW graphs or SQL.

pub mod backend;
pub(crate) mod batch;
mod coordinator;
pub mod fusion;
mod read;
mod rerank;
pub mod search;
pub mod select;

pub use backend::{Authorization, DocumentView, ReadSide, ReadableVersions, UpsertOutcome, WriteSide};
pub(crate) use batch::{BatchSentenceTexts, embedding_text, to_document, validate_batch};
pub use batch::{DocumentInput, MAX_DOC_ID_CHARS, MAX_TEXT_CHARS};
pub use coordinator::{ContextBudget, Coordinator, Retrieve};
pub use fusion::{Candidate, Placement, Retriever, ScoredChunk};
pub use read::{CandidateCounts, QueryEmbedder, ReadPath};
pub use rerank::{IdentityReranker, RerankQuery, Reranker, SENTENCE_LIST_WEIGHT, SentenceReranker, reranker};
pub use search::{CandidateSearch, RankedLists};
pub use select::{Selection, SelectionLimits, select_context};

use crate::acl::AclError;
use crate::embed::EmbedError;
use crate::index::IndexError;
use crate::index::vector::VectorReport;

/// Errors of the retrieval layer.
#[derive(Debug, thiserror::Error)]
pub enum RetrievalError {
    /// An index failed.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// The embedder failed.
    #[error(transparent)]
    Embed(#[from] EmbedError),
    /// An ACL change was refused.
    #[error(transparent)]
    Acl(#[from] AclError),
    /// The system of record failed; nothing was acknowledged.
    #[error(transparent)]
    Storage(#[from] crate::storage::StorageError),
    /// A document in a write batch is invalid.
    #[error("document {doc_id}: {reason}")]
    InvalidDocument {
        /// The offending document (as given).
        doc_id: String,
        /// What is wrong.
        reason: String,
    },
    /// A query vector that cannot be searched with: another dimension than the index's, a value
    /// that is not finite, or a norm that is neither 1 nor 0 (the embedder broke its contract).
    #[error("query vector refused: {0}")]
    QueryVector(String),
    /// The database of the postgres backend did not serve a statement (its cause, with the
    /// SQLSTATE and the server, is logged where it happened; never the tenant's or the query's
    /// text). A write that failed so was rolled back: nothing of it was applied.
    #[error("database {operation} failed: {cause}")]
    Database {
        /// Whether a read or a write failed.
        operation: DatabaseOperation,
        /// Why.
        cause: DatabaseCause,
    },
}

/// What a failed database request was doing: what the client is told was not done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatabaseOperation {
    /// A read (retrieval, an epoch, a document): nothing was changed.
    Read,
    /// A write transaction: rolled back, nothing of it applied.
    Write,
}

/// Why a database request failed, as counted in `warrant_storage_errors_total{cause}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatabaseCause {
    /// A deadline ran out: `statement_timeout`, `idle_in_transaction_session_timeout`, the
    /// pool's wait for a connection or the creation of one.
    Timeout,
    /// The server could not be reached or dropped the connection (refused, reset, closed, in
    /// recovery, shutting down, a worker unreachable).
    Connection,
    /// The tenant already holds its share of the pool's connections (refused without waiting
    /// longer than the pool wait).
    Busy,
    /// Anything else (a statement refused, a value that does not decode).
    Other,
}

impl DatabaseOperation {
    /// `read` or `write`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

impl std::fmt::Display for DatabaseOperation {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl DatabaseCause {
    /// The metric label: `timeout`, `connection`, `busy`, `other`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Connection => "connection",
            Self::Busy => "busy",
            Self::Other => "other",
        }
    }
}

impl std::fmt::Display for DatabaseCause {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl RetrievalError {
    /// Transport-neutral code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Index(error) => error.code(),
            Self::Embed(error) => error.code(),
            Self::Acl(error) => error.code(),
            Self::Storage(error) => error.code(),
            Self::InvalidDocument { .. } => "invalid_document",
            Self::QueryVector(_) => "invalid_query_vector",
            Self::Database { cause: DatabaseCause::Timeout, .. } => "storage_timeout",
            Self::Database { cause: DatabaseCause::Busy, .. } => "overloaded",
            Self::Database { cause: DatabaseCause::Connection | DatabaseCause::Other, .. } => "storage_unavailable",
        }
    }
}

/// Result alias of this layer.
pub type RetrievalResult<T> = Result<T, RetrievalError>;

/// A validated retrieval query.
#[derive(Clone, Debug)]
pub struct RetrievalQuery {
    /// Query text for BM25.
    pub text: String,
    /// Query vector (unit length) for vector search; `None` runs lexical only.
    pub vector: Option<Vec<f32>>,
    /// Lexical candidates per shard; 0 skips BM25 (vector-only retrieval).
    pub lexical_candidates: usize,
    /// Vector candidates per shard.
    pub vector_candidates: usize,
}

impl RetrievalQuery {
    /// Checks the query vector where it enters retrieval: `dimension` values, all finite, of unit
    /// L2 norm (within 1e-3) or all zero (text without features). A vector that fails would make
    /// every distance meaningless, or worse, compare rows past their end.
    pub fn check_vector(&self, dimension: usize) -> RetrievalResult<()> {
        let Some(vector) = &self.vector else { return Ok(()) };
        if vector.len() != dimension {
            return Err(RetrievalError::QueryVector(format!(
                "{} values where the index has {dimension}",
                vector.len()
            )));
        }
        if vector.iter().any(|value| !value.is_finite()) {
            return Err(RetrievalError::QueryVector("a value is not finite".into()));
        }
        let norm = vector.iter().map(|value| f64::from(*value) * f64::from(*value)).sum::<f64>().sqrt();
        if norm != 0.0 && (norm - 1.0).abs() > 1e-3 {
            return Err(RetrievalError::QueryVector(format!("norm {norm:.4} is neither 1 nor 0")));
        }
        Ok(())
    }
}

/// What one shard's vector search did.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct ShardVectorReport {
    /// Shard number.
    pub shard: usize,
    /// Strategy, allowed count, distance computations.
    #[serde(flatten)]
    pub report: VectorReport,
}

/// Fused candidates with provenance, and the final context when a budget was asked.
#[derive(Clone, Debug, Default)]
pub struct Retrieved {
    /// Fused, deduplicated, reranked candidates, best first.
    pub candidates: Vec<Candidate>,
    /// Per-shard vector search reports (the embedded backend's).
    pub vector_reports: Vec<ShardVectorReport>,
    /// The budgeted context ([`select_context`] over the candidates that are evidence); `None`
    /// when no budget was asked or no candidate is evidence.
    pub context: Option<Selection>,
    /// Time the coordinator spent budgeting the context (zero without a budget).
    pub selection_elapsed: std::time::Duration,
}
