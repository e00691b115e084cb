//! The `warrant` command: serve, snapshots, tokens, model setup, database migrations, dataset
//! ingestion, evaluations and the review tools (the benchmarks are the `warrant-bench` binary). One runtime (an actix System) runs every
//! command; each command is one small function.

mod allocator;
mod cli;
mod evaluate;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Parser;

use cli::{Cli, Command, DbCommand, ModelCommand, SnapshotCommand};
use warrant::config::Settings;
use warrant::domain::Role;

fn main() -> Result<()> {
    allocator::defaults();
    let cli = Cli::parse();
    actix_rt::System::new().block_on(run(cli.command))
}

async fn run(command: Command) -> Result<()> {
    match command {
        Command::Serve { config, restore, follow } => serve(config, restore, follow).await,
        Command::Snapshot { snapshot: SnapshotCommand::Create { config, corpus, dir } } => {
            snapshot_create(config, corpus, dir).await
        }
        Command::Token { tenant, sub, groups, admin, replica, operator, reviewer, ttl_seconds, config } => {
            token(tenant, sub, groups, [admin, replica, operator, reviewer], ttl_seconds, config)
        }
        Command::Model { model: ModelCommand::Fetch { dir, config } } => model_fetch(dir, config),
        Command::Db { db: DbCommand::Migrate { config } } => db_migrate(config).await,
        Command::Bench { arguments } => bail!(
            "the benchmarks are their own binary now: cargo run --release --bin warrant-bench -- {}",
            arguments.join(" ")
        ),
        Command::Ingest {
            path: Some(path),
            server,
            data_dir,
            include,
            exclude,
            tenant,
            token_env,
            groups,
            users,
            sync,
            json,
            config,
            ..
        } => {
            let acl = warrant::domain::DocAcl { groups, users };
            let options = warrant::ingest::IngestOptions { root: path, acl, sync, progress: !json, include, exclude };
            ingest_folder(options, (server, data_dir), (tenant, token_env), json, config).await
        }
        Command::Ingest { path: None, dataset, embedder, cache_dir, json, config, .. } => {
            let dataset = dataset.context("give a folder to ingest, or --dataset")?;
            evaluate::ingest(dataset, embedder, cache_dir, json, config).await
        }
        Command::Eval { eval } => evaluate::eval(eval).await,
        Command::Review { review } => evaluate::review(review).await,
    }
}

/// `warrant ingest PATH`: the folder kept in step with a running server, or written into a
/// stopped server's data directory (`warrant::ingest`).
async fn ingest_folder(
    options: warrant::ingest::IngestOptions,
    (server, data_dir): (Option<String>, Option<PathBuf>),
    (tenant, token_env): (Option<String>, Option<String>),
    json: bool,
    config: Option<PathBuf>,
) -> Result<()> {
    let settings = Settings::load(config.as_deref())?;
    let summary = if let Some(data_dir) = data_dir {
        let tenant = tenant.context("--data-dir needs --tenant")?;
        warrant::ingest::run_into_data_dir(&options, settings, &data_dir, &tenant).await?
    } else {
        let token = match (token_env, &tenant) {
            (Some(variable), _) => {
                std::env::var(&variable).with_context(|| format!("environment variable {variable} is not set"))?
            }
            (None, Some(tenant)) => {
                if !settings.auth.hs256_enabled() || settings.auth.hs256_secret.is_empty() {
                    bail!(
                        "--tenant mints a token with auth.hs256_secret, which this configuration does not accept; use --token-env"
                    );
                }
                // Valid for a day: a large folder through MiniLM can take hours (BENCHMARKS.md).
                let claims = warrant::http::auth::Claims::for_settings(
                    &settings.auth,
                    (tenant, "warrant-ingest"),
                    Vec::new(),
                    &[Role::Admin],
                    warrant::ingest::TOKEN_TTL_SECONDS,
                );
                warrant::http::auth::mint_hs256(&settings.auth.hs256_secret, &claims)?
            }
            (None, None) => bail!("give --tenant (a token is minted with the configured secret) or --token-env"),
        };
        let server = server.unwrap_or_else(|| format!("http://{}", settings.server.bind));
        let key = match &tenant {
            Some(tenant) => format!("server {server} tenant {tenant}"),
            None => format!("server {server}"),
        };
        warrant::ingest::run(&options, &warrant::ingest::Destination { server, token, key }).await?
    };
    if json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        if let Some(other) = &summary.other_destination {
            println!("the state file was written for {other}: every file was uploaded again");
        }
        println!(
            "ingested {}, unchanged {}, deleted {}, skipped {} (no known format), excluded {}, not read {}, failed {} in {:.1} s",
            summary.ingested,
            summary.unchanged,
            summary.deleted,
            summary.skipped,
            summary.excluded,
            summary.unread.len(),
            summary.failed.len(),
            summary.seconds
        );
        for (doc_id, reason) in &summary.unread {
            println!("  not read {doc_id}: {reason}");
        }
        for (doc_id, reason) in &summary.failed {
            println!("  failed {doc_id}: {reason}");
        }
    }
    if !summary.failed.is_empty() {
        bail!("{} files were refused", summary.failed.len());
    }
    Ok(())
}

