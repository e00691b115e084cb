//! The engine: owns the ACL store, the shard actors, the embedder and the system of record, and
//! starts them (empty, from a data directory, or from restored state). Its two sides live in
//! their own files: `write.rs` (validate → chunk → embed → index → stage → commit → publish, and
//! the one publish-and-purge step that local writes and a replica's remote changes share) and
//! `read.rs` (scope, and the engine's side of the read path shared with the PostgreSQL backend,
//! `crate::retrieval::ReadPath`, over the shards' searches, `shards.rs`).
//!
//! Write-path invariant: chunks are embedded and indexed under fresh ordinals *before* the ACL
//! snapshot that makes them readable is published — outside the writer lock, since no scope
//! contains those ordinals yet — and the same publish tombstones the previous version, so
//! readers see either the old version or the new one, never both and never a half batch. Under
//! the writer lock a change is validated, committed to the system of record ([`Store`], when the
//! engine is durable) and only then published, so nothing is visible or acknowledged before it
//! is durable, and a revoke is enforced before it is acknowledged. A batch that fails anywhere
//! publishes nothing; its already indexed chunks stay unreadable forever (their ordinals are
//! never published, nor reused) and are purged from the lexical index.

use std::path::Path;
use std::sync::{Arc, Mutex};

use actix::{Addr, SyncArbiter};
use arc_swap::ArcSwap;

use crate::acl::AclStore;
use crate::config::{RerankerKind, Settings};
use crate::domain::ChunkingConfig;
use crate::embed::Embedder;
use crate::index::IndexError;
use crate::index::shard::{Shard, ShardActor, ShardStats};
use crate::index::vector::VectorParams;
use crate::storage::{StorageError, Store};

use crate::retrieval::{CandidateCounts, QueryEmbedder, ReadPath, RetrievalError, RetrievalResult, reranker};

use super::shards::ShardSearch;
use super::write::FaultHook;

/// Engine parameters (a slice of [`Settings`]).
#[derive(Clone, Debug)]
pub struct EngineParams {
    /// Number of shards.
    pub shards: usize,
    /// Vector index parameters (dimension comes from the embedder).
    pub vector: VectorParams,
    /// Chunking.
    pub chunking: ChunkingConfig,
    /// RRF constant.
    pub rrf_k: f64,
    /// Lexical candidates per shard.
    pub lexical_candidates: usize,
    /// Vector candidates per shard.
    pub vector_candidates: usize,
    /// Texts per embedding call.
    pub embed_batch: usize,
    /// Query vectors cached.
    pub query_cache: usize,
    /// Threads of each shard actor (a `SyncArbiter`): `index.threads_per_shard`, or sized from
    /// the available parallelism when that is 0.
    pub threads_per_shard: usize,
    /// Embed each chunk's sentences at ingestion (`verifier.sentence_vectors`; the engine turns
    /// it off for an embedder that is not [`Embedder::semantic`]).
    pub sentence_vectors: bool,
    /// Page cache of the data directory's store, in bytes (`storage.cache_mb`).
    pub store_cache_bytes: usize,
    /// The reranker of fused candidates (`retrieval.reranker`).
    pub reranker: RerankerKind,
    /// Most users and groups on one document's access list (`server.max_acl_names_per_document`).
    pub max_acl_names_per_document: usize,
    /// Journal index changes between index sets (`storage.index_journal`).
    pub index_journal: bool,
    /// Journal bytes that make a new index set due (`storage.index_journal_max_mb`).
    pub index_journal_max_bytes: u64,
}

impl EngineParams {
    /// Derives engine parameters from settings and the embedder dimension.
    pub fn from_settings(settings: &Settings, dimension: usize) -> Self {
        Self {
            shards: settings.index.shards,
            vector: VectorParams {
                dimension,
                max_connections: settings.index.hnsw_max_connections,
                ef_construction: settings.index.hnsw_ef_construction,
                ef_search: settings.index.hnsw_ef_search,
                exact_scan_threshold: settings.index.exact_scan_threshold,
                exact_scan_max_fraction: settings.index.exact_scan_max_fraction,
            },
            chunking: settings.chunking,
            rrf_k: settings.retrieval.rrf_k,
            lexical_candidates: settings.retrieval.lexical_candidates,
            vector_candidates: settings.retrieval.vector_candidates,
            embed_batch: settings.embedder.batch_size,
            query_cache: settings.embedder.query_cache,
            threads_per_shard: crate::index::shard::threads_per_shard(
                settings.index.threads_per_shard,
                settings.index.shards,
            ),
            sentence_vectors: settings.verifier.sentence_vectors,
            store_cache_bytes: settings.storage.cache_mb.saturating_mul(1 << 20),
            reranker: settings.retrieval.reranker,
            max_acl_names_per_document: settings.server.max_acl_names_per_document,
            index_journal: settings.storage.index_journal,
            index_journal_max_bytes: settings.storage.index_journal_max_mb.saturating_mul(1 << 20),
        }
    }
}

