//! Filtered vector search benchmark: recall and latency of [`VectorIndex::search`] under
//! authorization bitmaps of several selectivities, against the unfiltered HNSW walk on the same
//! queries and against post-filtering its top-k.
//!
//! Data are seeded synthetic unit embeddings drawn around gaussian clusters (uniform random
//! vectors make HNSW recall unrealistically low), one vector per document ordinal, so the
//! ordinal of a vector is its slot. Ground truth is an exact filtered brute force.
//!
//! Every selectivity is measured with both graph walks ([`GraphWalk`]) on the same allowed set
//! and queries, interleaved query by query (alternating which walk runs first), so the rows of
//! the two walks compare like for like.

use std::time::Instant;

use rand::rngs::SmallRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use roaring::RoaringBitmap;

use crate::domain::DocOrdinal;
use crate::embed::{dot, normalize};
use crate::index::Slot;
use crate::index::vector::{GraphWalk, VectorIndex, VectorParams, VectorStrategy, distance_count};

/// Norm of the gaussian noise added to a cluster centre (unit norm) before normalizing: points
/// of one cluster then have cosine ~0.7 to their centre and ~0.5 to each other.
const CLUSTER_SPREAD: f32 = 1.0;

/// Batch size of index construction.
const INSERT_BATCH: usize = 10_000;

/// The graph walks measured side by side, in row order.
const WALKS: [GraphWalk; 2] = [GraphWalk::HnswRs, GraphWalk::BestFirst];

/// What to build and measure.
#[derive(Clone, Debug)]
pub struct FilteredBenchConfig {
    /// Indexed vectors (one per document ordinal).
    pub vectors: usize,
    /// Vector dimension.
    pub dim: usize,
    /// Queries per selectivity.
    pub queries: usize,
    /// Hits requested per query (recall is measured at this k).
    pub k: usize,
    /// Seed of all randomness.
    pub seed: u64,
    /// Allowed fractions of the documents, each in `0..=1`.
    pub selectivities: Vec<f64>,
    /// Index parameters.
    pub params: VectorParams,
    /// Gaussian clusters the vectors and queries are drawn around.
    pub clusters: usize,
}

/// One measured selectivity.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FilteredRow {
    /// Allowed fraction of the documents.
    pub selectivity: f64,
    /// Planner strategy (`exact`, `graph`, `empty`, or `mixed` if queries differed).
    pub strategy: String,
    /// Graph walk used when the strategy is `graph` (`hnsw_rs` or `best_first`).
    pub walk: String,
    /// Mean recall of the filtered search against exact filtered brute force.
    pub recall_at_10: f64,
    /// Median filtered search latency, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile filtered search latency, milliseconds.
    pub p99_ms: f64,
    /// 99th percentile of the unfiltered HNSW search on the same queries, milliseconds.
    pub unfiltered_p99_ms: f64,
    /// Mean recall of "unfiltered top-k, then drop what is not allowed".
    pub postfilter_recall_at_10: f64,
    /// Allowed vectors.
    pub allowed: usize,
    /// Mean distance evaluations per filtered search.
    pub distance_computations_mean: f64,
    /// Mean distance evaluations per unfiltered search (a timing-noise-free baseline).
    pub unfiltered_distance_computations_mean: f64,
}

/// Standard normal sample (Box-Muller; rand 0.8 has no normal distribution without rand_distr).
fn gaussian(rng: &mut SmallRng) -> f32 {
    let uniform: f64 = rng.gen_range(f64::MIN_POSITIVE..1.0);
    let angle: f64 = rng.gen_range(0.0..std::f64::consts::TAU);
    ((-2.0 * uniform.ln()).sqrt() * angle.cos()) as f32
}

fn random_unit(rng: &mut SmallRng, dim: usize) -> Vec<f32> {
    let mut vector: Vec<f32> = (0..dim).map(|_| gaussian(rng)).collect();
    normalize(&mut vector);
    vector
}

