//! The backend's read path: the scope (the principal itself: the database evaluates it inside
//! each statement), and [`PostgresSearch`], its [`CandidateSearch`]: the two scoped searches
//! ([`sql::LEXICAL_SEARCH`], [`sql::VECTOR_SEARCH`]) run concurrently, each in a transaction that
//! entered the principal's tenant ([`cancel::Reader`]). Query embedding, fusion, reranking and
//! budgeting are the shared [`ReadPath`]'s, as for the embedded engine.
//!
//! No crowding out in sparse scopes: pgvector's iterative HNSW scan gives up after
//! `hnsw.max_scan_tuples` tuples, so under a scope that holds a small part of its tenant it may
//! return fewer than k chunks although the scope holds k, and the k it does return are the
//! walk's approximation at its worst. So a scope of at most `storage.postgres.exact_scan_chunks`
//! chunks (estimated from the kept counts) is read exactly, whatever the planner estimates, and
//! a walk that still comes back short is answered by the exact path
//! ([`sql::VECTOR_SEARCH_EXACT`]: every scoped chunk's distance). Counted in
//! `warrant_postgres_vector_searches_total{path}`: `exact`, `walk`, `exact_after_walk`.

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

    /// Hybrid retrieval of `text` for `principal` through the read path (no budget), as a
    /// request runs it: the tenant's epoch read, then the cached tenant's shards when it is
    /// cached and caught up, else SQL ([`crate::retrieval::ReadSide::scope`]).
    pub async fn retrieve(&self, principal: &Principal, text: &str) -> RetrievalResult<Retrieved> {
        let scope = crate::retrieval::ReadSide::scope(self, principal).await?;
        self.read_path.retrieve(&scope, text, None).await
    }

    /// Hybrid retrieval of `text` for `principal` by the SQL statements alone, whatever the
    /// cache holds: the reference the cached path is tested against.
    pub async fn retrieve_sql(&self, principal: &Principal, text: &str) -> RetrievalResult<Retrieved> {
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
    /// The tenants' shares of the pool (the backend's).
    pub(super) limiter: Arc<limit::TenantLimiter>,
    /// The postgres span of each search (names the server).
    pub(super) span: tracing::Span,
    pub(super) dimension: usize,
    /// `storage.postgres.exact_scan_chunks`.
    pub(super) exact_scan_chunks: usize,
    /// How long a statement's answer is waited for ([`super::DatabaseLimits::read_bound`]).
    pub(super) read_bound: Option<std::time::Duration>,
}

impl PostgresSearch {
    /// A reader whose statements see the scope's tenant alone, within the tenant's permits the
    /// search took for all its readers at once ([`CandidateSearch::search`]).
    async fn reader(&self, scope: &AuthorizationScope) -> RetrievalResult<cancel::Reader> {
        let entered = cancel::Entered::Tenant(scope.tenant().to_owned());
        cancel::Reader::checkout(&self.pool, &self.tls, None, entered, self.read_bound).await
    }

    /// The scope's `limit` nearest chunks to `vector`: read exactly when the scope is small, else
    /// the HNSW walk, and the exact path when the walk came back short (see the module's
    /// documentation).
    async fn nearest(
        &self,
        scope: &AuthorizationScope,
        vector: &Vector,
        limit: usize,
    ) -> RetrievalResult<Vec<ScoredChunk>> {
        let mut reader = self.reader(scope).await?;
        let small = self.exact_scan_chunks as f64;
        let (hits, walked) = self.run(&mut reader, sql::VECTOR_SEARCH, scope, &[vector, &small], limit).await?;
        // An exact read that found fewer than `limit` found the whole scope; so did an empty
        // answer, unless it was a walk (the column is absent without rows: read again).
        let path = match walked {
            Some(false) => "exact",
            Some(true) if hits.len() >= limit => "walk",
            _ => "exact_after_walk",
        };
        metrics::counter!("warrant_postgres_vector_searches_total", "path" => path).increment(1);
        if path != "exact_after_walk" || limit == 0 {
            return Ok(hits);
        }
        Ok(self.run(&mut reader, sql::VECTOR_SEARCH_EXACT, scope, &[vector], limit).await?.0)
    }

