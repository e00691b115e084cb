//! Admin API (role `admin`, acting only inside the token's own tenant): document upsert and
//! delete, ACL grant/revoke, the ACL change feed; and snapshots (role `operator`). The write
//! handlers only decode a request and make one call to [`crate::documents::Documents`], which
//! checks, admits, writes and settles it: each change is durable (committed to the data
//! directory), published (new ACL snapshot) and settled with the replicas before the response
//! is sent; each tenant's writes pass its own admission bound.

use actix_web::{HttpResponse, web};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::{AllOfBuilder, AnyOfBuilder, ArrayBuilder, ObjectBuilder, Type};
use utoipa::openapi::{Ref, RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use crate::acl::AclChange;
use crate::documents::{Change, Content, File, Upload, WriteLimits};
use crate::domain::Role;
use crate::domain::schema::query_integer;
use crate::retrieval::UpsertOutcome;

use super::auth::{Admin, Authenticated};
use super::contract::admin::{DocumentInput, FileContent};
use super::contract::schema;
use super::error::{
    ApiError, EngineUnavailable, ErrorBody, Forbidden, JsonBodyRejected, Unauthenticated, WriteUnavailable,
};
use super::{AppState, json};

/// Body of `PUT /v1/admin/documents`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpsertBody {
    /// Documents to upsert, all or nothing: 1..=`server.max_batch_documents` (500 by default),
    /// each `doc_id` at most once.
    #[schema(min_items = 1)]
    pub documents: Vec<DocumentInput>,
}

/// Body of revoke (and, with [`GrantBody`]'s constraints, of grant).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AclBody {
    /// Document.
    #[schema(example = "travel-policy")]
    pub doc_id: String,
    /// Groups.
    #[serde(default)]
    pub groups: Option<Vec<String>>,
    /// Users.
    #[serde(default)]
    pub users: Option<Vec<String>>,
}

/// An object whose `list` property is a non-empty array of strings.
fn non_empty_list(list: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .property(list, ArrayBuilder::new().items(ObjectBuilder::new().schema_type(Type::String)).min_items(Some(1)))
        .required(list)
}

/// The schema of the grant body: an [`AclBody`] whose names are 1..=256 characters and not
/// blank, with at least one non-empty list. Schema only: the handler reads an [`AclBody`] and
/// answers 400 `empty_grant` or `invalid_acl_name` otherwise.
pub struct GrantBody;

impl PartialSchema for GrantBody {
    fn schema() -> RefOr<Schema> {
        let names = |nullable| schema::acl_names(nullable, "names to grant: each 1..=256 characters, not blank");
        AllOfBuilder::new()
            .item(Ref::from_schema_name(AclBody::name()))
            .item(ObjectBuilder::new().property("groups", names(true)).property("users", names(true)))
            .item(AnyOfBuilder::new().item(non_empty_list("groups")).item(non_empty_list("users")))
            .description(Some("grant: at least one of `groups` and `users` is a non-empty list"))
            .into()
    }
}

impl ToSchema for GrantBody {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((AclBody::name().into_owned(), AclBody::schema()));
        AclBody::schemas(schemas);
    }
}

/// The schema of the revoke body: an [`AclBody`] whose names are 1..=256 characters and not
/// blank, and either no list at all (revoke all access) or at least one non-empty list. Schema
/// only: the handler reads an [`AclBody`] and answers 400 `empty_revoke` or `invalid_acl_name`.
pub struct RevokeBody;

impl PartialSchema for RevokeBody {
    fn schema() -> RefOr<Schema> {
        let names = |nullable| schema::acl_names(nullable, "names to revoke: each 1..=256 characters, not blank");
        let neither = ObjectBuilder::new()
            .property("groups", ObjectBuilder::new().schema_type(Type::Null))
            .property("users", ObjectBuilder::new().schema_type(Type::Null));
        AllOfBuilder::new()
            .item(Ref::from_schema_name(AclBody::name()))
            .item(ObjectBuilder::new().property("groups", names(true)).property("users", names(true)))
            .item(AnyOfBuilder::new().item(neither).item(non_empty_list("groups")).item(non_empty_list("users")))
            .description(Some(
                "revoke: neither list (all access is revoked), or at least one of `groups` and `users` non-empty",
            ))
            .into()
    }
}

impl ToSchema for RevokeBody {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((AclBody::name().into_owned(), AclBody::schema()));
        AclBody::schemas(schemas);
    }
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

impl From<UpsertOutcome> for UpsertOut {
    fn from(outcome: UpsertOutcome) -> Self {
        let UpsertOutcome { acl_epoch, documents, chunks } = outcome;
        Self { acl_epoch, documents, chunks }
    }
}