/// A unit vector near `centre`.
fn near(rng: &mut SmallRng, centre: &[f32]) -> Vec<f32> {
    let sigma = CLUSTER_SPREAD / (centre.len() as f32).sqrt();
    let mut vector: Vec<f32> = centre.iter().map(|value| value + sigma * gaussian(rng)).collect();
    normalize(&mut vector);
    vector
}

/// The seeded clustered index and queries of `config`.
pub fn build_data(config: &FilteredBenchConfig) -> (VectorIndex, Vec<Vec<f32>>) {
    let mut rng = SmallRng::seed_from_u64(config.seed);
    let centres: Vec<Vec<f32>> = (0..config.clusters.max(1)).map(|_| random_unit(&mut rng, config.dim)).collect();
    let mut index = VectorIndex::new(VectorParams { dimension: config.dim, ..config.params });
    let mut slot = 0usize;
    while slot < config.vectors {
        let end = (slot + INSERT_BATCH).min(config.vectors);
        let batch: Vec<(Slot, DocOrdinal, Vec<f32>)> = (slot..end)
            .map(|position| {
                let centre = &centres[rng.gen_range(0..centres.len())];
                (position as Slot, position as DocOrdinal, near(&mut rng, centre))
            })
            .collect();
        index.insert_batch(&batch).expect("generated vectors are valid");
        slot = end;
    }
    let queries = (0..config.queries)
        .map(|_| {
            let centre = &centres[rng.gen_range(0..centres.len())];
            near(&mut rng, centre)
        })
        .collect();
    (index, queries)
}

/// Builds the data of `config`, then measures every selectivity.
pub fn run(config: &FilteredBenchConfig) -> Vec<FilteredRow> {
    let (index, queries) = build_data(config);
    measure(&index, &queries, config)
}

/// Measures every selectivity of `config` on an already built index (lets a tuning driver vary
/// search-time parameters without rebuilding).
pub fn measure(index: &VectorIndex, queries: &[Vec<f32>], config: &FilteredBenchConfig) -> Vec<FilteredRow> {
    let mut rng = SmallRng::seed_from_u64(config.seed ^ 0x00A1_107E);
    // Warm caches and lazy allocations so the first measured query is not an outlier.
    for query in queries.iter().take(10) {
        std::hint::black_box(index.search_unfiltered(query, config.k));
    }
    config
        .selectivities
        .iter()
        .flat_map(|&selectivity| measure_one(index, queries, config, selectivity, &mut rng))
        .collect()
}

/// Per-walk accumulators of one selectivity.
#[derive(Default)]
struct WalkTotals {
    latencies_ms: Vec<f64>,
    recall_sum: f64,
    distance_sum: usize,
    strategies: Vec<VectorStrategy>,
}

