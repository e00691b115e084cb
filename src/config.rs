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

mod validate;

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
}

/// Durable state settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageSettings {
    /// Data directory holding `warrant.redb` (created when absent). Empty: in-memory only
    /// (nothing survives a restart; tests and evaluations).
    pub dir: String,
    /// Write an automatic checkpoint (ACL checkpoint in the store + a snapshot under
    /// `snapshots.dir`) after this many published changes...
    pub checkpoint_changes: u64,
    /// ...or after this many seconds with at least one change, whichever comes first.
    pub checkpoint_interval_seconds: u64,
    /// Epochs of change log kept behind the newest checkpoint, so replicas that lag by less can
    /// catch up from the feed; a replica further behind re-bootstraps from a snapshot.
    pub log_retention_epochs: u64,
    /// Page cache of the store file (redb), in MiB. Every live chunk and vector is held in the
    /// indexes already, so the store is read at open and written at commit: a small cache saves
    /// memory without slowing writes, and a restart reads through it a little slower
    /// (BENCHMARKS.md, "Memory per chunk").
    #[serde(default = "default_store_cache_mb")]
    pub cache_mb: usize,
    /// Journal every index change next to the last index set, so that a restart applies the
    /// journal instead of indexing again what the set lacks (BENCHMARKS.md, "Recovery").
    #[serde(default = "default_true")]
    pub index_journal: bool,
    /// Write a new index set (in the background) once the shards' journals since the last one
    /// hold this many MiB, which bounds the journal a restart applies.
    #[serde(default = "default_index_journal_max_mb")]
    pub index_journal_max_mb: u64,
    /// Where documents, chunks, vectors and ACLs live: `embedded` (default: in-process shards,
    /// redb system of record) or `postgres` (PostgreSQL + pgvector shared by stateless nodes).
    #[serde(default)]
    pub backend: StorageBackend,
    /// PostgreSQL backend settings (used when `backend = "postgres"`).
    #[serde(default)]
    pub postgres: PostgresSettings,
}

fn default_index_journal_max_mb() -> u64 {
    1024
}

fn default_store_cache_mb() -> usize {
    crate::storage::DEFAULT_CACHE_MB
}

/// The storage backend, parsed once here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StorageBackend {
    /// In-process shards (HNSW + tantivy + roaring) with the redb system of record.
    #[default]
    Embedded,
    /// PostgreSQL + pgvector (see `src/postgres`).
    Postgres,
}

/// PostgreSQL backend settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PostgresSettings {
    /// Name of the environment variable holding the connection URL (the URL itself, which may
    /// carry a password, never sits in the config file or the logs).
    pub url_env: String,
    /// Connections in the pool (deadpool-postgres).
    pub pool_size: usize,
    /// Longest wait, ms, for a pooled connection (a free one, or a new one connected and set
    /// up); past it the request fails with `storage_unavailable` instead of waiting on.
    pub acquire_timeout_ms: u64,
    /// `hnsw.ef_search` of every session.
    pub ef_search: usize,
    /// `hnsw.iterative_scan`: `relaxed_order`, `strict_order` or `off`.
    pub iterative_scan: IterativeScan,
    /// `hnsw.max_scan_tuples`.
    pub max_scan_tuples: usize,
    /// PEM file of the certificate authorities that sign the server's certificate (empty: the
    /// Mozilla roots of `webpki-roots`). TLS is used as the URL's `sslmode` says (`disable`,
    /// `prefer`, the default, or `require`); whenever it is used the server's certificate and
    /// host name are verified: there is no unverified TLS.
    #[serde(default)]
    pub ca_file: String,
}

impl Default for PostgresSettings {
    fn default() -> Self {
        Self {
            url_env: "WARRANT_DATABASE_URL".into(),
            pool_size: 16,
            acquire_timeout_ms: 5_000,
            ef_search: 100,
            iterative_scan: IterativeScan::RelaxedOrder,
            max_scan_tuples: 20_000,
            ca_file: String::new(),
        }
    }
}

