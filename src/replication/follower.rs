//! Replica mode, the follower: a server that follows a primary. It starts from a snapshot (`snapshots.restore`)
//! or, without one, bootstraps from the primary's latest snapshot, then reads the primary's
//! replication stream (`GET /v1/replica/stream?since=<local epoch>&lineage=<local lineage>` with
//! a service token of role `replica`; frames in [`super::wire`]) and applies each committed
//! change in order with the content it adds ([`Engine::apply_replicated`]): new document versions
//! are indexed from the primary's chunks and embeddings, never re-embedded, so a replica is a full
//! read copy of its primary.
//!
//! Leases: unless the primary's `replica.sync` is `none`, the replica serves only while it holds
//! a lease, renewed with `POST /v1/replica/lease` every quarter lease and at once after it
//! applied a change the primary tracks; the renewal acknowledges the epoch applied. The replica
//! counts a granted lease from the moment it *sent* the renewal, less `replica.lease_margin_ms`,
//! on the monotonic clock, so it stops serving before the primary deems the lease gone; the
//! primary grants none to a replica that has not applied every tracked change. A change that can
//! remove access is recorded with its reach ([`super::removals`]) before it is acknowledged, so
//! no request it can affect that loaded the state before it returns after the primary
//! acknowledged the revoke; requests of other tenants and other readers are not failed.
//!
//! Lineage: epochs are compared only within one lineage (a random id given to a data directory
//! when it is created, and to a primary restored from a snapshot). When the primary reports
//! another lineage, an epoch below the replica's, or that the changes it needs are no longer
//! kept (410), the replica goes stale at once (its generation moves, so answers computed on the
//! old state are never returned) and re-synchronizes by itself: it downloads the primary's latest
//! snapshot (`GET /v1/replica/snapshot`, then every file it lists, streamed to a temporary
//! directory), verifies every file's size and sha256 before decoding anything, swaps its whole
//! state to it ([`crate::embedded::Engine::replace_core`]), and streams again.
//!
//! Fail closed: the replica is *fresh* only while it holds a lease (when leases are on) and the
//! stream brought it to the primary's epoch within `replica.max_lag_ms` (a change or a
//! heartbeat). Before that, when the primary is unreachable, silent, or reports a state the
//! replica cannot follow, the HTTP layer answers with 503 `replica_stale`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use roaring::RoaringBitmap;
use serde::Deserialize;
use tokio::io::AsyncWriteExt;

use crate::config::Settings;
use crate::embedded::Engine;
use crate::snapshot::Manifest;

use super::removals::reach_of;
use super::status::ReplicaStatus;
use super::wire::{Frame, FrameReader, WireDocument};
/// Longest time one snapshot download may take.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(600);

/// Errors of following the primary (logged, never fatal: staleness is what fails closed).
#[derive(Debug, thiserror::Error)]
enum PollError {
    #[error("primary unreachable: {0}")]
    Unreachable(String),
    #[error("primary answered status {0}")]
    Status(u16),
    #[error("stream is malformed: {0}")]
    Malformed(String),
    #[error("the replica cannot follow the primary's stream: {0}")]
    Diverged(String),
    #[error("re-synchronization failed: {0}")]
    Resync(String),
}

/// The session of the open stream, and a wake-up for the lease renewer.
#[derive(Default)]
struct Session {
    current: std::sync::Mutex<Option<(String, Duration)>>,
    acknowledge: tokio::sync::Notify,
}

