//! One shard: a chunk store plus the vector and lexical indexes over it, and the actix actor
//! that serves it on a `SyncArbiter` (index work never runs on the async runtime's threads).
//!
//! A shard is built by inserts, or loaded from its images ([`Shard::load`]: the chunks of its
//! live slots, the vector index image and the lexical index image) without rebuilding either
//! index; a loaded shard is compacted instead (rebuilt from its live chunks with their stored
//! vectors, never re-embedded) when more than a quarter of its slots are dead, it holds more than
//! [`MAX_SEALED_GRAPHS`] sealed graphs, or its graphs were built with another M or
//! ef_construction than configured.
//!
//! Invariants: slot `s` names the same chunk in the chunk store, the vector index and the
//! lexical index; a slot loaded without a chunk (superseded or deleted before the image was
//! written) is dead: its ordinal is tombstoned, so it is outside every scope, and a hit on it is
//! dropped; a batch becomes visible in all three or in none; every hit a search returns
//! has its document ordinal inside the `allowed` bitmap it was given (checked again here in
//! debug builds and counted as a violation in release builds, where it is also dropped).

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use actix::{Actor, Handler, Message, SyncContext};
use roaring::RoaringBitmap;

use crate::domain::Chunk;

use super::lexical::{LexicalIndex, LexicalStatistics};
use super::vector::{VectorIndex, VectorParams, VectorReport};
use super::{Hit, IndexError, IndexResult, Slot};

mod image;
mod journal;

pub use image::{
    ChunkPositions, Compaction, DecodedShard, JournalReplay, LoadedShard, MAX_DEAD_FRACTION, MAX_SEALED_GRAPHS,
    ShardImage, ShardImageError,
};
pub use journal::{JournalSink, ShardDelta};

/// A hit resolved to its chunk.
#[derive(Clone, Debug)]
pub struct ShardHit {
    /// The chunk.
    pub chunk: Arc<Chunk>,
    /// Retriever score.
    pub score: f32,
}

struct ShardState {
    /// The chunk of every slot; `None` for a dead slot loaded from an image.
    chunks: Vec<Option<Arc<Chunk>>>,
    vector: VectorIndex,
    lexical: LexicalIndex,
}

/// Fewest threads per shard actor: the lexical and the vector search of one query run at once.
pub const MIN_THREADS_PER_SHARD: usize = 2;

/// Threads to serve each of `shards` shard actors: `configured` when positive, otherwise
/// enough that all shards together use every core `std::thread::available_parallelism`
/// reports (`ceil(cores / shards)`), and never fewer than [`MIN_THREADS_PER_SHARD`].
pub fn threads_per_shard(configured: usize, shards: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    sized_threads_per_shard(cores, shards)
}

/// [`threads_per_shard`] for `cores` cores.
fn sized_threads_per_shard(cores: usize, shards: usize) -> usize {
    cores.div_ceil(shards.max(1)).max(MIN_THREADS_PER_SHARD)
}

/// The data of one shard, shared by the threads of its actor.
pub struct Shard {
    id: usize,
    state: RwLock<ShardState>,
    /// Where the records of index changes go, when the shard is journaled (taken after
    /// `state`'s lock, never before it).
    journal: std::sync::Mutex<Option<journal::Journal>>,
}

/// Sizes of one shard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ShardStats {
    /// Chunks stored (including superseded ones not yet purged).
    pub chunks: usize,
    /// Vectors in the HNSW index.
    pub vectors: usize,
    /// Live tantivy documents.
    pub lexical_docs: u64,
}

impl Shard {
    /// An empty shard.
    pub fn new(id: usize, params: VectorParams) -> IndexResult<Self> {
        Ok(Self {
            id,
            state: RwLock::new(ShardState {
                chunks: Vec::new(),
                vector: VectorIndex::new(params),
                lexical: LexicalIndex::new()?,
            }),
            journal: std::sync::Mutex::new(None),
        })
    }

    /// Shard number.
    pub fn id(&self) -> usize {
        self.id
    }

    /// The stored chunks of one document version (`ordinal`), in document order. A linear scan
    /// of the shard's chunk list (pointers only): for reading one document, never on a hot path.
    pub fn chunks_of(&self, ordinal: crate::domain::DocOrdinal) -> Vec<Arc<Chunk>> {
        let mut chunks: Vec<Arc<Chunk>> =
            self.read().chunks.iter().flatten().filter(|chunk| chunk.doc_ordinal == ordinal).map(Arc::clone).collect();
        chunks.sort_by_key(|chunk| (chunk.start, chunk.ordinal));
        chunks
    }