/// One row per walk in [`WALKS`] order, all on the same allowed set and queries.
fn measure_one(
    index: &VectorIndex,
    queries: &[Vec<f32>],
    config: &FilteredBenchConfig,
    selectivity: f64,
    rng: &mut SmallRng,
) -> Vec<FilteredRow> {
    let total = index.len();
    let allowed_count = ((selectivity.clamp(0.0, 1.0) * total as f64).round() as usize).min(total);
    let allowed: RoaringBitmap = sample(rng, total, allowed_count).into_iter().map(|ordinal| ordinal as u32).collect();
    let mut unfiltered_ms = Vec::with_capacity(queries.len());
    let mut postfilter_recall_sum = 0.0;
    let mut unfiltered_distance_sum = 0usize;
    let mut totals: Vec<WalkTotals> = WALKS.iter().map(|_| WalkTotals::default()).collect();
    for (number, query) in queries.iter().enumerate() {
        let distances_before = distance_count();
        let started = Instant::now();
        let unfiltered = index.search_unfiltered(query, config.k);
        unfiltered_ms.push(started.elapsed().as_secs_f64() * 1e3);
        unfiltered_distance_sum += distance_count() - distances_before;
        let truth = brute_force(index, query, config.k, &allowed);
        let postfiltered =
            unfiltered.iter().map(|hit| hit.slot).filter(|slot| allowed.contains(index.doc_ordinal(*slot)));
        postfilter_recall_sum += recall(&truth, postfiltered);

        // Alternate which walk runs first so neither always gets the warmer cache.
        for turn in 0..WALKS.len() {
            let position = (turn + number) % WALKS.len();
            let totals = &mut totals[position];
            let started = Instant::now();
            let search = index.search_with(query, config.k, &allowed, WALKS[position]);
            totals.latencies_ms.push(started.elapsed().as_secs_f64() * 1e3);
            assert!(search.hits.iter().all(|hit| allowed.contains(index.doc_ordinal(hit.slot))), "hit outside allowed");
            totals.recall_sum += recall(&truth, search.hits.iter().map(|hit| hit.slot));
            totals.distance_sum += search.report.distance_computations;
            if !totals.strategies.contains(&search.report.strategy) {
                totals.strategies.push(search.report.strategy);
            }
        }
    }
    let count = queries.len().max(1) as f64;
    let unfiltered_p99_ms = percentile(&mut unfiltered_ms, 0.99);
    WALKS
        .iter()
        .zip(totals)
        .map(|(walk, mut totals)| FilteredRow {
            selectivity,
            strategy: match totals.strategies.as_slice() {
                [single] => single.as_str().to_owned(),
                [] => "none".to_owned(),
                _ => "mixed".to_owned(),
            },
            walk: walk.as_str().to_owned(),
            recall_at_10: totals.recall_sum / count,
            p50_ms: percentile(&mut totals.latencies_ms, 0.50),
            p99_ms: percentile(&mut totals.latencies_ms, 0.99),
            unfiltered_p99_ms,
            postfilter_recall_at_10: postfilter_recall_sum / count,
            allowed: allowed_count,
            distance_computations_mean: totals.distance_sum as f64 / count,
            unfiltered_distance_computations_mean: unfiltered_distance_sum as f64 / count,
        })
        .collect()
}

/// Exact filtered top-k slots (one vector per ordinal: ordinal == slot).
fn brute_force(index: &VectorIndex, query: &[f32], k: usize, allowed: &RoaringBitmap) -> Vec<Slot> {
    let mut scored: Vec<(f32, Slot)> = allowed
        .iter()
        .filter(|ordinal| (*ordinal as usize) < index.len())
        .map(|slot| (dot(query, index.vector(slot)), slot))
        .collect();
    scored.sort_by(|left, right| right.0.total_cmp(&left.0).then(left.1.cmp(&right.1)));
    scored.into_iter().take(k).map(|(_, slot)| slot).collect()
}

/// Fraction of `truth` found among `found` (1 when the truth is empty).
fn recall(truth: &[Slot], found: impl Iterator<Item = Slot>) -> f64 {
    if truth.is_empty() {
        return 1.0;
    }
    let hits = found.filter(|slot| truth.contains(slot)).count();
    hits as f64 / truth.len() as f64
}