/// The swappable part of the engine: ACL state, shards and their actors. A replica that
/// re-synchronizes from its primary's snapshot replaces it whole ([`Engine::replace_core`]).
pub(super) struct Core {
    pub(super) acl: Arc<AclStore>,
    pub(super) shards: Vec<Arc<Shard>>,
    pub(super) shard_actors: Vec<Addr<ShardActor>>,
    /// The coordinators over these shards.
    pub(super) read_path: Arc<ReadPath>,
}

/// The engine. Create it inside a running actix System.
pub struct Engine {
    pub(super) core: ArcSwap<Core>,
    pub(super) embedder: Arc<dyn Embedder>,
    pub(super) params: EngineParams,
    /// Serializes publishing (commit + publish); never held while embedding or indexing.
    pub(super) writer: tokio::sync::Mutex<()>,
    /// Query vectors per principal (read side; kept across core replacements, cleared by them).
    pub(super) queries: Arc<QueryEmbedder>,
    /// The system of record (`None`: in-memory engine, nothing survives the process).
    pub(super) store: Option<Arc<Store>>,
    /// Test-only failures between write-path steps (write side).
    pub(super) faults: Mutex<Option<FaultHook>>,
    /// Where a primary hands every committed change for its replicas ([`Engine::attach_sink`]).
    pub(super) sink: std::sync::OnceLock<Arc<dyn ChangeSink>>,
    /// What opening the data directory found (durable engines opened from one).
    recovery: std::sync::OnceLock<Recovery>,
    /// Whether an index set made due by the journals' size is being written.
    pub(super) set_writing: Arc<std::sync::atomic::AtomicBool>,
    /// Coordinator actors of its read path (each on an arbiter thread of its own).
    coordinators: usize,
}

/// One change as committed and published by a primary, for its replicas: the log entries of one
/// epoch, the content of the document versions it adds (encoded as the store's rows), the
/// ordinal counter after it, and whether it can remove anyone's access.
pub struct Committed<'a> {
    /// Its epoch.
    pub epoch: u64,
    /// Its change-log entries.
    pub changes: &'a [crate::acl::AclChange],
    /// The document versions it publishes, one per `Upsert` change.
    pub documents: &'a [crate::storage::EncodedDocument],
    /// The ordinal counter after it.
    pub next_ordinal: crate::domain::DocOrdinal,
    /// Whether it deletes, revokes or retires a version (can remove access).
    pub removes_access: bool,
}

/// Receives each committed change of a primary, in commit order: called under the writer
/// lock, after the change is durable and published, never for a no-op.
pub trait ChangeSink: Send + Sync {
    /// One committed change.
    fn committed(&self, committed: Committed<'_>);

    /// The content of a document batch about to be indexed and committed (it may still fail):
    /// replicas may index it ahead, outside every scope, while the primary does the same.
    fn staged(&self, _documents: &[crate::storage::EncodedDocument]) {}
}

/// The shard of a document: a stable hash of (tenant, doc_id) modulo the shard count.
pub fn shard_of(tenant: &str, doc_id: &str, shards: usize) -> usize {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(tenant.as_bytes());
    hasher.update([0]);
    hasher.update(doc_id.as_bytes());
    let digest = hasher.finalize();
    (u64::from_le_bytes(digest[..8].try_into().expect("8 bytes")) % shards.max(1) as u64) as usize
}

impl Engine {
    /// Starts an in-memory engine (nothing is durable). Must run inside an actix System.
    pub fn start(params: EngineParams, embedder: Arc<dyn Embedder>) -> RetrievalResult<Arc<Self>> {
        Self::start_with(params, embedder, Arc::new(AclStore::new()), None)
    }

