//! Unit tests of `bench/filtered`.

use super::*;
use crate::index::distance::dot;

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
    let (index, queries) = build_data(&config);
    let reference = index.hnsw_rs_reference();
    let walks = walks(Some(&reference));
    let rows = measure(&index, &queries, &config, Some(&reference));
    assert_eq!(rows.len(), 5 * walks.len());
    // Without a reference the production walk and the one-hop walk are measured.
    let own = measure(&index, &queries, &config, None);
    assert!(own.chunks(2).all(|pair| (pair[0].walk.as_str(), pair[1].walk.as_str()) == ("frozen", "one_hop")));
    // Above the two-hop walk's selectivities the production walk is the one-hop walk.
    let half_own: Vec<&FilteredRow> = own.iter().filter(|row| row.selectivity == 0.5).collect();
    assert_eq!(half_own[0].distance_computations_mean, half_own[1].distance_computations_mean);
    for row in &rows {
        assert!((0.0..=1.0).contains(&row.recall_at_10), "{row:?}");
        assert!((0.0..=1.0).contains(&row.postfilter_recall_at_10), "{row:?}");
        assert!(row.recall_at_10 >= 0.9, "{row:?}");
    }
    for pair in rows.chunks(walks.len()) {
        assert!(pair.iter().zip(&walks).all(|(row, walk)| row.walk == walk.as_str()), "{pair:?}");
        assert!(pair.iter().all(|row| row.selectivity == pair[0].selectivity), "{pair:?}");
    }
    assert_eq!(rows[0].strategy, "exact");
    // At 1.0 the planner's measured costs decide (on 2,000 small vectors scanning them all
    // may be cheaper than the walk), so either strategy is right there.
    assert!(matches!(rows[4 * walks.len()].strategy.as_str(), "graph" | "exact"), "{rows:?}");
    // The best-first walk stops early: never more work than hnsw_rs' filtered walk at 50%.
    let half: Vec<&FilteredRow> = rows.iter().filter(|row| row.selectivity == 0.5).collect();
    assert_eq!(half[1].walk, "best_first");
    assert!(half[1].distance_computations_mean <= half[0].distance_computations_mean, "{half:?}");
    // The production walk is the best-first walk over the index's own graph: no more work than
    // over hnsw_rs' graph of the same vectors (within a margin), at no lower recall.
    assert_eq!((half[2].walk.as_str(), half[3].walk.as_str()), ("frozen_plain", "one_hop"));
    let (frozen, old) = (half[3].distance_computations_mean, half[1].distance_computations_mean);
    assert!(frozen <= 1.15 * old, "{half:?}");
    assert!(half[3].recall_at_10 + 0.02 >= half[1].recall_at_10, "{half:?}");
    // The prefetch changes no work: the walk with and without it makes the same evaluations.
    for pair in rows.chunks(walks.len()) {
        assert_eq!(pair[2].distance_computations_mean, pair[3].distance_computations_mean, "{pair:?}");
        assert_eq!(pair[2].recall_at_10, pair[3].recall_at_10, "{pair:?}");
    }
}

/// Writes a small peer directory the way `export_vectors.py` does: `base` rows of `dim`,
/// `queries` rows, buckets `row * 997 % 1000`, exact ground truth per selectivity.
fn write_peer_files(directory: &Path, base: usize, queries: usize, dim: usize) -> PeerData {
    let mut rng = SmallRng::seed_from_u64(5);
    let mut unit = || {
        let mut vector: Vec<f32> = (0..dim).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
        normalize(&mut vector);
        vector
    };
    let data = PeerData {
        base: (0..base).map(|_| unit()).collect(),
        queries: (0..queries).map(|_| unit()).collect(),
        buckets: (0..base).map(|row| (row * 997 % 1000) as i32).collect(),
    };
    let f32_bytes =
        |rows: &[Vec<f32>]| rows.iter().flatten().flat_map(|value| value.to_le_bytes()).collect::<Vec<u8>>();
    let i32_bytes = |values: &[i32]| values.iter().flat_map(|value| value.to_le_bytes()).collect::<Vec<u8>>();
    std::fs::write(directory.join("base_f32le.bin"), f32_bytes(&data.base)).expect("write");
    std::fs::write(directory.join("queries_f32le.bin"), f32_bytes(&data.queries)).expect("write");
    std::fs::write(directory.join("buckets_i32le.bin"), i32_bytes(&data.buckets)).expect("write");
    for selectivity in [0.001f64, 0.01, 0.1, 0.5, 1.0] {
        let threshold = (1000.0 * selectivity).round() as i32;
        let mut truth = Vec::new();
        for query in &data.queries {
            let mut scored: Vec<(f32, i32)> = (0..base)
                .filter(|row| data.buckets[*row] < threshold)
                .map(|row| (dot(query, &data.base[row]), row as i32))
                .collect();
            scored.sort_by(|left, right| right.0.total_cmp(&left.0).then(left.1.cmp(&right.1)));
            let mut ids: Vec<i32> = scored.into_iter().take(10).map(|(_, id)| id).collect();
            ids.resize(10, -1);
            truth.extend(ids);
        }
        std::fs::write(directory.join(format!("gt_s{selectivity}_i32le.bin")), i32_bytes(&truth)).expect("write");
    }
    data
}

