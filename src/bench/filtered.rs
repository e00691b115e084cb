//! Filtered vector search benchmark: recall and latency of [`VectorIndex::search`] under
//! authorization bitmaps of several selectivities, against the unfiltered HNSW walk on the same
//! queries and against post-filtering its top-k.
//!
//! Data are seeded synthetic unit embeddings drawn around gaussian clusters (uniform random
//! vectors make HNSW recall unrealistically low), one vector per document ordinal, so the
//! ordinal of a vector is its slot. Ground truth is an exact filtered brute force.
//!
//! Every selectivity is measured with the production walk over the index's own graphs and,
//! given hnsw_rs' graph of the same vectors ([`HnswRsReference`], `--compare-walks`), with every
//! other walk ([`GraphWalk`]: hnsw_rs' own, the old best-first walk over hnsw_rs nodes with the
//! scalar dot, the production walk without its cache prefetch) on the same allowed set and
//! queries, interleaved query by query (rotating which walk runs first), so the rows compare
//! like for like within one run.
//!
//! [`run_peer`] measures the same way on the files `shared/peers/export_vectors.py` writes
//! (the data pgvector was measured on), with the allowed set `bucket < round(1000 s)` and the
//! peer's ground-truth files, beside pgvector's best figures on those files.

use std::path::Path;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use roaring::RoaringBitmap;

use crate::domain::DocOrdinal;
use crate::embed::normalize;
use crate::index::Slot;
use crate::index::vector::{GraphWalk, HnswRsReference, VectorIndex, VectorParams, VectorStrategy, distance_count};

/// Norm of the gaussian noise added to a cluster centre (unit norm) before normalizing: points
/// of one cluster then have cosine ~0.7 to their centre and ~0.5 to each other.
const CLUSTER_SPREAD: f32 = 1.0;

/// Batch size of index construction.
const INSERT_BATCH: usize = 10_000;

/// The graph walks measured side by side, in row order: the production walk and the one-hop
/// walk (the same walk above the two-hop walk's selectivities), and with a reference graph the
/// other three.
fn walks(reference: Option<&HnswRsReference>) -> Vec<GraphWalk<'_>> {
    match reference {
        Some(reference) => vec![
            GraphWalk::HnswRs(reference),
            GraphWalk::BestFirst(reference),
            GraphWalk::FrozenPlain,
            GraphWalk::OneHop,
            GraphWalk::Frozen,
        ],
        None => vec![GraphWalk::Frozen, GraphWalk::OneHop],
    }
}

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
    /// Graph walk used when the strategy is `graph` (`hnsw_rs`, `best_first` or `frozen`).
    pub walk: String,
    /// Mean recall of the filtered search against exact filtered brute force, at the run's k
    /// (10 unless `--k` says otherwise; the name is kept for the readers of earlier rows).
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
    /// Mean latency divided by mean distance evaluations, nanoseconds: the whole cost of one
    /// evaluation (dot product, graph bookkeeping, filter), comparable to a bare dot product.
    pub ns_per_distance: f64,
    /// Median latency divided by mean distance evaluations, nanoseconds: the same figure with
    /// less weight on the stalls of a loaded machine.
    pub ns_per_distance_p50: f64,
    /// pgvector's best p50 at this selectivity on the same files (peer runs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pgvector_best_p50_ms: Option<f64>,
    /// pgvector's recall@10 in that configuration (peer runs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pgvector_best_recall_at_10: Option<f64>,
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
    // Measure the planner's costs on the finished index (insert calibrates only on doubling).
    index.calibrate();
    (index, queries)
}

/// Builds the data of `config`, then measures every selectivity (the production walk only).
pub fn run(config: &FilteredBenchConfig) -> Vec<FilteredRow> {
    let (index, queries) = build_data(config);
    measure(&index, &queries, config, None)
}

