//! `warrant ingest PATH`: an operator's folder of documents kept in step with a server through
//! its admin API (`POST /v1/admin/files`, `DELETE /v1/admin/documents/{doc_id}`): a running
//! server's ([`run`]), or a stopped server's data directory ([`run_into_data_dir`]), opened in
//! this process behind a loopback server of its own so that every file passes the very checks,
//! extraction and limits an upload does.
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
//! on; a 503 (`overloaded`) is sent again after its `Retry-After`, up to [`OVERLOADED_TRIES`]
//! times; an error that no file can get past (no server, a refused token, other 5xx, a 503 that
//! lasts, a data directory in use) ends the run with what was acknowledged saved; `--sync`
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

/// Lifetime of the admin token a run mints (`--tenant`, `--data-dir`): a day, since a large
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

/// Uploads the new and changed files of `options.root` to `destination`, and with `sync` deletes
/// the documents of the selection whose files are gone; see the module documentation.
pub async fn run(options: &IngestOptions, destination: &Destination) -> IngestResult<IngestSummary> {
    let started = Instant::now();
    let root = options.root.as_path();
    let selection = Selection::new(&options.include, &options.exclude)?;
    let (mut state, other_destination) = State::load(root, &destination.key)?;
    let listing = walk(root, &options.acl)?;
    let files = listing.files;
    let client = crate::outbound::client(std::time::Duration::from_secs(10)).map_err(IngestError::Server)?;
    let base = destination.server.trim_end_matches('/');
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
        let body = bytes::Bytes::from(form(doc_id, &file_name, format, &bytes, acl));
        let mut tries = 0;
        let response = loop {
            let response = client
                .post(format!("{base}/v1/admin/files"))
                .bearer_auth(&destination.token)
                .header("content-type", format!("multipart/form-data; boundary={BOUNDARY}"))
                .body(body.clone())
                .send()
                .await
                .map_err(|error| IngestError::Server(error.to_string()))?;
            // 503 `overloaded` (the tenant's admission or the extraction slots are full): the
            // server asked to come back after Retry-After.
            tries += 1;
            if response.status().as_u16() != 503 || tries >= OVERLOADED_TRIES {
                break response;
            }
            let seconds = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.trim().parse::<u64>().ok())
                .unwrap_or(1)
                .min(MAX_RETRY_AFTER_SECONDS);
            tokio::time::sleep(std::time::Duration::from_secs(seconds)).await;
        };
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
        let gone: Vec<String> = state
            .files
            .keys()
            .filter(|doc_id| selection.contains(doc_id) && !present.contains(*doc_id))
            .cloned()
            .collect();
        for doc_id in gone {
            let encoded = percent_encoding::utf8_percent_encode(&doc_id, percent_encoding::NON_ALPHANUMERIC);
            let response = client
                .delete(format!("{base}/v1/admin/documents/{encoded}"))
                .bearer_auth(&destination.token)
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
    // The state names its destination even when nothing was acknowledged this time.
    state.save(root)?;
    summary.unread.sort();
    bar.finish_and_clear();
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}

/// The settings of the server [`run_into_data_dir`] runs on `data_dir`: the configured engine
/// (embedder, chunking, index, limits) on the embedded backend, on a loopback port the kernel
/// picks, with no demo corpus, no review routing, no replication, and a secret of its own that
/// signs only this run's token (the configured credentials are not needed nor accepted).
fn data_dir_settings(mut settings: Settings, data_dir: &Path) -> IngestResult<Settings> {
    let refuse =
        |reason: &str| IngestError::DataDir { path: data_dir.display().to_string(), reason: reason.to_owned() };
    if !settings.replica.follow.is_empty() {
        return Err(refuse(
            "the configuration is a replica's (replica.follow): a replica takes its documents from its primary; ingest into the primary",
        ));
    }
    settings.storage.backend = crate::config::StorageBackend::Embedded;
    settings.storage.dir = data_dir.to_string_lossy().into_owned();
    settings.server.bind = "127.0.0.1:0".into();
    settings.demo.load = false;
    settings.review.enabled = false;
    // Nothing is answered: a generator or judge the configuration names (a model server, an
    // API key) is not needed, so it is not built. Ingestion itself (the embedder, chunking,
    // sentence vectors) keeps the configured settings.
    settings.generator.kind = crate::config::GeneratorKind::Extractive;
    settings.verifier.kind = crate::config::VerifierKind::Lexical;
    let leeway = settings.auth.leeway_seconds;
    settings.auth = Settings::defaults().auth;
    settings.auth.leeway_seconds = leeway;
    settings.auth.hs256_secret = hex::encode(rand::random::<[u8; 32]>());
    Ok(settings)
}

