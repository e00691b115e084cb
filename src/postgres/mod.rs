//! The PostgreSQL + pgvector backend: a second [`CandidateSearch`](crate::retrieval::CandidateSearch) whose state lives in one
//! database that any number of stateless warrant nodes share (PostgreSQL with read replicas, or
//! Citus distributed by `tenant_id`).
//!
//! Owns: the connection pool, the versioned migrations (`migrations/*.sql`, applied at start
//! under an advisory lock), the write path ([`write`]: validate → chunk → embed outside any
//! transaction → one transaction per batch or ACL change) and scoped retrieval. Fusion,
//! reranking, selection and everything above stay in warrant and are shared with the embedded
//! engine.
//!
//! Invariants:
//! - The scope is evaluated by the database inside each retrieval statement (tenant predicate
//!   and ACL `EXISTS` in the same `SELECT`; see [`sql`]), so a revoke committed by any node is
//!   enforced by every node's next query, and an unreachable ACL means no results (fail-closed).
//! - Every statement on tenant data runs in a transaction that first entered its tenant
//!   ([`sql::ENTER_TENANT`]; reads through [`cancel::Reader`], writes at the start of their
//!   transaction), and row-level security (migration 0007, FORCEd on the tables the backend's
//!   role owns) admits that tenant's rows alone: a statement that forgot its predicate reads
//!   nothing of another tenant, and one run outside such a transaction reads nothing at all.
//!   Only [`sql::HIGHEST_EPOCH`] and [`sql::ANY_TENANT`] are database-wide (`warrant_tenants`,
//!   SELECT). A role that bypasses row-level security (a superuser) makes this moot: the backend
//!   warns at start ([`PostgresBackend::row_security_enforced`]).
//! - A batch or an ACL change is one transaction that first locks the tenant row: a tenant's
//!   writes are serialized across nodes, and a change is acknowledged only after its commit.
//! - Only the live version of a document has chunks (the previous version's are deleted in the
//!   transaction that supersedes it), so a reader sees the old version or the new one.
//! - A tenant's BM25 totals (`warrant_tenants.lexical_*`: chunk count, analyzed tokens) change
//!   only in the write transaction that inserts or deletes its chunks, by what those statements
//!   returned, so at every commit they equal a recount of the tenant's chunks.
//! - All SQL is in [`sql`] (a file per statement family, each re-exported there: `sql::NAME`),
//!   as constants with bind parameters; besides it, by design, only the tenant cache's loads
//!   (`cache/sql.rs`) and the readiness probes of [`health`] keep their own.

pub mod cache;
mod cancel;
mod connect;
mod fault;
pub mod health;
mod limit;
mod migrate;
mod read;
mod reviews;
mod sides;
pub mod sql;
mod write;

use std::str::FromStr;
use std::sync::Arc;

use deadpool_postgres::Pool;
use tokio_postgres::types::ToSql;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::domain::{ChunkingConfig, SentenceVectors};
use crate::embed::Embedder;
use crate::retrieval::{CandidateCounts, DatabaseOperation, QueryEmbedder, ReadPath, RetrievalError, RetrievalResult};
use crate::storage::StorageError;

pub use cache::{CacheParams, LoadSources, TenantCache};
pub use connect::{DatabaseLimits, tls_connector};
use connect::{build_pool, server_label};
use fault::{as_read, database, pooled, read_failure};
pub use limit::{TenantLimiter, TenantPermit};
use migrate::check_dimension;
pub use migrate::{MIGRATIONS, migrate, migrate_database};

