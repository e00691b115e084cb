//! Replica bootstrap (role `replica` only, a service credential no tenant admin holds): the
//! manifest of the primary's latest snapshot of its current lineage, and each of its files,
//! streamed. A replica verifies every file's size and sha256 against the manifest before it
//! uses any of them (see `crate::replication::follower`).
//!
//! When no snapshot of the current lineage is recent enough for a replica to follow the change
//! feed from it (its epoch is below the log's compaction floor), one is written first.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use actix_web::{HttpResponse, web};
use bytes::Bytes;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;
use utoipa::ToSchema;

use crate::domain::Role;
use crate::replication::leases::Renewal;
use crate::replication::primary::ReplicationLog;
use crate::replication::wire::{Frame, Hello, encode_frame};
use crate::snapshot::{MANIFEST, Manifest};

use super::auth::Authenticated;
use super::error::{ApiError, ErrorBody, Forbidden, JsonBodyRejected, Unauthenticated};
use super::{AppState, json};

/// Bytes read per streamed piece.
const PIECE: usize = 256 * 1024;

/// Admits a configured replica (role `replica` survives verification only for a subject in
/// `auth.replica_subjects`), naming it in the log and in `warrant_replica_requests_total`.
pub(super) fn require_replica(principal: &crate::domain::Principal, endpoint: &'static str) -> Result<(), ApiError> {
    if !principal.has_role(Role::Replica) {
        return Err(ApiError::forbidden("replica role required"));
    }
    // The label's values are bounded by the configuration: no other subject keeps the role.
    metrics::counter!("warrant_replica_requests_total", "replica" => principal.user.clone(), "endpoint" => endpoint)
        .increment(1);
    tracing::info!(replica = %principal.user, endpoint, "replica request");
    Ok(())
}

/// The newest usable snapshot, written now when there is none.
async fn usable_snapshot(state: &AppState) -> Result<(PathBuf, Manifest), ApiError> {
    let _one_at_a_time = state.replica_snapshot.lock().await;
    let engine = state.engine()?;
    let acl = engine.acl();
    let root = PathBuf::from(&state.settings.snapshots.dir);
    let lineage = acl.lineage().to_owned();
    // A snapshot the replica can stream on from: not older than the change log or what the
    // replication log keeps.
    let floor = acl.log_floor().max(state.replication.as_ref().map_or(0, |log| log.floor()));
    let found = {
        let root = root.clone();
        let lineage = lineage.clone();
        web::block(move || crate::snapshot::latest(&root, &lineage, floor)).await.map_err(|_| unavailable())?
    };
    if let Some(found) = found {
        return Ok(found);
    }
    let protected = state.settings.snapshots.restore.clone();
    let protected = (!protected.is_empty()).then(|| Path::new(&protected).to_owned());
    crate::snapshot::create_protecting(engine, &root, state.settings.snapshots.retain, protected.as_deref()).await?;
    web::block(move || crate::snapshot::latest(&root, &lineage, floor))
        .await
        .map_err(|_| unavailable())?
        .ok_or_else(unavailable)
}

fn unavailable() -> ApiError {
    ApiError::unavailable("snapshot_unavailable", "no snapshot could be provided right now; retry later")
}

