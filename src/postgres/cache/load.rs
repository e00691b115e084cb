//! Loading a tenant into the cache: one REPEATABLE READ, read-only transaction entered into the
//! tenant (row-level security, as every read) reads its epoch, its live documents with their
//! readers and all its chunks with their embeddings ([`super::sql`]); the ACL snapshot is built at
//! the tenant's epoch and the chunks are indexed into new shards off the async runtime
//! ([`Shard::build_all`]), then an in-memory engine is started on them. Nothing is re-chunked or
//! re-embedded.

use std::sync::Arc;
use std::time::Instant;

use deadpool_postgres::Transaction;
use pgvector::Vector;
use tokio_postgres::IsolationLevel;

use crate::acl::{AclChange, AclMutation, AclSnapshot, AclStore};
use crate::domain::{Chunk, ChunkId, ChunkingConfig, DocAcl};
use crate::embedded::{Engine, EngineParams, shard_of};
use crate::index::shard::Shard;
use crate::retrieval::{RetrievalError, RetrievalResult};

use super::super::fault::{pooled, read_failure};
use super::super::{decode_layout, decode_sentence_vectors, sql as backend_sql};
use super::{Cached, TenantCache, estimated_bytes, sql};
use crate::retrieval::DatabaseOperation;

/// Bytes of text per analyzed token, to estimate a tenant's text from its kept counts before
/// reading it (stopwords are not counted as tokens, punctuation and spaces are not either).
const TEXT_BYTES_PER_TOKEN: u64 = 10;

/// What a load read.
enum Loaded {
    /// The tenant's state, ready to be indexed.
    State { acl: AclStore, chunks: Vec<tokio_postgres::Row>, committed: Option<String> },
    /// Estimated larger than the budget: not read.
    TooLarge,
}

