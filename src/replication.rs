//! Replication, the primary's side and the wire: every change a primary commits, with the content
//! of the document versions it adds (chunks with provenance, embeddings, sentence vectors, as the
//! store's rows), enters a byte-bounded [`ReplicationLog`] in commit order; each replica reads it
//! over one long-lived HTTP stream (`GET /v1/replica/stream`, `crate::http::replica`) from the
//! epoch it has, renews a lease and acknowledges what it applied (`POST /v1/replica/lease`), and a
//! change that can remove access is acknowledged to its writer only once every replica holding a
//! live lease applied it, or that lease ran out ([`Leases::settle`]).
//!
//! Why a chunked HTTP response and a separate POST: a stream of length-prefixed frames needs no
//! new dependency or protocol (no WebSocket, no HTTP/2 server push), passes any HTTP proxy, and
//! back-pressure comes for free (actix pulls the next frame only when the socket takes it); the
//! acknowledgement and the lease need a reply, which a one-way HTTP/1.1 body cannot carry.
//!
//! Content hints: when a primary starts indexing a document batch it also sends the batch's
//! content to the streams that are caught up ([`Frame::Content`]), so replicas index it while the
//! primary does; the change that publishes it then only has to be published there. A hint is
//! only a hint: the change carries the same content, a stream that is behind misses hints, a
//! replica ignores a hint below the ordinals it has published (a hint can arrive after its
//! change), and drops what it indexed ahead for a change that never came.
//!
//! Wire: each frame is a little-endian `u32` length, then that many bytes of bincode of a
//! [`Frame`]; a frame is at most [`MAX_FRAME_BYTES`]. The change entries travel as JSON (the feed's
//! and the store's format of a mutation, which bincode cannot decode: it is tagged by `kind`).
//!
//! Invariants:
//! - the log holds whole changes in commit order (it is fed under the engine's writer lock) and
//!   at most `replica.stream_buffer_mb` bytes (the newest change is always kept): a replica that
//!   falls behind its floor is told so and re-bootstraps from a snapshot, so no number or speed of
//!   replicas grows the primary's memory beyond it;
//! - a lease is granted or renewed only to a session whose stream is open and that has applied
//!   every tracked change (`replica.sync`): a replica that misses a revoke cannot stay leased, so a
//!   revoke waits at most one lease for it; a lease outlives its stream until it expires;
//! - after the primary starts, tracked changes wait one lease more (a previous process of the
//!   primary may have granted leases that are still running);
//! - replicas are named by the subjects `auth.replica_subjects` lists (metric labels stay bounded).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::acl::{AclChange, AclMutation};
use crate::config::ReplicaSync;
use crate::retrieval::{ChangeSink, Committed};
use crate::storage::EncodedDocument;

/// Largest frame a replica accepts (a 500-document batch of long documents is far below).
pub const MAX_FRAME_BYTES: usize = 256 << 20;

/// Content hints held for streams that have not sent them yet (a stream further behind misses
/// them: they are hints).
const CONTENT_HINTS: usize = 4;

/// One frame of the replication stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Frame {
    /// First frame of a stream.
    Hello(Hello),
    /// One committed change.
    Change(ChangeFrame),
    /// Nothing new: the primary is at `epoch` (every change up to it was sent on this stream).
    Heartbeat {
        /// The last epoch sent.
        epoch: u64,
    },
    /// A hint: the content of a document batch the primary is indexing now, not yet committed
    /// (it may never be). A replica may index it ahead, outside every scope; the change that
    /// publishes it carries the same content again, so nothing depends on the hint.
    Content {
        /// The batch's document versions.
        documents: Vec<WireDocument>,
    },
}

/// What a replica learns when its stream opens.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// This stream's session: leases are renewed and changes acknowledged under it.
    pub session: String,
    /// The primary's lineage.
    pub lineage: String,
    /// The epoch the stream starts after.
    pub since: u64,
    /// The lease each renewal grants, in milliseconds.
    pub lease_ms: u64,
    /// `replica.sync` of the primary: `none` means the replica serves without a lease.
    pub sync: String,
}

/// One committed change with the content it adds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChangeFrame {
    /// Its epoch.
    pub epoch: u64,
    /// JSON array of its mutations.
    pub mutations: Vec<u8>,
    /// The document versions it publishes, as the store's rows.
    pub documents: Vec<WireDocument>,
    /// The primary's ordinal counter after it.
    pub next_ordinal: u32,
    /// Whether its writer waits for the replicas' acknowledgements (`replica.sync`).
    pub tracked: bool,
    /// Whether it can remove access (delete, revoke, a retired version).
    pub removes_access: bool,
}

