//! Replica mode: a server restored from a snapshot polls its primary's ACL change feed
//! (`GET /v1/admin/acl/changes?since=<local epoch>` with a service token of role `replica`) and
//! applies the changes in order with [`crate::acl::AclStore::apply_remote`].
//!
//! Fail closed: the replica is *fresh* only while its last successful poll is at most
//! `replica.max_lag_ms` old and left it at the primary's epoch. Before the first successful poll,
//! when the primary is unreachable, answers errors, or reports an epoch the replica cannot reach
//! (behind or diverged), freshness lapses once the bound passes, and the HTTP layer answers
//! `/v1/answer` and `/v1/retrieve` with 503 `replica_stale`. An upsert on the primary whose new
//! version the replica has no chunks for still tombstones the old version here: the document
//! disappears rather than being served stale.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::acl::AclChange;
use crate::config::ReplicaSettings;
use crate::retrieval::Engine;

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
}

/// Freshness as reported by `/readyz`.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
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
        }
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
}

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
}

/// Spawns the follower on the current (actix/tokio) runtime. The token is read from the
/// environment variable `settings.token_env`; without one the replica stays stale (fail closed).
pub fn spawn_follower(engine: Arc<Engine>, settings: &ReplicaSettings, status: Arc<ReplicaStatus>) {
    let token = crate::outbound::api_key_from_env(&settings.token_env);
    if token.is_none() {
        tracing::error!(variable = %settings.token_env, "replica token variable is unset or empty: the replica stays stale");
    }
    let base = settings.follow.clone();
    let interval = Duration::from_millis(settings.poll_interval_ms);
    let timeout = Duration::from_millis(settings.max_lag_ms.clamp(200, 10_000));
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
                match poll(&client, &base, token, timeout, &engine).await {
                    Ok((local, primary)) => {
                        status.record_poll(Instant::now(), local, primary);
                        if local != primary {
                            tracing::warn!(local, primary, "replica epoch differs from the primary's after a poll");
                        }
                        failures = 0;
                    }
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
) -> Result<(u64, u64), PollError> {
    let since = engine.acl().epoch();
    let url = crate::outbound::endpoint(base, "v1/admin/acl/changes");
    let response = client
        .get(url)
        .query(&[("since", since)])
        .bearer_auth(token)
        .timeout(timeout)
        .send()
        .await
        .map_err(|error| PollError::Unreachable(crate::outbound::describe(error)))?;
    if !response.status().is_success() {
        return Err(PollError::Status(response.status().as_u16()));
    }
    let feed: Feed = response.json().await.map_err(|error| PollError::Malformed(crate::outbound::describe(error)))?;
    let local = if feed.changes.is_empty() {
        engine.acl().epoch()
    } else {
        engine.apply_remote(&feed.changes).await.map_err(|error| PollError::Apply(error.to_string()))?
    };
    Ok((local, feed.acl_epoch))
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