/// Connection and search parameters of the backend.
#[derive(Clone, Debug)]
pub struct PostgresParams {
    /// Connection URL (`postgres://user@host:port/db`); read from the environment variable the
    /// configuration names, never logged.
    pub url: String,
    /// Connections in the pool.
    pub pool_size: usize,
    /// Longest wait for a pooled connection, a new one's connection and set-up included.
    pub acquire_timeout: std::time::Duration,
    /// `hnsw.ef_search` of every session.
    pub ef_search: usize,
    /// `hnsw.iterative_scan`: `relaxed_order` (default), `strict_order` or `off`.
    pub iterative_scan: IterativeScan,
    /// `hnsw.max_scan_tuples`: how far an iterative scan may go before it gives up.
    pub max_scan_tuples: usize,
    /// A vector search whose scope holds at most this many chunks (estimated from the kept
    /// counts) reads them all exactly instead of walking the HNSW index (0: always walk).
    pub exact_scan_chunks: usize,
    /// Chunking (shared with the embedded engine).
    pub chunking: ChunkingConfig,
    /// RRF constant.
    pub rrf_k: f64,
    /// Lexical candidates per query.
    pub lexical_candidates: usize,
    /// Vector candidates per query.
    pub vector_candidates: usize,
    /// PEM file of the certificate authorities trusted for the server's certificate; `None`:
    /// the Mozilla roots (`webpki-roots`). See [`tls_connector`].
    pub ca_file: Option<std::path::PathBuf>,
    /// Embed each chunk's sentences at ingestion and store them with it
    /// (`verifier.sentence_vectors`; only with a semantic embedder, as the embedded engine).
    pub sentence_vectors: bool,
    /// The reranker of fused candidates (`retrieval.reranker`).
    pub reranker: crate::config::RerankerKind,
    /// Query vectors cached per principal (`embedder.query_cache`).
    pub query_cache: usize,
    /// Most users and groups on one document's access list (`server.max_acl_names_per_document`).
    pub max_acl_names_per_document: usize,
}

/// pgvector 0.8's iterative index scan mode: a configuration type, defined with the settings.
pub use crate::config::IterativeScan;

/// A tenant's BM25 totals: the chunk count and average length of its lexical scoring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LexicalTotals {
    /// Chunks of the tenant's live document versions.
    pub chunks: u64,
    /// Their analyzed tokens (english configuration, stopwords removed), summed.
    pub tokens: u64,
}

impl LexicalTotals {
    fn from_counts(chunks: i64, tokens: i64) -> Self {
        debug_assert!(chunks >= 0 && tokens >= 0, "negative totals: {chunks} chunks, {tokens} tokens");
        Self { chunks: chunks.max(0) as u64, tokens: tokens.max(0) as u64 }
    }
}

/// Decodes a `bytea` column of bincode (NULL: none); bytes that do not decode whole are a
/// database error, never another chunk's value.
fn decode_column<T: serde::de::DeserializeOwned>(what: &str, bytes: Option<&[u8]>) -> RetrievalResult<Option<Arc<T>>> {
    let Some(bytes) = bytes else {
        return Ok(None);
    };
    match bincode::serde::decode_from_slice::<T, _>(bytes, bincode::config::standard()) {
        Ok((value, read)) if read == bytes.len() => Ok(Some(Arc::new(value))),
        Ok(_) => Err(database(format!("stored {what} have trailing bytes"))),
        Err(error) => Err(database(format!("stored {what} do not decode: {error}"))),
    }
}

/// Decodes `chunks.sentence_vectors` (NULL: none were made).
fn decode_sentence_vectors(bytes: Option<&[u8]>) -> RetrievalResult<Option<Arc<SentenceVectors>>> {
    decode_column("sentence vectors", bytes)
}

/// Decodes `chunks.layout` (migration 0009; NULL: the document was not extracted from a file).
fn decode_layout(bytes: Option<&[u8]>) -> RetrievalResult<Option<Arc<crate::domain::Layout>>> {
    decode_column("layout maps", bytes)
}

/// The postgres backend: pool, embedder and parameters. Cheap to share (`Arc`).
pub struct PostgresBackend {
    pool: Pool,
    /// The connector of the pool's connections, for cancel requests ([`cancel::Reader`]).
    tls: MakeRustlsConnect,
    embedder: Arc<dyn Embedder>,
    params: PostgresParams,
    /// The shared read path over [`read::PostgresSearch`] (its own handles of the pool).
    read_path: Arc<ReadPath>,
    lineage: String,
    /// Whether the connection's role is bound by row-level security (not a superuser, not
    /// BYPASSRLS).
    row_security: bool,
    /// The tenants' shares of the pool ([`limit`]), shared with the read path.
    limiter: Arc<TenantLimiter>,
    /// `host:port` of the server, on the `postgres` span of every request ([`Self::span`]).
    server: Arc<str>,
    /// The limits the pool was built with.
    limits: DatabaseLimits,
    /// The tenants this node holds in memory ([`cache`]; off: every read is SQL).
    cache: Arc<TenantCache>,
}

