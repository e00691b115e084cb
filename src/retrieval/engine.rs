//! The engine facade: owns the ACL store, the shard actors and the embedder; runs the write path
//! (validate → chunk → embed → index → publish ACL) and builds scoped retrieval for a principal.
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

use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::{Arc, Mutex};

use actix::{Addr, SyncArbiter};
use arc_swap::ArcSwap;
use futures::future::join_all;
use lru::LruCache;
use roaring::RoaringBitmap;
use serde::Deserialize;

use crate::acl::{AclError, AclMutation, AclStore, AuthorizationScope};
use crate::config::Settings;
use crate::domain::{Chunk, ChunkingConfig, DocAcl, Document, Principal, chunk_document, schema};
use crate::embed::Embedder;
use crate::index::IndexError;
use crate::index::shard::{IndexChunks, PurgeOrdinals, Shard, ShardActor, ShardStats};
use crate::index::vector::VectorParams;
use crate::storage::{Commit, EncodedDocument, STORE_FILE, StorageError, Store, WriteStep};

use super::coordinator::{Coordinator, EmbeddedRepository};
use super::{IdentityReranker, RetrievalError, RetrievalQuery, RetrievalRepository, RetrievalResult, Retrieved};

/// Longest accepted document id, in characters.
const MAX_DOC_ID_CHARS: usize = 256;
/// Longest accepted document text, in characters.
const MAX_TEXT_CHARS: usize = 2_000_000;

/// Longest accepted title, in characters.
const MAX_TITLE_CHARS: usize = 1000;

/// A document as an admin submits it (the tenant comes from the caller, never from here). The
/// schema declares what `validate_batch` enforces, except that a `doc_id` appears once a batch.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DocumentInput {
    /// Tenant-scoped id: 1..=256 characters, not blank, no control characters.
    #[schema(schema_with = doc_id_schema)]
    pub doc_id: String,
    /// Display title, at most 1000 characters.
    #[serde(default)]
    #[schema(max_length = 1000)]
    pub title: String,
    /// Full text: 1..=2,000,000 characters, not blank.
    #[schema(schema_with = text_schema)]
    pub text: String,
    /// Readers.
    #[serde(default)]
    pub acl: DocAcl,
    /// Explicit version (at least 1); must be greater than the stored one. Default: stored + 1
    /// (or 1).
    #[serde(default, deserialize_with = "schema::optional_integer")]
    #[schema(schema_with = version_schema)]
    pub version: Option<u64>,
}

fn doc_id_schema() -> utoipa::openapi::Object {
    schema::identifier(MAX_DOC_ID_CHARS, "tenant-scoped id: 1..=256 characters, not blank, no control characters")
}

fn text_schema() -> utoipa::openapi::Object {
    schema::not_blank(MAX_TEXT_CHARS, "full text: 1..=2000000 characters, not blank")
}

fn version_schema() -> utoipa::openapi::Object {
    schema::unsigned(1, true, "explicit version, greater than the stored one; default: stored + 1 (or 1)")
}

/// Result of an upsert batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct UpsertOutcome {
    /// Epoch that made the batch readable.
    pub acl_epoch: u64,
    /// Documents written.
    pub documents: usize,
    /// Chunks written.
    pub chunks: usize,
}

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
        }
    }
}

/// A test hook that can fail the write path before any [`WriteStep`] (deterministic crash and
/// I/O-failure tests). Returns `true` to fail at that step.
pub type FaultHook = Arc<dyn Fn(WriteStep) -> bool + Send + Sync>;

/// Attempts at an upsert whose implicit versions raced another upsert of the same document.
const MAX_UPSERT_ATTEMPTS: usize = 4;
/// Documents per staging transaction: small enough that a revoke queued behind one waits
/// milliseconds, large enough that a 500-document batch takes few fsyncs.
const STAGE_DOCUMENTS: usize = 32;

/// The swappable part of the engine: ACL state, shards and their actors. A replica that
/// re-synchronizes from its primary's snapshot replaces it whole ([`Engine::replace_core`]).
struct Core {
    acl: Arc<AclStore>,
    shards: Vec<Arc<Shard>>,
    shard_actors: Vec<Addr<ShardActor>>,
    repository: Arc<dyn RetrievalRepository>,
}

