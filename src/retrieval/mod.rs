//! Retrieval: the [`RetrievalRepository`] seam (scope + validated query in, fused candidates with
//! provenance out), its embedded implementation on shard actors (the coordinator), reciprocal
//! rank fusion, reranking and budgeted context selection, and the [`Engine`] facade that also
//! owns the write path (chunk, embed, index, publish ACL).
//!
//! Nothing above this module knows about shards, tantivy or the HNSW graphs.

pub mod backend;
mod batch;
mod coordinator;
mod engine;
pub mod fusion;
mod read;
mod rerank;
pub mod select;
mod write;
#[cfg(test)]
mod write_tests;

use async_trait::async_trait;

pub use backend::{Authorization, DocumentView, ReadSide, ReadableVersions, WriteSide};
pub(crate) use batch::{BatchSentenceTexts, embedding_text, to_document, validate_batch};
pub use batch::{DocumentInput, MAX_DOC_ID_CHARS, MAX_TEXT_CHARS};
pub use coordinator::{Coordinator, EmbeddedRepository, FanOut, Retrieve};
pub use engine::{ChangeSink, Committed, Engine, EngineParams, Recovery, reranker, shard_of};
pub use fusion::{Candidate, Placement, Retriever, ScoredChunk};
pub use rerank::{IdentityReranker, RerankQuery, Reranker, SENTENCE_LIST_WEIGHT, SentenceReranker};
pub use select::{Selection, SelectionLimits, select_context};
pub use write::{FaultHook, UpsertOutcome};

use crate::acl::{AclError, AuthorizationScope};
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

/// Fused candidates with provenance.
#[derive(Clone, Debug, Default)]
pub struct Retrieved {
    /// Fused, deduplicated, reranked candidates, best first.
    pub candidates: Vec<Candidate>,
    /// Per-shard vector search reports.
    pub vector_reports: Vec<ShardVectorReport>,
}

/// The seam between the answer pipeline and a retrieval backend. Implementations must apply
/// `scope` inside every search they run and must never return a chunk outside it.
#[async_trait]
pub trait RetrievalRepository: Send + Sync {
    /// Retrieves fused candidates for `query` inside `scope`.
    async fn retrieve(&self, scope: &AuthorizationScope, query: &RetrievalQuery) -> RetrievalResult<Retrieved>;
}
