//! What a replica knows about its freshness ([`ReplicaStatus`]), shared by its follower
//! (`super::follower`) and the HTTP layer, which answers 503 `replica_stale` while it is not
//! fresh and before returning what a request computed on a state that moved under it.
//!
//! Fresh: the replica holds a lease (when leases are on) and the stream brought it to the
//! primary's epoch within `replica.max_lag_ms` (a change or a heartbeat). The replica counts a
//! granted lease from the moment it *sent* the renewal, less `replica.lease_margin_ms`, on the
//! monotonic clock, so it stops serving before the primary deems the lease gone.
//!
//! What a request saw ([`Observed`], taken when it starts, checked before it returns): the
//! generation, which moves every time the replica goes stale for divergence (another lineage,
//! an epoch that went backwards, changes no longer kept: every request in flight is failed),
//! and the last removal ([`super::removals`]): a change that can remove access is recorded with
//! its reach once applied and before it is acknowledged, and fails only the requests in flight
//! whose principal it can take something from (its tenant, and its user or one of its groups).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::domain::Principal;

use super::removals::{Reach, Removals};

/// Never-yet marker of `last_success_ms` and `lease_until_ms`.
const NEVER: u64 = u64::MAX;

/// What a replica knows about its freshness. Shared by the follower and the HTTP layer.
pub struct ReplicaStatus {
    /// When it was made: every instant is kept as milliseconds after it.
    pub(super) started: Instant,
    max_lag: Duration,
    /// Milliseconds after `started` of the last moment the stream left this replica at the
    /// primary's epoch ([`NEVER`] before one).
    last_success_ms: AtomicU64,
    /// The primary's epoch in the last frame.
    primary_epoch: AtomicU64,
    /// Whether the last frame left this replica at the primary's epoch.
    in_sync: AtomicBool,
    /// Moves every time the replica goes stale for divergence; a request that saw another
    /// generation at its start must not return what it computed.
    generation: AtomicU64,
    /// The removals applied, with their reach: a request that one of those recorded after its
    /// start can affect must not return what it computed.
    removals: Removals,
    /// Whether serving needs a lease (the primary's `replica.sync` is not `none`).
    leased: AtomicBool,
    /// Milliseconds after `started` when the lease runs out, by this replica's count ([`NEVER`]:
    /// none held).
    lease_until_ms: AtomicU64,
    /// The highest epoch applied whose removals are recorded: what a lease renewal may
    /// acknowledge ([`ReplicaStatus::settle`]).
    settled_epoch: AtomicU64,
}

/// What a request saw of a replica when it started ([`ReplicaStatus::observe`]); the default is
/// a request on a server that is no replica.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    generation: u64,
    removals: u64,
    /// Whose request it is (`None`: anyone's, every removal counts).
    principal: Option<Principal>,
}

/// Freshness as reported by `/readyz` (sent as `crate::http::contract::replica::ReplicaReport`).
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaReport {
    /// Whether the replica may answer (a lease, and within its lag bound).
    pub fresh: bool,
    /// Seconds since the stream last left it at the primary's epoch (since start when never).
    pub lag_seconds: f64,
    /// Bound on the lag, seconds.
    pub max_lag_seconds: f64,
    /// The primary's epoch in the last frame.
    pub primary_epoch: u64,
    /// Milliseconds its lease still runs by its own count (0: none; absent when the primary
    /// grants none, `replica.sync = "none"`).
    pub lease_remaining_ms: Option<u64>,
}

impl ReplicaStatus {
    /// A status that is stale until the stream brought the replica to the primary's epoch and
    /// (unless the primary says leases are off) a lease was granted.
    pub fn new(max_lag: Duration) -> Self {
        Self {
            started: Instant::now(),
            max_lag,
            last_success_ms: AtomicU64::new(NEVER),
            primary_epoch: AtomicU64::new(0),
            in_sync: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            removals: Removals::default(),
            leased: AtomicBool::new(true),
            lease_until_ms: AtomicU64::new(NEVER),
            settled_epoch: AtomicU64::new(0),
        }
    }

