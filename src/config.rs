//! Configuration: one typed [`Settings`] struct read from a TOML file (default
//! `config/default.toml`) with environment overrides, unknown keys rejected and ranges validated
//! at start-up.
//!
//! Environment overrides use `WARRANT__<SECTION>__<KEY>=<value>` (double underscores separate
//! path segments, names are lowercased); the value is parsed as a TOML literal when it is one
//! (`8`, `true`, `"text"`, `[1, 2]`) and taken as a plain string otherwise.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::domain::ChunkingConfig;

mod answer;
mod oidc;
mod published_keys;
mod review;
mod storage;
mod validate;

pub use answer::{
    AnswerSettings, ClaimPolicy, ClaimText, EmbedderSettings, GeneratorSettings, JudgeSettings, MIN_QUESTION_TERMS,
    VerifierSettings,
};
pub use oidc::{ClaimSettings, OIDC_ALGORITHMS, OidcSettings, is_secure_url};
pub use published_keys::{PublishedKey, is_test_rsa_key};
pub use review::{ABSTENTION_REASONS, ReviewSettings};
pub use storage::{
    IterativeScan, PostgresSettings, ReplicaSettings, SnapshotSettings, StorageBackend, StorageSettings,
};
pub use validate::{MIN_HS256_SECRET_BYTES, is_loopback_bind, is_loopback_host};

/// Errors raised while loading or validating configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
    /// The TOML (after overrides) does not match the schema.
    #[error("invalid configuration: {0}")]
    Parse(String),
    /// A value is outside its allowed range.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// Result alias of this layer.
pub type ConfigResult<T> = Result<T, ConfigError>;

/// The whole configuration.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// HTTP server.
    pub server: ServerSettings,
    /// Token verification.
    pub auth: AuthSettings,
    /// Shards and index parameters.
    pub index: IndexSettings,
    /// Chunking.
    pub chunking: ChunkingConfig,
    /// Retrieval, fusion and context selection.
    pub retrieval: RetrievalSettings,
    /// The answer pipeline.
    pub answer: AnswerSettings,
    /// Embedding provider.
    pub embedder: EmbedderSettings,
    /// Generation provider.
    pub generator: GeneratorSettings,
    /// Citation support verifier.
    pub verifier: VerifierSettings,
    /// Demo corpus loaded at start-up.
    pub demo: DemoSettings,
    /// Snapshot directory, retention and restore.
    pub snapshots: SnapshotSettings,
    /// Replica mode: follow a primary's ACL change feed.
    pub replica: ReplicaSettings,
    /// The data directory (system of record), checkpoints and change-log retention.
    pub storage: StorageSettings,
    /// Routing answers to human review and the review queue's bounds (optional; off by default).
    #[serde(default)]
    pub review: ReviewSettings,
}

