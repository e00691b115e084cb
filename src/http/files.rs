//! Documents uploaded as files (issue 49): `content` (base64) with `content_type` in
//! `PUT /v1/admin/documents`, and `POST /v1/admin/files` (multipart/form-data, one file per
//! part). This file only decodes a multipart request into [`Upload`]s; the service
//! ([`crate::documents::Documents::upsert`]) checks them, extracts each file's text and layout
//! map on the blocking pool under `server.extraction_timeout_ms`, writes and settles the batch.
//!
//! Invariants: a batch is all or nothing — every file is extracted before anything is written,
//! and the first file that cannot be (too large, not what it claims, malformed, encrypted, ...)
//! fails the whole request with a 400 naming it and the reason; no multipart request is larger
//! than `server.max_upload_bytes` (counted as the parts stream in, before anything is decoded),
//! and no text field longer than [`MAX_FIELD_BYTES`]; as the request streams in, a file part is
//! refused the moment it passes `server.max_file_bytes` and the request the moment it has one
//! file more than `server.max_batch_documents` (the service's own checks, called early so a
//! request of many empty parts cannot grow without bound), the `groups` and `users` fields are
//! checked as they arrive ([`AclFields`]: names of 1..=256 characters, at most
//! `server.max_acl_names_per_document`), and the copies of that list every file gets stay within
//! `server.max_upload_bytes` (issue 57: repeated fields cloned into 200 files aborted the server).

use actix_multipart::Multipart;
use actix_web::{HttpResponse, web};
use futures::StreamExt;
use utoipa::ToSchema;

use crate::documents::{AclFields, AclList, Content, File, Upload, WriteLimits};
use crate::extract::Format;

use super::AppState;
use super::admin::UpsertOut;
use super::auth::Admin;
use super::error::{ApiError, EngineUnavailable, ErrorBody, Forbidden, Unauthenticated};

/// Longest text field of a multipart upload (`doc_id`, `title`, `groups`, ...), in bytes.
pub const MAX_FIELD_BYTES: usize = 64 * 1024;

/// Form of `POST /v1/admin/files` (multipart/form-data), for the OpenAPI document.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct FilesForm {
    /// Document id of the next `file` part (default: its file name). Repeat before each file.
    #[schema(example = "travel-policy")]
    pub doc_id: Option<String>,
    /// Title of the next `file` part (default: the `title` of a Markdown file's front matter,
    /// else its file name).
    pub title: Option<String>,
    /// Explicit version of the next `file` part.
    pub version: Option<u64>,
    /// Groups that may read every file of the request (comma-separated, or the field repeated).
    pub groups: Option<String>,
    /// Users who may read every file of the request (comma-separated, or the field repeated).
    pub users: Option<String>,
    /// One document per part, with a file name; its `Content-Type` (or, when absent or
    /// `application/octet-stream`, its file name's extension: .pdf, .docx, .html, .md, .txt)
    /// names the format.
    #[schema(format = Binary, content_media_type = "application/octet-stream")]
    pub file: Vec<Vec<u8>>,
}

/// What one document's parts said before its `file` part.
#[derive(Default)]
struct Pending {
    doc_id: Option<String>,
    title: Option<String>,
    version: Option<u64>,
}

/// A multipart field read whole within the request's budget, `check` refusing it once its length
/// passes its own limit.
async fn read_field(
    field: &mut actix_multipart::Field,
    budget: &mut usize,
    check: impl Fn(usize) -> Result<(), ApiError>,
) -> Result<Vec<u8>, ApiError> {
    let mut bytes = Vec::new();
    while let Some(piece) = field.next().await {
        let piece = piece.map_err(multipart_error)?;
        if piece.len() > *budget {
            return Err(ApiError::payload_too_large());
        }
        *budget -= piece.len();
        check(bytes.len() + piece.len())?;
        bytes.extend_from_slice(&piece);
    }
    Ok(bytes)
}

fn multipart_error(error: actix_multipart::MultipartError) -> ApiError {
    ApiError::bad_request("invalid_multipart", error.to_string().to_lowercase().chars().take(200).collect::<String>())
}

/// 400 `acl_too_large` when `files` copies of the request's access list would hold more than
/// `max_bytes` (one request may not grow to more than the largest request spelled out).
fn check_copies(acl: &AclFields, files: usize, max_bytes: usize) -> Result<(), ApiError> {
    if acl.bytes().saturating_mul(files) > max_bytes {
        return Err(ApiError::bad_request(
            "acl_too_large",
            format!(
                "the access list copied to each of {files} files holds more than {max_bytes} bytes \
                 (server.max_upload_bytes): send fewer files per request"
            ),
        ));
    }
    Ok(())
}

/// A file part read whole: what the parts before it said, its name, bytes and media type.
struct Part {
    pending: Pending,
    file_name: String,
    bytes: bytes::Bytes,
    content_type: String,
}

impl Part {
    /// The upload of this file with the request's access list.
    fn upload(self, acl: &AclFields) -> Upload {
        let Part { pending: Pending { doc_id, title, version }, file_name, bytes, content_type } = self;
        Upload {
            doc_id: doc_id.unwrap_or_else(|| file_name.clone()),
            // None given (or empty): the file's own, else its name.
            title: title.filter(|title| !title.is_empty()),
            content: Content::File(File { name: file_name, bytes, content_type }),
            acl: acl.acl().clone(),
            version,
        }
    }
}

