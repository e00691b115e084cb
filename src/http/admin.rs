//! Admin API (role `admin`, acting only inside the token's own tenant): document upsert and
//! delete, ACL grant/revoke, the ACL change feed; and snapshots (role `operator`). Each change is
//! durable (committed to the data directory) and published (new ACL snapshot) before the
//! response is sent; each tenant's writes pass its own admission bound.

use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::acl::{AclChange, AclMutation};
use crate::retrieval::DocumentInput;

use super::admission::WriteKind;
use super::auth::{Admin, Authenticated};
use super::error::ApiError;
use super::{AppState, json};

/// Body of `PUT /v1/admin/documents`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpsertBody {
    /// Documents to upsert (all or nothing).
    pub documents: Vec<DocumentInput>,
}

/// Body of grant and revoke.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AclBody {
    /// Document.
    pub doc_id: String,
    /// Groups.
    #[serde(default)]
    pub groups: Option<Vec<String>>,
    /// Users.
    #[serde(default)]
    pub users: Option<Vec<String>>,
}

/// `{"acl_epoch": n}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct EpochOut {
    /// Epoch after the change.
    pub acl_epoch: u64,
}

/// Result of an upsert.
#[derive(Debug, Serialize, ToSchema)]
pub struct UpsertOut {
    /// Epoch that made the batch readable.
    pub acl_epoch: u64,
    /// Documents written.
    pub documents: usize,
    /// Chunks written.
    pub chunks: usize,
}

/// Query of the change feed.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ChangesQuery {
    /// Return changes with epoch greater than this.
    #[serde(default)]
    pub since: u64,
}

/// The change feed.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChangesOut {
    /// Changes of this tenant with epoch > since, in order.
    #[schema(value_type = Vec<Object>)]
    pub changes: Vec<AclChange>,
    /// Current epoch.
    pub acl_epoch: u64,
    /// Lineage of the epochs: epochs are comparable only within one lineage.
    pub lineage: String,
}

/// A permit of the tenant's admin admission for `kind`, or 503 `overloaded`.
fn admit(state: &AppState, tenant: &str, kind: WriteKind) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
    state
        .admission
        .try_admit(tenant, kind)
        .ok_or_else(|| ApiError::overloaded(state.settings.server.retry_after_seconds))
}

/// Applies one ACL mutation: durable, then published, then acknowledged.
async fn publish(state: &AppState, mutation: AclMutation) -> Result<HttpResponse, ApiError> {
    let _permit = admit(state, mutation.tenant(), WriteKind::Acl)?;
    let acl_epoch = state.pipeline.engine().mutate(mutation).await?;
    Ok(json(&EpochOut { acl_epoch }))
}

/// Checks ACL names (1..=256 characters, not blank).
fn check_names(names: &[String]) -> Result<(), ApiError> {
    if names.iter().any(|name| name.trim().is_empty() || name.chars().count() > 256) {
        return Err(ApiError::bad_request("invalid_acl_name", "acl names must be 1..=256 characters"));
    }
    Ok(())
}

/// Upserts documents into the caller's tenant.
#[utoipa::path(put, path = "/v1/admin/documents", request_body = UpsertBody,
    responses((status = 200, body = UpsertOut), (status = 400, body = super::error::ErrorBody),
              (status = 401, body = super::error::ErrorBody), (status = 403, body = super::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn upsert_documents(
    state: web::Data<AppState>,
    Admin(principal): Admin,
    body: web::Json<UpsertBody>,
) -> Result<HttpResponse, ApiError> {
    state.ensure_writable()?;
    let documents = body.into_inner().documents;
    if documents.is_empty() {
        return Err(ApiError::bad_request("empty_batch", "documents must not be empty"));
    }
    let max = state.settings.server.max_batch_documents;
    if documents.len() > max {
        return Err(ApiError::bad_request("batch_too_large", format!("at most {max} documents per request")));
    }
    let _permit = admit(&state, &principal.tenant, WriteKind::Documents)?;
    let outcome = state.pipeline.engine().upsert(&principal.tenant, documents).await?;
    Ok(json(&UpsertOut { acl_epoch: outcome.acl_epoch, documents: outcome.documents, chunks: outcome.chunks }))
}

/// Deletes a document of the caller's tenant.
#[utoipa::path(delete, path = "/v1/admin/documents/{doc_id}", params(("doc_id" = String, Path, description = "document id")),
    responses((status = 200, body = EpochOut), (status = 404, body = super::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn delete_document(
    state: web::Data<AppState>,
    Admin(principal): Admin,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    state.ensure_writable()?;
    let mutation = AclMutation::Delete { tenant: principal.tenant, doc_id: path.into_inner() };
    publish(&state, mutation).await
}

/// Revokes access: the listed groups and users, or all access when neither list is given. Lists
/// that are given but empty are refused (400 `empty_revoke`): they would revoke nothing.
#[utoipa::path(post, path = "/v1/admin/acl/revoke", request_body = AclBody,
    responses((status = 200, body = EpochOut), (status = 404, body = super::error::ErrorBody)), security(("bearer" = [])))]
pub async fn revoke(
    state: web::Data<AppState>,
    Admin(principal): Admin,
    body: web::Json<AclBody>,
) -> Result<HttpResponse, ApiError> {
    state.ensure_writable()?;
    let body = body.into_inner();
    let given: Vec<&Vec<String>> = [&body.groups, &body.users].into_iter().flatten().collect();
    if !given.is_empty() && given.iter().all(|list| list.is_empty()) {
        return Err(ApiError::bad_request(
            "empty_revoke",
            "revoke lists are empty; name groups or users, or omit both lists to revoke all access",
        ));
    }
    for list in given {
        check_names(list)?;
    }
    let mutation =
        AclMutation::Revoke { tenant: principal.tenant, doc_id: body.doc_id, groups: body.groups, users: body.users };
    publish(&state, mutation).await
}

/// Grants access.
#[utoipa::path(post, path = "/v1/admin/acl/grant", request_body = AclBody,
    responses((status = 200, body = EpochOut), (status = 404, body = super::error::ErrorBody)), security(("bearer" = [])))]