    /// Starts with an existing ACL store and, optionally, pre-built shards (restore).
    pub fn start_with(
        params: EngineParams,
        embedder: Arc<dyn Embedder>,
        acl: Arc<AclStore>,
        shards: Option<Vec<Arc<Shard>>>,
    ) -> RetrievalResult<Arc<Self>> {
        Self::assemble(params, embedder, acl, shards, None, ReadPath::default_coordinators())
    }

    /// [`Self::start_with`] with `coordinators` coordinator actors (at least one): an engine
    /// whose read path is not the process's main one (the postgres backend's cached tenants,
    /// whose shards are searched through the backend's own coordinators) starts one, so that
    /// many such engines do not start one arbiter thread per core each.
    pub fn start_with_coordinators(
        params: EngineParams,
        embedder: Arc<dyn Embedder>,
        acl: Arc<AclStore>,
        shards: Option<Vec<Arc<Shard>>>,
        coordinators: usize,
    ) -> RetrievalResult<Arc<Self>> {
        Self::assemble(params, embedder, acl, shards, None, coordinators.max(1))
    }

    /// Opens the data directory `directory` (created when absent) and starts the engine on the
    /// state it holds: the ACL checkpoint plus the replayed change log, and every live chunk with
    /// its stored vector (indexes loaded from the newest usable index set, see
    /// [`crate::storage::indexes`], else rebuilt; nothing is re-chunked or re-embedded). Every
    /// later write is committed there before it is published. Must run inside an actix System.
    pub async fn open(
        params: EngineParams,
        embedder: Arc<dyn Embedder>,
        directory: &Path,
    ) -> RetrievalResult<(Arc<Self>, Recovery)> {
        let started = std::time::Instant::now();
        let name = embedder.name().to_owned();
        let dimension = embedder.dimension();
        let directory = directory.to_owned();
        let vector = params.vector;
        let shard_count = params.shards;
        let journal = params.index_journal;
        let cache_bytes = params.store_cache_bytes;
        let (store, recovered, shards, chunk_count) = tokio::task::spawn_blocking(move || -> RetrievalResult<_> {
            use crate::storage::progress::{self, Phase};
            progress::enter(Phase::Store);
            // The index set's files are read and checked while the store opens.
            let ahead = {
                let directory = directory.clone();
                std::thread::spawn(move || crate::storage::indexes::read_ahead(&directory, vector, shard_count))
            };
            let opened = Store::open(&directory, &name, dimension, cache_bytes);
            let ahead = ahead.join().ok().flatten();
            let (store, mut recovered) = opened?;
            let chunks = std::mem::take(&mut recovered.chunks);
            let count = chunks.len();
            tracing::info!(chunks = count, seconds = started.elapsed().as_secs_f64(), "store read");
            progress::sized(count, shard_count);
            progress::enter(Phase::IndexSet);
            let (shards, indexes) = crate::storage::indexes::load_or_build(
                &directory,
                &recovered.acl,
                &format!("{name}/{dimension}"),
                (|chunk: &crate::domain::Chunk| shard_of(&chunk.tenant, &chunk.doc_id, shard_count), shard_count),
                chunks,
                |ordinals: &roaring::RoaringBitmap| store.vectors(ordinals).map_err(RetrievalError::from),
                (vector, journal, ahead),
            )?;
            progress::enter(Phase::Done);
            Ok((store, recovered, (shards, indexes), count))
        })
        .await
        .map_err(|error| StorageError::Io { file: "data directory".into(), reason: error.to_string() })??;
        let (shards, indexes) = shards;
        let recovery = Recovery {
            indexes,
            created: recovered.created,
            sealed: recovered.sealed,
            checkpoint_epoch: recovered.checkpoint_epoch,
            replayed: recovered.replayed,
            chunks: chunk_count,
            file: store.file().to_owned(),
            seconds: started.elapsed().as_secs_f64(),
        };
        let engine = Self::assemble(
            params,
            embedder,
            Arc::new(recovered.acl),
            Some(shards),
            Some(Arc::new(store)),
            ReadPath::default_coordinators(),
        )?;
        metrics::gauge!("warrant_acl_epoch").set(engine.acl().epoch() as f64);
        if recovery.created {
            // Nothing to write but the empty images: the journal starts before the first write.
            engine.write_indexes().await;
        } else if !recovery.indexes.journaling() {
            engine.journal_soon();
        }
        let _ = engine.recovery.set(recovery.clone());
        Ok((engine, recovery))
    }

