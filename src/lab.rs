//! Lab commands (feature `lab`): benchmarks that print figures, dataset ingestion and the
//! retrieval, answer and verifier evaluations. The serving library and `warrant serve` carry
//! none of this without the feature.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};

use warrant::config::Settings;

use crate::cli::{BenchCommand, EvalCommand};

/// `warrant bench …`.
pub(crate) async fn bench(command: BenchCommand) -> Result<()> {
    match command {
        BenchCommand::RecoveryFill {
            dir,
            chunks,
            tenants,
            words,
            batch,
            in_flight,
            checkpoint_every,
            seed,
            config,
        } => {
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
        BenchCommand::Snapshot { corpus } => bench_snapshot(corpus.config.clone(), corpus.bench_config()).await,
        BenchCommand::Durability {
            acl_changes,
            batches,
            batch_documents,
            uploaders,
            upload_batches,
            corpus: synthetic,
        } => {
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
        BenchCommand::Filtered {
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
            let params = warrant::retrieval::EngineParams::from_settings(&settings, dim).vector;
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
        BenchCommand::Embed { embedder, passages, rounds, queries, json: _, config } => {
            let settings = settings_with_embedder(config.as_deref(), embedder)?;
            let config = warrant::bench::embed::EmbedBenchConfig { passages, rounds, queries, ..Default::default() };
            (async move {
                let embedder = warrant::providers::embedder(&settings).await?;
                let params = warrant::retrieval::EngineParams::from_settings(&settings, embedder.dimension());
                let engine = warrant::retrieval::Engine::start(params, embedder)?;
                let report = warrant::bench::embed::run(&engine, config).await?;
                println!("{}", serde_json::to_string(&report)?);
                anyhow::Ok(())
            })
            .await
        }
    }
}

/// `warrant ingest`: a labeled dataset into an in-memory engine, with a summary.
pub(crate) async fn ingest(
    dataset: PathBuf,
    embedder: Option<warrant::config::EmbedderKind>,
    cache_dir: Option<PathBuf>,
    json: bool,
    config: Option<PathBuf>,
) -> Result<()> {
    let settings = settings_with_embedder(config.as_deref(), embedder)?;
    let dataset = warrant::eval::dataset::Dataset::load(&dataset, None)?;

    let mut embedder = warrant::providers::embedder(&settings).await?;
    let mut cache = None;
    if let Some(dir) = cache_dir {
        let cached = Arc::new(warrant::eval::cache::CachingEmbedder::open(embedder, &dir, &dataset.corpus_sha256()?));
        embedder = Arc::clone(&cached) as Arc<dyn warrant::embed::Embedder>;
        cache = Some(cached);
    }
    let params = warrant::retrieval::EngineParams::from_settings(&settings, embedder.dimension());
    let engine = warrant::retrieval::Engine::start(params, embedder)?;
    let progress = BarProgress::new("ingest");
    let batch = warrant::eval::retrieval::INGEST_BATCH;
    let summary = warrant::eval::dataset::ingest(&engine, &dataset, batch, &progress).await?;
    if let Some(cache) = cache {
        cache.save().with_context(|| format!("writing {}", cache.path().display()))?;
    }
    if json {
        let mut value = serde_json::to_value(&summary)?;
        value["passages_per_s"] = summary.passages_per_second().into();
        value["embedder"] = engine.embedder().name().into();
        value["dataset"] = dataset.name.clone().into();
        println!("{value}");
    } else {
        println!("{}: {summary} with {}", dataset.name, engine.embedder().name());
    }
    anyhow::Ok(())
}

/// `warrant eval …`.
pub(crate) async fn eval(command: EvalCommand) -> Result<()> {
    match command {
        EvalCommand::Retrieval {
            dataset,
            queries,
            embedder,
            limit_queries,
            cache_dir,
            no_cache,
            backend,
            per_query,
            json,
            config,
        } => {
            let mut settings = settings_with_embedder(config.as_deref(), embedder)?;
            match backend.as_deref() {
                Some("postgres") => settings.storage.backend = warrant::config::StorageBackend::Postgres,
                Some(_) => settings.storage.backend = warrant::config::StorageBackend::Embedded,
                None => {}
            }
            let dataset = warrant::eval::dataset::Dataset::load(&dataset, queries.as_deref())?;
            let options =
                warrant::eval::retrieval::RunOptions { limit_queries, cache_dir: (!no_cache).then_some(cache_dir) };
            (async move {
                let progress = BarProgress::new("ingest");
                let (summary, report) = warrant::eval::retrieval::run(&settings, &dataset, &options, &progress).await?;
                eprintln!("{}: {summary}", dataset.name);
                if let Some(path) = &per_query {
                    write_per_query(path, &report.per_query)?;
                }
                if json {
                    println!("{}", serde_json::to_string(&report)?);
                } else {
                    print_report(&report);
                }
                if report.cross_tenant_hits > 0 {
                    bail!("{} retrieved chunks crossed tenants", report.cross_tenant_hits);
                }
                anyhow::Ok(())
            })
            .await
        }
        EvalCommand::Answers { dataset, n, seed, offset, embedder, per_query, cache_dir, no_cache, json, config } => {
            let settings = settings_with_embedder(config.as_deref(), embedder)?;
            let answers_path = dataset.join("answers.jsonl");
            let dataset = warrant::eval::dataset::Dataset::load(&dataset, None)?;
            let gold = if answers_path.is_file() {
                warrant::eval::answers::read_gold(&answers_path)?
            } else {
                Default::default()
            };
            let options = warrant::eval::answers::AnswersOptions {
                gold,
                offset,
                checkpoint: per_query,
                cache_dir: (!no_cache).then_some(cache_dir),
                ..warrant::eval::answers::AnswersOptions::new(n, seed)
            };
            (async move {
                let progress = BarProgress::new("ingest");
                let (summary, report) = warrant::eval::answers::run(&settings, &dataset, &options, &progress).await?;
                eprintln!("{}: {summary}", dataset.name);
                if json {
                    println!("{}", serde_json::to_string(&report)?);
                } else {
                    print_answers_report(&report);
                }
                if report.unanchored_quotes > 0 {
                    bail!("{} returned quotes lie outside their chunk", report.unanchored_quotes);
                }
                anyhow::Ok(())
            })
            .await
        }
        EvalCommand::Verifier { data, sweep, quoted, config, sample, seed, exclude_seed } => {
            use warrant::eval::verifier::Evidence;
            let evidence = if quoted { Evidence::Quoted } else { Evidence::Abstract };
            let settings = Settings::load(config.as_deref())?;
            (async {
                let embedder = warrant::providers::verifier_embedder(&settings).await?;
                if sweep {
                    return print_verifier_sweep(&data, embedder, evidence).await;
                }
                let verifier = warrant::providers::verifier(&settings, embedder)?;
                let mut rows = warrant::eval::verifier::read_rows(&data).map_err(anyhow::Error::msg)?;
                if let Some(sample) = sample {
                    if let Some(excluded) = exclude_seed {
                        warrant::eval::verifier::exclude_sample(&mut rows, sample, excluded);
                    }
                    warrant::eval::verifier::sample_rows(&mut rows, sample, seed);
                }
                let report = warrant::eval::verifier::evaluate_rows(&rows, verifier.as_ref(), evidence).await;
                let summary = serde_json::json!({
                    "verifier": verifier.name(),
                    "rows": rows.len(),
                    "min_coverage": settings.verifier.min_coverage,
                    "min_similarity": settings.verifier.min_similarity,
                    "precision": report.precision(),
                    "recall": report.recall(),
                    "f1": report.f1(),
                    "quoted": quoted,
                    "intervals": report.intervals(),
                    "report": report,
                });
                println!("{}", serde_json::to_string_pretty(&summary)?);
                anyhow::Ok(())
            })
            .await
        }
    }
}

/// Settings from `config`, with the embedder kind replaced when one is named.
fn settings_with_embedder(
    config: Option<&std::path::Path>,
    embedder: Option<warrant::config::EmbedderKind>,
) -> Result<Settings> {
    let mut settings = Settings::load(config)?;
    if let Some(kind) = embedder {
        settings.embedder.kind = kind;
    }
    Ok(settings)
}

/// `warrant eval verifier --sweep`: precision, recall and F1 over the threshold grid.
async fn print_verifier_sweep(
    data: &Path,
    embedder: Option<Arc<dyn warrant::embed::Embedder>>,
    evidence: warrant::eval::verifier::Evidence,
) -> Result<()> {
    let coverages: Vec<f64> = (10..=20).map(|step| f64::from(step) * 0.05).collect();
    let similarities: Vec<f64> = (0..=5).map(|step| f64::from(step) * 0.1).collect();
    let name = embedder.as_ref().map_or("lexical".to_owned(), |embedder| format!("lexical+{}", embedder.name()));
    let points = warrant::eval::verifier::sweep(data, &coverages, &similarities, embedder, evidence)
        .await
        .map_err(anyhow::Error::msg)?;
    println!("{name}: min_cov min_sim polarity | precision recall f1 | passed SUPPORT/CONTRADICT/NEI");
    for point in points {
        println!("{point}");
    }
    Ok(())
}

/// Writes one JSON object per query (temporary file renamed over `path`).
fn write_per_query<T: serde::Serialize>(path: &Path, scores: &[T]) -> Result<()> {
    let mut lines = String::new();
    for score in scores {
        lines.push_str(&serde_json::to_string(score)?);
        lines.push('\n');
    }
    let temporary = path.with_extension("tmp");
    std::fs::write(&temporary, lines).with_context(|| format!("cannot write {}", temporary.display()))?;
    std::fs::rename(&temporary, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

fn print_report(report: &warrant::eval::retrieval::RetrievalReport) {
    println!("{} with {} on {}: {} queries", report.dataset, report.embedder, report.backend, report.queries);
    println!("{:<8} {:>8} {:>17} {:>8} {:>9} {:>8}", "", "nDCG@10", "95% CI", "R@10", "R@100", "MRR@10");
    let confidence = report.confidence;
    for (name, metrics, interval) in [
        ("lexical", report.lexical, confidence.lexical),
        ("vector", report.vector, confidence.vector),
        ("hybrid", report.hybrid, confidence.hybrid),
    ] {
        println!(
            "{name:<8} {:>8.4} [{:.4}, {:.4}] {:>8.4} {:>9.4} {:>8.4}",
            metrics.ndcg_at_10,
            interval.low,
            interval.high,
            metrics.recall_at_10,
            metrics.recall_at_100,
            metrics.mrr_at_10
        );
    }
    for (name, interval) in [("lexical", confidence.hybrid_minus_lexical), ("vector", confidence.hybrid_minus_vector)] {
        println!(
            "hybrid - {name}: {:+.4} [{:+.4}, {:+.4}] (paired, 95% bootstrap)",
            interval.mean, interval.low, interval.high
        );
    }
    println!("cross_tenant_hits {}", report.cross_tenant_hits);
}

fn print_answers_report(report: &warrant::eval::answers::AnswersReport) {
    println!(
        "{} with generator {} and embedder {}: {} questions (seed {}, offset {})",
        report.dataset, report.generator, report.embedder, report.questions, report.seed, report.offset
    );
    let interval = |name: &str, value: &warrant::eval::stats::Interval| {
        println!("{name:<32} {:.3} [{:.3}, {:.3}]", value.mean, value.low, value.high);
    };
    interval("answer rate", &report.answer_rate);
    println!("{:<32} {:?}", "abstentions", report.abstentions);
    println!("{:<32} {:.3} ({} citations)", "citation precision (micro)", report.citation_precision, report.citations);
    interval("citation precision per answer", &report.citation_precision_per_answer);
    interval("answers citing a relevant doc", &report.answers_citing_relevant);
    if let Some(correct) = &report.correct_of_answered {
        interval("correct of answered", correct);
    }
    if let Some(correct) = &report.correct_of_questions {
        interval("correct of questions", correct);
    }
    if let Some(held) = &report.context_holds_gold {
        interval("context holds a gold answer", held);
    }
    if let Some(answered) = &report.answer_rate_given_gold_in_context {
        interval("  of those: answered", answered);
    }
    if let Some(correct) = &report.correct_given_gold_in_context {
        interval("  of those: answered correctly", correct);
    }
    println!("{:<32} {}", "quotes outside their chunk", report.unanchored_quotes);
    println!("{:<32} {}", "claims anchored by the server", report.claims_anchored);
    println!("{:<32} {:?}", "citations rejected", report.citations_rejected);
    for (stage, latency) in &report.latency_ms {
        println!("latency {stage:<24} p50 {:>9.1} ms  p95 {:>9.1} ms", latency.p50, latency.p95);
    }
}

/// Ingestion progress on stderr.
struct BarProgress(indicatif::ProgressBar);

impl BarProgress {
    fn new(label: &'static str) -> Self {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} docs ({per_sec}, eta {eta})",
            )
            .expect("valid template"),
        );
        bar.set_prefix(label);
        Self(bar)
    }
}

impl warrant::eval::dataset::Progress for BarProgress {
    fn start(&self, total: usize) {
        self.0.set_length(total as u64);
    }

    fn advance(&self, documents: usize) {
        self.0.inc(documents as u64);
    }

    fn finish(&self) {
        self.0.finish();
    }
}

pub(crate) async fn bench_durability(
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

pub(crate) async fn bench_snapshot(
    config: Option<PathBuf>,
    corpus: warrant::bench::snapshot::SnapshotBenchConfig,
) -> Result<()> {
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
