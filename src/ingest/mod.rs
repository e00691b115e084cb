//! `warrant ingest PATH`: an operator's folder of documents kept in step with a destination: a
//! running server, through its admin API as an HTTP client (`POST /v1/admin/files`,
//! `DELETE /v1/admin/documents/{doc_id}`; [`run`]), or a stopped server's data directory, opened
//! in this process: the backend and its write path ([`crate::documents::Documents`]) and nothing
//! else (no answer pipeline, no HTTP, no token; [`run_into_data_dir`]). Both run the same loop
//! over the folder, and every file passes the very checks, extraction and limits of an upload:
//! the server's handler makes the same call to the same service, with the folder's access list
//! given as the same fields ([`crate::documents::AclFields`]).
//!
//! Each file whose extension names a format ([`Format::from_extension`]) and whose id matches the
//! selection (`--include`/`--exclude` globs) is one document whose id is its path relative to
//! the folder (`/`-separated); its access list is the nearest sidecar [`ACL_SIDECAR`] at or
//! above its folder (a sidecar covers every folder below it until another overrides it), else
//! the flags. The state file [`STATE_FILE`] in the folder names the destination and
//! maps each document id to a fingerprint (SHA-256 of the file's bytes and its access list) of
//! what that destination acknowledged.
//!
//! Invariants: a file is uploaded only when its fingerprint differs from the acknowledged one, so
//! a second run over an unchanged folder uploads nothing; a state file written for another
//! destination counts for nothing (everything is uploaded again, not skipped as if it were
//! there); the state file is rewritten (temporary file, fsync, rename) after every acknowledged
//! upload or delete, so a crash loses nothing already acknowledged and a rerun resumes where it
//! stopped; a file the server refuses (400) is reported with the server's reason and the run goes
//! on (in a data directory, a file the write path refuses: the same code and message); a 503
//! (`overloaded`) is sent again after its `Retry-After`, up to [`OVERLOADED_TRIES`] times; an
//! error that no file can get past (no server, a refused token, other 5xx, a 503 that lasts, a
//! data directory in use or failing) ends the run with what was acknowledged saved; `--sync`
//! deletes only documents inside the selection, so a narrower run never deletes what it did not
//! look at; a symbolic link in the folder is never followed and never silent: each is reported
//! in the summary's `unread` with its reason, and a file is read only when the file opened is
//! the one listed (not a link or another file swapped in since), else reported so, neither
//! uploaded nor deleted (`folder.rs`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::config::Settings;
use crate::documents::{AclFields, Change, Content, Documents, DocumentsError, File, Upload};
use crate::domain::DocAcl;
use crate::extract::Format;

mod folder;
mod state;

use folder::walk;
use state::State;

/// The state file, in the ingested folder.
pub const STATE_FILE: &str = ".warrant-ingest.json";
/// A folder's access list sidecar (`{"groups": [...], "users": [...]}`): it covers the folder
/// and every folder below it down to the next sidecar.
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
    /// An `--include` or `--exclude` pattern is not a glob.
    #[error("pattern {pattern:?}: {reason}")]
    Pattern {
        /// The pattern.
        pattern: String,
        /// Why it is refused.
        reason: String,
    },
    /// The data directory cannot be ingested into (in use by a running server, a replica's, or
    /// it does not open).
    #[error("data directory {path}: {reason}")]
    DataDir {
        /// The directory.
        path: String,
        /// Why.
        reason: String,
    },
}

/// Result alias of this module.
pub type IngestResult<T> = Result<T, IngestError>;

fn io(path: &Path, error: impl std::fmt::Display) -> IngestError {
    IngestError::Io { path: path.display().to_string(), reason: error.to_string() }
}

/// What to ingest.
#[derive(Clone, Debug, Default)]
pub struct IngestOptions {
    /// The folder.
    pub root: PathBuf,
    /// Access list of files that no sidecar covers (none in their folder or any folder above).
    pub acl: DocAcl,
    /// Delete the documents whose files are gone (inside the selection).
    pub sync: bool,
    /// Draw a progress bar on the terminal.
    pub progress: bool,
    /// Globs a document id must match, one at least (`*.pdf`, `policies/**`); empty: every file.
    /// `*` also matches `/`, so `*.pdf` is every PDF under the folder.
    pub include: Vec<String>,
    /// Globs that leave a document id out.
    pub exclude: Vec<String>,
}

