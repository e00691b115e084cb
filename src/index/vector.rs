//! In-memory HNSW vector index (Malkov & Yashunin 2018, via hnsw_rs) over unit vectors with
//! cosine similarity, whose search applies an authorization bitmap *inside* the search.
//!
//! A selectivity planner picks, per query, between
//! - [`VectorStrategy::Exact`]: a bounded top-k scan over exactly the allowed vectors, when they
//!   are few (absolutely or as a fraction of the index), where a filtered graph walk would visit
//!   most of the graph to find k allowed nodes;
//! - [`VectorStrategy::Graph`]: a filtered walk of the HNSW graph: greedy descent of the upper
//!   layers, then a best-first search of layer 0 that traverses every node (keeping the graph
//!   connected) but only lets allowed nodes into the result set, and stops by the standard rule
//!   once the closest unexpanded candidate is farther than the worst of the `ef` allowed results
//!   ([`GraphWalk::BestFirst`], the default). hnsw_rs `search_filter` ([`GraphWalk::HnswRs`])
//!   does the same walk but never stops early (about 2x the distance evaluations of an
//!   unfiltered walk at 50% allowed); it is kept for the benchmark;
//! - [`VectorStrategy::Empty`]: nothing in this index is allowed, so no work is done.
//!
//! An index decoded from an image ([`VectorIndex::decode_image`], `vector/image.rs`) keeps the
//! image's graphs sealed (read-only [`FrozenGraph`]s over consecutive slot ranges) and inserts
//! into a fresh hnsw_rs graph after them; every graph walk covers all graphs of the index under
//! the same scope and merges them into one top-k.
//!
//! Invariants kept by this module:
//! - a search never returns a slot whose document ordinal is outside `allowed`;
//! - slots are dense and append-only (`0..len`): slot `s` owns `vectors[s*dim..(s+1)*dim]`,
//!   `ordinals[s]` and HNSW data id `s`;
//! - a batch insert validates every item before touching any structure (all or nothing);
//! - hits are sorted by descending cosine similarity, ties by ascending slot, and scored by the
//!   same dot product whichever strategy found them.

use std::cell::Cell;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use hnsw_rs::anndists::dist::distances::Distance;
use hnsw_rs::hnsw::{Hnsw, Point};
use roaring::RoaringBitmap;

mod image;

pub use image::{BuildParams, DecodedVectors, GRAPH_MAGIC, GRAPH_VERSION, NO_CHUNK};

use super::distance::{dot, dot_scalar};
use super::frozen::FrozenGraph;
use super::{Hit, IndexError, IndexResult, Slot};
use crate::domain::DocOrdinal;

/// Largest `max_connections` hnsw_rs accepts (it calls `process::exit` above it).
pub const MAX_CONNECTIONS_LIMIT: usize = 256;

/// Layers of the graph; 16 is what hnsw_rs requires to dump an index to disk.
const MAX_LAYER: usize = 16;

/// Batches at least this large are inserted with hnsw_rs `parallel_insert_slice` (rayon).
const PARALLEL_INSERT_MIN: usize = 1024;

/// Smallest index whose strategy costs are measured (below it the fixed rule is cheap enough
/// and a measurement would be noise).
pub const CALIBRATION_MIN_LEN: usize = 4096;

/// Queries (stored vectors, evenly spaced) timed per strategy when calibrating.
const CALIBRATION_QUERIES: usize = 16;

/// Vectors the exact scan visits per calibration query.
const CALIBRATION_SCAN_LEN: usize = 4096;

/// Tuning of one vector index.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VectorParams {
    /// Vector dimension.
    pub dimension: usize,
    /// HNSW max connections per node (M); at most [`MAX_CONNECTIONS_LIMIT`].
    pub max_connections: usize,
    /// HNSW candidate list size at construction.
    pub ef_construction: usize,
    /// HNSW candidate list size at search (raised to k when smaller).
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
            ef_search: 64,
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