#[test]
fn peer_files_round_trip_and_measure() {
    let directory = tempfile::tempdir().expect("tempdir");
    let written = write_peer_files(directory.path(), 300, 6, 8);
    let data = PeerData::read(directory.path(), 8).expect("valid files");
    assert_eq!(
        (data.base.clone(), data.queries.clone(), data.buckets.clone()),
        (written.base, written.queries, written.buckets)
    );
    let index = build_peer_index(&data, VectorParams::with_dimension(8));
    let reference = index.hnsw_rs_reference();
    let rows = run_peer(directory.path(), &data, &index, &[0.001, 0.1, 1.0], Some(&reference)).expect("measured");
    assert_eq!(rows.len(), 3 * walks(Some(&reference)).len());
    for row in &rows {
        assert!(row.pgvector_best_p50_ms.is_some(), "{row:?}");
        // 300 vectors: the planner scans exactly (threshold 4096), so recall is exact.
        assert_eq!(row.recall_at_10, 1.0, "{row:?}");
    }
    assert_eq!(rows[0].allowed, data.buckets.iter().filter(|bucket| **bucket < 1).count());
}

#[test]
fn malformed_peer_files_are_rejected_with_a_clear_error() {
    let error_of = |mutate: &dyn Fn(&Path), dim: usize| -> String {
        let directory = tempfile::tempdir().expect("tempdir");
        write_peer_files(directory.path(), 40, 3, 4);
        mutate(directory.path());
        match PeerData::read(directory.path(), dim).and_then(|data| data.ground_truth(directory.path(), 0.1)) {
            Ok(_) => "accepted".to_owned(),
            Err(error) => error.to_string(),
        }
    };
    let nothing = |_: &Path| {};
    assert_eq!(error_of(&nothing, 4), "accepted");
    // Wrong --dim: 40 x 4 values are not whole rows of 6.
    let message = error_of(&nothing, 6);
    assert!(message.contains("base_f32le.bin") && message.contains("is --dim right?"), "{message}");
    let truncate = |directory: &Path| {
        let path = directory.join("base_f32le.bin");
        let bytes = std::fs::read(&path).expect("read");
        std::fs::write(&path, &bytes[..bytes.len() - 3]).expect("write");
    };
    let message = error_of(&truncate, 4);
    assert!(message.contains("base_f32le.bin") && message.contains("637 bytes"), "{message}");
    let missing = |directory: &Path| std::fs::remove_file(directory.join("queries_f32le.bin")).expect("remove");
    let message = error_of(&missing, 4);
    assert!(message.starts_with("cannot read") && message.contains("queries_f32le.bin"), "{message}");
    let empty = |directory: &Path| std::fs::write(directory.join("queries_f32le.bin"), b"").expect("write");
    assert!(error_of(&empty, 4).contains("0 bytes is not a positive whole number"));
    let nan = |directory: &Path| {
        let path = directory.join("base_f32le.bin");
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[4 * 4 * 7..4 * 4 * 7 + 4].copy_from_slice(&f32::NAN.to_le_bytes());
        std::fs::write(&path, bytes).expect("write");
    };
    assert!(error_of(&nan, 4).contains("row 7 holds a NaN"));
    let short_buckets = |directory: &Path| {
        std::fs::write(directory.join("buckets_i32le.bin"), [0u8; 4 * 39]).expect("write");
    };
    assert!(error_of(&short_buckets, 4).contains("39 buckets for 40 base vectors"));
    let bad_truth_rows = |directory: &Path| {
        std::fs::write(directory.join("gt_s0.1_i32le.bin"), [0u8; 4 * 10 * 2]).expect("write");
    };
    assert!(error_of(&bad_truth_rows, 4).contains("2 rows for 3 queries"));
    let bad_truth_id = |directory: &Path| {
        let mut bytes = vec![0u8; 4 * 10 * 3];
        bytes[..4].copy_from_slice(&40i32.to_le_bytes());
        std::fs::write(directory.join("gt_s0.1_i32le.bin"), bytes).expect("write");
    };
    assert!(error_of(&bad_truth_id, 4).contains("row 0 names id 40, not a base row"));
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
                for row in measure(&index, &queries, &config, None) {
                    println!("{}", serde_json::to_string(&row).expect("row serializes"));
                }
            }
        }
    }
}