/// `warrant token`: mints an HS256 token with the configured secret. `roles` are the admin,
/// replica, operator and reviewer flags, in that order.
fn token(
    tenant: String,
    sub: String,
    groups: Vec<String>,
    roles: [bool; 4],
    ttl_seconds: u64,
    config: Option<PathBuf>,
) -> Result<()> {
    let settings = Settings::load(config.as_deref())?;
    if settings.auth.hs256_secret.is_empty() {
        bail!("auth.hs256_secret is empty: tokens can only be minted with an hs256 secret");
    }
    if !settings.auth.hs256_enabled() {
        bail!(
            "auth.rs256_public_key_file or auth.oidc is set, so the server refuses hs256 tokens unless \
                 auth.allow_hs256_with_rs256 = true: mint tokens with the rs256 issuer or the identity provider instead"
        );
    }
    let roles: Vec<Role> = roles
        .into_iter()
        .zip([Role::Admin, Role::Replica, Role::Operator, Role::Reviewer])
        .filter_map(|(wanted, role)| wanted.then_some(role))
        .collect();
    let groups = groups.into_iter().filter(|group| !group.is_empty()).collect();
    let claims =
        warrant::http::auth::Claims::for_settings(&settings.auth, (&tenant, &sub), groups, &roles, ttl_seconds);
    println!("{}", warrant::http::auth::mint_hs256(&settings.auth.hs256_secret, &claims)?);
    Ok(())
}

/// `warrant model fetch`: installs the MiniLM weights.
fn model_fetch(dir: Option<PathBuf>, config: Option<PathBuf>) -> Result<()> {
    let settings = Settings::load(config.as_deref())?;
    let directory = dir.unwrap_or_else(|| PathBuf::from(&settings.embedder.model_dir));
    let outcome = warrant::embed::model::fetch(&directory)?;
    println!("{outcome:?}: {}", directory.display());
    Ok(())
}

/// `warrant db migrate`: applies the PostgreSQL backend's migrations.
async fn db_migrate(config: Option<PathBuf>) -> Result<()> {
    let settings = Settings::load(config.as_deref())?;
    settings.validate()?;
    let params = warrant::postgres::PostgresParams::from_settings(&settings)?;
    let applied = warrant::postgres::migrate_database(&params, settings.embedder.dim).await?;
    println!("applied migrations: {applied:?} (of {})", warrant::postgres::MIGRATIONS.len());
    Ok(())
}

/// `warrant serve`.
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
    let settings = Arc::new(settings);
    warrant::telemetry::init_tracing(settings.server.log_format == warrant::config::LogFormat::Json);
    let providers = warrant::providers::from_settings(&settings).await.context("building providers")?;
    warrant::app::serve(settings, providers).await.context("running the server")?;
    Ok(())
}

/// `warrant snapshot create`: loads a corpus into an in-memory engine and writes a snapshot.
async fn snapshot_create(config: Option<PathBuf>, corpus: Option<PathBuf>, dir: Option<PathBuf>) -> Result<()> {
    let settings = Settings::load(config.as_deref()).context("loading configuration")?;
    warrant::telemetry::init_tracing(settings.server.log_format == warrant::config::LogFormat::Json);
    let providers = warrant::providers::from_settings(&settings).await.context("building providers")?;
    let params = warrant::embedded::EngineParams::from_settings(&settings, providers.embedder.dimension());
    let engine = warrant::embedded::Engine::start(params, providers.embedder).context("starting the engine")?;
    let corpus = corpus.unwrap_or_else(|| PathBuf::from(&settings.demo.corpus));
    let documents = warrant::app::load_corpus(engine.as_ref(), &corpus).await.context("loading the corpus")?;
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