impl Session {
    fn get(&self) -> Option<(String, Duration)> {
        self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn set(&self, session: Option<(String, Duration)>) {
        *self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = session;
    }
}

/// Longest wait for the change that publishes a batch indexed ahead; past it the batch is taken
/// for abandoned by the primary and its chunks are dropped.
const AHEAD_TTL: Duration = Duration::from_secs(60);

/// Indexing a hinted batch ahead: the ordinals it indexed, or why it failed.
type Indexing = tokio::task::JoinHandle<Result<RoaringBitmap, String>>;

/// Batches indexed ahead from the primary's content hints, by the follower (one task): their
/// ordinals, when the hint came, and the indexing.
#[derive(Default)]
struct Ahead {
    batches: Vec<(RoaringBitmap, Instant, Indexing)>,
}

impl Ahead {
    /// Starts indexing a hinted batch (unless some of it is already indexed ahead).
    fn start(&mut self, engine: &Arc<Engine>, documents: Vec<crate::storage::EncodedDocument>) {
        let ordinals: RoaringBitmap = documents.iter().map(|document| document.ordinal).collect();
        // A hint below the ordinals this replica has published may be for a change it applied
        // already (a hint can arrive after its change): never index it twice.
        let published_below = engine.acl().next_ordinal();
        if ordinals.min().is_none_or(|lowest| lowest < published_below)
            || self.batches.iter().any(|(held, _, _)| !held.is_disjoint(&ordinals))
        {
            return;
        }
        let engine = Arc::clone(engine);
        let handle =
            actix_rt::spawn(async move { engine.index_ahead(&documents).await.map_err(|error| error.to_string()) });
        self.batches.push((ordinals, Instant::now(), handle));
    }

    /// The ordinals of `shipped` indexed ahead (waiting for that indexing to end); an error
    /// when indexing ahead failed (some of its chunks may be in the index: re-synchronize).
    async fn take(&mut self, shipped: &RoaringBitmap) -> Result<RoaringBitmap, PollError> {
        let mut indexed = RoaringBitmap::new();
        let mut index = 0;
        while index < self.batches.len() {
            if self.batches[index].0.is_disjoint(shipped) {
                index += 1;
                continue;
            }
            let (ordinals, _, handle) = self.batches.swap_remove(index);
            match handle.await {
                Ok(Ok(done)) if done == ordinals && ordinals.is_subset(shipped) => {
                    metrics::counter!("warrant_replica_batches_indexed_ahead_total").increment(1);
                    indexed |= done;
                }
                _ => return Err(PollError::Diverged("indexing a hinted batch ahead failed".into())),
            }
        }
        Ok(indexed)
    }

    /// Drops batches whose change never came within [`AHEAD_TTL`].
    fn expire(&mut self, engine: &Engine, now: Instant) {
        let (stale, fresh): (Vec<_>, Vec<_>) = self
            .batches
            .drain(..)
            .partition(|(_, started, handle)| handle.is_finished() && now.duration_since(*started) > AHEAD_TTL);
        self.batches = fresh;
        for (ordinals, _, _) in stale {
            engine.forget_ahead(ordinals);
        }
    }

