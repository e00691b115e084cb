//! In-memory HNSW vector index (Malkov & Yashunin 2018; the graph built here over flat arrays,
//! `index/live.rs`) over unit vectors with cosine similarity, whose search applies an
//! authorization bitmap *inside* the search.
//!
//! A selectivity planner (`planner.rs`) picks, per query, between
//! - [`VectorStrategy::Exact`]: a bounded top-k scan over exactly the allowed vectors, when they
//!   are few (absolutely or as a fraction of the index, or below the measured cost crossing),
//!   where a filtered graph walk would visit most of the graph to find k allowed nodes;
//! - [`VectorStrategy::Graph`]: a filtered walk of the HNSW graph (`walk.rs`): greedy descent of
//!   the upper layers, then a best-first search of layer 0 that traverses every node (keeping
//!   the graph connected) but only lets allowed nodes into the result set, and stops by the
//!   standard rule once the closest unexpanded candidate is farther than the worst of the `ef`
//!   allowed results. It reads the graphs' adjacency arrays directly ([`Adjacency`]); the walks
//!   the benchmark compares it with (hnsw_rs `search_filter` and the old best-first walk, over a
//!   reference graph hnsw_rs builds from the same vectors) are in `lab.rs`, called only by
//!   `warrant-bench` and the tests;
//! - [`VectorStrategy::Empty`]: nothing in this index is allowed, so no work is done.
//!
//! The vectors live in one flat array of aligned rows of binary16 components (`store.rs`),
//! scored against the f32 query by [`dot_half`]. An index decoded from an
//! image ([`VectorIndex::decode_image`], `vector/image.rs`) keeps the image's graphs sealed
//! (read-only [`FrozenGraph`]s over consecutive slot ranges) but the last, which becomes the
//! live graph again and takes later inserts; every graph walk covers all graphs of the index under
//! the same scope and merges them into one top-k.
//!
//! Invariants kept by this module:
//! - a search never returns a slot whose document ordinal is outside `allowed`;
//! - slots are dense and append-only (`0..len`): slot `s` owns row `s` of the vector store,
//!   `ordinals[s]` and node `s - base` of the live graph (or a node of a sealed one);
//! - a batch insert validates every item before touching any structure (all or nothing);
//! - hits are sorted by descending cosine similarity, ties by ascending slot, and scored by the
//!   same dot product whichever strategy found them.

use roaring::RoaringBitmap;

mod delta;
mod image;
mod lab;
mod planner;
mod store;
mod walk;

pub use delta::VectorDelta;
pub use image::{BuildParams, DecodedVectors, GRAPH_MAGIC, GRAPH_VERSION, NO_CHUNK};
pub(crate) use lab::GraphWalk;
pub use lab::HnswRsReference;
pub(crate) use lab::distance_count;
pub use planner::{CALIBRATION_MIN_LEN, PlannerCosts};
use store::VectorStore;

use super::distance::{Half, dot_half, from_half};
use super::frozen::{Adjacency, FrozenGraph};
use super::live::LiveGraph;
use super::{Hit, IndexError, IndexResult, Slot, WorseFirst, sort_best_first};
use crate::domain::DocOrdinal;

/// Largest `max_connections` (M) accepted (hnsw_rs, the benchmark's reference, exits the
/// process above it).
pub const MAX_CONNECTIONS_LIMIT: usize = 256;

/// Highest layer a decoded graph may have (images written by hnsw_rs-built graphs had up to 16).
const MAX_LAYER: usize = 16;

/// Tuning of one vector index.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VectorParams {
    /// Vector dimension.
    pub dimension: usize,
    /// HNSW max connections per node (M); at most [`MAX_CONNECTIONS_LIMIT`].
    pub max_connections: usize,
    /// HNSW candidate list size at construction.
    pub ef_construction: usize,
    /// HNSW result pool of an unfiltered search (raised to k when smaller); a filtered walk
    /// keeps `ef_search * sqrt(selectivity)` (`walk_ef`), a two-hop one
    /// `ef_search * selectivity^0.25` (`two_hop_ef`).
    pub ef_search: usize,
    /// Scan exactly when at most this many vectors are allowed.
    pub exact_scan_threshold: usize,
    /// Also scan exactly when the allowed fraction of the index is at most this.
    pub exact_scan_max_fraction: f64,
}