pub async fn grant(
    state: web::Data<AppState>,
    Admin(principal): Admin,
    body: web::Json<AclBody>,
) -> Result<HttpResponse, ApiError> {
    state.ensure_writable()?;
    let body = body.into_inner();
    let groups = body.groups.unwrap_or_default();
    let users = body.users.unwrap_or_default();
    if groups.is_empty() && users.is_empty() {
        return Err(ApiError::bad_request("empty_grant", "grant needs groups or users"));
    }
    check_names(&groups)?;
    check_names(&users)?;
    let mutation = AclMutation::Grant { tenant: principal.tenant, doc_id: body.doc_id, groups, users };
    publish(&state, mutation).await
}

/// The ACL change feed: an admin sees its own tenant's changes; a service token with role
/// `replica` sees every tenant's (replicas apply the whole log in order).
#[utoipa::path(get, path = "/v1/admin/acl/changes", params(ChangesQuery),
    responses((status = 200, body = ChangesOut), (status = 403, body = super::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn changes(
    state: web::Data<AppState>,
    Authenticated(principal): Authenticated,
    query: web::Query<ChangesQuery>,
) -> Result<HttpResponse, ApiError> {
    let all_tenants = principal.has_role("replica");
    if !all_tenants && !principal.has_role("admin") {
        return Err(ApiError::forbidden("admin or replica role required"));
    }
    let acl = state.pipeline.engine().acl();
    let changes = acl
        .changes_since(query.since)?
        .into_iter()
        .filter(|change| all_tenants || change.mutation.tenant() == principal.tenant)
        .collect();
    Ok(json(&ChangesOut { changes, acl_epoch: acl.epoch(), lineage: acl.lineage().to_owned() }))
}

/// Role of operator credentials (snapshots): issued by whoever holds the signing key, never by a
/// tenant admin.
pub const OPERATOR_ROLE: &str = "operator";

/// `{"snapshot_id", "acl_epoch"}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SnapshotOut {
    /// Id of the written snapshot (its directory name under `snapshots.dir`).
    pub snapshot_id: String,
    /// ACL epoch it captured.
    pub acl_epoch: u64,
}

/// Writes a snapshot of the whole server state (all tenants) under `snapshots.dir`. An operator
/// action (role `operator`): a tenant admin may not copy other tenants' data. The snapshot the
/// server was restored from is never pruned.
#[utoipa::path(post, path = "/v1/admin/snapshots",
    responses((status = 200, body = SnapshotOut), (status = 403, body = super::error::ErrorBody),
              (status = 500, body = super::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn create_snapshot(
    state: web::Data<AppState>,
    Authenticated(principal): Authenticated,
) -> Result<HttpResponse, ApiError> {
    if !principal.has_role(OPERATOR_ROLE) {
        return Err(ApiError::forbidden("operator role required"));
    }
    let settings = &state.settings.snapshots;
    let protected = (!settings.restore.is_empty()).then(|| std::path::Path::new(&settings.restore));
    let created = crate::snapshot::create_protecting(
        state.pipeline.engine(),
        std::path::Path::new(&settings.dir),
        settings.retain,
        protected,
    )
    .await?;
    Ok(json(&SnapshotOut { snapshot_id: created.snapshot_id, acl_epoch: created.acl_epoch }))
}