/// Query of the change feed.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ChangesQuery {
    /// Return changes with epoch greater than this.
    #[serde(default, deserialize_with = "query_integer")]
    #[param(schema_with = since_schema)]
    pub since: u64,
}

fn since_schema() -> utoipa::openapi::Object {
    schema::unsigned(0, false, "return changes with an epoch greater than this (default 0)")
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

/// Applies one change to a document of the caller's tenant: checked, admitted, durable,
/// published and settled ([`crate::documents::Documents::change`]), then acknowledged.
async fn acknowledged(state: &AppState, tenant: &str, change: Change) -> Result<HttpResponse, ApiError> {
    let acl_epoch = state.documents.change(tenant, change).await?;
    Ok(json(&EpochOut { acl_epoch }))
}

/// Upserts documents into the caller's tenant. 400 codes: `empty_batch`, `batch_too_large`,
/// `duplicate_document` (a `doc_id` repeated within the batch: JSON Schema cannot state that
/// rule, so a schema-valid batch can still get it), `invalid_document`, `acl_too_large`; for a
/// document given as a file (`content`), `invalid_base64`, `file_too_large`,
/// `unsupported_content_type`, `content_type_mismatch`, `invalid_utf8`, `encrypted_document`,
/// `malformed_document`, `document_too_large`, `no_text`, `extraction_timeout` (each naming
/// the document). A batch is all or nothing.
#[utoipa::path(put, path = "/v1/admin/documents", request_body = UpsertBody,
    responses((status = 200, description = "the batch is readable", body = UpsertOut),
              JsonBodyRejected, Unauthenticated, Forbidden,
              (status = 409, description = "`stale_version`, or `read_only_replica`", body = ErrorBody),
              EngineUnavailable),
    security(("bearer" = [])))]
pub async fn upsert_documents(
    state: web::Data<AppState>,
    Admin(principal): Admin,
    body: web::Json<UpsertBody>,
) -> Result<HttpResponse, ApiError> {
    // A replica refuses before the body's files are decoded (the service checks it again first).
    state.documents.ensure_writable()?;
    let limits = state.documents.limits();
    let uploads = body.into_inner().documents.into_iter().map(|document| upload(document, limits));
    let uploads = uploads.collect::<Result<Vec<_>, ApiError>>()?;
    Ok(json(&UpsertOut::from(state.documents.upsert(&principal.tenant, uploads).await?)))
}

/// One document of a JSON batch as an upload: its text, or its file decoded from base64 (named
/// by its document id in errors). 400 `invalid_document` or `invalid_base64`; a file whose
/// encoding alone says it passes `server.max_file_bytes` is refused before it is decoded (the
/// service's rule, applied to the least the bytes can be).
fn upload(document: DocumentInput, limits: &WriteLimits) -> Result<Upload, ApiError> {
    let doc_id: String = document.doc_id.chars().take(256).collect();
    let (input, file) = document
        .into_parts()
        .map_err(|reason| ApiError::bad_request("invalid_document", format!("document {doc_id:?}: {reason}")))?;
    let crate::retrieval::DocumentInput { doc_id: id, title, text, acl, version, layout: _ } = input;
    let content = match file {
        None => Content::Text(text),
        Some(FileContent { content, content_type }) => {
            limits.check_file(&doc_id, (content.len() / 4 * 3).saturating_sub(2))?;
            let bytes = base64::engine::general_purpose::STANDARD.decode(content.as_bytes()).map_err(|error| {
                let reason = error.to_string().to_lowercase();
                ApiError::bad_request("invalid_base64", format!("file {doc_id:?}: content is not base64: {reason}"))
            })?;
            Content::File(File { name: doc_id, bytes: bytes.into(), content_type })
        }
    };
    Ok(Upload { doc_id: id, title: Some(title), content, acl, version })
}

/// Deletes a document of the caller's tenant.
#[utoipa::path(delete, path = "/v1/admin/documents/{doc_id}", params(("doc_id" = String, Path, description = "document id", example = "vacation-policy")),
    responses((status = 200, description = "deleted", body = EpochOut),
              (status = 400, description = "`invalid_path`: the id is not UTF-8 after percent-decoding", body = ErrorBody),
              Unauthenticated, Forbidden,
              (status = 404, description = "`document_not_found` in the caller's tenant", body = ErrorBody),
              (status = 409, description = "`read_only_replica`", body = ErrorBody), WriteUnavailable),
    security(("bearer" = [])))]
pub async fn delete_document(
    state: web::Data<AppState>,
    Admin(principal): Admin,
    request: actix_web::HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let change = Change::Delete { doc_id: super::doc_id_of(&request)? };
    acknowledged(&state, &principal.tenant, change).await
}

