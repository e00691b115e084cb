//! The leases of a primary's replicas: each replica renews one for its open stream
//! (`POST /v1/replica/lease`) and acknowledges what it applied with it, and a change that can
//! remove access is acknowledged to its writer only once every replica holding a live lease
//! applied it, or that lease ran out ([`Leases::settle`]).
//!
//! Invariants:
//! - a lease is granted or renewed only to a session whose stream is open and that has applied
//!   every tracked change (`replica.sync`): a replica that misses a revoke cannot stay leased, so a
//!   revoke waits at most one lease for it; a lease outlives its stream until it expires;
//! - after the primary starts, tracked changes wait one lease more (a previous process of the
//!   primary may have granted leases that are still running);
//! - replicas are named by the subjects `auth.replica_subjects` lists (metric labels stay bounded).

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

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
    /// Each tenant's tracked epochs that some live lease may not have acknowledged yet: a write
    /// of that tenant waits for them, a write of another tenant never does.
    tracked: HashMap<String, BTreeSet<u64>>,
}

impl LeaseState {
    /// Forgets the tracked epochs every live lease acknowledged at `now`: a session without a
    /// live lease can be leased again only once it applied `required`, so they are settled
    /// for good (not before the start-up grace ends: leases of a previous process are unknown).
    fn forget_settled(&mut self, now: Instant, grace_until: Instant) {
        if now < grace_until {
            return;
        }
        let live = self.sessions.values().filter(|lease| lease.expires > now);
        let floor = live.map(|lease| lease.acked).min().unwrap_or(u64::MAX);
        self.tracked.retain(|_, epochs| {
            epochs.retain(|epoch| *epoch > floor);
            !epochs.is_empty()
        });
    }
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
            state: Mutex::new(LeaseState { sessions: HashMap::new(), required: 0, tracked: HashMap::new() }),
            changed: tokio::sync::Notify::new(),
            lease,
            grace_until: now + lease,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LeaseState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Each tenant's tracked epochs not yet known settled, sorted (for tests).
    #[cfg(test)]
    pub(super) fn tracked(&self) -> Vec<(String, Vec<u64>)> {
        let state = self.state();
        let mut tracked: Vec<_> =
            state.tracked.iter().map(|(tenant, epochs)| (tenant.clone(), epochs.iter().copied().collect())).collect();
        tracked.sort();
        tracked
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

    /// A change of `epoch`, written into `tenants`, waits for the replicas' acknowledgements
    /// (and so do the later writes of those tenants that settle at or above it).
    pub fn track<'a>(&self, epoch: u64, tenants: impl IntoIterator<Item = &'a str>) {
        let mut state = self.state();
        state.required = state.required.max(epoch);
        state.forget_settled(Instant::now(), self.grace_until);
        for tenant in tenants {
            state.tracked.entry(tenant.to_owned()).or_default().insert(epoch);
        }
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
    pub(super) fn pending(&self, epoch: u64, now: Instant) -> Option<Instant> {
        let state = self.state();
        let leased = state.sessions.values().filter(|lease| lease.expires > now && lease.acked < epoch);
        let earliest = leased.map(|lease| lease.expires).min();
        match earliest {
            Some(expires) if now < self.grace_until => Some(expires.min(self.grace_until)),
            None if now < self.grace_until => Some(self.grace_until),
            other => other,
        }
    }

    /// Returns once every session holding a live lease acknowledged the tracked changes of
    /// `tenant` up to `epoch` (a no-op returns the current epoch: it waits for its tenant's
    /// tracked changes before it), or its lease ran out. Bounded by one lease (and the start-up
    /// grace). A write waits for nothing when its tenant has no tracked change left unsettled:
    /// never for another tenant's (issue 59: under `revocations` an upsert of a new document in
    /// one tenant waited out a dead replica's lease behind another tenant's revoke).
    pub async fn settle(&self, tenant: &str, epoch: u64) {
        let target = {
            let state = self.state();
            let tracked = state.tracked.get(tenant).and_then(|epochs| epochs.range(..=epoch).next_back().copied());
            tracked.unwrap_or(0)
        };
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