    /// Forgets everything (the engine's state was replaced: what was indexed ahead went with it).
    fn clear(&mut self) {
        self.batches.clear();
    }
}

/// How the follower reaches its primary.
struct Primary {
    client: reqwest::Client,
    base: String,
    token: String,
}

/// Spawns the follower (the stream reader and the lease renewer) on the current (actix/tokio)
/// runtime. The token is read from the environment variable `settings.replica.token_env`;
/// without one the replica stays stale (fail closed). Snapshots downloaded for
/// re-synchronization are verified in a temporary directory under `settings.snapshots.dir` and
/// removed once loaded.
pub fn spawn_follower(engine: Arc<Engine>, settings: &Settings, status: Arc<ReplicaStatus>) {
    let Some(token) = crate::outbound::api_key_from_env(&settings.replica.token_env) else {
        tracing::error!(variable = %settings.replica.token_env, "replica token variable is unset or empty: the replica stays stale");
        return;
    };
    let connect = Duration::from_millis(settings.replica.max_lag_ms.clamp(200, 10_000));
    let client = match crate::outbound::client(connect) {
        Ok(client) => client,
        Err(error) => {
            tracing::error!(%error, "replica http client unavailable: the replica stays stale");
            return;
        }
    };
    let primary = Arc::new(Primary { client, base: settings.replica.follow.clone(), token });
    let session = Arc::new(Session::default());
    let margin = Duration::from_millis(settings.replica.lease_margin_ms);
    actix_rt::spawn(renew_leases(Arc::clone(&primary), Arc::clone(&status), Arc::clone(&session), margin));
    let interval = Duration::from_millis(settings.replica.poll_interval_ms);
    // Three missed heartbeats (at least a second) and the stream is taken for dead.
    let silence = Duration::from_millis(settings.replica.heartbeat_ms.saturating_mul(3).max(1_000));
    let scratch = PathBuf::from(&settings.snapshots.dir);
    actix_rt::spawn(async move {
        let mut failures: u64 = 0;
        let mut ahead = Ahead::default();
        loop {
            let outcome = match follow(&primary, &engine, &status, &session, &mut ahead, silence).await {
                Err(PollError::Diverged(reason)) => {
                    status.mark_stale();
                    session.set(None);
                    ahead.clear();
                    tracing::warn!(%reason, "replica cannot follow the primary's stream: re-synchronizing from its snapshot");
                    resync(&primary.client, &primary.base, &primary.token, &scratch, &engine).await
                }
                other => other,
            };
            session.set(None);
            match outcome {
                Ok(()) => failures = 0,
                Err(error) => {
                    failures += 1;
                    // Log the first failure and then every 20th, not every attempt.
                    if failures % 20 == 1 {
                        tracing::warn!(%error, failures, "replica stream failed");
                    }
                }
            }
            metrics::gauge!("warrant_replica_lag_seconds").set(status.lag(Instant::now()).as_secs_f64());
            tokio::time::sleep(interval).await;
        }
    });
}

/// Reads the primary's stream from the local epoch and applies every change in order until the
/// stream ends, falls silent for `silence`, or cannot be followed ([`PollError::Diverged`]).
async fn follow(
    primary: &Primary,
    engine: &Arc<Engine>,
    status: &ReplicaStatus,
    session: &Session,
    ahead: &mut Ahead,
    silence: Duration,
) -> Result<(), PollError> {
    let acl = engine.acl();
    let (since, lineage) = (acl.epoch(), acl.lineage().to_owned());
    let request = primary
        .client
        .get(crate::outbound::endpoint(&primary.base, "v1/replica/stream"))
        .query(&[("since", since.to_string()), ("lineage", lineage.clone())])
        .bearer_auth(&primary.token)
        .send();
    let mut response = tokio::time::timeout(silence, request)
        .await
        .map_err(|_| PollError::Unreachable("no answer".into()))?
        .map_err(|error| PollError::Unreachable(crate::outbound::describe(error)))?;
    if !response.status().is_success() {
        let status = response.status().as_u16();
        let code = response.json::<Refusal>().await.map(|refusal| refusal.code).unwrap_or_default();
        return Err(match code.as_str() {
            "lineage_mismatch" | "changes_compacted" => {
                PollError::Diverged(format!("the primary answered {status} {code}"))
            }
            _ => PollError::Status(status),
        });
    }
    let mut reader = FrameReader::default();
    loop {
        let piece = match tokio::time::timeout(silence, response.chunk()).await {
            Err(_) => return Err(PollError::Unreachable("the stream fell silent".into())),
            Ok(Err(error)) => return Err(PollError::Unreachable(crate::outbound::describe(error))),
            Ok(Ok(None)) => return Ok(()),
            Ok(Ok(Some(piece))) => piece,
        };
        reader.push(&piece);
        while let Some(frame) = reader.next_frame().map_err(PollError::Malformed)? {
            match frame {
                Frame::Hello(hello) => {
                    if hello.lineage != lineage || hello.since != since {
                        return Err(PollError::Diverged("the primary's stream is of another history".into()));
                    }
                    status.require_lease(hello.sync != crate::config::ReplicaSync::None.as_str());
                    session.set(Some((hello.session, Duration::from_millis(hello.lease_ms))));
                    // Everything applied so far went through this loop and was recorded.
                    status.settle(engine.acl().epoch());
                    session.acknowledge.notify_one();
                }
                Frame::Content { documents } => {
                    ahead.start(engine, documents.into_iter().map(WireDocument::into_encoded).collect());
                }
                Frame::Change(change) => {
                    let (epoch, tracked) = (change.epoch, change.tracked);
                    let (changes, documents) = change.decode().map_err(PollError::Malformed)?;
                    let shipped: RoaringBitmap = documents.iter().map(|document| document.ordinal).collect();
                    let indexed = ahead.take(&shipped).await?;
                    ahead.expire(engine, Instant::now());
                    // Judged on the state before the change: whom it can take anything from.
                    let reaches = reach_of(&changes, &engine.acl().load());
                    let reached = engine
                        .apply_replicated(&changes, &documents, &indexed)
                        .await
                        .map_err(|error| PollError::Diverged(format!("applying epoch {epoch} failed: {error}")))?;
                    // Before the acknowledgement: nothing a request it can affect computed on the
                    // state before this change may be returned once the primary acknowledged it.
                    status.removed(reaches);
                    status.settle(reached);
                    status.record_poll(Instant::now(), reached, epoch);
                    if tracked {
                        session.acknowledge.notify_one();
                    }
                }
                Frame::Heartbeat { epoch } => {
                    let applied = engine.acl().epoch();
                    status.settle(applied);
                    status.record_poll(Instant::now(), applied, epoch);
                }
            }
        }
    }
}

/// A refusal's code (`{code, message}`).
#[derive(Deserialize)]
struct Refusal {
    code: String,
}

/// Reply of `POST /v1/replica/lease`.
#[derive(Deserialize)]
struct LeaseReply {
    granted: bool,
}

/// Renews the lease of the open session every quarter lease, and at once when the follower
/// applied a tracked change (the renewal acknowledges the epoch applied).
async fn renew_leases(primary: Arc<Primary>, status: Arc<ReplicaStatus>, session: Arc<Session>, margin: Duration) {
    let url = crate::outbound::endpoint(&primary.base, "v1/replica/lease");
    loop {
        let period = session.get().map_or(Duration::from_millis(250), |(_, lease)| lease / 4);
        tokio::select! {
            () = session.acknowledge.notified() => {}
            () = tokio::time::sleep(period) => {}
        }
        let Some((current, lease)) = session.get() else { continue };
        let sent = Instant::now();
        // Only what is applied *and* recorded (never the engine's epoch read mid-change).
        let applied = status.settled_epoch();
        let reply = primary
            .client
            .post(&url)
            .bearer_auth(&primary.token)
            .json(&serde_json::json!({"session": current, "applied_epoch": applied}))
            .timeout(lease / 2)
            .send()
            .await;
        match reply {
            Ok(response) if response.status().is_success() => {
                if response.json::<LeaseReply>().await.is_ok_and(|reply| reply.granted) {
                    status.extend_lease(sent, lease, margin);
                }
            }
            Ok(response) if response.status() == reqwest::StatusCode::NOT_FOUND => {
                if session.get().is_some_and(|(open, _)| open == current) {
                    session.set(None);
                }
            }
            Ok(response) => tracing::debug!(status = response.status().as_u16(), "lease renewal refused"),
            Err(error) => tracing::debug!(error = %crate::outbound::describe(error), "lease renewal failed"),
        }
    }
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
    metrics::counter!("warrant_replica_bootstraps_total").increment(1);
    tracing::info!(snapshot = %manifest.snapshot_id, acl_epoch = epoch, lineage = %lineage, "replica re-synchronized from the primary's snapshot");
    Ok(())
}

#[cfg(test)]
mod tests;