/// Revokes access: the listed groups and users, or all access when neither list is given. Lists
/// that are given but empty are refused (400 `empty_revoke`): they would revoke nothing. 400
/// codes: `empty_revoke`, `invalid_acl_name`, `acl_too_large`.
#[utoipa::path(post, path = "/v1/admin/acl/revoke", request_body = RevokeBody,
    responses((status = 200, description = "revoked (a no-op keeps the epoch)", body = EpochOut), JsonBodyRejected, Unauthenticated, Forbidden,
              (status = 404, description = "`document_not_found` in the caller's tenant", body = ErrorBody),
              (status = 409, description = "`read_only_replica`", body = ErrorBody), WriteUnavailable),
    security(("bearer" = [])))]
pub async fn revoke(
    state: web::Data<AppState>,
    Admin(principal): Admin,
    body: web::Json<AclBody>,
) -> Result<HttpResponse, ApiError> {
    let AclBody { doc_id, groups, users } = body.into_inner();
    acknowledged(&state, &principal.tenant, Change::Revoke { doc_id, groups, users }).await
}

/// Grants access. 400 codes: `empty_grant`, `invalid_acl_name`, `acl_too_large` (more names
/// than `server.max_acl_names_per_change`, or a document's list past
/// `server.max_acl_names_per_document`).
#[utoipa::path(post, path = "/v1/admin/acl/grant", request_body = GrantBody,
    responses((status = 200, description = "granted (a no-op keeps the epoch)", body = EpochOut), JsonBodyRejected, Unauthenticated, Forbidden,
              (status = 404, description = "`document_not_found` in the caller's tenant", body = ErrorBody),
              (status = 409, description = "`read_only_replica`", body = ErrorBody), WriteUnavailable),
    security(("bearer" = [])))]
pub async fn grant(
    state: web::Data<AppState>,
    Admin(principal): Admin,
    body: web::Json<AclBody>,
) -> Result<HttpResponse, ApiError> {
    let AclBody { doc_id, groups, users } = body.into_inner();
    let change = Change::Grant { doc_id, groups: groups.unwrap_or_default(), users: users.unwrap_or_default() };
    acknowledged(&state, &principal.tenant, change).await
}

/// The ACL change feed: an admin sees its own tenant's changes; a service token with role
/// `replica` sees every tenant's (replicas apply the whole log in order).
#[utoipa::path(get, path = "/v1/admin/acl/changes", params(ChangesQuery),
    responses((status = 200, description = "changes after `since`", body = ChangesOut),
              (status = 400, description = "`invalid_query`: `since` is not an unsigned integer, or an unknown parameter", body = ErrorBody),
              Unauthenticated, Forbidden,
              (status = 409, description = "`backend_unsupported`: the server runs on the postgres backend, which replicates and backs up through the database", body = ErrorBody),
              (status = 410, description = "`changes_compacted`: changes after `since` were compacted into a checkpoint; re-bootstrap from a snapshot", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn changes(
    state: web::Data<AppState>,
    Authenticated(principal): Authenticated,
    query: web::Query<ChangesQuery>,
) -> Result<HttpResponse, ApiError> {
    let all_tenants = principal.has_role(Role::Replica);
    if all_tenants {
        super::replica::require_replica(&principal, "changes")?;
    } else if !principal.has_role(Role::Admin) {
        return Err(ApiError::forbidden("admin or replica role required"));
    }
    let acl = state.engine()?.acl();
    let changes = acl
        .changes_since(query.since)?
        .into_iter()
        .filter(|change| all_tenants || change.mutation.tenant() == principal.tenant)
        .collect();
    Ok(json(&ChangesOut { changes, acl_epoch: acl.epoch(), lineage: acl.lineage().to_owned() }))
}

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
    responses((status = 200, description = "written", body = SnapshotOut), Unauthenticated, Forbidden,
              (status = 409, description = "`backend_unsupported`: the server runs on the postgres backend, which replicates and backs up through the database", body = ErrorBody),
              (status = 500, description = "the snapshot could not be written (details are only logged)", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn create_snapshot(
    state: web::Data<AppState>,
    Authenticated(principal): Authenticated,
) -> Result<HttpResponse, ApiError> {
    if !principal.has_role(Role::Operator) {
        return Err(ApiError::forbidden("operator role required"));
    }
    let settings = &state.settings.snapshots;
    let protected = (!settings.restore.is_empty()).then(|| std::path::Path::new(&settings.restore));
    let created = crate::snapshot::create_protecting(
        state.engine()?,
        std::path::Path::new(&settings.dir),
        settings.retain,
        protected,
    )
    .await?;
    Ok(json(&SnapshotOut { snapshot_id: created.snapshot_id, acl_epoch: created.acl_epoch }))
}
