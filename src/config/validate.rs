//! Validation of the [`Settings`]: the range and cross-field rules every configuration must
//! pass ([`Settings::validate`], run by every constructor), and the start-up rule of `serve`
//! ([`Settings::validate_for_serving`]) with the loopback test it needs.
//!
//! Invariant kept by this module: every problem found names its key, and all of them are
//! reported at once.

use super::{ConfigError, ConfigResult, DEMO_HS256_SECRET, Settings};

impl Settings {
    /// Checks ranges and cross-field rules.
    pub fn validate(&self) -> ConfigResult<()> {
        let mut problems = Vec::new();
        let mut check = |ok: bool, message: &str| {
            if !ok {
                problems.push(message.to_owned());
            }
        };
        check((1..=256).contains(&self.index.shards), "index.shards must be in 1..=256");
        check((1..=65_536).contains(&self.storage.cache_mb), "storage.cache_mb must be in 1..=65536");
        check(self.index.threads_per_shard <= 256, "index.threads_per_shard must be in 0..=256 (0: from the cores)");
        check((4..=256).contains(&self.index.hnsw_max_connections), "index.hnsw_max_connections must be in 4..=256");
        check((8..=4096).contains(&self.index.hnsw_ef_construction), "index.hnsw_ef_construction must be in 8..=4096");
        check((1..=4096).contains(&self.index.hnsw_ef_search), "index.hnsw_ef_search must be in 1..=4096");
        check(
            (0.0..=1.0).contains(&self.index.exact_scan_max_fraction),
            "index.exact_scan_max_fraction must be in 0..=1",
        );
        check((8..=4096).contains(&self.chunking.max_tokens), "chunking.max_tokens must be in 8..=4096");
        check(
            self.chunking.overlap_tokens < self.chunking.max_tokens,
            "chunking.overlap_tokens must be below max_tokens",
        );
        check(
            (1..=1000).contains(&self.retrieval.lexical_candidates),
            "retrieval.lexical_candidates must be in 1..=1000",
        );
        check(
            (1..=1000).contains(&self.retrieval.vector_candidates),
            "retrieval.vector_candidates must be in 1..=1000",
        );
        check(self.retrieval.rrf_k > 0.0 && self.retrieval.rrf_k.is_finite(), "retrieval.rrf_k must be positive");
        check(self.retrieval.max_chunks_per_doc >= 1, "retrieval.max_chunks_per_doc must be at least 1");
        check(self.retrieval.context_token_budget >= 16, "retrieval.context_token_budget must be at least 16");
        check(
            (1..=self.retrieval.top_k_max).contains(&self.retrieval.top_k_default),
            "retrieval.top_k_default must be in 1..=top_k_max",
        );
        check(self.retrieval.top_k_max <= 100, "retrieval.top_k_max must be at most 100");
        check(
            self.retrieval.lexical_candidates >= self.retrieval.top_k_max
                && self.retrieval.vector_candidates >= self.retrieval.top_k_max,
            "retrieval.lexical_candidates and retrieval.vector_candidates must be at least retrieval.top_k_max \
             (a request for top_k_max chunks could not be filled)",
        );
        check(self.answer.deadline_ms >= 1, "answer.deadline_ms must be positive");
        check(
            self.answer.deadline_ms <= self.answer.max_deadline_ms,
            "answer.deadline_ms must not exceed max_deadline_ms",
        );
        check(self.answer.prompt_token_budget >= 64, "answer.prompt_token_budget must be at least 64");
        check((-1.0..=1.0).contains(&self.answer.min_vector_score), "answer.min_vector_score must be in -1..=1");
        check(self.answer.min_source_tokens >= 1, "answer.min_source_tokens must be at least 1");
        check((1..=10_000).contains(&self.server.max_question_chars), "server.max_question_chars must be in 1..=10000");
        check(self.server.max_body_bytes >= 1024, "server.max_body_bytes must be at least 1024");
        check(self.server.max_file_bytes >= 1024, "server.max_file_bytes must be at least 1024");
        check(
            self.server.max_upload_bytes >= self.server.max_file_bytes,
            "server.max_upload_bytes must be at least server.max_file_bytes",
        );
        check(self.server.extraction_timeout_ms >= 1, "server.extraction_timeout_ms must be at least 1");
        check(self.server.max_in_flight >= 1, "server.max_in_flight must be at least 1");
        check(
            (100..=600_000).contains(&self.server.request_timeout_ms),
            "server.request_timeout_ms must be in 100..=600000",
        );
        check(
            (1..=1_000_000).contains(&self.server.max_acl_names_per_document),
            "server.max_acl_names_per_document must be in 1..=1000000",
        );
        check(
            (1..=self.server.max_acl_names_per_document).contains(&self.server.max_acl_names_per_change),
            "server.max_acl_names_per_change must be in 1..=max_acl_names_per_document",
        );
        check(
            self.server.allowed_hosts.iter().all(|host| is_host_name(host)),
            "server.allowed_hosts must list host names without scheme, port or path (e.g. \"warrant.example.com\")",
        );
        check(
            self.auth.replica_subjects.iter().all(|subject| !subject.trim().is_empty()),
            "auth.replica_subjects must not list a blank subject",
        );
        check(self.server.workers <= 1024, "server.workers must be in 0..=1024 (0: one per core)");
        check(self.server.max_batch_documents >= 1, "server.max_batch_documents must be at least 1");
        check((8..=8192).contains(&self.embedder.dim), "embedder.dim must be in 8..=8192");
        check(self.embedder.batch_size >= 1, "embedder.batch_size must be at least 1");
        check((1..=1_000_000).contains(&self.embedder.query_cache), "embedder.query_cache must be in 1..=1000000");
        check(self.generator.max_claims >= 1, "generator.max_claims must be at least 1");
        check((16..=32_768).contains(&self.generator.max_tokens), "generator.max_tokens must be in 16..=32768");
        check((0.0..=1.0).contains(&self.verifier.min_coverage), "verifier.min_coverage must be in 0..=1");
        check((-1.0..=1.0).contains(&self.verifier.min_similarity), "verifier.min_similarity must be in -1..=1");
        check(self.verifier.sentence_cache <= 1_000_000, "verifier.sentence_cache must be in 0..=1000000");
        if self.verifier.kind == super::VerifierKind::Judge {
            let judge = &self.verifier.judge;
            check(!judge.base_url.is_empty(), "verifier.judge.base_url must be set when verifier.kind is judge");
            check(!judge.model.is_empty(), "verifier.judge.model must be set when verifier.kind is judge");
        }
        check(
            (1..=600_000).contains(&self.verifier.judge.timeout_ms),
            "verifier.judge.timeout_ms must be in 1..=600000",
        );
        check((0.0..=1.0).contains(&self.verifier.judge.min_coverage), "verifier.judge.min_coverage must be in 0..=1");
        check(!self.snapshots.dir.trim().is_empty(), "snapshots.dir must not be empty");
        check(
            (1..=1024).contains(&self.server.admin_document_batches_per_tenant),
            "server.admin_document_batches_per_tenant must be in 1..=1024",
        );
        check(
            (1..=1024).contains(&self.server.admin_acl_changes_per_tenant),
            "server.admin_acl_changes_per_tenant must be in 1..=1024",
        );
        check((1..=1000).contains(&self.snapshots.retain), "snapshots.retain must be in 1..=1000");
        check((10..=60_000).contains(&self.replica.poll_interval_ms), "replica.poll_interval_ms must be in 10..=60000");
        check(
            self.replica.max_lag_ms > self.replica.poll_interval_ms && self.replica.max_lag_ms <= 3_600_000,
            "replica.max_lag_ms must be above poll_interval_ms and at most 3600000",
        );
        if !self.replica.follow.is_empty() {
            check(
                self.replica.follow.starts_with("http://") || self.replica.follow.starts_with("https://"),
                "replica.follow must be an http:// or https:// url",
            );
            check(
                !self.replica.token_env.is_empty(),
                "replica.token_env must name a variable when replica.follow is set",
            );
        }
        check((100..=600_000).contains(&self.replica.lease_ms), "replica.lease_ms must be in 100..=600000");
        check(
            self.replica.lease_margin_ms >= 1 && self.replica.lease_margin_ms * 2 <= self.replica.lease_ms,
            "replica.lease_margin_ms must be at least 1 and at most half of replica.lease_ms",
        );
        check(
            (10..=60_000).contains(&self.replica.heartbeat_ms)
                && self.replica.heartbeat_ms * 2 <= self.replica.max_lag_ms,
            "replica.heartbeat_ms must be in 10..=60000 and at most half of replica.max_lag_ms",
        );
        check((1..=65_536).contains(&self.replica.stream_buffer_mb), "replica.stream_buffer_mb must be in 1..=65536");
        check(self.storage.checkpoint_changes >= 1, "storage.checkpoint_changes must be at least 1");
        if self.storage.backend == super::StorageBackend::Postgres {
            // Replicas and restores are the embedded engine's; a database replicates itself.
            check(
                self.replica.follow.is_empty() && self.snapshots.restore.is_empty(),
                "storage.backend = \"postgres\" keeps all state in the database: replica.follow and \
                 snapshots.restore apply to the embedded backend only (run more warrant nodes on the database, or \
                 use its read replicas)",
            );
        }
        check((1..=256).contains(&self.storage.postgres.pool_size), "storage.postgres.pool_size must be in 1..=256");
        check(
            (1..=600_000).contains(&self.storage.postgres.acquire_timeout_ms),
            "storage.postgres.acquire_timeout_ms must be in 1..=600000",
        );
        check((1..=1000).contains(&self.storage.postgres.ef_search), "storage.postgres.ef_search must be in 1..=1000");
        check(
            self.storage.postgres.exact_scan_chunks <= 1_000_000,
            "storage.postgres.exact_scan_chunks must be at most 1000000",
        );
        check(
            !self.storage.postgres.url_env.trim().is_empty(),
            "storage.postgres.url_env must name an environment variable",
        );
        check(
            (1..=86_400).contains(&self.storage.checkpoint_interval_seconds),
            "storage.checkpoint_interval_seconds must be in 1..=86400",
        );
        problems.extend(self.auth.oidc_problems());
        problems.extend(self.review.problems());
        problems.extend(self.storage.postgres.problems());
        if problems.is_empty() { Ok(()) } else { Err(ConfigError::Invalid(problems.join("; "))) }
    }

