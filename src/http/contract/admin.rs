//! Wire types of the admin API's document upsert: mirrors of [`crate::retrieval::DocumentInput`]
//! and [`crate::domain::DocAcl`] that carry the OpenAPI schema (with the constraints the engine's
//! batch validation enforces), read from the request body and converted into the layer types with
//! `From`.
//!
//! Invariant: each type deserializes exactly as the type it mirrors (same fields, defaults,
//! `deny_unknown_fields`, integer reading); the conversions destructure their source and build
//! their target without `..`.

use serde::Deserialize;
use utoipa::ToSchema;

use crate::domain::schema::optional_integer;
use crate::retrieval::{MAX_DOC_ID_CHARS, MAX_TEXT_CHARS};

use super::schema;

/// Who may read a document inside its tenant.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DocAcl {
    /// Groups whose members may read the document.
    #[serde(default)]
    #[schema(schema_with = groups_schema)]
    pub groups: Vec<String>,
    /// Users who may read the document.
    #[serde(default)]
    #[schema(schema_with = users_schema)]
    pub users: Vec<String>,
}

fn groups_schema() -> utoipa::openapi::RefOr<utoipa::openapi::Schema> {
    schema::acl_names(false, "groups whose members may read the document (names 1..=256 characters, not blank)")
}

fn users_schema() -> utoipa::openapi::RefOr<utoipa::openapi::Schema> {
    schema::acl_names(false, "users who may read the document (names 1..=256 characters, not blank)")
}

impl From<DocAcl> for crate::domain::DocAcl {
    fn from(acl: DocAcl) -> Self {
        let DocAcl { groups, users } = acl;
        Self { groups, users }
    }
}

/// A document as an admin submits it (the tenant comes from the caller, never from here). The
/// schema declares what `validate_batch` enforces, except that a `doc_id` appears once a batch.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DocumentInput {
    /// Tenant-scoped id: 1..=256 characters, not blank, no control characters.
    #[schema(schema_with = doc_id_schema)]
    pub doc_id: String,
    /// Display title, at most 1000 characters.
    #[serde(default)]
    #[schema(max_length = 1000)]
    pub title: String,
    /// Full text: 1..=2,000,000 characters, not blank.
    #[schema(schema_with = text_schema)]
    pub text: String,
    /// Readers.
    #[serde(default)]
    pub acl: DocAcl,
    /// Explicit version (at least 1); must be greater than the stored one. Default: stored + 1
    /// (or 1).
    #[serde(default, deserialize_with = "optional_integer")]
    #[schema(schema_with = version_schema)]
    pub version: Option<u64>,
}

fn doc_id_schema() -> utoipa::openapi::Object {
    schema::identifier(MAX_DOC_ID_CHARS, "tenant-scoped id: 1..=256 characters, not blank, no control characters")
}

fn text_schema() -> utoipa::openapi::Object {
    schema::not_blank(MAX_TEXT_CHARS, "full text: 1..=2000000 characters, not blank")
}

fn version_schema() -> utoipa::openapi::Object {
    schema::unsigned(1, true, "explicit version, greater than the stored one; default: stored + 1 (or 1)")
}

impl From<DocumentInput> for crate::retrieval::DocumentInput {
    fn from(input: DocumentInput) -> Self {
        let DocumentInput { doc_id, title, text, acl, version } = input;
        Self { doc_id, title, text, acl: acl.into(), version }
    }
}