/// One document version's rows ([`EncodedDocument`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireDocument {
    /// Ordinal.
    pub ordinal: u32,
    /// bincode of its chunks.
    pub chunks: Vec<u8>,
    /// Its vectors, little-endian f32.
    pub vectors: Vec<u8>,
    /// bincode of its chunks' sentence vectors, or empty.
    pub sentences: Vec<u8>,
    /// bincode of its chunks' layout maps, or empty (added with issue 49: a primary and its
    /// replicas run the same build).
    pub layouts: Vec<u8>,
}

impl WireDocument {
    fn of(document: &EncodedDocument) -> Self {
        Self {
            ordinal: document.ordinal,
            chunks: document.chunks.clone(),
            vectors: document.vectors.clone(),
            sentences: document.sentences.clone(),
            layouts: document.layouts.clone(),
        }
    }

    /// The store's rows again.
    pub fn into_encoded(self) -> EncodedDocument {
        let Self { ordinal, chunks, vectors, sentences, layouts } = self;
        EncodedDocument { ordinal, chunks, vectors, sentences, layouts }
    }
}

impl ChangeFrame {
    /// The change entries and documents, decoded; an error names what is malformed.
    pub fn decode(self) -> Result<(Vec<AclChange>, Vec<EncodedDocument>), String> {
        let mutations: Vec<AclMutation> = serde_json::from_slice(&self.mutations)
            .map_err(|error| format!("change of epoch {}: {error}", self.epoch))?;
        let changes = mutations.into_iter().map(|mutation| AclChange { epoch: self.epoch, mutation }).collect();
        let documents = self.documents.into_iter().map(WireDocument::into_encoded).collect();
        Ok((changes, documents))
    }
}

/// A frame as sent: its length, then its bincode.
pub fn encode_frame(frame: &Frame) -> Bytes {
    let body = bincode::serde::encode_to_vec(frame, bincode::config::standard()).expect("frames are plain data");
    let mut bytes = Vec::with_capacity(4 + body.len());
    bytes.extend_from_slice(&(body.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&body);
    Bytes::from(bytes)
}

/// Cuts frames out of the bytes of a stream as they arrive.
#[derive(Default)]
pub struct FrameReader {
    buffer: Vec<u8>,
}

impl FrameReader {
    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The next whole frame, if one has arrived; an error for a frame that is too long or does
    /// not decode (the stream cannot be trusted past it).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, String> {
        let Some(header) = self.buffer.get(..4) else { return Ok(None) };
        let length = u32::from_le_bytes(header.try_into().expect("4 bytes")) as usize;
        if length > MAX_FRAME_BYTES {
            return Err(format!("a frame of {length} bytes is longer than {MAX_FRAME_BYTES}"));
        }
        if self.buffer.len() < 4 + length {
            return Ok(None);
        }
        let (frame, read) =
            bincode::serde::decode_from_slice::<Frame, _>(&self.buffer[4..4 + length], bincode::config::standard())
                .map_err(|error| format!("a frame does not decode: {error}"))?;
        if read != length {
            return Err("a frame has trailing bytes".into());
        }
        self.buffer.drain(..4 + length);
        Ok(Some(frame))
    }
}

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

    fn push(&self, epoch: u64, frame: Bytes) {
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
            self.leases.track(committed.epoch);
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

/// One replica stream's lease.
#[derive(Clone, Debug)]
struct Lease {
    replica: String,
    acked: u64,
    /// When the lease runs out (at or before `opened`: never granted).
    expires: Instant,
    open: bool,
}

struct LeaseState {
    sessions: HashMap<String, Lease>,
    /// The highest tracked epoch: a lease is granted only to a session that applied it.
    required: u64,
}

/// The answer to a renewal.
#[derive(Debug, PartialEq, Eq)]
pub enum Renewal {
    /// The lease runs for this long from when the request arrived.
    Granted(Duration),
    /// Not renewed: the session has not applied `required` yet (or its stream is closed).
    Refused {
        /// The epoch it must apply first.
        required: u64,
    },
    /// No such session (the primary restarted, or the lease ran out after its stream closed).
    Unknown,
}

/// The leases of a primary's replica sessions (see the module's invariants).
pub struct Leases {
    state: Mutex<LeaseState>,
    changed: tokio::sync::Notify,
    lease: Duration,
    /// Tracked changes wait at least until then (leases of a previous process).
    grace_until: Instant,
}

/// A session's lease as `/readyz` reports it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LeaseReport {
    /// The replica (its token's subject).
    pub replica: String,
    /// The stream's session.
    pub session: String,
    /// Whether its stream is open.
    pub connected: bool,
    /// The last epoch it acknowledged.
    pub applied_epoch: u64,
    /// Milliseconds its lease still runs (0: none).
    pub lease_remaining_ms: u64,
}