/// The engine. Create it inside a running actix System.
pub struct Engine {
    core: ArcSwap<Core>,
    embedder: Arc<dyn Embedder>,
    params: EngineParams,
    /// Serializes publishing (commit + publish); never held while embedding or indexing.
    writer: tokio::sync::Mutex<()>,
    query_cache: Mutex<LruCache<QueryKey, Arc<Vec<f32>>>>,
    /// The system of record (`None`: in-memory engine, nothing survives the process).
    store: Option<Arc<Store>>,
    faults: Mutex<Option<FaultHook>>,
}

/// Query-cache key: the asking principal (tenant and user) and the normalized text. Keyed per
/// principal so a cache hit (a faster answer) never tells one user what another asked recently,
/// inside a tenant or across tenants.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct QueryKey {
    tenant: String,
    user: String,
    text: String,
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
        Self::assemble(params, embedder, acl, shards, None)
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
        let name = embedder.name().to_owned();
        let dimension = embedder.dimension();
        let directory = directory.to_owned();
        let vector = params.vector;
        let shard_count = params.shards;
        let (store, recovered, shards, chunk_count) = tokio::task::spawn_blocking(move || -> RetrievalResult<_> {
            let (store, mut recovered) = Store::open(&directory, &name, dimension)?;
            let chunks = std::mem::take(&mut recovered.chunks);
            let count = chunks.len();
            let (shards, indexes) = crate::storage::indexes::load_or_build(
                &directory,
                &recovered.acl,
                &format!("{name}/{dimension}"),
                |chunk| shard_of(&chunk.tenant, &chunk.doc_id, shard_count),
                shard_count,
                chunks,
                vector,
            )?;
            Ok((store, recovered, (shards, indexes), count))
        })
        .await
        .map_err(|error| StorageError::Io { file: "data directory".into(), reason: error.to_string() })??;
        let (shards, indexes) = shards;
        let recovery = Recovery {
            indexes,
            created: recovered.created,
            checkpoint_epoch: recovered.checkpoint_epoch,
            replayed: recovered.replayed,
            chunks: chunk_count,
            file: store.file().to_owned(),
        };
        let engine = Self::assemble(params, embedder, Arc::new(recovered.acl), Some(shards), Some(Arc::new(store)))?;
        metrics::gauge!("warrant_acl_epoch").set(engine.acl().epoch() as f64);
        Ok((engine, recovery))
    }

    /// Starts a durable engine on pre-built state and an open store (a primary seeded from a
    /// snapshot: [`Store::seed`]).
    pub fn start_durable(
        params: EngineParams,
        embedder: Arc<dyn Embedder>,
        acl: AclStore,
        shards: Vec<Arc<Shard>>,
        store: Store,
    ) -> RetrievalResult<Arc<Self>> {
        Self::assemble(params, embedder, Arc::new(acl), Some(shards), Some(Arc::new(store)))
    }

    fn assemble(
        params: EngineParams,
        embedder: Arc<dyn Embedder>,
        acl: Arc<AclStore>,
        shards: Option<Vec<Arc<Shard>>>,
        store: Option<Arc<Store>>,
    ) -> RetrievalResult<Arc<Self>> {
        if embedder.dimension() != params.vector.dimension {
            return Err(RetrievalError::Index(IndexError::Dimension {
                expected: params.vector.dimension,
                got: embedder.dimension(),
            }));
        }
        let core = Self::core(&params, acl, shards)?;
        let cache_size = NonZeroUsize::new(params.query_cache.max(1)).expect("at least one");
        Ok(Arc::new(Self {
            core: ArcSwap::from_pointee(core),
            embedder,
            params,
            writer: tokio::sync::Mutex::new(()),
            query_cache: Mutex::new(LruCache::new(cache_size)),
            store,
            faults: Mutex::new(None),
        }))
    }

    fn core(params: &EngineParams, acl: Arc<AclStore>, shards: Option<Vec<Arc<Shard>>>) -> RetrievalResult<Core> {
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
        let coordinator = actix::Actor::start(Coordinator::new(shard_actors.clone()));
        let repository = Arc::new(EmbeddedRepository::new(coordinator, params.rrf_k, Arc::new(IdentityReranker)));
        Ok(Core { acl, shards, shard_actors, repository })
    }

    /// Replaces the ACL state and shards whole (a replica re-synchronized from its primary's
    /// snapshot; in-memory engines only). Waits for in-progress writes; requests that loaded the
    /// old state finish on it, and the HTTP layer refuses to return what they produce.
    pub async fn replace_core(&self, acl: AclStore, shards: Vec<Arc<Shard>>) -> RetrievalResult<()> {
        debug_assert!(self.store.is_none(), "a durable engine never swaps its state");
        let _writer = self.writer.lock().await;
        let mut params = self.params.clone();
        params.shards = shards.len();
        let core = Self::core(&params, Arc::new(acl), Some(shards))?;
        let epoch = core.acl.epoch();
        self.core.store(Arc::new(core));
        self.lock_cache().clear();
        metrics::gauge!("warrant_acl_epoch").set(epoch as f64);
        Ok(())
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

    /// The retrieval repository.
    pub fn repository(&self) -> Arc<dyn RetrievalRepository> {
        Arc::clone(&self.core.load().repository)
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

    /// Installs a fault hook (tests only: deterministic failures between write-path steps).
    pub fn inject_faults(&self, hook: Option<FaultHook>) {
        *self.faults.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = hook;
    }

    fn fault(&self, step: WriteStep) -> RetrievalResult<()> {
        let hook = self.faults.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
        match hook {
            Some(hook) if hook(step) => Err(StorageError::Injected(step).into()),
            _ => Ok(()),
        }
    }

    /// Upserts a batch of documents into `tenant`, all or nothing.
    ///
    /// Chunking, embedding and indexing run outside the writer lock (new chunks are indexed under
    /// fresh ordinals that no scope contains yet), so a revoke never waits for another request's
    /// embedding; the lock is held only to check versions, commit and publish.
    pub async fn upsert(&self, tenant: &str, inputs: Vec<DocumentInput>) -> RetrievalResult<UpsertOutcome> {
        validate_batch(&inputs)?;
        let inputs = Arc::new(inputs);
        // Chunk boundaries and embedding texts do not depend on the version or the ordinal.
        let (provisional, texts) = {
            let (tenant, inputs, chunking) = (tenant.to_owned(), Arc::clone(&inputs), self.params.chunking);
            off_thread(inputs.len(), move || {
                let provisional: Vec<Vec<Chunk>> =
                    inputs.iter().map(|input| chunk_document(&to_document(&tenant, input, 1), 0, &chunking)).collect();
                let texts: Vec<String> = provisional.iter().flatten().map(embedding_text).collect();
                (Arc::new(provisional), texts)
            })
            .await
        };
        self.fault(WriteStep::Embed)?;
        let vectors = Arc::new(self.embed_texts(texts).await?);
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.try_upsert(tenant, &inputs, &provisional, &vectors).await {
                Err(RetrievalError::Acl(AclError::StaleVersion { .. } | AclError::Conflict))
                    if attempt < MAX_UPSERT_ATTEMPTS && inputs.iter().all(|input| input.version.is_none()) =>
                {
                    // Another upsert of the same document won the race; take the next version.
                    continue;
                }
                result => return result,
            }
        }
    }

    async fn try_upsert(
        &self,
        tenant: &str,
        inputs: &[DocumentInput],
        provisional: &Arc<Vec<Vec<Chunk>>>,
        vectors: &Arc<Vec<Vec<f32>>>,
    ) -> RetrievalResult<UpsertOutcome> {
        let acl = self.acl();
        let snapshot = acl.load();
        let mut documents = Vec::with_capacity(inputs.len());
        for input in inputs {
            let current = snapshot.entry(tenant, &input.doc_id).map(|entry| entry.version);
            let version = match (input.version, current) {
                (Some(version), Some(current)) if version <= current => {
                    return Err(AclError::StaleVersion { doc_id: input.doc_id.clone(), current }.into());
                }
                (Some(version), _) => version,
                (None, Some(current)) => current
                    .checked_add(1)
                    .ok_or_else(|| invalid(&input.doc_id, "the version counter of this document is exhausted"))?,
                (None, None) => 1,
            };
            documents.push(to_document(tenant, input, version));
        }
        let count = u32::try_from(documents.len()).map_err(|_| invalid("", "batch too large"))?;
        let ordinals = acl.reserve_ordinals(count)?;
        let (documents, rows) = {
            let (provisional, vectors, chunking) = (Arc::clone(provisional), Arc::clone(vectors), self.params.chunking);
            let (ordinals, encode) = (ordinals.clone(), self.store.is_some());
            off_thread(documents.len(), move || {
                let rows = batch_rows(&documents, ordinals, &provisional, &vectors, &chunking, encode);
                (documents, rows)
            })
            .await
        };
        let BatchRows { items, encoded, chunk_count } = rows?;
        let unpublished: RoaringBitmap = ordinals.clone().collect();
        let indexed = match self.fault(WriteStep::Index) {
            Ok(()) => self.index_chunks(items.into_iter().flatten().collect()).await,
            Err(error) => Err(error),
        };
        let staged = match indexed {
            Ok(()) => self.stage(encoded).await,
            Err(error) => Err(error),
        };
        if let Err(error) = staged {
            self.abandon(unpublished).await;
            return Err(error);
        }
        let mutations = documents
            .iter()
            .zip(ordinals)
            .map(|(document, ordinal)| AclMutation::Upsert {
                tenant: document.tenant.clone(),
                doc_id: document.doc_id.clone(),
                version: document.version,
                ordinal,
                title: document.title.clone(),
                acl: document.acl.clone(),
            })
            .collect();
        let published = if self.store.is_some() { unpublished.clone() } else { RoaringBitmap::new() };
        match self.publish(mutations, published).await {
            Ok(epoch) => Ok(UpsertOutcome { acl_epoch: epoch, documents: documents.len(), chunks: chunk_count }),
            Err(error) => {
                self.abandon(unpublished).await;
                Err(error)
            }
        }
    }

    /// Writes a batch's rows to the store ahead of its publication, [`STAGE_DOCUMENTS`] documents
    /// per transaction, outside the writer lock: a revoke waits at most for one small
    /// transaction, never for a whole batch's commit.
    async fn stage(&self, encoded: Vec<EncodedDocument>) -> RetrievalResult<()> {
        self.fault(WriteStep::Stage)?;
        let Some(store) = &self.store else { return Ok(()) };
        let store = Arc::clone(store);
        tokio::task::spawn_blocking(move || encoded.chunks(STAGE_DOCUMENTS).try_for_each(|piece| store.stage(piece)))
            .await
            .map_err(|error| StorageError::Io { file: STORE_FILE.into(), reason: error.to_string() })??;
        Ok(())
    }

    /// Forgets a batch that will not be published: its chunks leave the indexes and its staged
    /// rows the store (best effort: recovery deletes staged rows a failure here leaves behind).
    async fn abandon(&self, unpublished: RoaringBitmap) {
        if let Some(store) = &self.store {
            let store = Arc::clone(store);
            let ordinals = unpublished.clone();
            let unstaged = tokio::task::spawn_blocking(move || store.unstage(&ordinals)).await;
            if !matches!(unstaged, Ok(Ok(()))) {
                tracing::warn!("could not delete the rows of an abandoned batch; recovery will");
            }
        }
        self.purge_later(unpublished);
    }

    /// Applies one ACL mutation (delete, grant, revoke): committed, then published, then
    /// acknowledged. A no-op (granting what is granted, revoking what is not) changes nothing
    /// and returns the current epoch.
    pub async fn mutate(&self, mutation: AclMutation) -> RetrievalResult<u64> {
        self.publish(vec![mutation], RoaringBitmap::new()).await
    }

    /// Under the writer lock: validates `mutations` against the current snapshot, commits them
    /// (making the `published` staged rows live) as one durable transaction, then publishes.
    /// Nothing is visible before it is durable; a failure anywhere publishes nothing.
    async fn publish(&self, mutations: Vec<AclMutation>, published: RoaringBitmap) -> RetrievalResult<u64> {
        let _writer = self.writer.lock().await;
        let acl = self.acl();
        let prepared = acl.prepare(mutations)?;
        if prepared.is_noop() {
            return Ok(prepared.epoch());
        }
        let retired = prepared.retired();
        self.fault(WriteStep::Commit)?;
        if let Some(store) = &self.store {
            let store = Arc::clone(store);
            let changes = prepared.changes().to_vec();
            let removed = retired.clone();
            let next_ordinal = acl.next_ordinal();
            tokio::task::spawn_blocking(move || {
                store.commit(&Commit {
                    changes: &changes,
                    added: &[],
                    removed: &removed,
                    published: &published,
                    next_ordinal,
                })
            })
            .await
            .map_err(|error| StorageError::Io { file: STORE_FILE.into(), reason: error.to_string() })??;
        }
        self.fault(WriteStep::Publish)?;
        let epoch = acl.publish(prepared)?;
        metrics::gauge!("warrant_acl_epoch").set(epoch as f64);
        if !retired.is_empty() && self.fault(WriteStep::Purge).is_ok() {
            self.purge_later(retired);
        }
        Ok(epoch)
    }

    /// Runs `capture` while no write (upsert, mutation, remote apply) is in progress, so the ACL
    /// state and the shards it sees are consistent with each other (snapshots).
    pub async fn quiesced<T>(&self, capture: impl FnOnce(&AclStore, &[Arc<Shard>]) -> T) -> T {
        let _writer = self.writer.lock().await;
        let core = self.core.load();
        capture(&core.acl, &core.shards)
    }

    /// Applies changes received from a primary's feed (replicas), in order, under the writer
    /// lock; ordinals tombstoned by them are purged from the lexical indexes.
    pub async fn apply_remote(&self, changes: &[crate::acl::AclChange]) -> RetrievalResult<u64> {
        let _writer = self.writer.lock().await;
        let acl = self.acl();
        let prepared = acl.prepare_remote(changes)?;
        let retired = prepared.retired();
        let epoch = acl.publish(prepared)?;
        metrics::gauge!("warrant_acl_epoch").set(epoch as f64);
        if !retired.is_empty() {
            self.purge_later(retired);
        }
        Ok(epoch)
    }

    /// Writes an ACL checkpoint into the store and compacts the change log (in memory and on
    /// disk) up to `compact_up_to` (at most the current epoch). Returns the checkpoint's epoch.
    pub async fn checkpoint(&self, compact_up_to: u64) -> RetrievalResult<u64> {
        let writer = self.writer.lock().await;
        let acl = self.acl();
        let snapshot = acl.load();
        let epoch = snapshot.epoch();
        let up_to = compact_up_to.min(epoch);
        if let Some(store) = &self.store {
            let store = Arc::clone(store);
            tokio::task::spawn_blocking(move || store.checkpoint(&snapshot, up_to))
                .await
                .map_err(|error| StorageError::Io { file: STORE_FILE.into(), reason: error.to_string() })??;
        }
        acl.compact(up_to);
        drop(writer);
        self.write_indexes().await;
        Ok(epoch)
    }

    /// Writes an index set next to the store of a durable engine (at every checkpoint and on
    /// graceful shutdown); does nothing for an in-memory engine. It needs no writer lock: each
    /// shard's images are taken atomically, the next ordinal is read after them (every slot's
    /// ordinal is below it), and at open every slot is resolved against the store's live rows.
    pub async fn write_indexes(&self) {
        if let Some(store) = &self.store {
            self.write_index_set(store).await;
        }
    }

    /// Writes the shards' index images next to the store; a failure is logged, the next restart
    /// then rebuilds.
    async fn write_index_set(&self, store: &Store) {
        let Some(directory) = Path::new(store.file()).parent().map(Path::to_owned) else { return };
        let acl = self.acl();
        let shards = self.shards();
        let embedder = format!("{}/{}", self.embedder.name(), self.embedder.dimension());
        let written =
            tokio::task::spawn_blocking(move || crate::storage::indexes::write(&directory, &acl, &embedder, &shards))
                .await;
        match written {
            Ok(Ok(path)) => tracing::info!(set = %path.display(), "index set written"),
            Ok(Err(error)) => tracing::warn!(%error, "writing the index set failed; a restart rebuilds the indexes"),
            Err(error) => tracing::warn!(%error, "writing the index set failed; a restart rebuilds the indexes"),
        }
    }

    async fn embed_texts(&self, texts: Vec<String>) -> RetrievalResult<Vec<Vec<f32>>> {
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.params.embed_batch.max(1)) {
            let embedded = self.embedder.embed(batch).await?;
            if embedded.len() != batch.len() {
                return Err(crate::embed::EmbedError::Shape { expected: batch.len(), got: embedded.len() }.into());
            }
            vectors.extend(embedded);
        }
        Ok(vectors)
    }

    async fn index_chunks(&self, items: Vec<(Chunk, Vec<f32>)>) -> RetrievalResult<()> {
        let core = self.core.load_full();
        let mut per_shard: Vec<Vec<(Chunk, Vec<f32>)>> = vec![Vec::new(); core.shards.len()];
        for (chunk, vector) in items {
            per_shard[shard_of(&chunk.tenant, &chunk.doc_id, core.shards.len())].push((chunk, vector));
        }
        let replies = join_all(
            per_shard
                .into_iter()
                .enumerate()
                .filter(|(_, items)| !items.is_empty())
                .map(|(shard, items)| core.shard_actors[shard].send(IndexChunks(items))),
        )
        .await;
        for reply in replies {
            reply.map_err(|_| IndexError::Unavailable)??;
        }
        Ok(())
    }

    /// Best-effort physical cleanup of unreadable ordinals, in the background (correctness never
    /// depends on it: the ordinals are outside every scope already).
    fn purge_later(&self, ordinals: RoaringBitmap) {
        let ordinals = Arc::new(ordinals);
        let sends: Vec<_> = self
            .core
            .load()
            .shard_actors
            .iter()
            .map(|shard| shard.send(PurgeOrdinals(Arc::clone(&ordinals))))
            .collect();
        actix_rt::spawn(async move {
            for reply in join_all(sends).await {
                if !matches!(reply, Ok(Ok(()))) {
                    tracing::warn!("lexical purge failed on a shard; unreadable chunks stay until the next purge");
                }
            }
        });
    }

    /// The scope of `principal` under the current ACL snapshot.
    pub fn scope(&self, principal: &Principal) -> AuthorizationScope {
        self.core.load().acl.load().scope_for(principal)
    }

    /// Embeds a query of (`tenant`, `user`) through the bounded LRU cache (key: the principal and
    /// the whitespace-normalized lowercase text; entries are never shared between principals, so
    /// hit timing cannot reveal another user's questions).
    pub async fn embed_query(&self, tenant: &str, user: &str, text: &str) -> RetrievalResult<Arc<Vec<f32>>> {
        let key = QueryKey {
            tenant: tenant.to_owned(),
            user: user.to_owned(),
            text: text.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase(),
        };
        if let Some(hit) = self.lock_cache().get(&key) {
            return Ok(Arc::clone(hit));
        }
        let mut vectors = self.embedder.embed(std::slice::from_ref(&key.text)).await?;
        let vector = Arc::new(vectors.pop().ok_or(crate::embed::EmbedError::Shape { expected: 1, got: 0 })?);
        self.lock_cache().put(key, Arc::clone(&vector));
        Ok(vector)
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, LruCache<QueryKey, Arc<Vec<f32>>>> {
        self.query_cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Hybrid retrieval of `text` inside `scope`.
    pub async fn retrieve(&self, scope: &AuthorizationScope, text: &str) -> RetrievalResult<Retrieved> {
        if scope.is_empty() {
            return Ok(Retrieved::default());
        }
        let vector = self.embed_query(scope.tenant(), scope.user(), text).await?;
        let query = RetrievalQuery {
            text: text.to_owned(),
            vector: Some(vector.as_ref().clone()),
            lexical_candidates: self.params.lexical_candidates,
            vector_candidates: self.params.vector_candidates,
        };
        self.repository().retrieve(scope, &query).await
    }
}

/// What opening a data directory found.
#[derive(Clone, Debug)]
pub struct Recovery {
    /// Whether the store was created by this open.
    pub created: bool,
    /// Epoch of the checkpoint recovery started from.
    pub checkpoint_epoch: u64,
    /// Change batches replayed after it.
    pub replayed: usize,
    /// Live chunks loaded.
    pub chunks: usize,
    /// The database file.
    pub file: String,
    /// Whether the indexes were loaded from an index set or rebuilt.
    pub indexes: crate::storage::indexes::IndexSetOutcome,
}

pub(crate) fn to_document(tenant: &str, input: &DocumentInput, version: u64) -> Document {
    Document {
        tenant: tenant.to_owned(),
        doc_id: input.doc_id.clone(),
        version,
        title: input.title.clone(),
        text: input.text.clone(),
        acl: input.acl.clone(),
    }
}

/// Text embedded for a chunk: title and chunk text.
pub(crate) fn embedding_text(chunk: &Chunk) -> String {
    if chunk.title.is_empty() { chunk.text.clone() } else { format!("{}\n{}", chunk.title, chunk.text) }
}

/// Documents of a batch below which its CPU work stays on the calling task.
const OFF_THREAD_DOCUMENTS: usize = 8;

/// Runs the CPU work of a write (chunking, encoding: milliseconds per hundred documents) on the
/// blocking pool, so the async thread stays free for other requests — a revoke among them.
/// Small batches, and callers outside a tokio runtime, run it inline.
async fn off_thread<T: Send + 'static>(documents: usize, work: impl FnOnce() -> T + Send + 'static) -> T {
    if documents < OFF_THREAD_DOCUMENTS || tokio::runtime::Handle::try_current().is_err() {
        return work();
    }
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => value,
        Err(error) => std::panic::resume_unwind(error.into_panic()),
    }
}