/// How [`VectorStrategy::Graph`] walks the graph (a benchmark switch; searches use
/// [`GraphWalk::DEFAULT`]). The other walks are reached only by the lab benchmarks and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(not(any(test, feature = "lab")), allow(dead_code))]
pub(crate) enum GraphWalk {
    /// hnsw_rs `search_filter`: no early termination in layer 0 under a filter.
    HnswRs,
    /// The previous production walk: best-first with early termination, reading neighbour
    /// lists from hnsw_rs nodes (a lock and a copy per list) and scoring with the scalar dot.
    BestFirst,
    /// The best-first walk over the [`FrozenGraph`] adjacency arrays with the SIMD dot (also
    /// when every vector is allowed, instead of hnsw_rs' own search).
    Frozen,
}

impl GraphWalk {
    /// The walk [`VectorIndex::search`] uses.
    pub(crate) const DEFAULT: Self = Self::Frozen;

    /// Stable name for benchmark rows.
    #[cfg_attr(not(any(test, feature = "lab")), allow(dead_code))]
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            Self::HnswRs => "hnsw_rs",
            Self::BestFirst => "best_first",
            Self::Frozen => "frozen",
        }
    }
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

/// Costs of the two strategies measured on this machine by [`VectorIndex::calibrate`], which
/// the planner compares instead of a fixed allowed fraction.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct PlannerCosts {
    /// Nanoseconds per allowed vector of the exact scan (dot product and bounded heap).
    pub scan_ns_per_vector: f64,
    /// Nanoseconds per distance evaluation of the graph walk (random read, dot product, heaps
    /// and visited set).
    pub walk_ns_per_evaluation: f64,
    /// Mean distance evaluations of an unfiltered walk at the index's `ef_search`.
    pub walk_evaluations_unfiltered: f64,
    /// How evaluations grow as fewer vectors are allowed: a walk at selectivity `s` is
    /// expected to make `walk_evaluations_unfiltered * s^-growth` evaluations (at most the
    /// index size), `growth` fitted from a walk at 10% allowed.
    pub walk_growth: f64,
}

impl PlannerCosts {
    /// Expected nanoseconds of a graph walk when `allowed` of `len` vectors are allowed.
    pub fn walk_ns(&self, allowed: usize, len: usize) -> f64 {
        let selectivity = (allowed.max(1) as f64 / len.max(1) as f64).min(1.0);
        let evaluations = (self.walk_evaluations_unfiltered * selectivity.powf(-self.walk_growth)).min(len as f64);
        evaluations * self.walk_ns_per_evaluation
    }

    /// Expected nanoseconds of the exact scan of `allowed` vectors.
    pub fn scan_ns(&self, allowed: usize) -> f64 {
        allowed as f64 * self.scan_ns_per_vector
    }

    /// Most allowed vectors (of `len`) for which the exact scan is expected to cost no more
    /// than the walk. The scan's cost grows with the allowed count and the walk's falls, so
    /// this is where they cross (binary search).
    pub fn exact_scan_limit(&self, len: usize) -> usize {
        let cheaper = |allowed: usize| self.scan_ns(allowed) <= self.walk_ns(allowed, len);
        let (mut low, mut high) = (0usize, len);
        if cheaper(high) {
            return len;
        }
        // Invariant: cheaper(low) (or low == 0) and !cheaper(high).
        while high - low > 1 {
            let middle = low + (high - low) / 2;
            if cheaper(middle) {
                low = middle;
            } else {
                high = middle;
            }
        }
        low
    }
}

/// Result of one filtered search.
#[derive(Clone, Debug)]
pub struct VectorSearch {
    /// Best first; score is cosine similarity; ties by ascending slot.
    pub hits: Vec<Hit>,
    /// Planner decision and cost.
    pub report: VectorReport,
}

thread_local! {
    /// Distance evaluations made on this thread by [`CountingCosine`].
    static DISTANCE_COUNT: Cell<usize> = const { Cell::new(0) };
}

/// Distance evaluations made so far on this thread by the graph (read before and after a search
/// on the same thread to count that search's work).
pub(crate) fn distance_count() -> usize {
    DISTANCE_COUNT.with(Cell::get)
}

