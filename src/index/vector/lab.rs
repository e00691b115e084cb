//! Benchmark-only parts of the vector index (used by `warrant::bench` and the tests):
//! the graph walks the benchmark compares the production walk with ([`GraphWalk`]), the
//! reference graph hnsw_rs builds from the same vectors for two of them ([`HnswRsReference`]),
//! the per-thread distance counter that measures hnsw_rs' own walks, and the unfiltered baseline
//! search. The server binary links none of this (only `warrant-bench` calls it); the search it
//! serves is [`VectorIndex::search`].
//!
//! Invariants kept by this module: every walk applies the same scope as the production one (a
//! search never returns a slot whose ordinal is outside `allowed`), and a hit is scored by the
//! same dot product whichever walk found it.

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use hnsw_rs::anndists::dist::distances::Distance;
use hnsw_rs::hnsw::{Hnsw, Point};
use roaring::RoaringBitmap;

use super::store::ScopeReach;
use super::{MAX_CONNECTIONS_LIMIT, VectorIndex, VectorSearch, WorseFirst, sort_best_first};
use crate::index::distance::{Half, dot, dot_half};
use crate::index::{Hit, Slot};

/// Layers of hnsw_rs' graph; 16 is what hnsw_rs requires to dump an index to disk.
const HNSW_RS_LAYERS: usize = 16;

/// Batches at least this large are inserted with hnsw_rs `parallel_insert_slice` (rayon).
const PARALLEL_INSERT_MIN: usize = 1024;

/// Cosine distance `1 - dot` on unit vectors, clamped at 0 (hnsw_rs asserts distances are
/// non-negative, and rounding can push `dot` of near-identical vectors above 1); every
/// evaluation is counted on this thread (that is how hnsw_rs' own walks are measured).
#[derive(Clone, Copy, Debug, Default)]
struct Cosine;

impl Distance<f32> for Cosine {
    fn eval(&self, left: &[f32], right: &[f32]) -> f32 {
        count_distances(1);
        (1.0 - dot(left, right)).max(0.0)
    }
}

/// The graph hnsw_rs builds over every vector of an index (slot = hnsw_rs data id), with the
/// same M and `ef_construction`: what [`GraphWalk::HnswRs`] and [`GraphWalk::BestFirst`] walk.
pub struct HnswRsReference {
    graph: Hnsw<'static, f32, Cosine>,
    /// The node of every slot (index = slot).
    points: Vec<Arc<Point<'static, f32>>>,
    /// A node of the top layer.
    entry: Option<Slot>,
    /// The top layer.
    top: usize,
}

impl std::fmt::Debug for HnswRsReference {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("HnswRsReference").field("nodes", &self.points.len()).finish_non_exhaustive()
    }
}

/// How [`VectorStrategy::Graph`](super::VectorStrategy::Graph) walks the graph (a benchmark
/// switch; [`VectorIndex::search`] always walks the index's own graphs, prefetching).
#[derive(Clone, Copy, Debug)]
pub(crate) enum GraphWalk<'r> {
    /// hnsw_rs `search_filter` over its own graph: no early termination in layer 0 under a
    /// filter (about 2x the distance evaluations of an unfiltered walk at 50% allowed).
    HnswRs(&'r HnswRsReference),
    /// An earlier production walk: best-first with early termination, reading neighbour lists
    /// from hnsw_rs nodes (a lock and a copy per list) and scoring with the scalar dot.
    BestFirst(&'r HnswRsReference),
    /// The walk [`VectorIndex::search`] uses over the index's own adjacency arrays with the
    /// SIMD dot: two-hop under a sparse scope, else [`GraphWalk::OneHop`]
    /// (`VectorIndex::walk_scoped`).
    Frozen,
    /// The one-hop best-first walk (every neighbour scored, only allowed ones kept) whatever
    /// the scope, each neighbour list's rows prefetched a few ahead of the one scored: what
    /// searches walk above the two-hop walk's selectivities, measured below them side by side
    /// with it.
    OneHop,
    /// The one-hop walk without the prefetch (rows read as they are scored), to measure the
    /// prefetch side by side.
    FrozenPlain,
}

impl GraphWalk<'_> {
    /// Stable name for benchmark rows.
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            Self::HnswRs(_) => "hnsw_rs",
            Self::BestFirst(_) => "best_first",
            Self::Frozen => "frozen",
            Self::OneHop => "one_hop",
            Self::FrozenPlain => "frozen_plain",
        }
    }
}

