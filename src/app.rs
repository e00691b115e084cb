//! The composition root: settings → providers → engine → pipeline → application state, and
//! [`serve`], which binds the port, builds the state and runs the HTTP server on it. The command
//! line and the tests build the system through these functions alone, so there is one way to
//! start it.
//!
//! Invariants: nothing is served before [`build_state`] has returned (the engine is started,
//! restored or recovered whole, or the database connected and migrated); the demo corpus is
//! loaded only into a new engine or an empty database.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use actix_web::web;
use serde::Deserialize;
use tokio::sync::Semaphore;

use crate::answer::{AnswerPipeline, PipelineSettings};
use crate::config::{Settings, StorageBackend};
use crate::documents::{Documents, NoReplicas, Settle};
use crate::embedded::{Engine, EngineParams};
use crate::http::AppState;
use crate::http::auth::Authenticator;
use crate::providers::Providers;
use crate::retrieval::{DocumentInput, ReadSide, WriteSide};
use crate::review::{PurgeOnDelete, ReviewStore};

/// Errors that stop the server from starting.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The settings may not be served (the demo key on a non-loopback address).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// Authentication settings are unusable.
    #[error(transparent)]
    Auth(#[from] crate::http::auth::AuthError),
    /// The engine could not start or the demo corpus could not be loaded.
    #[error(transparent)]
    Retrieval(#[from] crate::retrieval::RetrievalError),
    /// The demo corpus could not be written through the write path.
    #[error(transparent)]
    Write(#[from] crate::documents::DocumentsError),
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
    /// The review store could not be opened.
    #[error("review store: {0}")]
    Reviews(String),
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

/// Reads a demo corpus file: its documents grouped per tenant.
fn read_corpus(path: &Path) -> Result<std::collections::BTreeMap<String, Vec<DocumentInput>>, StartError> {
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
            layout: None,
        });
    }
    Ok(per_tenant)
}

/// Loads a demo corpus file (documents grouped per tenant, one batch per tenant) straight into
/// an engine or backend that serves nothing yet (snapshots, benchmarks, tests).
pub async fn load_corpus(writer: &dyn WriteSide, path: &Path) -> Result<usize, StartError> {
    let mut total = 0;
    for (tenant, documents) in read_corpus(path)? {
        total += writer.upsert(&tenant, documents).await?.documents;
    }
    Ok(total)
}

/// Loads a demo corpus file into a server's write path ([`Documents::seed`]: one batch per
/// tenant, settled like every write).
pub async fn seed_corpus(documents: &Documents, path: &Path) -> Result<usize, StartError> {
    let mut total = 0;
    for (tenant, inputs) in read_corpus(path)? {
        total += documents.seed(&tenant, inputs).await?.documents;
    }
    Ok(total)
}

/// The write path over a started backend's write side, for `settings`: deletes and upserts
/// purge the texts of the versions they remove from review items ([`crate::review::PurgeOnDelete`]),
/// and each write is settled with `replication`'s leases when this primary has replicas.
pub fn documents(
    settings: &Settings,
    backend: &Backend,
    replication: Option<Arc<crate::replication::primary::ReplicationLog>>,
) -> Documents {
    let writer = Arc::new(PurgeOnDelete::new(Arc::clone(&backend.writer), Arc::clone(&backend.reviews)));
    let settle: Arc<dyn Settle> = match replication {
        Some(log) => Arc::new(LeaseSettlement(log)),
        None => Arc::new(NoReplicas),
    };
    Documents::from_settings(settings, writer, settle)
}

/// A primary's settlement: a write waits until every replica holding a live lease applied its
/// tenant's tracked changes up to its epoch, or that lease ran out (at most one lease; never
/// for another tenant's change; [`crate::replication::leases`]).
struct LeaseSettlement(Arc<crate::replication::primary::ReplicationLog>);