/// HTTP server settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    /// Address to bind, e.g. `127.0.0.1:8080`.
    pub bind: String,
    /// actix-web worker threads; 0 = the available parallelism (cores).
    pub workers: usize,
    /// Largest accepted request body in bytes.
    pub max_body_bytes: usize,
    /// Longest accepted question, in characters after trimming.
    pub max_question_chars: usize,
    /// Largest admin upsert batch (documents).
    pub max_batch_documents: usize,
    /// Document batches one tenant may have in flight (beyond: 503 `overloaded`).
    pub admin_document_batches_per_tenant: usize,
    /// ACL changes (grant, revoke, delete) one tenant may have in flight.
    pub admin_acl_changes_per_tenant: usize,
    /// Requests processed at once by the answer/retrieve endpoints; more get 503 `overloaded`.
    pub max_in_flight: usize,
    /// Seconds suggested in `Retry-After` when overloaded.
    pub retry_after_seconds: u64,
    /// Log format: `text` or `json`.
    pub log_format: LogFormat,
    /// Host names (the `Host` header without its port, compared without case) the server
    /// answers; any other gets 421 `host_not_allowed`, which stops a DNS-rebinding page from
    /// driving it. Empty: any host. While a published key is accepted (the demo secret, or a
    /// test key of `fixtures/auth/`: [`Settings::published_key`]), only loopback names
    /// (`localhost`, 127.0.0.0/8, `[::1]`) are ever answered, whatever this lists.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Most users and groups together that one document's access list may hold (an upsert's
    /// `acl`, or what grants add up to); beyond: 400 `acl_too_large`, nothing changes.
    #[serde(default = "default_max_acl_names_per_document")]
    pub max_acl_names_per_document: usize,
    /// Most users and groups together that one grant or revoke may name; beyond: 400
    /// `acl_too_large`.
    #[serde(default = "default_max_acl_names_per_change")]
    pub max_acl_names_per_change: usize,
    /// Largest file one document may be uploaded as, in bytes (`content` after base64
    /// decoding, or one part of `POST /v1/admin/files`); beyond: 400 `file_too_large`.
    #[serde(default = "default_max_file_bytes")]
    pub max_file_bytes: usize,
    /// Largest `POST /v1/admin/files` request, in bytes (all its parts); beyond: 413
    /// `payload_too_large`. JSON bodies stay under `max_body_bytes`.
    #[serde(default = "default_max_upload_bytes")]
    pub max_upload_bytes: usize,
    /// Longest one file's extraction may take, in milliseconds; beyond: 400
    /// `extraction_timeout` naming the file.
    #[serde(default = "default_extraction_timeout_ms")]
    pub extraction_timeout_ms: u64,
    /// File extractions running at once, across tenants (0: the machine's parallelism). A file
    /// that waits longer than its time limit for a slot: 503 `overloaded` with `Retry-After`.
    #[serde(default)]
    pub max_concurrent_extractions: usize,
    /// The deadline of every read (`GET` routes and `POST /v1/retrieve`), ms (100..=600000):
    /// past it, 503 `request_timeout` with `Retry-After` and the read's work is dropped. Writes
    /// are never cut by it (they end by the database's own deadlines, rolled back whole);
    /// `POST /v1/answer` keeps its own (`deadline_ms`). See `http::server`.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
}

fn default_request_timeout_ms() -> u64 {
    5_000
}

fn default_max_file_bytes() -> usize {
    16 * 1024 * 1024
}

fn default_max_upload_bytes() -> usize {
    64 * 1024 * 1024
}

fn default_extraction_timeout_ms() -> u64 {
    30_000
}

fn default_max_acl_names_per_document() -> usize {
    4096
}

fn default_max_acl_names_per_change() -> usize {
    1024
}

/// The HS256 secret shipped in `config/default.toml` for the demo. It is public, so whoever reads
/// it can mint admin tokens: `serve` refuses it unless `server.bind` is a loopback address.
pub const DEMO_HS256_SECRET: &str = "warrant-demo-secret-do-not-use-in-production";

/// JWT verification settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSettings {
    /// HS256 shared secret (prefer the env override `WARRANT__AUTH__HS256_SECRET`). Empty: off.
    /// Also off when an RS256 key or `[auth.oidc]` is configured, unless
    /// `allow_hs256_with_rs256` is set.
    #[serde(default)]
    pub hs256_secret: String,
    /// Path of an RS256 PEM public key. Empty: off.
    #[serde(default)]
    pub rs256_public_key_file: String,
    /// Accept HS256 tokens as well when an RS256 key or `[auth.oidc]` is configured (default
    /// off: beside an asymmetric key, the shared secret is ignored, so a leaked or default secret
    /// cannot sign tokens).
    #[serde(default)]
    pub allow_hs256_with_rs256: bool,
    /// The subjects (`sub`) of the replicas this primary serves: a token with role `replica` is
    /// a replica's credential only when its `sub` is listed here (and it passes the `issuer` and
    /// `audience` checks every token passes); for any other subject the role grants nothing.
    /// Empty (the default): no replica is accepted.
    #[serde(default)]
    pub replica_subjects: Vec<String>,
    /// Required `iss`, when not empty.
    #[serde(default)]
    pub issuer: String,
    /// Required `aud`, when not empty.
    #[serde(default)]
    pub audience: String,
    /// Clock leeway for `exp`/`nbf`, seconds.
    pub leeway_seconds: u64,
    /// Tokens of a company's identity provider (OpenID Connect discovery, JWKS). Off by default.
    #[serde(default)]
    pub oidc: OidcSettings,
    /// Where the principal is in a provider token (`[auth.oidc]`); defaults: warrant's names.
    #[serde(default)]
    pub claims: ClaimSettings,
}

