//! Progress of opening the data directory, which `/readyz` reports while the server starts
//! (the HTTP port answers `/healthz` and `/readyz` during the load; see `app::serve`). One
//! process opens one data directory, so the progress is process-wide.
//!
//! Invariants: the counters only move forward within one open; reading them never blocks the
//! load (relaxed atomics, no lock).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::Instant;

/// Where an open is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Nothing opened yet.
    Starting,
    /// Reading the store: the ACL checkpoint and change log, the chunk rows.
    Store,
    /// Loading the index set's shards and applying their journals.
    IndexSet,
    /// Indexing the chunks the set and its journal lack (or every chunk, without a set).
    Indexing,
    /// Opened.
    Done,
}

const PHASES: [Phase; 5] = [Phase::Starting, Phase::Store, Phase::IndexSet, Phase::Indexing, Phase::Done];

static PHASE: AtomicU8 = AtomicU8::new(0);
static SHARDS: AtomicUsize = AtomicUsize::new(0);
static SHARDS_LOADED: AtomicUsize = AtomicUsize::new(0);
static CHUNKS: AtomicUsize = AtomicUsize::new(0);
static STARTED: OnceLock<Instant> = OnceLock::new();

/// What `/readyz` shows of an open in progress.
#[derive(Clone, Copy, Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Progress {
    /// The phase.
    pub phase: Phase,
    /// Shards of the index set loaded, of `shards`.
    pub shards_loaded: usize,
    /// Shards to load (0 until known).
    pub shards: usize,
    /// Live chunks read from the store (0 until the rows are read).
    pub chunks: usize,
    /// Seconds since the open began.
    pub seconds: f64,
}

/// Enters `phase`.
pub fn enter(phase: Phase) {
    let _ = STARTED.get_or_init(Instant::now);
    let index = PHASES.iter().position(|known| *known == phase).unwrap_or(0) as u8;
    PHASE.fetch_max(index, Ordering::Relaxed);
}

/// The store held `chunks` live chunks and the index set has `shards` shards to load.
pub fn sized(chunks: usize, shards: usize) {
    CHUNKS.store(chunks, Ordering::Relaxed);
    SHARDS.store(shards, Ordering::Relaxed);
}

/// One more shard of the index set is loaded.
pub fn shard_loaded() {
    SHARDS_LOADED.fetch_add(1, Ordering::Relaxed);
}

/// The progress now.
pub fn now() -> Progress {
    let phase = PHASES[usize::from(PHASE.load(Ordering::Relaxed)).min(PHASES.len() - 1)];
    Progress {
        phase,
        shards_loaded: SHARDS_LOADED.load(Ordering::Relaxed),
        shards: SHARDS.load(Ordering::Relaxed),
        chunks: CHUNKS.load(Ordering::Relaxed),
        seconds: STARTED.get().map_or(0.0, |started| started.elapsed().as_secs_f64()),
    }
}