/// Cosine distance `1 - dot` on unit vectors, clamped at 0 (hnsw_rs asserts distances are
/// non-negative, and rounding can push `dot` of near-identical vectors above 1), counting every
/// evaluation in a thread-local counter.
#[derive(Clone, Copy, Debug, Default)]
struct CountingCosine;

impl Distance<f32> for CountingCosine {
    fn eval(&self, left: &[f32], right: &[f32]) -> f32 {
        (1.0 - counted_dot(left, right)).max(0.0)
    }
}

/// `dot`, counted as one distance evaluation.
fn counted_dot(left: &[f32], right: &[f32]) -> f32 {
    count_distances(1);
    dot(left, right)
}

/// The scalar dot, counted as one distance evaluation (the old best-first walk scores with this).
fn counted_dot_scalar(left: &[f32], right: &[f32]) -> f32 {
    count_distances(1);
    dot_scalar(left, right)
}

/// Adds `evaluations` to this thread's distance count.
fn count_distances(evaluations: usize) {
    DISTANCE_COUNT.with(|count| count.set(count.get() + evaluations));
}

/// Lanes of one cache line of f32: the vector store's unit of alignment.
const BLOCK_LANES: usize = 16;

/// 64 bytes of f32, aligned to a cache line: vectors start on a cache line and never straddle
/// one more than they must.
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
struct Block([f32; BLOCK_LANES]);

/// A hit ordered so that the *worse* hit is greater: lower score, then higher slot. A max-heap
/// of these keeps the worst retained hit on top.
#[derive(Clone, Copy, Debug)]
struct WorseFirst(Hit);

impl PartialEq for WorseFirst {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for WorseFirst {}

impl PartialOrd for WorseFirst {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for WorseFirst {
    fn cmp(&self, other: &Self) -> Ordering {
        other.0.score.total_cmp(&self.0.score).then(self.0.slot.cmp(&other.0.slot))
    }
}

/// Sorts hits best first: descending score, ties by ascending slot.
fn sort_best_first(hits: &mut [Hit]) {
    hits.sort_unstable_by_key(|hit| WorseFirst(*hit));
}

/// In-memory HNSW index of one shard's chunk vectors.
pub struct VectorIndex {
    params: VectorParams,
    /// Contiguous cache-line-aligned storage: slot `s` is the first `dimension` values of
    /// `vectors[s * stride..(s + 1) * stride]` (the rest of the row is zero padding).
    vectors: Vec<Block>,
    /// Blocks per vector.
    stride: usize,
    /// Document ordinal of every slot.
    ordinals: Vec<DocOrdinal>,
    /// Slots of every document ordinal present (a document has several chunks).
    slots_by_ordinal: HashMap<DocOrdinal, Vec<Slot>>,
    /// The ordinals present, for cheap intersection with `allowed`.
    present: RoaringBitmap,
    /// Graphs loaded from an index image ([`VectorIndex::decode`]), read-only, over consecutive
    /// slot ranges starting at 0; the live graph covers the slots after them.
    sealed: Vec<FrozenGraph>,
    /// First slot of the live graph (the slots of the sealed graphs before it).
    base: Slot,
    /// The live graph, which takes inserts: hnsw_rs data id `n` is slot `base + n`.
    graph: Hnsw<'static, f32, CountingCosine>,
    /// The live graph's node of every slot from `base` on (index `n` is slot `base + n`), so
    /// the best-first walk can read neighbour lists; refreshed after every insert.
    points: Vec<Arc<Point<'static, f32>>>,
    /// Local id of a node of the live graph's top layer: where its walk starts its descent.
    entry: Option<Slot>,
    /// Lock-free copy of the live graph's adjacency that [`GraphWalk::Frozen`] reads;
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
            .field("documents", &self.slots_by_ordinal.len())
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
        let graph = Hnsw::new(max_connections, 0, MAX_LAYER, params.ef_construction.max(1), CountingCosine);
        Self {
            params,
            vectors: Vec::new(),
            stride: params.dimension.div_ceil(BLOCK_LANES),
            ordinals: Vec::new(),
            slots_by_ordinal: HashMap::new(),
            present: RoaringBitmap::new(),
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
        self.ordinals.len()
    }

