//! In-memory HNSW vector index (Malkov & Yashunin 2018, via hnsw_rs) over unit vectors with
//! cosine similarity, whose search applies an authorization bitmap *inside* the search.
//!
//! A selectivity planner (`planner.rs`) picks, per query, between
//! - [`VectorStrategy::Exact`]: a bounded top-k scan over exactly the allowed vectors, when they
//!   are few (absolutely or as a fraction of the index, or below the measured cost crossing),
//!   where a filtered graph walk would visit most of the graph to find k allowed nodes;
//! - [`VectorStrategy::Graph`]: a filtered walk of the HNSW graph (`walk.rs`): greedy descent of
//!   the upper layers, then a best-first search of layer 0 that traverses every node (keeping
//!   the graph connected) but only lets allowed nodes into the result set, and stops by the
//!   standard rule once the closest unexpanded candidate is farther than the worst of the `ef`
//!   allowed results. It reads a lock-free [`FrozenGraph`] copy of the adjacency; the walks the
//!   benchmark compares it with (hnsw_rs `search_filter`, the old best-first walk over hnsw_rs
//!   nodes) exist only with the `lab` feature (`lab.rs`);
//! - [`VectorStrategy::Empty`]: nothing in this index is allowed, so no work is done.
//!
//! The vectors live in one flat array of aligned rows (`store.rs`). An index decoded from an
//! image ([`VectorIndex::decode_image`], `vector/image.rs`) keeps the image's graphs sealed
//! (read-only [`FrozenGraph`]s over consecutive slot ranges) and inserts into a fresh hnsw_rs
//! graph after them; every graph walk covers all graphs of the index under the same scope and
//! merges them into one top-k.
//!
//! Invariants kept by this module:
//! - a search never returns a slot whose document ordinal is outside `allowed`;
//! - slots are dense and append-only (`0..len`): slot `s` owns row `s` of the vector store,
//!   `ordinals[s]` and HNSW data id `s - base` of the live graph (or a node of a sealed one);
//! - a batch insert validates every item before touching any structure (all or nothing);
//! - hits are sorted by descending cosine similarity, ties by ascending slot, and scored by the
//!   same dot product whichever strategy found them.

use std::sync::Arc;

use hnsw_rs::anndists::dist::distances::Distance;
use hnsw_rs::hnsw::{Hnsw, Point};
use roaring::RoaringBitmap;

mod image;
#[cfg(any(test, feature = "lab"))]
mod lab;
mod planner;
mod store;
mod walk;

pub use image::{BuildParams, DecodedVectors, GRAPH_MAGIC, GRAPH_VERSION, NO_CHUNK};
#[cfg(any(test, feature = "lab"))]
pub(crate) use lab::GraphWalk;
#[cfg(feature = "lab")]
pub(crate) use lab::distance_count;
pub use planner::{CALIBRATION_MIN_LEN, PlannerCosts};
use store::VectorStore;

use super::distance::dot;
use super::frozen::FrozenGraph;
use super::{Hit, IndexError, IndexResult, Slot, WorseFirst, sort_best_first};
use crate::domain::DocOrdinal;

/// Largest `max_connections` hnsw_rs accepts (it calls `process::exit` above it).
pub const MAX_CONNECTIONS_LIMIT: usize = 256;

/// Layers of the graph; 16 is what hnsw_rs requires to dump an index to disk.
const MAX_LAYER: usize = 16;

/// Batches at least this large are inserted with hnsw_rs `parallel_insert_slice` (rayon).
const PARALLEL_INSERT_MIN: usize = 1024;

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
    /// keeps `ef_search * sqrt(selectivity)` (`walk_ef`).
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

/// Cosine distance `1 - dot` on unit vectors, clamped at 0 (hnsw_rs asserts distances are
/// non-negative, and rounding can push `dot` of near-identical vectors above 1): the live
/// graph's metric. With the lab walks compiled in, every evaluation is counted on this thread
/// (that is how hnsw_rs' own walks are measured).
#[derive(Clone, Copy, Debug, Default)]
struct Cosine;

impl Distance<f32> for Cosine {
    fn eval(&self, left: &[f32], right: &[f32]) -> f32 {
        #[cfg(any(test, feature = "lab"))]
        lab::count_distances(1);
        (1.0 - dot(left, right)).max(0.0)
    }
}

