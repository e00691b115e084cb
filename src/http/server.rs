//! Start-up: build providers from settings, start the engine and the request actor, load the
//! demo corpus when configured, and run actix-web until SIGTERM/SIGINT (graceful shutdown is
//! actix-web's: in-flight requests finish, new connections are refused).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use actix::Actor;
use actix_web::{App, HttpServer, middleware, web};
use serde::Deserialize;
use tokio::sync::Semaphore;

use crate::answer::{AnswerActor, AnswerPipeline, PipelineSettings};
use crate::config::Settings;
use crate::retrieval::{DocumentInput, Engine, EngineParams};

use super::AppState;
use super::auth::Authenticator;

/// Providers chosen for a run.
pub struct Providers {
    /// Embedder.
    pub embedder: Arc<dyn crate::embed::Embedder>,
    /// Generator.
    pub generator: Arc<dyn crate::answer::generator::Generator>,
    /// Support verifier.
    pub verifier: Arc<dyn crate::answer::verifier::SupportVerifier>,
}

/// Errors that stop the server from starting.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The settings may not be served (the demo key on a non-loopback address).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// Authentication settings are unusable.
    #[error(transparent)]
    Auth(#[from] super::auth::AuthError),
    /// The engine could not start or the demo corpus could not be loaded.
    #[error(transparent)]
    Retrieval(#[from] crate::retrieval::RetrievalError),
    /// The demo corpus or demo users file is missing or malformed.
    #[error("demo file {path}: {reason}")]
    Demo {
        /// File.
        path: String,
        /// Why.
        reason: String,
    },
    /// The snapshot to restore failed verification or could not be rebuilt.
    #[error("refusing to start from snapshot {path}: {error}")]
    Snapshot {
        /// The snapshot directory.
        path: String,
        /// What is wrong (names the file).
        error: crate::snapshot::SnapshotError,
    },
    /// A restore was asked for that cannot be done.
    #[error("refusing to restore: {0}")]
    Restore(String),
    /// Binding or serving failed.
    #[error("server: {0}")]
    Io(#[from] std::io::Error),
}

/// One document of the demo corpus file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DemoDocument {
    tenant: String,
    #[serde(flatten)]
    document: DemoInput,
}

#[derive(Debug, Deserialize)]
struct DemoInput {
    doc_id: String,
    title: String,
    text: String,
    acl: crate::domain::DocAcl,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DemoCorpus {
    #[serde(default)]
    #[allow(dead_code)]
    about: String,
    documents: Vec<DemoDocument>,
}

/// Loads a demo corpus file (documents grouped per tenant, one batch per tenant).
pub async fn load_corpus(engine: &Engine, path: &Path) -> Result<usize, StartError> {
    let demo_error = |reason: String| StartError::Demo { path: path.display().to_string(), reason };
    let text = std::fs::read_to_string(path).map_err(|error| demo_error(error.to_string()))?;
    let corpus: DemoCorpus = serde_json::from_str(&text).map_err(|error| demo_error(error.to_string()))?;
    let mut per_tenant: std::collections::BTreeMap<String, Vec<DocumentInput>> = Default::default();
    for entry in corpus.documents {
        per_tenant.entry(entry.tenant).or_default().push(DocumentInput {
            doc_id: entry.document.doc_id,
            title: entry.document.title,
            text: entry.document.text,
            acl: entry.document.acl,
            version: None,
        });
    }
    let mut total = 0;
    for (tenant, documents) in per_tenant {
        total += engine.upsert(&tenant, documents).await?.documents;
    }
    Ok(total)
}

/// How a server's engine starts, from settings:
/// - a replica (`replica.follow`): in memory, from `snapshots.restore` keeping the snapshot's
///   lineage, or empty (and stale) until it bootstraps from its primary's snapshot;
/// - a durable primary (`storage.dir`): from its data directory; a new data directory is seeded
///   from `snapshots.restore` when set (with a new lineage: restoring forks history), else it
///   starts empty and loads the demo corpus when configured;
/// - an in-memory primary: from `snapshots.restore` (new lineage) or empty.
///
/// Returns the engine and whether it is new (the demo corpus may be loaded into it).
pub async fn start_engine(
    settings: &Settings,
    embedder: Arc<dyn crate::embed::Embedder>,
) -> Result<(Arc<Engine>, bool), StartError> {
    let params = EngineParams::from_settings(settings, embedder.dimension());
    let restore = settings.snapshots.restore.as_str();
    let replica = !settings.replica.follow.is_empty();
    if replica || settings.storage.dir.is_empty() {
        if restore.is_empty() {
            return Ok((Engine::start(params, embedder)?, !replica));
        }
        let directory = Path::new(restore);
        // A replica keeps the snapshot's lineage (it follows the same history); a primary
        // restored from a snapshot forks a new one.
        let (engine, manifest) = crate::snapshot::start_engine(settings, embedder, directory, !replica)
            .await
            .map_err(|error| StartError::Snapshot { path: directory.display().to_string(), error })?;
        tracing::info!(snapshot = %manifest.snapshot_id, acl_epoch = manifest.acl_epoch, chunks = manifest.chunks, "snapshot restored");
        return Ok((engine, false));
    }
    let data = Path::new(&settings.storage.dir);
    let exists = std::fs::metadata(data.join(crate::storage::STORE_FILE)).map(|meta| meta.len() > 0).unwrap_or(false);
    if exists && !restore.is_empty() {
        return Err(StartError::Restore(format!(
            "snapshots.restore seeds only a new data directory, and {} already holds one; move it away to restore",
            data.display()
        )));
    }
    if !restore.is_empty() {
        let directory = Path::new(restore).to_owned();
        let shown = directory.display().to_string();
        let snapshot_error = move |error| StartError::Snapshot { path: shown, error };
        let name = embedder.name().to_owned();
        let dimension = embedder.dimension();
        let vector = params.vector;
        let owned = directory;
        let data = data.to_owned();
        let (restored, store) = tokio::task::spawn_blocking(move || {
            let restored = crate::snapshot::restore(&owned, &name, dimension, vector).map_err(snapshot_error)?;
            let acl = restored.acl.relabeled(crate::acl::new_lineage());
            let chunks: Vec<_> = restored.shards.iter().flat_map(|shard| shard.export()).collect();
            let store = crate::storage::Store::seed(&data, &name, dimension, &acl, &chunks)
                .map_err(|error| StartError::Retrieval(error.into()))?;
            Ok::<_, StartError>((crate::snapshot::Restored { acl, ..restored }, store))
        })
        .await
        .map_err(|error| StartError::Restore(error.to_string()))??;
        let mut params = params;
        params.shards = restored.manifest.shards;
        tracing::info!(snapshot = %restored.manifest.snapshot_id, acl_epoch = restored.manifest.acl_epoch, "new data directory seeded from the snapshot (new lineage)");
        let engine = Engine::start_durable(params, embedder, restored.acl, restored.shards, store)?;
        return Ok((engine, false));
    }
    let (engine, recovery) = Engine::open(params, embedder, data).await?;
    tracing::info!(
        file = %recovery.file,
        created = recovery.created,
        checkpoint_epoch = recovery.checkpoint_epoch,
        replayed = recovery.replayed,
        chunks = recovery.chunks,
        acl_epoch = engine.acl().epoch(),
        lineage = %engine.acl().lineage(),
        "data directory opened"
    );
    Ok((engine, recovery.created))
}

/// Builds the shared state (see [`start_engine`]), pipeline, request actor, authenticator,
/// metrics, the replica follower when `replica.follow` is set and the checkpointer on a durable
/// primary. Loads no corpus. Must run inside an actix System.
pub async fn build_state(settings: Arc<Settings>, providers: Providers) -> Result<web::Data<AppState>, StartError> {
    Ok(build_state_with(settings, providers).await?.0)
}

/// [`build_state`], also telling whether the engine is new (nothing restored or recovered).
async fn build_state_with(
    settings: Arc<Settings>,
    providers: Providers,
) -> Result<(web::Data<AppState>, bool), StartError> {
    let authenticator = Authenticator::from_settings(&settings.auth)?;
    let (engine, fresh) = start_engine(&settings, providers.embedder).await?;
    let replica = (!settings.replica.follow.is_empty()).then(|| {
        let status = Arc::new(crate::snapshot::replica::ReplicaStatus::new(std::time::Duration::from_millis(
            settings.replica.max_lag_ms,
        )));
        crate::snapshot::replica::spawn_follower(Arc::clone(&engine), &settings, Arc::clone(&status));
        status
    });
    if engine.store().is_some() {
        crate::snapshot::checkpoint::spawn(Arc::clone(&engine), Arc::clone(&settings));
    }
    let pipeline = Arc::new(AnswerPipeline::new(
        engine,
        providers.generator,
        providers.verifier,
        PipelineSettings::from_settings(&settings),
    ));
    let answer_actor = AnswerActor::new(Arc::clone(&pipeline)).start();
    let state = web::Data::new(AppState {
        pipeline,
        answer_actor,
        authenticator,
        in_flight: Arc::new(Semaphore::new(settings.server.max_in_flight)),
        metrics: crate::telemetry::metrics_handle(),
        admission: super::admission::TenantAdmission::new(
            settings.server.admin_document_batches_per_tenant,
            settings.server.admin_acl_changes_per_tenant,
        ),
        replica_snapshot: tokio::sync::Mutex::new(()),
        settings,
        ready: AtomicBool::new(false),
        replica,
    });
    Ok((state, fresh))
}

/// The actix-web application factory for a state (used by `serve` and by tests).
pub fn app(
    state: web::Data<AppState>,
) -> App<
    impl actix_web::dev::ServiceFactory<
        actix_web::dev::ServiceRequest,
        Config = (),
        Response = actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    let settings = Arc::clone(&state.settings);
    App::new().app_data(state).wrap(middleware::from_fn(super::request_id)).configure(super::configure(&settings))
}

/// Runs the server on `settings.server.bind` until a shutdown signal. Refuses to start when the
/// settings may not be served ([`Settings::validate_for_serving`]).
pub async fn serve(settings: Arc<Settings>, providers: Providers) -> Result<(), StartError> {
    settings.validate_for_serving()?;
    super::console::DemoUsers::from_settings(&settings)
        .map_err(|reason| StartError::Demo { path: settings.demo.users.clone(), reason })?;
    let (state, fresh) = build_state_with(Arc::clone(&settings), providers).await?;
    if fresh && settings.demo.load {
        let count = load_corpus(state.pipeline.engine(), Path::new(&settings.demo.corpus)).await?;
        tracing::info!(documents = count, corpus = %settings.demo.corpus, "demo corpus loaded");
    }
    state.ready.store(true, Ordering::SeqCst);
    let bind = settings.server.bind.clone();
    let server_state = state.clone();
    let server = HttpServer::new(move || app(server_state.clone()))
        .workers(match settings.server.workers {
            0 => std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get),
            workers => workers,
        })
        .shutdown_timeout(10)
        .bind(&bind)?;
    for address in server.addrs() {
        eprintln!("warrant listening on http://{address}");
    }
    eprintln!("embedder: {}", state.pipeline.engine().embedder().name());
    if settings.demo.load {
        eprintln!(
            "try:\n  TOKEN=$(cargo run -q --release -- token --tenant acme --sub alice --groups everyone,engineering)\n  \
             curl -s {}/v1/answer -H \"authorization: Bearer $TOKEN\" -H 'content-type: application/json' \\\n    \
             -d '{{\"question\": \"How much are hotel stays reimbursed per night in London?\"}}'",
            server.addrs().first().map(|address| format!("http://{address}")).unwrap_or_default()
        );
    }
    server.run().await?;
    // Graceful shutdown: the next start loads the indexes instead of rebuilding them.
    state.pipeline.engine().write_indexes().await;
    Ok(())
}