    /// Whether the index holds no vector.
    pub fn is_empty(&self) -> bool {
        self.ordinals.is_empty()
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
        self.vectors.reserve(items.len() * self.stride);
        self.ordinals.reserve(items.len());
        for (slot, ordinal, vector) in items {
            let row = self.vectors.len();
            self.vectors.resize(row + self.stride, Block::default());
            let values: &mut [f32] = bytemuck::cast_slice_mut(&mut self.vectors[row..]);
            values[..dimension].copy_from_slice(vector);
            self.ordinals.push(*ordinal);
            self.slots_by_ordinal.entry(*ordinal).or_default().push(*slot);
            self.present.insert(*ordinal);
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
        self.vectors.capacity() * std::mem::size_of::<Block>()
            + self.ordinals.capacity() * std::mem::size_of::<DocOrdinal>()
            + self.frozen.heap_bytes()
            + self.sealed.iter().map(FrozenGraph::heap_bytes).sum::<usize>()
    }

    /// The stored vector of `slot` (panics when out of range).
    #[inline]
    pub fn vector(&self, slot: Slot) -> &[f32] {
        let start = slot as usize * self.stride;
        let row: &[f32] = bytemuck::cast_slice(&self.vectors[start..start + self.stride]);
        &row[..self.params.dimension]
    }

    /// The document ordinal of `slot` (panics when out of range).
    pub fn doc_ordinal(&self, slot: Slot) -> DocOrdinal {
        self.ordinals[slot as usize]
    }

    /// Most allowed vectors that are still scanned exactly: `exact_scan_threshold`, or more
    /// where the measured costs say the scan is cheaper than the walk (before they are
    /// measured: `exact_scan_max_fraction` of the index).
    fn exact_scan_limit(&self) -> usize {
        let by_cost = match &self.costs {
            Some(costs) => costs.exact_scan_limit(self.len()),
            // Float-to-int `as` saturates; the fraction is in 0..=1 so this is at most len.
            None => (self.params.exact_scan_max_fraction * self.len() as f64).floor() as usize,
        };
        self.params.exact_scan_threshold.max(by_cost)
    }

    /// The measured strategy costs the planner uses (`None` before the first calibration).
    pub fn planner_costs(&self) -> Option<PlannerCosts> {
        self.costs
    }

    /// Replaces the planner's costs (`None`: the fixed threshold and fraction rule); tests and
    /// benchmarks pin them with this.
    pub fn set_planner_costs(&mut self, costs: Option<PlannerCosts>) {
        self.costs = costs;
    }

    /// Measures the planner's costs on this machine and this index (median of
    /// [`CALIBRATION_QUERIES`] stored vectors as queries): the exact scan's time per vector,
    /// the frozen walk's time per evaluation and its evaluations unfiltered and with 10% of the
    /// vectors allowed. Takes a few milliseconds at 50 000 x 384; runs after an insert batch
    /// whenever the index has doubled since the last calibration.
    pub fn calibrate(&mut self) {
        let len = self.len();
        if len == 0 {
            return;
        }
        let ef = self.params.ef_search.max(1);
        let queries: Vec<Slot> =
            (0..CALIBRATION_QUERIES).map(|number| (number * len / CALIBRATION_QUERIES) as Slot).collect();
        let scan_slots: Vec<Slot> = (0..len.min(CALIBRATION_SCAN_LEN) as Slot).collect();
        // Every tenth slot's ordinal: a scope of about 10%.
        let tenth: RoaringBitmap = (0..len as Slot).step_by(10).map(|slot| self.ordinals[slot as usize]).collect();
        let median = |mut values: Vec<f64>| {
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        let mut scan_ns = Vec::with_capacity(queries.len());
        let mut walk_ns = Vec::with_capacity(queries.len());
        let mut unfiltered = Vec::with_capacity(queries.len());
        let mut filtered = Vec::with_capacity(queries.len());
        for &slot in &queries {
            let query = self.vector(slot).to_vec();
            let started = std::time::Instant::now();
            std::hint::black_box(self.exact_top_k(&query, 10, &scan_slots));
            scan_ns.push(started.elapsed().as_nanos() as f64 / scan_slots.len() as f64);
            // The filtered walk starts from another vector (half a spacing on), so it does not
            // find the unfiltered walk's vectors in the cache: a walk's reads are cold in use.
            let other = self.vector(((slot as usize + len / (2 * CALIBRATION_QUERIES)) % len) as Slot).to_vec();
            for (walk_query, allowed, everything, evaluations) in
                [(&query, &RoaringBitmap::new(), true, &mut unfiltered), (&other, &tenth, false, &mut filtered)]
            {
                let before = distance_count();
                let started = std::time::Instant::now();
                std::hint::black_box(self.walk_every_graph(walk_query, ef, allowed, everything));
                let nanos = started.elapsed().as_nanos() as f64;
                let made = (distance_count() - before).max(1) as f64;
                evaluations.push(made);
                walk_ns.push(nanos / made);
            }
        }
        let walk_evaluations_unfiltered = median(unfiltered);
        let allowed_slots = self.ordinals.iter().filter(|ordinal| tenth.contains(**ordinal)).count();
        let selectivity = allowed_slots as f64 / len as f64;
        // evaluations(s) = unfiltered * s^-growth, through the two measured points.
        let growth = ((median(filtered) / walk_evaluations_unfiltered).ln() / -selectivity.ln()).clamp(0.0, 1.0);
        self.costs = Some(PlannerCosts {
            scan_ns_per_vector: median(scan_ns).max(f64::MIN_POSITIVE),
            walk_ns_per_evaluation: median(walk_ns).max(f64::MIN_POSITIVE),
            walk_evaluations_unfiltered,
            walk_growth: if growth.is_finite() { growth } else { 1.0 },
        });
        self.calibrated_len = len;
    }

    /// Collects the allowed slots while there are at most `limit` of them; `None` once the
    /// count exceeds `limit` (the search then walks the graph).
    fn allowed_slots_up_to(&self, allowed: &RoaringBitmap, limit: usize) -> Option<Vec<Slot>> {
        let mut slots = Vec::new();
        let mut push = |ordinal_slots: &Vec<Slot>| {
            slots.extend_from_slice(ordinal_slots);
            slots.len() <= limit
        };
        // Iterate the smaller side of `allowed ∩ present`.
        let within_limit = if allowed.len() <= self.present.len() {
            allowed.iter().filter_map(|ordinal| self.slots_by_ordinal.get(&ordinal)).all(&mut push)
        } else {
            self.present
                .iter()
                .filter(|ordinal| allowed.contains(*ordinal))
                .filter_map(|ordinal| self.slots_by_ordinal.get(&ordinal))
                .all(&mut push)
        };
        within_limit.then_some(slots)
    }

    /// Top-k among vectors whose document ordinal is in `allowed`; never returns anything
    /// outside it. `query` must have `dimension` components (otherwise: no hits, `Empty`).
    pub fn search(&self, query: &[f32], k: usize, allowed: &RoaringBitmap) -> VectorSearch {
        self.search_with(query, k, allowed, GraphWalk::DEFAULT)
    }

    /// [`VectorIndex::search`] with an explicit graph walk (benchmark and tests).
    ///
    /// Fallback: when the graph walk returns fewer than `k` hits although more vectors are
    /// allowed (an allowed region the walk cannot reach, or fewer allowed vectors than `k` with
    /// a planner limit below `k`), the allowed vectors are scanned exactly and the report says
    /// `Exact`, with the walk's distance evaluations added to the scan's.
    pub(crate) fn search_with(
        &self,
        query: &[f32],
        k: usize,
        allowed: &RoaringBitmap,
        walk: GraphWalk,
    ) -> VectorSearch {
        debug_assert_eq!(query.len(), self.dimension(), "query dimension");
        if k == 0 || query.len() != self.dimension() || self.is_empty() {
            return empty_search(0);
        }
        let limit = self.exact_scan_limit();
        match self.allowed_slots_up_to(allowed, limit) {
            Some(slots) if slots.is_empty() => empty_search(0),
            Some(slots) => VectorSearch {
                hits: self.exact_top_k(query, k, &slots),
                report: VectorReport {
                    strategy: VectorStrategy::Exact,
                    allowed: slots.len(),
                    distance_computations: slots.len(),
                },
            },
            None => {
                let (hits, walked) = self.graph_top_k(query, k, allowed, walk);
                if hits.len() < k
                    && let Some(slots) = self.allowed_slots_up_to(allowed, usize::MAX)
                    && slots.len() > hits.len()
                {
                    return VectorSearch {
                        hits: self.exact_top_k(query, k, &slots),
                        report: VectorReport {
                            strategy: VectorStrategy::Exact,
                            allowed: slots.len(),
                            distance_computations: walked + slots.len(),
                        },
                    };
                }
                let distance_computations = walked;
                VectorSearch {
                    hits,
                    report: VectorReport {
                        strategy: VectorStrategy::Graph,
                        allowed: limit.saturating_add(1),
                        distance_computations,
                    },
                }
            }
        }
    }

    /// Bounded top-k scan of `slots`.
    fn exact_top_k(&self, query: &[f32], k: usize, slots: &[Slot]) -> Vec<Hit> {
        let mut heap = BinaryHeap::with_capacity(k + 1);
        for &slot in slots {
            let candidate = WorseFirst(Hit { slot, score: dot(query, self.vector(slot)) });
            if heap.len() < k {
                heap.push(candidate);
            } else if let Some(mut worst) = heap.peek_mut()
                && candidate < *worst
            {
                *worst = candidate;
            }
        }
        // Ascending "worseness" is best first.
        heap.into_sorted_vec().into_iter().map(|WorseFirst(hit)| hit).collect()
    }

    /// Filtered HNSW walk of every graph of the index (the sealed ones with the frozen walk,
    /// the live one with `walk`), merged into one top-k; returns the hits and the distance
    /// evaluations it made.
    fn graph_top_k(&self, query: &[f32], k: usize, allowed: &RoaringBitmap, walk: GraphWalk) -> (Vec<Hit>, usize) {
        let ef = self.params.ef_search.max(k);
        // With a filter hnsw_rs never stops its layer-0 walk early; when every vector is allowed
        // the filter is a no-op, so take the plain walk.
        let everything_allowed = self.present.is_subset(allowed);
        let before = distance_count();
        let mut hits: Vec<Hit> = self
            .sealed
            .iter()
            .flat_map(|graph| self.frozen_walk(graph, query, ef, allowed, everything_allowed))
            .collect();
        hits.extend(self.live_walk(query, k, ef, allowed, everything_allowed, walk));
        let distance_computations = distance_count() - before;
        debug_assert!(hits.iter().all(|hit| allowed.contains(self.ordinals[hit.slot as usize])));
        sort_best_first(&mut hits);
        hits.truncate(k);
        (hits, distance_computations)
    }

    /// Every graph walked with [`VectorIndex::frozen_walk`], hits unordered.
    fn walk_every_graph(&self, query: &[f32], ef: usize, allowed: &RoaringBitmap, everything: bool) -> Vec<Hit> {
        self.sealed
            .iter()
            .chain(std::iter::once(&self.frozen))
            .flat_map(|graph| self.frozen_walk(graph, query, ef, allowed, everything))
            .collect()
    }

    /// The live graph's walk: allowed hits, unordered, scored by `dot`, global slots.
    fn live_walk(
        &self,
        query: &[f32],
        k: usize,
        ef: usize,
        allowed: &RoaringBitmap,
        everything_allowed: bool,
        walk: GraphWalk,
    ) -> Vec<Hit> {
        let base = self.base as usize;
        let filter = |node: &usize| allowed.contains(self.ordinals[base + *node]);
        let neighbours = if walk == GraphWalk::Frozen {
            return self.frozen_walk(&self.frozen, query, ef, allowed, everything_allowed);
        } else if everything_allowed {
            self.graph.search(query, k, ef)
        } else if walk == GraphWalk::BestFirst {
            let mut hits = self.best_first_walk(query, ef, &filter);
            // Already allowed; re-check anyway (cheap, and the invariant). Scored by the scalar
            // dot: re-score with the one every other path uses.
            hits.retain(|hit| allowed.contains(self.ordinals[hit.slot as usize]));
            for hit in &mut hits {
                hit.score = dot(query, self.vector(hit.slot));
            }
            return hits;
        } else {
            self.graph.search_filter(query, k, ef, Some(&filter))
        };
        neighbours
            .into_iter()
            .map(|neighbour| neighbour.d_id)
            .filter(|node| filter(node))
            .map(|node| {
                let slot = Slot::try_from(base + node).expect("hnsw data ids are slots");
                Hit { slot, score: dot(query, self.vector(slot)) }
            })
            .collect()
    }

    /// Local ids of the neighbours of the live graph's node `node` in `layer` (empty above the
    /// node's own level).
    fn neighbour_slots(&self, node: Slot, layer: usize) -> Vec<Slot> {
        let mut layers = self.points[node as usize].get_neighborhood_id();
        if layer >= layers.len() {
            return Vec::new();
        }
        layers
            .swap_remove(layer)
            .into_iter()
            .map(|neighbour| Slot::try_from(neighbour.d_id).expect("hnsw data ids are slots"))
            .collect()
    }

    /// Filtered HNSW search with early termination: greedy descent from the entry point through
    /// the upper layers, then best-first search of layer 0 in which every node may be expanded
    /// but only nodes passing `filter` enter the (at most `ef`) results. A node becomes a
    /// candidate while fewer than `ef` results are held or it is closer than the worst result;
    /// the walk stops when the closest candidate is farther than the worst of `ef` results.
    /// Returns the allowed hits found, unordered, scored by `dot`.
    fn best_first_walk(&self, query: &[f32], ef: usize, filter: &impl Fn(&usize) -> bool) -> Vec<Hit> {
        let Some(mut current) = self.entry else {
            return Vec::new();
        };
        let base = self.base;
        let vector = |node: Slot| self.vector(base + node);
        let mut current_score = counted_dot_scalar(query, vector(current));
        let top = self.graph.get_point_indexation().get_max_level_observed() as usize;
        for layer in (1..=top).rev() {
            loop {
                let mut moved = false;
                for neighbour in self.neighbour_slots(current, layer) {
                    let score = counted_dot_scalar(query, vector(neighbour));
                    if score > current_score {
                        (current, current_score) = (neighbour, score);
                        moved = true;
                    }
                }
                if !moved {
                    break;
                }
            }
        }
        let mut visited = vec![0u64; self.points.len().div_ceil(64)];
        let mut visit = |slot: Slot| {
            let (word, bit) = (slot as usize / 64, 1u64 << (slot % 64));
            let fresh = visited[word] & bit == 0;
            visited[word] |= bit;
            fresh
        };
        visit(current);
        let start = Hit { slot: current, score: current_score };
        // Best candidate on top.
        let mut candidates = BinaryHeap::new();
        candidates.push(Reverse(WorseFirst(start)));
        // Worst retained result on top.
        let mut results: BinaryHeap<WorseFirst> = BinaryHeap::with_capacity(ef + 1);
        if filter(&(current as usize)) {
            results.push(WorseFirst(start));
        }
        while let Some(Reverse(WorseFirst(candidate))) = candidates.pop() {
            if results.len() >= ef && results.peek().is_some_and(|worst| candidate.score < worst.0.score) {
                break;
            }
            for neighbour in self.neighbour_slots(candidate.slot, 0) {
                if !visit(neighbour) {
                    continue;
                }
                let hit = Hit { slot: neighbour, score: counted_dot_scalar(query, vector(neighbour)) };
                let admit = results.len() < ef || results.peek().is_some_and(|worst| WorseFirst(hit) < *worst);
                if !admit {
                    continue;
                }
                candidates.push(Reverse(WorseFirst(hit)));
                if filter(&(neighbour as usize)) {
                    results.push(WorseFirst(hit));
                    if results.len() > ef {
                        results.pop();
                    }
                }
            }
        }
        results.into_iter().map(|WorseFirst(hit)| Hit { slot: base + hit.slot, ..hit }).collect()
    }

    /// [`VectorIndex::best_first_walk`] over the frozen adjacency arrays with the SIMD dot: no
    /// lock, copy or allocation per neighbour list. When `everything_allowed` the filter is not
    /// consulted (the plain HNSW search, early termination included). Walks `graph` (one of
    /// this index's graphs) in its local ids; returns the allowed hits found, unordered, scored
    /// by `dot`, with their slots.
    fn frozen_walk(
        &self,
        graph: &FrozenGraph,
        query: &[f32],
        ef: usize,
        allowed: &RoaringBitmap,
        everything_allowed: bool,
    ) -> Vec<Hit> {
        let Some(mut current) = graph.entry() else {
            return Vec::new();
        };
        let base = graph.base();
        debug_assert!(base as usize + graph.nodes() <= self.len(), "a graph covers stored slots only");
        let vector = |node: Slot| self.vector(base + node);
        let is_allowed = |node: Slot| everything_allowed || allowed.contains(self.ordinals[(base + node) as usize]);
        let mut evaluations = 1usize;
        let mut current_score = dot(query, vector(current));
        for layer in (1..=graph.top_layer()).rev() {
            loop {
                let mut moved = false;
                for &neighbour in graph.neighbours(current, layer) {
                    evaluations += 1;
                    let score = dot(query, vector(neighbour));
                    if score > current_score {
                        (current, current_score) = (neighbour, score);
                        moved = true;
                    }
                }
                if !moved {
                    break;
                }
            }
        }
        let mut visited = vec![0u64; graph.nodes().div_ceil(64)];
        visited[current as usize / 64] |= 1 << (current % 64);
        let start = Hit { slot: current, score: current_score };
        // Best candidate on top.
        let mut candidates = BinaryHeap::with_capacity(ef * 4);
        candidates.push(Reverse(WorseFirst(start)));
        // Worst retained result on top.
        let mut results: BinaryHeap<WorseFirst> = BinaryHeap::with_capacity(ef + 1);
        let mut fresh: Vec<Slot> = Vec::with_capacity(2 * self.params.max_connections);
        if is_allowed(current) {
            results.push(WorseFirst(start));
        }
        while let Some(Reverse(WorseFirst(candidate))) = candidates.pop() {
            if results.len() >= ef && results.peek().is_some_and(|worst| candidate.score < worst.0.score) {
                break;
            }
            // Unvisited neighbours first, then their scores: the vector reads of one list are
            // independent of each other, so the CPU overlaps their cache misses.
            fresh.clear();
            for &neighbour in graph.neighbours(candidate.slot, 0) {
                let (word, bit) = (neighbour as usize / 64, 1u64 << (neighbour % 64));
                if visited[word] & bit == 0 {
                    visited[word] |= bit;
                    fresh.push(neighbour);
                }
            }
            evaluations += fresh.len();
            for &neighbour in &fresh {
                let hit = Hit { slot: neighbour, score: dot(query, vector(neighbour)) };
                let admit = results.len() < ef || results.peek().is_some_and(|worst| WorseFirst(hit) < *worst);
                if !admit {
                    continue;
                }
                candidates.push(Reverse(WorseFirst(hit)));
                if is_allowed(neighbour) {
                    results.push(WorseFirst(hit));
                    if results.len() > ef {
                        results.pop();
                    }
                }
            }
        }
        count_distances(evaluations);
        results.into_iter().map(|WorseFirst(hit)| Hit { slot: base + hit.slot, ..hit }).collect()
    }

    /// Plain HNSW search with no filter (benchmark baseline only): the frozen walk with the
    /// filter off.
    pub fn search_unfiltered(&self, query: &[f32], k: usize) -> Vec<Hit> {
        if k == 0 || query.len() != self.dimension() || self.is_empty() {
            return Vec::new();
        }
        let ef = self.params.ef_search.max(k);
        let mut hits = self.walk_every_graph(query, ef, &RoaringBitmap::new(), true);
        sort_best_first(&mut hits);
        hits.truncate(k);
        hits
    }
}

fn empty_search(allowed: usize) -> VectorSearch {
    VectorSearch {
        hits: Vec::new(),
        report: VectorReport { strategy: VectorStrategy::Empty, allowed, distance_computations: 0 },
    }
}

#[cfg(test)]
mod tests;
