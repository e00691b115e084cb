//! The filtered graph walk of a [`VectorIndex`] search (HNSW, Malkov & Yashunin 2018): greedy
//! descent of the upper layers, then a best-first search of layer 0 that may expand every node
//! (keeping the graph connected) but only lets allowed nodes into the result set, and stops by
//! the standard rule once the closest unexpanded candidate is farther than the worst of the `ef`
//! allowed results. It reads the graphs' adjacency arrays ([`Adjacency`]: no lock, copy or
//! allocation per neighbour list) and scores with the SIMD dot; every graph of the index (the
//! sealed ones and the live one) is walked under the same scope and the hits merged into one
//! top-k.
//!
//! Under a sparse scope (between [`TWO_HOP_MIN_SELECTIVITY`] and [`TWO_HOP_MAX_SELECTIVITY`] of
//! the documents allowed) layer 0 is walked over allowed nodes only, with two-hop expansion
//! through the nodes outside the scope ([`VectorIndex::two_hop_walk`], ACORN-1 of Patel et al.,
//! SIGMOD 2024): the one-hop walk scores every neighbour it meets to keep the graph connected,
//! ~9 of 10 of them outside a 10% scope.
//!
//! Invariants kept by this module:
//! - a walk returns only slots whose ordinal is in `allowed` (unless told everything is);
//! - a walk counts every distance evaluation it makes and returns the count with its hits.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use roaring::RoaringBitmap;

use super::store::ScopeReach;
use super::{VectorIndex, WorseFirst, sort_best_first};
use crate::index::distance::{Half, dot_half, prefetch};
use crate::index::frozen::Adjacency;
use crate::index::{Hit, Slot};

/// Exponent of the selectivity a filtered walk's `ef` is scaled by ([`VectorIndex::walk_ef`]);
/// measured against 0 (a fixed `ef`) and 1 in BENCHMARKS.md.
pub(super) const FILTERED_EF_EXPONENT: f64 = 0.5;

/// Largest selectivity (fraction of the index's documents allowed) walked two-hop; above it the
/// one-hop walk is cheaper, since most neighbours are allowed anyway and the two-hop walk's
/// scope lookups of second-hop nodes cost more than the few evaluations it saves
/// (BENCHMARKS.md, "A two-hop walk under sparse scopes").
pub(super) const TWO_HOP_MAX_SELECTIVITY: f64 = 0.2;

/// Smallest selectivity walked two-hop; below it the allowed nodes within two hops get too few
/// to keep the walk's recall (recall@10 0.988 at 0.07, 0.983 at 0.05, 0.92 at 0.02 against
/// 0.991-0.998 at 0.1 and >= 0.999 one-hop, 50,000 clustered vectors), and the one-hop walk
/// (or, far more often at these sizes, the exact scan) takes the scope.
pub(super) const TWO_HOP_MIN_SELECTIVITY: f64 = 0.09;