impl VectorParams {
    /// Defaults tuned on 50 000 clustered 384-d unit vectors (see `bench::filtered`).
    pub fn with_dimension(dimension: usize) -> Self {
        Self {
            dimension,
            max_connections: 16,
            ef_construction: 200,
            ef_search: 96,
            exact_scan_threshold: 4096,
            exact_scan_max_fraction: 0.2,
        }
    }
}

/// How the planner answered one search.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VectorStrategy {
    /// Bounded top-k scan over exactly the allowed vectors.
    Exact,
    /// Filtered HNSW walk.
    Graph,
    /// Nothing in this index is allowed: no work done.
    Empty,
}

impl VectorStrategy {
    /// Stable name for logs and metrics labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::Graph => "graph",
            Self::Empty => "empty",
        }
    }
}

/// What one search cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct VectorReport {
    /// The strategy the planner chose.
    pub strategy: VectorStrategy,
    /// Allowed vectors in this index. Exact for `Exact` and `Empty`; for `Graph` the planner
    /// stops counting as soon as the count exceeds the exact-scan limit, so this is a lower bound
    /// (the limit plus one).
    pub allowed: usize,
    /// Query-to-vector distance evaluations (exact: the allowed count; graph: measured).
    pub distance_computations: usize,
}

/// Result of one filtered search.
#[derive(Clone, Debug)]
pub struct VectorSearch {
    /// Best first; score is cosine similarity; ties by ascending slot.
    pub hits: Vec<Hit>,
    /// Planner decision and cost.
    pub report: VectorReport,
}

/// In-memory HNSW index of one shard's chunk vectors.
pub struct VectorIndex {
    params: VectorParams,
    /// Every slot's vector and document ordinal.
    store: VectorStore,
    /// Graphs loaded from an index image ([`VectorIndex::decode_image`]), read-only, over
    /// consecutive slot ranges starting at 0; the live graph covers the slots after them.
    sealed: Vec<FrozenGraph>,
    /// The live graph, which takes inserts: its node `n` is slot `live.base() + n`.
    live: LiveGraph,
    /// Graphs decoded from an image (0 when built by inserts).
    loaded_graphs: usize,
    /// Measured strategy costs; `None` until the index reaches [`CALIBRATION_MIN_LEN`] vectors
    /// (the fixed threshold and fraction rule applies until then).
    costs: Option<PlannerCosts>,
    /// Index size at the last calibration (recalibrated when the index doubles).
    calibrated_len: usize,
}

impl std::fmt::Debug for VectorIndex {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("VectorIndex")
            .field("params", &self.params)
            .field("len", &self.len())
            .field("documents", &self.store.documents())
            .finish_non_exhaustive()
    }
}

impl VectorIndex {
    /// An empty index. `params` must be valid (the config layer checks them); `max_connections`
    /// is clamped to `2..=`[`MAX_CONNECTIONS_LIMIT`].
    pub fn new(params: VectorParams) -> Self {
        debug_assert!(params.dimension > 0, "vector dimension must be positive");
        debug_assert!(params.max_connections <= MAX_CONNECTIONS_LIMIT, "max_connections above the limit");
        Self {
            params,
            store: VectorStore::new(params.dimension),
            sealed: Vec::new(),
            live: Self::live_graph(&params, 0),
            loaded_graphs: 0,
            costs: None,
            calibrated_len: 0,
        }
    }

    /// Number of vectors.
    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// Whether the index holds no vector.
    pub fn is_empty(&self) -> bool {
        self.store.len() == 0
    }

    /// Vector dimension.
    pub fn dimension(&self) -> usize {
        self.params.dimension
    }

    /// The parameters the index was created with.
    pub fn params(&self) -> &VectorParams {
        &self.params
    }