    fn read(&self) -> RwLockReadGuard<'_, ShardState> {
        self.state.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, ShardState> {
        self.state.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn journal(&self) -> std::sync::MutexGuard<'_, Option<journal::Journal>> {
        self.journal.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts journaling every later index change into `sink`, the shard's current state being
    /// the journal's base, whose lexical index holds the segment files `known` (as
    /// [`Shard::export_image_journaled`] or a load from a base and its journal reports them).
    pub fn attach_journal(&self, sink: Box<dyn JournalSink>, known: BTreeSet<String>) {
        let _state = self.write();
        *self.journal() = Some(journal::Journal { sink, known, bytes: 0 });
    }

    /// Bytes journaled since the journal started (0 when the shard is not journaled).
    pub fn journal_bytes(&self) -> u64 {
        self.journal().as_ref().map_or(0, |journal| journal.bytes)
    }

    /// Whether index changes are journaled.
    pub fn journaled(&self) -> bool {
        self.journal().is_some()
    }

    /// Appends `delta` to the journal; a failure is logged and ends journaling (a restart then
    /// indexes what the journal lacks from the store's rows).
    fn append(&self, journal: &mut Option<journal::Journal>, delta: IndexResult<ShardDelta>) {
        let Some(open) = journal.as_mut() else { return };
        let appended = delta.map_err(|error| error.to_string()).and_then(|delta| {
            let payload = delta.encode();
            metrics::counter!("warrant_index_journal_bytes_total").increment(payload.len() as u64);
            open.bytes += payload.len() as u64;
            open.sink.append(&payload).map_err(|error| error.to_string())
        });
        if let Err(error) = appended {
            tracing::warn!(shard = self.id, %error, "the index journal failed; this shard stops journaling until the next index set");
            *journal = None;
        }
    }

    /// Adds chunks with their embeddings. Validates vectors first, then indexes lexically (with
    /// rollback on failure), then inserts vectors, then publishes the chunks: a failed batch
    /// leaves the shard unchanged.
    pub fn add(&self, items: Vec<(Chunk, Vec<f32>)>) -> IndexResult<()> {
        let mut state = self.write();
        let dimension = state.vector.dimension();
        for (_, vector) in &items {
            if vector.len() != dimension {
                return Err(IndexError::Dimension { expected: dimension, got: vector.len() });
            }
            if !vector.iter().all(|value| crate::index::distance::fits_half(*value)) {
                return Err(IndexError::NonFinite);
            }
        }
        let mut journal = self.journal();
        state.vector.track_changes(journal.is_some());
        let mark = state.vector.mark();
        let first = state.chunks.len() as Slot;
        let lexical_items: Vec<(Slot, u32, &str, &str)> = items
            .iter()
            .enumerate()
            .map(|(offset, (chunk, _))| {
                (first + offset as Slot, chunk.doc_ordinal, chunk.title.as_str(), chunk.text.as_str())
            })
            .collect();
        state.lexical.add_batch(&lexical_items)?;
        let vector_items: Vec<(Slot, u32, Vec<f32>)> = items
            .iter()
            .enumerate()
            .map(|(offset, (chunk, vector))| (first + offset as Slot, chunk.doc_ordinal, vector.clone()))
            .collect();
        state.vector.insert_batch(&vector_items)?;
        if journal.is_some() {
            let state = &mut *state;
            let delta = state.lexical.journal_delta(&mut journal.as_mut().expect("journaled").known).map(|lexical| {
                ShardDelta {
                    positions: items.iter().map(|(chunk, _)| chunk.ordinal).collect(),
                    vector: Some(state.vector.take_delta(mark)),
                    lexical,
                }
            });
            self.append(&mut journal, delta);
        }
        state.chunks.extend(items.into_iter().map(|(chunk, _)| Some(Arc::new(chunk))));
        Ok(())
    }

    /// BM25 top-k inside `allowed`, scored with `statistics` (the scope's over every shard) when
    /// given, else with the scope's statistics on this shard alone.
    pub fn search_lexical(
        &self,
        query: &str,
        k: usize,
        allowed: &RoaringBitmap,
        statistics: Option<&LexicalStatistics>,
    ) -> IndexResult<Vec<ShardHit>> {
        let state = self.read();
        let search = match statistics {
            Some(statistics) => state.lexical.search_with_statistics(query, k, allowed, statistics)?,
            None => state.lexical.search(query, k, allowed)?,
        };
        Ok(resolve(&state.chunks, search.hits, allowed))
    }

    /// The BM25 statistics of `query` inside `allowed` on this shard (first phase of a lexical
    /// search across shards).
    pub fn lexical_statistics(&self, query: &str, allowed: &RoaringBitmap) -> IndexResult<LexicalStatistics> {
        self.read().lexical.statistics(query, allowed)
    }

    /// Vector top-k inside `allowed`, with the planner's report.
    pub fn search_vector(&self, query: &[f32], k: usize, allowed: &RoaringBitmap) -> (Vec<ShardHit>, VectorReport) {
        let state = self.read();
        let search = state.vector.search(query, k, allowed);
        (resolve(&state.chunks, search.hits, allowed), search.report)
    }

    /// Builds one shard per entry of `items` (shard `i` from `items[i]`), one thread per shard
    /// (restore from a snapshot or from the data directory: no re-embedding).
    pub fn build_all(items: Vec<Vec<(Chunk, Vec<f32>)>>, params: VectorParams) -> IndexResult<Vec<Arc<Shard>>> {
        std::thread::scope(|scope| {
            let handles: Vec<_> = items
                .into_iter()
                .enumerate()
                .map(|(id, items)| {
                    scope.spawn(move || -> IndexResult<Arc<Shard>> {
                        let shard = Shard::new(id, params)?;
                        if !items.is_empty() {
                            shard.add(items)?;
                        }
                        Ok(Arc::new(shard))
                    })
                })
                .collect();
            handles.into_iter().map(|handle| handle.join().unwrap_or(Err(IndexError::Unavailable))).collect()
        })
    }

    /// Physically removes the chunks of tombstoned ordinals from the lexical index. (HNSW has no
    /// delete; their vectors stay until a rebuild and are excluded by every scope.)
    pub fn purge(&self, ordinals: &RoaringBitmap) -> IndexResult<()> {
        let mut state = self.write();
        state.lexical.delete_ordinals(ordinals)?;
        let mut journal = self.journal();
        if let Some(open) = journal.as_mut() {
            let delta = state
                .lexical
                .journal_delta(&mut open.known)
                .map(|lexical| ShardDelta { lexical, ..ShardDelta::default() });
            self.append(&mut journal, delta);
        }
        Ok(())
    }

    /// Current sizes.
    pub fn stats(&self) -> ShardStats {
        let state = self.read();
        ShardStats {
            chunks: state.chunks.iter().flatten().count(),
            vectors: state.vector.len(),
            lexical_docs: state.lexical.len(),
        }
    }

    /// Every stored chunk with its vector, in slot order (snapshots).
    pub fn export(&self) -> Vec<(Arc<Chunk>, Vec<f32>)> {
        let state = self.read();
        state
            .chunks
            .iter()
            .enumerate()
            .filter_map(|(slot, chunk)| Some((Arc::clone(chunk.as_ref()?), state.vector.vector(slot as Slot))))
            .collect()
    }
}

fn resolve(chunks: &[Option<Arc<Chunk>>], hits: Vec<Hit>, allowed: &RoaringBitmap) -> Vec<ShardHit> {
    hits.into_iter()
        .filter_map(|hit| {
            // A dead slot (no chunk) is tombstoned: outside every scope, never a violation.
            let chunk = chunks.get(hit.slot as usize)?.as_ref()?;
            let inside = allowed.contains(chunk.doc_ordinal);
            debug_assert!(inside, "index returned a hit outside the scope");
            if !inside {
                metrics::counter!("warrant_scope_violations_total").increment(1);
                return None;
            }
            Some(ShardHit { chunk: Arc::clone(chunk), score: hit.score })
        })
        .collect()
}

/// The actor serving one shard; run it on a `SyncArbiter` with a few threads sharing the
/// [`Shard`] so that lexical and vector searches of one query run concurrently.
pub struct ShardActor {
    shard: Arc<Shard>,
}

impl ShardActor {
    /// An actor over a shared shard.
    pub fn new(shard: Arc<Shard>) -> Self {
        Self { shard }
    }
}

impl Actor for ShardActor {
    type Context = SyncContext<Self>;
}

/// Index a batch of chunks with their vectors.
#[derive(Message)]
#[rtype(result = "IndexResult<()>")]
pub struct IndexChunks(pub Vec<(Chunk, Vec<f32>)>);

/// BM25 search inside a scope.
#[derive(Message)]
#[rtype(result = "IndexResult<Vec<ShardHit>>")]
pub struct SearchLexical {
    /// Query text.
    pub query: Arc<str>,
    /// Hits wanted.
    pub k: usize,
    /// Allowed document ordinals (the request's scope).
    pub allowed: Arc<RoaringBitmap>,
    /// BM25 statistics of the scope over every shard (see [`LexicalStatisticsRequest`]); `None`
    /// scores with this shard's own, which is the same when there is one shard.
    pub statistics: Option<Arc<LexicalStatistics>>,
}

/// Report the BM25 statistics of a query inside a scope on this shard, to be merged over the
/// shards and passed back in [`SearchLexical`] so that every shard scores with the same ones.
#[derive(Message)]
#[rtype(result = "IndexResult<LexicalStatistics>")]
pub struct LexicalStatisticsRequest {
    /// Query text.
    pub query: Arc<str>,
    /// Allowed document ordinals (the request's scope).
    pub allowed: Arc<RoaringBitmap>,
}

/// Vector search inside a scope.
#[derive(Message)]
#[rtype(result = "VectorShardResult")]
pub struct SearchVector {
    /// Query vector.
    pub query: Arc<[f32]>,
    /// Hits wanted.
    pub k: usize,
    /// Allowed document ordinals (the request's scope).
    pub allowed: Arc<RoaringBitmap>,
}

/// Reply to [`SearchVector`].
#[derive(Debug, actix::MessageResponse)]
pub struct VectorShardResult {
    /// Hits, best first.
    pub hits: Vec<ShardHit>,
    /// What the planner did.
    pub report: VectorReport,
}

/// Remove tombstoned ordinals from the lexical index.
#[derive(Message)]
#[rtype(result = "IndexResult<()>")]
pub struct PurgeOrdinals(pub Arc<RoaringBitmap>);

impl Handler<IndexChunks> for ShardActor {
    type Result = IndexResult<()>;
    fn handle(&mut self, message: IndexChunks, _: &mut SyncContext<Self>) -> Self::Result {
        self.shard.add(message.0)
    }
}

impl Handler<SearchLexical> for ShardActor {
    type Result = IndexResult<Vec<ShardHit>>;
    fn handle(&mut self, message: SearchLexical, _: &mut SyncContext<Self>) -> Self::Result {
        self.shard.search_lexical(&message.query, message.k, &message.allowed, message.statistics.as_deref())
    }
}

impl Handler<LexicalStatisticsRequest> for ShardActor {
    type Result = IndexResult<LexicalStatistics>;
    fn handle(&mut self, message: LexicalStatisticsRequest, _: &mut SyncContext<Self>) -> Self::Result {
        self.shard.lexical_statistics(&message.query, &message.allowed)
    }
}

impl Handler<SearchVector> for ShardActor {
    type Result = VectorShardResult;
    fn handle(&mut self, message: SearchVector, _: &mut SyncContext<Self>) -> Self::Result {
        let (hits, report) = self.shard.search_vector(&message.query, message.k, &message.allowed);
        VectorShardResult { hits, report }
    }
}

impl Handler<PurgeOrdinals> for ShardActor {
    type Result = IndexResult<()>;
    fn handle(&mut self, message: PurgeOrdinals, _: &mut SyncContext<Self>) -> Self::Result {
        self.shard.purge(&message.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_per_shard_follows_the_cores_unless_configured() {
        assert_eq!(threads_per_shard(3, 4), 3);
        assert!(threads_per_shard(0, 1) >= MIN_THREADS_PER_SHARD);
        // The 16-core machine with 4 shards: 4 threads each instead of a fixed 2.
        assert_eq!(sized_threads_per_shard(16, 4), 4);
        assert_eq!(sized_threads_per_shard(16, 3), 6);
        assert_eq!(sized_threads_per_shard(2, 4), MIN_THREADS_PER_SHARD);
        assert_eq!(sized_threads_per_shard(64, 4), 16);
        assert_eq!(sized_threads_per_shard(8, 0), 8);
    }
}
