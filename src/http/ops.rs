//! Operations endpoints: `/livez`, `/healthz`, `/readyz`, `/metrics` (`/openapi.json` is served
//! by [`super::openapi`], the document's own file).
//!
//! Invariants: `/livez` and `/healthz` (liveness) depend on nothing but the process. `/readyz`
//! answers within about [`READINESS_PROBE_BOUND`] whatever the backend does (issue 59: with a
//! frozen Citus worker it did not answer for 30 s): the backend's probe is abandoned past the
//! bound, and the body's `backend` says which part failed, how, and since when. On PostgreSQL
//! only the server warrant connects to (the Citus coordinator) decides readiness, probed on a
//! connection outside the pool by a statement that reaches no worker
//! ([`crate::postgres::health`]); each Citus worker is probed from the coordinator and reported
//! in `backend.workers`, and one worker down or frozen does not make the node unready (it still
//! serves the tenants of the other workers). `/readyz` is unauthenticated: it names the
//! database's parts by role and `pg_dist_node` id, never by host or port (those are logged).

use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{HttpResponse, web};
use serde::Serialize;

use super::{AppState, json};

/// `/readyz` body.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Readiness {
    /// `ready`, `starting`, `replica_stale` (a replica past its lag bound),
    /// `backend_unavailable` (the database behind a PostgreSQL backend does not answer), or
    /// `keys_unavailable` (with `[auth.oidc]`: no key of the identity provider is usable, so
    /// every provider token is refused; `oidc` says why).
    pub status: &'static str,
    /// Active embedder.
    pub embedder: String,
    /// Active generator.
    pub generator: String,
    /// Current ACL epoch (the highest tenant epoch on a single PostgreSQL server; 0 on Citus,
    /// where it would read a shard on every worker, and while the database does not answer).
    pub acl_epoch: u64,
    /// Lineage of the epoch (epochs are comparable only within one lineage).
    pub lineage: String,
    /// Replica freshness (absent on a primary).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica: Option<super::contract::replica::ReplicaReport>,
    /// On a primary with configured replicas: each replica stream session (connected or with a
    /// lease still running), its acknowledged epoch and its lease.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<Vec<super::contract::replica::ReplicaLease>>,
    /// On an engine opened from its data directory: how the indexes came back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery: Option<RecoveryReport>,
    /// While the server is still opening its data directory (status `starting`): how far it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loading: Option<crate::storage::progress::Progress>,
    /// With `[auth.oidc]`: the identity provider's keys.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oidc: Option<OidcReport>,
    /// The backend's probe: what was asked, how it went, since when it fails; on PostgreSQL the
    /// database's server by its role and, on Citus, each worker by its `pg_dist_node` id (never
    /// a host or port); absent while the state loads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<BackendReport>,
}

/// The longest `/readyz` waits for the backend's probe before it answers that the backend did
/// not answer (`backend.outcome` `timeout`), so a load balancer's check always gets an answer
/// within about a second.
pub const READINESS_PROBE_BOUND: Duration = Duration::from_millis(800);

/// How one probed part answered: the backend's probe and each Citus worker's share it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ProbeReport {
    /// `ok`, `timeout` (no answer within the bound; the probe was abandoned: frozen,
    /// partitioned, overloaded), `error` (on PostgreSQL also: a schema or database that is not
    /// this node's), `unreachable` (on PostgreSQL: the part refused or dropped the connection:
    /// down, restarting); for a Citus worker also `inactive` (marked so in `pg_dist_node`; not
    /// probed) or `unknown` (not probed: the coordinator's probe failed).
    pub outcome: &'static str,
    /// The code a request reaching this part gets now (`storage_timeout`,
    /// `storage_unavailable`, ...); absent when it answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<&'static str>,
    /// Milliseconds the probe took (at most the bound).
    pub elapsed_ms: u64,
    /// Seconds since the probe's first failure after its last success (absent while it
    /// succeeds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failing_seconds: Option<u64>,
}