/// A batch's rows: each document's chunks with their vectors, the encoded store rows (durable
/// engines), and the chunk count.
struct BatchRows {
    items: Vec<Vec<(Chunk, Vec<f32>)>>,
    encoded: Vec<EncodedDocument>,
    chunk_count: usize,
}

/// Chunks `documents` under `ordinals`, checks the cut is the one that was embedded
/// (`provisional`), pairs chunks with `vectors` and encodes the store rows when `encode`.
fn batch_rows(
    documents: &[Document],
    ordinals: std::ops::Range<crate::domain::DocOrdinal>,
    provisional: &[Vec<Chunk>],
    vectors: &[Vec<f32>],
    chunking: &ChunkingConfig,
    encode: bool,
) -> RetrievalResult<BatchRows> {
    let chunks: Vec<Vec<Chunk>> = documents
        .iter()
        .zip(ordinals.clone())
        .map(|(document, ordinal)| chunk_document(document, ordinal, chunking))
        .collect();
    let same_cut = chunks.iter().zip(provisional).all(|(real, first)| {
        real.len() == first.len() && real.iter().zip(first).all(|(a, b)| a.start == b.start && a.end == b.end)
    });
    if !same_cut {
        return Err(invalid("", "chunking changed between embedding and indexing (internal error)"));
    }
    let chunk_count = chunks.iter().map(Vec::len).sum();
    let mut vectors_left = vectors.iter();
    let items: Vec<Vec<(Chunk, Vec<f32>)>> = chunks
        .into_iter()
        .map(|document| {
            document.into_iter().map(|chunk| (chunk, vectors_left.next().cloned().unwrap_or_default())).collect()
        })
        .collect();
    let encoded = if encode {
        items
            .iter()
            .zip(ordinals)
            .map(|(document, ordinal)| {
                let refs: Vec<(&Chunk, &[f32])> =
                    document.iter().map(|(chunk, vector)| (chunk, vector.as_slice())).collect();
                EncodedDocument::encode(ordinal, &refs)
            })
            .collect()
    } else {
        Vec::new()
    };
    Ok(BatchRows { items, encoded, chunk_count })
}