/// Ingests into a stopped server's data directory (a new one is created): opens it in this
/// process with `settings`' engine and embedder (a store made by another embedder is refused),
/// serves the admin API on a loopback port for the run alone, runs [`run`] against it as
/// `tenant`'s admin, then stops and closes the engine gracefully (the next start loads its
/// indexes). A data directory in use by a running server is refused (the store's file lock):
/// ingest through the server instead.
pub async fn run_into_data_dir(
    options: &IngestOptions,
    settings: Settings,
    data_dir: &Path,
    tenant: &str,
) -> IngestResult<IngestSummary> {
    let shown = data_dir.display().to_string();
    let failed = |reason: String| IngestError::DataDir { path: shown.clone(), reason };
    let settings = std::sync::Arc::new(data_dir_settings(settings, data_dir)?);
    let providers = crate::providers::from_settings(&settings).await.map_err(|error| failed(error.to_string()))?;
    let state =
        crate::app::build_state(std::sync::Arc::clone(&settings), providers).await.map_err(|error| match error {
            crate::app::StartError::Retrieval(crate::retrieval::RetrievalError::Storage(
                crate::storage::StorageError::InUse { .. },
            )) => failed(
                "in use by another process (a running server?): stop it, or ingest through its admin API with --server"
                    .into(),
            ),
            other => failed(other.to_string()),
        })?;
    state.ready.store(true, std::sync::atomic::Ordering::SeqCst);
    let served = state.clone();
    let server = actix_web::HttpServer::new(move || crate::http::server::app(served.clone()))
        .workers(1)
        .disable_signals()
        .bind("127.0.0.1:0")
        .map_err(|error| failed(format!("loopback port: {error}")))?;
    let address = server.addrs().first().copied().ok_or_else(|| failed("no loopback port".into()))?;
    let running = server.run();
    let handle = running.handle();
    let serving = actix_rt::spawn(running);
    let claims = crate::http::auth::Claims::for_settings(
        &settings.auth,
        (tenant, "warrant-ingest"),
        Vec::new(),
        &[crate::domain::Role::Admin],
        TOKEN_TTL_SECONDS,
    );
    let token = crate::http::auth::mint_hs256(&settings.auth.hs256_secret, &claims)
        .map_err(|error| failed(error.to_string()))?;
    let canonical = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let destination = Destination {
        server: format!("http://{address}"),
        token,
        key: format!("data directory {} tenant {tenant}", canonical.display()),
    };
    let outcome = run(options, &destination).await;
    handle.stop(true).await;
    let _ = serving.await;
    if let Some(engine) = &state.engine {
        engine.close().await;
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loopback_run_accepts_only_its_own_secret_and_is_no_demo() {
        let mut configured = Settings::defaults();
        configured.auth.rs256_public_key_file = "/etc/warrant/key.pem".into();
        configured.auth.replica_subjects = vec!["replica-1".into()];
        configured.review.enabled = true;
        configured.generator.kind = crate::config::GeneratorKind::Openai;
        configured.generator.base_url = "http://127.0.0.1:9/v1".into();
        configured.verifier.sentence_vectors = !configured.verifier.sentence_vectors;
        let first = data_dir_settings(configured.clone(), Path::new("/tmp/data")).expect("a primary's");
        let second = data_dir_settings(configured, Path::new("/tmp/data")).expect("a primary's");
        assert_eq!(first.auth.hs256_secret.len(), 64);
        assert_ne!(first.auth.hs256_secret, second.auth.hs256_secret, "a secret per run");
        assert_ne!(first.auth.hs256_secret, Settings::defaults().auth.hs256_secret, "never the demo key");
        assert!(first.auth.hs256_enabled() && first.auth.rs256_public_key_file.is_empty());
        assert!(first.auth.replica_subjects.is_empty() && !first.review.enabled && !first.demo.load);
        assert!(!crate::http::console::DemoUsers::demo_mode(&first));
        assert_eq!((first.server.bind.as_str(), first.storage.dir.as_str()), ("127.0.0.1:0", "/tmp/data"));
        assert_eq!(first.generator.kind, crate::config::GeneratorKind::Extractive, "no model server is needed");
        assert_ne!(
            first.verifier.sentence_vectors,
            Settings::defaults().verifier.sentence_vectors,
            "ingestion as configured"
        );
    }
}