/// Where the documents go: a running server's admin API.
#[derive(Clone, Debug)]
pub struct Destination {
    /// Base URL of the server (`http://127.0.0.1:8080`).
    pub server: String,
    /// An admin token of the tenant.
    pub token: String,
    /// What the state file records as the destination (the server and tenant, or the data
    /// directory and tenant): acknowledgements of another destination are not trusted.
    pub key: String,
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
    /// Files of a known format outside the selection (`--include`/`--exclude`).
    pub excluded: usize,
    /// Entries of the folder listed but not read, and why: (document id, reason). A symbolic
    /// link (never followed), or a file replaced or removed since the folder was listed.
    pub unread: Vec<(String, String)>,
    /// The destination the state file was written for, when it was another one (its
    /// acknowledgements were set aside: every file was uploaded again).
    pub other_destination: Option<String>,
    /// Wall-clock seconds.
    pub seconds: f64,
}

fn fingerprint(bytes: &[u8], acl: &DocAcl) -> String {
    let mut hasher = Sha256::new();
    hasher.update(bytes);
    hasher.update(serde_json::to_vec(acl).unwrap_or_default());
    hex::encode(hasher.finalize())
}

const BOUNDARY: &str = "warrant-ingest-3b9d2c7e";

/// Lifetime of the admin token a run mints (`--tenant` with a server): a day, since a large
/// folder through MiniLM can take hours and a token expiring mid-run would end it.
pub const TOKEN_TTL_SECONDS: u64 = 24 * 3600;

/// Sends of one file a run makes while the server answers 503 (then the run ends).
const OVERLOADED_TRIES: usize = 5;

/// The longest `Retry-After` waited for.
const MAX_RETRY_AFTER_SECONDS: u64 = 30;

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

/// The selection of `--include` and `--exclude`: a document id is in it when it matches an
/// include (or none is given) and no exclude.
struct Selection {
    include: Option<globset::GlobSet>,
    exclude: globset::GlobSet,
}

impl Selection {
    fn new(include: &[String], exclude: &[String]) -> IngestResult<Self> {
        let set = |patterns: &[String]| -> IngestResult<globset::GlobSet> {
            let mut builder = globset::GlobSetBuilder::new();
            for pattern in patterns {
                let glob = globset::Glob::new(pattern).map_err(|error| IngestError::Pattern {
                    pattern: pattern.clone(),
                    reason: error.kind().to_string(),
                })?;
                builder.add(glob);
            }
            builder
                .build()
                .map_err(|error| IngestError::Pattern { pattern: patterns.join(" "), reason: error.to_string() })
        };
        let included = if include.is_empty() { None } else { Some(set(include)?) };
        Ok(Self { include: included, exclude: set(exclude)? })
    }

    fn contains(&self, doc_id: &str) -> bool {
        self.include.as_ref().is_none_or(|set| set.is_match(doc_id)) && !self.exclude.is_match(doc_id)
    }
}

/// What a destination answered to one upload.
enum Answer {
    /// Acknowledged: written and settled.
    Acknowledged,
    /// Refused for what the file is, with the destination's code and message: reported, and the
    /// run goes on.
    Refused(String),
    /// Busy: sent again after `seconds`, or, after the last try, the run ends with `error`.
    Busy {
        /// Seconds to wait.
        seconds: u64,
        /// The error ending the run.
        error: IngestError,
    },
}

/// One file to send.
struct Sent<'a> {
    doc_id: &'a str,
    file_name: String,
    format: Format,
    bytes: &'a [u8],
    acl: &'a DocAcl,
}

/// Where a run's uploads and deletes go.
enum Target<'a> {
    /// A running server's admin API.
    Server {
        /// HTTP client.
        client: reqwest::Client,
        /// Base URL, without a trailing `/`.
        base: &'a str,
        /// An admin token of the tenant.
        token: &'a str,
    },
    /// A data directory's write path, in this process.
    Documents {
        /// The write path.
        documents: &'a Documents,
        /// The tenant written into.
        tenant: &'a str,
        /// The data directory, as errors show it.
        path: &'a str,
    },
}