    /// The start-up rule of `serve`, on top of [`Settings::validate`]: the published demo HS256
    /// secret, and the committed test keys of `fixtures/auth/` ([`Settings::published_key`]),
    /// are accepted only by a server bound to loopback, so a reachable deployment can never
    /// verify tokens that anyone could have signed.
    pub fn validate_for_serving(&self) -> ConfigResult<()> {
        let demo_key_accepted = self.auth.hs256_enabled() && self.auth.hs256_secret == DEMO_HS256_SECRET;
        if demo_key_accepted && !is_loopback_bind(&self.server.bind) {
            return Err(ConfigError::Invalid(format!(
                "refusing to serve on {bind}: auth.hs256_secret is the published demo key, which anyone can use to \
                 sign admin tokens, and server.bind is not a loopback address (127.0.0.0/8, ::1, localhost); set \
                 WARRANT__AUTH__HS256_SECRET to a secret of your own (for example `openssl rand -hex 32`), or set \
                 auth.rs256_public_key_file (hs256 is then off unless auth.allow_hs256_with_rs256 = true), or bind \
                 server.bind to 127.0.0.1 to run the demo",
                bind = self.server.bind
            )));
        }
        if self.published_key() == Some(super::PublishedKey::TestKey) && !is_loopback_bind(&self.server.bind) {
            return Err(ConfigError::Invalid(format!(
                "refusing to serve on {bind}: auth.rs256_public_key_file ({file}) is a test-only key committed in \
                 fixtures/auth/, whose private half anyone can use to sign admin tokens, and server.bind is not a \
                 loopback address (127.0.0.0/8, ::1, localhost); set auth.rs256_public_key_file to your own key's \
                 public half, or bind server.bind to 127.0.0.1 to run the tests",
                bind = self.server.bind,
                file = self.auth.rs256_public_key_file,
            )));
        }
        if self.auth.hs256_enabled()
            && self.auth.hs256_secret.len() < MIN_HS256_SECRET_BYTES
            && !is_loopback_bind(&self.server.bind)
        {
            return Err(ConfigError::Invalid(format!(
                "refusing to serve on {bind}: auth.hs256_secret is {length} bytes, and a secret under \
                 {MIN_HS256_SECRET_BYTES} bytes can be guessed offline from any one token; set \
                 WARRANT__AUTH__HS256_SECRET to at least {MIN_HS256_SECRET_BYTES} random bytes (for example \
                 `openssl rand -hex 32`), or bind server.bind to a loopback address",
                bind = self.server.bind,
                length = self.auth.hs256_secret.len(),
            )));
        }
        Ok(())
    }
}