/// Measures every selectivity of `config` on an already built index (lets a tuning driver vary
/// search-time parameters without rebuilding); with `reference` (hnsw_rs' graph of the same
/// vectors) every walk side by side, else the production walk.
pub fn measure(
    index: &VectorIndex,
    queries: &[Vec<f32>],
    config: &FilteredBenchConfig,
    reference: Option<&HnswRsReference>,
) -> Vec<FilteredRow> {
    let mut rng = SmallRng::seed_from_u64(config.seed ^ 0x00A1_107E);
    // Warm caches and lazy allocations so the first measured query is not an outlier.
    for query in queries.iter().take(10) {
        std::hint::black_box(index.search_unfiltered(query, config.k));
    }
    config
        .selectivities
        .iter()
        .flat_map(|&selectivity| measure_one(index, queries, config, selectivity, &mut rng, reference))
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

/// One row per walk in [`walks`] order, all on the same allowed set and queries.
fn measure_one(
    index: &VectorIndex,
    queries: &[Vec<f32>],
    config: &FilteredBenchConfig,
    selectivity: f64,
    rng: &mut SmallRng,
    reference: Option<&HnswRsReference>,
) -> Vec<FilteredRow> {
    let total = index.len();
    let allowed_count = ((selectivity.clamp(0.0, 1.0) * total as f64).round() as usize).min(total);
    let allowed: RoaringBitmap = sample(rng, total, allowed_count).into_iter().map(|ordinal| ordinal as u32).collect();
    let truth = |_: usize, query: &[f32]| brute_force(index, query, config.k, &allowed);
    measure_allowed(index, queries, config.k, selectivity, &allowed, &truth, &walks(reference))
}

/// One row per walk of `walks` for one allowed set; `truth(number, query)` is the exact
/// filtered top-k of query `number`.
fn measure_allowed(
    index: &VectorIndex,
    queries: &[Vec<f32>],
    k: usize,
    selectivity: f64,
    allowed: &RoaringBitmap,
    truth: &dyn Fn(usize, &[f32]) -> Vec<Slot>,
    walks: &[GraphWalk<'_>],
) -> Vec<FilteredRow> {
    let mut unfiltered_ms = Vec::with_capacity(queries.len());
    let mut postfilter_recall_sum = 0.0;
    let mut unfiltered_distance_sum = 0usize;
    let mut totals: Vec<WalkTotals> = walks.iter().map(|_| WalkTotals::default()).collect();
    for (number, query) in queries.iter().enumerate() {
        let truth = truth(number, query);
        // Rotate which search runs first (the unfiltered one among the walks) so none always
        // meets the query's neighbourhood cold and none always finds it warm.
        for turn in 0..=walks.len() {
            let position = (turn + number) % (walks.len() + 1);
            let Some(totals) = totals.get_mut(position) else {
                let distances_before = distance_count();
                let started = Instant::now();
                let unfiltered = index.search_unfiltered(query, k);
                unfiltered_ms.push(started.elapsed().as_secs_f64() * 1e3);
                unfiltered_distance_sum += distance_count() - distances_before;
                let postfiltered =
                    unfiltered.iter().map(|hit| hit.slot).filter(|slot| allowed.contains(index.doc_ordinal(*slot)));
                postfilter_recall_sum += recall(&truth, postfiltered);
                continue;
            };
            let started = Instant::now();
            let search = index.search_with(query, k, allowed, walks[position]);
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
    let allowed_count = (0..index.len() as Slot).filter(|slot| allowed.contains(index.doc_ordinal(*slot))).count();
    let unfiltered_p99_ms = percentile(&mut unfiltered_ms, 0.99);
    walks
        .iter()
        .zip(totals)
        .map(|(walk, mut totals)| {
            let mean_ms = totals.latencies_ms.iter().sum::<f64>() / count;
            let distance_mean = totals.distance_sum as f64 / count;
            let p50_ms = percentile(&mut totals.latencies_ms, 0.50);
            FilteredRow {
                selectivity,
                strategy: match totals.strategies.as_slice() {
                    [single] => single.as_str().to_owned(),
                    [] => "none".to_owned(),
                    _ => "mixed".to_owned(),
                },
                walk: walk.as_str().to_owned(),
                recall_at_10: totals.recall_sum / count,
                p50_ms,
                p99_ms: percentile(&mut totals.latencies_ms, 0.99),
                unfiltered_p99_ms,
                postfilter_recall_at_10: postfilter_recall_sum / count,
                allowed: allowed_count,
                distance_computations_mean: distance_mean,
                unfiltered_distance_computations_mean: unfiltered_distance_sum as f64 / count,
                ns_per_distance: if distance_mean > 0.0 { mean_ms * 1e6 / distance_mean } else { 0.0 },
                ns_per_distance_p50: if distance_mean > 0.0 { p50_ms * 1e6 / distance_mean } else { 0.0 },
                pgvector_best_p50_ms: None,
                pgvector_best_recall_at_10: None,
            }
        })
        .collect()
}

/// The selectivities the peer's files carry ground truth for.
pub const PEER_SELECTIVITIES: [f64; 5] = [0.001, 0.01, 0.1, 0.5, 1.0];

/// pgvector 0.8.0's best configuration per selectivity on the peer files
/// (`shared/peers/README.md`): (selectivity, recall@10, p50 ms), the lowest p50 at recall@10 >=
/// 0.97 among the configurations measured there.
pub const PGVECTOR_BEST: [(f64, f64, f64); 5] =
    [(0.001, 1.000, 3.74), (0.01, 1.000, 4.28), (0.1, 1.000, 1.02), (0.5, 0.987, 0.79), (1.0, 0.994, 0.77)];

/// The peer's workload, read from the directory `export_vectors.py --data-dir` wrote.
pub struct PeerData {
    /// Base vectors, row-major, id = row.
    pub base: Vec<Vec<f32>>,
    /// Query vectors.
    pub queries: Vec<Vec<f32>>,
    /// Bucket (0..999) of every base row.
    pub buckets: Vec<i32>,
}

/// An `InvalidData` error with `message`.
fn invalid(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

/// Reads a little-endian 4-byte file as rows of `width` values (`rows` = size / row bytes);
/// errors name the file and say what is wrong with it.
fn read_le_rows<T>(path: &Path, width: usize, convert: fn([u8; 4]) -> T) -> std::io::Result<Vec<Vec<T>>> {
    let bytes = std::fs::read(path)
        .map_err(|error| std::io::Error::new(error.kind(), format!("cannot read {}: {error}", path.display())))?;
    let row_bytes = width * 4;
    if width == 0 {
        return Err(invalid(format!("{}: rows of width 0 requested (is --dim 0?)", path.display())));
    }
    if bytes.is_empty() || bytes.len() % row_bytes != 0 {
        return Err(invalid(format!(
            "{}: {} bytes is not a positive whole number of rows of {width} 4-byte values ({row_bytes} bytes; is --dim right?)",
            path.display(),
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(row_bytes)
        .map(|row| row.chunks_exact(4).map(|value| convert([value[0], value[1], value[2], value[3]])).collect())
        .collect())
}

/// Checks every value of `rows` (read from `path`) is finite.
fn check_finite(path: &Path, rows: &[Vec<f32>]) -> std::io::Result<()> {
    match rows.iter().enumerate().find(|(_, row)| !row.iter().all(|value| value.is_finite())) {
        Some((row, _)) => Err(invalid(format!("{}: row {row} holds a NaN or infinite value", path.display()))),
        None => Ok(()),
    }
}

impl PeerData {
    /// Reads `base_f32le.bin`, `queries_f32le.bin` and `buckets_i32le.bin` of dimension `dim`
    /// (format in `shared/peers/README.md`). Rejects missing files, sizes that are not whole
    /// rows of `dim`, non-finite values, and a bucket count other than the base row count.
    pub fn read(directory: &Path, dim: usize) -> std::io::Result<Self> {
        let base_path = directory.join("base_f32le.bin");
        let base = read_le_rows(&base_path, dim, f32::from_le_bytes)?;
        check_finite(&base_path, &base)?;
        let queries_path = directory.join("queries_f32le.bin");
        let queries = read_le_rows(&queries_path, dim, f32::from_le_bytes)?;
        check_finite(&queries_path, &queries)?;
        let buckets_path = directory.join("buckets_i32le.bin");
        let buckets: Vec<i32> = read_le_rows(&buckets_path, 1, i32::from_le_bytes)?.into_iter().flatten().collect();
        if buckets.len() != base.len() {
            return Err(invalid(format!(
                "{}: {} buckets for {} base vectors (one per vector expected)",
                buckets_path.display(),
                buckets.len(),
                base.len()
            )));
        }
        if Slot::try_from(base.len()).is_err() {
            return Err(invalid(format!("{}: more base vectors than slots", base_path.display())));
        }
        Ok(Self { base, queries, buckets })
    }

    /// The ground truth of selectivity `s` (`gt_s<s>_i32le.bin`: k = 10 ids per query, -1
    /// padded): one row per query, every id a base row.
    pub fn ground_truth(&self, directory: &Path, selectivity: f64) -> std::io::Result<Vec<Vec<Slot>>> {
        let path = directory.join(format!("gt_s{selectivity}_i32le.bin"));
        let rows = read_le_rows(&path, 10, i32::from_le_bytes)?;
        if rows.len() != self.queries.len() {
            return Err(invalid(format!(
                "{}: {} rows for {} queries (one per query expected)",
                path.display(),
                rows.len(),
                self.queries.len()
            )));
        }
        rows.into_iter()
            .enumerate()
            .map(|(number, row)| {
                row.into_iter()
                    .filter(|id| *id != -1)
                    .map(|id| match Slot::try_from(id) {
                        Ok(slot) if (slot as usize) < self.base.len() => Ok(slot),
                        _ => Err(invalid(format!("{}: row {number} names id {id}, not a base row", path.display()))),
                    })
                    .collect()
            })
            .collect()
    }
}

/// Builds an index of the peer's base vectors (ordinal = slot = row id) with `params`.
pub fn build_peer_index(data: &PeerData, params: VectorParams) -> VectorIndex {
    let mut index = VectorIndex::new(VectorParams { dimension: data.base.first().map_or(0, Vec::len), ..params });
    for (batch_number, batch) in data.base.chunks(INSERT_BATCH).enumerate() {
        let first = batch_number * INSERT_BATCH;
        let items: Vec<(Slot, DocOrdinal, Vec<f32>)> = batch
            .iter()
            .enumerate()
            .map(|(offset, vector)| ((first + offset) as Slot, (first + offset) as DocOrdinal, vector.clone()))
            .collect();
        index.insert_batch(&items).expect("peer vectors are checked on read");
    }
    // Measure the planner's costs on the finished index (insert calibrates only on doubling).
    index.calibrate();
    index
}

/// Measures every selectivity of `selectivities` on the peer's files in `directory`: allowed
/// set `bucket < round(1000 s)`, recall against the peer's ground truth.
pub fn run_peer(
    directory: &Path,
    data: &PeerData,
    index: &VectorIndex,
    selectivities: &[f64],
    reference: Option<&HnswRsReference>,
) -> std::io::Result<Vec<FilteredRow>> {
    for query in data.queries.iter().take(20) {
        std::hint::black_box(index.search_unfiltered(query, 10));
    }
    let mut rows = Vec::new();
    for &selectivity in selectivities {
        let threshold = (1000.0 * selectivity).round() as i32;
        let allowed: RoaringBitmap = data
            .buckets
            .iter()
            .enumerate()
            .filter(|(_, bucket)| **bucket < threshold)
            .map(|(row, _)| row as u32)
            .collect();
        let truth = data.ground_truth(directory, selectivity)?;
        let truth_of = |number: usize, _: &[f32]| truth[number].clone();
        let pgvector = PGVECTOR_BEST.iter().find(|(peer, _, _)| (peer - selectivity).abs() < 1e-9);
        rows.extend(
            measure_allowed(index, &data.queries, 10, selectivity, &allowed, &truth_of, &walks(reference))
                .into_iter()
                .map(|row| FilteredRow {
                    pgvector_best_p50_ms: pgvector.map(|(_, _, p50)| *p50),
                    pgvector_best_recall_at_10: pgvector.map(|(_, recall, _)| *recall),
                    ..row
                }),
        );
    }
    Ok(rows)
}

/// Nanoseconds of one bare SIMD dot product of a query with a stored vector, reading the
/// vectors in slot order (streaming) and in a random order (the access pattern of a graph
/// walk): the floor for a walk's cost per distance evaluation on this machine.
pub fn bare_dot_ns(index: &VectorIndex, queries: &[Vec<f32>]) -> (f64, f64) {
    let len = index.len();
    let queries = &queries[..queries.len().min(4)];
    if len == 0 || queries.is_empty() {
        return (0.0, 0.0);
    }
    let mut rng = SmallRng::seed_from_u64(0xd07);
    let shuffled: Vec<Slot> = (0..len).map(|_| rng.gen_range(0..len) as Slot).collect();
    let sequential: Vec<Slot> = (0..len as Slot).collect();
    let time = |slots: &[Slot]| {
        let started = Instant::now();
        let mut sum = 0.0f32;
        for query in queries {
            for &slot in slots {
                sum += index.score(query, slot);
            }
        }
        std::hint::black_box(sum);
        started.elapsed().as_nanos() as f64 / (queries.len() * slots.len()) as f64
    };
    (time(&sequential), time(&shuffled))
}

/// Resident set size of this process in bytes (Linux `/proc/self/statm`; `None` elsewhere).
pub fn resident_bytes() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Exact filtered top-k slots (one vector per ordinal: ordinal == slot).
fn brute_force(index: &VectorIndex, query: &[f32], k: usize, allowed: &RoaringBitmap) -> Vec<Slot> {
    let mut scored: Vec<(f32, Slot)> = allowed
        .iter()
        .filter(|ordinal| (*ordinal as usize) < index.len())
        .map(|slot| (index.score(query, slot), slot))
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
mod tests;
