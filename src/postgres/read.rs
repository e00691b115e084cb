//! The backend's read path: the scope (the principal itself: the database evaluates it inside
//! each statement), the query embedding, the two scoped searches ([`sql::LEXICAL_SEARCH`],
//! [`sql::VECTOR_SEARCH`]) run concurrently, then fusion and reranking.

use std::sync::Arc;

use async_trait::async_trait;
use pgvector::Vector;
use tokio_postgres::types::ToSql;

use crate::acl::AuthorizationScope;
use crate::domain::{Chunk, ChunkId, Principal};
use crate::retrieval::fusion::{Retriever, ScoredChunk, reciprocal_rank_fusion};
use crate::retrieval::{RerankQuery, RetrievalQuery, RetrievalRepository, RetrievalResult, Retrieved};

use super::*;

impl PostgresBackend {
    /// The scope of `principal`: the principal itself, evaluated by the database per query.
    pub fn scope(&self, principal: &Principal) -> AuthorizationScope {
        AuthorizationScope::for_principal(principal, 0)
    }

    /// Hybrid retrieval of `text` for `principal` (embeds the query, then [`Self::search`]).
    pub async fn retrieve(&self, principal: &Principal, text: &str) -> RetrievalResult<Retrieved> {
        let query = self.query(text).await?;
        RetrievalRepository::retrieve(self, &self.scope(principal), &query).await
    }

    /// The retrieval query of `text`: its embedding and the configured candidate counts.
    pub(super) async fn query(&self, text: &str) -> RetrievalResult<RetrievalQuery> {
        let mut vectors = self.embedder.embed(&[text.to_owned()]).await?;
        let vector = vectors.pop().ok_or(crate::embed::EmbedError::Shape { expected: 1, got: 0 })?;
        Ok(RetrievalQuery {
            text: text.to_owned(),
            vector: Some(vector),
            lexical_candidates: self.params.lexical_candidates,
            vector_candidates: self.params.vector_candidates,
        })
    }

    async fn search(
        &self,
        statement: &str,
        scope: &AuthorizationScope,
        argument: &(dyn ToSql + Sync),
        limit: usize,
    ) -> RetrievalResult<Vec<ScoredChunk>> {
        let mut reader = cancel::Reader::checkout(&self.pool, &self.tls).await?;
        let groups: Vec<&str> = scope.groups().iter().map(String::as_str).collect();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let tenant = scope.tenant();
        let user = scope.user();
        let rows = reader.query(statement, &[&tenant, &user, &groups, argument, &limit]).await?;
        // The lexical statement says whether its top k came from the selective terms alone.
        if let Some(pruned) = rows.first().filter(|row| row.len() > 11).map(|row| row.get::<_, bool>(11)) {
            let scoring = if pruned { "pruned" } else { "full" };
            metrics::counter!("warrant_postgres_lexical_searches_total", "scoring" => scoring).increment(1);
        }
        let mut hits = Vec::with_capacity(rows.len());
        for row in rows {
            let chunk_id: &[u8] = row.get(0);
            let id = ChunkId::from_bytes(chunk_id.try_into().map_err(|_| database("chunk id is not 16 bytes"))?);
            let chunk = Chunk {
                id,
                tenant: tenant.to_owned(),
                doc_id: row.get(1),
                doc_version: row.get::<_, i64>(2) as u64,
                ordinal: row.get::<_, i32>(3) as u32,
                doc_ordinal: row.get::<_, i64>(4) as u32,
                start: row.get::<_, i32>(5) as usize,
                end: row.get::<_, i32>(6) as usize,
                title: row.get(7),
                text: row.get(8),
                sentence_vectors: decode_sentence_vectors(row.get(10))?,
            };
            hits.push(ScoredChunk { chunk: Arc::new(chunk), score: row.get(9) });
        }
        // relaxed_order may return rows slightly out of order: sort (stable, best first).
        hits.sort_by(|a, b| b.score.total_cmp(&a.score));
        Ok(hits)
    }
}

#[async_trait]
impl RetrievalRepository for PostgresBackend {
    async fn retrieve(&self, scope: &AuthorizationScope, query: &RetrievalQuery) -> RetrievalResult<Retrieved> {
        query.check_vector(self.embedder.dimension())?;
        let lexical = async {
            if query.lexical_candidates == 0 {
                return Ok(None);
            }
            self.search(sql::LEXICAL_SEARCH, scope, &query.text, query.lexical_candidates).await.map(Some)
        };
        let vector = async {
            match &query.vector {
                Some(vector) => {
                    let vector = Vector::from(vector.clone());
                    self.search(sql::VECTOR_SEARCH, scope, &vector, query.vector_candidates).await.map(Some)
                }
                None => Ok(None),
            }
        };
        let (lexical, vector) = futures::try_join!(lexical, vector)?;
        let mut lists = Vec::with_capacity(2);
        if let Some(hits) = lexical {
            lists.push((Retriever::Lexical, hits));
        }
        if let Some(hits) = vector {
            lists.push((Retriever::Vector, hits));
        }
        let fused = reciprocal_rank_fusion(lists, self.params.rrf_k);
        debug_assert!(fused.iter().all(|candidate| candidate.chunk.tenant == scope.tenant()));
        let rerank_query = RerankQuery { text: &query.text, vector: query.vector.as_deref() };
        let candidates = self.reranker.rerank(&rerank_query, fused);
        Ok(Retrieved { candidates, vector_reports: Vec::new() })
    }
}
