//! The embedded engine's [`CandidateSearch`]: one query fanned out to every shard actor, lexical
//! and vector concurrently, with the same scope bitmap, never copied per shard.
//!
//! Lexical search across several shards is two-phase, so that BM25 scores of different shards
//! are comparable and do not depend on the shard count: every shard first reports the query's
//! statistics inside the scope, they are summed, and every shard then scores with the sum (the
//! statistics of the scope over the whole corpus). Vector searches start at once and run
//! concurrently with both phases.

use std::sync::Arc;

use actix::Addr;
use async_trait::async_trait;
use futures::future::join_all;
use roaring::RoaringBitmap;

use crate::acl::AuthorizationScope;
use crate::index::IndexError;
use crate::index::lexical::LexicalStatistics;
use crate::index::shard::{LexicalStatisticsRequest, SearchLexical, SearchVector, ShardActor, ShardHit};

use crate::retrieval::{CandidateSearch, RankedLists, RetrievalQuery, RetrievalResult, ScoredChunk, ShardVectorReport};

/// The in-memory shards' searches, through their actors.
pub struct ShardSearch {
    shards: Vec<Addr<ShardActor>>,
    dimension: usize,
}

impl ShardSearch {
    /// Searches over `shards`, whose vectors have `dimension` values.
    pub fn new(shards: Vec<Addr<ShardActor>>, dimension: usize) -> Self {
        Self { shards, dimension }
    }
}

#[async_trait]
impl CandidateSearch for ShardSearch {
    fn dimension(&self) -> usize {
        self.dimension
    }

    async fn search(&self, scope: &AuthorizationScope, query: &RetrievalQuery) -> RetrievalResult<RankedLists> {
        let text: Arc<str> = Arc::from(query.text.as_str());
        let vector: Option<Arc<[f32]>> = query.vector.as_deref().map(Arc::from);
        let allowed = scope.shared_bitmap();
        // A lexical budget of 0 (vector-only retrieval, e.g. in evaluations) skips BM25 entirely.
        let lexical_shards = if query.lexical_candidates == 0 { &[][..] } else { &self.shards[..] };
        let lexical = async {
            let statistics = match lexical_shards {
                [] | [_] => None,
                _ => Some(Arc::new(global_statistics(lexical_shards, &text, &allowed).await?)),
            };
            let replies = join_all(lexical_shards.iter().map(|shard| {
                shard.send(SearchLexical {
                    query: Arc::clone(&text),
                    k: query.lexical_candidates,
                    allowed: Arc::clone(&allowed),
                    statistics: statistics.clone(),
                })
            }))
            .await;
            Ok::<_, IndexError>(replies)
        };
        let vector_search = async {
            match &vector {
                Some(vector) => {
                    join_all(self.shards.iter().map(|shard| {
                        shard.send(SearchVector {
                            query: Arc::clone(vector),
                            k: query.vector_candidates,
                            allowed: Arc::clone(&allowed),
                        })
                    }))
                    .await
                }
                None => Vec::new(),
            }
        };
        let (lexical_replies, vector_replies) = futures::join!(lexical, vector_search);
        let mut lists = RankedLists::default();
        if query.lexical_candidates > 0 {
            let mut hits = Vec::new();
            for reply in lexical_replies? {
                hits.extend(reply.map_err(|_| IndexError::Unavailable)??.into_iter().map(scored));
            }
            lists.lexical = Some(hits);
        }
        metrics::counter!("warrant_filter_strategy_total", "index" => "lexical", "strategy" => "bitset")
            .increment(lexical_shards.len() as u64);
        if vector.is_some() {
            let mut hits = Vec::new();
            for (shard, reply) in vector_replies.into_iter().enumerate() {
                let crate::index::shard::VectorShardResult { hits: shard_hits, report } =
                    reply.map_err(|_| IndexError::Unavailable)?;
                metrics::counter!("warrant_filter_strategy_total", "index" => "vector", "strategy" => report.strategy.as_str())
                    .increment(1);
                hits.extend(shard_hits.into_iter().map(scored));
                lists.vector_reports.push(ShardVectorReport { shard, report });
            }
            lists.vector = Some(hits);
        }
        Ok(lists)
    }
}

fn scored(hit: ShardHit) -> ScoredChunk {
    ScoredChunk { chunk: hit.chunk, score: hit.score }
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
