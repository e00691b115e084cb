//! Connections: the TLS connector (rustls, verified, never a fallback to plain text), the pool
//! and its per-connection settings, and the parameters read from the settings.

use deadpool_postgres::{Hook, HookError, Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::*;

/// The TLS connector of every connection: rustls (ring), trusting the certificate authorities of
/// `ca_file` alone when one is given, else the Mozilla roots. Whether TLS is used is the URL's
/// `sslmode` (tokio-postgres: `disable`, `prefer` by default, `require`); when it is, rustls
/// verifies the server's certificate chain and that it names the host connected to, and a
/// failure fails the connection (never a fallback to plain text or to an unverified channel).
pub fn tls_connector(ca_file: Option<&std::path::Path>) -> RetrievalResult<MakeRustlsConnect> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    crate::outbound::install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let unreadable = |reason: String| {
                RetrievalError::Storage(StorageError::Io {
                    file: path.display().to_string(),
                    reason: format!("storage.postgres.ca_file: {reason}"),
                })
            };
            let certificates = CertificateDer::pem_file_iter(path)
                .map_err(|error| unreadable(error.to_string()))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|error| unreadable(error.to_string()))?;
            if certificates.is_empty() {
                return Err(unreadable("holds no PEM certificate".into()));
            }
            for certificate in certificates {
                roots.add(certificate).map_err(|error| unreadable(error.to_string()))?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// The deadlines and the per-tenant share of every connection (issue 59): a statement, an idle
/// transaction and the TCP connection under it each end within a bound, so a frozen or
/// partitioned server fails its requests within their deadline instead of holding their
/// connections until TCP gives up (minutes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatabaseLimits {
    /// `statement_timeout` of every session: a statement running longer is cancelled by the
    /// server (SQLSTATE 57014; in a write transaction, the transaction rolls back). Zero: none.
    pub statement_timeout: std::time::Duration,
    /// `idle_in_transaction_session_timeout`: a session idle this long inside a transaction is
    /// ended by the server (its transaction rolled back, its locks released). Zero: none.
    pub idle_in_transaction_timeout: std::time::Duration,
    /// TCP keepalives start after this much silence (then every second, 3 probes). Zero: off.
    pub keepalive_idle: std::time::Duration,
    /// `TCP_USER_TIMEOUT`: data unacknowledged this long closes the connection (a partition is
    /// detected in this bound instead of TCP's minutes). Zero: the system's.
    pub tcp_user_timeout: std::time::Duration,
    /// Connections one tenant may hold at once ([`super::limit`]); 0: half the pool (at least 1).
    pub tenant_connections: usize,
}

impl DatabaseLimits {
    /// How long a read waits for its statement's answer before it gives up on its own (the
    /// statement timeout plus [`READ_BOUND_MARGIN`]; `None` without a statement timeout). The
    /// server's timeout normally ends a statement first; this bound holds when it cannot: a
    /// frozen server (its kernel acknowledges every byte, so neither keepalives nor
    /// `tcp_user_timeout` fire), or a Citus coordinator waiting on a frozen worker past its own
    /// timeout. See [`super::cancel::Reader`].
    pub fn read_bound(&self) -> Option<std::time::Duration> {
        (!self.statement_timeout.is_zero()).then(|| self.statement_timeout + READ_BOUND_MARGIN)
    }
}

/// What a read's own bound adds to the statement timeout, so that the server's timeout (a clean
/// SQLSTATE 57014, the connection kept) wins when the server can still act.
pub const READ_BOUND_MARGIN: std::time::Duration = std::time::Duration::from_millis(200);

impl Default for DatabaseLimits {
    fn default() -> Self {
        let defaults = crate::config::PostgresSettings::default();
        Self::from_postgres_settings(&defaults)
    }
}

impl DatabaseLimits {
    /// The limits of `storage.postgres`.
    pub fn from_settings(settings: &crate::config::Settings) -> Self {
        Self::from_postgres_settings(&settings.storage.postgres)
    }

    fn from_postgres_settings(postgres: &crate::config::PostgresSettings) -> Self {
        use std::time::Duration;
        Self {
            statement_timeout: Duration::from_millis(postgres.statement_timeout_ms),
            idle_in_transaction_timeout: Duration::from_millis(postgres.idle_in_transaction_timeout_ms),
            keepalive_idle: Duration::from_secs(postgres.keepalive_idle_seconds),
            tcp_user_timeout: Duration::from_millis(postgres.tcp_user_timeout_ms),
            tenant_connections: postgres.tenant_connections,
        }
    }