impl AuthSettings {
    /// Whether HS256 tokens are accepted: a secret is set, and either no asymmetric key is
    /// configured (an RS256 key file or `[auth.oidc]`) or `allow_hs256_with_rs256` says both are
    /// wanted.
    pub fn hs256_enabled(&self) -> bool {
        !self.hs256_secret.is_empty()
            && ((self.rs256_public_key_file.is_empty() && !self.oidc.enabled()) || self.allow_hs256_with_rs256)
    }
}

/// Shard and index settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexSettings {
    /// Number of shard actors.
    pub shards: usize,
    /// HNSW max connections per node (M).
    pub hnsw_max_connections: usize,
    /// HNSW ef at construction.
    pub hnsw_ef_construction: usize,
    /// HNSW ef at search, the result pool of an unfiltered walk (raised to the candidate count
    /// when smaller); a walk under a scope holding a fraction s of a shard's documents keeps
    /// `hnsw_ef_search * sqrt(s)`, at least the candidate count (`hnsw_ef_search * s^0.25`
    /// where s is 0.09-0.2 and the scope is walked two-hop over its allowed nodes only).
    pub hnsw_ef_search: usize,
    /// Selectivity planner: when the scope allows at most this many vectors in a shard, the
    /// shard scans exactly those vectors instead of walking the graph.
    pub exact_scan_threshold: usize,
    /// Selectivity planner: before a shard's scan and walk costs are measured (fewer than 4096
    /// vectors), also scan exactly when the allowed fraction of the shard is below this; after,
    /// the measured costs decide.
    pub exact_scan_max_fraction: f64,
    /// Threads serving each shard actor; 0 (the default) sizes them from the available
    /// parallelism: `ceil(cores / shards)`, at least 2 (see `index::shard::threads_per_shard`).
    #[serde(default)]
    pub threads_per_shard: usize,
}

/// Retrieval settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrievalSettings {
    /// Lexical candidates fetched from every shard.
    pub lexical_candidates: usize,
    /// Vector candidates fetched from every shard.
    pub vector_candidates: usize,
    /// Reciprocal rank fusion constant k.
    pub rrf_k: f64,
    /// Largest number of chunks of one document in the final context.
    pub max_chunks_per_doc: usize,
    /// Token budget of the selected context.
    pub context_token_budget: usize,
    /// Default number of chunks in the final context.
    pub top_k_default: usize,
    /// Cap on a requested `top_k`/`k`.
    pub top_k_max: usize,
    /// How fused candidates are reordered before the context is selected: `identity` (the
    /// fused order) or `sentences` (each candidate's best-matching sentence, by the sentence
    /// vectors made at ingestion, fused in as a third ranked list; needs
    /// `verifier.sentence_vectors` and a semantic embedder, else it keeps the fused order).
    #[serde(default)]
    pub reranker: RerankerKind,
}

/// The reranker of `retrieval.reranker`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RerankerKind {
    /// Keep the fused order.
    #[default]
    Identity,
    /// Fuse in the rank of each candidate's best-matching sentence.
    Sentences,
}

/// Demo corpus settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DemoSettings {
    /// Load the demo corpus at start-up.
    pub load: bool,
    /// Path of the demo corpus (JSON).
    pub corpus: String,
    /// Demo users the web console may sign in as (JSON; see `src/http/console.rs`). Tokens for
    /// them are minted only in demo mode: the corpus loaded, the published demo key, loopback.
    /// Empty: no demo sign-in.
    #[serde(default)]
    pub users: String,
}

/// `#[serde(default)]` of the switches that are on unless turned off.
fn default_true() -> bool {
    true
}