    /// Starts a durable engine on pre-built state and an open store (a primary seeded from a
    /// snapshot: [`Store::seed`]). Must run inside an actix System.
    pub fn start_durable(
        params: EngineParams,
        embedder: Arc<dyn Embedder>,
        acl: AclStore,
        shards: Vec<Arc<Shard>>,
        store: Store,
    ) -> RetrievalResult<Arc<Self>> {
        let engine = Self::assemble(
            params,
            embedder,
            Arc::new(acl),
            Some(shards),
            Some(Arc::new(store)),
            ReadPath::default_coordinators(),
        )?;
        engine.journal_soon();
        Ok(engine)
    }

    /// Writes an index set in the background, so that the shards journal their changes from it
    /// (a durable engine whose shards were built or replaced rather than loaded with their
    /// journal). Must run inside an actix System.
    pub(crate) fn journal_soon(&self) {
        if let Some(write) = self.store.as_ref().and_then(|store| self.index_set_writer(store)) {
            actix_rt::spawn(write);
        }
    }

    fn assemble(
        mut params: EngineParams,
        embedder: Arc<dyn Embedder>,
        acl: Arc<AclStore>,
        shards: Option<Vec<Arc<Shard>>>,
        store: Option<Arc<Store>>,
        coordinators: usize,
    ) -> RetrievalResult<Arc<Self>> {
        // The verifier compares sentences only with a semantic embedder's vectors.
        params.sentence_vectors &= embedder.semantic();
        if embedder.dimension() != params.vector.dimension {
            return Err(RetrievalError::Index(IndexError::Dimension {
                expected: params.vector.dimension,
                got: embedder.dimension(),
            }));
        }
        let queries = Arc::new(QueryEmbedder::new(Arc::clone(&embedder), params.query_cache));
        let core = Self::core(&params, &queries, acl, shards, coordinators)?;
        Ok(Arc::new(Self {
            core: ArcSwap::from_pointee(core),
            embedder,
            params,
            writer: tokio::sync::Mutex::new(()),
            queries,
            store,
            faults: Mutex::new(None),
            sink: std::sync::OnceLock::new(),
            recovery: std::sync::OnceLock::new(),
            set_writing: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            coordinators,
        }))
    }

    fn core(
        params: &EngineParams,
        queries: &Arc<QueryEmbedder>,
        acl: Arc<AclStore>,
        shards: Option<Vec<Arc<Shard>>>,
        coordinators: usize,
    ) -> RetrievalResult<Core> {
        let shards = match shards {
            Some(shards) => shards,
            None => (0..params.shards)
                .map(|id| Shard::new(id, params.vector).map(Arc::new))
                .collect::<Result<Vec<_>, _>>()?,
        };
        let shard_actors: Vec<Addr<ShardActor>> = shards
            .iter()
            .map(|shard| {
                let shard = Arc::clone(shard);
                SyncArbiter::start(params.threads_per_shard, move || ShardActor::new(Arc::clone(&shard)))
            })
            .collect();
        let read_path = Arc::new(ReadPath::start(
            Arc::clone(queries),
            CandidateCounts { lexical: params.lexical_candidates, vector: params.vector_candidates },
            Arc::new(ShardSearch::new(shard_actors.clone(), params.vector.dimension)),
            params.rrf_k,
            reranker(params.reranker, params.rrf_k),
            coordinators,
        ));
        Ok(Core { acl, shards, shard_actors, read_path })
    }

