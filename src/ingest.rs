//! `warrant ingest PATH`: an operator's folder of documents kept in step with a running server
//! through its admin API (`POST /v1/admin/files`, `DELETE /v1/admin/documents/{doc_id}`).
//!
//! Each file whose extension names a format ([`Format::from_extension`]) is one document whose
//! id is its path relative to the folder (`/`-separated); its access list is the folder's
//! sidecar [`ACL_SIDECAR`] when there is one, else the flags. The state file [`STATE_FILE`] in
//! the folder maps each document id to a fingerprint (SHA-256 of the file's bytes and its access
//! list) of what the server acknowledged.
//!
//! Invariants: a file is uploaded only when its fingerprint differs from the acknowledged one, so
//! a second run over an unchanged folder uploads nothing; the state file is rewritten (temporary
//! file, fsync, rename) after every acknowledged upload or delete, so a crash loses nothing
//! already acknowledged and a rerun resumes where it stopped; a file the server refuses (400) is
//! reported with the server's reason and the run goes on; an error that no file can get past
//! (no server, a refused token, 5xx) ends the run with what was acknowledged saved.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::domain::DocAcl;
use crate::extract::Format;

/// The state file, in the ingested folder.
pub const STATE_FILE: &str = ".warrant-ingest.json";
/// A folder's access list sidecar (`{"groups": [...], "users": [...]}`).
pub const ACL_SIDECAR: &str = ".warrant-acl.json";

/// Errors that end a run.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// A file or folder cannot be read or written.
    #[error("{path}: {reason}")]
    Io {
        /// The path.
        path: String,
        /// What failed.
        reason: String,
    },
    /// The server cannot be reached or refused the run (not one file).
    #[error("server: {0}")]
    Server(String),
}

/// Result alias of this module.
pub type IngestResult<T> = Result<T, IngestError>;

fn io(path: &Path, error: impl std::fmt::Display) -> IngestError {
    IngestError::Io { path: path.display().to_string(), reason: error.to_string() }
}

/// What to ingest, and where.
#[derive(Clone, Debug)]
pub struct IngestOptions {
    /// The folder.
    pub root: PathBuf,
    /// Base URL of the server (`http://127.0.0.1:8080`).
    pub server: String,
    /// An admin token of the tenant.
    pub token: String,
    /// Access list of files whose folder has no sidecar.
    pub acl: DocAcl,
    /// Delete the documents whose files are gone.
    pub sync: bool,
    /// Draw a progress bar on the terminal.
    pub progress: bool,
}

/// What a run did.
#[derive(Debug, Default, Serialize)]
pub struct IngestSummary {
    /// Files uploaded (new or changed).
    pub ingested: usize,
    /// Files whose acknowledged fingerprint matched.
    pub unchanged: usize,
    /// Documents deleted because their files are gone (`--sync`).
    pub deleted: usize,
    /// Files of no known format.
    pub skipped: usize,
    /// Files the server refused: (document id, reason).
    pub failed: Vec<(String, String)>,
    /// Wall-clock seconds.
    pub seconds: f64,
}

/// The acknowledged fingerprints, by document id.
#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    files: BTreeMap<String, String>,
}

impl State {
    fn load(root: &Path) -> IngestResult<Self> {
        let path = root.join(STATE_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|error| io(&path, error)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(error) => Err(io(&path, error)),
        }
    }

    /// Replaces the state file atomically (temporary file, fsync, rename).
    fn save(&self, root: &Path) -> IngestResult<()> {
        let path = root.join(STATE_FILE);
        let temporary = root.join(format!("{STATE_FILE}.tmp"));
        let bytes = serde_json::to_vec_pretty(self).map_err(|error| io(&path, error))?;
        let mut file = std::fs::File::create(&temporary).map_err(|error| io(&temporary, error))?;
        file.write_all(&bytes).and_then(|()| file.sync_all()).map_err(|error| io(&temporary, error))?;
        std::fs::rename(&temporary, &path).map_err(|error| io(&path, error))
    }
}

