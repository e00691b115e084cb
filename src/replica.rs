//! Replica mode: a server that follows a primary. It starts from a snapshot (`snapshots.restore`)
//! or, without one, bootstraps from the primary's latest snapshot, then polls the primary's ACL
//! change feed (`GET /v1/admin/acl/changes?since=<local epoch>` with a service token of role
//! `replica`) and applies the changes in order with [`crate::acl::AclStore::apply_remote`].
//!
//! Lineage: epochs are compared only within one lineage (a random id given to a data directory
//! when it is created, and to a primary restored from a snapshot). When the feed reports another
//! lineage, an epoch below the replica's, or that the changes it needs were compacted away, the
//! replica goes stale at once (its generation moves, so answers computed on the old state are
//! never returned) and re-synchronizes by itself: it downloads the primary's latest snapshot
//! (`GET /v1/replica/snapshot`, then every file it lists, streamed to a temporary directory),
//! verifies every file's size and sha256 before decoding anything, swaps its whole state to it
//! ([`crate::retrieval::Engine::replace_core`]), and follows the feed again.
//!
//! Fail closed: the replica is *fresh* only while its last successful poll is at most
//! `replica.max_lag_ms` old and left it at the primary's epoch in the primary's lineage. Before
//! the first successful poll, when the primary is unreachable, answers errors, or reports a state
//! the replica cannot follow, the HTTP layer answers `/v1/answer` and `/v1/retrieve` with 503
//! `replica_stale`. An upsert on the primary whose new version the replica has no chunks for
//! still tombstones the old version here: the document disappears rather than being served stale.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use std::path::{Path, PathBuf};

use serde::Deserialize;
use tokio::io::AsyncWriteExt;

use crate::acl::AclChange;
use crate::config::Settings;
use crate::retrieval::Engine;

use crate::snapshot::Manifest;

/// Never-yet marker of `last_success_ms`.
const NEVER: u64 = u64::MAX;

/// What a replica knows about its freshness. Shared by the follower and the HTTP layer.
pub struct ReplicaStatus {
    started: Instant,
    max_lag: Duration,
    /// Milliseconds after `started` of the last successful, in-sync poll ([`NEVER`] before one).
    last_success_ms: AtomicU64,
    /// The primary's epoch in the last successful reply.
    primary_epoch: AtomicU64,
    /// Whether the last reply left this replica at the primary's epoch.
    in_sync: AtomicBool,
    /// Moves every time the replica goes stale for divergence; a request that saw another
    /// generation at its start must not return what it computed.
    generation: AtomicU64,
}

/// Freshness as reported by `/readyz` (sent as `crate::http::contract::replica::ReplicaReport`).
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaReport {
    /// Whether the replica may answer (within its lag bound).
    pub fresh: bool,
    /// Seconds since the last successful poll (since start when there was none).
    pub lag_seconds: f64,
    /// Bound on the lag, seconds.
    pub max_lag_seconds: f64,
    /// The primary's epoch at the last successful poll.
    pub primary_epoch: u64,
}

impl ReplicaStatus {
    /// A status that is stale until the first successful poll.
    pub fn new(max_lag: Duration) -> Self {
        Self {
            started: Instant::now(),
            max_lag,
            last_success_ms: AtomicU64::new(NEVER),
            primary_epoch: AtomicU64::new(0),
            in_sync: AtomicBool::new(false),
            generation: AtomicU64::new(0),
        }
    }

    /// Goes stale at once (divergence detected: another lineage, an epoch that went backwards,
    /// compacted changes) and moves the generation.
    pub fn mark_stale(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.in_sync.store(false, Ordering::SeqCst);
        self.last_success_ms.store(NEVER, Ordering::SeqCst);
    }

    /// The current generation (see [`ReplicaStatus::mark_stale`]).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Records a successful poll at `now` after which the replica is at `local_epoch` and the
    /// primary reported `primary_epoch`.
    pub fn record_poll(&self, now: Instant, local_epoch: u64, primary_epoch: u64) {
        self.primary_epoch.store(primary_epoch, Ordering::SeqCst);
        let in_sync = local_epoch == primary_epoch;
        self.in_sync.store(in_sync, Ordering::SeqCst);
        if in_sync {
            let elapsed = now.saturating_duration_since(self.started).as_millis() as u64;
            self.last_success_ms.store(elapsed, Ordering::SeqCst);
        }
    }

    /// Time since the last successful, in-sync poll (since start when there was none).
    pub fn lag(&self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.started);
        match self.last_success_ms.load(Ordering::SeqCst) {
            NEVER => elapsed,
            success => elapsed.saturating_sub(Duration::from_millis(success)),
        }
    }

    /// Whether answers may be served: a successful poll within the bound.
    pub fn is_fresh(&self, now: Instant) -> bool {
        self.last_success_ms.load(Ordering::SeqCst) != NEVER && self.lag(now) <= self.max_lag
    }

    /// The `/readyz` view (also sets `warrant_replica_lag_seconds`).
    pub fn report(&self) -> ReplicaReport {
        let now = Instant::now();
        let lag = self.lag(now).as_secs_f64();
        metrics::gauge!("warrant_replica_lag_seconds").set(lag);
        ReplicaReport {
            fresh: self.is_fresh(now),
            lag_seconds: lag,
            max_lag_seconds: self.max_lag.as_secs_f64(),
            primary_epoch: self.primary_epoch.load(Ordering::SeqCst),
        }
    }
}

