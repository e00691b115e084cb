//! Documents uploaded as files (issue 49): `content` (base64) with `content_type` in
//! `PUT /v1/admin/documents`, and `POST /v1/admin/files` (multipart/form-data, one file per
//! part). Each file's text and layout map come from [`crate::extract`], run on the blocking
//! pool under `server.extraction_timeout_ms`.
//!
//! Invariants: a batch is all or nothing — every file is extracted before anything is written,
//! and the first file that cannot be (too large, not what it claims, malformed, encrypted, ...)
//! fails the whole request with a 400 naming it and the reason; no file is larger than
//! `server.max_file_bytes`, no multipart request larger than `server.max_upload_bytes` (counted
//! as the parts stream in, before anything is decoded), and no text field longer than
//! [`MAX_FIELD_BYTES`]; the `groups` and `users` fields of a multipart request are checked as
//! they stream in (names of 1..=256 characters, at most `server.max_acl_names_per_document`),
//! and the copies of that list every file gets stay within `server.max_upload_bytes`
//! ([`FormAcl`]; issue 57: repeated fields cloned into 200 files aborted the server).

use std::sync::Arc;
use std::time::Duration;

use actix_multipart::Multipart;
use actix_web::{HttpResponse, web};
use base64::Engine as _;
use futures::StreamExt;
use utoipa::ToSchema;

use crate::domain::DocAcl;
use crate::extract::{ExtractLimits, Format, extract_off_thread};
use crate::retrieval::DocumentInput;

use super::AppState;
use super::admin::{UpsertOut, admit_documents, check_batch_size, check_count, check_names, upsert_inputs};
use super::auth::Admin;
use super::contract::admin::{DocumentInput as WireInput, FileContent};
use super::error::{ApiError, EngineUnavailable, ErrorBody, Forbidden, Unauthenticated};

/// Longest text field of a multipart upload (`doc_id`, `title`, `groups`, ...), in bytes.
pub const MAX_FIELD_BYTES: usize = 64 * 1024;

/// The extraction limits of these settings.
pub fn limits(settings: &crate::config::Settings) -> ExtractLimits {
    ExtractLimits {
        max_text_chars: crate::retrieval::MAX_TEXT_CHARS,
        max_unpacked_bytes: 4 * settings.server.max_file_bytes.max(16 * 1024 * 1024),
        time_limit: Duration::from_millis(settings.server.extraction_timeout_ms),
        ..ExtractLimits::default()
    }
}

fn file_too_large(file: &str, limit: usize) -> ApiError {
    let file: String = file.chars().take(256).collect();
    ApiError::bad_request(
        "file_too_large",
        format!("file {file:?} is larger than {limit} bytes (server.max_file_bytes)"),
    )
}

/// Extracts `bytes` (declared `content_type`) into `input`'s text and layout map; the title the
/// file gives itself (a Markdown file's front matter), if any.
async fn extract_into(
    state: &AppState,
    input: &mut DocumentInput,
    file: &str,
    bytes: bytes::Bytes,
    content_type: String,
) -> Result<Option<String>, ApiError> {
    let extracted = extract_off_thread(bytes, content_type, limits(&state.settings), &state.extraction_slots)
        .await
        .map_err(|error| ApiError::extraction(file, &error, state.settings.server.retry_after_seconds))?;
    input.text = extracted.text;
    input.layout = (!extracted.layout.is_empty()).then(|| Arc::new(extracted.layout));
    Ok(extracted.title)
}

/// The engine's inputs of a JSON batch: text as given, files decoded and extracted (one after
/// the other, so a batch holds one file's work at a time).
pub(super) async fn json_inputs(state: &AppState, documents: Vec<WireInput>) -> Result<Vec<DocumentInput>, ApiError> {
    let max_file = state.settings.server.max_file_bytes;
    let mut inputs = Vec::with_capacity(documents.len());
    for document in documents {
        let doc_id: String = document.doc_id.chars().take(256).collect();
        let (mut input, file) = document
            .into_parts()
            .map_err(|reason| ApiError::bad_request("invalid_document", format!("document {doc_id:?}: {reason}")))?;
        if let Some(FileContent { content, content_type }) = file {
            // Decoded size is at most 3/4 of the encoded one: refuse before decoding.
            if content.len() / 4 * 3 > max_file + 2 {
                return Err(file_too_large(&doc_id, max_file));
            }
            let bytes = base64::engine::general_purpose::STANDARD.decode(content.as_bytes()).map_err(|error| {
                let reason = error.to_string().to_lowercase();
                ApiError::bad_request("invalid_base64", format!("file {doc_id:?}: content is not base64: {reason}"))
            })?;
            if bytes.len() > max_file {
                return Err(file_too_large(&doc_id, max_file));
            }
            extract_into(state, &mut input, &doc_id, bytes.into(), content_type).await?;
        }
        inputs.push(input);
    }
    Ok(inputs)
}

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

