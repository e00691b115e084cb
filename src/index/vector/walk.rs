//! The filtered graph walk of a [`VectorIndex`] search (HNSW, Malkov & Yashunin 2018): greedy
//! descent of the upper layers, then a best-first search of layer 0 that may expand every node
//! (keeping the graph connected) but only lets allowed nodes into the result set, and stops by
//! the standard rule once the closest unexpanded candidate is farther than the worst of the `ef`
//! allowed results. It reads the graphs' adjacency arrays ([`Adjacency`]: no lock, copy or
//! allocation per neighbour list) and scores with the SIMD dot; every graph of the index (the
//! sealed ones and the live one) is walked under the same scope and the hits merged into one
//! top-k.
//!
//! Invariants kept by this module:
//! - a walk returns only slots whose ordinal is in `allowed` (unless told everything is);
//! - a walk counts every distance evaluation it makes and returns the count with its hits.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use roaring::RoaringBitmap;

use super::store::ScopeReach;
use super::{VectorIndex, WorseFirst, sort_best_first};
use crate::index::distance::{dot, prefetch};
use crate::index::frozen::Adjacency;
use crate::index::{Hit, Slot};

/// Exponent of the selectivity a filtered walk's `ef` is scaled by ([`VectorIndex::walk_ef`]);
/// measured against 0 (a fixed `ef`) and 1 in BENCHMARKS.md.
pub(super) const FILTERED_EF_EXPONENT: f64 = 0.5;

impl VectorIndex {
    /// Filtered HNSW walk of every graph of the index, merged into one top-k; returns the hits
    /// and the distance evaluations it made.
    pub(super) fn graph_top_k(
        &self,
        query: &[f32],
        k: usize,
        allowed: &RoaringBitmap,
        reach: ScopeReach,
    ) -> (Vec<Hit>, usize) {
        // When every vector is allowed the filter is a no-op: the walk does not consult it.
        let everything_allowed = reach.everything();
        let ef = self.walk_ef(k, reach);
        let (mut hits, distance_computations) = self.walk_every_graph::<true>(query, ef, allowed, everything_allowed);
        debug_assert!(hits.iter().all(|hit| allowed.contains(self.store.ordinal(hit.slot))));
        sort_best_first(&mut hits);
        hits.truncate(k);
        (hits, distance_computations)
    }

    /// The size of the result pool (`ef`) of a walk of this index under a scope of `reach`,
    /// returning `k` hits: `ef_search` (at least `k`) when every vector is allowed; at
    /// selectivity `s` (the fraction of this index's documents the scope holds) `ef_search * s^`
    /// [`FILTERED_EF_EXPONENT`], still at least `k`.
    ///
    /// A filtered walk keeps `ef` *allowed* results and stops only when its closest candidate
    /// is farther than the worst of them, so it scores about `ef / s` nodes: with a fixed `ef`
    /// the pool of a 10 % scope is filled from outside the query's neighbourhood and its
    /// evaluations grow 1.5-3.9x while its recall is already 1.000 (BENCHMARKS.md, "A filtered walk's
    /// `ef` shrinks with its scope"). Shrinking `ef` by the square root of `s` still lets the
    /// walk score more nodes the smaller the scope (`ef_search / sqrt(s)`), which is what keeps
    /// a sparse scope's recall, without leaving the neighbourhood.
    pub(super) fn walk_ef(&self, k: usize, reach: ScopeReach) -> usize {
        let ef = self.params.ef_search.max(k);
        if reach.everything() {
            return ef;
        }
        // Float-to-int `as` saturates; the product is at most `ef`.
        ((ef as f64 * reach.selectivity().powf(FILTERED_EF_EXPONENT)).ceil() as usize).clamp(k, ef)
    }