/// The primary's feed reply.
#[derive(Debug, Deserialize)]
struct Feed {
    changes: Vec<AclChange>,
    acl_epoch: u64,
    #[serde(default)]
    lineage: Option<String>,
}

/// The outcome of one poll.
enum Polled {
    /// Applied; the replica is at `local`, the primary at `primary`, same lineage.
    Followed { local: u64, primary: u64 },
    /// The replica cannot follow the feed from its state: re-synchronize.
    Diverged(&'static str),
}

/// Longest time one snapshot download may take.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(600);

/// Errors of one poll (logged, never fatal: staleness is what fails closed).
#[derive(Debug, thiserror::Error)]
enum PollError {
    #[error("primary unreachable: {0}")]
    Unreachable(String),
    #[error("primary answered status {0}")]
    Status(u16),
    #[error("feed reply is malformed: {0}")]
    Malformed(String),
    #[error("applying the feed failed: {0}")]
    Apply(String),
    #[error("re-synchronization failed: {0}")]
    Resync(String),
}

/// Spawns the follower on the current (actix/tokio) runtime. The token is read from the
/// environment variable `settings.replica.token_env`; without one the replica stays stale (fail
/// closed). Snapshots downloaded for re-synchronization are verified in a temporary directory
/// under `settings.snapshots.dir` and removed once loaded.
pub fn spawn_follower(engine: Arc<Engine>, settings: &Settings, status: Arc<ReplicaStatus>) {
    let token = crate::outbound::api_key_from_env(&settings.replica.token_env);
    if token.is_none() {
        tracing::error!(variable = %settings.replica.token_env, "replica token variable is unset or empty: the replica stays stale");
    }
    let base = settings.replica.follow.clone();
    let interval = Duration::from_millis(settings.replica.poll_interval_ms);
    let timeout = Duration::from_millis(settings.replica.max_lag_ms.clamp(200, 10_000));
    let scratch = PathBuf::from(&settings.snapshots.dir);
    actix_rt::spawn(async move {
        let client = match crate::outbound::client(timeout) {
            Ok(client) => client,
            Err(error) => {
                tracing::error!(%error, "replica http client unavailable: the replica stays stale");
                return;
            }
        };
        let mut failures: u64 = 0;
        loop {
            if let Some(token) = &token {
                let outcome = match poll(&client, &base, token, timeout, &engine).await {
                    Ok(Polled::Followed { local, primary }) => {
                        status.record_poll(Instant::now(), local, primary);
                        if local != primary {
                            tracing::warn!(local, primary, "replica epoch differs from the primary's after a poll");
                        }
                        Ok(())
                    }
                    Ok(Polled::Diverged(reason)) => {
                        status.mark_stale();
                        tracing::warn!(
                            reason,
                            "replica cannot follow the primary's feed: re-synchronizing from its snapshot"
                        );
                        resync(&client, &base, token, &scratch, &engine).await
                    }
                    Err(error) => Err(error),
                };
                match outcome {
                    Ok(()) => failures = 0,
                    Err(error) => {
                        failures += 1;
                        // Log the first failure and then every 20th, not every poll.
                        if failures % 20 == 1 {
                            tracing::warn!(%error, failures, "replica poll failed");
                        }
                    }
                }
            }
            metrics::gauge!("warrant_replica_lag_seconds").set(status.lag(Instant::now()).as_secs_f64());
            tokio::time::sleep(interval).await;
        }
    });
}

async fn poll(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    timeout: Duration,
    engine: &Engine,
) -> Result<Polled, PollError> {
    let acl = engine.acl();
    let since = acl.epoch();
    let url = crate::outbound::endpoint(base, "v1/admin/acl/changes");
    let response = client
        .get(url)
        .query(&[("since", since)])
        .bearer_auth(token)
        .timeout(timeout)
        .send()
        .await
        .map_err(|error| PollError::Unreachable(crate::outbound::describe(error)))?;
    if response.status() == reqwest::StatusCode::GONE {
        return Ok(Polled::Diverged("the changes this replica needs were compacted away"));
    }
    if !response.status().is_success() {
        return Err(PollError::Status(response.status().as_u16()));
    }
    let feed: Feed = response.json().await.map_err(|error| PollError::Malformed(crate::outbound::describe(error)))?;
    if feed.lineage.as_deref() != Some(acl.lineage()) {
        return Ok(Polled::Diverged("the primary reports another lineage"));
    }
    if feed.acl_epoch < since {
        return Ok(Polled::Diverged("the primary's epoch went backwards"));
    }
    let local = if feed.changes.is_empty() {
        since
    } else {
        engine.apply_remote(&feed.changes).await.map_err(|error| PollError::Apply(error.to_string()))?
    };
    Ok(Polled::Followed { local, primary: feed.acl_epoch })
}

/// Downloads the primary's latest snapshot into a temporary directory under `scratch`, verifies
/// it whole, and swaps the engine's state to it.
async fn resync(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    scratch: &Path,
    engine: &Engine,
) -> Result<(), PollError> {
    let directory = scratch.join(format!(".replica-{}", uuid::Uuid::new_v4().simple()));
    let result = download_and_swap(client, base, token, &directory, engine).await;
    if let Err(error) = tokio::fs::remove_dir_all(&directory).await
        && error.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(%error, "could not remove a downloaded snapshot directory");
    }
    result
}