/// Exponent of the selectivity the two-hop walk's `ef` is scaled by ([`VectorIndex::two_hop_ef`]).
pub(super) const TWO_HOP_EF_EXPONENT: f64 = 0.25;

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
        let (mut hits, distance_computations) = self.walk_scoped(query, k, allowed, reach);
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

    /// Every graph walked under a scope of `reach` as searches walk it, hits unordered, with the
    /// distance evaluations made: two-hop ([`VectorIndex::two_hop_walk`], pool
    /// [`VectorIndex::two_hop_ef`]) when the scope holds between [`TWO_HOP_MIN_SELECTIVITY`] and
    /// [`TWO_HOP_MAX_SELECTIVITY`] of the documents, else one-hop ([`VectorIndex::frozen_walk`],
    /// pool [`VectorIndex::walk_ef`]).
    pub(super) fn walk_scoped(
        &self,
        query: &[f32],
        k: usize,
        allowed: &RoaringBitmap,
        reach: ScopeReach,
    ) -> (Vec<Hit>, usize) {
        let two_hop = (TWO_HOP_MIN_SELECTIVITY..=TWO_HOP_MAX_SELECTIVITY).contains(&reach.selectivity());
        if reach.everything() || !two_hop {
            return self.walk_every_graph::<true>(query, self.walk_ef(k, reach), allowed, reach.everything());
        }
        let ef = self.two_hop_ef(k, reach);
        let (mut hits, mut evaluations) = self.two_hop_walk(&self.live, query, ef, allowed);
        for graph in &self.sealed {
            let (graph_hits, made) = self.two_hop_walk(graph, query, ef, allowed);
            hits.extend(graph_hits);
            evaluations += made;
        }
        (hits, evaluations)
    }

    /// The result pool of a two-hop walk under a scope of `reach` returning `k` hits:
    /// `ef_search * s^`[`TWO_HOP_EF_EXPONENT`], at least `k`. The two-hop walk scores allowed
    /// nodes only, so unlike the one-hop walk it does not score more nodes the smaller the scope
    /// and needs a larger pool than [`VectorIndex::walk_ef`] for the same recall: at s = 0.1
    /// on 50,000 clustered vectors `walk_ef`'s 31 held recall@10 0.986, 48 held 0.998
    /// (BENCHMARKS.md).
    pub(super) fn two_hop_ef(&self, k: usize, reach: ScopeReach) -> usize {
        let ef = self.params.ef_search.max(k);
        // Float-to-int `as` saturates; the product is at most `ef`.
        ((ef as f64 * reach.selectivity().powf(TWO_HOP_EF_EXPONENT)).ceil() as usize).clamp(k, ef)
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

    /// Greedy descent of `graph`'s upper layers from its entry point (unfiltered: the scope
    /// applies in layer 0 only), each list's rows prefetched a few ahead of the one scored with
    /// `PREFETCH`: the node layer 0 starts from, its score and the distance evaluations made;
    /// `None` for an empty graph.
    fn descend<const PREFETCH: bool, G: Adjacency>(&self, graph: &G, query: &[f32]) -> Option<(Slot, f32, usize)> {
        let mut current = graph.entry()?;
        let base = graph.base();
        debug_assert!(base as usize + graph.nodes() <= self.len(), "a graph covers stored slots only");
        let vector = |node: Slot| self.row(base + node);
        let mut evaluations = 1usize;
        let mut current_score = dot_half(query, vector(current));
        for layer in (1..=graph.top_layer()).rev() {
            loop {
                let mut moved = false;
                let neighbours = graph.neighbours(current, layer);
                evaluations += neighbours.len();
                score_rows::<PREFETCH>(neighbours, vector, query, |hit| {
                    if hit.score > current_score {
                        (current, current_score) = (hit.slot, hit.score);
                        moved = true;
                    }
                });
                if !moved {
                    break;
                }
            }
        }
        Some((current, current_score, evaluations))
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
    /// row [`ROWS_AHEAD`] places ahead in a neighbour list before each row is scored, the
    /// offsets of a node's list when the node is admitted as a candidate, and the list of the
    /// next candidate while the current one is expanded. Without it (the benchmark's
    /// comparison) it only reads.
    pub(super) fn frozen_walk<const PREFETCH: bool, G: Adjacency>(
        &self,
        graph: &G,
        query: &[f32],
        ef: usize,
        allowed: &RoaringBitmap,
        everything_allowed: bool,
    ) -> (Vec<Hit>, usize) {
        let Some((current, current_score, mut evaluations)) = self.descend::<PREFETCH, _>(graph, query) else {
            return (Vec::new(), 0);
        };
        let base = graph.base();
        let vector = |node: Slot| self.row(base + node);
        let is_allowed = |node: Slot| everything_allowed || allowed.contains(self.store.ordinal(base + node));
        let mut visited = vec![0u64; graph.nodes().div_ceil(64)];
        visited[current as usize / 64] |= 1 << (current % 64);
        let start = Hit { slot: current, score: current_score };
        let mut frontier = Frontier::new(start, is_allowed(current), ef);
        let mut fresh: Vec<Slot> = Vec::with_capacity(2 * self.params.max_connections);
        while let Some(candidate) = frontier.next() {
            // The next candidate's list is likely the next one read: it loads while this one's
            // rows are scored (its offsets were prefetched when it was admitted).
            if PREFETCH && let Some(next) = frontier.peek() {
                graph.prefetch_neighbours(next, 0);
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
            score_rows::<PREFETCH>(&fresh, vector, query, |hit| {
                if frontier.offer(hit, || is_allowed(hit.slot)) && PREFETCH {
                    graph.prefetch_offsets(hit.slot, 0);
                }
            });
        }
        (frontier.into_hits(base), evaluations)
    }

    /// Filtered search of layer 0 of `graph` that scores allowed nodes only (ACORN-1, Patel et
    /// al. 2024): the same greedy descent of the upper layers as [`VectorIndex::frozen_walk`]
    /// (unfiltered: the entry of layer 0 need not be allowed), then best-first search of layer 0
    /// in which a candidate's allowed neighbours are scored and its neighbours outside the scope
    /// are passed through: the allowed members of their own lists are scored instead (two hops).
    /// Only allowed nodes become candidates or results; at most `2 * max_connections` (a
    /// layer-0 list) fresh nodes are scored per expansion, first hop first. Stops by the same
    /// rule as the one-hop walk. Returns the allowed hits found, unordered, with their slots, and
    /// the distance evaluations made.
    ///
    /// At 10% allowed the one-hop walk scores every neighbour it meets (~780 evaluations at
    /// 50,000 x 384 against 621 unfiltered); this walk scores ~230 for the same recall, and
    /// pays scope lookups of the second-hop nodes instead, which is why it is used under sparse
    /// scopes only ([`TWO_HOP_MAX_SELECTIVITY`]), and loses recall under very sparse ones
    /// ([`TWO_HOP_MIN_SELECTIVITY`]).
    pub(super) fn two_hop_walk<G: Adjacency>(
        &self,
        graph: &G,
        query: &[f32],
        ef: usize,
        allowed: &RoaringBitmap,
    ) -> (Vec<Hit>, usize) {
        let Some((current, current_score, mut evaluations)) = self.descend::<true, _>(graph, query) else {
            return (Vec::new(), 0);
        };
        let base = graph.base();
        let vector = |node: Slot| self.row(base + node);
        let is_allowed = |node: Slot| allowed.contains(self.store.ordinal(base + node));
        let words = graph.nodes().div_ceil(64);
        let bit = |node: Slot| (node as usize / 64, 1u64 << (node % 64));
        // Scored, or passed through: never looked at again.
        let mut visited = vec![0u64; words];
        // Looked up and found outside the scope (a node's list may still be passed through once).
        let mut outside = vec![0u64; words];
        let (word, mask) = bit(current);
        visited[word] |= mask;
        let start = Hit { slot: current, score: current_score };
        let mut frontier = Frontier::new(start, is_allowed(current), ef);
        let cap = 2 * self.params.max_connections;
        let mut fresh: Vec<Slot> = Vec::with_capacity(cap);
        let mut through: Vec<Slot> = Vec::with_capacity(cap);
        while let Some(candidate) = frontier.next() {
            fresh.clear();
            through.clear();
            for &neighbour in graph.neighbours(candidate.slot, 0) {
                let (word, mask) = bit(neighbour);
                if visited[word] & mask != 0 {
                    continue;
                }
                visited[word] |= mask;
                if outside[word] & mask == 0 && is_allowed(neighbour) {
                    fresh.push(neighbour);
                } else {
                    outside[word] |= mask;
                    through.push(neighbour);
                    graph.prefetch_neighbours(neighbour, 0);
                }
            }
            'hops: for &hop in &through {
                if fresh.len() >= cap {
                    break;
                }
                for &neighbour in graph.neighbours(hop, 0) {
                    let (word, mask) = bit(neighbour);
                    if (visited[word] | outside[word]) & mask != 0 {
                        continue;
                    }
                    if is_allowed(neighbour) {
                        visited[word] |= mask;
                        fresh.push(neighbour);
                        if fresh.len() >= cap {
                            break 'hops;
                        }
                    } else {
                        outside[word] |= mask;
                    }
                }
            }
            evaluations += fresh.len();
            score_rows::<true>(&fresh, vector, query, |hit| {
                // Every fresh node is allowed: a candidate is a result.
                if frontier.offer(hit, || true) {
                    graph.prefetch_offsets(hit.slot, 0);
                }
            });
        }
        (frontier.into_hits(base), evaluations)
    }
}

/// How many rows ahead of the one being scored a walk prefetches. A binary16 row at dimension
/// 384 is 12 cache lines: prefetching every row of a list at once (up to 32 rows, 384 lines)
/// overflows the core's outstanding-miss buffers, so the prefetches themselves stall and the
/// first rows wait behind the last. `warrant-bench filtered --vectors 100000 --dim 384 --queries
/// 1000`, two rounds, ns per distance evaluation unfiltered / at s = 0.3: every row at once
/// 121-144 / 137-171, 1 ahead 113 / 120-134, 2 ahead 95-103 / 130-136, **3 ahead 89-109 /
/// 125-143**, 4 ahead 96-100 / 117-141, 6 ahead 102-109 / 140-163, 12 ahead 110-112 / 128-148
/// (BENCHMARKS.md, "Prefetching a few rows ahead").
const ROWS_AHEAD: usize = 3;

/// Scores the rows of `nodes` against `query` in order and hands each hit to `take`. With
/// `PREFETCH` the row [`ROWS_AHEAD`] places ahead is hinted into the cache before each row is
/// scored (the first ones before the first), so a few rows' misses overlap with the arithmetic
/// of the current one.
#[inline(always)]
fn score_rows<'a, const PREFETCH: bool>(
    nodes: &[Slot],
    row: impl Fn(Slot) -> &'a [Half],
    query: &[f32],
    mut take: impl FnMut(Hit),
) {
    if PREFETCH {
        for &node in nodes.iter().take(ROWS_AHEAD) {
            prefetch(row(node));
        }
    }
    for (index, &node) in nodes.iter().enumerate() {
        if PREFETCH && let Some(&later) = nodes.get(index + ROWS_AHEAD) {
            prefetch(row(later));
        }
        take(Hit { slot: node, score: dot_half(query, row(node)) });
    }
}

