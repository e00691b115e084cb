//! Benchmark-only parts of the vector index, compiled with the `lab` feature (and in tests):
//! the graph walks the benchmark compares the production walk with ([`GraphWalk`]), the
//! per-thread distance counter that measures hnsw_rs' own walks, and the unfiltered baseline
//! search. The serving library carries none of this; its search is [`VectorIndex::search`].
//!
//! Invariants kept by this module: every walk applies the same scope as the production one (a
//! search never returns a slot whose ordinal is outside `allowed`), and a hit is scored by the
//! same dot product whichever walk found it.

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use roaring::RoaringBitmap;

use super::store::ScopeReach;
use super::{VectorIndex, VectorSearch, WorseFirst, sort_best_first};
use crate::index::distance::{dot, dot_scalar};
use crate::index::frozen::FrozenGraph;
use crate::index::{Hit, Slot};

/// How [`VectorStrategy::Graph`](super::VectorStrategy::Graph) walks the graph (a benchmark
/// switch; [`VectorIndex::search`] always walks the frozen adjacency).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum GraphWalk {
    /// hnsw_rs `search_filter`: no early termination in layer 0 under a filter (about 2x the
    /// distance evaluations of an unfiltered walk at 50% allowed).
    HnswRs,
    /// The previous production walk: best-first with early termination, reading neighbour
    /// lists from hnsw_rs nodes (a lock and a copy per list) and scoring with the scalar dot.
    BestFirst,
    /// The best-first walk over the [`FrozenGraph`](crate::index::frozen::FrozenGraph)
    /// adjacency arrays with the SIMD dot (also when every vector is allowed, instead of
    /// hnsw_rs' own search), each neighbour list's rows prefetched before they are scored:
    /// the walk [`VectorIndex::search`] uses.
    Frozen,
    /// The same walk without the prefetch (rows read as they are scored), to measure the
    /// prefetch side by side.
    FrozenPlain,
}

impl GraphWalk {
    /// Stable name for benchmark rows.
    #[cfg(feature = "lab")]
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            Self::HnswRs => "hnsw_rs",
            Self::BestFirst => "best_first",
            Self::Frozen => "frozen",
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

/// The scalar dot, counted as one distance evaluation (the old best-first walk scores with this).
fn counted_dot_scalar(left: &[f32], right: &[f32]) -> f32 {
    count_distances(1);
    dot_scalar(left, right)
}

impl VectorIndex {
    /// [`VectorIndex::search`] with an explicit graph walk (benchmark and tests); with
    /// [`GraphWalk::Frozen`] it is exactly that search.
    pub(crate) fn search_with(
        &self,
        query: &[f32],
        k: usize,
        allowed: &RoaringBitmap,
        walk: GraphWalk,
    ) -> VectorSearch {
        if walk == GraphWalk::Frozen {
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
        let (mut hits, evaluations) = self.walk_every_graph(query, ef, &RoaringBitmap::new(), true);
        count_distances(evaluations);
        sort_best_first(&mut hits);
        hits.truncate(k);
        hits
    }

    /// [`VectorIndex::graph_top_k`] with the live graph walked by `walk` (the sealed ones with
    /// the frozen walk, without the prefetch for [`GraphWalk::FrozenPlain`]).
    pub(super) fn graph_top_k_with(
        &self,
        query: &[f32],
        k: usize,
        allowed: &RoaringBitmap,
        reach: ScopeReach,
        walk: GraphWalk,
    ) -> (Vec<Hit>, usize) {
        // With a filter hnsw_rs never stops its layer-0 walk early; when every vector is allowed
        // the filter is a no-op, so take the plain walk.
        let everything_allowed = reach.everything();
        let ef = self.walk_ef(k, reach);
        let mut distance_computations = 0;
        let mut hits: Vec<Hit> = Vec::new();
        for graph in &self.sealed {
            let (graph_hits, made) = self.frozen_walk_as(walk, graph, query, ef, allowed, everything_allowed);
            hits.extend(graph_hits);
            distance_computations += made;
        }
        let before = distance_count();
        hits.extend(self.live_walk(query, k, ef, allowed, everything_allowed, walk));
        distance_computations += distance_count() - before;
        debug_assert!(hits.iter().all(|hit| allowed.contains(self.store.ordinal(hit.slot))));
        sort_best_first(&mut hits);
        hits.truncate(k);
        (hits, distance_computations)
    }

    /// [`VectorIndex::frozen_walk`] of `graph`, without the prefetch for
    /// [`GraphWalk::FrozenPlain`] (with it for every other walk).
    fn frozen_walk_as(
        &self,
        walk: GraphWalk,
        graph: &FrozenGraph,
        query: &[f32],
        ef: usize,
        allowed: &RoaringBitmap,
        everything_allowed: bool,
    ) -> (Vec<Hit>, usize) {
        if walk == GraphWalk::FrozenPlain {
            self.frozen_walk::<false>(graph, query, ef, allowed, everything_allowed)
        } else {
            self.frozen_walk::<true>(graph, query, ef, allowed, everything_allowed)
        }
    }

    /// The live graph's walk: allowed hits, unordered, scored by `dot`, global slots (the
    /// distance evaluations counted on this thread).
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
        let filter = |node: &usize| allowed.contains(self.store.ordinal((base + *node) as Slot));
        let neighbours = if matches!(walk, GraphWalk::Frozen | GraphWalk::FrozenPlain) {
            let (hits, evaluations) = self.frozen_walk_as(walk, &self.frozen, query, ef, allowed, everything_allowed);
            count_distances(evaluations);
            return hits;
        } else if everything_allowed {
            self.graph.search(query, k, ef)
        } else if walk == GraphWalk::BestFirst {
            let mut hits = self.best_first_walk(query, ef, &filter);
            // Already allowed; re-check anyway (cheap, and the invariant). Scored by the scalar
            // dot: re-score with the one every other path uses.
            hits.retain(|hit| allowed.contains(self.store.ordinal(hit.slot)));
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

    /// Filtered HNSW search with early termination over the hnsw_rs nodes: greedy descent from
    /// the entry point through the upper layers, then best-first search of layer 0 in which
    /// every node may be expanded but only nodes passing `filter` enter the (at most `ef`)
    /// results. A node becomes a candidate while fewer than `ef` results are held or it is
    /// closer than the worst result; the walk stops when the closest candidate is farther than
    /// the worst of `ef` results. Returns the allowed hits found, unordered, scored by the
    /// scalar dot.
    pub(super) fn best_first_walk(&self, query: &[f32], ef: usize, filter: &impl Fn(&usize) -> bool) -> Vec<Hit> {
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
}