impl ProbeReport {
    fn of_part(part: &crate::postgres::health::PartHealth) -> Self {
        Self {
            outcome: part.outcome.as_str(),
            code: part.outcome.code(),
            elapsed_ms: part.elapsed.as_millis() as u64,
            failing_seconds: part.failing_for.map(|failing| failing.as_secs()),
        }
    }
}

/// The backend part of `/readyz`. It names no host or port (the endpoint is unauthenticated):
/// a failing part's address is in the log, at warn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct BackendReport {
    /// What was probed: `acl_state` (the embedded engine's ACL epoch and lineage) or `database`
    /// (on PostgreSQL: the server warrant connects to, the Citus coordinator, on a connection of
    /// its own; its catalog and `warrant_meta`, never a tenant table or a worker). It alone
    /// decides readiness.
    pub probe: &'static str,
    /// On PostgreSQL, which server that is: `server` (a single PostgreSQL server) or
    /// `coordinator` (a Citus coordinator); absent while it does not answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// How the probe went.
    #[serde(flatten)]
    pub probed: ProbeReport,
    /// On PostgreSQL: the highest migration the database holds (when it answered).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<u32>,
    /// On Citus: each primary worker (`pg_dist_node`), probed from the coordinator within the
    /// same bound. A failing worker is reported here and leaves the node ready: requests of the
    /// tenants whose shards it holds fail with 503 and a code, the others are served.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<Vec<WorkerReport>>,
}

/// One Citus worker in `/readyz`, named as the coordinator's `pg_dist_node` names it (`SELECT
/// nodename, nodeport FROM pg_dist_node WHERE nodeid = ...` on the coordinator gives its address).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct WorkerReport {
    /// `pg_dist_node.nodeid`.
    pub node_id: i32,
    /// `pg_dist_node.groupid`: the shard group it holds.
    pub group_id: i32,
    /// How its probe from the coordinator went.
    #[serde(flatten)]
    pub probed: ProbeReport,
}

impl BackendReport {
    /// The report of a PostgreSQL backend's database probe.
    pub fn of_database(health: &crate::postgres::health::DatabaseHealth) -> Self {
        Self {
            probe: "database",
            role: health.citus.map(|citus| if citus { "coordinator" } else { "server" }),
            probed: ProbeReport::of_part(&health.coordinator),
            schema_version: health.schema_version,
            workers: health.workers.as_ref().map(|workers| {
                workers
                    .iter()
                    .filter_map(|worker| {
                        let identity = worker.worker?;
                        Some(WorkerReport {
                            node_id: identity.node_id,
                            group_id: identity.group_id,
                            probed: ProbeReport::of_part(worker),
                        })
                    })
                    .collect()
            }),
        }
    }
}

/// When the backend's probe started failing (`None` while it succeeds): one per process.
static PROBE_FAILING_SINCE: Mutex<Option<Instant>> = Mutex::new(None);

/// Runs the backend's `probe` for at most `bound`: its value when it answered in time, and
/// its report (the failure's start kept in `failing_since`, cleared by a success).
pub async fn probe_backend<T>(
    probe: impl std::future::Future<Output = crate::retrieval::RetrievalResult<T>>,
    bound: Duration,
    failing_since: &Mutex<Option<Instant>>,
) -> (Option<T>, BackendReport) {
    let started = Instant::now();
    let outcome = tokio::time::timeout(bound, probe).await;
    let elapsed_ms = started.elapsed().as_millis() as u64;
    let (value, outcome, code) = match outcome {
        Ok(Ok(value)) => (Some(value), "ok", None),
        Ok(Err(error)) => {
            tracing::warn!(code = error.code(), "readiness: the backend's probe failed");
            (None, "error", Some(error.code()))
        }
        Err(_) => {
            tracing::warn!(
                bound_ms = bound.as_millis() as u64,
                "readiness: the backend's probe did not answer in time"
            );
            (None, "timeout", None)
        }
    };
    let mut since = failing_since.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let failing_seconds = if value.is_some() {
        *since = None;
        None
    } else {
        Some(since.get_or_insert(started).elapsed().as_secs())
    };
    let report = BackendReport {
        probe: "acl_state",
        role: None,
        probed: ProbeReport { outcome, code, elapsed_ms, failing_seconds },
        schema_version: None,
        workers: None,
    };
    (value, report)
}

