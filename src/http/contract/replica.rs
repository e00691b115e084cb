//! Wire type of a replica's freshness in `/readyz`: the mirror of [`crate::replica::ReplicaReport`]
//! that carries the OpenAPI schema.

use serde::Serialize;
use utoipa::ToSchema;

use crate::replica as layer;

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
}

impl From<layer::ReplicaReport> for ReplicaReport {
    fn from(report: layer::ReplicaReport) -> Self {
        let layer::ReplicaReport { fresh, lag_seconds, max_lag_seconds, primary_epoch } = report;
        Self { fresh, lag_seconds, max_lag_seconds, primary_epoch }
    }
}