/// A closed set of names one settings key accepts, parsed once when the settings are read: an
/// unknown name is refused naming the key, never matched later with a fallback.
macro_rules! named_kinds {
    ($(#[$meta:meta])* $name:ident, $key:literal { $($(#[$variant_meta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$variant_meta])* $variant),+
        }

        impl $name {
            /// Every accepted name, in order.
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            /// The name as written in the settings.
            pub fn as_str(&self) -> &'static str {
                match self {
                    $(Self::$variant => $text),+
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                match text {
                    $($text => Ok(Self::$variant),)+
                    other => Err(format!(
                        "{} must be one of {} (got {:?})",
                        $key,
                        Self::NAMES.join(", "),
                        other.chars().take(64).collect::<String>()
                    )),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

named_kinds!(
    /// `embedder.kind`: which embedding provider.
    EmbedderKind, "embedder.kind" {
        /// Feature hashing (no model; lexical-grade vectors).
        Hashed => "hashed",
        /// all-MiniLM-L6-v2 run in process (candle).
        Minilm => "minilm",
        /// An OpenAI-compatible embeddings API.
        Openai => "openai",
    }
);

named_kinds!(
    /// `generator.kind`: which generation provider.
    GeneratorKind, "generator.kind" {
        /// The embedded extractive generator.
        Extractive => "extractive",
        /// An OpenAI-compatible chat completions API.
        Openai => "openai",
    }
);

named_kinds!(
    /// `verifier.kind`: how citations are checked for support.
    VerifierKind, "verifier.kind" {
        /// Content-word coverage, polarity and (with a semantic embedder) similarity.
        Lexical => "lexical",
        /// The lexical checks, then a language model for what they reject.
        Judge => "judge",
    }
);

named_kinds!(
    /// `server.log_format`: how log lines are written.
    LogFormat, "server.log_format" {
        /// Human-readable lines.
        Text => "text",
        /// One JSON object per line.
        Json => "json",
    }
);

named_kinds!(
    /// `replica.sync`: which changes a primary acknowledges only once every leased replica
    /// applied them.
    #[derive(Default)]
    ReplicaSync, "replica.sync" {
        /// Deletes, revokes and upserts that retire a version (whatever can remove access).
        #[default]
        Revocations => "revocations",
        /// Every change.
        All => "all",
        /// None: replicas serve on heartbeats alone.
        None => "none",
    }
);

/// Path of the default configuration file, relative to the working directory.
pub const DEFAULT_CONFIG: &str = "config/default.toml";

impl Settings {
    /// Reads `path` (or [`DEFAULT_CONFIG`]), applies `WARRANT__…` overrides from the process
    /// environment and validates.
    pub fn load(path: Option<&Path>) -> ConfigResult<Self> {
        let path = path.unwrap_or_else(|| Path::new(DEFAULT_CONFIG));
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        Self::from_toml(&text, std::env::vars())
    }

    /// Parses `text`, applies overrides from `environment` (only `WARRANT__` keys are read) and
    /// validates.
    pub fn from_toml(text: &str, environment: impl IntoIterator<Item = (String, String)>) -> ConfigResult<Self> {
        let mut value: toml::Value = toml::from_str(text).map_err(|error| ConfigError::Parse(error.to_string()))?;
        for (key, raw) in environment {
            let Some(path) = key.strip_prefix("WARRANT__") else { continue };
            let segments: Vec<String> = path.split("__").map(str::to_lowercase).collect();
            set_path(&mut value, &segments, parse_literal(&raw))?;
        }
        let settings: Settings =
            value.try_into().map_err(|error: toml::de::Error| ConfigError::Parse(error.to_string()))?;
        settings.validate()?;
        Ok(settings)
    }

    /// The built-in defaults: the contents of `config/default.toml`, compiled in, except that
    /// `storage.dir` is empty (in-memory). Tests and library users opt into a data directory
    /// explicitly, so two in-process servers never share one.
    pub fn defaults() -> Self {
        let mut settings = Self::from_toml(include_str!("../config/default.toml"), std::iter::empty())
            .expect("default config is valid");
        settings.storage.dir = String::new();
        settings
    }
}

fn parse_literal(raw: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut table| table.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_owned()))
}

fn set_path(value: &mut toml::Value, segments: &[String], new: toml::Value) -> ConfigResult<()> {
    let (last, parents) = segments.split_last().ok_or_else(|| ConfigError::Parse("empty override key".into()))?;
    let mut cursor = value;
    for segment in parents {
        let table = cursor
            .as_table_mut()
            .ok_or_else(|| ConfigError::Parse(format!("override path {segment} is not a table")))?;
        cursor = table.entry(segment.clone()).or_insert_with(|| toml::Value::Table(Default::default()));
    }
    let table =
        cursor.as_table_mut().ok_or_else(|| ConfigError::Parse(format!("override path {last} is not a table")))?;
    table.insert(last.clone(), new);
    Ok(())
}

#[cfg(test)]
mod tests;
