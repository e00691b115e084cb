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
    /// The demo corpus file is missing or malformed.
    #[error("demo corpus {path}: {reason}")]
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

/// Builds the shared state: engine (restored from `snapshots.restore` when set, verified whole
/// first), pipeline, request actor, authenticator, metrics, and the replica follower when
/// `replica.follow` is set. Must run inside an actix System.
pub async fn build_state(settings: Arc<Settings>, providers: Providers) -> Result<web::Data<AppState>, StartError> {
    let authenticator = Authenticator::from_settings(&settings.auth)?;
    let engine = if settings.snapshots.restore.is_empty() {
        let params = EngineParams::from_settings(&settings, providers.embedder.dimension());
        Engine::start(params, providers.embedder)?
    } else {
        let directory = Path::new(&settings.snapshots.restore);
        let (engine, manifest) = crate::snapshot::start_engine(&settings, providers.embedder, directory)
            .await
            .map_err(|error| StartError::Snapshot { path: directory.display().to_string(), error })?;
        tracing::info!(snapshot = %manifest.snapshot_id, acl_epoch = manifest.acl_epoch, chunks = manifest.chunks, "snapshot restored");
        engine
    };
    let replica = (!settings.replica.follow.is_empty()).then(|| {
        let status = Arc::new(crate::snapshot::replica::ReplicaStatus::new(std::time::Duration::from_millis(
            settings.replica.max_lag_ms,
        )));
        crate::snapshot::replica::spawn_follower(Arc::clone(&engine), &settings.replica, Arc::clone(&status));
        status
    });
    let pipeline = Arc::new(AnswerPipeline::new(
        engine,
        providers.generator,
        providers.verifier,
        PipelineSettings::from_settings(&settings),
    ));
    let answer_actor = AnswerActor::new(Arc::clone(&pipeline)).start();
    Ok(web::Data::new(AppState {
        pipeline,
        answer_actor,
        authenticator,
        in_flight: Arc::new(Semaphore::new(settings.server.max_in_flight)),
        metrics: crate::telemetry::metrics_handle(),
        settings,
        ready: AtomicBool::new(false),
        replica,
    }))
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
    let state = build_state(Arc::clone(&settings), providers).await?;
    if settings.demo.load && settings.snapshots.restore.is_empty() {
        let count = load_corpus(state.pipeline.engine(), Path::new(&settings.demo.corpus)).await?;
        tracing::info!(documents = count, corpus = %settings.demo.corpus, "demo corpus loaded");
    }
    state.ready.store(true, Ordering::SeqCst);
    let bind = settings.server.bind.clone();
    let server_state = state.clone();
    let server = HttpServer::new(move || app(server_state.clone()))
        .workers(settings.server.workers)
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
    Ok(())
}
