//! `warrant-bench`: the benchmarks that print figures (BENCHMARKS.md), a binary of their own so
//! that the server binary carries none of them. `cargo run --release --bin warrant-bench -- --help`.

#[path = "../../allocator.rs"]
mod allocator;
mod cli;

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;

use cli::{Cli, Command};
use warrant::config::Settings;

fn main() -> Result<()> {
    allocator::defaults();
    let cli = Cli::parse();
    actix_rt::System::new().block_on(run(cli.command))
}

/// One benchmark.
async fn run(command: Command) -> Result<()> {
    match command {
        Command::RecoveryFill { dir, chunks, tenants, words, batch, in_flight, checkpoint_every, seed, config } => {
            let settings = Settings::load(config.as_deref())?;
            let fill = warrant::bench::recovery::FillConfig {
                chunks,
                tenants,
                words,
                batch,
                in_flight,
                checkpoint_every,
                seed,
            };
            let report = warrant::bench::recovery::fill(&settings, &fill, &dir).await.map_err(anyhow::Error::msg)?;
            println!("{}", serde_json::to_string(&report)?);
            // Nothing is closed: the store and the journals are left as a kill -9 leaves them.
            std::process::exit(0)
        }
        Command::Snapshot { corpus } => bench_snapshot(corpus.config.clone(), corpus.bench_config()).await,
        Command::Durability { acl_changes, batches, batch_documents, uploaders, upload_batches, corpus: synthetic } => {
            let (config, corpus) = (synthetic.config.clone(), synthetic.bench_config());
            let run = warrant::bench::durability::DurabilityBenchConfig {
                acl_changes,
                batches,
                batch_documents,
                uploaders,
                upload_batches,
                corpus,
            };
            bench_durability(config, run).await
        }
        Command::Filtered {
            vectors,
            dim,
            queries,
            seed,
            json: _,
            compare_walks,
            config,
            vectors_file,
            selectivities,
            k,
        } => {
            use warrant::bench::filtered::{self, PeerData};
            let settings = Settings::load(config.as_deref())?;
            let params = warrant::embedded::EngineParams::from_settings(&settings, dim).vector;
            let resident_before = filtered::resident_bytes();
            let started = std::time::Instant::now();
            let (rows, index_len, own_bytes) = if let Some(directory) = vectors_file {
                let data = PeerData::read(&directory, dim)?;
                let index = filtered::build_peer_index(&data, params);
                let build_seconds = started.elapsed().as_secs_f64();
                print_build_line(build_seconds, &index, &data.queries, resident_before, data.base.len() * dim * 4);
                let reference = compare_walks.then(|| build_reference(&index));
                (
                    filtered::run_peer(&directory, &data, &index, &filtered::PEER_SELECTIVITIES, reference.as_ref())?,
                    index.len(),
                    index.own_heap_bytes(),
                )
            } else {
                let config = filtered::FilteredBenchConfig {
                    vectors,
                    dim,
                    queries,
                    k,
                    seed,
                    selectivities,
                    params,
                    clusters: 64,
                };
                let (index, queries) = filtered::build_data(&config);
                print_build_line(started.elapsed().as_secs_f64(), &index, &queries, resident_before, 0);
                let reference = compare_walks.then(|| build_reference(&index));
                (filtered::measure(&index, &queries, &config, reference.as_ref()), index.len(), index.own_heap_bytes())
            };
            debug_assert!(own_bytes > 0 || index_len == 0);
            for row in rows {
                if !compare_walks && row.walk != "frozen" && row.walk != "one_hop" {
                    continue;
                }
                println!("{}", serde_json::to_string(&row)?);
            }
            Ok(())
        }
        Command::Extract { pages, words, rounds, seed, format, write, copies, corpus, file, text_out } => {
            if let Some(directory) = corpus {
                return bench_corpus(&directory, rounds);
            }
            if let Some(path) = file {
                let report = warrant::bench::extract::run_file(&path, rounds, text_out.as_deref())
                    .map_err(anyhow::Error::msg)?;
                println!("{}", serde_json::to_string(&report)?);
                return Ok(());
            }
            let config =
                warrant::bench::extract::ExtractBenchConfig { pages, words_per_page: words, rounds, seed, format };
            if let Some(directory) = write {
                let files = warrant::bench::extract::write_corpus(&config, &directory, copies)?;
                println!("{}", serde_json::json!({"written": files, "directory": directory}));
                return Ok(());
            }
            for row in warrant::bench::extract::run(&config).map_err(anyhow::Error::msg)? {
                println!("{}", serde_json::to_string(&row)?);
            }
            Ok(())
        }
        Command::Embed { embedder, passages, rounds, queries, json: _, config } => {
            let settings = warrant::eval::settings_with_embedder(config.as_deref(), embedder)?;
            let config = warrant::bench::embed::EmbedBenchConfig { passages, rounds, queries, ..Default::default() };
            (async move {
                let embedder = warrant::providers::embedder(&settings).await?;
                let params = warrant::embedded::EngineParams::from_settings(&settings, embedder.dimension());
                let engine = warrant::embedded::Engine::start(params, embedder)?;
                let report = warrant::bench::embed::run(&engine, config).await?;
                println!("{}", serde_json::to_string(&report)?);
                anyhow::Ok(())
            })
            .await
        }
    }
}

