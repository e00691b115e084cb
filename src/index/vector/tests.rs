//! Unit tests of `index/vector`.

use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::walk::{TWO_HOP_MAX_SELECTIVITY, TWO_HOP_MIN_SELECTIVITY};
use super::*;
use crate::embed::normalize;
use crate::index::frozen::Adjacency;

pub(super) fn params(dimension: usize, exact_scan_threshold: usize, exact_scan_max_fraction: f64) -> VectorParams {
    VectorParams {
        dimension,
        max_connections: 16,
        ef_construction: 64,
        ef_search: 64,
        exact_scan_threshold,
        exact_scan_max_fraction,
    }
}

pub(super) fn unit_vector(rng: &mut SmallRng, dimension: usize) -> Vec<f32> {
    let mut vector: Vec<f32> = (0..dimension).map(|_| rng.gen_range(-1.0..1.0)).collect();
    normalize(&mut vector);
    vector
}

/// `count` vectors, `chunks_per_doc` consecutive slots per document ordinal.
pub(super) fn build(params: VectorParams, count: usize, chunks_per_doc: usize, seed: u64) -> VectorIndex {
    let mut rng = SmallRng::seed_from_u64(seed);
    let items: Vec<(Slot, DocOrdinal, Vec<f32>)> = (0..count)
        .map(|slot| (slot as Slot, (slot / chunks_per_doc) as DocOrdinal, unit_vector(&mut rng, params.dimension)))
        .collect();
    let mut index = VectorIndex::new(params);
    index.insert_batch(&items).expect("valid batch");
    index
}

/// Naive reference: score every allowed vector, sort, truncate.
pub(super) fn brute_force(index: &VectorIndex, query: &[f32], k: usize, allowed: &RoaringBitmap) -> Vec<Hit> {
    let mut hits: Vec<Hit> = (0..index.len() as Slot)
        .filter(|slot| allowed.contains(index.doc_ordinal(*slot)))
        .map(|slot| Hit { slot, score: index.score(query, slot) })
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
    let query = index.vector(42);
    let search = index.search(&query, 5, &allowed);
    assert_eq!(search.hits[0].slot, 42);
    // Each stored component is within 2^-11 of its value (relative): a unit vector's squared
    // norm is then within 2^-10 of 1.
    assert!((search.hits[0].score - 1.0).abs() < 2f32.powi(-10), "{}", search.hits[0].score);
}

#[test]
fn nothing_allowed_does_no_work() {
    let index = build(params(8, 10, 0.1), 50, 1, 5);
    let allowed: RoaringBitmap = (1000..1010u32).collect();
    let search = index.search(&[0.5; 8], 10, &allowed);
    assert!(search.hits.is_empty());
    assert_eq!(search.report, VectorReport { strategy: VectorStrategy::Empty, allowed: 0, distance_computations: 0 });
}