/// Shortest HS256 secret `serve` accepts off loopback: 32 bytes, the output size of SHA-256
/// (RFC 7518 §3.2 requires a key at least that long for HS256).
pub const MIN_HS256_SECRET_BYTES: usize = 32;

/// Whether `host` is a bare host name or address as a `Host` header carries it, without port:
/// letters, digits, `.`, `-`, or a bracketed IPv6 address.
fn is_host_name(host: &str) -> bool {
    let bracketed = host.strip_prefix('[').and_then(|inner| inner.strip_suffix(']'));
    match bracketed {
        Some(inner) => inner.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host.len() <= 253
                && host.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        }
    }
}

/// Whether the host name of a `Host` header value (port removed) is a loopback name:
/// `localhost`, an address in 127.0.0.0/8, or `[::1]`.
pub fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_end_matches('.');
    if let Some(inner) = host.strip_prefix('[').and_then(|inner| inner.strip_suffix(']')) {
        return inner
            .parse::<std::net::Ipv6Addr>()
            .is_ok_and(|ip| std::net::IpAddr::V6(ip).to_canonical().is_loopback());
    }
    if let Ok(ip) = host.parse::<std::net::Ipv4Addr>() {
        return ip.is_loopback();
    }
    host.eq_ignore_ascii_case("localhost")
}

/// Whether `bind` (`host:port`, `[v6]:port` or a bare host) names only loopback interfaces:
/// 127.0.0.0/8, ::1 (also as an IPv4-mapped address) or `localhost`. Unspecified addresses
/// (`0.0.0.0`, `::`) and any other host name are not loopback.
pub fn is_loopback_bind(bind: &str) -> bool {
    let bind = bind.trim();
    if let Ok(address) = bind.parse::<std::net::SocketAddr>() {
        return address.ip().to_canonical().is_loopback();
    }
    if let Ok(ip) = bind.parse::<std::net::IpAddr>() {
        return ip.to_canonical().is_loopback();
    }
    let host = bind.rsplit_once(':').map_or(bind, |(host, _)| host);
    let host = host.strip_prefix('[').and_then(|inner| inner.strip_suffix(']')).unwrap_or(host);
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.to_canonical().is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost") || host.eq_ignore_ascii_case("localhost."),
    }
}