/// Nearest-rank percentile of `values` (sorted in place); 0 when empty.
fn percentile(values: &mut [f64], quantile: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let rank = (quantile * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
        std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
    }

    #[test]
    fn tiny_run_has_sane_recall() {
        let config = FilteredBenchConfig {
            vectors: 2000,
            dim: 32,
            queries: 40,
            k: 10,
            seed: 42,
            selectivities: vec![0.001, 0.01, 0.1, 0.5, 1.0],
            params: VectorParams { exact_scan_threshold: 100, ..VectorParams::with_dimension(32) },
            clusters: 20,
        };
        let rows = run(&config);
        assert_eq!(rows.len(), 5 * WALKS.len());
        for row in &rows {
            assert!((0.0..=1.0).contains(&row.recall_at_10), "{row:?}");
            assert!((0.0..=1.0).contains(&row.postfilter_recall_at_10), "{row:?}");
            assert!(row.recall_at_10 >= 0.9, "{row:?}");
        }
        for (pair, walks) in rows.chunks(WALKS.len()).zip(std::iter::repeat(&WALKS)) {
            assert!(pair.iter().zip(walks).all(|(row, walk)| row.walk == walk.as_str()), "{pair:?}");
            assert!(pair.iter().all(|row| row.selectivity == pair[0].selectivity), "{pair:?}");
        }
        assert_eq!(rows[0].strategy, "exact");
        assert_eq!(rows[4 * WALKS.len()].strategy, "graph");
        // The best-first walk stops early: never more work than hnsw_rs' filtered walk at 50%.
        let half: Vec<&FilteredRow> = rows.iter().filter(|row| row.selectivity == 0.5).collect();
        assert_eq!(half[1].walk, "best_first");
        assert!(half[1].distance_computations_mean <= half[0].distance_computations_mean, "{half:?}");
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let mut values: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(percentile(&mut values, 0.5), 50.0);
        assert_eq!(percentile(&mut values, 0.99), 99.0);
        assert_eq!(percentile(&mut [], 0.99), 0.0);
    }

    /// Benchmark driver (release mode): prints one JSON row per selectivity. Environment
    /// overrides: BENCH_VECTORS, BENCH_DIM, BENCH_QUERIES, BENCH_M, BENCH_EF_CONSTRUCTION, and
    /// comma-separated lists BENCH_SELECTIVITY, BENCH_EF, BENCH_THRESHOLD, BENCH_FRACTION tried on
    /// one build.
    #[test]
    #[ignore = "benchmark: run in release with --ignored --nocapture"]
    fn filtered_benchmark_rows() {
        let defaults = VectorParams::with_dimension(384);
        let list = |name: &str, default: String| -> Vec<String> {
            std::env::var(name).unwrap_or(default).split(',').map(str::to_owned).collect()
        };
        let dim = env_or("BENCH_DIM", 384);
        let config = FilteredBenchConfig {
            vectors: env_or("BENCH_VECTORS", 50_000),
            dim,
            queries: env_or("BENCH_QUERIES", 300),
            k: 10,
            seed: 7,
            selectivities: list("BENCH_SELECTIVITY", "0.001,0.01,0.1,0.5,1.0".to_owned())
                .iter()
                .map(|value| value.parse().expect("selectivity"))
                .collect(),
            params: VectorParams {
                dimension: dim,
                max_connections: env_or("BENCH_M", defaults.max_connections),
                ef_construction: env_or("BENCH_EF_CONSTRUCTION", defaults.ef_construction),
                ..defaults
            },
            clusters: env_or("BENCH_CLUSTERS", 100),
        };
        let started = Instant::now();
        let (mut index, queries) = build_data(&config);
        println!("{{\"build_seconds\": {:.1}, \"params\": \"{:?}\"}}", started.elapsed().as_secs_f64(), config.params);
        for ef in list("BENCH_EF", defaults.ef_search.to_string()) {
            for threshold in list("BENCH_THRESHOLD", defaults.exact_scan_threshold.to_string()) {
                for fraction in list("BENCH_FRACTION", defaults.exact_scan_max_fraction.to_string()) {
                    let (ef, threshold, fraction) = (
                        ef.parse().expect("ef"),
                        threshold.parse().expect("threshold"),
                        fraction.parse().expect("fraction"),
                    );
                    index.set_search_tuning(ef, threshold, fraction);
                    println!("# ef_search={ef} exact_scan_threshold={threshold} exact_scan_max_fraction={fraction}");
                    for row in measure(&index, &queries, &config) {
                        println!("{}", serde_json::to_string(&row).expect("row serializes"));
                    }
                }
            }
        }
    }
}
