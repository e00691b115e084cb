//! The PostgreSQL + pgvector backend: a second [`CandidateSearch`](crate::retrieval::CandidateSearch) whose state lives in one
//! database that any number of stateless warrant nodes share (PostgreSQL with read replicas, or
//! Citus distributed by `tenant_id`).
//!
//! Owns: the connection pool, the versioned migrations (`migrations/*.sql`, applied at start
//! under an advisory lock), the write path (validate → chunk → embed outside any transaction →
//! one transaction per batch or ACL change) and scoped retrieval. Fusion, reranking, selection
//! and everything above stay in warrant and are shared with the embedded engine.
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
//! - All SQL is in [`sql`], as constants with bind parameters.

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

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;

use deadpool_postgres::Pool;
use pgvector::Vector;
use tokio_postgres::types::ToSql;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::acl::{AclError, AclMutation};
use crate::domain::{Chunk, ChunkingConfig, SentenceVectors, chunk_document};
use crate::embed::Embedder;
use crate::retrieval::{
    BatchSentenceTexts, CandidateCounts, DatabaseOperation, DocumentInput, QueryEmbedder, ReadPath, RetrievalError,
    RetrievalResult, UpsertOutcome, embedding_text, to_document, validate_batch,
};
use crate::storage::StorageError;

pub use cache::{CacheParams, TenantCache};
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

/// What one write transaction changes in its tenant's kept counts: the [`LexicalTotals`]
/// (summed from the `search_tokens` the chunk inserts and deletes return), the live documents,
/// the documents each reader is granted and the chunks holding each lexeme (schema version 6),
/// applied once by [`TotalsChange::apply`] before the commit.
#[derive(Debug, Default)]
struct TotalsChange {
    chunks: i64,
    tokens: i64,
    live_documents: i64,
    /// (kind, name) -> documents granted.
    readers: BTreeMap<(String, String), i64>,
    /// lexeme -> chunks holding it.
    lexemes: BTreeMap<String, i64>,
}

impl TotalsChange {
    fn add(&mut self, rows: &[tokio_postgres::Row]) {
        self.chunks += rows.len() as i64;
        self.tokens += rows.iter().map(|row| i64::from(row.get::<_, i32>(0))).sum::<i64>();
    }

    fn remove(&mut self, rows: &[tokio_postgres::Row]) {
        self.chunks -= rows.len() as i64;
        self.tokens -= rows.iter().map(|row| i64::from(row.get::<_, i32>(0))).sum::<i64>();
    }

    /// Readers (kind, name) a statement added (`sign` 1) or removed (-1); returns how many.
    fn readers(&mut self, rows: &[tokio_postgres::Row], sign: i64) -> u64 {
        for row in rows {
            *self.readers.entry((row.get(0), row.get(1))).or_default() += sign;
        }
        rows.len() as u64
    }

    /// Chunks per lexeme (lexeme, count) a postings statement added (`sign` 1) or removed (-1).
    fn lexemes(&mut self, rows: &[tokio_postgres::Row], sign: i64) {
        for row in rows {
            *self.lexemes.entry(row.get(0)).or_default() += sign * row.get::<_, i64>(1);
        }
    }

    /// Advances the tenant's epoch and applies every kept count's change, at the end of a write
    /// transaction (under the tenant lock).
    async fn apply(
        self,
        transaction: &deadpool_postgres::Transaction<'_>,
        tenant: &str,
        epoch: i64,
    ) -> RetrievalResult<()> {
        transaction
            .execute(sql::TENANT_SET_EPOCH, &[&tenant, &epoch, &self.chunks, &self.tokens, &self.live_documents])
            .await
            .map_err(database)?;
        let (mut kinds, mut names, mut documents) = (Vec::new(), Vec::new(), Vec::new());
        for ((kind, name), change) in self.readers.into_iter().filter(|(_, change)| *change != 0) {
            kinds.push(kind);
            names.push(name);
            documents.push(change);
        }
        if !kinds.is_empty() {
            transaction
                .execute(sql::READER_COUNTS_ADD, &[&tenant, &kinds, &names, &documents])
                .await
                .map_err(database)?;
        }
        let (lexemes, chunks): (Vec<String>, Vec<i64>) =
            self.lexemes.into_iter().filter(|(_, change)| *change != 0).unzip();
        if !lexemes.is_empty() {
            transaction.execute(sql::LEXEME_COUNTS_ADD, &[&tenant, &lexemes, &chunks]).await.map_err(database)?;
        }
        Ok(())
    }
}

