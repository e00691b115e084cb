//! Replica bootstrap (role `replica` only, a service credential no tenant admin holds): the
//! manifest of the primary's latest snapshot of its current lineage, and each of its files,
//! streamed. A replica verifies every file's size and sha256 against the manifest before it
//! uses any of them (see `crate::replica`).
//!
//! When no snapshot of the current lineage is recent enough for a replica to follow the change
//! feed from it (its epoch is below the log's compaction floor), one is written first.

use std::path::{Path, PathBuf};

use actix_web::{HttpResponse, web};
use futures::StreamExt;
use tokio::io::AsyncReadExt;

use crate::domain::Role;
use crate::snapshot::{MANIFEST, Manifest};

use super::auth::Authenticated;
use super::error::{ApiError, ErrorBody};
use super::openapi::{Forbidden, Unauthenticated};
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
    let floor = acl.log_floor();
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
    ApiError::new(
        actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
        "snapshot_unavailable",
        "no snapshot could be provided right now; retry later",
    )
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