impl Leases {
    /// No session yet; tracked changes wait until `now + lease` at least.
    pub fn new(lease: Duration, now: Instant) -> Self {
        Self {
            state: Mutex::new(LeaseState { sessions: HashMap::new(), required: 0 }),
            changed: tokio::sync::Notify::new(),
            lease,
            grace_until: now + lease,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LeaseState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The lease a renewal grants.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Opens a session for `replica`'s new stream, which starts after `applied`; no lease yet.
    pub fn open(&self, replica: &str, applied: u64, now: Instant) -> String {
        let session = uuid::Uuid::new_v4().simple().to_string();
        let mut state = self.state();
        state.sessions.retain(|_, lease| lease.open || lease.expires > now);
        state
            .sessions
            .insert(session.clone(), Lease { replica: replica.to_owned(), acked: applied, expires: now, open: true });
        session
    }

    /// The session's stream closed; its lease runs on until it expires.
    pub fn close(&self, session: &str) {
        if let Some(lease) = self.state().sessions.get_mut(session) {
            lease.open = false;
        }
        self.changed.notify_waiters();
    }

    /// A change of `epoch` waits for the replicas' acknowledgements.
    pub fn track(&self, epoch: u64) {
        let mut state = self.state();
        state.required = state.required.max(epoch);
    }

    /// `replica`'s session reports it applied everything up to `applied` (received at `now`): it
    /// is acknowledged, and the lease renewed when the session may hold one. A session is
    /// renewed only by the replica that opened it: another replica's token gets
    /// [`Renewal::Unknown`], as for a session that does not exist (issue 57: a `replica-1` token
    /// renewed `replica-2`'s lease with any epoch, and the next revoke did not wait for it).
    pub fn renew(&self, replica: &str, session: &str, applied: u64, now: Instant) -> Renewal {
        let mut state = self.state();
        let required = state.required;
        let Some(lease) = state.sessions.get_mut(session).filter(|lease| lease.replica == replica) else {
            return Renewal::Unknown;
        };
        lease.acked = lease.acked.max(applied);
        let renewal = if lease.open && lease.acked >= required {
            lease.expires = now + self.lease;
            Renewal::Granted(self.lease)
        } else {
            Renewal::Refused { required }
        };
        drop(state);
        self.changed.notify_waiters();
        renewal
    }

    /// When waiting for `epoch` must go on: the earliest moment something can change while a
    /// leased session has not acknowledged it (or the start-up grace runs), `None` when done.
    fn pending(&self, epoch: u64, now: Instant) -> Option<Instant> {
        let state = self.state();
        let leased = state.sessions.values().filter(|lease| lease.expires > now && lease.acked < epoch);
        let earliest = leased.map(|lease| lease.expires).min();
        match earliest {
            Some(expires) if now < self.grace_until => Some(expires.min(self.grace_until)),
            None if now < self.grace_until => Some(self.grace_until),
            other => other,
        }
    }

    /// Returns once every session holding a live lease acknowledged the tracked changes up to
    /// `epoch` (a no-op returns the current epoch: it waits for the tracked changes before it),
    /// or its lease ran out. Bounded by one lease (and the start-up grace).
    pub async fn settle(&self, epoch: u64) {
        let target = epoch.min(self.state().required);
        if target == 0 {
            return;
        }
        let started = Instant::now();
        // The sessions this write waits for: leased, not yet acknowledging it.
        let waited_for: Vec<String> = {
            let state = self.state();
            let pending = state.sessions.iter().filter(|(_, lease)| lease.expires > started && lease.acked < target);
            pending.map(|(session, _)| session.clone()).collect()
        };
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let Some(deadline) = self.pending(target, Instant::now()) else { break };
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep_until(deadline.into()) => {}
            }
        }
        // Those whose lease ran out instead of acknowledging.
        let state = self.state();
        let expired =
            waited_for.iter().filter_map(|session| state.sessions.get(session)).filter(|lease| lease.acked < target);
        for lease in expired {
            metrics::counter!("warrant_replication_unacknowledged_total", "replica" => lease.replica.clone())
                .increment(1);
        }
        drop(state);
        metrics::histogram!("warrant_replication_ack_wait_seconds").record(started.elapsed().as_secs_f64());
    }

    /// Every session known, for `/readyz` and the metrics.
    pub fn report(&self, now: Instant) -> Vec<LeaseReport> {
        let state = self.state();
        let mut reports: Vec<LeaseReport> = state
            .sessions
            .iter()
            .map(|(session, lease)| LeaseReport {
                replica: lease.replica.clone(),
                session: session.clone(),
                connected: lease.open,
                applied_epoch: lease.acked,
                lease_remaining_ms: lease.expires.saturating_duration_since(now).as_millis() as u64,
            })
            .collect();
        reports.sort_by(|a, b| (&a.replica, &a.session).cmp(&(&b.replica, &b.session)));
        reports
    }
}

#[cfg(test)]
mod tests;
