//! The backend's read path: the scope (the principal itself: the database evaluates it inside
//! each statement), and [`PostgresSearch`], its [`CandidateSearch`]: the two scoped searches
//! ([`sql::LEXICAL_SEARCH`], [`sql::VECTOR_SEARCH`]) run concurrently. Query embedding, fusion,
//! reranking and budgeting are the shared [`ReadPath`]'s, as for the embedded engine.

use std::sync::Arc;

use async_trait::async_trait;
use deadpool_postgres::Pool;
use pgvector::Vector;
use tokio_postgres::types::ToSql;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::acl::AuthorizationScope;
use crate::domain::{Chunk, ChunkId, Principal};
use crate::retrieval::fusion::ScoredChunk;
use crate::retrieval::{CandidateSearch, RankedLists, ReadPath, RetrievalQuery, RetrievalResult, Retrieved};

use super::*;

impl PostgresBackend {
    /// The scope of `principal`: the principal itself, evaluated by the database per query.
    pub fn scope(&self, principal: &Principal) -> AuthorizationScope {
        AuthorizationScope::for_principal(principal, 0)
    }

    /// Hybrid retrieval of `text` for `principal` through the read path (no budget).
    pub async fn retrieve(&self, principal: &Principal, text: &str) -> RetrievalResult<Retrieved> {
        self.read_path.retrieve(&self.scope(principal), text, None).await
    }

    /// The read path over this database's searches.
    pub fn read_path(&self) -> &Arc<ReadPath> {
        &self.read_path
    }
}

/// The database's two scoped searches; each runs on a connection of its own, cancelled if the
/// request is abandoned ([`cancel::Reader`]).
pub(super) struct PostgresSearch {
    pub(super) pool: Pool,
    pub(super) tls: MakeRustlsConnect,
    pub(super) dimension: usize,
}

impl PostgresSearch {
    async fn run(
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
                layout: None,
            };
            hits.push(ScoredChunk { chunk: Arc::new(chunk), score: row.get(9) });
        }
        // relaxed_order may return rows slightly out of order: sort (stable, best first).
        hits.sort_by(|a, b| b.score.total_cmp(&a.score));
        Ok(hits)
    }
}

#[async_trait]
impl CandidateSearch for PostgresSearch {
    fn dimension(&self) -> usize {
        self.dimension
    }

    async fn search(&self, scope: &AuthorizationScope, query: &RetrievalQuery) -> RetrievalResult<RankedLists> {
        let lexical = async {
            if query.lexical_candidates == 0 {
                return Ok(None);
            }
            self.run(sql::LEXICAL_SEARCH, scope, &query.text, query.lexical_candidates).await.map(Some)
        };
        let vector = async {
            match &query.vector {
                Some(vector) => {
                    let vector = Vector::from(vector.clone());
                    self.run(sql::VECTOR_SEARCH, scope, &vector, query.vector_candidates).await.map(Some)
                }
                None => Ok(None),
            }
        };
        let (lexical, vector) = futures::try_join!(lexical, vector)?;
        Ok(RankedLists { lexical, vector, vector_reports: Vec::new() })
    }
}