impl std::fmt::Debug for PostgresBackend {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("PostgresBackend").field("lineage", &self.lineage).finish_non_exhaustive()
    }
}

impl PostgresBackend {
    /// [`Self::connect_limited`] with the default [`DatabaseLimits`].
    pub async fn connect(params: PostgresParams, embedder: Arc<dyn Embedder>) -> RetrievalResult<Arc<Self>> {
        Self::connect_limited(params, DatabaseLimits::default(), embedder).await
    }

    /// [`Self::connect_cached`] with the tenant cache off: every read is SQL.
    pub async fn connect_limited(
        params: PostgresParams,
        limits: DatabaseLimits,
        embedder: Arc<dyn Embedder>,
    ) -> RetrievalResult<Arc<Self>> {
        Self::connect_cached(params, limits, CacheParams::off(), embedder).await
    }

    /// Connects with `limits` on every connection, applies pending migrations and checks that
    /// the database holds vectors of this embedder (name and dimension), refusing to mix vector
    /// spaces. Tenants are held in memory as `cache` says ([`cache`]).
    pub async fn connect_cached(
        params: PostgresParams,
        limits: DatabaseLimits,
        cache: CacheParams,
        embedder: Arc<dyn Embedder>,
    ) -> RetrievalResult<Arc<Self>> {
        let dimension = embedder.dimension();
        check_dimension(dimension)?;
        let tls = tls_connector(params.ca_file.as_deref())?;
        let pool = build_pool(&params, &limits, tls.clone())?;
        let server: Arc<str> = server_label(&params.url).into();
        let limiter =
            Arc::new(TenantLimiter::new(limits.tenant_share(params.pool_size.max(1)), params.acquire_timeout));
        let mut client = pool.get().await.map_err(database)?;
        migrate(&mut client, dimension).await?;
        let identity = format!("{}/{}", embedder.name(), dimension);
        client.execute(sql::META_SET, &[&"embedder", &identity]).await.map_err(database)?;
        client.execute(sql::META_SET, &[&"lineage", &uuid::Uuid::new_v4().to_string()]).await.map_err(database)?;
        let stored: String = client.query_one(sql::META_GET, &[&"embedder"]).await.map_err(database)?.get(0);
        if stored != identity {
            return Err(RetrievalError::Storage(StorageError::Embedder {
                file: "postgres".into(),
                stored,
                configured: identity,
            }));
        }
        let lineage: String = client.query_one(sql::META_GET, &[&"lineage"]).await.map_err(database)?.get(0);
        let bypasses: bool = client.query_one(sql::ROLE_BYPASSES_ROW_SECURITY, &[]).await.map_err(database)?.get(0);
        if bypasses {
            tracing::warn!(
                "the database role of the storage.postgres.url_env URL is a superuser or has BYPASSRLS: \
                 row-level security binds none of its statements; connect as a role without either (SECURITY.md)"
            );
        }
        drop(client);
        let cache = Arc::new(TenantCache::new(
            cache,
            pool.clone(),
            Arc::clone(&limiter),
            Arc::clone(&embedder),
            lineage.clone(),
        ));
        let search = read::PostgresSearch {
            pool: pool.clone(),
            tls: tls.clone(),
            limiter: Arc::clone(&limiter),
            span: tracing::info_span!("postgres", server = %server),
            dimension: embedder.dimension(),
            exact_scan_chunks: params.exact_scan_chunks,
            read_bound: limits.read_bound(),
        };
        let read_path = Arc::new(ReadPath::start(
            Arc::new(QueryEmbedder::new(Arc::clone(&embedder), params.query_cache)),
            CandidateCounts { lexical: params.lexical_candidates, vector: params.vector_candidates },
            Arc::new(read::Dispatch { sql: search, cache: Arc::clone(&cache) }),
            params.rrf_k,
            crate::retrieval::reranker(params.reranker, params.rrf_k),
            ReadPath::default_coordinators(),
        ));
        Ok(Arc::new(Self {
            pool,
            tls,
            embedder,
            params,
            read_path,
            lineage,
            row_security: !bypasses,
            limiter,
            server,
            limits,
            cache,
        }))
    }