#[test]
fn planner_switches_on_threshold_and_fraction() {
    let index = build(params(8, 10, 0.1), 400, 2, 9);
    let query = index.vector(0);
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
fn measured_planner_limit_is_where_the_costs_cross() {
    let costs = PlannerCosts {
        scan_ns_per_vector: 1.0,
        walk_ns_per_evaluation: 2.0,
        walk_evaluations_unfiltered: 100.0,
        walk_growth: 1.0,
    };
    // Scan n <= walk 2 * min(10 000, 100 * 10 000 / n)  <=>  n^2 <= 2 000 000.
    assert_eq!(costs.exact_scan_limit(10_000), 1414);
    for allowed in [1usize, 1000, 1414] {
        assert!(costs.scan_ns(allowed) <= costs.walk_ns(allowed, 10_000), "{allowed}");
    }
    assert!(costs.scan_ns(1415) > costs.walk_ns(1415, 10_000));
    // A walk that costs more than scanning everything: always scan.
    let slow_walk = PlannerCosts { walk_ns_per_evaluation: 1e6, ..costs };
    assert_eq!(slow_walk.exact_scan_limit(10_000), 10_000);
    // A scan dearer than any walk: never scan (beyond the configured threshold).
    let slow_scan = PlannerCosts { scan_ns_per_vector: 1e9, ..costs };
    assert_eq!(slow_scan.exact_scan_limit(10_000), 0);
    assert_eq!(costs.exact_scan_limit(0), 0);
}

/// A search's exact scan first collects the scope's slots from its bitmap of document ordinals
/// (a hash lookup per allowed document), then scans them; calibration must time both, or it
/// measures half the cost per vector and sends scopes to a scan slower than the walk
/// (BENCHMARKS.md, "ef_search 64 against 96").
#[test]
fn calibration_times_the_exact_scan_with_its_slot_collection() {
    let collections = || super::store::SLOT_COLLECTIONS.with(std::cell::Cell::get);
    let before = collections();
    let index = build(params(8, 0, 0.5), CALIBRATION_MIN_LEN, 1, 3);
    assert!(index.planner_costs().is_some(), "calibrated on insert");
    assert!(
        collections() - before >= super::planner::CALIBRATION_QUERIES,
        "the calibration scanned slots it had not collected from a scope"
    );
}

#[test]
fn calibration_measures_costs_and_the_planner_follows_them() {
    let small = build(params(8, 0, 0.5), CALIBRATION_MIN_LEN - 1, 1, 3);
    assert_eq!(small.planner_costs(), None, "too small to measure");
    let mut index = build(params(8, 0, 0.5), CALIBRATION_MIN_LEN, 1, 3);
    let measured = index.planner_costs().expect("calibrated on insert");
    for value in [measured.scan_ns_per_vector, measured.walk_ns_per_evaluation, measured.walk_evaluations_unfiltered] {
        assert!(value.is_finite() && value > 0.0, "{measured:?}");
    }
    assert!((0.0..=1.0).contains(&measured.walk_growth), "{measured:?}");
    // Pinned costs: the limit is where they cross, whatever the fraction says.
    let pinned = PlannerCosts {
        scan_ns_per_vector: 1.0,
        walk_ns_per_evaluation: 2.0,
        walk_evaluations_unfiltered: 100.0,
        walk_growth: 1.0,
    };
    index.set_planner_costs(Some(pinned));
    let limit = pinned.exact_scan_limit(index.len());
    let query = index.vector(0);
    let at_limit: RoaringBitmap = (0..limit as u32).collect();
    assert_eq!(index.search(&query, 5, &at_limit).report.strategy, VectorStrategy::Exact);
    let above: RoaringBitmap = (0..=limit as u32).collect();
    let search = index.search(&query, 5, &above);
    assert_eq!(search.report.strategy, VectorStrategy::Graph);
    assert!(search.hits.iter().all(|hit| above.contains(index.doc_ordinal(hit.slot))));
}

#[test]
fn the_live_graph_keeps_its_lists_well_formed_and_round_trips_through_compressed_rows() {
    let mut index = VectorIndex::new(params(8, 0, 0.0));
    let mut rng = SmallRng::seed_from_u64(11);
    let m = index.params.max_connections;
    // Two batches: the second changes lists the first wrote.
    for batch in [0..300usize, 300..700] {
        let items: Vec<(Slot, DocOrdinal, Vec<f32>)> =
            batch.map(|slot| (slot as Slot, slot as DocOrdinal, unit_vector(&mut rng, 8))).collect();
        index.insert_batch(&items).expect("valid batch");
        let live = &index.live;
        assert_eq!(live.nodes(), index.len());
        let entry = live.entry().expect("a graph with nodes has an entry");
        assert!(!live.neighbours(entry, live.top_layer()).is_empty() || live.top_layer() == 0 || live.nodes() == 1);
        for node in 0..live.nodes() as Slot {
            for layer in 0..=live.top_layer() + 1 {
                let list = live.neighbours(node, layer);
                let capacity = if layer == 0 { 2 * m } else { m };
                assert!(list.len() <= capacity, "{node} {layer}: {} > {capacity}", list.len());
                assert!(!list.contains(&node), "{node} lists itself at {layer}");
                let mut unique = list.to_vec();
                unique.sort_unstable();
                unique.dedup();
                assert_eq!(unique.len(), list.len(), "{node} {layer}: duplicates");
                assert!(list.iter().all(|&other| (other as usize) < live.nodes()));
            }
            // Every node is linked at layer 0 (nothing is isolated in a graph of distinct vectors).
            assert!(live.nodes() == 1 || !live.neighbours(node, 0).is_empty(), "{node} has no layer-0 list");
        }
        let frozen = live.to_frozen();
        let back = LiveGraph::from_frozen(&frozen, m, index.params.ef_construction).expect("fits its own capacity");
        assert_eq!(
            (frozen.nodes(), frozen.entry(), frozen.top_layer()),
            (live.nodes(), live.entry(), live.top_layer())
        );
        for node in 0..live.nodes() as Slot {
            for layer in 0..=live.top_layer() + 1 {
                assert_eq!(frozen.neighbours(node, layer), live.neighbours(node, layer), "{node} {layer}");
                assert_eq!(back.neighbours(node, layer), live.neighbours(node, layer), "{node} {layer}");
            }
        }
        // A list longer than a smaller M allows does not revive: the graph stays sealed.
        assert!(LiveGraph::from_frozen(&frozen, 2, 10).is_none());
    }
}

#[test]
fn a_sealed_graph_whose_lists_break_the_invariants_does_not_revive() {
    let graph = |lists: Vec<Slot>, offsets: Vec<u32>| {
        FrozenGraph::from_parts(0, 2, Some(0), vec![(offsets, lists)]).expect("ids within the graph")
    };
    assert!(LiveGraph::from_frozen(&graph(vec![1, 0], vec![0, 1, 2]), 4, 10).is_some());
    // Node 0 lists node 1 twice.
    assert!(LiveGraph::from_frozen(&graph(vec![1, 1, 0], vec![0, 2, 3]), 4, 10).is_none());
    // Node 0 lists itself.
    assert!(LiveGraph::from_frozen(&graph(vec![0, 1, 0], vec![0, 2, 3]), 4, 10).is_none());
    // Five neighbours where M = 2 allows four at layer 0; M = 3 takes them.
    let wide =
        FrozenGraph::from_parts(0, 6, Some(0), vec![(vec![0, 5, 6, 7, 8, 9, 10], vec![1, 2, 3, 4, 5, 0, 0, 0, 0, 0])])
            .expect("ids within the graph");
    assert!(LiveGraph::from_frozen(&wide, 2, 10).is_none());
    assert!(LiveGraph::from_frozen(&wide, 3, 10).is_some());
}

#[test]
fn the_graph_depends_only_on_the_vectors_and_their_order() {
    let build_in = |batches: &[usize]| {
        let mut index = VectorIndex::new(params(8, 0, 0.0));
        let mut rng = SmallRng::seed_from_u64(12);
        let mut first = 0;
        for &size in batches {
            let items: Vec<(Slot, DocOrdinal, Vec<f32>)> = (first..first + size)
                .map(|slot| (slot as Slot, slot as DocOrdinal, unit_vector(&mut rng, 8)))
                .collect();
            index.insert_batch(&items).expect("valid batch");
            first += size;
        }
        index.live.to_frozen()
    };
    let (whole, pieces) = (build_in(&[500]), build_in(&[1, 99, 250, 150]));
    assert_eq!(whole.entry(), pieces.entry());
    assert!(whole.layer_parts().eq(pieces.layer_parts()));
}

#[test]
fn a_parallel_build_does_not_depend_on_the_threads_and_keeps_the_recall_of_a_sequential_one() {
    let (count, dimension) = (4000usize, 16);
    let mut rng = SmallRng::seed_from_u64(13);
    let items: Vec<(Slot, DocOrdinal, Vec<f32>)> =
        (0..count).map(|slot| (slot as Slot, slot as DocOrdinal, unit_vector(&mut rng, dimension))).collect();
    let build_with = |threads: usize, batch: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
        pool.install(|| {
            let mut index = VectorIndex::new(params(dimension, 0, 0.0));
            for chunk in items.chunks(batch) {
                index.insert_batch(chunk).expect("valid batch");
            }
            index
        })
    };
    // One batch: groups searched in parallel once 1,024 nodes are in.
    let (one, four) = (build_with(1, count), build_with(4, count));
    assert!(one.live.to_frozen().layer_parts().eq(four.live.to_frozen().layer_parts()), "threads changed the graph");
    // Batches below the parallel threshold: one node at a time.
    let sequential = build_with(4, 500);
    let allowed: RoaringBitmap = (0..count as u32).filter(|ordinal| ordinal % 4 != 1).collect();
    let queries: Vec<Vec<f32>> = (0..50).map(|_| unit_vector(&mut rng, dimension)).collect();
    let found = |index: &VectorIndex| -> usize {
        queries
            .iter()
            .map(|query| {
                let truth = brute_force(index, query, 10, &allowed);
                index.search(query, 10, &allowed).hits.iter().filter(|hit| truth.contains(hit)).count()
            })
            .sum()
    };
    let (parallel_found, sequential_found) = (found(&four), found(&sequential));
    assert!(parallel_found + 5 >= sequential_found, "parallel {parallel_found}, sequential {sequential_found} of 500");
    assert!(parallel_found >= 475, "parallel build recall {parallel_found} of 500");
    // Nor does a walk of it work harder (long links to far group mates made it score more).
    let sparse: RoaringBitmap = (0..count as u32).filter(|ordinal| ordinal % 10 == 3).collect();
    let evaluations = |index: &VectorIndex| -> usize {
        queries.iter().map(|query| index.search(query, 10, &sparse).report.distance_computations).sum()
    };
    let (parallel_work, sequential_work) = (evaluations(&four), evaluations(&sequential));
    assert!(parallel_work * 10 <= sequential_work * 11, "parallel {parallel_work}, sequential {sequential_work}");
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
    // Rows are binary16: a component it would turn infinite is refused, its largest is kept.
    let beyond_half = [(1, 8, good.clone()), (2, 8, vec![65520.0, 0.0, 0.0, 0.0])];
    assert!(matches!(index.insert_batch(&beyond_half), Err(IndexError::NonFinite)));
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
fn insert_beyond_initial_capacity() {
    let index = build(params(8, 0, 0.0), 3000, 1, 21);
    assert_eq!(index.len(), 3000);
    let query = index.vector(5);
    assert_eq!(index.search_unfiltered(&query, 1)[0].slot, 5);
}

#[test]
fn best_first_walk_equals_brute_force_with_large_ef() {
    // ef >= len: the walk cannot stop before it has seen every reachable node.
    let mut index = build(params(16, 0, 0.0), 600, 2, 31);
    index.set_search_tuning(600, 0, 0.0);
    let reference = index.hnsw_rs_reference();
    let mut rng = SmallRng::seed_from_u64(32);
    for modulus in [2u32, 3, 7] {
        let allowed: RoaringBitmap = (0..300u32).filter(|ordinal| ordinal % modulus == 0).collect();
        for _ in 0..10 {
            let query = unit_vector(&mut rng, 16);
            let search = index.search_with(&query, 10, &allowed, GraphWalk::BestFirst(&reference));
            assert_eq!(search.report.strategy, VectorStrategy::Graph);
            assert_eq!(search.hits, brute_force(&index, &query, 10, &allowed));
        }
    }
}

#[test]
fn best_first_walk_stops_early_and_keeps_recall() {
    let index = build(params(16, 0, 0.0), 3000, 1, 41);
    let reference = index.hnsw_rs_reference();
    let mut rng = SmallRng::seed_from_u64(42);
    let allowed: RoaringBitmap = (0..3000u32).filter(|ordinal| ordinal % 2 == 0).collect();
    let (mut ours, mut theirs, mut found_ours, mut found_theirs) = (0, 0, 0, 0);
    for _ in 0..30 {
        let query = unit_vector(&mut rng, 16);
        let truth = brute_force(&index, &query, 10, &allowed);
        let best_first = index.search_with(&query, 10, &allowed, GraphWalk::BestFirst(&reference));
        let hnsw_rs = index.search_with(&query, 10, &allowed, GraphWalk::HnswRs(&reference));
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
    let reference = index.hnsw_rs_reference();
    let mut rng = SmallRng::seed_from_u64(52);
    for _ in 0..20 {
        let allowed: RoaringBitmap = (0..3).map(|_| rng.gen_range(0..500u32)).collect();
        let query = unit_vector(&mut rng, 8);
        for walk in [GraphWalk::BestFirst(&reference), GraphWalk::HnswRs(&reference), GraphWalk::Frozen] {
            let search = index.search_with(&query, 10, &allowed, walk);
            assert_eq!(search.hits, brute_force(&index, &query, 10, &allowed), "{walk:?}");
        }
    }
    // Allowed ordinals absent from the index: nothing to find, no work.
    let absent: RoaringBitmap = (10_000..10_050u32).collect();
    assert_eq!(index.search(&[0.5; 8], 10, &absent).report.strategy, VectorStrategy::Empty);
    // An empty index has no entry point.
    let empty = VectorIndex::new(params(8, 0, 0.0));
    assert!(empty.hnsw_rs_reference().best_first_walk(&empty, &[0.5; 8], 10, &|_: &usize| true).is_empty());
    assert!(empty.frozen_walk::<true, _>(&empty.live, &[0.5; 8], 10, &RoaringBitmap::new(), true).0.is_empty());
}

#[test]
fn prefetching_walk_returns_what_the_plain_walk_returns() {
    // The prefetch is only a cache hint: with and without it, the same hits, scores and
    // distance evaluations, whether everything, half or a fifth is allowed.
    let index = build(params(16, 0, 0.0), 2000, 2, 61);
    let mut rng = SmallRng::seed_from_u64(62);
    for modulus in [1u32, 2, 5] {
        let allowed: RoaringBitmap = (0..1000u32).filter(|ordinal| ordinal % modulus == 0).collect();
        for _ in 0..10 {
            let query = unit_vector(&mut rng, 16);
            let with = index.graph_top_k_with(&query, 10, &allowed, index.store.reach(&allowed), GraphWalk::OneHop);
            let without =
                index.graph_top_k_with(&query, 10, &allowed, index.store.reach(&allowed), GraphWalk::FrozenPlain);
            assert_eq!(with, without, "modulus {modulus}");
            assert_eq!(with.0.len(), 10);
        }
    }
}

#[test]
fn a_filtered_walk_shrinks_its_ef_with_the_square_root_of_its_scope() {
    // 1,000 documents of two chunks; ef_search 64.
    let index = build(params(8, 0, 0.0), 2000, 2, 71);
    let everything: RoaringBitmap = (0..1000u32).collect();
    assert_eq!(index.walk_ef(10, index.store.reach(&everything)), 64);
    // A quarter of this index's documents, and documents of other shards (absent here), which
    // must not count: 64 * sqrt(0.25).
    let quarter: RoaringBitmap = (0..1000u32).filter(|ordinal| ordinal % 4 == 0).chain(5000..9000).collect();
    assert_eq!(index.walk_ef(10, index.store.reach(&quarter)), 32);
    // 1 %: 64 * 0.1 rounds up to 7, below k.
    let hundredth: RoaringBitmap = (0..1000u32).step_by(100).collect();
    assert_eq!(index.walk_ef(10, index.store.reach(&hundredth)), 10);
    // k above ef_search: k, whatever the scope.
    assert_eq!(index.walk_ef(100, index.store.reach(&quarter)), 100);
    assert_eq!(index.walk_ef(100, index.store.reach(&everything)), 100);
}

#[test]
fn a_small_scope_walks_fewer_nodes_and_keeps_its_recall() {
    // A 10 % scope walked one-hop with the shrunk ef against the fixed ef_search: fewer
    // evaluations, and (nearly) the same hits.
    let index = build(params(16, 0, 0.0), 4000, 1, 81);
    let mut rng = SmallRng::seed_from_u64(82);
    let allowed: RoaringBitmap = (0..4000u32).filter(|ordinal| ordinal % 10 == 3).collect();
    let (mut shrunk_evaluations, mut fixed_evaluations, mut shrunk_found, mut fixed_found) = (0, 0, 0, 0);
    for _ in 0..30 {
        let query = unit_vector(&mut rng, 16);
        let truth = brute_force(&index, &query, 10, &allowed);
        let reach = index.store.reach(&allowed);
        let (mut shrunk, made) = index.walk_every_graph::<true>(&query, index.walk_ef(10, reach), &allowed, false);
        sort_best_first(&mut shrunk);
        shrunk.truncate(10);
        shrunk_evaluations += made;
        shrunk_found += shrunk.iter().filter(|hit| truth.contains(hit)).count();
        let (mut fixed, made) = index.walk_every_graph::<true>(&query, 64, &allowed, false);
        sort_best_first(&mut fixed);
        fixed.truncate(10);
        fixed_evaluations += made;
        fixed_found += fixed.iter().filter(|hit| truth.contains(hit)).count();
    }
    assert!(
        shrunk_evaluations * 10 < fixed_evaluations * 8,
        "shrunk ef {shrunk_evaluations} against fixed {fixed_evaluations} evaluations"
    );
    assert!(shrunk_found * 100 >= fixed_found * 97, "shrunk ef found {shrunk_found}, fixed {fixed_found} of 300");
}

#[test]
fn a_sparse_scope_is_walked_two_hop_with_fewer_evaluations_at_the_same_recall() {
    // A 10 % scope: searches walk it two-hop, scoring allowed nodes only; against the one-hop
    // walk of the same scope, far fewer evaluations and (nearly) the same hits.
    let index = build(params(16, 0, 0.0), 4000, 1, 83);
    let mut rng = SmallRng::seed_from_u64(84);
    let allowed: RoaringBitmap = (0..4000u32).filter(|ordinal| ordinal % 10 == 7).collect();
    let reach = index.store.reach(&allowed);
    assert!((TWO_HOP_MIN_SELECTIVITY..=TWO_HOP_MAX_SELECTIVITY).contains(&reach.selectivity()));
    let (mut two_hop_evaluations, mut one_hop_evaluations, mut two_hop_found, mut one_hop_found) = (0, 0, 0, 0);
    for _ in 0..30 {
        let query = unit_vector(&mut rng, 16);
        let truth = brute_force(&index, &query, 10, &allowed);
        let (two_hop, made) = index.graph_top_k(&query, 10, &allowed, reach);
        assert!(two_hop.iter().all(|hit| allowed.contains(index.doc_ordinal(hit.slot))));
        assert!(two_hop.windows(2).all(|pair| WorseFirst(pair[0]) < WorseFirst(pair[1])));
        two_hop_evaluations += made;
        two_hop_found += two_hop.iter().filter(|hit| truth.contains(hit)).count();
        let (one_hop, made) = index.graph_top_k_with(&query, 10, &allowed, reach, GraphWalk::OneHop);
        one_hop_evaluations += made;
        one_hop_found += one_hop.iter().filter(|hit| truth.contains(hit)).count();
    }
    assert!(
        two_hop_evaluations * 2 < one_hop_evaluations,
        "two-hop {two_hop_evaluations} against one-hop {one_hop_evaluations} evaluations"
    );
    assert!(two_hop_found * 100 >= one_hop_found * 97, "two-hop found {two_hop_found}, one-hop {one_hop_found} of 300");
    // Above and below the two-hop selectivities searches walk one-hop: the same hits and work.
    for modulus in [2u32, 25] {
        let scope: RoaringBitmap = (0..4000u32).filter(|ordinal| ordinal % modulus == 0).collect();
        let query = unit_vector(&mut rng, 16);
        let reach = index.store.reach(&scope);
        assert!(!(TWO_HOP_MIN_SELECTIVITY..=TWO_HOP_MAX_SELECTIVITY).contains(&reach.selectivity()));
        let one_hop = index.graph_top_k_with(&query, 10, &scope, reach, GraphWalk::OneHop);
        assert_eq!(index.graph_top_k(&query, 10, &scope, reach), one_hop, "modulus {modulus}");
    }
}

#[test]
fn a_two_hop_walk_keeps_a_larger_pool_than_a_one_hop_walk_of_the_same_scope() {
    // ef_search 64: at 10 % the one-hop walk keeps 64 * 0.1^0.5 (21), the two-hop walk
    // 64 * 0.1^0.25 (36); k bounds both from below, ef_search from above.
    let index = build(params(8, 0, 0.0), 1000, 1, 85);
    let tenth: RoaringBitmap = (0..1000u32).step_by(10).collect();
    let reach = index.store.reach(&tenth);
    assert_eq!((index.walk_ef(10, reach), index.two_hop_ef(10, reach)), (21, 36));
    assert_eq!(index.two_hop_ef(50, reach), 50);
    assert_eq!(index.two_hop_ef(100, reach), 100);
    let everything: RoaringBitmap = (0..1000u32).collect();
    assert_eq!(index.two_hop_ef(10, index.store.reach(&everything)), 64);
}

#[test]
fn unreachable_allowed_vectors_fall_back_to_exact_scan() {
    // Among identical vectors every search returns the lowest slots (ties by slot), so later
    // copies link only to them and lose their own incoming links when those lists are cut:
    // no walk can reach them (hnsw_rs prunes such reverse links too).
    let copies = 300usize;
    let mut index = VectorIndex::new(VectorParams { max_connections: 4, ef_construction: 8, ..params(4, 0, 0.0) });
    let items: Vec<(Slot, DocOrdinal, Vec<f32>)> =
        (0..copies).map(|slot| (slot as Slot, slot as DocOrdinal, vec![0.5; 4])).collect();
    index.insert_batch(&items).expect("valid batch");
    let reference = index.hnsw_rs_reference();
    let allowed: RoaringBitmap = (1..copies as u32).collect();
    for walk in [GraphWalk::BestFirst(&reference), GraphWalk::HnswRs(&reference), GraphWalk::Frozen] {
        let (walked, _) = index.graph_top_k_with(&[0.5; 4], copies, &allowed, index.store.reach(&allowed), walk);
        assert!(walked.len() < copies - 1, "{walk:?} reached every copy: the test needs another graph");
        let search = index.search_with(&[0.5; 4], copies, &allowed, walk);
        assert_eq!(search.hits, brute_force(&index, &[0.5; 4], copies, &allowed), "{walk:?}");
        assert_eq!(search.report.strategy, VectorStrategy::Exact);
        assert_eq!(search.report.allowed, copies - 1);
        assert!(search.report.distance_computations > copies - 1);
    }
}

proptest! {
    /// Any M, any construction pool, vectors drawn from a handful of distinct ones (so
    /// duplicates and ties are common), inserted in batches of any size: every list stays within
    /// its layer's capacity, without the node itself or a repeat, naming nodes only; the graph
    /// round-trips through compressed rows; a walk over it returns stored slots only.
    #[test]
    fn live_graphs_stay_well_formed_under_any_inserts(
        seed in any::<u64>(),
        max_connections in 2usize..9,
        ef_construction in 1usize..20,
        distinct in 1usize..12,
        batches in proptest::collection::vec(1usize..40, 1..6),
    ) {
        let mut rng = SmallRng::seed_from_u64(seed);
        let palette: Vec<Vec<f32>> = (0..distinct).map(|_| unit_vector(&mut rng, 3)).collect();
        let mut index = VectorIndex::new(VectorParams { max_connections, ef_construction, ..params(3, 0, 0.0) });
        for size in batches {
            let first = index.len();
            let items: Vec<(Slot, DocOrdinal, Vec<f32>)> = (first..first + size)
                .map(|slot| (slot as Slot, slot as DocOrdinal, palette[rng.gen_range(0..distinct)].clone()))
                .collect();
            index.insert_batch(&items).expect("valid batch");
        }
        let live = &index.live;
        prop_assert_eq!(live.nodes(), index.len());
        prop_assert!(live.entry().is_some());
        for node in 0..live.nodes() as Slot {
            for layer in 0..=live.top_layer() + 1 {
                let list = live.neighbours(node, layer);
                let capacity = if layer == 0 { 2 * max_connections } else { max_connections };
                prop_assert!(list.len() <= capacity);
                prop_assert!(!list.contains(&node));
                let mut unique = list.to_vec();
                unique.sort_unstable();
                unique.dedup();
                prop_assert_eq!(unique.len(), list.len());
                prop_assert!(list.iter().all(|&other| (other as usize) < live.nodes()));
            }
        }
        let frozen = live.to_frozen();
        let back = LiveGraph::from_frozen(&frozen, max_connections, ef_construction);
        prop_assert!(back.is_some());
        let back = back.expect("checked");
        for node in 0..live.nodes() as Slot {
            for layer in 0..=live.top_layer() {
                prop_assert_eq!(back.neighbours(node, layer), live.neighbours(node, layer));
            }
        }
        let everything: RoaringBitmap = (0..index.len() as u32).collect();
        let query = unit_vector(&mut rng, 3);
        let (hits, _) = index.walk_every_graph::<true>(&query, index.len(), &everything, true);
        prop_assert!(hits.iter().all(|hit| (hit.slot as usize) < index.len()));
        prop_assert!(hits.len() <= index.len());
    }
}

proptest! {
    #[test]
    fn graph_walks_never_leave_allowed(
        seed in any::<u64>(),
        count in 1usize..200,
        chunks_per_doc in 1usize..4,
        allowed_ordinals in proptest::collection::vec(0u32..80, 0..80),
        k in 1usize..15,
        ef in 1usize..40,
    ) {
        let mut index = build(params(6, 0, 0.0), count, chunks_per_doc, seed);
        index.set_search_tuning(ef, 0, 0.0);
        let reference = index.hnsw_rs_reference();
        let allowed: RoaringBitmap = allowed_ordinals.into_iter().collect();
        let mut rng = SmallRng::seed_from_u64(seed ^ 0xbe57);
        let query = unit_vector(&mut rng, 6);
        let truth = brute_force(&index, &query, k, &allowed);
        for walk in [GraphWalk::BestFirst(&reference), GraphWalk::FrozenPlain, GraphWalk::OneHop, GraphWalk::Frozen] {
            let search = index.search_with(&query, k, &allowed, walk);
            prop_assert!(search.hits.len() <= k);
            prop_assert!(search.hits.iter().all(|hit| allowed.contains(index.doc_ordinal(hit.slot))), "{:?}", walk);
            prop_assert!(search.hits.windows(2).all(|pair| WorseFirst(pair[0]) < WorseFirst(pair[1])));
            // Fewer than k only when fewer than k are allowed (the fallback guarantees it).
            prop_assert_eq!(search.hits.len(), truth.len());
            for hit in &search.hits {
                prop_assert_eq!(hit.score, index.score(&query, hit.slot));
            }
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