    /// The per-tenant share for a pool of `pool_size`.
    pub fn tenant_share(&self, pool_size: usize) -> usize {
        match self.tenant_connections {
            0 => (pool_size / 2).max(1),
            share => share.min(pool_size.max(1)),
        }
    }

    /// Applies the session settings (as startup `options`, so they hold from the first
    /// statement, the post-create hook's included) and the socket options to `config`.
    fn apply(&self, config: &mut tokio_postgres::Config) {
        let mut options = config.get_options().unwrap_or_default().to_owned();
        for (name, value) in [
            ("statement_timeout", self.statement_timeout),
            ("idle_in_transaction_session_timeout", self.idle_in_transaction_timeout),
        ] {
            if !options.is_empty() {
                options.push(' ');
            }
            options.push_str(&format!("-c {name}={}", value.as_millis()));
        }
        config.options(options);
        if self.keepalive_idle.is_zero() {
            config.keepalives(false);
        } else {
            config
                .keepalives(true)
                .keepalives_idle(self.keepalive_idle)
                .keepalives_interval(std::time::Duration::from_secs(1))
                .keepalives_retries(3);
        }
        if !self.tcp_user_timeout.is_zero() {
            config.tcp_user_timeout(self.tcp_user_timeout);
        }
    }
}

/// `host:port` of the first server `url` names (for the log; never the user or the password).
pub(super) fn server_label(url: &str) -> String {
    let Ok(config) = tokio_postgres::Config::from_str(url) else {
        return "unknown".into();
    };
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}")
}

/// A bounded pool whose connections carry the HNSW session settings and `limits`, over
/// [`tls_connector`].
pub(super) fn build_pool(
    params: &PostgresParams,
    limits: &DatabaseLimits,
    tls: MakeRustlsConnect,
) -> RetrievalResult<Pool> {
    let mut config = tokio_postgres::Config::from_str(&params.url).map_err(database)?;
    limits.apply(&mut config);
    let manager = Manager::from_config(config, tls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    let session = (params.ef_search.to_string(), params.iterative_scan.as_str(), params.max_scan_tuples.to_string());
    Pool::builder(manager)
        .max_size(params.pool_size.max(1))
        // Bounded waits: for a free connection, and for a new one to connect and be set up
        // (the hook's statement). Timeouts need the runtime named.
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .wait_timeout(Some(params.acquire_timeout))
        .create_timeout(Some(params.acquire_timeout))
        .post_create(Hook::async_fn(move |client, _| {
            let session = session.clone();
            Box::pin(async move {
                // On the very first connection pgvector may not be loaded yet (the migration
                // creates it): the settings are then placeholders that pgvector adopts on load.
                client
                    .query_one(sql::SESSION_SETTINGS, &[&session.0, &session.1, &session.2])
                    .await
                    .map_err(HookError::Backend)?;
                Ok(())
            })
        }))
        .build()
        .map_err(database)
}

impl PostgresParams {
    /// Parameters from the settings, with the connection URL read from the environment variable
    /// `storage.postgres.url_env` names.
    pub fn from_settings(settings: &crate::config::Settings) -> Result<Self, crate::config::ConfigError> {
        let postgres = &settings.storage.postgres;
        let url = std::env::var(&postgres.url_env).map_err(|_| {
            crate::config::ConfigError::Invalid(format!(
                "the postgres backend needs its connection URL in the environment variable {} \
                 (storage.postgres.url_env), which is not set",
                postgres.url_env
            ))
        })?;
        Ok(Self {
            url,
            pool_size: postgres.pool_size,
            acquire_timeout: std::time::Duration::from_millis(postgres.acquire_timeout_ms),
            ef_search: postgres.ef_search,
            iterative_scan: postgres.iterative_scan,
            max_scan_tuples: postgres.max_scan_tuples,
            exact_scan_chunks: postgres.exact_scan_chunks,
            chunking: settings.chunking,
            rrf_k: settings.retrieval.rrf_k,
            lexical_candidates: settings.retrieval.lexical_candidates,
            vector_candidates: settings.retrieval.vector_candidates,
            ca_file: (!postgres.ca_file.is_empty()).then(|| postgres.ca_file.clone().into()),
            sentence_vectors: settings.verifier.sentence_vectors,
            reranker: settings.retrieval.reranker,
            query_cache: settings.embedder.query_cache,
            max_acl_names_per_document: settings.server.max_acl_names_per_document,
        })
    }
}