    /// Changes the search-time tuning (`ef_search` and the planner limits); the graph is
    /// unaffected. Values must be valid as for [`VectorIndex::new`].
    pub fn set_search_tuning(&mut self, ef_search: usize, exact_scan_threshold: usize, exact_scan_max_fraction: f64) {
        self.params.ef_search = ef_search;
        self.params.exact_scan_threshold = exact_scan_threshold;
        self.params.exact_scan_max_fraction = exact_scan_max_fraction;
    }

    /// Appends vectors; slots must be exactly `len()`, `len() + 1`, ... and vectors must have
    /// `dimension` finite components within ±[`HALF_MAX`](super::distance::HALF_MAX) (they are
    /// stored rounded to binary16). The whole batch is validated first: on error nothing is
    /// inserted.
    pub fn insert_batch(&mut self, items: &[(Slot, DocOrdinal, Vec<f32>)]) -> IndexResult<()> {
        let dimension = self.dimension();
        for (offset, (slot, _, vector)) in items.iter().enumerate() {
            let expected = Slot::try_from(self.len() + offset).expect("slot space exhausted");
            if *slot != expected {
                return Err(IndexError::SlotOrder { expected, got: *slot });
            }
            if vector.len() != dimension {
                return Err(IndexError::Dimension { expected: dimension, got: vector.len() });
            }
            if !vector.iter().all(|value| crate::index::distance::fits_half(*value)) {
                return Err(IndexError::NonFinite);
            }
        }
        self.store.reserve(items.len());
        self.live.reserve(items.len());
        for (_, ordinal, vector) in items {
            self.store.push(*ordinal, vector);
        }
        let store = &self.store;
        self.live.extend(items.len(), |slot| store.row(slot));
        debug_assert_eq!(self.live.base() as usize + self.live.nodes(), self.len());
        if self.len() >= CALIBRATION_MIN_LEN && self.len() >= 2 * self.calibrated_len {
            self.calibrate();
        }
        Ok(())
    }

    /// An empty live graph for this index's parameters, its first node slot `base`.
    fn live_graph(params: &VectorParams, base: Slot) -> LiveGraph {
        LiveGraph::new(base, Self::live_connections(params), params.ef_construction)
    }

    /// The M a live graph of `params` is built with.
    fn live_connections(params: &VectorParams) -> usize {
        params.max_connections.clamp(2, MAX_CONNECTIONS_LIMIT)
    }

    /// Bytes held by this index's arrays (vectors, ordinals, every graph's adjacency), not
    /// counting the per-document maps.
    pub fn own_heap_bytes(&self) -> usize {
        self.store.heap_bytes()
            + self.live.heap_bytes()
            + self.sealed.iter().map(FrozenGraph::heap_bytes).sum::<usize>()
    }

    /// The stored vector of `slot`, widened to f32 (what was inserted, rounded to binary16;
    /// panics when out of range).
    pub fn vector(&self, slot: Slot) -> Vec<f32> {
        from_half(self.store.row(slot))
    }

    /// The stored binary16 row of `slot` (panics when out of range).
    #[inline]
    pub(crate) fn row(&self, slot: Slot) -> &[Half] {
        self.store.row(slot)
    }

    /// The score every search gives `slot` for `query`: [`dot_half`] with its stored row.
    #[inline]
    pub fn score(&self, query: &[f32], slot: Slot) -> f32 {
        dot_half(query, self.store.row(slot))
    }

    /// The document ordinal of `slot` (panics when out of range).
    pub fn doc_ordinal(&self, slot: Slot) -> DocOrdinal {
        self.store.ordinal(slot)
    }

    /// Top-k among vectors whose document ordinal is in `allowed`; never returns anything
    /// outside it. `query` must have `dimension` components (otherwise: no hits, `Empty`).
    pub fn search(&self, query: &[f32], k: usize, allowed: &RoaringBitmap) -> VectorSearch {
        self.planned_search(query, k, allowed, |query, k, allowed, reach| self.graph_top_k(query, k, allowed, reach))
    }
}

#[cfg(test)]
mod tests;