/// GET `path` on the primary with the replica token; a non-success status is an error.
async fn download(
    client: &reqwest::Client,
    base: &str,
    path: &str,
    token: &str,
) -> Result<reqwest::Response, PollError> {
    let response = client
        .get(crate::outbound::endpoint(base, path))
        .bearer_auth(token)
        .timeout(DOWNLOAD_TIMEOUT)
        .send()
        .await
        .map_err(|error| PollError::Unreachable(crate::outbound::describe(error)))?;
    if !response.status().is_success() {
        return Err(PollError::Status(response.status().as_u16()));
    }
    Ok(response)
}

async fn download_and_swap(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    directory: &Path,
    engine: &Engine,
) -> Result<(), PollError> {
    let fail = |what: String| PollError::Resync(what);
    let response = download(client, base, "v1/replica/snapshot", token).await?;
    let manifest: Manifest =
        response.json().await.map_err(|error| PollError::Malformed(crate::outbound::describe(error)))?;
    if !crate::snapshot::is_safe_name(&manifest.snapshot_id)
        || manifest.files.iter().any(|file| !crate::snapshot::is_safe_name(&file.name))
    {
        return Err(fail("the snapshot manifest names an unsafe file".into()));
    }
    let Some(lineage) = manifest.lineage.clone() else {
        return Err(fail("the primary's snapshot has no lineage".into()));
    };
    // Every tenant's text passes through it: only the server's own user may enter (0700).
    crate::storage::private_directory(directory).map_err(|error| fail(error.to_string()))?;
    for entry in &manifest.files {
        let path = format!("v1/replica/snapshot/{}/{}", manifest.snapshot_id, entry.name);
        let mut response = download(client, base, &path, token).await?;
        let mut file =
            tokio::fs::File::create(directory.join(&entry.name)).await.map_err(|error| fail(error.to_string()))?;
        let mut written: u64 = 0;
        while let Some(piece) =
            response.chunk().await.map_err(|error| PollError::Unreachable(crate::outbound::describe(error)))?
        {
            written += piece.len() as u64;
            if written > entry.bytes {
                return Err(fail(format!("snapshot file {} is longer than its manifest says", entry.name)));
            }
            file.write_all(&piece).await.map_err(|error| fail(error.to_string()))?;
        }
        file.sync_all().await.map_err(|error| fail(error.to_string()))?;
    }
    let manifest_bytes = serde_json::to_vec(&manifest).map_err(|error| fail(error.to_string()))?;
    tokio::fs::write(directory.join(crate::snapshot::MANIFEST), manifest_bytes)
        .await
        .map_err(|error| fail(error.to_string()))?;
    let name = engine.embedder().name().to_owned();
    let dimension = engine.embedder().dimension();
    let vector = engine.params().vector;
    let owned = directory.to_owned();
    // Verified whole (sizes and sha256 of every file) before anything is decoded or swapped.
    let restored = tokio::task::spawn_blocking(move || crate::snapshot::restore(&owned, &name, dimension, vector))
        .await
        .map_err(|error| fail(error.to_string()))?
        .map_err(|error| fail(error.to_string()))?;
    let epoch = restored.manifest.acl_epoch;
    let acl = restored.acl.relabeled(lineage.clone());
    engine.replace_core(acl, restored.shards).await.map_err(|error| fail(error.to_string()))?;
    tracing::info!(snapshot = %manifest.snapshot_id, acl_epoch = epoch, lineage = %lineage, "replica re-synchronized from the primary's snapshot");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_until_first_poll_then_fresh_within_the_bound_only() {
        let status = ReplicaStatus::new(Duration::from_millis(100));
        let start = status.started;
        assert!(!status.is_fresh(start));
        status.record_poll(start + Duration::from_millis(10), 5, 5);
        assert!(status.is_fresh(start + Duration::from_millis(100)));
        assert!(!status.is_fresh(start + Duration::from_millis(111)));
    }

    #[test]
    fn a_poll_that_leaves_the_replica_behind_does_not_refresh() {
        let status = ReplicaStatus::new(Duration::from_millis(100));
        let start = status.started;
        status.record_poll(start, 5, 5);
        status.record_poll(start + Duration::from_millis(90), 5, 7);
        assert!(!status.is_fresh(start + Duration::from_millis(150)));
    }
}
