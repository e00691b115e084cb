//! Settings of the state: the data directory (`[storage]`, with the PostgreSQL backend's
//! `[storage.postgres]`), snapshots (`[snapshots]`) and replica mode (`[replica]`).

use super::*;

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

impl PostgresSettings {
    /// What is wrong with the deadlines and the tenant share, each naming its key.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut check = |ok: bool, message: &str| {
            if !ok {
                problems.push(message.to_owned());
            }
        };
        check(
            self.statement_timeout_ms <= 3_600_000,
            "storage.postgres.statement_timeout_ms must be in 0..=3600000 (0: none)",
        );
        check(
            self.idle_in_transaction_timeout_ms <= 3_600_000,
            "storage.postgres.idle_in_transaction_timeout_ms must be in 0..=3600000 (0: none)",
        );
        check(
            self.keepalive_idle_seconds <= 7_200,
            "storage.postgres.keepalive_idle_seconds must be in 0..=7200 (0: off)",
        );
        check(self.tcp_user_timeout_ms <= 3_600_000, "storage.postgres.tcp_user_timeout_ms must be in 0..=3600000");
        check(self.cache_mb <= 1 << 20, "storage.postgres.cache_mb must be in 0..=1048576 (0: off)");
        check((1..=64).contains(&self.cache_shards), "storage.postgres.cache_shards must be in 1..=64");
        check(
            self.cache_dir.trim() == self.cache_dir,
            "storage.postgres.cache_dir must not begin or end with whitespace",
        );
        check(
            self.cache_dir.is_empty()
                || !std::path::Path::new(&self.cache_dir).exists()
                || std::path::Path::new(&self.cache_dir).is_dir(),
            "storage.postgres.cache_dir must be a directory (created when absent; empty: off)",
        );
        check((1..=1 << 24).contains(&self.cache_dir_mb), "storage.postgres.cache_dir_mb must be in 1..=16777216");
        check(
            self.tenant_connections <= self.pool_size,
            "storage.postgres.tenant_connections must be at most storage.postgres.pool_size (0: half of it)",
        );
        problems
    }
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
    /// up), and for one of the tenant's share of them (`tenant_connections`); past it the
    /// request fails with 503 `storage_timeout` (`overloaded` for the tenant's share) instead of
    /// waiting on. Shorter than the requests' deadlines.
    pub acquire_timeout_ms: u64,
    /// `statement_timeout` (ms) of every connection: a statement running longer is cancelled by
    /// the server and its request fails with 503 `storage_timeout` (a write's transaction rolls
    /// back: nothing of it is applied). 0: none.
    pub statement_timeout_ms: u64,
    /// `idle_in_transaction_session_timeout` (ms) of every connection: a transaction left idle
    /// this long (its node frozen or gone) is ended by the server, its locks released. 0: none.
    pub idle_in_transaction_timeout_ms: u64,
    /// TCP keepalives after this many seconds of silence (then every second, 3 probes). 0: off.
    pub keepalive_idle_seconds: u64,
    /// `TCP_USER_TIMEOUT` (ms): a connection whose data stays unacknowledged this long is
    /// closed (a partition is seen within it instead of TCP's minutes). 0: the system's.
    pub tcp_user_timeout_ms: u64,
    /// Connections one tenant may hold at once, so a tenant whose statements hang cannot take
    /// the pool from the others (0: half of `pool_size`, at least 1).
    pub tenant_connections: usize,
    /// `hnsw.ef_search` of every session.
    pub ef_search: usize,
    /// `hnsw.iterative_scan`: `relaxed_order`, `strict_order` or `off`.
    pub iterative_scan: IterativeScan,
    /// `hnsw.max_scan_tuples`.
    pub max_scan_tuples: usize,
    /// A vector search whose scope holds at most this many chunks (the documents its readers are
    /// granted times the tenant's chunks per document) reads them all and sorts them exactly
    /// instead of walking the HNSW index, which under so sparse a scope gives up or keeps few of
    /// the nearest (0: always walk; a walk that comes back short still falls back to the exact
    /// read). BENCHMARKS.md, "Sparse scopes".
    pub exact_scan_chunks: usize,
    /// PEM file of the certificate authorities that sign the server's certificate (empty: the
    /// Mozilla roots of `webpki-roots`). TLS is used as the URL's `sslmode` says (`disable`,
    /// `prefer`, the default, or `require`); whenever it is used the server's certificate and
    /// host name are verified: there is no unverified TLS.
    #[serde(default)]
    pub ca_file: String,
    /// Memory, MiB, for tenants held in memory on this node (`src/postgres/cache`): each cached
    /// tenant's reads are served by in-memory shards (the embedded engine's HNSW and BM25 inside
    /// the caller's scope), brought up to the tenant's epoch in the database before every read.
    /// Whole tenants are evicted least recently used past it; a tenant estimated larger is served
    /// by the SQL path, as is one still loading. 0: off (every read is SQL).
    pub cache_mb: usize,
    /// Shards of each cached tenant (1..=64; each an actor with up to 4 threads).
    pub cache_shards: usize,
    /// Local index cache of this node (`src/postgres/cache/local.rs`): a directory where each
    /// cached tenant's state (chunks, vector and lexical index images, ACL state, in the
    /// snapshot format) is written after its load, so that after a restart the tenant loads
    /// from it and catches up with the database instead of reading every chunk again. It holds
    /// tenant content: created 0700, files 0600. Empty: off (a restart loads from the database).
    #[serde(default)]
    pub cache_dir: String,
    /// Disk, MiB, for the local index cache's sets: after a set is written, the least recently
    /// used others (by their last write or load) are removed until the sets fit; a tenant whose
    /// set alone would not fit is not written. 1..=16777216.
    pub cache_dir_mb: u64,
}