/// A multipart field read whole, at most `limit` bytes (and within the request's budget).
async fn read_field(
    field: &mut actix_multipart::Field,
    limit: usize,
    budget: &mut usize,
    too_large: impl Fn() -> ApiError,
) -> Result<Vec<u8>, ApiError> {
    let mut bytes = Vec::new();
    while let Some(piece) = field.next().await {
        let piece = piece.map_err(multipart_error)?;
        if piece.len() > *budget {
            return Err(ApiError::payload_too_large());
        }
        *budget -= piece.len();
        if bytes.len() + piece.len() > limit {
            return Err(too_large());
        }
        bytes.extend_from_slice(&piece);
    }
    Ok(bytes)
}

fn multipart_error(error: actix_multipart::MultipartError) -> ApiError {
    ApiError::bad_request("invalid_multipart", error.to_string().to_lowercase().chars().take(200).collect::<String>())
}

/// The access list of a multipart request, given once for all its files and bounded as its
/// fields stream in: each name is checked on arrival, the names are counted against
/// `server.max_acl_names_per_document`, and the list's memory times the files it is copied
/// into may not pass `server.max_upload_bytes` (one request may not grow to more than the
/// largest request spelled out).
#[derive(Default)]
struct FormAcl {
    acl: DocAcl,
    /// Bytes the list holds in memory (names and their headers).
    bytes: usize,
}

impl FormAcl {
    /// Adds the comma-separated names of a `groups` (or `users`) field; 400 `invalid_acl_name`
    /// or `acl_too_large` at once.
    fn add(&mut self, groups: bool, value: &str, limit: usize) -> Result<(), ApiError> {
        let names: Vec<String> =
            value.split(',').map(str::trim).filter(|name| !name.is_empty()).map(str::to_owned).collect();
        check_names(&names)?;
        let count = self.acl.groups.len() + self.acl.users.len() + names.len();
        check_count(count, limit, "the access list of the request's files")?;
        self.bytes += names.iter().map(|name| name.len() + std::mem::size_of::<String>()).sum::<usize>();
        let list = if groups { &mut self.acl.groups } else { &mut self.acl.users };
        list.extend(names);
        Ok(())
    }

    /// 400 `acl_too_large` when `files` copies of the list would hold more than `max_bytes`.
    fn check_copies(&self, files: usize, max_bytes: usize) -> Result<(), ApiError> {
        if self.bytes.saturating_mul(files) > max_bytes {
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
    state.ensure_writable()?;
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
    let mut multipart = Multipart::new(request.headers(), payload);
    let settings = &state.settings.server;
    let mut budget = settings.max_upload_bytes;
    let max_acl_names = state.settings.server.max_acl_names_per_document;
    let mut acl = FormAcl::default();
    let mut pending = Pending::default();
    // (input, file name, bytes, content type): extracted once the whole request is read.
    let mut files: Vec<(DocumentInput, String, bytes::Bytes, String)> = Vec::new();
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
            let max_file = settings.max_file_bytes;
            let bytes = read_field(&mut field, max_file, &mut budget, || file_too_large(&file_name, max_file)).await?;
            if files.len() >= settings.max_batch_documents {
                return Err(ApiError::bad_request(
                    "batch_too_large",
                    format!("at most {} documents per request", settings.max_batch_documents),
                ));
            }
            let Pending { doc_id, title, version } = std::mem::take(&mut pending);
            let input = DocumentInput {
                doc_id: doc_id.unwrap_or_else(|| file_name.clone()),
                // Empty until extracted when none is given: the file's own, else its name.
                title: title.unwrap_or_default(),
                text: String::new(),
                acl: DocAcl::default(),
                version,
                layout: None,
            };
            files.push((input, file_name, bytes.into(), content_type));
            acl.check_copies(files.len(), settings.max_upload_bytes)?;
            continue;
        }
        let too_long = || {
            ApiError::bad_request("invalid_multipart", format!("field {name:?} is longer than {MAX_FIELD_BYTES} bytes"))
        };
        let bytes = read_field(&mut field, MAX_FIELD_BYTES, &mut budget, too_long).await?;
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
                acl.add(name == "groups", &value, max_acl_names)?;
                acl.check_copies(files.len(), settings.max_upload_bytes)?;
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
    check_batch_size(&state, files.len())?;
    let _permit = admit_documents(&state, &principal.tenant)?;
    let mut inputs = Vec::with_capacity(files.len());
    for (mut input, file_name, bytes, content_type) in files {
        input.acl = acl.acl.clone();
        let own_title = extract_into(&state, &mut input, &file_name, bytes, content_type).await?;
        if input.title.is_empty() {
            input.title = own_title.unwrap_or(file_name);
        }
        inputs.push(input);
    }
    let outcome = upsert_inputs(&state, &principal, inputs).await?;
    Ok(super::json(&outcome))
}