/// In-memory HNSW index of one shard's chunk vectors.
pub struct VectorIndex {
    params: VectorParams,
    /// Every slot's vector and document ordinal.
    store: VectorStore,
    /// Graphs loaded from an index image ([`VectorIndex::decode`]), read-only, over consecutive
    /// slot ranges starting at 0; the live graph covers the slots after them.
    sealed: Vec<FrozenGraph>,
    /// First slot of the live graph (the slots of the sealed graphs before it).
    base: Slot,
    /// The live graph, which takes inserts: hnsw_rs data id `n` is slot `base + n`.
    graph: Hnsw<'static, f32, Cosine>,
    /// The live graph's node of every slot from `base` on (index `n` is slot `base + n`), so
    /// the best-first walk can read neighbour lists; refreshed after every insert.
    points: Vec<Arc<Point<'static, f32>>>,
    /// Local id of a node of the live graph's top layer: where its walk starts its descent.
    entry: Option<Slot>,
    /// Lock-free copy of the live graph's adjacency that the graph walk reads;
    /// refreshed after every insert.
    frozen: FrozenGraph,
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
    /// is clamped to [`MAX_CONNECTIONS_LIMIT`] because hnsw_rs exits the process above it.
    pub fn new(params: VectorParams) -> Self {
        debug_assert!(params.dimension > 0, "vector dimension must be positive");
        debug_assert!(params.max_connections <= MAX_CONNECTIONS_LIMIT, "max_connections above the hnsw_rs limit");
        let max_connections = params.max_connections.clamp(2, MAX_CONNECTIONS_LIMIT);
        let graph = Hnsw::new(max_connections, 0, MAX_LAYER, params.ef_construction.max(1), Cosine);
        Self {
            params,
            store: VectorStore::new(params.dimension),
            sealed: Vec::new(),
            base: 0,
            graph,
            points: Vec::new(),
            entry: None,
            frozen: FrozenGraph::empty(0),
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
    /// `dimension` finite components. The whole batch is validated first: on error nothing is
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
            if !vector.iter().all(|value| value.is_finite()) {
                return Err(IndexError::NonFinite);
            }
        }
        let first = self.len();
        self.store.reserve(items.len());
        for (_, ordinal, vector) in items {
            self.store.push(*ordinal, vector);
        }
        let base = self.base as usize;
        let batch: Vec<(&[f32], usize)> =
            (first..self.len()).map(|slot| (self.vector(slot as Slot), slot - base)).collect();
        if batch.len() >= PARALLEL_INSERT_MIN {
            self.graph.parallel_insert_slice(&batch);
        } else {
            for item in batch {
                self.graph.insert_slice(item);
            }
        }
        debug_assert_eq!(self.graph.get_nb_point(), self.len() - base);
        self.refresh_points(first - base);
        if self.len() >= CALIBRATION_MIN_LEN && self.len() >= 2 * self.calibrated_len {
            self.calibrate();
        }
        Ok(())
    }

    /// Appends the live graph's nodes `first..` (local ids) to `points` and refreshes `entry`.
    /// hnsw_rs only exposes its nodes through layer iterators, so this visits every node once
    /// (an `Arc` clone each: O(len) per batch, not measured separately); neighbour lists stay
    /// behind the nodes' locks, so older entries never go stale.
    fn refresh_points(&mut self, first: usize) {
        let indexation = self.graph.get_point_indexation();
        let top = indexation.get_max_level_observed() as usize;
        let nodes = self.len() - self.base as usize;
        let mut fresh: Vec<(usize, Arc<Point<'static, f32>>)> = Vec::with_capacity(nodes - first);
        for layer in 0..=top {
            fresh.extend(
                indexation
                    .get_layer_iterator(layer)
                    .filter(|point| point.get_origin_id() >= first)
                    .map(|point| (point.get_origin_id(), point)),
            );
        }
        fresh.sort_unstable_by_key(|(slot, _)| *slot);
        debug_assert!(fresh.iter().map(|(node, _)| *node).eq(first..nodes), "one graph node per new slot");
        self.points.extend(fresh.into_iter().map(|(_, point)| point));
        self.entry = indexation
            .get_layer_iterator(top)
            .next()
            .map(|point| Slot::try_from(point.get_origin_id()).expect("hnsw data ids are slots"));
        self.frozen = FrozenGraph::freeze(&self.points, self.entry, top, self.base);
    }

    /// Bytes held by this index's own arrays (vectors, ordinals, frozen adjacency), not counting
    /// hnsw_rs' graph (which holds its own copy of every vector) or the per-document maps.
    pub fn own_heap_bytes(&self) -> usize {
        self.store.heap_bytes()
            + self.frozen.heap_bytes()
            + self.sealed.iter().map(FrozenGraph::heap_bytes).sum::<usize>()
    }

    /// The stored vector of `slot` (panics when out of range).
    #[inline]
    pub fn vector(&self, slot: Slot) -> &[f32] {
        self.store.vector(slot)
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