fn invalid(doc_id: &str, reason: &str) -> RetrievalError {
    RetrievalError::InvalidDocument {
        doc_id: doc_id.chars().take(MAX_DOC_ID_CHARS).collect(),
        reason: reason.to_owned(),
    }
}

/// Validates a whole batch before anything is written.
pub(crate) fn validate_batch(inputs: &[DocumentInput]) -> RetrievalResult<()> {
    let mut seen = HashSet::new();
    for input in inputs {
        let doc_id = input.doc_id.as_str();
        if doc_id.trim().is_empty() {
            return Err(invalid(doc_id, "doc_id must not be empty"));
        }
        if doc_id.chars().count() > MAX_DOC_ID_CHARS {
            return Err(invalid(doc_id, "doc_id is longer than 256 characters"));
        }
        if doc_id.chars().any(char::is_control) {
            return Err(invalid(doc_id, "doc_id contains control characters"));
        }
        if !seen.insert(doc_id) {
            return Err(RetrievalError::Acl(crate::acl::AclError::DuplicateDocument { doc_id: doc_id.to_owned() }));
        }
        if input.text.trim().is_empty() {
            return Err(invalid(doc_id, "text must not be empty"));
        }
        if input.text.chars().count() > MAX_TEXT_CHARS {
            return Err(invalid(doc_id, "text is longer than 2000000 characters"));
        }
        if input.title.chars().count() > MAX_TITLE_CHARS {
            return Err(invalid(doc_id, "title is longer than 1000 characters"));
        }
        let names = input.acl.groups.iter().chain(&input.acl.users);
        if names.clone().any(|name| name.trim().is_empty() || name.chars().count() > schema::MAX_ACL_NAME_CHARS) {
            return Err(invalid(doc_id, "acl names must be 1..=256 characters"));
        }
        if input.version == Some(0) {
            return Err(invalid(doc_id, "version must be at least 1"));
        }
    }
    Ok(())
}
