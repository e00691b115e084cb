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

use super::{Hit, IndexError, IndexResult, Slot};
use crate::domain::DocOrdinal;
use crate::embed::dot;

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
/// [`GraphWalk::DEFAULT`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum GraphWalk {
    /// hnsw_rs `search_filter`: no early termination in layer 0 under a filter.
    HnswRs,
    /// Our best-first layer-0 walk with early termination on the allowed result set.
    BestFirst,
}

impl GraphWalk {
    /// The walk [`VectorIndex::search`] uses.
    pub(crate) const DEFAULT: Self = Self::BestFirst;

    /// Stable name for benchmark rows.
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            Self::HnswRs => "hnsw_rs",
            Self::BestFirst => "best_first",
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

/// `dot`, counted as one distance evaluation (the best-first walk scores with this).
fn counted_dot(left: &[f32], right: &[f32]) -> f32 {
    DISTANCE_COUNT.with(|count| count.set(count.get() + 1));
    dot(left, right)
}

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
    /// Contiguous storage: slot `s` is `vectors[s * dimension..(s + 1) * dimension]`.
    vectors: Vec<f32>,
    /// Document ordinal of every slot.
    ordinals: Vec<DocOrdinal>,
    /// Slots of every document ordinal present (a document has several chunks).
    slots_by_ordinal: HashMap<DocOrdinal, Vec<Slot>>,
    /// The ordinals present, for cheap intersection with `allowed`.
    present: RoaringBitmap,
    graph: Hnsw<'static, f32, CountingCosine>,
    /// The graph node of every slot (hnsw_rs data id `s` is slot `s`), so the best-first walk
    /// can read neighbour lists by slot; refreshed after every insert.
    points: Vec<Arc<Point<'static, f32>>>,
    /// Slot of a node of the top layer: where the walk starts its descent.
    entry: Option<Slot>,
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
            ordinals: Vec::new(),
            slots_by_ordinal: HashMap::new(),
            present: RoaringBitmap::new(),
            graph,
            points: Vec::new(),
            entry: None,
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
        self.vectors.reserve(items.len() * dimension);
        self.ordinals.reserve(items.len());
        for (slot, ordinal, vector) in items {
            self.vectors.extend_from_slice(vector);
            self.ordinals.push(*ordinal);
            self.slots_by_ordinal.entry(*ordinal).or_default().push(*slot);
            self.present.insert(*ordinal);
        }
        let batch: Vec<(&[f32], usize)> =
            (first..self.len()).map(|slot| (&self.vectors[slot * dimension..(slot + 1) * dimension], slot)).collect();
        if batch.len() >= PARALLEL_INSERT_MIN {
            self.graph.parallel_insert_slice(&batch);
        } else {
            for item in batch {
                self.graph.insert_slice(item);
            }
        }
        debug_assert_eq!(self.graph.get_nb_point(), self.len());
        self.refresh_points(first);
        Ok(())
    }

    /// Appends the graph nodes of slots `first..len` to `points` and refreshes `entry`.
    /// hnsw_rs only exposes its nodes through layer iterators, so this visits every node once
    /// (an `Arc` clone each: O(len) per batch, not measured separately); neighbour lists stay
    /// behind the nodes' locks, so older entries never go stale.
    fn refresh_points(&mut self, first: usize) {
        let indexation = self.graph.get_point_indexation();
        let top = indexation.get_max_level_observed() as usize;
        let mut fresh: Vec<(usize, Arc<Point<'static, f32>>)> = Vec::with_capacity(self.len() - first);
        for layer in 0..=top {
            fresh.extend(
                indexation
                    .get_layer_iterator(layer)
                    .filter(|point| point.get_origin_id() >= first)
                    .map(|point| (point.get_origin_id(), point)),
            );
        }
        fresh.sort_unstable_by_key(|(slot, _)| *slot);
        debug_assert!(fresh.iter().map(|(slot, _)| *slot).eq(first..self.len()), "one graph node per new slot");
        self.points.extend(fresh.into_iter().map(|(_, point)| point));
        self.entry = indexation
            .get_layer_iterator(top)
            .next()
            .map(|point| Slot::try_from(point.get_origin_id()).expect("hnsw data ids are slots"));
    }

    /// The stored vector of `slot` (panics when out of range).
    pub fn vector(&self, slot: Slot) -> &[f32] {
        let dimension = self.dimension();
        let start = slot as usize * dimension;
        &self.vectors[start..start + dimension]
    }

    /// The document ordinal of `slot` (panics when out of range).
    pub fn doc_ordinal(&self, slot: Slot) -> DocOrdinal {
        self.ordinals[slot as usize]
    }

    /// Most allowed vectors that are still scanned exactly.
    fn exact_scan_limit(&self) -> usize {
        let by_fraction = (self.params.exact_scan_max_fraction * self.len() as f64).floor();
        // Float-to-int `as` saturates; the fraction is in 0..=1 so this is at most len.
        self.params.exact_scan_threshold.max(by_fraction as usize)
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

    /// Filtered HNSW walk; returns the hits and the distance evaluations it made.
    fn graph_top_k(&self, query: &[f32], k: usize, allowed: &RoaringBitmap, walk: GraphWalk) -> (Vec<Hit>, usize) {
        let filter = |slot: &usize| allowed.contains(self.ordinals[*slot]);
        let ef = self.params.ef_search.max(k);
        // With a filter hnsw_rs never stops its layer-0 walk early; when every vector is allowed
        // the filter is a no-op, so take the plain walk.
        let everything_allowed = self.present.is_subset(allowed);
        let before = distance_count();
        let neighbours = if everything_allowed {
            self.graph.search(query, k, ef)
        } else if walk == GraphWalk::BestFirst {
            let mut hits = self.best_first_walk(query, ef, &filter);
            let distance_computations = distance_count() - before;
            // Already allowed and scored by `dot`; re-check anyway (cheap, and the invariant).
            hits.retain(|hit| filter(&(hit.slot as usize)));
            sort_best_first(&mut hits);
            hits.truncate(k);
            return (hits, distance_computations);
        } else {
            self.graph.search_filter(query, k, ef, Some(&filter))
        };
        let distance_computations = distance_count() - before;
        let mut hits: Vec<Hit> = neighbours
            .into_iter()
            .map(|neighbour| neighbour.d_id)
            .filter(|slot| filter(slot))
            .map(|slot| {
                let slot = Slot::try_from(slot).expect("hnsw data ids are slots");
                Hit { slot, score: dot(query, self.vector(slot)) }
            })
            .collect();
        sort_best_first(&mut hits);
        hits.truncate(k);
        (hits, distance_computations)
    }

    /// Neighbour slots of `slot` in graph `layer` (empty above the node's own level).
    fn neighbour_slots(&self, slot: Slot, layer: usize) -> Vec<Slot> {
        let mut layers = self.points[slot as usize].get_neighborhood_id();
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
        let mut current_score = counted_dot(query, self.vector(current));
        let top = self.graph.get_point_indexation().get_max_level_observed() as usize;
        for layer in (1..=top).rev() {
            loop {
                let mut moved = false;
                for neighbour in self.neighbour_slots(current, layer) {
                    let score = counted_dot(query, self.vector(neighbour));
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
        let mut visited = vec![0u64; self.len().div_ceil(64)];
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
                let hit = Hit { slot: neighbour, score: counted_dot(query, self.vector(neighbour)) };
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
        results.into_iter().map(|WorseFirst(hit)| hit).collect()
    }

    /// Plain HNSW search with no filter (benchmark baseline only).
    pub fn search_unfiltered(&self, query: &[f32], k: usize) -> Vec<Hit> {
        if k == 0 || query.len() != self.dimension() || self.is_empty() {
            return Vec::new();
        }
        let ef = self.params.ef_search.max(k);
        let mut hits: Vec<Hit> = self
            .graph
            .search(query, k, ef)
            .into_iter()
            .map(|neighbour| {
                let slot = Slot::try_from(neighbour.d_id).expect("hnsw data ids are slots");
                Hit { slot, score: dot(query, self.vector(slot)) }
            })
            .collect();
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
mod tests {
    use proptest::prelude::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::embed::normalize;

    fn params(dimension: usize, exact_scan_threshold: usize, exact_scan_max_fraction: f64) -> VectorParams {
        VectorParams {
            dimension,
            max_connections: 16,
            ef_construction: 64,
            ef_search: 64,
            exact_scan_threshold,
            exact_scan_max_fraction,
        }
    }

    fn unit_vector(rng: &mut SmallRng, dimension: usize) -> Vec<f32> {
        let mut vector: Vec<f32> = (0..dimension).map(|_| rng.gen_range(-1.0..1.0)).collect();
        normalize(&mut vector);
        vector
    }

    /// `count` vectors, `chunks_per_doc` consecutive slots per document ordinal.
    fn build(params: VectorParams, count: usize, chunks_per_doc: usize, seed: u64) -> VectorIndex {
        let mut rng = SmallRng::seed_from_u64(seed);
        let items: Vec<(Slot, DocOrdinal, Vec<f32>)> = (0..count)
            .map(|slot| (slot as Slot, (slot / chunks_per_doc) as DocOrdinal, unit_vector(&mut rng, params.dimension)))
            .collect();
        let mut index = VectorIndex::new(params);
        index.insert_batch(&items).expect("valid batch");
        index
    }

    /// Naive reference: score every allowed vector, sort, truncate.
    fn brute_force(index: &VectorIndex, query: &[f32], k: usize, allowed: &RoaringBitmap) -> Vec<Hit> {
        let mut hits: Vec<Hit> = (0..index.len() as Slot)
            .filter(|slot| allowed.contains(index.doc_ordinal(*slot)))
            .map(|slot| Hit { slot, score: dot(query, index.vector(slot)) })
            .collect();
        hits.sort_by(|left, right| right.score.total_cmp(&left.score).then(left.slot.cmp(&right.slot)));
        hits.truncate(k);
        hits
    }

    #[test]
    fn exact_scan_equals_brute_force() {
        let index = build(params(16, usize::MAX, 1.0), 300, 3, 7);
        let mut rng = SmallRng::seed_from_u64(8);
        let allowed: RoaringBitmap = (0..100u32).filter(|ordinal| ordinal % 3 != 1).collect();
        for _ in 0..20 {
            let query = unit_vector(&mut rng, 16);
            let search = index.search(&query, 10, &allowed);
            assert_eq!(search.report.strategy, VectorStrategy::Exact);
            assert_eq!(search.report.allowed, 201);
            assert_eq!(search.report.distance_computations, 201);
            assert_eq!(search.hits, brute_force(&index, &query, 10, &allowed));
        }
    }

    #[test]
    fn graph_search_never_returns_outside_allowed() {
        let index = build(params(16, 0, 0.0), 2000, 2, 11);
        let mut rng = SmallRng::seed_from_u64(12);
        for modulus in [1u32, 2, 5, 50] {
            let allowed: RoaringBitmap = (0..1000u32).filter(|ordinal| ordinal % modulus == 0).collect();
            for _ in 0..20 {
                let query = unit_vector(&mut rng, 16);
                let search = index.search(&query, 10, &allowed);
                assert_eq!(search.report.strategy, VectorStrategy::Graph);
                assert!(search.report.distance_computations > 0);
                assert!(!search.hits.is_empty());
                assert!(search.hits.iter().all(|hit| allowed.contains(index.doc_ordinal(hit.slot))));
                assert!(search.hits.windows(2).all(|pair| pair[0].score >= pair[1].score));
            }
        }
    }

    #[test]
    fn graph_search_finds_the_query_vector_itself() {
        let index = build(params(16, 0, 0.0), 1000, 1, 3);
        let allowed: RoaringBitmap = (0..1000u32).filter(|ordinal| ordinal % 2 == 0).collect();
        let query = index.vector(42).to_vec();
        let search = index.search(&query, 5, &allowed);
        assert_eq!(search.hits[0].slot, 42);
        assert!((search.hits[0].score - 1.0).abs() < 1e-5);
    }

    #[test]
    fn nothing_allowed_does_no_work() {
        let index = build(params(8, 10, 0.1), 50, 1, 5);
        let allowed: RoaringBitmap = (1000..1010u32).collect();
        let search = index.search(&[0.5; 8], 10, &allowed);
        assert!(search.hits.is_empty());
        assert_eq!(
            search.report,
            VectorReport { strategy: VectorStrategy::Empty, allowed: 0, distance_computations: 0 }
        );
    }

    #[test]
    fn planner_switches_on_threshold_and_fraction() {
        let index = build(params(8, 10, 0.1), 400, 2, 9);
        let query = index.vector(0).to_vec();
        let under_threshold: RoaringBitmap = (0..5u32).collect(); // 10 vectors
        assert_eq!(index.search(&query, 3, &under_threshold).report.strategy, VectorStrategy::Exact);
        let under_fraction: RoaringBitmap = (0..20u32).collect(); // 40 vectors = 10%
        assert_eq!(index.search(&query, 3, &under_fraction).report.strategy, VectorStrategy::Exact);
        let above_both: RoaringBitmap = (0..21u32).collect(); // 42 vectors
        let search = index.search(&query, 3, &above_both);
        assert_eq!(search.report.strategy, VectorStrategy::Graph);
        assert_eq!(search.report.allowed, 41);
    }

    #[test]
    fn insert_validation_is_all_or_nothing() {
        let mut index = VectorIndex::new(params(4, 10, 0.1));
        index.insert_batch(&[(0, 7, vec![1.0, 0.0, 0.0, 0.0])]).expect("valid");
        let good = vec![0.0, 1.0, 0.0, 0.0];
        let wrong_dimension = [(1, 8, good.clone()), (2, 8, vec![1.0, 0.0, 0.0])];
        assert!(matches!(index.insert_batch(&wrong_dimension), Err(IndexError::Dimension { expected: 4, got: 3 })));
        let non_finite = [(1, 8, good.clone()), (2, 8, vec![f32::NAN, 0.0, 0.0, 0.0])];
        assert!(matches!(index.insert_batch(&non_finite), Err(IndexError::NonFinite)));
        let gap = [(1, 8, good.clone()), (3, 8, good.clone())];
        assert!(matches!(index.insert_batch(&gap), Err(IndexError::SlotOrder { expected: 2, got: 3 })));
        let restart = [(0, 8, good.clone())];
        assert!(matches!(index.insert_batch(&restart), Err(IndexError::SlotOrder { expected: 1, got: 0 })));
        assert_eq!(index.len(), 1);
        let everything: RoaringBitmap = (0..100u32).collect();
        let search = index.search(&good, 10, &everything);
        assert_eq!(search.hits.len(), 1);
        assert_eq!(search.hits[0].slot, 0);
        index.insert_batch(&[(1, 8, good.clone())]).expect("valid after failures");
        assert_eq!(index.search(&good, 10, &everything).hits[0], Hit { slot: 1, score: 1.0 });
    }

    #[test]
    fn insert_beyond_initial_capacity_and_in_parallel() {
        let index = build(params(8, 0, 0.0), 3 * PARALLEL_INSERT_MIN, 1, 21);
        assert_eq!(index.len(), 3 * PARALLEL_INSERT_MIN);
        let query = index.vector(5).to_vec();
        assert_eq!(index.search_unfiltered(&query, 1)[0].slot, 5);
    }

    #[test]
    fn best_first_walk_equals_brute_force_with_large_ef() {
        // ef >= len: the walk cannot stop before it has seen every reachable node.
        let mut index = build(params(16, 0, 0.0), 600, 2, 31);
        index.set_search_tuning(600, 0, 0.0);
        let mut rng = SmallRng::seed_from_u64(32);
        for modulus in [2u32, 3, 7] {
            let allowed: RoaringBitmap = (0..300u32).filter(|ordinal| ordinal % modulus == 0).collect();
            for _ in 0..10 {
                let query = unit_vector(&mut rng, 16);
                let search = index.search_with(&query, 10, &allowed, GraphWalk::BestFirst);
                assert_eq!(search.report.strategy, VectorStrategy::Graph);
                assert_eq!(search.hits, brute_force(&index, &query, 10, &allowed));
            }
        }
    }

    #[test]
    fn best_first_walk_stops_early_and_keeps_recall() {
        let index = build(params(16, 0, 0.0), 3000, 1, 41);
        let mut rng = SmallRng::seed_from_u64(42);
        let allowed: RoaringBitmap = (0..3000u32).filter(|ordinal| ordinal % 2 == 0).collect();
        let (mut ours, mut theirs, mut found_ours, mut found_theirs) = (0, 0, 0, 0);
        for _ in 0..30 {
            let query = unit_vector(&mut rng, 16);
            let truth = brute_force(&index, &query, 10, &allowed);
            let best_first = index.search_with(&query, 10, &allowed, GraphWalk::BestFirst);
            let hnsw_rs = index.search_with(&query, 10, &allowed, GraphWalk::HnswRs);
            ours += best_first.report.distance_computations;
            theirs += hnsw_rs.report.distance_computations;
            found_ours += best_first.hits.iter().filter(|hit| truth.contains(hit)).count();
            found_theirs += hnsw_rs.hits.iter().filter(|hit| truth.contains(hit)).count();
        }
        assert!(ours < theirs, "best-first {ours} vs hnsw_rs {theirs} distance evaluations");
        assert!(found_ours + 3 >= found_theirs, "best-first found {found_ours}, hnsw_rs {found_theirs}");
    }

    #[test]
    fn walk_returns_every_allowed_vector_when_fewer_than_k() {
        // Planner limits of 0 force the graph; 3 allowed vectors < k = 10: the walk keeps
        // expanding while it holds fewer than ef results, so it finds all of them.
        let index = build(params(8, 0, 0.0), 500, 1, 51);
        let mut rng = SmallRng::seed_from_u64(52);
        for _ in 0..20 {
            let allowed: RoaringBitmap = (0..3).map(|_| rng.gen_range(0..500u32)).collect();
            let query = unit_vector(&mut rng, 8);
            for walk in [GraphWalk::BestFirst, GraphWalk::HnswRs] {
                let search = index.search_with(&query, 10, &allowed, walk);
                assert_eq!(search.hits, brute_force(&index, &query, 10, &allowed), "{walk:?}");
            }
        }
        // Allowed ordinals absent from the index: nothing to find, no work.
        let absent: RoaringBitmap = (10_000..10_050u32).collect();
        assert_eq!(index.search(&[0.5; 8], 10, &absent).report.strategy, VectorStrategy::Empty);
        // An empty index has no entry point.
        let empty = VectorIndex::new(params(8, 0, 0.0));
        assert!(empty.best_first_walk(&[0.5; 8], 10, &|_: &usize| true).is_empty());
    }

    #[test]
    fn unreachable_allowed_vectors_fall_back_to_exact_scan() {
        // hnsw_rs prunes the reverse links among identical vectors, leaving most of them without
        // incoming edges: no walk can reach them.
        let copies = 300usize;
        let mut index = VectorIndex::new(VectorParams { max_connections: 4, ef_construction: 8, ..params(4, 0, 0.0) });
        let items: Vec<(Slot, DocOrdinal, Vec<f32>)> =
            (0..copies).map(|slot| (slot as Slot, slot as DocOrdinal, vec![0.5; 4])).collect();
        index.insert_batch(&items).expect("valid batch");
        let allowed: RoaringBitmap = (1..copies as u32).collect();
        for walk in [GraphWalk::BestFirst, GraphWalk::HnswRs] {
            let (walked, _) = index.graph_top_k(&[0.5; 4], copies, &allowed, walk);
            assert!(walked.len() < copies - 1, "{walk:?} reached every copy: the test needs another graph");
            let search = index.search_with(&[0.5; 4], copies, &allowed, walk);
            assert_eq!(search.hits, brute_force(&index, &[0.5; 4], copies, &allowed), "{walk:?}");
            assert_eq!(search.report.strategy, VectorStrategy::Exact);
            assert_eq!(search.report.allowed, copies - 1);
            assert!(search.report.distance_computations > copies - 1);
        }
    }

    proptest! {
        #[test]
        fn best_first_walk_never_leaves_allowed(
            seed in any::<u64>(),
            count in 1usize..200,
            chunks_per_doc in 1usize..4,
            allowed_ordinals in proptest::collection::vec(0u32..80, 0..80),
            k in 1usize..15,
            ef in 1usize..40,
        ) {
            let mut index = build(params(6, 0, 0.0), count, chunks_per_doc, seed);
            index.set_search_tuning(ef, 0, 0.0);
            let allowed: RoaringBitmap = allowed_ordinals.into_iter().collect();
            let mut rng = SmallRng::seed_from_u64(seed ^ 0xbe57);
            let query = unit_vector(&mut rng, 6);
            let search = index.search_with(&query, k, &allowed, GraphWalk::BestFirst);
            let truth = brute_force(&index, &query, k, &allowed);
            prop_assert!(search.hits.len() <= k);
            prop_assert!(search.hits.iter().all(|hit| allowed.contains(index.doc_ordinal(hit.slot))));
            prop_assert!(search.hits.windows(2).all(|pair| WorseFirst(pair[0]) < WorseFirst(pair[1])));
            // Fewer than k only when fewer than k are allowed (the fallback guarantees it).
            prop_assert_eq!(search.hits.len(), truth.len());
            for hit in &search.hits {
                prop_assert_eq!(hit.score, dot(&query, index.vector(hit.slot)));
            }
        }

        #[test]
        fn hits_are_allowed_and_exact_matches_sort_truncate(
            seed in any::<u64>(),
            count in 1usize..120,
            chunks_per_doc in 1usize..4,
            allowed_ordinals in proptest::collection::vec(0u32..60, 0..60),
            k in 0usize..15,
            exact_scan_threshold in 0usize..80,
            exact_scan_max_fraction in 0.0f64..1.0,
        ) {
            let index = build(params(6, exact_scan_threshold, exact_scan_max_fraction), count, chunks_per_doc, seed);
            let allowed: RoaringBitmap = allowed_ordinals.into_iter().collect();
            let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed);
            let query = unit_vector(&mut rng, 6);
            let search = index.search(&query, k, &allowed);
            prop_assert!(search.hits.len() <= k);
            prop_assert!(search.hits.iter().all(|hit| allowed.contains(index.doc_ordinal(hit.slot))));
            if search.report.strategy != VectorStrategy::Graph {
                prop_assert_eq!(search.hits, brute_force(&index, &query, k, &allowed));
            }
        }
    }
}