/// The manifest of the primary's latest snapshot (its files are fetched one by one).
#[utoipa::path(get, path = "/v1/replica/snapshot",
    responses((status = 200, description = "snapshot manifest (format in snapshot/mod.rs)", body = Object),
              Unauthenticated, Forbidden,
              (status = 409, description = "`backend_unsupported`: the server runs on the postgres backend, which replicates and backs up through the database", body = ErrorBody),
              (status = 500, description = "the snapshot could not be written (details are only logged)", body = ErrorBody),
              (status = 503, description = "`snapshot_unavailable`: retry later", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn manifest(
    state: web::Data<AppState>,
    Authenticated(principal): Authenticated,
) -> Result<HttpResponse, ApiError> {
    require_replica(&principal, "snapshot_manifest")?;
    let (_, manifest) = usable_snapshot(&state).await?;
    Ok(json(&manifest))
}

/// One file of a snapshot, streamed (`application/octet-stream`); only files its manifest lists.
#[utoipa::path(get, path = "/v1/replica/snapshot/{snapshot_id}/{file}",
    params(("snapshot_id" = String, Path, description = "snapshot id"), ("file" = String, Path, description = "file name")),
    responses((status = 200, description = "file content", content_type = "application/octet-stream"),
              (status = 400, description = "`invalid_path`: not UTF-8 after percent-decoding", body = ErrorBody),
              Unauthenticated, Forbidden,
              (status = 404, description = "`snapshot_not_found`: no such snapshot or file", body = ErrorBody),
              (status = 503, description = "`snapshot_unavailable`: retry later", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn file(
    state: web::Data<AppState>,
    Authenticated(principal): Authenticated,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    require_replica(&principal, "snapshot_file")?;
    let (snapshot_id, name) = path.into_inner();
    let missing = || ApiError::not_found("snapshot_not_found", "no such snapshot file");
    if !crate::snapshot::is_safe_name(&snapshot_id) || !crate::snapshot::is_safe_name(&name) || name == MANIFEST {
        return Err(missing());
    }
    let directory = Path::new(&state.settings.snapshots.dir).join(&snapshot_id);
    let listed = {
        let directory = directory.clone();
        let name = name.clone();
        web::block(move || {
            crate::snapshot::read_manifest(&directory).ok().is_some_and(|manifest| {
                manifest.snapshot_id == snapshot_id && manifest.files.iter().any(|file| file.name == name)
            })
        })
        .await
        .map_err(|_| unavailable())?
    };
    if !listed {
        return Err(missing());
    }
    let handle = tokio::fs::File::open(directory.join(&name)).await.map_err(|_| missing())?;
    let stream = futures::stream::unfold(Some(handle), |handle| async move {
        let mut handle = handle?;
        let mut buffer = vec![0u8; PIECE];
        match handle.read(&mut buffer).await {
            Ok(0) => None,
            Ok(read) => {
                buffer.truncate(read);
                Some((Ok::<_, std::io::Error>(web::Bytes::from(buffer)), Some(handle)))
            }
            Err(error) => Some((Err(error), None)),
        }
    });
    Ok(HttpResponse::Ok().content_type("application/octet-stream").streaming(stream.boxed_local()))
}

/// Query of `GET /v1/replica/stream`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    /// Stream the changes after this epoch (the replica's).
    #[serde(default, deserialize_with = "crate::domain::schema::query_integer")]
    #[param(schema_with = since_schema)]
    pub since: u64,
    /// The replica's lineage: epochs are compared only within one.
    #[param(example = "0f4c9d2e")]
    pub lineage: String,
}

fn since_schema() -> utoipa::openapi::Object {
    super::contract::schema::unsigned(0, false, "stream the changes with an epoch greater than this")
}

/// The replication log of this primary, or 409 `replication_off` (no replica is configured in
/// `auth.replica_subjects`, or this server is not an embedded primary).
fn replication(state: &AppState) -> Result<&Arc<ReplicationLog>, ApiError> {
    state.replication.as_ref().ok_or_else(|| {
        ApiError::conflict(
            "replication_off",
            "this server streams no changes (not an embedded primary, or auth.replica_subjects is empty)",
        )
    })
}

/// Closes its session's stream when the response is dropped (the lease runs on to expiry).
struct OpenSession {
    log: Arc<ReplicationLog>,
    session: String,
}

impl Drop for OpenSession {
    fn drop(&mut self) {
        self.log.leases().close(&self.session);
    }
}

/// One replica's stream in flight.
struct Streaming {
    open: OpenSession,
    pending: VecDeque<Bytes>,
    /// The last epoch sent.
    cursor: u64,
    updates: tokio::sync::watch::Receiver<u64>,
    hints: tokio::sync::broadcast::Receiver<Bytes>,
    replica: String,
}

impl Streaming {
    /// The next frame to send: what is pending, else the next change, else (caught up) a content
    /// hint, a heartbeat after a silence, or the end when the replica fell behind the log.
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            if let Some(frame) = self.pending.pop_front() {
                return Some(frame);
            }
            match self.open.log.next_after(self.cursor) {
                Err(_) => {
                    tracing::warn!(replica = %self.replica, cursor = self.cursor, "replica fell behind the replication log; it must re-bootstrap");
                    return None;
                }
                Ok(Some((epoch, frame))) => {
                    self.cursor = epoch;
                    return Some(frame);
                }
                Ok(None) => {}
            }
            tokio::select! {
                biased;
                changed = self.updates.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                }
                hint = self.hints.recv() => match hint {
                    Ok(frame) => return Some(frame),
                    // Missed hints are only hints.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                },
                () = tokio::time::sleep(self.open.log.heartbeat()) => {
                    self.pending.push_back(encode_frame(&Frame::Heartbeat { epoch: self.cursor }));
                }
            }
        }
    }
}

/// The replication stream: every change committed after `since`, in order, with the content of
/// the document versions it adds, then each one as it commits, and a heartbeat after each
/// `replica.heartbeat_ms` of silence (frames in `crate::replication::wire`). It ends when the replica
/// falls behind what the primary keeps (`replica.stream_buffer_mb`): the next request then
/// answers 410 and the replica re-bootstraps from a snapshot (as after a 409 `lineage_mismatch`).
#[utoipa::path(get, path = "/v1/replica/stream", params(StreamQuery),
    responses((status = 200, description = "frames until the connection closes (length-prefixed bincode, see `crate::replication::wire`)", content_type = "application/octet-stream"),
              (status = 400, description = "`invalid_query`", body = ErrorBody),
              Unauthenticated, Forbidden,
              (status = 409, description = "`lineage_mismatch` (another lineage, or an epoch ahead of the primary's: re-bootstrap from a snapshot), `backend_unsupported` or `replication_off`", body = ErrorBody),
              (status = 410, description = "`changes_compacted`: older than what the primary keeps; re-bootstrap from a snapshot", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn stream(
    state: web::Data<AppState>,
    Authenticated(principal): Authenticated,
    query: web::Query<StreamQuery>,
) -> Result<HttpResponse, ApiError> {
    require_replica(&principal, "stream")?;
    let acl = state.engine()?.acl();
    let log = Arc::clone(replication(&state)?);
    let StreamQuery { since, lineage } = query.into_inner();
    if lineage != acl.lineage() || since > acl.epoch() {
        return Err(ApiError::conflict(
            "lineage_mismatch",
            "the replica's state is not of this primary's history; re-bootstrap from a snapshot",
        ));
    }
    log.next_after(since).map_err(|behind| {
        ApiError::gone(
            "changes_compacted",
            format!("only changes after epoch {} are kept; re-bootstrap from a snapshot", behind.floor),
        )
    })?;
    let session = log.leases().open(&principal.user, since, Instant::now());
    tracing::info!(replica = %principal.user, %session, since, "replication stream opened");
    let hello = encode_frame(&Frame::Hello(Hello {
        session: session.clone(),
        lineage: acl.lineage().to_owned(),
        since,
        lease_ms: log.leases().lease().as_millis() as u64,
        sync: log.sync().as_str().to_owned(),
    }));
    let replica = principal.user;
    // One frame at a time: a reader that stalls holds at most one frame beyond the log.
    let pending: VecDeque<Bytes> = VecDeque::from([hello]);
    let state = Streaming {
        updates: log.subscribe(),
        hints: log.content_hints(),
        open: OpenSession { log: Arc::clone(&log), session },
        pending,
        cursor: since,
        replica,
    };
    let body = futures::stream::unfold(state, |mut state| async move {
        let frame = state.next().await?;
        metrics::counter!("warrant_replication_bytes_total", "replica" => state.replica.clone())
            .increment(frame.len() as u64);
        Some((Ok::<_, std::io::Error>(frame), state))
    });
    Ok(HttpResponse::Ok()
        .content_type("application/octet-stream")
        .insert_header((actix_web::http::header::CACHE_CONTROL, "no-cache"))
        .insert_header((actix_web::http::header::CONTENT_ENCODING, "identity"))
        .streaming(body.boxed_local()))
}

/// Body of `POST /v1/replica/lease`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LeaseBody {
    /// The session of the replica's open stream (its `hello` frame).
    #[schema(example = "5f0c3a9e0d8b4c1f9a7e2b6d4c3a1f0e")]
    pub session: String,
    /// The last epoch the replica applied.
    #[serde(deserialize_with = "crate::domain::schema::integer")]
    #[schema(schema_with = applied_schema)]
    pub applied_epoch: u64,
}

fn applied_schema() -> utoipa::openapi::Object {
    super::contract::schema::unsigned(0, false, "the last epoch the replica applied")
}

/// Reply of `POST /v1/replica/lease`.
#[derive(Debug, Serialize, ToSchema)]
pub struct LeaseOut {
    /// Whether the lease was renewed (for `lease_ms` from when the request arrived).
    pub granted: bool,
    /// The lease each renewal grants.
    pub lease_ms: u64,
    /// A tracked epoch the replica must apply before it is leased again (when not granted).
    pub required_epoch: u64,
}

/// Acknowledges what a replica applied and renews its lease: granted only to a session whose
/// stream is open and that applied every tracked change. A replica counts its lease from when it
/// sent this request, less `replica.lease_margin_ms`.
#[utoipa::path(post, path = "/v1/replica/lease", request_body = LeaseBody,
    responses((status = 200, description = "acknowledged; `granted` says whether the lease was renewed", body = LeaseOut),
              JsonBodyRejected, Unauthenticated, Forbidden,
              (status = 404, description = "`unknown_session`: no such stream session (the primary restarted, or the lease ran out after the stream closed)", body = ErrorBody),
              (status = 409, description = "`backend_unsupported` or `replication_off`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn lease(
    state: web::Data<AppState>,
    Authenticated(principal): Authenticated,
    body: web::Json<LeaseBody>,
) -> Result<HttpResponse, ApiError> {
    require_replica(&principal, "lease")?;
    state.engine()?;
    let log = replication(&state)?;
    let lease_ms = log.leases().lease().as_millis() as u64;
    match log.leases().renew(&principal.user, &body.session, body.applied_epoch, Instant::now()) {
        Renewal::Granted(_) => Ok(json(&LeaseOut { granted: true, lease_ms, required_epoch: 0 })),
        Renewal::Refused { required } => Ok(json(&LeaseOut { granted: false, lease_ms, required_epoch: required })),
        Renewal::Unknown => Err(ApiError::not_found("unknown_session", "no such replication session")),
    }
}