impl Target<'_> {
    /// Sends one file, as one document of its own.
    async fn upload(&self, file: &Sent<'_>) -> IngestResult<Answer> {
        match self {
            Self::Server { client, base, token } => {
                let body = form(file.doc_id, &file.file_name, file.format, file.bytes, file.acl);
                let response = client
                    .post(format!("{base}/v1/admin/files"))
                    .bearer_auth(token)
                    .header("content-type", format!("multipart/form-data; boundary={BOUNDARY}"))
                    .body(body)
                    .send()
                    .await
                    .map_err(|error| IngestError::Server(error.to_string()))?;
                let status = response.status();
                if status.is_success() {
                    return Ok(Answer::Acknowledged);
                }
                // 503 `overloaded` (the tenant's admission or the extraction slots are full): the
                // server asked to come back after Retry-After.
                if status.as_u16() == 503 {
                    let seconds = response
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|value| value.to_str().ok())
                        .and_then(|value| value.trim().parse::<u64>().ok())
                        .unwrap_or(1);
                    return Ok(Answer::Busy { seconds, error: IngestError::Server(refusal(response).await) });
                }
                if status.as_u16() == 400 || status.as_u16() == 413 {
                    return Ok(Answer::Refused(refusal(response).await));
                }
                Err(IngestError::Server(refusal(response).await))
            }
            Self::Documents { documents, tenant, path } => {
                let written = match AclFields::of(file.acl, documents.limits()) {
                    Ok(fields) => {
                        let content = Content::File(File {
                            name: file.file_name.clone(),
                            bytes: bytes::Bytes::copy_from_slice(file.bytes),
                            content_type: file.format.content_type().to_owned(),
                        });
                        let upload = Upload {
                            doc_id: file.doc_id.to_owned(),
                            title: None,
                            content,
                            acl: fields.acl().clone(),
                            version: None,
                        };
                        documents.upsert(tenant, vec![upload]).await.map(|_| ())
                    }
                    Err(error) => Err(error),
                };
                let failed = |error: &DocumentsError| IngestError::DataDir {
                    path: (*path).to_owned(),
                    reason: format!("{}: {error}", error.code()),
                };
                match written {
                    Ok(()) => Ok(Answer::Acknowledged),
                    Err(error @ DocumentsError::Overloaded { retry_after_seconds }) => {
                        Ok(Answer::Busy { seconds: retry_after_seconds, error: failed(&error) })
                    }
                    Err(error) if error.is_refusal() => Ok(Answer::Refused(format!("{}: {error}", error.code()))),
                    Err(error) => Err(failed(&error)),
                }
            }
        }
    }

    /// Deletes the document `doc_id`; one already gone is what was asked.
    async fn delete(&self, doc_id: &str) -> IngestResult<()> {
        match self {
            Self::Server { client, base, token } => {
                let encoded = percent_encoding::utf8_percent_encode(doc_id, percent_encoding::NON_ALPHANUMERIC);
                let response = client
                    .delete(format!("{base}/v1/admin/documents/{encoded}"))
                    .bearer_auth(token)
                    .send()
                    .await
                    .map_err(|error| IngestError::Server(error.to_string()))?;
                // 404: already gone on the server, which is what was asked.
                if !(response.status().is_success() || response.status().as_u16() == 404) {
                    return Err(IngestError::Server(refusal(response).await));
                }
                Ok(())
            }
            Self::Documents { documents, tenant, path } => {
                match documents.change(tenant, Change::Delete { doc_id: doc_id.to_owned() }).await {
                    Ok(_) => Ok(()),
                    Err(DocumentsError::Retrieval(crate::retrieval::RetrievalError::Acl(
                        crate::acl::AclError::UnknownDocument { .. },
                    ))) => Ok(()),
                    Err(error) => Err(IngestError::DataDir {
                        path: (*path).to_owned(),
                        reason: format!("{}: {error}", error.code()),
                    }),
                }
            }
        }
    }
}

/// Uploads the new and changed files of `options.root` to `destination`, and with `sync` deletes
/// the documents of the selection whose files are gone; see the module documentation.
pub async fn run(options: &IngestOptions, destination: &Destination) -> IngestResult<IngestSummary> {
    let client = crate::outbound::client(std::time::Duration::from_secs(10)).map_err(IngestError::Server)?;
    let base = destination.server.trim_end_matches('/');
    let target = Target::Server { client, base, token: &destination.token };
    run_on(options, &destination.key, &target).await
}