/// pgvector 0.8's iterative index scan mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IterativeScan {
    /// Plain HNSW then filter: few rows when the filter is selective (measured in BENCHMARKS.md).
    Off,
    /// Continue the scan until enough rows pass, keeping exact order.
    StrictOrder,
    /// Continue the scan until enough rows pass; order may be slightly off (sorted here).
    RelaxedOrder,
}

impl IterativeScan {
    /// The GUC value.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::StrictOrder => "strict_order",
            Self::RelaxedOrder => "relaxed_order",
        }
    }
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
    /// driving it. Empty: any host, except in demo mode, where only loopback names
    /// (`localhost`, 127.0.0.0/8, `[::1]`) are ever answered.
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
    /// Also off when an RS256 key is configured, unless `allow_hs256_with_rs256` is set.
    #[serde(default)]
    pub hs256_secret: String,
    /// Path of an RS256 PEM public key. Empty: off.
    #[serde(default)]
    pub rs256_public_key_file: String,
    /// Accept HS256 tokens as well when an RS256 key is configured (default off: with an RS256
    /// key, the shared secret is ignored, so a leaked or default secret cannot sign tokens).
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
}

impl AuthSettings {
    /// Whether HS256 tokens are accepted: a secret is set, and either no RS256 key is configured
    /// or `allow_hs256_with_rs256` says both are wanted.
    pub fn hs256_enabled(&self) -> bool {
        !self.hs256_secret.is_empty() && (self.rs256_public_key_file.is_empty() || self.allow_hs256_with_rs256)
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

/// Answer pipeline settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerSettings {
    /// Default request deadline, ms.
    pub deadline_ms: u64,
    /// Cap on a requested deadline, ms.
    pub max_deadline_ms: u64,
    /// Budget of the retrieval stage, ms.
    pub retrieval_budget_ms: u64,
    /// Minimum time left (ms) to attempt one repair generation.
    pub min_repair_ms: u64,
    /// Token budget of the whole prompt (instructions + question + sources).
    pub prompt_token_budget: usize,
    /// Smallest useful source (tokens) when trimming to the prompt budget.
    pub min_source_tokens: usize,
    /// `fail_answer`: any bad claim fails the attempt; `drop_claim`: bad claims are dropped and
    /// the answer stands when at least one valid claim remains.
    pub claim_policy: ClaimPolicy,
    /// Candidates found only by vector search count as evidence only at or above this cosine.
    pub min_vector_score: f32,
}

/// What happens to an answer with one invalid claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimPolicy {
    /// The attempt fails (repair or abstain).
    FailAnswer,
    /// The claim is dropped; the answer stands if valid claims remain.
    DropClaim,
}

/// Embedding provider settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbedderSettings {
    /// `hashed`, `minilm` or `openai`.
    pub kind: EmbedderKind,
    /// Vector dimension (hashed: any; others: checked against the model).
    pub dim: usize,
    /// Directory of a sentence-transformers BERT model (minilm).
    pub model_dir: String,
    /// OpenAI-compatible base URL (openai).
    #[serde(default)]
    pub base_url: String,
    /// Model name (openai).
    #[serde(default)]
    pub model: String,
    /// Name of the environment variable holding the API key (openai).
    #[serde(default)]
    pub api_key_env: String,
    /// Total timeout per call, ms.
    pub timeout_ms: u64,
    /// Texts per embedding call when ingesting.
    pub batch_size: usize,
    /// Query vectors kept in the LRU cache.
    pub query_cache: usize,
}

