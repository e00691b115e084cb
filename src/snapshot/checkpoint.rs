//! Automatic checkpoints of a durable primary: after `storage.checkpoint_changes` published
//! epochs, or `storage.checkpoint_interval_seconds` with at least one, whichever comes first,
//! write a snapshot under `snapshots.dir` (what replicas bootstrap from) and then an ACL
//! checkpoint into the store, compacting the change log behind both — but never above
//! `current epoch - storage.log_retention_epochs`, so a replica lagging by less than the
//! retention window still catches up from the feed, and never above the snapshot's epoch, so a
//! replica bootstrapping from that snapshot can follow the feed from it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Settings;
use crate::embedded::Engine;

/// How often the checkpointer looks at the epoch.
const TICK: Duration = Duration::from_millis(500);

/// One checkpoint: snapshot, then store checkpoint + compaction. Returns the snapshot's epoch.
pub async fn run_once(engine: &Engine, settings: &Settings) -> Result<u64, String> {
    let root = PathBuf::from(&settings.snapshots.dir);
    let protected = (!settings.snapshots.restore.is_empty()).then(|| PathBuf::from(&settings.snapshots.restore));
    let created = super::create_protecting(engine, &root, settings.snapshots.retain, protected.as_deref())
        .await
        .map_err(|error| error.to_string())?;
    let current = engine.acl().epoch();
    let compact_up_to = created.acl_epoch.min(current.saturating_sub(settings.storage.log_retention_epochs));
    engine.checkpoint(compact_up_to).await.map_err(|error| error.to_string())?;
    metrics::counter!("warrant_checkpoints_total").increment(1);
    tracing::info!(snapshot = %created.snapshot_id, acl_epoch = created.acl_epoch, compacted_up_to = compact_up_to, "checkpoint written");
    Ok(created.acl_epoch)
}

/// One checkpoint of a durable replica: the store's ACL checkpoint, compaction of its log and an
/// index set (no snapshot: replicas bootstrap from their primary's, never from each other).
async fn run_once_on_replica(engine: &Engine) -> Result<u64, String> {
    let epoch = engine.checkpoint(engine.acl().epoch()).await.map_err(|error| error.to_string())?;
    metrics::counter!("warrant_checkpoints_total").increment(1);
    Ok(epoch)
}

/// Spawns the checkpointer on the current runtime (durable engines: primaries and replicas).
pub fn spawn(engine: Arc<Engine>, settings: Arc<Settings>) {
    let replica = !settings.replica.follow.is_empty();
    let every_changes = settings.storage.checkpoint_changes;
    let every = Duration::from_secs(settings.storage.checkpoint_interval_seconds);
    actix_rt::spawn(async move {
        let mut last_epoch = engine.acl().epoch();
        let mut last_time = Instant::now();
        loop {
            tokio::time::sleep(TICK).await;
            let epoch = engine.acl().epoch();
            let due = epoch > last_epoch && (epoch - last_epoch >= every_changes || last_time.elapsed() >= every);
            if !due {
                continue;
            }
            let done = if replica { run_once_on_replica(&engine).await } else { run_once(&engine, &settings).await };
            match done {
                Ok(epoch) => last_epoch = epoch,
                Err(error) => tracing::warn!(%error, "checkpoint failed; the change log is kept until one succeeds"),
            }
            last_time = Instant::now();
        }
    });
}