/// The run over the folder, whatever the destination: see the module documentation.
async fn run_on(options: &IngestOptions, key: &str, target: &Target<'_>) -> IngestResult<IngestSummary> {
    let started = Instant::now();
    let root = options.root.as_path();
    let selection = Selection::new(&options.include, &options.exclude)?;
    let (mut state, other_destination) = State::load(root, key)?;
    let listing = walk(root, &options.acl)?;
    let files = listing.files;
    let bar = if options.progress {
        indicatif::ProgressBar::new(files.len() as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} files {per_sec} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut summary = IngestSummary { other_destination, unread: listing.unread, ..IngestSummary::default() };
    let mut present = std::collections::BTreeSet::new();
    for listed in &files {
        let (doc_id, path) = (&listed.id, &listed.path);
        bar.inc(1);
        let Some(format) = Format::from_extension(doc_id) else {
            summary.skipped += 1;
            continue;
        };
        if !selection.contains(doc_id) {
            summary.excluded += 1;
            continue;
        }
        present.insert(doc_id.clone());
        // Not the file listed (a link or another file now): reported, neither uploaded nor
        // deleted.
        let bytes = match folder::read(listed)? {
            Ok(bytes) => bytes,
            Err(reason) => {
                summary.unread.push((doc_id.clone(), reason));
                continue;
            }
        };
        let acl = listed.acl.as_ref();
        let print = fingerprint(&bytes, acl);
        if state.files.get(doc_id) == Some(&print) {
            summary.unchanged += 1;
            continue;
        }
        bar.set_message(doc_id.clone());
        let file_name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        let file = Sent { doc_id, file_name, format, bytes: &bytes, acl };
        let mut tries = 0;
        let answer = loop {
            tries += 1;
            match target.upload(&file).await? {
                Answer::Busy { error, .. } if tries >= OVERLOADED_TRIES => return Err(error),
                Answer::Busy { seconds, .. } => {
                    tokio::time::sleep(std::time::Duration::from_secs(seconds.min(MAX_RETRY_AFTER_SECONDS))).await;
                }
                answer => break answer,
            }
        };
        match answer {
            Answer::Acknowledged => {
                state.files.insert(doc_id.clone(), print);
                state.save(root)?;
                summary.ingested += 1;
            }
            Answer::Refused(reason) => summary.failed.push((doc_id.clone(), reason)),
            Answer::Busy { error, .. } => return Err(error),
        }
    }
    if options.sync {
        let gone: Vec<String> = state
            .files
            .keys()
            .filter(|doc_id| selection.contains(doc_id) && !present.contains(*doc_id))
            .cloned()
            .collect();
        for doc_id in gone {
            target.delete(&doc_id).await?;
            state.files.remove(&doc_id);
            state.save(root)?;
            summary.deleted += 1;
        }
    }
    // The state names its destination even when nothing was acknowledged this time.
    state.save(root)?;
    summary.unread.sort();
    bar.finish_and_clear();
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}

/// The settings [`run_into_data_dir`] opens `data_dir` with: the configured engine (embedder,
/// chunking, index, limits) on the embedded backend in `data_dir`; a replica's configuration is
/// refused (a replica takes its documents from its primary).
fn data_dir_settings(mut settings: Settings, data_dir: &Path) -> IngestResult<Settings> {
    if !settings.replica.follow.is_empty() {
        return Err(IngestError::DataDir {
            path: data_dir.display().to_string(),
            reason: "the configuration is a replica's (replica.follow): a replica takes its documents from its primary; ingest into the primary".into(),
        });
    }
    settings.storage.backend = crate::config::StorageBackend::Embedded;
    settings.storage.dir = data_dir.to_string_lossy().into_owned();
    Ok(settings)
}

/// Ingests into a stopped server's data directory (a new one is created): opens it in this
/// process with `settings`' engine and embedder (a store made by another embedder is refused)
/// and builds its write path, runs the same loop as [`run`] into `tenant` through it, then
/// closes the engine gracefully (the next start loads its indexes). Nothing else is built: no
/// answer pipeline or generator, no HTTP server, no token, no checkpointer. A data directory in
/// use by a running server is refused (the store's file lock): ingest through the server instead.
pub async fn run_into_data_dir(
    options: &IngestOptions,
    settings: Settings,
    data_dir: &Path,
    tenant: &str,
) -> IngestResult<IngestSummary> {
    let shown = data_dir.display().to_string();
    let failed = |reason: String| IngestError::DataDir { path: shown.clone(), reason };
    let settings = data_dir_settings(settings, data_dir)?;
    let embedder = crate::providers::embedder(&settings).await.map_err(|error| failed(error.to_string()))?;
    let backend = crate::app::start_backend(&settings, embedder).await.map_err(|error| match error {
        crate::app::StartError::Retrieval(crate::retrieval::RetrievalError::Storage(
            crate::storage::StorageError::InUse { .. },
        )) => failed(
            "in use by another process (a running server?): stop it, or ingest through its admin API with --server"
                .into(),
        ),
        other => failed(other.to_string()),
    })?;
    let documents = crate::app::documents(&settings, &backend, None);
    let canonical = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let key = format!("data directory {} tenant {tenant}", canonical.display());
    let target = Target::Documents { documents: &documents, tenant, path: &shown };
    let outcome = run_on(options, &key, &target).await;
    if let Some(engine) = &backend.engine {
        engine.close().await;
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_directory_is_opened_on_the_embedded_backend_and_never_as_a_replica() {
        let mut configured = Settings::defaults();
        configured.storage.backend = crate::config::StorageBackend::Postgres;
        configured.verifier.sentence_vectors = !configured.verifier.sentence_vectors;
        let opened = data_dir_settings(configured.clone(), Path::new("/tmp/data")).expect("a primary's");
        assert_eq!(opened.storage.backend, crate::config::StorageBackend::Embedded);
        assert_eq!(opened.storage.dir, "/tmp/data");
        assert_eq!(opened.verifier.sentence_vectors, configured.verifier.sentence_vectors, "ingestion as configured");
        configured.replica.follow = "http://127.0.0.1:9".into();
        let refused = data_dir_settings(configured, Path::new("/tmp/data")).expect_err("a replica's");
        assert!(matches!(&refused, IngestError::DataDir { reason, .. } if reason.contains("replica")), "{refused}");
    }
}