/// Generation provider settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeneratorSettings {
    /// `extractive` or `openai`.
    pub kind: GeneratorKind,
    /// OpenAI-compatible base URL, e.g. `http://127.0.0.1:8000/v1`.
    #[serde(default)]
    pub base_url: String,
    /// Model name.
    #[serde(default)]
    pub model: String,
    /// Name of the environment variable holding the API key.
    #[serde(default)]
    pub api_key_env: String,
    /// Connect timeout, ms.
    pub connect_timeout_ms: u64,
    /// Largest number of claims the extractive generator emits.
    pub max_claims: usize,
    /// Most tokens an OpenAI-compatible generator may produce per call (`max_tokens`).
    #[serde(default = "default_generator_max_tokens")]
    pub max_tokens: u32,
    /// Send an OpenAI-compatible generator a schema whose quotes are chosen, not written: at
    /// most this many sentences of each source (those sharing the most content terms with the
    /// question) as an `enum`, so a model decoding under it cannot quote what its source does not
    /// say. 0: quotes written freely (for a provider that rejects such schemas).
    #[serde(default = "default_quote_choices")]
    pub quote_choices: usize,
    /// What the text of a claim is: `written` by the model in the words of its quotes, or
    /// `quoted`: the model states a short answer and chooses the sentences that say it, and the
    /// claim's text is those sentences verbatim, given only when the verifier finds the answer in
    /// them (for small models whose paraphrases the verifier rejects).
    #[serde(default)]
    pub claim_text: ClaimText,
    /// With `quoted` claims: when the sentences the model picked do not state its answer, the
    /// server looks for one that does among the sentences of the final context the caller may
    /// read, and the claim cites that one instead, after the same verification (for small models
    /// that state the answer but pick the wrong sentence). `false`: such a claim is unsupported.
    #[serde(default = "default_true")]
    pub anchor_answers: bool,
    /// With `quoted` claims that cite only sources below the best-ranked one (`S1`): the fewest
    /// distinct content terms of the question their sentences must hold together (all of the
    /// question's when it has fewer), so a sentence that states the model's answer but is not
    /// about what was asked is not cited (`off_question`). 0: no such check.
    #[serde(default = "default_min_question_terms")]
    pub min_question_terms: usize,
}

/// What the text of a claim sent by an OpenAI-compatible generator is (`generator.claim_text`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimText {
    /// The model writes each claim in the words of its quotes (the schema asks for `text`).
    #[default]
    Written,
    /// The model states a short `answer` and quotes; a claim's text is its supporting quotes
    /// joined (the schema has no `text`).
    Quoted,
}

fn default_generator_max_tokens() -> u32 {
    384
}

fn default_quote_choices() -> usize {
    2
}

fn default_min_question_terms() -> usize {
    MIN_QUESTION_TERMS
}

/// Default of `generator.min_question_terms` (BENCHMARKS.md: tuned on the SQuAD slice at
/// offset 300, measured on the one at offset 400).
pub const MIN_QUESTION_TERMS: usize = 2;

fn default_true() -> bool {
    true
}

/// Support verifier thresholds.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifierSettings {
    /// Minimum fraction of the claim's content words found in the cited text.
    pub min_coverage: f64,
    /// Minimum embedding cosine between claim and cited text (used with an embedder).
    pub min_similarity: f64,
    /// Sentence vectors of cited chunks kept in the verifier's LRU cache across requests
    /// (keyed by chunk id, so never shared across tenants); 0 turns the cache off. Each entry
    /// holds one vector (`embedder.dim` × 4 bytes).
    pub sentence_cache: usize,
    /// Embed every chunk's sentences at ingestion and keep their vectors with the chunk (in
    /// memory, the store and snapshots, `i8`: `embedder.dim` + 20 bytes a sentence), so an
    /// answer embeds only its claims. Only with a semantic embedder (the verifier uses none
    /// with the hashed one). Costs about one more embedding pass over the text at ingestion.
    #[serde(default = "default_true")]
    pub sentence_vectors: bool,
    /// `lexical` (the checks above alone) or `judge` (those first; a cited text they do not
    /// find supporting, but whose coverage reaches `judge.min_coverage`, is put to a language
    /// model).
    #[serde(default = "default_verifier_kind")]
    pub kind: VerifierKind,
    /// The model a `judge` verifier asks.
    #[serde(default)]
    pub judge: JudgeSettings,
}

