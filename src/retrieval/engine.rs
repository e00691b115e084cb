//! The engine facade: owns the ACL store, the shard actors and the embedder; runs the write path
//! (validate → chunk → embed → index → publish ACL) and builds scoped retrieval for a principal.
//!
//! Write-path invariant: chunks are indexed under fresh ordinals *before* the ACL snapshot that
//! makes them readable is published, and the same publish tombstones the previous version, so
//! readers see either the old version or the new one, never both and never a half batch. A batch
//! that fails anywhere publishes nothing; its already indexed chunks stay unreadable forever
//! (their ordinals are never published) and are purged from the lexical index.

use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use actix::{Addr, SyncArbiter};
use futures::future::join_all;
use lru::LruCache;
use roaring::RoaringBitmap;
use serde::Deserialize;

use crate::acl::{AclMutation, AclStore, AuthorizationScope};
use crate::config::Settings;
use crate::domain::{Chunk, ChunkingConfig, DocAcl, Document, Principal, chunk_document, schema};
use crate::embed::Embedder;
use crate::index::IndexError;
use crate::index::shard::{IndexChunks, PurgeOrdinals, Shard, ShardActor, ShardStats};
use crate::index::vector::VectorParams;

use super::coordinator::{Coordinator, EmbeddedRepository};
use super::{IdentityReranker, RetrievalError, RetrievalQuery, RetrievalRepository, RetrievalResult, Retrieved};

/// Threads serving each shard actor (lexical and vector search of one query run concurrently).
const THREADS_PER_SHARD: usize = 2;
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
        }
    }
}

/// The engine. Create it inside a running actix System.
pub struct Engine {
    acl: Arc<AclStore>,
    shards: Vec<Arc<Shard>>,
    shard_actors: Vec<Addr<ShardActor>>,
    repository: Arc<dyn RetrievalRepository>,
    embedder: Arc<dyn Embedder>,
    params: EngineParams,
    writer: tokio::sync::Mutex<()>,
    query_cache: Mutex<LruCache<QueryKey, Arc<Vec<f32>>>>,
}

/// Query-cache key: the asking tenant and the normalized text. Keyed per tenant so a cache hit
/// (a faster answer) never tells one tenant what another tenant asked recently.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct QueryKey {
    tenant: String,
    text: String,
}