/// The identity provider's keys as `/readyz` shows them.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OidcReport {
    /// `auth.oidc.issuer`.
    pub issuer: String,
    /// Keys held (from the last successful fetch).
    pub keys: usize,
    /// Whether provider tokens can be verified: keys held, fetched at most
    /// `auth.oidc.max_key_age_seconds` ago.
    pub usable: bool,
    /// Seconds since the last successful fetch (absent before the first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_age_seconds: Option<u64>,
    /// Why the last fetch failed (absent when it succeeded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<super::error::ErrorBody>,
}

impl From<crate::oidc::ProviderStatus> for OidcReport {
    fn from(status: crate::oidc::ProviderStatus) -> Self {
        Self {
            issuer: status.issuer,
            keys: status.keys,
            usable: status.usable,
            key_age_seconds: status.key_age.map(|age| age.as_secs()),
            last_error: status
                .last_error
                .map(|(code, message)| super::error::ErrorBody { code: code.to_owned(), message }),
        }
    }
}

/// The provider names `/readyz` shows while the state loads.
#[derive(Clone, Debug)]
pub struct Names {
    /// Active embedder.
    pub embedder: String,
    /// Active generator.
    pub generator: String,
}

/// `/readyz` while the state loads: 503 `starting` with the progress of the load.
pub async fn loading(names: web::Data<Names>) -> HttpResponse {
    super::error::not_ready(&Readiness {
        status: "starting",
        embedder: names.embedder.clone(),
        generator: names.generator.clone(),
        acl_epoch: 0,
        lineage: String::new(),
        replica: None,
        replicas: None,
        recovery: None,
        loading: Some(crate::storage::progress::now()),
        oidc: None,
        backend: None,
    })
}

/// Any other path while the state loads: 503 `starting`, retry in a second.
pub async fn not_yet() -> Result<HttpResponse, super::error::ApiError> {
    Err(super::error::ApiError::starting())
}

/// How a durable engine's indexes came back at start (counts only).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RecoveryReport {
    /// `index_set` (loaded from the last index set and its journal) or `rebuilt` (no usable
    /// set: indexed from the stored rows).
    pub indexes: &'static str,
    /// Live chunks recovered.
    pub chunks: usize,
    /// Chunks restored from the index journal (not indexed again).
    pub journaled_chunks: usize,
    /// Chunks indexed again from the stored rows (newer than the set and its journal, or all
    /// of them when rebuilt).
    pub reindexed_chunks: usize,
    /// Shards whose journal was refused before its end (damaged; named in the log).
    pub journals_refused: usize,
    /// How the store file was trusted: `sealed` (byte for byte the file closed at the last
    /// graceful stop, by its BLAKE3 seal), `pages` (redb's integrity check of every page: after
    /// a crash, or when the seal did not match) or `created` (a new store).
    pub store_check: &'static str,
    /// Seconds the open took.
    pub seconds: f64,
}

impl From<&crate::embedded::Recovery> for RecoveryReport {
    fn from(recovery: &crate::embedded::Recovery) -> Self {
        use crate::storage::indexes::IndexSetOutcome;
        let (indexes, journaled_chunks, reindexed_chunks, journals_refused) = match &recovery.indexes {
            IndexSetOutcome::Loaded { journaled, indexed_after, journal_stopped, .. } => {
                ("index_set", *journaled, *indexed_after, journal_stopped.len())
            }
            IndexSetOutcome::Rebuilt { .. } => ("rebuilt", 0, recovery.chunks, 0),
        };
        Self {
            indexes,
            chunks: recovery.chunks,
            journaled_chunks,
            reindexed_chunks,
            journals_refused,
            store_check: match (recovery.created, recovery.sealed) {
                (true, _) => "created",
                (false, true) => "sealed",
                (false, false) => "pages",
            },
            seconds: recovery.seconds,
        }
    }
}

/// `/healthz` body.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Health {
    /// Always `ok`.
    pub status: &'static str,
}

/// Process is up.
#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "process up", body = Health)))]
pub async fn healthz() -> HttpResponse {
    json(&Health { status: "ok" })
}