    /// Every graph walked with [`VectorIndex::frozen_walk`] (`PREFETCH`: what searches do; the
    /// benchmark also measures the walk without), hits unordered, with the distance evaluations
    /// made.
    pub(super) fn walk_every_graph<const PREFETCH: bool>(
        &self,
        query: &[f32],
        ef: usize,
        allowed: &RoaringBitmap,
        everything: bool,
    ) -> (Vec<Hit>, usize) {
        let (mut hits, mut evaluations) = self.frozen_walk::<PREFETCH, _>(&self.live, query, ef, allowed, everything);
        for graph in &self.sealed {
            let (graph_hits, made) = self.frozen_walk::<PREFETCH, _>(graph, query, ef, allowed, everything);
            hits.extend(graph_hits);
            evaluations += made;
        }
        (hits, evaluations)
    }

    /// Filtered HNSW search with early termination over the adjacency arrays of `graph`
    /// (one of this index's graphs, walked in its local ids): greedy descent from the entry
    /// point through the upper layers, then best-first search of layer 0 in which every node
    /// may be expanded but only allowed nodes enter the (at most `ef`) results. A node becomes
    /// a candidate while fewer than `ef` results are held or it is closer than the worst result;
    /// the walk stops when the closest candidate is farther than the worst of `ef` results. When
    /// `everything_allowed` the filter is not consulted (the plain HNSW search, early
    /// termination included). Returns the allowed hits found, unordered, scored by `dot`, with
    /// their slots, and the distance evaluations made.
    ///
    /// With `PREFETCH` (what searches use) the walk hints the cache ahead of its reads: the
    /// rows of a neighbour list before any of them is scored, the offsets of a node's list when
    /// the node is admitted as a candidate, and the list of the next candidate while the
    /// current one is expanded. Without it (the benchmark's comparison) it only reads.
    pub(super) fn frozen_walk<const PREFETCH: bool, G: Adjacency>(
        &self,
        graph: &G,
        query: &[f32],
        ef: usize,
        allowed: &RoaringBitmap,
        everything_allowed: bool,
    ) -> (Vec<Hit>, usize) {
        let Some(mut current) = graph.entry() else {
            return (Vec::new(), 0);
        };
        let base = graph.base();
        debug_assert!(base as usize + graph.nodes() <= self.len(), "a graph covers stored slots only");
        let vector = |node: Slot| self.vector(base + node);
        let is_allowed = |node: Slot| everything_allowed || allowed.contains(self.store.ordinal(base + node));
        let mut evaluations = 1usize;
        let mut current_score = dot(query, vector(current));
        for layer in (1..=graph.top_layer()).rev() {
            loop {
                let mut moved = false;
                if PREFETCH {
                    for &neighbour in graph.neighbours(current, layer) {
                        prefetch(vector(neighbour));
                    }
                }
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
            // The next candidate's list is likely the next one read: it loads while this one's
            // rows are scored (its offsets were prefetched when it was admitted).
            if PREFETCH && let Some(Reverse(WorseFirst(next))) = candidates.peek() {
                graph.prefetch_neighbours(next.slot, 0);
            }
            // Unvisited neighbours first, then their rows prefetched, then their scores: the
            // vector reads of one list are independent of each other, so their cache misses
            // overlap instead of each dot product waiting for its own.
            fresh.clear();
            for &neighbour in graph.neighbours(candidate.slot, 0) {
                let (word, bit) = (neighbour as usize / 64, 1u64 << (neighbour % 64));
                if visited[word] & bit == 0 {
                    visited[word] |= bit;
                    fresh.push(neighbour);
                }
            }
            evaluations += fresh.len();
            if PREFETCH {
                for &neighbour in &fresh {
                    prefetch(vector(neighbour));
                }
            }
            for &neighbour in &fresh {
                let hit = Hit { slot: neighbour, score: dot(query, vector(neighbour)) };
                let admit = results.len() < ef || results.peek().is_some_and(|worst| WorseFirst(hit) < *worst);
                if !admit {
                    continue;
                }
                candidates.push(Reverse(WorseFirst(hit)));
                if PREFETCH {
                    graph.prefetch_offsets(neighbour, 0);
                }
                if is_allowed(neighbour) {
                    results.push(WorseFirst(hit));
                    if results.len() > ef {
                        results.pop();
                    }
                }
            }
        }
        let hits = results.into_iter().map(|WorseFirst(hit)| Hit { slot: base + hit.slot, ..hit }).collect();
        (hits, evaluations)
    }
}
