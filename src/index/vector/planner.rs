//! The selectivity planner of a [`VectorIndex`] search: per query, an exact top-k scan of the
//! allowed vectors when they are few, a filtered graph walk otherwise, nothing when none is
//! allowed; the strategy costs it compares ([`PlannerCosts`]), measured on the index itself by
//! [`VectorIndex::calibrate`].
//!
//! Invariants kept by this module:
//! - the exact scan visits exactly the allowed slots, so it never returns anything outside
//!   `allowed`;
//! - a walk that finds fewer than `k` hits while more vectors are allowed is followed by the exact
//!   scan (reported as `Exact`, the walk's evaluations included), so a search returns
//!   `min(k, allowed)` hits whatever the graph's reach;
//! - both strategies score a hit with the same dot product.

use std::collections::BinaryHeap;

use roaring::RoaringBitmap;

use super::store::ScopeReach;
use super::{VectorIndex, VectorReport, VectorSearch, VectorStrategy, WorseFirst};
use crate::index::distance::{dot_half, prefetch};
use crate::index::{Hit, Slot};

/// Smallest index whose strategy costs are measured (below it the fixed rule is cheap enough
/// and a measurement would be noise).
pub const CALIBRATION_MIN_LEN: usize = 4096;

/// Queries (stored vectors, evenly spaced) timed per strategy when calibrating.
pub(super) const CALIBRATION_QUERIES: usize = 16;

/// Hits asked of each calibration search.
const CALIBRATION_K: usize = 10;

/// Vectors the exact scan visits per calibration query.
const CALIBRATION_SCAN_LEN: usize = 4096;

/// The exact scan prefetches the row this many slots ahead of the one it scores, so that the
/// rows of a scattered scope arrive while earlier ones are scored.
const SCAN_PREFETCH_AHEAD: usize = 4;

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

impl VectorIndex {
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
        let queries: Vec<Slot> =
            (0..CALIBRATION_QUERIES).map(|number| (number * len / CALIBRATION_QUERIES) as Slot).collect();
        // Each query scans slots spread over the whole index, as a scope's are, and other slots
        // than the query before it (so they come cold from memory, as in use): one run of
        // consecutive slots, the same for every query, measured a fifth of the cost per vector
        // of a scan in use (89 ns against ~500 ns at 50,000 x 384) and sent 10 % scopes to a
        // scan 5x slower than the walk.
        // The scan is timed as a search runs it: the scope's slots collected from its bitmap of
        // document ordinals (a hash lookup per allowed document), then scanned. Timing the scan
        // of slots collected beforehand measured 347-445 ns per vector where searches took 760
        // at 50,000 x 384, and sent 10 % scopes to a scan 3.8x slower than the walk.
        let stride = (len / CALIBRATION_SCAN_LEN).max(1);
        let scan_scope = |number: usize| -> RoaringBitmap {
            (number % stride..len)
                .step_by(stride)
                .take(CALIBRATION_SCAN_LEN)
                .map(|slot| self.store.ordinal(slot as Slot))
                .collect()
        };
        // Every tenth slot's ordinal: a scope of about 10%.
        let tenth: RoaringBitmap = (0..len as Slot).step_by(10).map(|slot| self.store.ordinal(slot)).collect();
        let median = |mut values: Vec<f64>| {
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        let mut scan_ns = Vec::with_capacity(queries.len());
        let mut walk_ns = Vec::with_capacity(queries.len());
        let mut unfiltered = Vec::with_capacity(queries.len());
        let mut filtered = Vec::with_capacity(queries.len());
        for (number, &slot) in queries.iter().enumerate() {
            let query = self.vector(slot);
            let scope = scan_scope(number);
            let started = std::time::Instant::now();
            let reach = self.store.reach(&scope);
            let scanned = self.store.allowed_slots_up_to(&scope, reach, usize::MAX).unwrap_or_default();
            std::hint::black_box(self.exact_top_k(&query, CALIBRATION_K, &scanned));
            scan_ns.push(started.elapsed().as_nanos() as f64 / scanned.len().max(1) as f64);
            // The filtered walk starts from another vector (half a spacing on), so it does not
            // find the unfiltered walk's vectors in the cache: a walk's reads are cold in use.
            let other = self.vector(((slot as usize + len / (2 * CALIBRATION_QUERIES)) % len) as Slot);
            for (walk_query, allowed, evaluations) in
                [(&query, &RoaringBitmap::new(), &mut unfiltered), (&other, &tenth, &mut filtered)]
            {
                let started = std::time::Instant::now();
                // The empty bitmap stands for "unfiltered": the walk never consults it.
                let reach = if allowed.is_empty() { self.store.reach_everything() } else { self.store.reach(allowed) };
                let ef = self.walk_ef(CALIBRATION_K, reach);
                let (_, made) =
                    std::hint::black_box(self.walk_every_graph::<true>(walk_query, ef, allowed, reach.everything()));
                let nanos = started.elapsed().as_nanos() as f64;
                let made = made.max(1) as f64;
                evaluations.push(made);
                walk_ns.push(nanos / made);
            }
        }
        let walk_evaluations_unfiltered = median(unfiltered);
        let allowed_slots = self.store.ordinals().iter().filter(|ordinal| tenth.contains(**ordinal)).count();
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

    /// The search with the strategy the planner picks; `graph_top_k` walks the graphs (the
    /// top-k hits and the distance evaluations made) when too many vectors are allowed to scan.
    ///
    /// Fallback: when the graph walk returns fewer than `k` hits although more vectors are
    /// allowed (an allowed region the walk cannot reach, or fewer allowed vectors than `k` with
    /// a planner limit below `k`), the allowed vectors are scanned exactly and the report says
    /// `Exact`, with the walk's distance evaluations added to the scan's.
    pub(super) fn planned_search(
        &self,
        query: &[f32],
        k: usize,
        allowed: &RoaringBitmap,
        graph_top_k: impl FnOnce(&[f32], usize, &RoaringBitmap, ScopeReach) -> (Vec<Hit>, usize),
    ) -> VectorSearch {
        debug_assert_eq!(query.len(), self.dimension(), "query dimension");
        if k == 0 || query.len() != self.dimension() || self.is_empty() {
            return empty_search(0);
        }
        let limit = self.exact_scan_limit();
        let reach = self.store.reach(allowed);
        match self.store.allowed_slots_up_to(allowed, reach, limit) {
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
                let (hits, walked) = graph_top_k(query, k, allowed, reach);
                if hits.len() < k
                    && let Some(slots) = self.store.allowed_slots_up_to(allowed, reach, usize::MAX)
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
        for (position, &slot) in slots.iter().enumerate() {
            if let Some(&ahead) = slots.get(position + SCAN_PREFETCH_AHEAD) {
                prefetch(self.row(ahead));
            }
            let candidate = WorseFirst(Hit { slot, score: dot_half(query, self.row(slot)) });
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
}

fn empty_search(allowed: usize) -> VectorSearch {
    VectorSearch {
        hits: Vec::new(),
        report: VectorReport { strategy: VectorStrategy::Empty, allowed, distance_computations: 0 },
    }
}