/// Liveness: the process answers HTTP. Asks nothing of the backend, so a database outage never
/// gets a node restarted (a restart would not bring the database back); `/readyz` is the check
/// that takes a node out of a load balancer.
#[utoipa::path(get, path = "/livez", responses((status = 200, description = "process up (asks nothing of the backend)", body = Health)))]
pub async fn livez() -> HttpResponse {
    json(&Health { status: "ok" })
}

/// The backend's readiness probe, bounded by [`READINESS_PROBE_BOUND`]: on PostgreSQL the
/// database's parts ([`crate::postgres::health`]; the coordinator decides), else the backend's
/// ACL state. Returns the ACL epoch and lineage when the backend can serve.
async fn probe_readiness(
    reader: &dyn crate::retrieval::ReadSide,
    database: Option<&crate::postgres::PostgresBackend>,
) -> (Option<(u64, String)>, BackendReport) {
    let Some(postgres) = database else {
        return probe_backend(reader.acl_state(), READINESS_PROBE_BOUND, &PROBE_FAILING_SINCE).await;
    };
    let health = postgres.health(READINESS_PROBE_BOUND).await;
    let state = health.ready().then(|| (health.acl_epoch.unwrap_or(0), postgres.lineage().to_owned()));
    (state, BackendReport::of_database(&health))
}

/// This node can serve: indexes loaded, the database's coordinator answers (a Citus worker down
/// is reported in the body's `backend.workers`, and leaves the node ready).
#[utoipa::path(get, path = "/readyz", responses(
    (status = 200, description = "ready (on Citus, possibly with failing workers: the body's backend.workers lists each with its outcome)", body = Readiness),
    (status = 503, description = "starting, a replica that cannot confirm its ACL state is fresh, a database backend whose server (the Citus coordinator) does not answer within about a second (the body's backend field says how), or no usable key of the identity provider", body = Readiness)))]
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let replica = state.replica.as_ref().map(|status| super::contract::replica::ReplicaReport::from(status.report()));
    let stale = replica.as_ref().is_some_and(|report| !report.fresh);
    let (acl_state, backend) = probe_readiness(state.reader.as_ref(), state.database.as_deref()).await;
    let reachable = acl_state.is_some();
    let oidc = state.authenticator.provider().map(|provider| OidcReport::from(provider.status()));
    let keys_unavailable = oidc.as_ref().is_some_and(|report| !report.usable);
    let ready = state.ready.load(Ordering::SeqCst) && !stale && reachable && !keys_unavailable;
    let (acl_epoch, lineage) = acl_state.unwrap_or_default();
    let body = Readiness {
        status: if stale {
            "replica_stale"
        } else if !reachable {
            "backend_unavailable"
        } else if keys_unavailable {
            "keys_unavailable"
        } else if ready {
            "ready"
        } else {
            "starting"
        },
        embedder: state.reader.embedder_name().to_owned(),
        generator: state.pipeline.generator().name().to_owned(),
        replicas: state.replication.as_ref().map(|log| {
            let now = std::time::Instant::now();
            log.leases()
                .report(now)
                .into_iter()
                .map(|lease| {
                    let lag_ms = log.lag(lease.applied_epoch, now).as_millis() as u64;
                    super::contract::replica::ReplicaLease::from((lease, acl_epoch, lag_ms))
                })
                .collect()
        }),
        acl_epoch,
        lineage,
        replica,
        recovery: state.engine.as_ref().and_then(|engine| engine.recovery()).map(RecoveryReport::from),
        loading: None,
        oidc,
        backend: Some(backend),
    };
    if ready { json(&body) } else { super::error::not_ready(&body) }
}