/// The language model of `verifier.kind = "judge"`: an OpenAI-compatible chat completions API.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeSettings {
    /// OpenAI-compatible base URL, e.g. `http://127.0.0.1:18080/v1`.
    #[serde(default)]
    pub base_url: String,
    /// Model name.
    #[serde(default)]
    pub model: String,
    /// Name of the environment variable holding the API key.
    #[serde(default)]
    pub api_key_env: String,
    /// Most time one judgement may take, ms; a judgement not back by then is a rejection.
    #[serde(default = "default_judge_timeout_ms")]
    pub timeout_ms: u64,
    /// Least fraction of the claim's content words a cited text must hold before the model is
    /// asked about it (a floor that no wording of the source can talk the model past).
    #[serde(default = "default_judge_min_coverage")]
    pub min_coverage: f64,
    /// Least probability of "yes" the model must give a text for it to support the claim,
    /// read from the verdict token's log-probabilities (`logprobs` on the chat completions
    /// request), in 0.5..1. At 0.5 (the default) the model's verdict alone decides and no
    /// log-probabilities are asked for; above it, an answer without them is a rejection.
    #[serde(default = "default_judge_min_yes_probability")]
    pub min_yes_probability: f64,
}

impl Default for JudgeSettings {
    fn default() -> Self {
        Self {
            base_url: String::new(),
            model: String::new(),
            api_key_env: String::new(),
            timeout_ms: default_judge_timeout_ms(),
            min_coverage: default_judge_min_coverage(),
            min_yes_probability: default_judge_min_yes_probability(),
        }
    }
}

fn default_verifier_kind() -> VerifierKind {
    VerifierKind::Lexical
}

fn default_judge_timeout_ms() -> u64 {
    10_000
}

fn default_judge_min_coverage() -> f64 {
    0.25
}

fn default_judge_min_yes_probability() -> f64 {
    0.5
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

/// Snapshot settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotSettings {
    /// Directory holding `<id>/` snapshot directories.
    pub dir: String,
    /// Complete snapshots kept; older ones are deleted after a new one is written.
    pub retain: usize,
    /// Snapshot directory to restore at start-up instead of loading the demo corpus. Empty: off.
    #[serde(default)]
    pub restore: String,
}

/// Replica settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicaSettings {
    /// Base URL of the primary to follow (e.g. `http://10.0.0.1:8080`). Empty: not a replica.
    #[serde(default)]
    pub follow: String,
    /// Name of the environment variable holding the replica's service token (role `replica`).
    #[serde(default)]
    pub token_env: String,
    /// Longest time without a heartbeat at the primary's epoch before answers fail closed
    /// (503 `replica_stale`).
    pub max_lag_ms: u64,
    /// Time between two attempts to (re)connect to the primary's stream.
    pub poll_interval_ms: u64,
    /// Which acknowledged changes wait for every leased replica (on the primary):
    /// `revocations` (deletes, revokes and upserts that retire a version), `all`, or `none`
    /// (replicas serve on heartbeats within `max_lag_ms` alone, without leases).
    #[serde(default)]
    pub sync: ReplicaSync,
    /// Lease a replica holds after each renewal; a replica serves only while it holds one.
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
    /// Safety margin a replica takes off its lease (counted from when it *sent* the renewal), so
    /// it stops serving before the primary deems the lease gone.
    #[serde(default = "default_lease_margin_ms")]
    pub lease_margin_ms: u64,
    /// Longest silence on the replication stream before the primary sends a heartbeat.
    #[serde(default = "default_heartbeat_ms")]
    pub heartbeat_ms: u64,
    /// Bytes of committed changes (content included) the primary keeps for replicas to read;
    /// a replica further behind re-bootstraps from a snapshot. Bounds the primary's memory
    /// whatever the number or speed of replicas.
    #[serde(default = "default_stream_buffer_mb")]
    pub stream_buffer_mb: usize,
}

fn default_lease_ms() -> u64 {
    2_000
}

fn default_lease_margin_ms() -> u64 {
    200
}

fn default_heartbeat_ms() -> u64 {
    250
}

fn default_stream_buffer_mb() -> usize {
    64
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