/// Every file under `root` (dot files and folders excluded), sorted, with its id.
fn walk(root: &Path) -> IngestResult<Vec<(String, PathBuf)>> {
    let mut found = Vec::new();
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).map_err(|error| io(&folder, error))? {
            let entry = entry.map_err(|error| io(&folder, error))?;
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let kind = entry.file_type().map_err(|error| io(&path, error))?;
            if kind.is_dir() {
                folders.push(path);
            } else if kind.is_file() {
                let relative = path.strip_prefix(root).map_err(|error| io(&path, error))?;
                let id: Vec<String> =
                    relative.components().map(|part| part.as_os_str().to_string_lossy().into_owned()).collect();
                found.push((id.join("/"), path));
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The access list of files in `folder`: its sidecar, else `default`.
fn folder_acl(folder: &Path, default: &DocAcl) -> IngestResult<DocAcl> {
    let path = folder.join(ACL_SIDECAR);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|error| io(&path, error)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(default.clone()),
        Err(error) => Err(io(&path, error)),
    }
}

fn fingerprint(bytes: &[u8], acl: &DocAcl) -> String {
    let mut hasher = Sha256::new();
    hasher.update(bytes);
    hasher.update(serde_json::to_vec(acl).unwrap_or_default());
    hex::encode(hasher.finalize())
}

const BOUNDARY: &str = "warrant-ingest-3b9d2c7e";

/// The multipart body of one file upload.
fn form(doc_id: &str, file_name: &str, format: Format, bytes: &[u8], acl: &DocAcl) -> Vec<u8> {
    let mut body = Vec::with_capacity(bytes.len() + 1024);
    let mut field = |name: &str, value: &str| {
        body.extend_from_slice(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").as_bytes(),
        );
    };
    field("doc_id", doc_id);
    for group in &acl.groups {
        field("groups", group);
    }
    for user in &acl.users {
        field("users", user);
    }
    let quoted = file_name.replace(['"', '\r', '\n'], "_");
    body.extend_from_slice(
        format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{quoted}\"\r\nContent-Type: {}\r\n\r\n",
            format.content_type()
        )
        .as_bytes(),
    );
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
    body
}

/// The server's `{code, message}` of a refusal.
async fn refusal(response: reqwest::Response) -> String {
    let status = response.status().as_u16();
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    let code = body["code"].as_str().unwrap_or("error");
    let message = body["message"].as_str().unwrap_or("");
    format!("{status} {code}: {message}")
}

/// Uploads the new and changed files of `options.root`, and with `sync` deletes the documents
/// whose files are gone; see the module documentation.
pub async fn run(options: &IngestOptions) -> IngestResult<IngestSummary> {
    let started = Instant::now();
    let root = options.root.as_path();
    let mut state = State::load(root)?;
    let files = walk(root)?;
    let client = crate::outbound::client(std::time::Duration::from_secs(10)).map_err(IngestError::Server)?;
    let base = options.server.trim_end_matches('/');
    let bar = if options.progress {
        indicatif::ProgressBar::new(files.len() as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} files {per_sec} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut summary = IngestSummary::default();
    let mut present = std::collections::BTreeSet::new();
    for (doc_id, path) in &files {
        bar.inc(1);
        let Some(format) = Format::from_extension(doc_id) else {
            summary.skipped += 1;
            continue;
        };
        present.insert(doc_id.clone());
        let bytes = std::fs::read(path).map_err(|error| io(path, error))?;
        let acl = folder_acl(path.parent().unwrap_or(root), &options.acl)?;
        let print = fingerprint(&bytes, &acl);
        if state.files.get(doc_id) == Some(&print) {
            summary.unchanged += 1;
            continue;
        }
        bar.set_message(doc_id.clone());
        let file_name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        let response = client
            .post(format!("{base}/v1/admin/files"))
            .bearer_auth(&options.token)
            .header("content-type", format!("multipart/form-data; boundary={BOUNDARY}"))
            .body(form(doc_id, &file_name, format, &bytes, &acl))
            .send()
            .await
            .map_err(|error| IngestError::Server(error.to_string()))?;
        let status = response.status();
        if status.is_success() {
            state.files.insert(doc_id.clone(), print);
            state.save(root)?;
            summary.ingested += 1;
        } else if status.as_u16() == 400 || status.as_u16() == 413 {
            summary.failed.push((doc_id.clone(), refusal(response).await));
        } else {
            return Err(IngestError::Server(refusal(response).await));
        }
    }
    if options.sync {
        let gone: Vec<String> = state.files.keys().filter(|doc_id| !present.contains(*doc_id)).cloned().collect();
        for doc_id in gone {
            let encoded = percent_encoding::utf8_percent_encode(&doc_id, percent_encoding::NON_ALPHANUMERIC);
            let response = client
                .delete(format!("{base}/v1/admin/documents/{encoded}"))
                .bearer_auth(&options.token)
                .send()
                .await
                .map_err(|error| IngestError::Server(error.to_string()))?;
            // 404: already gone on the server, which is what was asked.
            if !(response.status().is_success() || response.status().as_u16() == 404) {
                return Err(IngestError::Server(refusal(response).await));
            }
            state.files.remove(&doc_id);
            state.save(root)?;
            summary.deleted += 1;
        }
    }
    bar.finish_and_clear();
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}