impl Engine {
    /// Starts shard actors and the coordinator. Must run inside an actix System.
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
        if embedder.dimension() != params.vector.dimension {
            return Err(RetrievalError::Index(IndexError::Dimension {
                expected: params.vector.dimension,
                got: embedder.dimension(),
            }));
        }
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
                SyncArbiter::start(THREADS_PER_SHARD, move || ShardActor::new(Arc::clone(&shard)))
            })
            .collect();
        let coordinator = actix::Actor::start(Coordinator::new(shard_actors.clone()));
        let repository = Arc::new(EmbeddedRepository::new(coordinator, params.rrf_k, Arc::new(IdentityReranker)));
        let cache_size = NonZeroUsize::new(params.query_cache.max(1)).expect("at least one");
        Ok(Arc::new(Self {
            acl,
            shards,
            shard_actors,
            repository,
            embedder,
            params,
            writer: tokio::sync::Mutex::new(()),
            query_cache: Mutex::new(LruCache::new(cache_size)),
        }))
    }

    /// The ACL store.
    pub fn acl(&self) -> &Arc<AclStore> {
        &self.acl
    }

    /// The embedder.
    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }

    /// The shards (snapshots, stats).
    pub fn shards(&self) -> &[Arc<Shard>] {
        &self.shards
    }

    /// The retrieval repository.
    pub fn repository(&self) -> &Arc<dyn RetrievalRepository> {
        &self.repository
    }

    /// Engine parameters.
    pub fn params(&self) -> &EngineParams {
        &self.params
    }

    /// Sizes of every shard.
    pub fn stats(&self) -> Vec<ShardStats> {
        self.shards.iter().map(|shard| shard.stats()).collect()
    }

    /// Shard of a document: a stable hash of (tenant, doc_id).
    pub fn shard_of(&self, tenant: &str, doc_id: &str) -> usize {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        hasher.update(tenant.as_bytes());
        hasher.update([0]);
        hasher.update(doc_id.as_bytes());
        let digest = hasher.finalize();
        (u64::from_le_bytes(digest[..8].try_into().expect("8 bytes")) % self.shards.len() as u64) as usize
    }

    /// Upserts a batch of documents into `tenant`, all or nothing.
    pub async fn upsert(&self, tenant: &str, inputs: Vec<DocumentInput>) -> RetrievalResult<UpsertOutcome> {
        validate_batch(&inputs)?;
        let _writer = self.writer.lock().await;
        let snapshot = self.acl.load();
        let mut documents = Vec::with_capacity(inputs.len());
        for input in inputs {
            let current = snapshot.entry(tenant, &input.doc_id).map(|entry| entry.version);
            let version = match (input.version, current) {
                (Some(version), Some(current)) if version <= current => {
                    return Err(RetrievalError::Acl(crate::acl::AclError::StaleVersion {
                        doc_id: input.doc_id,
                        current,
                    }));
                }
                (Some(version), _) => version,
                (None, Some(current)) => current + 1,
                (None, None) => 1,
            };
            documents.push(Document {
                tenant: tenant.to_owned(),
                doc_id: input.doc_id,
                version,
                title: input.title,
                text: input.text,
                acl: input.acl,
            });
        }
        let ordinals = self.acl.reserve_ordinals(documents.len() as u32);
        let chunks: Vec<Chunk> = documents
            .iter()
            .zip(ordinals.clone())
            .flat_map(|(document, ordinal)| chunk_document(document, ordinal, &self.params.chunking))
            .collect();
        let chunk_count = chunks.len();
        let indexed = self.index_chunks(chunks).await;
        if let Err(error) = indexed {
            self.purge(ordinals.clone().collect()).await;
            return Err(error);
        }
        let mutations = documents
            .iter()
            .zip(ordinals.clone())
            .map(|(document, ordinal)| AclMutation::Upsert {
                tenant: document.tenant.clone(),
                doc_id: document.doc_id.clone(),
                version: document.version,
                ordinal,
                title: document.title.clone(),
                acl: document.acl.clone(),
            })
            .collect();
        let previous = snapshot.tombstones().clone();
        let epoch = match self.acl.apply(mutations) {
            Ok(epoch) => epoch,
            Err(error) => {
                self.purge(ordinals.collect()).await;
                return Err(error.into());
            }
        };
        let superseded = self.acl.load().tombstones() - &previous;
        if !superseded.is_empty() {
            self.purge(superseded).await;
        }
        metrics::gauge!("warrant_acl_epoch").set(epoch as f64);
        Ok(UpsertOutcome { acl_epoch: epoch, documents: documents.len(), chunks: chunk_count })
    }

    /// Applies one ACL mutation (delete, grant, revoke) and publishes it.
    pub async fn mutate(&self, mutation: AclMutation) -> RetrievalResult<u64> {
        let _writer = self.writer.lock().await;
        let before = self.acl.load().tombstones().clone();
        let epoch = self.acl.apply(vec![mutation])?;
        metrics::gauge!("warrant_acl_epoch").set(epoch as f64);
        let removed = self.acl.load().tombstones() - &before;
        if !removed.is_empty() {
            self.purge(removed).await;
        }
        Ok(epoch)
    }

    /// Runs `capture` while no write (upsert, mutation, remote apply) is in progress, so the ACL
    /// state and the shards it sees are consistent with each other (snapshots).
    pub async fn quiesced<T>(&self, capture: impl FnOnce(&AclStore, &[Arc<Shard>]) -> T) -> T {
        let _writer = self.writer.lock().await;
        capture(&self.acl, &self.shards)
    }

    /// Applies changes received from a primary's feed (replicas), in order, under the writer
    /// lock; ordinals tombstoned by them are purged from the lexical indexes.
    pub async fn apply_remote(&self, changes: &[crate::acl::AclChange]) -> RetrievalResult<u64> {
        let _writer = self.writer.lock().await;
        let before = self.acl.load().tombstones().clone();
        let epoch = self.acl.apply_remote(changes)?;
        metrics::gauge!("warrant_acl_epoch").set(epoch as f64);
        let removed = self.acl.load().tombstones() - &before;
        if !removed.is_empty() {
            self.purge(removed).await;
        }
        Ok(epoch)
    }

    async fn index_chunks(&self, chunks: Vec<Chunk>) -> RetrievalResult<()> {
        let mut vectors = Vec::with_capacity(chunks.len());
        for batch in chunks.chunks(self.params.embed_batch.max(1)) {
            let texts: Vec<String> = batch.iter().map(embedding_text).collect();
            let embedded = self.embedder.embed(&texts).await?;
            if embedded.len() != texts.len() {
                return Err(crate::embed::EmbedError::Shape { expected: texts.len(), got: embedded.len() }.into());
            }
            vectors.extend(embedded);
        }
        let mut per_shard: Vec<Vec<(Chunk, Vec<f32>)>> = vec![Vec::new(); self.shards.len()];
        for (chunk, vector) in chunks.into_iter().zip(vectors) {
            let shard = self.shard_of(&chunk.tenant, &chunk.doc_id);
            per_shard[shard].push((chunk, vector));
        }
        let replies = join_all(
            per_shard
                .into_iter()
                .enumerate()
                .filter(|(_, items)| !items.is_empty())
                .map(|(shard, items)| self.shard_actors[shard].send(IndexChunks(items))),
        )
        .await;
        for reply in replies {
            reply.map_err(|_| IndexError::Unavailable)??;
        }
        Ok(())
    }

    /// Best-effort physical cleanup of unreadable ordinals (correctness never depends on it).
    async fn purge(&self, ordinals: RoaringBitmap) {
        let ordinals = Arc::new(ordinals);
        let replies =
            join_all(self.shard_actors.iter().map(|shard| shard.send(PurgeOrdinals(Arc::clone(&ordinals))))).await;
        for reply in replies {
            if !matches!(reply, Ok(Ok(()))) {
                tracing::warn!("lexical purge failed on a shard; unreadable chunks stay until the next purge");
            }
        }
    }

    /// The scope of `principal` under the current ACL snapshot.
    pub fn scope(&self, principal: &Principal) -> AuthorizationScope {
        self.acl.load().scope_for(principal)
    }

    /// Embeds a query of `tenant` through the bounded LRU cache (key: the tenant and the
    /// whitespace-normalized lowercase text; entries are never shared across tenants, so hit
    /// timing cannot reveal another tenant's questions).
    pub async fn embed_query(&self, tenant: &str, text: &str) -> RetrievalResult<Arc<Vec<f32>>> {
        let key = QueryKey {
            tenant: tenant.to_owned(),
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
        let vector = self.embed_query(scope.tenant(), text).await?;
        let query = RetrievalQuery {
            text: text.to_owned(),
            vector: Some(vector.as_ref().clone()),
            lexical_candidates: self.params.lexical_candidates,
            vector_candidates: self.params.vector_candidates,
        };
        self.repository.retrieve(scope, &query).await
    }
}

/// Text embedded for a chunk: title and chunk text.
fn embedding_text(chunk: &Chunk) -> String {
    if chunk.title.is_empty() { chunk.text.clone() } else { format!("{}\n{}", chunk.title, chunk.text) }
}

fn invalid(doc_id: &str, reason: &str) -> RetrievalError {
    RetrievalError::InvalidDocument {
        doc_id: doc_id.chars().take(MAX_DOC_ID_CHARS).collect(),
        reason: reason.to_owned(),
    }
}

/// Validates a whole batch before anything is written.
fn validate_batch(inputs: &[DocumentInput]) -> RetrievalResult<()> {
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
