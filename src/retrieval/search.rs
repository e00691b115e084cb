//! What a backend supplies to the shared read path: per-retriever ranked candidates inside a
//! scope ([`CandidateSearch`]). The embedded shard actors (`crate::embedded::ShardSearch`) and
//! the PostgreSQL backend's statements implement it; the coordinator consumes it.
//!
//! Invariant every implementation keeps: [`CandidateSearch::search`] applies the scope inside
//! every search it runs and never returns a chunk outside it (the coordinator also drops, and
//! counts, any hit of another tenant).

use async_trait::async_trait;

use crate::acl::AuthorizationScope;

use super::fusion::ScoredChunk;
use super::{RetrievalQuery, RetrievalResult, ShardVectorReport};

/// Per-retriever ranked candidates of one query inside one scope, before fusion.
#[derive(Debug, Default)]
pub struct RankedLists {
    /// Lexical hits (every shard's, for the embedded backend), when BM25 ran.
    pub lexical: Option<Vec<ScoredChunk>>,
    /// Vector hits, when vector search ran.
    pub vector: Option<Vec<ScoredChunk>>,
    /// One report per shard that ran a vector search (the embedded backend's).
    pub vector_reports: Vec<ShardVectorReport>,
}

/// What a backend supplies to the coordinator: the ranked candidates of each retriever inside a
/// scope. BM25 statistics are the backend's business (summed over shards, or kept per tenant in
/// the database); merging, fusion, reranking and budgeting are not.
#[async_trait]
pub trait CandidateSearch: Send + Sync {
    /// The dimension a query vector must have.
    fn dimension(&self) -> usize;
    /// Runs BM25 (when `query.lexical_candidates` > 0) and vector search (when `query.vector` is
    /// set) inside `scope`, each returning at most its candidate count (per shard, for shards).
    async fn search(&self, scope: &AuthorizationScope, query: &RetrievalQuery) -> RetrievalResult<RankedLists>;
}