/// Middleware: counts every response in `warrant_http_responses_total{route, class}` and its
/// time in `warrant_http_response_seconds{route, class}`: `route` is the matched route's pattern
/// (`/v1/documents/{doc_id}`, never the raw path; `unmatched` for none), `class` the status class
/// (`2xx` ... `5xx`), so the labels stay bounded whatever clients send.
pub async fn count_responses(
    request: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let route = request.match_pattern().unwrap_or_else(|| "unmatched".to_owned());
    let started = Instant::now();
    let response = next.call(request).await;
    let status = match &response {
        Ok(response) => response.status(),
        Err(error) => error.as_response_error().status_code(),
    };
    let class = status_class(status.as_u16());
    metrics::counter!("warrant_http_responses_total", "route" => route.clone(), "class" => class).increment(1);
    metrics::histogram!("warrant_http_response_seconds", "route" => route, "class" => class)
        .record(started.elapsed().as_secs_f64());
    response
}

/// `1xx` ... `5xx` (`other` outside 100..=599).
fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        500..=599 => "5xx",
        _ => "other",
    }
}

/// Prometheus text exposition.
#[utoipa::path(get, path = "/metrics",
    responses((status = 200, description = "prometheus text exposition 0.0.4", body = String, content_type = "text/plain")))]
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    if let Some(engine) = &state.engine {
        let stats = engine.stats();
        metrics::gauge!("warrant_index_chunks").set(stats.iter().map(|shard| shard.chunks).sum::<usize>() as f64);
        metrics::gauge!("warrant_index_vectors").set(stats.iter().map(|shard| shard.vectors).sum::<usize>() as f64);
        metrics::gauge!("warrant_index_lexical_docs")
            .set(stats.iter().map(|shard| shard.lexical_docs).sum::<u64>() as f64);
        metrics::gauge!("warrant_acl_epoch").set(engine.acl().epoch() as f64);
        metrics::gauge!("warrant_live_documents").set(engine.acl().load().live_documents() as f64);
    }
    if let Some(status) = &state.replica {
        status.report();
    }
    if let (Some(log), Some(engine)) = (&state.replication, &state.engine) {
        let epoch = engine.acl().epoch();
        // Per replica (labels bounded by auth.replica_subjects): its best session.
        let mut best: std::collections::BTreeMap<String, crate::replication::leases::LeaseReport> = Default::default();
        for lease in log.leases().report(std::time::Instant::now()) {
            let slot = best.entry(lease.replica.clone()).or_insert_with(|| lease.clone());
            if (lease.connected, lease.applied_epoch) > (slot.connected, slot.applied_epoch) {
                *slot = lease;
            }
        }
        for (replica, lease) in best {
            metrics::gauge!("warrant_replication_applied_epoch", "replica" => replica.clone())
                .set(lease.applied_epoch as f64);
            metrics::gauge!("warrant_replication_lag_changes", "replica" => replica.clone())
                .set(epoch.saturating_sub(lease.applied_epoch) as f64);
            metrics::gauge!("warrant_replication_lag_seconds", "replica" => replica.clone())
                .set(log.lag(lease.applied_epoch, std::time::Instant::now()).as_secs_f64());
            metrics::gauge!("warrant_replication_lease_remaining_seconds", "replica" => replica)
                .set(lease.lease_remaining_ms as f64 / 1000.0);
        }
    }
    state.metrics.run_upkeep();
    HttpResponse::Ok().content_type("text/plain; version=0.0.4").body(state.metrics.render())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::{DatabaseCause, DatabaseOperation, RetrievalError};

    /// Issue 59: with a frozen worker `/readyz` did not answer for 30 s. A probe that hangs is
    /// abandoned at the bound and reported as a timeout, with the time it has been failing.
    #[tokio::test]
    async fn a_probe_that_hangs_is_reported_as_a_timeout_within_the_bound() {
        let failing_since = Mutex::new(None);
        let hanging = std::future::pending::<crate::retrieval::RetrievalResult<u64>>();
        let waited = tokio::time::timeout(
            Duration::from_secs(5),
            probe_backend(hanging, Duration::from_millis(50), &failing_since),
        )
        .await;
        let (value, report) = waited.expect("the probe is bounded");
        let probed = &report.probed;
        assert_eq!((value, probed.outcome, probed.code, probed.failing_seconds), (None, "timeout", None, Some(0)));
        let failed = async {
            Err::<u64, _>(RetrievalError::Database {
                operation: DatabaseOperation::Read,
                cause: DatabaseCause::Connection,
            })
        };
        let (_, report) = probe_backend(failed, Duration::from_millis(50), &failing_since).await;
        assert_eq!((report.probed.outcome, report.probed.code), ("error", Some("storage_unavailable")));
        assert!(failing_since.lock().unwrap().is_some(), "the first failure's time is kept");
        let (value, report) = probe_backend(async { Ok(7_u64) }, Duration::from_millis(50), &failing_since).await;
        assert_eq!((value, report.probed.outcome, report.probed.failing_seconds), (Some(7), "ok", None));
        assert!(failing_since.lock().unwrap().is_none(), "a success clears the failure");
    }

    /// The readiness body's schema (served at `/openapi.json`) is the body served: parts named
    /// by role and `pg_dist_node` id, their probe's fields shared ([`ProbeReport`]).
    #[test]
    fn the_readiness_schema_describes_parts_without_addresses() {
        use utoipa::PartialSchema;
        // The property names of a schema (its own and those of its `allOf` parts) and the
        // schemas it refers to.
        fn fields(schema: &serde_json::Value) -> (Vec<String>, Vec<String>) {
            let parts = schema["allOf"].as_array().cloned().unwrap_or_else(|| vec![schema.clone()]);
            let mut names = Vec::new();
            let mut references = Vec::new();
            for part in &parts {
                if let Some(properties) = part["properties"].as_object() {
                    names.extend(properties.keys().cloned());
                }
                if let Some(reference) = part["$ref"].as_str() {
                    references.push(reference.rsplit('/').next().unwrap_or_default().to_owned());
                }
            }
            (names, references)
        }
        let backend = fields(&serde_json::to_value(BackendReport::schema()).unwrap());
        let worker = fields(&serde_json::to_value(WorkerReport::schema()).unwrap());
        assert!(backend.0.contains(&"role".to_owned()) && backend.1 == ["ProbeReport"], "{backend:?}");
        assert!(worker.0.contains(&"node_id".to_owned()) && worker.1 == ["ProbeReport"], "{worker:?}");
        for named in ["server", "address", "host", "port"] {
            assert!(!backend.0.iter().chain(&worker.0).any(|field| field == named), "{named}: {backend:?} {worker:?}");
        }
        let probe = fields(&serde_json::to_value(ProbeReport::schema()).unwrap()).0;
        for field in ["outcome", "code", "elapsed_ms", "failing_seconds"] {
            assert!(probe.contains(&field.to_owned()), "{field} missing: {probe:?}");
        }
    }

    /// Issue 59: the unauthenticated `/readyz` named the database's and each Citus worker's
    /// `host:port`. It names the parts by role and by their `pg_dist_node` identity instead (the
    /// log, the operator's, has the addresses).
    #[test]
    fn the_database_report_names_no_host_or_port() {
        use crate::postgres::health::{DatabaseHealth, PartHealth, PartOutcome, WorkerIdentity};
        let part = |address: &str, worker, outcome| PartHealth {
            address: address.to_owned(),
            worker,
            outcome,
            elapsed: Duration::from_millis(3),
            failing_for: None,
        };
        let health = DatabaseHealth {
            coordinator: part("coordinator.internal:5432", None, PartOutcome::Ok),
            citus: Some(true),
            schema_version: Some(9),
            acl_epoch: None,
            workers: Some(vec![
                part("worker-a.internal:5433", Some(WorkerIdentity { node_id: 2, group_id: 1 }), PartOutcome::Ok),
                part("10.1.2.3:5434", Some(WorkerIdentity { node_id: 7, group_id: 3 }), PartOutcome::Timeout),
            ]),
        };
        let body = serde_json::to_value(BackendReport::of_database(&health)).unwrap();
        let text = body.to_string();
        for named in ["internal", "10.1.2.3", "5432", "5433", "5434"] {
            assert!(!text.contains(named), "/readyz names {named}: {text}");
        }
        assert_eq!(body["role"], "coordinator", "{body}");
        let frozen = serde_json::json!({"node_id": 7, "group_id": 3, "outcome": "timeout", "code": "storage_timeout", "elapsed_ms": 3});
        assert_eq!(body["workers"][1], frozen, "{body}");
    }
}
