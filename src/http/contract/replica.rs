//! Wire type of a replica's freshness in `/readyz`: the mirror of [`crate::replication::status::ReplicaReport`]
//! that carries the OpenAPI schema.

use serde::Serialize;
use utoipa::ToSchema;

use crate::replication::status as layer;

/// Freshness as reported by `/readyz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReplicaReport {
    /// Whether the replica may answer (within its lag bound).
    pub fresh: bool,
    /// Seconds since the last successful poll (since start when there was none).
    pub lag_seconds: f64,
    /// Bound on the lag, seconds.
    pub max_lag_seconds: f64,
    /// The primary's epoch at the last successful poll.
    pub primary_epoch: u64,
    /// Milliseconds its lease still runs by its own count (0: none held); absent when the
    /// primary grants none (`replica.sync = "none"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_remaining_ms: Option<u64>,
}

impl From<layer::ReplicaReport> for ReplicaReport {
    fn from(report: layer::ReplicaReport) -> Self {
        let layer::ReplicaReport { fresh, lag_seconds, max_lag_seconds, primary_epoch, lease_remaining_ms } = report;
        Self { fresh, lag_seconds, max_lag_seconds, primary_epoch, lease_remaining_ms }
    }
}

/// One replica stream session of a primary, in `/readyz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReplicaLease {
    /// The replica (its token's subject, one of `auth.replica_subjects`).
    pub replica: String,
    /// Whether its stream is open. (No session id: `/readyz` is unauthenticated, and a session
    /// is renewed only by its own replica's token.)
    pub connected: bool,
    /// The last epoch it acknowledged.
    pub applied_epoch: u64,
    /// Changes it has not acknowledged (the primary's epoch less `applied_epoch`).
    pub lag_changes: u64,
    /// Milliseconds since the oldest change it has not acknowledged was committed (0: none).
    pub lag_ms: u64,
    /// Milliseconds its lease still runs (0: none).
    pub lease_remaining_ms: u64,
}

impl From<(crate::replication::leases::LeaseReport, u64, u64)> for ReplicaLease {
    /// A session's report with the primary's epoch and the session's lag in milliseconds.
    fn from((report, epoch, lag_ms): (crate::replication::leases::LeaseReport, u64, u64)) -> Self {
        let crate::replication::leases::LeaseReport { replica, connected, applied_epoch, lease_remaining_ms, .. } =
            report;
        Self {
            replica,
            connected,
            applied_epoch,
            lag_changes: epoch.saturating_sub(applied_epoch),
            lag_ms,
            lease_remaining_ms,
        }
    }
}
