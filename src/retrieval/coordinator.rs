//! The coordinator actor: fans one query out to every shard, lexical and vector concurrently,
//! with the same scope, then merges (dropping any hit of another tenant), fuses (RRF: Cormack et
//! al. 2009) and reranks. It owns the shard addresses, the fusion constant and the reranker.
//!
//! Lexical search across several shards is two-phase, so that BM25 scores of different shards
//! are comparable and do not depend on the shard count: every shard first reports the query's
//! statistics inside the scope, the coordinator sums them, and every shard then scores with the
//! sum (the statistics of the scope over the whole corpus). Vector searches start at once and run
//! concurrently with both phases.

use std::sync::Arc;

use actix::{Actor, Addr, Context, Handler, Message, ResponseFuture};
use async_trait::async_trait;
use futures::future::join_all;
use roaring::RoaringBitmap;

use crate::acl::AuthorizationScope;
use crate::index::IndexError;
use crate::index::lexical::LexicalStatistics;
use crate::index::shard::{LexicalStatisticsRequest, SearchLexical, SearchVector, ShardActor, ShardHit};

use super::fusion::{Retriever, ScoredChunk, reciprocal_rank_fusion};
use super::{
    RerankQuery, Reranker, RetrievalQuery, RetrievalRepository, RetrievalResult, Retrieved, ShardVectorReport,
};

/// Per-retriever hits gathered from all shards, plus vector reports.
#[derive(Debug, Default)]
pub struct ShardResults {
    /// Lexical hits of all shards.
    pub lexical: Vec<ShardHit>,
    /// Vector hits of all shards.
    pub vector: Vec<ShardHit>,
    /// One report per shard that ran a vector search.
    pub vector_reports: Vec<ShardVectorReport>,
}

/// Fan a query out to every shard.
#[derive(Message)]
#[rtype(result = "Result<ShardResults, IndexError>")]
pub struct FanOut {
    /// Query text.
    pub text: Arc<str>,
    /// Query vector, if vector search runs.
    pub vector: Option<Arc<[f32]>>,
    /// Allowed ordinals (the request's scope, shared, never copied per shard).
    pub allowed: Arc<RoaringBitmap>,
    /// Lexical hits per shard.
    pub lexical_k: usize,
    /// Vector hits per shard.
    pub vector_k: usize,
}

/// Retrieve fused, reranked candidates for one query inside one scope.
#[derive(Message)]
#[rtype(result = "RetrievalResult<Retrieved>")]
pub struct Retrieve {
    /// The request's scope (its bitmap is shared with every shard, never copied per shard).
    pub scope: AuthorizationScope,
    /// The validated query.
    pub query: RetrievalQuery,
}

/// The coordinator actor: owns the shard addresses, the fusion constant and the reranker;
/// fans a query out under one scope, merges the shards' hits (dropping any of another tenant),
/// fuses them with reciprocal rank fusion and reranks. Budgeted selection is a plain function
/// of its output ([`super::select_context`]), shared with backends that have no coordinator.
pub struct Coordinator {
    shards: Vec<Addr<ShardActor>>,
    rrf_k: f64,
    reranker: Arc<dyn Reranker>,
}

impl Coordinator {
    /// A coordinator over the given shard actors.
    pub fn new(shards: Vec<Addr<ShardActor>>, rrf_k: f64, reranker: Arc<dyn Reranker>) -> Self {
        Self { shards, rrf_k, reranker }
    }
}

impl Actor for Coordinator {
    type Context = Context<Self>;
}

impl Handler<FanOut> for Coordinator {
    type Result = ResponseFuture<Result<ShardResults, IndexError>>;

    fn handle(&mut self, message: FanOut, _: &mut Context<Self>) -> Self::Result {
        Box::pin(fan_out(self.shards.clone(), message))
    }
}

impl Handler<Retrieve> for Coordinator {
    type Result = ResponseFuture<RetrievalResult<Retrieved>>;

    fn handle(&mut self, message: Retrieve, _: &mut Context<Self>) -> Self::Result {
        Box::pin(retrieve(self.shards.clone(), self.rrf_k, Arc::clone(&self.reranker), message))
    }
}