/// Upserts documents uploaded as files into the caller's tenant, all or nothing: one document
/// per `file` part (multipart/form-data). 400 codes: those of `PUT /v1/admin/documents`, and
/// `invalid_multipart`, `file_too_large`, `unsupported_content_type`, `content_type_mismatch`,
/// `invalid_utf8`, `encrypted_document`, `malformed_document`, `document_too_large`,
/// `no_text`, `extraction_timeout` (each naming the file).
#[utoipa::path(post, path = "/v1/admin/files",
    request_body(content = FilesForm, content_type = "multipart/form-data"),
    responses((status = 200, description = "the batch is readable", body = UpsertOut),
              (status = 400, description = "a file or field is refused (named in the message); nothing changed", body = ErrorBody),
              Unauthenticated, Forbidden,
              (status = 409, description = "`stale_version`, or `read_only_replica`", body = ErrorBody),
              (status = 413, description = "`payload_too_large`: over `server.max_upload_bytes`", body = ErrorBody),
              (status = 415, description = "`unsupported_media_type`: not multipart/form-data", body = ErrorBody),
              EngineUnavailable),
    security(("bearer" = [])))]
pub async fn upload_files(
    state: web::Data<AppState>,
    Admin(principal): Admin,
    request: actix_web::HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    // A replica refuses before the upload is read (the service checks it again first).
    state.documents.ensure_writable()?;
    let is_form = request
        .headers()
        .get(actix_web::http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.trim_start().to_ascii_lowercase().starts_with("multipart/form-data"));
    if !is_form {
        return Err(ApiError::new(
            actix_web::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "content type must be multipart/form-data",
        ));
    }
    let limits = state.documents.limits();
    let max_upload = state.settings.server.max_upload_bytes;
    let parts = read_form(Multipart::new(request.headers(), payload), limits, max_upload).await?;
    let outcome = state.documents.upsert(&principal.tenant, parts).await?;
    Ok(super::json(&UpsertOut::from(outcome)))
}

/// The uploads of a multipart request, read as it streams in (see the module's invariants).
async fn read_form(mut multipart: Multipart, limits: &WriteLimits, max_upload: usize) -> Result<Vec<Upload>, ApiError> {
    let mut budget = max_upload;
    let mut acl = AclFields::default();
    let mut pending = Pending::default();
    let mut files: Vec<Part> = Vec::new();
    while let Some(field) = multipart.next().await {
        let mut field = field.map_err(multipart_error)?;
        let name = field.name().unwrap_or_default().to_owned();
        let file_name =
            field.content_disposition().and_then(|disposition| disposition.get_filename()).map(str::to_owned);
        if name == "file" {
            let file_name = file_name
                .filter(|name| !name.trim().is_empty())
                .ok_or_else(|| ApiError::bad_request("invalid_multipart", "a file part needs a file name"))?;
            let declared = field.content_type().map(|mime| mime.essence_str().to_owned());
            let content_type = match declared.as_deref() {
                None | Some("application/octet-stream") => Format::from_extension(&file_name)
                    .map(|format| format.content_type().to_owned())
                    .ok_or_else(|| {
                        ApiError::bad_request(
                            "unsupported_content_type",
                            format!("file {file_name:?}: no content type and no known extension"),
                        )
                    })?,
                Some(_) => field.content_type().map(ToString::to_string).unwrap_or_default(),
            };
            let check = |length| Ok(limits.check_file(&file_name, length)?);
            let bytes = read_field(&mut field, &mut budget, check).await?;
            limits.check_batch(files.len() + 1)?;
            let pending = std::mem::take(&mut pending);
            files.push(Part { pending, file_name, bytes: bytes.into(), content_type });
            check_copies(&acl, files.len(), max_upload)?;
            continue;
        }
        let check = |length| {
            if length > MAX_FIELD_BYTES {
                let message = format!("field {name:?} is longer than {MAX_FIELD_BYTES} bytes");
                return Err(ApiError::bad_request("invalid_multipart", message));
            }
            Ok(())
        };
        let bytes = read_field(&mut field, &mut budget, check).await?;
        let value = String::from_utf8(bytes)
            .map_err(|_| ApiError::bad_request("invalid_multipart", format!("field {name:?} is not utf-8")))?;
        match name.as_str() {
            "doc_id" => pending.doc_id = Some(value),
            "title" => pending.title = Some(value),
            "version" => {
                let version = value.trim().parse().map_err(|_| {
                    ApiError::bad_request("invalid_multipart", "field \"version\" is not a whole number")
                })?;
                pending.version = Some(version);
            }
            "groups" | "users" => {
                let list = if name == "groups" { AclList::Groups } else { AclList::Users };
                acl.add(list, &value, limits)?;
                check_copies(&acl, files.len(), max_upload)?;
            }
            other => {
                let other: String = other.chars().take(64).collect();
                return Err(ApiError::bad_request("invalid_multipart", format!("unknown field {other:?}")));
            }
        }
    }
    if pending.doc_id.is_some() || pending.title.is_some() || pending.version.is_some() {
        return Err(ApiError::bad_request("invalid_multipart", "doc_id, title or version after the last file part"));
    }
    Ok(files.into_iter().map(|part| part.upload(&acl)).collect())
}