thread_local! {
    /// Distance evaluations counted on this thread (hnsw_rs' distance, the old walk's dot, and
    /// [`VectorIndex::search_unfiltered`]).
    static DISTANCE_COUNT: Cell<usize> = const { Cell::new(0) };
}

/// Distance evaluations counted so far on this thread (read before and after a search on the
/// same thread to count that search's work).
pub(crate) fn distance_count() -> usize {
    DISTANCE_COUNT.with(Cell::get)
}

/// Adds `evaluations` to this thread's distance count.
pub(super) fn count_distances(evaluations: usize) {
    DISTANCE_COUNT.with(|count| count.set(count.get() + evaluations));
}

/// The index's dot with a stored row, counted as one distance evaluation (the old best-first
/// walk scores with this).
fn counted_dot(query: &[f32], row: &[Half]) -> f32 {
    count_distances(1);
    dot_half(query, row)
}

impl VectorIndex {
    /// hnsw_rs' graph over every vector of this index, built with the same M and
    /// `ef_construction` (in parallel with rayon for 1,024 vectors or more, as hnsw_rs allows).
    pub fn hnsw_rs_reference(&self) -> HnswRsReference {
        let max_connections = self.params.max_connections.clamp(2, MAX_CONNECTIONS_LIMIT);
        let graph = Hnsw::new(max_connections, self.len(), HNSW_RS_LAYERS, self.params.ef_construction.max(1), Cosine);
        // hnsw_rs takes f32: the stored rows widened (exact), so both graphs see the same values.
        let widened: Vec<Vec<f32>> = (0..self.len()).map(|slot| self.vector(slot as Slot)).collect();
        let batch: Vec<(&[f32], usize)> =
            widened.iter().enumerate().map(|(slot, vector)| (vector.as_slice(), slot)).collect();
        if batch.len() >= PARALLEL_INSERT_MIN {
            graph.parallel_insert_slice(&batch);
        } else {
            for item in batch {
                graph.insert_slice(item);
            }
        }
        let indexation = graph.get_point_indexation();
        let top = indexation.get_max_level_observed() as usize;
        let mut points: Vec<(usize, Arc<Point<'static, f32>>)> = Vec::with_capacity(self.len());
        for layer in 0..=top {
            points.extend(indexation.get_layer_iterator(layer).map(|point| (point.get_origin_id(), point)));
        }
        points.sort_unstable_by_key(|(slot, _)| *slot);
        debug_assert!(points.iter().map(|(slot, _)| *slot).eq(0..self.len()), "one node per slot");
        let entry = indexation
            .get_layer_iterator(top)
            .next()
            .map(|point| Slot::try_from(point.get_origin_id()).expect("hnsw data ids are slots"));
        HnswRsReference { graph, points: points.into_iter().map(|(_, point)| point).collect(), entry, top }
    }

    /// [`VectorIndex::search`] with an explicit graph walk (benchmark and tests); with
    /// [`GraphWalk::Frozen`] it is exactly that search.
    pub(crate) fn search_with(
        &self,
        query: &[f32],
        k: usize,
        allowed: &RoaringBitmap,
        walk: GraphWalk<'_>,
    ) -> VectorSearch {
        if matches!(walk, GraphWalk::Frozen) {
            return self.search(query, k, allowed);
        }
        self.planned_search(query, k, allowed, |query, k, allowed, reach| {
            self.graph_top_k_with(query, k, allowed, reach, walk)
        })
    }

    /// Plain HNSW search with no filter (benchmark baseline only): the frozen walk with the
    /// filter off. Its distance evaluations are added to this thread's [`distance_count`].
    pub fn search_unfiltered(&self, query: &[f32], k: usize) -> Vec<Hit> {
        if k == 0 || query.len() != self.dimension() || self.is_empty() {
            return Vec::new();
        }
        let ef = self.params.ef_search.max(k);
        let (mut hits, evaluations) = self.walk_every_graph::<true>(query, ef, &RoaringBitmap::new(), true);
        count_distances(evaluations);
        sort_best_first(&mut hits);
        hits.truncate(k);
        hits
    }

    /// [`VectorIndex::graph_top_k`] walked by `walk`: the index's own graphs for
    /// [`GraphWalk::Frozen`], [`GraphWalk::OneHop`] and [`GraphWalk::FrozenPlain`] (without the
    /// prefetch), the reference graph for the others.
    pub(super) fn graph_top_k_with(
        &self,
        query: &[f32],
        k: usize,
        allowed: &RoaringBitmap,
        reach: ScopeReach,
        walk: GraphWalk<'_>,
    ) -> (Vec<Hit>, usize) {
        // With a filter hnsw_rs never stops its layer-0 walk early; when every vector is allowed
        // the filter is a no-op, so take the plain walk.
        let everything_allowed = reach.everything();
        let ef = self.walk_ef(k, reach);
        let (mut hits, distance_computations) = match walk {
            GraphWalk::Frozen => self.walk_scoped(query, k, allowed, reach),
            GraphWalk::OneHop => self.walk_every_graph::<true>(query, ef, allowed, everything_allowed),
            GraphWalk::FrozenPlain => self.walk_every_graph::<false>(query, ef, allowed, everything_allowed),
            GraphWalk::HnswRs(reference) | GraphWalk::BestFirst(reference) => {
                let before = distance_count();
                let hits = self.reference_walk(reference, query, k, ef, allowed, everything_allowed, walk);
                (hits, distance_count() - before)
            }
        };
        debug_assert!(hits.iter().all(|hit| allowed.contains(self.store.ordinal(hit.slot))));
        sort_best_first(&mut hits);
        hits.truncate(k);
        (hits, distance_computations)
    }

    /// The reference graph's walk: allowed hits, unordered, scored by `dot` (the distance
    /// evaluations counted on this thread).
    #[allow(clippy::too_many_arguments)]
    fn reference_walk(
        &self,
        reference: &HnswRsReference,
        query: &[f32],
        k: usize,
        ef: usize,
        allowed: &RoaringBitmap,
        everything_allowed: bool,
        walk: GraphWalk<'_>,
    ) -> Vec<Hit> {
        let filter = |node: &usize| allowed.contains(self.store.ordinal(*node as Slot));
        let neighbours = if everything_allowed {
            reference.graph.search(query, k, ef)
        } else if matches!(walk, GraphWalk::BestFirst(_)) {
            let mut hits = reference.best_first_walk(self, query, ef, &filter);
            // Already allowed; re-check anyway (cheap, and the invariant). Scored by the scalar
            // dot: re-score with the one every other path uses.
            hits.retain(|hit| allowed.contains(self.store.ordinal(hit.slot)));
            for hit in &mut hits {
                hit.score = self.score(query, hit.slot);
            }
            return hits;
        } else {
            reference.graph.search_filter(query, k, ef, Some(&filter))
        };
        neighbours
            .into_iter()
            .map(|neighbour| neighbour.d_id)
            .filter(|node| filter(node))
            .map(|node| {
                let slot = Slot::try_from(node).expect("hnsw data ids are slots");
                Hit { slot, score: self.score(query, slot) }
            })
            .collect()
    }
}

impl HnswRsReference {
    /// Slots of the neighbours of `node` in `layer` (empty above the node's own level).
    pub(super) fn neighbour_slots(&self, node: Slot, layer: usize) -> Vec<Slot> {
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

    /// Filtered HNSW search with early termination over the hnsw_rs nodes (the vectors read
    /// from `index`): greedy descent from the entry point through the upper layers, then
    /// best-first search of layer 0 in which every node may be expanded but only nodes passing
    /// `filter` enter the (at most `ef`) results. A node becomes a candidate while fewer than
    /// `ef` results are held or it is closer than the worst result; the walk stops when the
    /// closest candidate is farther than the worst of `ef` results. Returns the allowed hits
    /// found, unordered, scored by the scalar dot.
    pub(super) fn best_first_walk(
        &self,
        index: &VectorIndex,
        query: &[f32],
        ef: usize,
        filter: &impl Fn(&usize) -> bool,
    ) -> Vec<Hit> {
        let Some(mut current) = self.entry else {
            return Vec::new();
        };
        let vector = |node: Slot| index.row(node);
        let mut current_score = counted_dot(query, vector(current));
        for layer in (1..=self.top).rev() {
            loop {
                let mut moved = false;
                for neighbour in self.neighbour_slots(current, layer) {
                    let score = counted_dot(query, vector(neighbour));
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
                let hit = Hit { slot: neighbour, score: counted_dot(query, vector(neighbour)) };
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
}