    /// Runs a search statement: $1 tenant, $2 user, $3 groups, then `arguments` ($4, …), then the
    /// limit. Returns the hits, best first, and the first row's column 12 when there is one (the
    /// lexical statement's `pruned`, the vector statement's `walked`).
    async fn run(
        &self,
        reader: &mut cancel::Reader,
        statement: &str,
        scope: &AuthorizationScope,
        arguments: &[&(dyn ToSql + Sync)],
        limit: usize,
    ) -> RetrievalResult<(Vec<ScoredChunk>, Option<bool>)> {
        let groups: Vec<&str> = scope.groups().iter().map(String::as_str).collect();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let tenant = scope.tenant();
        let user = scope.user();
        let mut parameters: Vec<&(dyn ToSql + Sync)> = vec![&tenant, &user, &groups];
        parameters.extend_from_slice(&arguments[..1]);
        parameters.push(&limit);
        parameters.extend_from_slice(&arguments[1..]);
        let rows = reader.query(statement, &parameters).await?;
        let flag = rows.first().filter(|row| row.len() > 12).map(|row| row.get::<_, bool>(12));
        let mut hits = Vec::with_capacity(rows.len());
        for row in rows {
            let chunk_id: &[u8] = row.get(0);
            let id = ChunkId::from_bytes(chunk_id.try_into().map_err(|_| read_failure("chunk id is not 16 bytes"))?);
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
                sentence_vectors: decode_sentence_vectors(row.get(10)).map_err(as_read)?,
                layout: decode_layout(row.get(11)).map_err(as_read)?,
            };
            hits.push(ScoredChunk { chunk: Arc::new(chunk), score: row.get(9) });
        }
        // relaxed_order may return rows slightly out of order: sort (stable, best first).
        hits.sort_by(|a, b| b.score.total_cmp(&a.score));
        Ok((hits, flag))
    }
}

/// The backend's [`CandidateSearch`]: a bitmap scope (built by a cached tenant's engine,
/// [`cache`]) is searched by that tenant's in-memory shards, or, when the tenant left the cache
/// since the scope was built, by the SQL statements kept inside the scope (never a failed read;
/// counted as the fallback `evicted_in_flight`); a scope the database evaluates (the principal
/// itself) by the SQL statements.
pub(super) struct Dispatch {
    pub(super) sql: PostgresSearch,
    pub(super) cache: Arc<cache::TenantCache>,
}

#[async_trait]
impl CandidateSearch for Dispatch {
    fn dimension(&self) -> usize {
        self.sql.dimension
    }

    async fn search(&self, scope: &AuthorizationScope, query: &RetrievalQuery) -> RetrievalResult<RankedLists> {
        if scope.evaluated_in_backend() {
            return self.sql.search(scope, query).await;
        }
        // Ordinals are the database's: any engine holding the tenant holds the scope's chunks.
        // One that left the cache since the scope was built (evicted, reloading): SQL.
        let Some(search) = self.cache.search_of(scope.tenant()) else {
            cache::count_fallback("evicted_in_flight");
            return self.sql_inside(scope, query).await;
        };
        search.search(scope, query).await
    }
}

impl Dispatch {
    /// The SQL search for a bitmap scope whose tenant left the cache after the scope was built:
    /// the database evaluates the principal the scope carries (tenant, user, groups:
    /// [`AuthorizationScope::in_backend`]) at its current state, and only the hits the scope
    /// admits are kept. So the read sees no more than its scope: a revoke committed since is
    /// enforced by the statements, a version made live since is left out, as the cached engine
    /// would have left it out.
    async fn sql_inside(&self, scope: &AuthorizationScope, query: &RetrievalQuery) -> RetrievalResult<RankedLists> {
        let RankedLists { lexical, vector, vector_reports } = self.sql.search(&scope.in_backend(), query).await?;
        let admitted = |hits: Option<Vec<ScoredChunk>>| {
            hits.map(|hits| hits.into_iter().filter(|hit| scope.admits(&hit.chunk)).collect())
        };
        Ok(RankedLists { lexical: admitted(lexical), vector: admitted(vector), vector_reports })
    }
}

#[async_trait]
impl CandidateSearch for PostgresSearch {
    fn dimension(&self) -> usize {
        self.dimension
    }

    async fn search(&self, scope: &AuthorizationScope, query: &RetrievalQuery) -> RetrievalResult<RankedLists> {
        // The tenant's permits for both searches at once, held until both end.
        let readers = usize::from(query.lexical_candidates > 0) + usize::from(query.vector.is_some());
        let _permits = self.limiter.admit_many(scope.tenant(), readers, DatabaseOperation::Read).await?;
        let lexical = async {
            if query.lexical_candidates == 0 {
                return Ok(None);
            }
            let mut reader = self.reader(scope).await?;
            let (hits, pruned) =
                self.run(&mut reader, sql::LEXICAL_SEARCH, scope, &[&query.text], query.lexical_candidates).await?;
            // Whether the top k came from the selective terms alone.
            if let Some(pruned) = pruned {
                let scoring = if pruned { "pruned" } else { "full" };
                metrics::counter!("warrant_postgres_lexical_searches_total", "scoring" => scoring).increment(1);
            }
            Ok(Some(hits))
        };
        let vector = async {
            match &query.vector {
                Some(vector) => {
                    let vector = Vector::from(vector.clone());
                    self.nearest(scope, &vector, query.vector_candidates).await.map(Some)
                }
                None => Ok(None),
            }
        };
        let (lexical, vector) =
            tracing::Instrument::instrument(async { futures::try_join!(lexical, vector) }, self.span.clone()).await?;
        Ok(RankedLists { lexical, vector, vector_reports: Vec::new() })
    }
}
