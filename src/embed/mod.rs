//! Embedding providers behind one [`Embedder`] trait: the deterministic [`HashedEmbedder`]
//! (feature hashing; test and fallback embedder) and [`MiniLmEmbedder`] (a sentence-transformers
//! BERT model on the CPU, installed by [`model::fetch`]).
//!
//! Invariants: every vector an embedder returns has exactly `dimension()` finite components and
//! unit L2 norm (or is all zeros for text without features), so cosine similarity is a dot
//! product everywhere downstream.

mod bert;
mod hashed;
mod minilm;
pub mod model;
mod openai;

pub use hashed::HashedEmbedder;
pub use minilm::{DEFAULT_MAX_TOKENS, MiniLmEmbedder};
pub use openai::OpenAiCompatibleEmbedder;

use async_trait::async_trait;

/// Errors of embedding providers.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The provider did not answer in time.
    #[error("embedding provider timed out")]
    Timeout,
    /// The provider failed (connection, status, malformed reply).
    #[error("embedding provider failed: {0}")]
    Provider(String),
    /// The provider returned vectors of the wrong dimension or count.
    #[error("embedding provider returned {got} values where {expected} were expected")]
    Shape {
        /// Expected count or dimension.
        expected: usize,
        /// Received count or dimension.
        got: usize,
    },
    /// Model files are missing or invalid.
    #[error("embedding model unavailable: {0}")]
    Model(String),
}

impl EmbedError {
    /// Transport-neutral code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Timeout => "embedder_timeout",
            Self::Provider(_) => "embedder_error",
            Self::Shape { .. } => "embedder_shape",
            Self::Model(_) => "embedder_model",
        }
    }
}

/// Result alias of this layer.
pub type EmbedResult<T> = Result<T, EmbedError>;

/// Turns texts into unit vectors.
#[async_trait]
pub trait Embedder: Send + Sync {
    /// Stable name recorded in indexes and snapshots (e.g. `hashed-384`, `minilm:all-MiniLM-L6-v2`).
    fn name(&self) -> &str;
    /// Vector dimension.
    fn dimension(&self) -> usize;
    /// Whether vectors capture meaning (a trained model), not only shared words (feature
    /// hashing): only then does the support verifier compare claims and sentences with them,
    /// and only then are sentence vectors made at ingestion.
    fn semantic(&self) -> bool {
        true
    }
    /// Embeds a batch of texts (documents or queries), one vector per text, in order.
    async fn embed(&self, texts: &[String]) -> EmbedResult<Vec<Vec<f32>>>;
}

/// L2-normalizes `vector` in place (leaves an all-zero vector unchanged).
pub fn normalize(vector: &mut [f32]) {
    let norm = vector.iter().map(|value| value * value).sum::<f32>().sqrt();
    if norm > 0.0 {
        for value in vector.iter_mut() {
            *value /= norm;
        }
    }
}

/// Dot product (cosine similarity of unit vectors): the index's scalar reference dot, so an
/// embedder's similarity and the index's exact scan agree.
pub use crate::index::distance::dot_scalar as dot;