impl TenantCache {
    /// Loads `tenant` and installs it (or marks it too large, or forgets the attempt): the
    /// background task a miss spawns. From the local index cache when it holds a usable set of
    /// the tenant ([`super::local`], caught up to the database), else from the database (then
    /// written to the local index cache, when it is on).
    pub(super) async fn load(self: Arc<Self>, tenant: String) {
        let started = Instant::now();
        let (outcome, source) = match self.load_local(&tenant).await {
            Some(cached) => (Ok(Some(cached)), "local"),
            None => {
                let outcome = match self.read_tenant(&tenant).await {
                    Ok(Loaded::State { acl, chunks, committed }) => self.build(&tenant, acl, chunks, committed).await,
                    Ok(Loaded::TooLarge) => Ok(None),
                    Err(error) => Err(error),
                };
                (outcome, "database")
            }
        };
        // Counted before the tenant's slot changes: whoever sees it ready (a test's `settled`, a
        // hit, `/metrics` after one) sees its load counted.
        let loaded = |label: &'static str| {
            metrics::counter!("warrant_tenant_cache_loads_total", "outcome" => label, "source" => source).increment(1);
        };
        match outcome {
            Ok(Some(cached)) => {
                let count = if source == "local" { &self.loaded_local } else { &self.loaded_database };
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let seconds = started.elapsed().as_secs_f64();
                metrics::histogram!("warrant_tenant_cache_load_seconds", "source" => source).record(seconds);
                loaded("loaded");
                tracing::info!(source, seconds, "a tenant was loaded into the cache");
                self.install(&tenant, Arc::clone(&cached));
                if source == "local" {
                    self.save_local_if_behind(&tenant, &cached);
                } else {
                    self.save_local(&tenant, &cached);
                }
            }
            Ok(None) => {
                loaded("too_large");
                self.abandon(&tenant, true);
            }
            Err(error) => {
                tracing::warn!(%error, "a tenant could not be loaded into the cache; its reads stay on SQL");
                loaded("failed");
                self.abandon(&tenant, false);
            }
        }
    }

    /// Reads the tenant's state in one snapshot (see the module's documentation).
    async fn read_tenant(&self, tenant: &str) -> RetrievalResult<Loaded> {
        let _permit = self.limiter.admit(tenant, DatabaseOperation::Read).await?;
        let mut client = pooled(&self.pool, DatabaseOperation::Read).await?;
        let lineage: String =
            client.query_one(backend_sql::META_GET, &[&"lineage"]).await.map_err(read_failure)?.get(0);
        if lineage != self.lineage {
            return Err(read_failure("the database's lineage is not the one this node connected to"));
        }
        let transaction = snapshot(&mut client, tenant).await?;
        let state = transaction.query_opt(sql::TENANT_STATE, &[&tenant]).await.map_err(read_failure)?;
        let (epoch, committed, chunk_count, tokens) = match &state {
            Some(row) => (row.get::<_, i64>(0), row.get(1), row.get::<_, i64>(2), row.get::<_, i64>(3)),
            None => (0, None, 0, 0),
        };
        let estimate = estimated_bytes(
            chunk_count.max(0) as u64,
            (tokens.max(0) as u64).saturating_mul(TEXT_BYTES_PER_TOKEN),
            0,
            &self.vector_params(),
        );
        if estimate > self.params.budget_bytes {
            return Ok(Loaded::TooLarge);
        }
        let documents = transaction.query(sql::LIVE_DOCUMENTS, &[&tenant]).await.map_err(read_failure)?;
        let chunks = transaction.query(sql::TENANT_CHUNKS, &[&tenant]).await.map_err(read_failure)?;
        transaction.commit().await.map_err(read_failure)?;
        let acl = acl_store(tenant, epoch.max(0) as u64, &documents, self.lineage.clone())?;
        Ok(Loaded::State { acl, chunks, committed })
    }

    /// Indexes the chunks read into new shards (off the async runtime) and starts the engine;
    /// `None` when the tenant turns out larger than the budget.
    async fn build(
        &self,
        tenant: &str,
        acl: AclStore,
        rows: Vec<tokio_postgres::Row>,
        committed: Option<String>,
    ) -> RetrievalResult<Option<Arc<Cached>>> {
        let vector = self.vector_params();
        let shard_count = self.params.shards.max(1);
        let owner = tenant.to_owned();
        let built = tokio::task::spawn_blocking(move || -> RetrievalResult<_> {
            let mut per_shard: Vec<Vec<(Chunk, Vec<f32>)>> = vec![Vec::new(); shard_count];
            let (mut text_bytes, mut extra_bytes) = (0_u64, 0_u64);
            let count = rows.len() as u64;
            for row in rows {
                let (chunk, embedding) = chunk_row(&owner, &row)?;
                text_bytes += (chunk.text.len() + chunk.title.len()) as u64;
                extra_bytes += row.get::<_, Option<&[u8]>>(10).map_or(0, <[u8]>::len) as u64
                    + row.get::<_, Option<&[u8]>>(11).map_or(0, <[u8]>::len) as u64;
                per_shard[shard_of(&chunk.tenant, &chunk.doc_id, shard_count)].push((chunk, embedding));
            }
            let bytes = estimated_bytes(count, text_bytes, extra_bytes, &vector);
            Ok((bytes, per_shard))
        })
        .await
        .map_err(|error| read_failure(error.to_string()))??;
        let (bytes, per_shard) = built;
        if bytes > self.params.budget_bytes {
            return Ok(None);
        }
        let shards = tokio::task::spawn_blocking(move || Shard::build_all(per_shard, vector))
            .await
            .map_err(|error| read_failure(error.to_string()))??;
        let engine = Engine::start_with_coordinators(
            self.engine_params(),
            Arc::clone(&self.embedder),
            Arc::new(acl),
            Some(shards),
            1,
        )?;
        let search = engine.shard_search();
        Ok(Some(Arc::new(Cached::new(engine, search, bytes, self.lineage.clone(), committed))))
    }

    /// The cached shards' HNSW parameters, with the embedder's dimension.
    pub(super) fn vector_params(&self) -> crate::index::vector::VectorParams {
        crate::index::vector::VectorParams { dimension: self.embedder.dimension(), ..self.params.vector }
    }

    /// A cached engine's parameters: its shards and threads, the HNSW parameters; nothing it
    /// never uses (it is never written to but by [`Engine::apply_replicated`], never durable,
    /// and its searches run through the backend's coordinators, whose candidate counts apply).
    pub(super) fn engine_params(&self) -> EngineParams {
        EngineParams {
            shards: self.params.shards.max(1),
            vector: self.vector_params(),
            chunking: ChunkingConfig::default(),
            rrf_k: 60.0,
            lexical_candidates: 0,
            vector_candidates: 0,
            embed_batch: 64,
            query_cache: 1,
            threads_per_shard: self.params.threads_per_shard.max(1),
            sentence_vectors: false,
            store_cache_bytes: 0,
            reranker: crate::config::RerankerKind::Identity,
            max_acl_names_per_document: usize::MAX,
            index_journal: false,
            index_journal_max_bytes: 0,
        }
    }
}