impl Default for PostgresSettings {
    fn default() -> Self {
        Self {
            url_env: "WARRANT_DATABASE_URL".into(),
            pool_size: 16,
            acquire_timeout_ms: 1_000,
            statement_timeout_ms: 2_000,
            idle_in_transaction_timeout_ms: 5_000,
            keepalive_idle_seconds: 5,
            tcp_user_timeout_ms: 5_000,
            tenant_connections: 0,
            ef_search: 100,
            iterative_scan: IterativeScan::RelaxedOrder,
            max_scan_tuples: 20_000,
            exact_scan_chunks: 2_000,
            ca_file: String::new(),
            cache_mb: 1_024,
            cache_shards: 1,
            cache_dir: String::new(),
            cache_dir_mb: 4_096,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The deadlines and the tenant share are validated, each problem naming its key.
    #[test]
    fn postgres_deadlines_and_tenant_share_are_validated_naming_the_key() {
        assert!(PostgresSettings::default().problems().is_empty());
        let wrong = PostgresSettings {
            statement_timeout_ms: 3_600_001,
            tenant_connections: 17,
            cache_shards: 0,
            cache_mb: (1 << 20) + 1,
            ..PostgresSettings::default()
        };
        let problems = wrong.problems().join("; ");
        assert!(!problems.contains("storage.postgres.cache_dir"), "{problems}");
        let file = PostgresSettings { cache_dir: "Cargo.toml".into(), ..PostgresSettings::default() };
        assert!(file.problems().join("; ").contains("storage.postgres.cache_dir must be a directory"));
        let spaced = PostgresSettings { cache_dir: " /var/cache/warrant".into(), ..PostgresSettings::default() };
        assert!(spaced.problems().join("; ").contains("storage.postgres.cache_dir must not begin"));
        let no_disk = PostgresSettings { cache_dir_mb: 0, ..PostgresSettings::default() };
        assert!(no_disk.problems().join("; ").contains("storage.postgres.cache_dir_mb must be in 1..="));
        assert!(problems.contains("storage.postgres.cache_shards"), "{problems}");
        assert!(problems.contains("storage.postgres.cache_mb"), "{problems}");
        assert!(problems.contains("storage.postgres.statement_timeout_ms"), "{problems}");
        assert!(problems.contains("storage.postgres.tenant_connections"), "{problems}");
    }
}