#[async_trait::async_trait]
impl Settle for LeaseSettlement {
    async fn settle(&self, tenant: &str, epoch: u64) {
        self.0.leases().settle(tenant, epoch).await;
    }
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
    if replica && !settings.storage.dir.is_empty() {
        return start_durable_replica(settings, params, embedder).await;
    }
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
        let cache_bytes = params.store_cache_bytes;
        let (restored, store) = tokio::task::spawn_blocking(move || {
            let restored = crate::snapshot::restore(&owned, &name, dimension, vector).map_err(snapshot_error)?;
            let acl = restored.acl.relabeled(crate::acl::new_lineage());
            let chunks: Vec<_> = restored.shards.iter().flat_map(|shard| shard.export()).collect();
            let store = crate::storage::Store::seed(&data, &name, dimension, &acl, &chunks, cache_bytes)
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
        indexes = ?recovery.indexes,
        "data directory opened"
    );
    Ok((engine, recovery.created))
}

/// A replica with a data directory: it resumes from what it applied (its store keeps its
/// primary's lineage and epoch, so it streams on from there without downloading anything); a new
/// directory is seeded from `snapshots.restore` keeping the snapshot's lineage, or created empty
/// (a fresh lineage: the primary answers 409 `lineage_mismatch` and the replica bootstraps from its
/// snapshot, re-seeding the store).
async fn start_durable_replica(
    settings: &Settings,
    params: EngineParams,
    embedder: Arc<dyn crate::embed::Embedder>,
) -> Result<(Arc<Engine>, bool), StartError> {
    let data = Path::new(&settings.storage.dir).to_owned();
    let restore = settings.snapshots.restore.clone();
    let exists = std::fs::metadata(data.join(crate::storage::STORE_FILE)).map(|meta| meta.len() > 0).unwrap_or(false);
    if exists || restore.is_empty() {
        if exists && !restore.is_empty() {
            tracing::info!(data = %data.display(), "the replica resumes from its data directory; snapshots.restore is not needed");
        }
        let (engine, recovery) = Engine::open(params, embedder, &data).await?;
        tracing::info!(acl_epoch = engine.acl().epoch(), lineage = %engine.acl().lineage(), created = recovery.created, "replica data directory opened");
        return Ok((engine, false));
    }
    let directory = Path::new(&restore).to_owned();
    let shown = directory.display().to_string();
    let (name, dimension, vector, cache_bytes) =
        (embedder.name().to_owned(), embedder.dimension(), params.vector, params.store_cache_bytes);
    let (restored, store) = tokio::task::spawn_blocking(move || {
        let restored = crate::snapshot::restore(&directory, &name, dimension, vector)
            .map_err(|error| StartError::Snapshot { path: shown, error })?;
        let chunks: Vec<_> = restored.shards.iter().flat_map(|shard| shard.export()).collect();
        // The replica keeps the snapshot's lineage: it follows the same history.
        let store = crate::storage::Store::seed(&data, &name, dimension, &restored.acl, &chunks, cache_bytes)
            .map_err(|error| StartError::Retrieval(error.into()))?;
        Ok::<_, StartError>((restored, store))
    })
    .await
    .map_err(|error| StartError::Restore(error.to_string()))??;
    let mut params = params;
    params.shards = restored.manifest.shards;
    tracing::info!(snapshot = %restored.manifest.snapshot_id, acl_epoch = restored.manifest.acl_epoch, "replica data directory seeded from the snapshot");
    Ok((Engine::start_durable(params, embedder, restored.acl, restored.shards, store)?, false))
}

/// A started backend: its two sides, its review store, the embedded engine when it is the
/// backend, and whether it is new (nothing restored, recovered or in the database: the demo
/// corpus may be loaded).
pub struct Backend {
    /// Scope, retrieval, authorization, documents.
    pub reader: Arc<dyn ReadSide>,
    /// Document batches and ACL changes.
    pub writer: Arc<dyn WriteSide>,
    /// The review queue's store (`<storage.dir>/reviews.redb`, in memory, or the database).
    pub reviews: Arc<dyn ReviewStore>,
    /// The embedded engine (`None` on PostgreSQL).
    pub engine: Option<Arc<Engine>>,
    /// The PostgreSQL backend (`None` on the embedded engine), whose database's parts `/readyz`
    /// probes ([`crate::postgres::health`]).
    pub database: Option<Arc<crate::postgres::PostgresBackend>>,
    /// Whether it is new.
    pub fresh: bool,
}

/// The embedded engine's review store: `<storage.dir>/reviews.redb` when the engine has a data
/// directory, else in memory.
pub async fn embedded_reviews(settings: &Settings, engine: &Arc<Engine>) -> Result<Arc<dyn ReviewStore>, StartError> {
    let directory = (!settings.storage.dir.is_empty()).then(|| std::path::PathBuf::from(&settings.storage.dir));
    let liveness = Arc::clone(engine) as Arc<dyn crate::review::embedded::Liveness>;
    let opened = tokio::task::spawn_blocking(move || {
        crate::review::embedded::EmbeddedReviews::open(directory.as_deref(), liveness)
    })
    .await
    .map_err(|error| StartError::Reviews(error.to_string()))?
    .map_err(|error| StartError::Reviews(error.to_string()))?;
    Ok(Arc::new(opened))
}

/// Starts the configured backend: the embedded engine ([`start_engine`]) or a connection pool
/// to PostgreSQL (migrations applied, the embedder checked against the database's).
pub async fn start_backend(
    settings: &Settings,
    embedder: Arc<dyn crate::embed::Embedder>,
) -> Result<Backend, StartError> {
    match settings.storage.backend {
        StorageBackend::Embedded => {
            let (engine, fresh) = start_engine(settings, embedder).await?;
            let reviews = embedded_reviews(settings, &engine).await?;
            Ok(Backend {
                reader: engine.clone(),
                writer: engine.clone(),
                reviews,
                engine: Some(engine),
                database: None,
                fresh,
            })
        }
        StorageBackend::Postgres => {
            let params = crate::postgres::PostgresParams::from_settings(settings)?;
            let limits = crate::postgres::DatabaseLimits::from_settings(settings);
            let cache = crate::postgres::CacheParams::from_settings(settings);
            let backend = crate::postgres::PostgresBackend::connect_cached(params, limits, cache, embedder).await?;
            let fresh = backend.is_empty().await?;
            tracing::info!(lineage = %backend.lineage(), empty = fresh, "postgres backend connected");
            Ok(Backend {
                reader: backend.clone(),
                writer: backend.clone(),
                reviews: backend.clone(),
                engine: None,
                database: Some(backend),
                fresh,
            })
        }
    }
}

/// The answer pipeline over a backend's read side with the configured generator and verifier.
pub fn pipeline(settings: &Settings, reader: Arc<dyn ReadSide>, providers: &Providers) -> AnswerPipeline {
    AnswerPipeline::new(
        reader,
        Arc::clone(&providers.generator),
        Arc::clone(&providers.verifier),
        PipelineSettings::from_settings(settings),
    )
}

/// Builds the shared state (see [`start_engine`]), pipeline, request actor, authenticator (with
/// the identity provider's keys fetched once, when configured), metrics, the replica follower
/// when `replica.follow` is set and the checkpointer on a durable primary. Loads no corpus. Must
/// run inside an actix System.
pub async fn build_state(settings: Arc<Settings>, providers: Providers) -> Result<web::Data<AppState>, StartError> {
    Ok(build_state_with(settings, providers).await?.0)
}

/// [`build_state`], also telling whether the engine is new (nothing restored or recovered).
pub(crate) async fn build_state_with(
    settings: Arc<Settings>,
    providers: Providers,
) -> Result<(web::Data<AppState>, bool), StartError> {
    let backend = start_backend(&settings, Arc::clone(&providers.embedder)).await?;
    let fresh = backend.fresh;
    let state = build_state_on(settings, providers, backend)?;
    // The identity provider's keys are fetched before anything is served (a provider that does
    // not answer leaves provider tokens refused and `/readyz` saying why until a fetch succeeds).
    if let Some(provider) = state.authenticator.provider() {
        provider.first_fetch().await;
    }
    Ok((state, fresh))
}

/// The shared state around an already started `backend` (what [`build_state`] does after
/// [`start_backend`]; also for embedding warrant on a backend built elsewhere); starts the
/// refresher of the identity provider's keys, when configured. Must run inside an actix System.
pub fn build_state_on(
    settings: Arc<Settings>,
    providers: Providers,
    backend: Backend,
) -> Result<web::Data<AppState>, StartError> {
    let authenticator = Authenticator::from_settings(&settings.auth)?;
    if let Some(provider) = authenticator.provider() {
        provider.spawn_refresher();
    }
    let Backend { reader, engine, .. } = &backend;
    let (reader, engine) = (Arc::clone(reader), engine.clone());
    let mut replica = None;
    if let Some(engine) = &engine {
        if !settings.replica.follow.is_empty() {
            let lag = std::time::Duration::from_millis(settings.replica.max_lag_ms);
            let status = Arc::new(crate::replication::status::ReplicaStatus::new(lag));
            crate::replication::follower::spawn_follower(Arc::clone(engine), &settings, Arc::clone(&status));
            replica = Some(status);
        }
        if engine.store().is_some() {
            crate::snapshot::checkpoint::spawn(Arc::clone(engine), Arc::clone(&settings));
        }
    }
    // An embedded primary with configured replicas keeps its committed changes for them.
    let replication = match &engine {
        Some(engine) if settings.replica.follow.is_empty() && !settings.auth.replica_subjects.is_empty() => {
            let replica = &settings.replica;
            let log = Arc::new(crate::replication::primary::ReplicationLog::new(
                engine.acl().epoch(),
                replica.stream_buffer_mb.saturating_mul(1 << 20),
                replica.sync,
                std::time::Duration::from_millis(replica.lease_ms),
                std::time::Duration::from_millis(replica.heartbeat_ms),
            ));
            engine.attach_sink(Arc::clone(&log) as Arc<dyn crate::embedded::ChangeSink>);
            Some(log)
        }
        _ => None,
    };
    let documents = Arc::new(documents(&settings, &backend, replication.clone()));
    let reviews = backend.reviews;
    let review = settings.review.enabled.then(|| {
        let queue = crate::review::ReviewQueue::start(
            Arc::clone(&reviews),
            crate::review::QueueSettings::from_settings(&settings.review),
        );
        Arc::new(crate::review::Router::new(crate::review::RoutingPolicy::from_settings(&settings.review), queue))
    });
    let mut pipeline = pipeline(&settings, Arc::clone(&reader), &providers);
    if let Some(router) = &review {
        pipeline = pipeline.with_review(Arc::clone(router));
    }
    let pipeline = Arc::new(pipeline);
    let state = web::Data::new(AppState {
        reader,
        documents,
        engine,
        database: backend.database,
        pipeline,
        authenticator,
        in_flight: Arc::new(Semaphore::new(settings.server.max_in_flight)),
        metrics: crate::telemetry::metrics_handle(),
        replica_snapshot: tokio::sync::Mutex::new(()),
        settings,
        ready: AtomicBool::new(false),
        replica,
        replication,
        reviews,
        review,
    });
    Ok(state)
}

/// `warrant serve`: runs the server on `settings.server.bind` until SIGTERM/SIGINT (graceful
/// shutdown is actix-web's: in-flight requests finish, new connections are refused; then the
/// engine is closed: [`Engine::close`]). Refuses to start when the
/// settings may not be served ([`Settings::validate_for_serving`]).
pub async fn serve(settings: Arc<Settings>, providers: Providers) -> Result<(), StartError> {
    settings.validate_for_serving()?;
    crate::http::console::DemoUsers::from_settings(&settings)
        .map_err(|reason| StartError::Demo { path: settings.demo.users.clone(), reason })?;
    // The port is bound once: while the state loads, a small server on it answers `/healthz`
    // and `/readyz` (503 with the load's progress) and 503 `starting` to anything else.
    let listener = std::net::TcpListener::bind(&settings.server.bind)?;
    let names = crate::http::ops::Names {
        embedder: providers.embedder.name().to_owned(),
        generator: providers.generator.name().to_owned(),
    };
    let loading = crate::http::server::loading_server(listener.try_clone()?, names)?;
    let loading_handle = loading.handle();
    actix_rt::spawn(loading);
    if let Ok(address) = listener.local_addr() {
        eprintln!("warrant loading on http://{address} (/readyz reports the progress)");
    }
    let built = build_state_with(Arc::clone(&settings), providers).await;
    loading_handle.stop(true).await;
    let (state, fresh) = built?;
    if fresh && settings.demo.load {
        let count = seed_corpus(&state.documents, Path::new(&settings.demo.corpus)).await?;
        tracing::info!(documents = count, corpus = %settings.demo.corpus, "demo corpus loaded");
    }
    state.ready.store(true, std::sync::atomic::Ordering::SeqCst);
    let server_state = state.clone();
    let server = actix_web::HttpServer::new(move || crate::http::server::app(server_state.clone()))
        .workers(match settings.server.workers {
            0 => std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get),
            workers => workers,
        })
        .shutdown_timeout(10)
        .listen(listener)?;
    for address in server.addrs() {
        eprintln!("warrant listening on http://{address}");
    }
    eprintln!("embedder: {}", state.reader.embedder_name());
    if settings.demo.load {
        eprintln!(
            "try:\n  TOKEN=$(cargo run -q --release -- token --tenant acme --sub alice --groups everyone,engineering)\n  \
             curl -s {}/v1/answer -H \"authorization: Bearer $TOKEN\" -H 'content-type: application/json' \\\n    \
             -d '{{\"question\": \"How much are hotel stays reimbursed per night in London?\"}}'",
            server.addrs().first().map(|address| format!("http://{address}")).unwrap_or_default()
        );
    }
    server.run().await?;
    // The review items still queued are written before the stores close.
    if let Some(review) = &state.review {
        review.queue().close(std::time::Duration::from_secs(10)).await;
    }
    // Graceful shutdown: the next start loads the indexes instead of rebuilding them, replays
    // no ACL change and trusts the sealed store without checking every page.
    if let Some(engine) = &state.engine {
        engine.close().await;
    }
    Ok(())
}