/// The coordinator's work for one [`Retrieve`]: fan out, merge under the tenant check, fuse,
/// rerank.
pub async fn retrieve(
    shards: Vec<Addr<ShardActor>>,
    rrf_k: f64,
    reranker: Arc<dyn Reranker>,
    message: Retrieve,
) -> RetrievalResult<Retrieved> {
    let Retrieve { scope, query } = message;
    if scope.is_empty() {
        return Ok(Retrieved::default());
    }
    let RetrievalQuery { text, vector, lexical_candidates, vector_candidates } = query;
    let vector: Option<Arc<[f32]>> = vector.map(Arc::from);
    let has_vector = vector.is_some();
    let fan_out_message = FanOut {
        text: Arc::from(text.as_str()),
        vector: vector.clone(),
        allowed: scope.shared_bitmap(),
        lexical_k: lexical_candidates,
        vector_k: vector_candidates,
    };
    let results = fan_out(shards, fan_out_message).await?;
    // Defence in depth: a hit whose chunk belongs to another tenant than the scope's can only
    // come from a corrupted ordinal mapping; it is dropped and counted, never served.
    let tenant = scope.tenant();
    let to_scored = |hits: Vec<ShardHit>| {
        hits.into_iter()
            .filter(|hit| {
                let same = hit.chunk.tenant == tenant;
                if !same {
                    metrics::counter!("warrant_scope_violations_total").increment(1);
                    tracing::error!("a hit of another tenant reached the coordinator; dropped");
                }
                same
            })
            .map(|hit| ScoredChunk { chunk: hit.chunk, score: hit.score })
            .collect()
    };
    let mut lists = Vec::with_capacity(2);
    if lexical_candidates > 0 {
        lists.push((Retriever::Lexical, to_scored(results.lexical)));
    }
    if has_vector {
        lists.push((Retriever::Vector, to_scored(results.vector)));
    }
    let fused = reciprocal_rank_fusion(lists, rrf_k);
    debug_assert!(fused.iter().all(|candidate| scope.allows(candidate.chunk.doc_ordinal)));
    let candidates = reranker.rerank(&RerankQuery { text: &text, vector: vector.as_deref() }, fused);
    Ok(Retrieved { candidates, vector_reports: results.vector_reports })
}

/// Sends the vector searches of every shard at once and, concurrently, the two lexical phases
/// (statistics of every shard, then searches scored with their sum; one phase with one shard),
/// and gathers them.
pub async fn fan_out(shards: Vec<Addr<ShardActor>>, message: FanOut) -> Result<ShardResults, IndexError> {
    // A lexical budget of 0 (vector-only retrieval, e.g. in evaluations) skips BM25 entirely.
    let lexical_shards = if message.lexical_k == 0 { &[][..] } else { &shards[..] };
    let lexical = async {
        let statistics = match lexical_shards {
            [] | [_] => None,
            _ => Some(Arc::new(global_statistics(lexical_shards, &message.text, &message.allowed).await?)),
        };
        let replies = join_all(lexical_shards.iter().map(|shard| {
            shard.send(SearchLexical {
                query: Arc::clone(&message.text),
                k: message.lexical_k,
                allowed: Arc::clone(&message.allowed),
                statistics: statistics.clone(),
            })
        }))
        .await;
        Ok::<_, IndexError>(replies)
    };
    let vector = async {
        match &message.vector {
            Some(query) => {
                join_all(shards.iter().map(|shard| {
                    shard.send(SearchVector {
                        query: Arc::clone(query),
                        k: message.vector_k,
                        allowed: Arc::clone(&message.allowed),
                    })
                }))
                .await
            }
            None => Vec::new(),
        }
    };
    let (lexical, vector) = futures::join!(lexical, vector);
    let mut results = ShardResults::default();
    for reply in lexical? {
        results.lexical.extend(reply.map_err(|_| IndexError::Unavailable)??);
    }
    for (shard, reply) in vector.into_iter().enumerate() {
        let crate::index::shard::VectorShardResult { hits, report } = reply.map_err(|_| IndexError::Unavailable)?;
        metrics::counter!("warrant_filter_strategy_total", "index" => "vector", "strategy" => report.strategy.as_str())
            .increment(1);
        results.vector.extend(hits);
        results.vector_reports.push(ShardVectorReport { shard, report });
    }
    metrics::counter!("warrant_filter_strategy_total", "index" => "lexical", "strategy" => "bitset")
        .increment(lexical_shards.len() as u64);
    Ok(results)
}

/// The BM25 statistics of `query` inside `allowed`, summed over `shards` (asked concurrently).
async fn global_statistics(
    shards: &[Addr<ShardActor>],
    query: &Arc<str>,
    allowed: &Arc<RoaringBitmap>,
) -> Result<LexicalStatistics, IndexError> {
    let replies =
        join_all(shards.iter().map(|shard| {
            shard.send(LexicalStatisticsRequest { query: Arc::clone(query), allowed: Arc::clone(allowed) })
        }))
        .await;
    let mut statistics = LexicalStatistics::default();
    for reply in replies {
        statistics.merge(&reply.map_err(|_| IndexError::Unavailable)??);
    }
    Ok(statistics)
}

/// The embedded [`RetrievalRepository`]: hands each request to the coordinator actor over the
/// in-memory shard actors.
pub struct EmbeddedRepository {
    coordinator: Addr<Coordinator>,
    /// The indexes' vector dimension: a query vector is checked against it on the way in.
    dimension: usize,
}

impl EmbeddedRepository {
    /// A repository over a running coordinator whose indexes hold vectors of `dimension`.
    pub fn new(coordinator: Addr<Coordinator>, dimension: usize) -> Self {
        Self { coordinator, dimension }
    }
}

#[async_trait]
impl RetrievalRepository for EmbeddedRepository {
    async fn retrieve(&self, scope: &AuthorizationScope, query: &RetrievalQuery) -> RetrievalResult<Retrieved> {
        query.check_vector(self.dimension)?;
        let message = Retrieve { scope: scope.clone(), query: query.clone() };
        self.coordinator.send(message).await.map_err(|_| IndexError::Unavailable)?
    }
}