    /// The span of this backend's requests: names the server (`host:port`), so a failure's log
    /// line says where it happened.
    pub fn span(&self) -> tracing::Span {
        tracing::info_span!("postgres", server = %self.server)
    }

    /// The limits every connection carries.
    pub fn limits(&self) -> &DatabaseLimits {
        &self.limits
    }

    /// The tenants' shares of the pool.
    pub fn limiter(&self) -> &TenantLimiter {
        &self.limiter
    }

    /// The database's lineage id (recorded with every change).
    pub fn lineage(&self) -> &str {
        &self.lineage
    }

    /// Whether row-level security binds this backend's statements: false when its role is a
    /// superuser or has BYPASSRLS (then only the statements' own tenant predicates separate the
    /// tenants; the backend warned at start).
    pub fn row_security_enforced(&self) -> bool {
        self.row_security
    }

    /// Runs a read-only `statement` exactly as this backend runs every read for `tenant`: on a
    /// pooled connection, in a transaction that entered the tenant, so row-level security admits
    /// that tenant's rows alone whatever the statement's predicates. For checks and operational
    /// tools (the tests run statements without a tenant predicate through it); `statement` must
    /// be a constant, with every value a bind parameter.
    pub async fn read_as_tenant(
        &self,
        tenant: &str,
        statement: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> RetrievalResult<Vec<tokio_postgres::Row>> {
        self.tenant_reader(tenant).await?.query(statement, params).await
    }

    /// The embedder.
    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }

    /// The parameters it was connected with.
    pub fn params(&self) -> &PostgresParams {
        &self.params
    }

    /// The tenant's current ACL epoch (0 when it has no writes yet).
    pub async fn epoch(&self, tenant: &str) -> RetrievalResult<u64> {
        let rows = self.tenant_reader(tenant).await?.query(sql::TENANT_EPOCH, &[&tenant]).await?;
        Ok(rows.first().map(|row| row.get::<_, i64>(0) as u64).unwrap_or(0))
    }

    /// The tenant's BM25 totals as kept by the writes (zero for a tenant without writes).
    pub async fn lexical_totals(&self, tenant: &str) -> RetrievalResult<LexicalTotals> {
        let rows = self.tenant_reader(tenant).await?.query(sql::LEXICAL_TOTALS, &[&tenant]).await?;
        Ok(rows.first().map_or(LexicalTotals::default(), |row| LexicalTotals::from_counts(row.get(0), row.get(1))))
    }

    /// The tenant's BM25 totals recounted from its chunks (a full scan of the tenant's chunks:
    /// for checks, not for queries). Equal to [`Self::lexical_totals`] after every commit.
    pub async fn recount_lexical_totals(&self, tenant: &str) -> RetrievalResult<LexicalTotals> {
        let row = self.tenant_reader(tenant).await?.query_one(sql::LEXICAL_TOTALS_RECOUNTED, &[&tenant]).await?;
        Ok(LexicalTotals::from_counts(row.get(0), row.get(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Settings, StorageBackend};

    #[test]
    fn the_backend_is_embedded_unless_configured_and_postgres_needs_its_url_variable() {
        let defaults = Settings::defaults();
        assert_eq!(defaults.storage.backend, StorageBackend::Embedded);
        let environment = [
            ("WARRANT__STORAGE__BACKEND".to_owned(), "postgres".to_owned()),
            ("WARRANT__STORAGE__POSTGRES__URL_ENV".to_owned(), "WARRANT_TEST_VARIABLE_NEVER_SET".to_owned()),
            ("WARRANT__STORAGE__POSTGRES__ITERATIVE_SCAN".to_owned(), "strict_order".to_owned()),
        ];
        let settings = Settings::from_toml(include_str!("../../config/default.toml"), environment).expect("valid");
        assert_eq!(settings.storage.backend, StorageBackend::Postgres);
        assert_eq!(settings.storage.postgres.iterative_scan, IterativeScan::StrictOrder);
        let error = PostgresParams::from_settings(&settings).expect_err("the variable is not set");
        assert!(error.to_string().contains("WARRANT_TEST_VARIABLE_NEVER_SET"), "{error}");
    }
}