/// A chunk's sentence vectors as stored in `chunks.sentence_vectors`: bincode 2 (standard
/// configuration), the embedded store's encoding.
fn encode_sentence_vectors(vectors: &SentenceVectors) -> Vec<u8> {
    encode_column(vectors)
}

/// bincode of a value kept in a `bytea` column (`chunks.sentence_vectors`, `chunks.layout`).
fn encode_column<T: serde::Serialize>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, bincode::config::standard()).expect("plain data always encodes")
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

    /// The embeddings of `texts`, in order, in batches of 64.
    async fn embed_all(&self, texts: &[String]) -> RetrievalResult<Vec<Vec<f32>>> {
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(64) {
            let embedded = self.embedder.embed(batch).await?;
            if embedded.len() != batch.len() {
                return Err(crate::embed::EmbedError::Shape { expected: batch.len(), got: embedded.len() }.into());
            }
            vectors.extend(embedded);
        }
        Ok(vectors)
    }

    /// The encoded sentence vectors of every provisional chunk, in order (each distinct sentence
    /// of the batch embedded once), or nothing when this backend does not make them.
    async fn encoded_sentence_vectors(&self, provisional: &[Vec<Chunk>]) -> RetrievalResult<Vec<Option<Vec<u8>>>> {
        if !(self.params.sentence_vectors && self.embedder.semantic()) {
            return Ok(Vec::new());
        }
        let chunks: Vec<&Chunk> = provisional.iter().flatten().collect();
        let sentences = BatchSentenceTexts::of(&chunks);
        let vectors = self.embed_all(&sentences.texts).await?;
        Ok(sentences
            .quantize(&vectors)
            .into_iter()
            .map(|made| made.map(|vectors| encode_sentence_vectors(&vectors)))
            .collect())
    }

    /// Upserts a batch of documents into `tenant`, all or nothing, in one transaction.
    pub async fn upsert(&self, tenant: &str, inputs: Vec<DocumentInput>) -> RetrievalResult<UpsertOutcome> {
        tracing::Instrument::instrument(self.upsert_in(tenant, inputs), self.span()).await
    }

    async fn upsert_in(&self, tenant: &str, inputs: Vec<DocumentInput>) -> RetrievalResult<UpsertOutcome> {
        validate_batch(&inputs)?;
        let limit = self.params.max_acl_names_per_document;
        if let Some(input) = inputs.iter().find(|input| {
            let acl = crate::acl::normalized(&input.acl);
            acl.groups.len() + acl.users.len() > limit
        }) {
            return Err(
                AclError::TooLarge { what: format!("the access list of document {}", input.doc_id), limit }.into()
            );
        }
        let provisional: Vec<Vec<Chunk>> = inputs
            .iter()
            .map(|input| chunk_document(&to_document(tenant, input, 1), 0, &self.params.chunking))
            .collect();
        let texts: Vec<String> = provisional.iter().flatten().map(embedding_text).collect();
        let vectors = self.embed_all(&texts).await?;
        let sentence_vectors = self.encoded_sentence_vectors(&provisional).await?;
        let _permit = self.limiter.admit(tenant, DatabaseOperation::Write).await?;
        let mut client = pooled(&self.pool, DatabaseOperation::Write).await?;
        let transaction = client.transaction().await.map_err(database)?;
        let epoch = lock_tenant(&transaction, tenant).await? + 1;
        let insert_chunk = transaction.prepare(sql::CHUNK_INSERT).await.map_err(database)?;
        let insert_postings = transaction.prepare(sql::POSTINGS_INSERT).await.map_err(database)?;
        let mut vectors_left = vectors.into_iter();
        let mut sentences_left = sentence_vectors.into_iter();
        let mut chunk_count = 0;
        let mut totals = TotalsChange::default();
        for (position, (input, first_cut)) in inputs.iter().zip(&provisional).enumerate() {
            let head = transaction.query_opt(sql::DOCUMENT_HEAD, &[&tenant, &input.doc_id]).await.map_err(database)?;
            let (live, last): (Option<i64>, Option<i64>) =
                head.map_or((None, None), |row| (row.get(0), Some(row.get(1))));
            let version = match (input.version, last) {
                (Some(version), Some(current)) if version <= current as u64 => {
                    return Err(AclError::StaleVersion { doc_id: input.doc_id.clone(), current: current as u64 }.into());
                }
                (Some(version), _) => version,
                (None, Some(current)) => current as u64 + 1,
                (None, None) => 1,
            };
            let version_sql = i64::try_from(version).map_err(|_| RetrievalError::InvalidDocument {
                doc_id: input.doc_id.clone(),
                reason: "version is too large".into(),
            })?;
            let ordinal: i64 = transaction.query_one(sql::NEXT_DOC_ORDINAL, &[]).await.map_err(database)?.get(0);
            let doc_ordinal = u32::try_from(ordinal).map_err(|_| AclError::Exhausted { what: "document ordinals" })?;
            let document = to_document(tenant, input, version);
            let chunks = chunk_document(&document, doc_ordinal, &self.params.chunking);
            debug_assert_eq!(chunks.len(), first_cut.len());
            transaction
                .execute(sql::DOCUMENT_UPSERT_HEAD, &[&tenant, &input.doc_id, &version_sql])
                .await
                .map_err(database)?;
            transaction
                .execute(sql::VERSION_INSERT, &[&tenant, &input.doc_id, &version_sql, &ordinal, &input.title, &epoch])
                .await
                .map_err(database)?;
            if live.is_none() {
                // Not live: no chunk, hence no posting, to replace (a delete removes them).
                totals.live_documents += 1;
            } else {
                totals.lexemes(
                    &transaction.query(sql::POSTINGS_DELETE, &[&tenant, &input.doc_id]).await.map_err(database)?,
                    -1,
                );
                totals
                    .remove(&transaction.query(sql::CHUNKS_DELETE, &[&tenant, &input.doc_id]).await.map_err(database)?);
            }
            for chunk in &chunks {
                let vector = Vector::from(vectors_left.next().unwrap_or_default());
                let sentences: Option<Vec<u8>> = sentences_left.next().flatten();
                let chunk_ordinal = chunk.ordinal as i32;
                let (start, end) = (chunk.start as i32, chunk.end as i32);
                let layout: Option<Vec<u8>> = chunk.layout.as_deref().map(encode_column);
                let parameters: [&(dyn ToSql + Sync); 13] = [
                    &tenant,
                    &chunk.doc_id,
                    &version_sql,
                    &chunk_ordinal,
                    &chunk.id.as_bytes().as_slice(),
                    &ordinal,
                    &start,
                    &end,
                    &chunk.title,
                    &chunk.text,
                    &vector,
                    &sentences,
                    &layout,
                ];
                totals.add(&transaction.query(&insert_chunk, &parameters).await.map_err(database)?);
            }
            chunk_count += chunks.len();
            totals.lexemes(
                &transaction
                    .query(&insert_postings, &[&tenant, &input.doc_id, &version_sql])
                    .await
                    .map_err(database)?,
                1,
            );
            if live.is_some() {
                totals.readers(
                    &transaction.query(sql::READERS_DELETE_ALL, &[&tenant, &input.doc_id]).await.map_err(database)?,
                    -1,
                );
            }
            add_readers(&transaction, &mut totals, tenant, &input.doc_id, &input.acl.groups, &input.acl.users).await?;
            let position = position as i32;
            transaction
                .execute(
                    sql::CHANGE_INSERT,
                    &[
                        &tenant,
                        &epoch,
                        &position,
                        &self.lineage,
                        &"upsert",
                        &input.doc_id,
                        &Some(version_sql),
                        &input.acl.groups,
                        &input.acl.users,
                    ],
                )
                .await
                .map_err(database)?;
        }
        totals.apply(&transaction, tenant, epoch).await?;
        transaction.commit().await.map_err(database)?;
        Ok(UpsertOutcome { acl_epoch: epoch as u64, documents: inputs.len(), chunks: chunk_count })
    }

    /// Applies one ACL mutation (delete, grant, revoke) in one transaction and returns after its
    /// commit. A no-op (granting what is granted, revoking what is not) returns the current epoch.
    pub async fn mutate(&self, mutation: AclMutation) -> RetrievalResult<u64> {
        tracing::Instrument::instrument(self.mutate_in(mutation), self.span()).await
    }

    async fn mutate_in(&self, mutation: AclMutation) -> RetrievalResult<u64> {
        let (tenant, doc_id) = match &mutation {
            AclMutation::Delete { tenant, doc_id }
            | AclMutation::Grant { tenant, doc_id, .. }
            | AclMutation::Revoke { tenant, doc_id, .. } => (tenant.as_str(), doc_id.as_str()),
            AclMutation::Upsert { .. } => {
                return Err(RetrievalError::InvalidDocument {
                    doc_id: String::new(),
                    reason: "upserts go through PostgresBackend::upsert".into(),
                });
            }
        };
        let _permit = self.limiter.admit(tenant, DatabaseOperation::Write).await?;
        let mut client = pooled(&self.pool, DatabaseOperation::Write).await?;
        let transaction = client.transaction().await.map_err(database)?;
        let current = lock_tenant(&transaction, tenant).await?;
        let head = transaction.query_opt(sql::DOCUMENT_HEAD, &[&tenant, &doc_id]).await.map_err(database)?;
        let live: Option<i64> = head.and_then(|row| row.get(0));
        let Some(version) = live else {
            return Err(AclError::UnknownDocument { doc_id: doc_id.to_owned() }.into());
        };
        let no_names: Vec<String> = Vec::new();
        let mut totals = TotalsChange::default();
        let (kind, groups, users, changed) = match &mutation {
            AclMutation::Delete { .. } => {
                totals.lexemes(
                    &transaction.query(sql::POSTINGS_DELETE, &[&tenant, &doc_id]).await.map_err(database)?,
                    -1,
                );
                totals.remove(&transaction.query(sql::CHUNKS_DELETE, &[&tenant, &doc_id]).await.map_err(database)?);
                totals.readers(
                    &transaction.query(sql::READERS_DELETE_ALL, &[&tenant, &doc_id]).await.map_err(database)?,
                    -1,
                );
                transaction.execute(sql::DOCUMENT_DELETE_HEAD, &[&tenant, &doc_id]).await.map_err(database)?;
                totals.live_documents -= 1;
                ("delete", &no_names, &no_names, 1)
            }
            AclMutation::Grant { groups, users, .. } => {
                let added = add_readers(&transaction, &mut totals, tenant, doc_id, groups, users).await?;
                let readers: i64 =
                    transaction.query_one(sql::READERS_COUNT, &[&tenant, &doc_id]).await.map_err(database)?.get(0);
                let limit = self.params.max_acl_names_per_document;
                if readers as u64 > limit as u64 {
                    transaction.rollback().await.map_err(database)?;
                    return Err(
                        AclError::TooLarge { what: format!("the access list of document {doc_id}"), limit }.into()
                    );
                }
                ("grant", groups, users, added)
            }
            AclMutation::Revoke { groups: None, users: None, .. } => {
                let removed = totals.readers(
                    &transaction.query(sql::READERS_DELETE_ALL, &[&tenant, &doc_id]).await.map_err(database)?,
                    -1,
                );
                ("revoke", &no_names, &no_names, removed)
            }
            AclMutation::Revoke { groups, users, .. } => {
                let mut removed = 0;
                for (kind, names) in [("g", groups), ("u", users)] {
                    if let Some(names) = names {
                        let kind = kind_code(kind);
                        removed += totals.readers(
                            &transaction
                                .query(sql::READERS_DELETE, &[&tenant, &doc_id, &kind, names])
                                .await
                                .map_err(database)?,
                            -1,
                        );
                    }
                }
                ("revoke", groups.as_ref().unwrap_or(&no_names), users.as_ref().unwrap_or(&no_names), removed)
            }
            AclMutation::Upsert { .. } => unreachable!("rejected above"),
        };
        if changed == 0 {
            transaction.rollback().await.map_err(database)?;
            return Ok(current as u64);
        }
        let epoch = current + 1;
        transaction
            .execute(
                sql::CHANGE_INSERT,
                &[&tenant, &epoch, &0_i32, &self.lineage, &kind, &doc_id, &Some(version), groups, users],
            )
            .await
            .map_err(database)?;
        totals.apply(&transaction, tenant, epoch).await?;
        transaction.commit().await.map_err(database)?;
        Ok(epoch as u64)
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

fn kind_code(kind: &str) -> i8 {
    kind.as_bytes()[0] as i8
}

/// Enters `tenant` (row-level security admits its rows alone for the rest of the transaction),
/// creates its row if absent and locks it; returns its epoch. The first statements of every write
/// transaction.
async fn lock_tenant(transaction: &deadpool_postgres::Transaction<'_>, tenant: &str) -> RetrievalResult<i64> {
    transaction.query_one(sql::ENTER_TENANT, &[&tenant]).await.map_err(database)?;
    transaction.execute(sql::TENANT_ENSURE, &[&tenant]).await.map_err(database)?;
    Ok(transaction.query_one(sql::TENANT_LOCK, &[&tenant]).await.map_err(database)?.get(0))
}

async fn add_readers(
    transaction: &deadpool_postgres::Transaction<'_>,
    totals: &mut TotalsChange,
    tenant: &str,
    doc_id: &str,
    groups: &[String],
    users: &[String],
) -> RetrievalResult<u64> {
    let mut added = 0;
    for (kind, names) in [("g", groups), ("u", users)] {
        if names.is_empty() {
            continue;
        }
        let kind = kind_code(kind);
        added += totals.readers(
            &transaction.query(sql::READERS_INSERT, &[&tenant, &doc_id, &kind, &names]).await.map_err(database)?,
            1,
        );
    }
    Ok(added)
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