/// The two heaps of a best-first search of layer 0 that keeps `ef` results, shared by the
/// one-hop and the two-hop walk: a node becomes a candidate while fewer than `ef` results are
/// held or it is closer than the worst of them, and the search stops when the closest candidate
/// is farther than the worst of `ef` results.
struct Frontier {
    /// Best candidate on top.
    candidates: BinaryHeap<Reverse<WorseFirst>>,
    /// Worst retained result on top.
    results: BinaryHeap<WorseFirst>,
    /// Results kept.
    ef: usize,
}

impl Frontier {
    /// A search starting from `start` (a result too when `start_is_result`).
    fn new(start: Hit, start_is_result: bool, ef: usize) -> Self {
        let mut candidates = BinaryHeap::with_capacity(ef * 4);
        candidates.push(Reverse(WorseFirst(start)));
        let mut results = BinaryHeap::with_capacity(ef + 1);
        if start_is_result {
            results.push(WorseFirst(start));
        }
        Self { candidates, results, ef }
    }

    /// The closest candidate, taken off the frontier; `None` when none is left or it is farther
    /// than the worst of `ef` results (the stop rule).
    #[inline]
    fn next(&mut self) -> Option<Hit> {
        let Reverse(WorseFirst(candidate)) = self.candidates.pop()?;
        let full = self.results.len() >= self.ef;
        if full && self.results.peek().is_some_and(|worst| candidate.score < worst.0.score) {
            return None;
        }
        Some(candidate)
    }

    /// The slot of the closest candidate left, if any.
    #[inline]
    fn peek(&self) -> Option<Slot> {
        self.candidates.peek().map(|Reverse(WorseFirst(next))| next.slot)
    }

    /// Admits the scored `hit` as a candidate when fewer than `ef` results are held or it is
    /// closer than the worst, and then keeps it as a result when `is_result()` (asked only
    /// then); returns whether it was admitted.
    #[inline]
    fn offer(&mut self, hit: Hit, is_result: impl FnOnce() -> bool) -> bool {
        let admit = self.results.len() < self.ef || self.results.peek().is_some_and(|worst| WorseFirst(hit) < *worst);
        if !admit {
            return false;
        }
        self.candidates.push(Reverse(WorseFirst(hit)));
        if is_result() {
            self.results.push(WorseFirst(hit));
            if self.results.len() > self.ef {
                self.results.pop();
            }
        }
        true
    }

    /// The results, unordered, with `base` added to their (graph-local) slots.
    fn into_hits(self, base: Slot) -> Vec<Hit> {
        self.results.into_iter().map(|WorseFirst(hit)| Hit { slot: base + hit.slot, ..hit }).collect()
    }
}