/// `extract --corpus`: a line per format, per failed file, and the skipped files.
fn bench_corpus(directory: &std::path::Path, rounds: usize) -> Result<()> {
    let report = warrant::bench::extract::run_corpus(directory, rounds)
        .with_context(|| format!("reading the corpus {}", directory.display()))?;
    for row in &report.rows {
        println!("{}", serde_json::to_string(row)?);
    }
    for failure in &report.failures {
        println!("{}", serde_json::json!({ "failed": failure }));
    }
    if !report.skipped.is_empty() {
        println!("{}", serde_json::json!({ "skipped": report.skipped }));
    }
    Ok(())
}

async fn bench_durability(
    config: Option<PathBuf>,
    run: warrant::bench::durability::DurabilityBenchConfig,
) -> Result<()> {
    let settings = Settings::load(config.as_deref())?;
    // On the data directory's file system (not a RAM-backed /tmp), so fsync costs what it will.
    let directory = tempfile::tempdir_in(".").context("creating a temporary directory")?;
    let report =
        warrant::bench::durability::run(&settings, &run, directory.path()).await.map_err(anyhow::Error::msg)?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

async fn bench_snapshot(config: Option<PathBuf>, corpus: warrant::bench::snapshot::SnapshotBenchConfig) -> Result<()> {
    let settings = Settings::load(config.as_deref()).context("loading configuration")?;
    let directory = tempfile::tempdir().context("creating a temporary directory")?;
    let report =
        warrant::bench::snapshot::run(&settings, &corpus, directory.path()).await.map_err(anyhow::Error::msg)?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// First line of `bench filtered`: build time, SIMD in use, the bare dot product's cost
/// (streaming and random reads), the planner's measured costs, and memory per vector (the
/// index's own arrays, and the resident-set growth over the build minus `input_bytes` of input
/// data still held by the caller).
/// hnsw_rs' graph of `index`'s vectors, with a line of what building it cost beside the
/// index's own build line (same vectors, same M and `ef_construction`; hnsw_rs inserts in
/// parallel on every core, the index one vector at a time).
fn build_reference(index: &warrant::index::vector::VectorIndex) -> warrant::index::vector::HnswRsReference {
    let resident_before = warrant::bench::filtered::resident_bytes();
    let started = std::time::Instant::now();
    let reference = index.hnsw_rs_reference();
    let build_seconds = started.elapsed().as_secs_f64();
    let resident_per_vector = resident_before
        .zip(warrant::bench::filtered::resident_bytes())
        .map(|(before, after)| after.saturating_sub(before) as f64 / index.len().max(1) as f64);
    println!(
        "{}",
        serde_json::json!({
            "reference": "hnsw_rs",
            "build_seconds": build_seconds,
            "vectors": index.len(),
            "resident_bytes_per_vector": resident_per_vector,
        })
    );
    reference
}

fn print_build_line(
    build_seconds: f64,
    index: &warrant::index::vector::VectorIndex,
    queries: &[Vec<f32>],
    resident_before: Option<usize>,
    input_bytes: usize,
) {
    let (dot_ns_sequential, dot_ns_random) = warrant::bench::filtered::bare_dot_ns(index, queries);
    let vectors = index.len().max(1) as f64;
    let resident_after = warrant::bench::filtered::resident_bytes();
    let resident_per_vector = resident_before
        .zip(resident_after)
        .map(|(before, after)| (after.saturating_sub(before).saturating_sub(input_bytes)) as f64 / vectors);
    println!(
        "{}",
        serde_json::json!({
            "build_seconds": build_seconds,
            "vectors": index.len(),
            "simd": warrant::index::distance::half_kernel_name(),
            "bare_dot_ns_sequential": dot_ns_sequential,
            "bare_dot_ns_random": dot_ns_random,
            "planner_costs": index.planner_costs(),
            "own_bytes_per_vector": index.own_heap_bytes() as f64 / vectors,
            "resident_bytes_per_vector": resident_per_vector,
        })
    );
}
