//! The primary's side: every change a primary commits, with the content of the document versions
//! it adds (chunks with provenance, embeddings, sentence vectors, as the store's rows), enters a
//! byte-bounded [`ReplicationLog`] in commit order, from which each replica's stream
//! (`crate::http::replica`) reads from the epoch it has.
//!
//! Content hints: when a primary starts indexing a document batch it also sends the batch's
//! content to the streams that are caught up ([`Frame::Content`]), so replicas index it while the
//! primary does; the change that publishes it then only has to be published there. A hint is
//! only a hint: the change carries the same content, a stream that is behind misses hints, a
//! replica ignores a hint below the ordinals it has published (a hint can arrive after its
//! change), and drops what it indexed ahead for a change that never came.
//!
//! Invariants:
//! - the log holds whole changes in commit order (it is fed under the engine's writer lock) and
//!   at most `replica.stream_buffer_mb` bytes (the newest change is always kept): a replica that
//!   falls behind its floor is told so and re-bootstraps from a snapshot, so no number or speed of
//!   replicas grows the primary's memory beyond it;
//! - a change is tracked (its writer waits for the leases, [`Leases::settle`]) by
//!   `replica.sync`: `revocations` tracks the changes that can remove access, `all` every change.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::acl::AclMutation;
use crate::config::ReplicaSync;
use crate::embedded::{ChangeSink, Committed};
use crate::storage::EncodedDocument;

use super::leases::Leases;
use super::wire::{ChangeFrame, Frame, WireDocument, encode_frame};

/// Content hints held for streams that have not sent them yet (a stream further behind misses
/// them: they are hints).
const CONTENT_HINTS: usize = 4;
/// A replica asked for changes the log no longer holds (or never held): it re-bootstraps.
#[derive(Debug, PartialEq, Eq)]
pub struct Behind {
    /// Changes at or below this epoch are not in the log.
    pub floor: u64,
}

struct Ring {
    /// (epoch, encoded frame, when it was committed).
    frames: VecDeque<(u64, Bytes, Instant)>,
    bytes: usize,
    capacity: usize,
    /// Every change above this epoch is in `frames`.
    floor: u64,
}

/// The primary's log of committed changes for its replicas, and their leases.
pub struct ReplicationLog {
    ring: Mutex<Ring>,
    latest: tokio::sync::watch::Sender<u64>,
    /// Content hints of batches being indexed ([`Frame::Content`]), to the open streams.
    content: tokio::sync::broadcast::Sender<Bytes>,
    leases: Leases,
    sync: ReplicaSync,
    heartbeat: Duration,
}

impl ReplicationLog {
    /// An empty log of a primary at `epoch`, keeping at most `capacity` bytes, with leases of
    /// `lease` and heartbeats after `heartbeat` of silence.
    pub fn new(epoch: u64, capacity: usize, sync: ReplicaSync, lease: Duration, heartbeat: Duration) -> Self {
        Self {
            ring: Mutex::new(Ring { frames: VecDeque::new(), bytes: 0, capacity, floor: epoch }),
            latest: tokio::sync::watch::Sender::new(epoch),
            content: tokio::sync::broadcast::Sender::new(CONTENT_HINTS),
            leases: Leases::new(lease, Instant::now()),
            sync,
            heartbeat,
        }
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The first encoded change above `since`, if any, or [`Behind`] when it is gone.
    pub fn next_after(&self, since: u64) -> Result<Option<(u64, Bytes)>, Behind> {
        let ring = self.ring();
        if since < ring.floor {
            return Err(Behind { floor: ring.floor });
        }
        let position = ring.frames.partition_point(|(epoch, _, _)| *epoch <= since);
        Ok(ring.frames.get(position).map(|(epoch, frame, _)| (*epoch, frame.clone())))
    }

    /// How long the oldest change above `acknowledged` has been committed, at `now` (0 when
    /// there is none, or it is no longer kept): a replica's lag in time.
    pub fn lag(&self, acknowledged: u64, now: Instant) -> Duration {
        let ring = self.ring();
        let position = ring.frames.partition_point(|(epoch, _, _)| *epoch <= acknowledged);
        ring.frames.get(position).map_or(Duration::ZERO, |(_, _, committed)| now.saturating_duration_since(*committed))
    }

    /// The lowest epoch a replica can stream from.
    pub fn floor(&self) -> u64 {
        self.ring().floor
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.ring().bytes
    }

    /// Resolves when a change is added (the epoch it reached).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.latest.subscribe()
    }

    /// The content hints of batches being indexed, from now on.
    pub fn content_hints(&self) -> tokio::sync::broadcast::Receiver<Bytes> {
        self.content.subscribe()
    }

    /// The leases of this primary's replicas.
    pub fn leases(&self) -> &Leases {
        &self.leases
    }

    /// `replica.sync`.
    pub fn sync(&self) -> ReplicaSync {
        self.sync
    }

    /// Longest silence on a stream before a heartbeat.
    pub fn heartbeat(&self) -> Duration {
        self.heartbeat
    }

    pub(super) fn push(&self, epoch: u64, frame: Bytes) {
        let mut ring = self.ring();
        debug_assert!(ring.frames.back().is_none_or(|(last, _, _)| *last < epoch), "changes in commit order");
        ring.bytes += frame.len();
        ring.frames.push_back((epoch, frame, Instant::now()));
        while ring.bytes > ring.capacity && ring.frames.len() > 1 {
            let (dropped, bytes, _) = ring.frames.pop_front().expect("more than one frame");
            ring.bytes -= bytes.len();
            ring.floor = dropped;
        }
        metrics::gauge!("warrant_replication_buffer_bytes").set(ring.bytes as f64);
        drop(ring);
        self.latest.send_replace(epoch);
    }
}

impl ChangeSink for ReplicationLog {
    fn committed(&self, committed: Committed<'_>) {
        let tracked = match self.sync {
            ReplicaSync::Revocations => committed.removes_access,
            ReplicaSync::All => true,
            ReplicaSync::None => false,
        };
        if tracked {
            self.leases.track(committed.epoch, committed.changes.iter().map(|change| change.mutation.tenant()));
        }
        let mutations: Vec<&AclMutation> = committed.changes.iter().map(|change| &change.mutation).collect();
        let frame = Frame::Change(ChangeFrame {
            epoch: committed.epoch,
            mutations: serde_json::to_vec(&mutations).expect("mutations always encode"),
            documents: committed.documents.iter().map(WireDocument::of).collect(),
            next_ordinal: committed.next_ordinal,
            tracked,
            removes_access: committed.removes_access,
        });
        self.push(committed.epoch, encode_frame(&frame));
    }

    fn staged(&self, documents: &[EncodedDocument]) {
        if documents.is_empty() || self.content.receiver_count() == 0 {
            return;
        }
        let frame = Frame::Content { documents: documents.iter().map(WireDocument::of).collect() };
        // A stream that lags behind this channel just misses the hint.
        let _ = self.content.send(encode_frame(&frame));
    }
}
