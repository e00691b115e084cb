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

/// A bounded pool whose connections carry the HNSW session settings, over [`tls_connector`].
pub(super) fn build_pool(params: &PostgresParams, tls: MakeRustlsConnect) -> RetrievalResult<Pool> {
    let config = tokio_postgres::Config::from_str(&params.url).map_err(database)?;
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