/// A REPEATABLE READ, read-only transaction on `client` that entered `tenant`: every statement
/// in it sees the same committed state, and that tenant's rows alone.
pub(super) async fn snapshot<'a>(
    client: &'a mut deadpool_postgres::Object,
    tenant: &str,
) -> RetrievalResult<Transaction<'a>> {
    let transaction = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(read_failure)?;
    transaction.query_one(backend_sql::ENTER_TENANT, &[&tenant]).await.map_err(read_failure)?;
    Ok(transaction)
}

/// The ACL state of one tenant at `epoch` from its live documents ([`sql::LIVE_DOCUMENTS`]
/// rows): each made live by an upsert at `epoch`, applied as a replica applies its primary's
/// changes (so the access lists are normalized as every write's are), the log compacted.
fn acl_store(tenant: &str, epoch: u64, rows: &[tokio_postgres::Row], lineage: String) -> RetrievalResult<AclStore> {
    let mut changes = Vec::with_capacity(rows.len());
    for row in rows {
        let groups: Vec<String> = row.get(4);
        let users: Vec<String> = row.get(5);
        changes.push(AclChange {
            epoch,
            mutation: AclMutation::Upsert {
                tenant: tenant.to_owned(),
                doc_id: row.get(0),
                version: row.get::<_, i64>(1).max(0) as u64,
                ordinal: ordinal(row.get(2))?,
                title: row.get(3),
                acl: DocAcl { groups, users },
            },
        });
    }
    let store = AclStore::restore(AclSnapshot::default(), Vec::new(), 0, lineage);
    if changes.is_empty() {
        // A tenant without live documents: its epoch alone.
        let empty = AclSnapshot { epoch, ..AclSnapshot::default() };
        return Ok(AclStore::restore(empty, Vec::new(), 0, store.lineage().to_owned()));
    }
    if epoch == 0 {
        return Err(read_failure("live documents in a tenant at epoch 0"));
    }
    store.apply_remote(&changes)?;
    store.compact(epoch);
    Ok(store)
}

/// A document-version ordinal of the database as warrant's (32 bits).
pub(super) fn ordinal(value: i64) -> RetrievalResult<u32> {
    u32::try_from(value).map_err(|_| read_failure("a document ordinal is outside 32 bits"))
}

/// A chunk row ([`sql::TENANT_CHUNKS`], [`sql::VERSION_CHUNKS`]) as the chunk and its vector.
pub(super) fn chunk_row(tenant: &str, row: &tokio_postgres::Row) -> RetrievalResult<(Chunk, Vec<f32>)> {
    let chunk_id: &[u8] = row.get(0);
    let id = ChunkId::from_bytes(chunk_id.try_into().map_err(|_| read_failure("chunk id is not 16 bytes"))?);
    let embedding: Vector = row.get(9);
    let chunk = Chunk {
        id,
        tenant: tenant.to_owned(),
        doc_id: row.get(1),
        doc_version: row.get::<_, i64>(2).max(0) as u64,
        ordinal: row.get::<_, i32>(3).max(0) as u32,
        doc_ordinal: ordinal(row.get(4))?,
        start: row.get::<_, i32>(5).max(0) as usize,
        end: row.get::<_, i32>(6).max(0) as usize,
        title: row.get(7),
        text: row.get(8),
        sentence_vectors: decode_sentence_vectors(row.get(10)).map_err(as_read_error)?,
        layout: decode_layout(row.get(11)).map_err(as_read_error)?,
    };
    Ok((chunk, embedding.to_vec()))
}

fn as_read_error(error: RetrievalError) -> RetrievalError {
    super::super::fault::as_read(error)
}