    fn since_start(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.started).as_millis() as u64
    }

    /// Goes stale at once (divergence detected: another lineage, an epoch that went backwards,
    /// changes no longer kept) and moves the generation; the lease is dropped.
    pub fn mark_stale(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.in_sync.store(false, Ordering::SeqCst);
        self.last_success_ms.store(NEVER, Ordering::SeqCst);
        self.lease_until_ms.store(NEVER, Ordering::SeqCst);
    }

    /// Records a change that can remove access, applied (its reach, [`super::removals::reach_of`]):
    /// what a request it can affect computed on the state before it must not be returned.
    pub fn removed(&self, reaches: Vec<Reach>) {
        self.removals.record(reaches);
    }

    /// Every change up to `epoch` is applied and its removals are recorded
    /// ([`ReplicaStatus::removed`]): the lease renewer may acknowledge it. Acknowledging the
    /// engine's epoch instead would let the primary return a revoke whose removal this replica
    /// applied but has not yet recorded, while a request that read the state before it could
    /// still pass its final check.
    pub fn settle(&self, epoch: u64) {
        self.settled_epoch.store(epoch, Ordering::SeqCst);
    }

    /// The epoch a lease renewal acknowledges (see [`ReplicaStatus::settle`]).
    pub fn settled_epoch(&self) -> u64 {
        self.settled_epoch.load(Ordering::SeqCst)
    }

    /// The current generation (see [`ReplicaStatus::mark_stale`]).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// What a request of `principal` starting now sees, to be checked with
    /// [`ReplicaStatus::unchanged_for`] before it returns.
    pub fn observe(&self, principal: &Principal) -> Observed {
        Observed { generation: self.generation(), removals: self.removals.last(), principal: Some(principal.clone()) }
    }

    /// Whether what a request computed since `observed` may be returned: no divergence since,
    /// and no removal since that can take anything from its principal.
    pub fn unchanged_for(&self, observed: &Observed) -> bool {
        self.generation() == observed.generation
            && !self.removals.affect_since(observed.removals, observed.principal.as_ref())
    }

    /// Whether serving needs a lease (off only when the primary's `replica.sync` is `none`).
    pub fn require_lease(&self, required: bool) {
        self.leased.store(required, Ordering::SeqCst);
    }

    /// A renewal sent at `sent` was granted for `lease`: the replica holds it until
    /// `sent + lease - margin` (never less than it already holds).
    pub fn extend_lease(&self, sent: Instant, lease: Duration, margin: Duration) {
        let until = self.since_start(sent + lease.saturating_sub(margin));
        let current = self.lease_until_ms.load(Ordering::SeqCst);
        if current == NEVER || until > current {
            self.lease_until_ms.store(until, Ordering::SeqCst);
        }
    }

    /// Records that the stream left this replica at `local_epoch` at `now`, the primary at
    /// `primary_epoch`.
    pub fn record_poll(&self, now: Instant, local_epoch: u64, primary_epoch: u64) {
        self.primary_epoch.store(primary_epoch, Ordering::SeqCst);
        let in_sync = local_epoch == primary_epoch;
        self.in_sync.store(in_sync, Ordering::SeqCst);
        if in_sync {
            self.last_success_ms.store(self.since_start(now), Ordering::SeqCst);
        }
    }

    /// Time since the stream last left the replica in sync (since start when never).
    pub fn lag(&self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.started);
        match self.last_success_ms.load(Ordering::SeqCst) {
            NEVER => elapsed,
            success => elapsed.saturating_sub(Duration::from_millis(success)),
        }
    }

    /// Milliseconds the lease still runs at `now` (0 when none).
    fn lease_remaining_ms(&self, now: Instant) -> u64 {
        match self.lease_until_ms.load(Ordering::SeqCst) {
            NEVER => 0,
            until => until.saturating_sub(self.since_start(now)),
        }
    }

    /// Whether answers may be served: in sync within the bound and, when leases are on, a lease
    /// running.
    pub fn is_fresh(&self, now: Instant) -> bool {
        let synced = self.last_success_ms.load(Ordering::SeqCst) != NEVER && self.lag(now) <= self.max_lag;
        synced && (!self.leased.load(Ordering::SeqCst) || self.lease_remaining_ms(now) > 0)
    }

    /// The `/readyz` view (also sets `warrant_replica_lag_seconds` and
    /// `warrant_replica_lease_remaining_seconds`).
    pub fn report(&self) -> ReplicaReport {
        let now = Instant::now();
        let lag = self.lag(now).as_secs_f64();
        let lease = self.leased.load(Ordering::SeqCst).then(|| self.lease_remaining_ms(now));
        metrics::gauge!("warrant_replica_lag_seconds").set(lag);
        metrics::gauge!("warrant_replica_lease_remaining_seconds").set(lease.unwrap_or(0) as f64 / 1000.0);
        ReplicaReport {
            fresh: self.is_fresh(now),
            lag_seconds: lag,
            max_lag_seconds: self.max_lag.as_secs_f64(),
            primary_epoch: self.primary_epoch.load(Ordering::SeqCst),
            lease_remaining_ms: lease,
        }
    }
}
