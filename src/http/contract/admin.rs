//! Wire types of the admin API's document upsert: mirrors of [`crate::retrieval::DocumentInput`]
//! and [`crate::domain::DocAcl`] that carry the OpenAPI schema (with the constraints the engine's
//! batch validation enforces), read from the request body and converted into the layer types with
//! `From`.
//!
//! Invariant: each type deserializes exactly as the type it mirrors (same fields, defaults,
//! `deny_unknown_fields`, integer reading), except that a document may carry a file
//! (`content`, base64, with `content_type`) instead of `text`: [`DocumentInput::into_parts`]
//! hands the file to the HTTP layer, which extracts its text and layout map; the conversions
//! destructure their source and build their target without `..`.

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
    /// Full text: 1..=2,000,000 characters, not blank. Exactly one of `text` and `content`.
    #[serde(default)]
    #[schema(schema_with = text_schema)]
    pub text: Option<String>,
    /// Extension (issue 49): the document as a file, base64 (RFC 4648, standard alphabet,
    /// padded), at most `server.max_file_bytes` decoded; its text and layout map (pages,
    /// headings) are extracted. Exactly one of `text` and `content`; requires `content_type`.
    #[serde(default)]
    #[schema(schema_with = content_schema)]
    pub content: Option<String>,
    /// Extension (issue 49): media type of `content`: `application/pdf`,
    /// `application/vnd.openxmlformats-officedocument.wordprocessingml.document`, `text/html`,
    /// `text/markdown` or `text/plain` (text formats in UTF-8). The bytes must agree with it.
    #[serde(default)]
    #[schema(example = "application/pdf", max_length = 200)]
    pub content_type: Option<String>,
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

fn content_schema() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .content_encoding("base64")
        .min_length(Some(1))
        .description(Some("the document as a file, base64; exactly one of text and content"))
        .build()
}

fn version_schema() -> utoipa::openapi::Object {
    schema::unsigned(1, true, "explicit version, greater than the stored one; default: stored + 1 (or 1)")
}

/// A file to extract: its base64 content and declared media type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileContent {
    /// Base64 of the bytes.
    pub content: String,
    /// Declared media type.
    pub content_type: String,
}

impl DocumentInput {
    /// The engine's input (its `text` empty when the document is a file) and the file to
    /// extract into it; the reason when the document gives neither or both, or `content`
    /// without `content_type`.
    pub fn into_parts(self) -> Result<(crate::retrieval::DocumentInput, Option<FileContent>), String> {
        let DocumentInput { doc_id, title, text, content, content_type, acl, version } = self;
        let (text, file) = match (text, content, content_type) {
            (Some(text), None, None) => (text, None),
            (None, Some(content), Some(content_type)) => (String::new(), Some(FileContent { content, content_type })),
            (None, Some(_), None) => return Err("content requires content_type".to_owned()),
            (Some(_), None, Some(_)) => return Err("content_type goes with content, not text".to_owned()),
            (Some(_), Some(_), _) => return Err("give either text or content, not both".to_owned()),
            (None, None, _) => return Err("give text, or content with content_type".to_owned()),
        };
        let input = crate::retrieval::DocumentInput { doc_id, title, text, acl: acl.into(), version, layout: None };
        Ok((input, file))
    }
}