    /// Replaces the ACL state and shards whole (a replica re-synchronized from its primary's
    /// snapshot). A durable replica's store is re-seeded with them first, in one transaction.
    /// Waits for in-progress writes; requests that loaded the old state finish on it, and the
    /// HTTP layer refuses to return what they produce.
    pub async fn replace_core(&self, acl: AclStore, shards: Vec<Arc<Shard>>) -> RetrievalResult<()> {
        let writer = self.writer.lock().await;
        let acl = Arc::new(acl);
        if let Some(store) = &self.store {
            let (store, acl, shards) = (Arc::clone(store), Arc::clone(&acl), shards.clone());
            tokio::task::spawn_blocking(move || {
                let chunks: Vec<_> = shards.iter().flat_map(|shard| shard.export()).collect();
                store.reseed(&acl, &chunks)
            })
            .await
            .map_err(|error| crate::storage::StorageError::Io {
                file: crate::storage::STORE_FILE.into(),
                reason: error.to_string(),
            })??;
        }
        let mut params = self.params.clone();
        params.shards = shards.len();
        let core = Self::core(&params, &self.queries, acl, Some(shards), self.coordinators)?;
        let epoch = core.acl.epoch();
        self.core.store(Arc::new(core));
        self.queries.clear();
        metrics::gauge!("warrant_acl_epoch").set(epoch as f64);
        drop(writer);
        // The new shards journal their changes from an index set of their own.
        self.write_indexes().await;
        Ok(())
    }

    /// The graceful stop of a durable engine, so the next start does the least: an ACL
    /// checkpoint (the change log kept whole for replicas; nothing is replayed at the next
    /// open), an index set (the journals start empty), then the store closed and sealed (the
    /// next open skips redb's integrity check: [`crate::storage::seal`]). Writes after it fail
    /// ("the store is closed"). A failing step is logged and the next start does its work.
    /// Does nothing for an in-memory engine.
    pub async fn close(&self) {
        let Some(store) = &self.store else {
            return;
        };
        // Compacting up to epoch 0 keeps every log entry.
        if let Err(error) = self.checkpoint(0).await {
            tracing::warn!(%error, "no ACL checkpoint at shutdown; the next start replays the change log");
        }
        let _writer = self.writer.lock().await;
        let store = Arc::clone(store);
        let closed = tokio::task::spawn_blocking(move || store.close().map_err(|error| error.to_string()))
            .await
            .unwrap_or_else(|error| Err(error.to_string()));
        if let Err(error) = closed {
            tracing::warn!(%error, "the store was not sealed; the next start checks every page");
        }
    }

    /// What opening the data directory found (`None` unless the engine was opened from one).
    pub fn recovery(&self) -> Option<&Recovery> {
        self.recovery.get()
    }

    /// The ACL store.
    pub fn acl(&self) -> Arc<AclStore> {
        Arc::clone(&self.core.load().acl)
    }

    /// The system of record, when the engine is durable.
    pub fn store(&self) -> Option<&Arc<Store>> {
        self.store.as_ref()
    }

    /// The embedder.
    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }

    /// The shards (snapshots, stats).
    pub fn shards(&self) -> Vec<Arc<Shard>> {
        self.core.load().shards.clone()
    }

    /// The embedded searches over the current shards' actors (what the read path's
    /// coordinators search), for a backend that runs them through coordinators of its own.
    pub fn shard_search(&self) -> Arc<ShardSearch> {
        Arc::new(ShardSearch::new(self.core.load().shard_actors.clone(), self.params.vector.dimension))
    }

    /// The read path over the current shards.
    pub fn read_path(&self) -> Arc<ReadPath> {
        Arc::clone(&self.core.load().read_path)
    }

    /// Engine parameters.
    pub fn params(&self) -> &EngineParams {
        &self.params
    }

    /// Sizes of every shard.
    pub fn stats(&self) -> Vec<ShardStats> {
        self.core.load().shards.iter().map(|shard| shard.stats()).collect()
    }

    /// Shard of a document: a stable hash of (tenant, doc_id).
    pub fn shard_of(&self, tenant: &str, doc_id: &str) -> usize {
        shard_of(tenant, doc_id, self.core.load().shards.len())
    }
}

/// What opening a data directory found.
#[derive(Clone, Debug)]
pub struct Recovery {
    /// Whether the store was created by this open.
    pub created: bool,
    /// Whether the store file was the one sealed at the last graceful close (redb's integrity
    /// check skipped).
    pub sealed: bool,
    /// Epoch of the checkpoint recovery started from.
    pub checkpoint_epoch: u64,
    /// Change batches replayed after it.
    pub replayed: usize,
    /// Live chunks loaded.
    pub chunks: usize,
    /// The database file.
    pub file: String,
    /// Whether the indexes were loaded from an index set (and its journal) or rebuilt.
    pub indexes: crate::storage::indexes::IndexSetOutcome,
    /// Seconds the open took (store, indexes, journals).
    pub seconds: f64,
}
