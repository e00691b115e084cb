//! The database's parts as `/readyz` sees them (issue 59): the server the backend connects to (on
//! Citus, the coordinator) and, on Citus, each worker.
//!
//! Invariants:
//! - Only the coordinator decides readiness. Its probe reads the coordinator's own catalog and
//!   `warrant_meta` / `warrant_migrations` ([`PROBE_COORDINATOR`]: reference tables on Citus, read
//!   from the coordinator's own placement), and reaches no worker: with one worker frozen or down
//!   the node still serves the tenants of the others, and says so.
//! - On Citus each primary worker of `pg_dist_node` is probed from the coordinator
//!   ([`PROBE_WORKER`], `citus_check_connection_to_node`: a connection and `SELECT 1`), all at
//!   once, and reported with its outcome and since when it fails; a failing worker never makes the
//!   node unready.
//! - Every probe runs on a connection of its own, outside the pool (a pool held by a frozen
//!   worker's statements cannot delay it), made with the backend's URL and TLS and closed after
//!   the probe, and is bounded twice: by the probe's `statement_timeout` on the server (which
//!   cancels a coordinator's wait for a frozen worker itself) and by the caller's deadline here.
//!   [`PostgresBackend::health`] returns within its bound whatever the database does.
//! - When a part started failing is kept per database (its lineage) and part, process-wide, and
//!   cleared by the part's next success.
//! - What the unauthenticated `/readyz` shows of a part names no network: the server by its role
//!   (a single server or a Citus coordinator), a worker by its `pg_dist_node` `nodeid` and
//!   `groupid` ([`WorkerIdentity`]). A part's `host:port` goes to the log alone, at warn, with
//!   each failed probe of it.
//! - The highest tenant epoch is read on a single server only: on Citus `warrant_tenants` is
//!   distributed, so that statement would wait on every worker (one frozen worker would hold the
//!   probe, as issue 59's first `/readyz` did); `/readyz` then reports epoch 0.
//! - The probes' statements are here, beside the probe: they read catalogs and the two reference
//!   tables only, never a tenant table, and bind every value.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::PostgresBackend;
use super::fault::Fault;
use crate::retrieval::DatabaseCause;

/// The coordinator's probe: the database's lineage ($1: `lineage`), its highest applied
/// migration, and whether it is a Citus coordinator. Reads no distributed table.
pub const PROBE_COORDINATOR: &str = "SELECT (SELECT value FROM warrant_meta WHERE key = $1), \
     (SELECT coalesce(max(version), 0) FROM warrant_migrations), \
     to_regclass('pg_catalog.pg_dist_node') IS NOT NULL";

/// The workers of a Citus coordinator (its own catalog): primaries, in the order they joined,
/// with their `nodeid` and `groupid`.
pub const PROBE_WORKERS: &str = "SELECT nodename, nodeport, isactive, nodeid, groupid FROM pg_dist_node \
     WHERE groupid <> 0 AND noderole = 'primary' ORDER BY nodeid";

/// One worker's probe, run on the coordinator: a connection to the worker ($1 host, $2 port) and
/// `SELECT 1` on it; false when the worker refused or dropped it.
pub const PROBE_WORKER: &str = "SELECT citus_check_connection_to_node($1, $2)";

/// The highest tenant epoch on a single PostgreSQL server (not asked of Citus, where it reads a
/// shard on every worker), in the database-wide scope of row-level security.
const HIGHEST_EPOCH_ENTERED: [&str; 2] = [super::sql::ENTER_DATABASE, super::sql::HIGHEST_EPOCH];

/// How a part answered its probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartOutcome {
    /// It answered.
    Ok,
    /// No answer within the bound (frozen, partitioned, overloaded); the probe was abandoned.
    Timeout,
    /// It refused or dropped the connection (down, restarting).
    Unreachable,
    /// It answered with an error, or its schema is not this binary's.
    Error,
    /// A worker the coordinator's metadata marks inactive (not probed).
    Inactive,
    /// Not probed: the coordinator's probe failed first.
    Unknown,
}

impl PartOutcome {
    /// `ok`, `timeout`, `unreachable`, `error`, `inactive` or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Timeout => "timeout",
            Self::Unreachable => "unreachable",
            Self::Error => "error",
            Self::Inactive => "inactive",
            Self::Unknown => "unknown",
        }
    }

    /// The error code a request reaching this part gets now (`storage_timeout` or
    /// `storage_unavailable`); none when it answers or was not probed.
    pub fn code(self) -> Option<&'static str> {
        match self {
            Self::Ok | Self::Unknown => None,
            Self::Timeout => Some("storage_timeout"),
            Self::Unreachable | Self::Error | Self::Inactive => Some("storage_unavailable"),
        }
    }

    fn of_cause(cause: DatabaseCause) -> Self {
        match cause {
            DatabaseCause::Timeout => Self::Timeout,
            DatabaseCause::Connection => Self::Unreachable,
            DatabaseCause::Busy | DatabaseCause::Other => Self::Error,
        }
    }
}

/// A Citus worker as the coordinator's `pg_dist_node` names it: what `/readyz` shows of it
/// instead of its address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerIdentity {
    /// `pg_dist_node.nodeid`.
    pub node_id: i32,
    /// `pg_dist_node.groupid` (the shard group the worker holds; its replica, if any, shares it).
    pub group_id: i32,
}

/// One part of the database and how its probe went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartHealth {
    /// `host:port` (the coordinator's from the backend's URL, a worker's from `pg_dist_node`):
    /// logged when the part fails, never shown on `/readyz`.
    pub address: String,
    /// A worker's identity in `pg_dist_node` (`None` for the server warrant connects to).
    pub worker: Option<WorkerIdentity>,
    /// How it answered.
    pub outcome: PartOutcome,
    /// How long its probe took (at most the bound).
    pub elapsed: Duration,
    /// How long it has been failing (since its first failed probe after its last success);
    /// `None` while it answers.
    pub failing_for: Option<Duration>,
}

/// The database's parts: the coordinator (readiness) and, on Citus, every worker (reported).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatabaseHealth {
    /// The server the backend connects to (on Citus the coordinator).
    pub coordinator: PartHealth,
    /// Whether that server is a Citus coordinator (`None` when it did not answer).
    pub citus: Option<bool>,
    /// The highest migration the database holds (`None` when the coordinator did not answer).
    pub schema_version: Option<u32>,
    /// The highest tenant epoch, on a single PostgreSQL server only (`None` on Citus or when the
    /// coordinator did not answer).
    pub acl_epoch: Option<u64>,
    /// On Citus: each primary worker; `None` on a single PostgreSQL server or when the
    /// coordinator did not answer.
    pub workers: Option<Vec<PartHealth>>,
}

impl DatabaseHealth {
    /// Whether the node can serve: the coordinator answered with this binary's schema and this
    /// backend's database (its workers do not count).
    pub fn ready(&self) -> bool {
        self.coordinator.outcome == PartOutcome::Ok
    }
}

/// The highest migration this binary applies.
fn expected_schema_version() -> Option<u32> {
    super::MIGRATIONS.iter().map(|(version, ..)| *version).max().and_then(|version| u32::try_from(version).ok())
}

/// Since when each (lineage, part) fails: process-wide.
static FAILING_SINCE: Mutex<BTreeMap<(String, String), Instant>> = Mutex::new(BTreeMap::new());

/// Records `outcome` of `part` of the database `lineage` at `now`; returns how long it has been
/// failing (`None` when it answers or was not probed).
fn failing_for(lineage: &str, part: &str, outcome: PartOutcome, now: Instant) -> Option<Duration> {
    let mut since = FAILING_SINCE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let key = (lineage.to_owned(), part.to_owned());
    match outcome {
        PartOutcome::Ok => {
            since.remove(&key);
            None
        }
        PartOutcome::Unknown => since.get(&key).map(|first| now.saturating_duration_since(*first)),
        PartOutcome::Timeout | PartOutcome::Unreachable | PartOutcome::Error | PartOutcome::Inactive => {
            Some(now.saturating_duration_since(*since.entry(key).or_insert(now)))
        }
    }
}

/// What the coordinator's probe read.
struct CoordinatorState {
    schema_version: u32,
    citus: bool,
    acl_epoch: Option<u64>,
    workers: Vec<WorkerNode>,
}

/// A primary worker as `pg_dist_node` lists it.
struct WorkerNode {
    address: String,
    active: bool,
    identity: WorkerIdentity,
}

impl PostgresBackend {
    /// Probes the coordinator, then (on Citus) every worker at once, and returns within `bound`
    /// whatever the database does: a probe still running at the bound is abandoned and reported
    /// as `timeout`. See the module's invariants.
    pub async fn health(&self, bound: Duration) -> DatabaseHealth {
        let started = Instant::now();
        let deadline = tokio::time::Instant::from_std(started + bound);
        let probed = tokio::time::timeout_at(deadline, self.probe_coordinator(bound)).await;
        let (outcome, state) = match probed {
            Ok(Ok(state)) if Some(state.schema_version) != expected_schema_version() => {
                tracing::warn!(
                    server = %self.server,
                    schema_version = state.schema_version,
                    expected = expected_schema_version().unwrap_or(0),
                    "readiness: the database's schema is not this binary's"
                );
                (PartOutcome::Error, None)
            }
            Ok(Ok(state)) => (PartOutcome::Ok, Some(state)),
            Ok(Err(outcome)) => (outcome, None),
            Err(_) => {
                tracing::warn!(
                    server = %self.server,
                    bound_ms = bound.as_millis() as u64,
                    "readiness: the coordinator did not answer in time"
                );
                (PartOutcome::Timeout, None)
            }
        };
        let now = Instant::now();
        let coordinator = PartHealth {
            address: self.server.to_string(),
            worker: None,
            outcome,
            elapsed: now - started,
            failing_for: failing_for(&self.lineage, &format!("coordinator {}", self.server), outcome, now),
        };
        let Some(state) = state else {
            return DatabaseHealth { coordinator, citus: None, schema_version: None, acl_epoch: None, workers: None };
        };
        let workers = if state.citus {
            // Three quarters of the bound: the answer keeps a margin under a loaded machine.
            let deadline = tokio::time::Instant::from_std(started + bound * 3 / 4).max(tokio::time::Instant::now());
            let probes = state.workers.iter().map(|worker| self.probe_worker(worker, deadline));
            Some(futures::future::join_all(probes).await)
        } else {
            None
        };
        DatabaseHealth {
            coordinator,
            citus: Some(state.citus),
            schema_version: Some(state.schema_version),
            acl_epoch: state.acl_epoch,
            workers,
        }
    }

    /// A connection of its own to the backend's server, whose statements the server cancels
    /// past `statement_timeout` (at least 10 ms); its task ends when the client is dropped.
    async fn probe_connection(&self, statement_timeout: Duration) -> Result<tokio_postgres::Client, PartOutcome> {
        let mut config = tokio_postgres::Config::from_str(&self.params.url).map_err(|error| self.failed(&error))?;
        let mut options = config.get_options().unwrap_or_default().to_owned();
        if !options.is_empty() {
            options.push(' ');
        }
        let timeout_ms = statement_timeout.as_millis().max(10);
        options.push_str(&format!(
            "-c statement_timeout={timeout_ms} -c idle_in_transaction_session_timeout={timeout_ms}"
        ));
        config.options(options).connect_timeout(statement_timeout.max(Duration::from_millis(10)));
        let (client, connection) = config.connect(self.tls.clone()).await.map_err(|error| self.failed(&error))?;
        tokio::spawn(async move {
            // Ends with the client; bounded anyway, so a frozen server never holds the task.
            let _ = tokio::time::timeout(Duration::from_secs(10), connection).await;
        });
        Ok(client)
    }

    /// The coordinator's probe on a connection of its own.
    async fn probe_coordinator(&self, bound: Duration) -> Result<CoordinatorState, PartOutcome> {
        let client = self.probe_connection(bound).await?;
        let row = client.query_one(PROBE_COORDINATOR, &[&"lineage"]).await.map_err(|error| self.failed(&error))?;
        let lineage: Option<String> = row.get(0);
        if lineage.as_deref() != Some(self.lineage.as_str()) {
            tracing::warn!("readiness: the database's lineage is not the one this backend connected to");
            return Err(PartOutcome::Error);
        }
        let schema_version = u32::try_from(row.get::<_, i32>(1)).unwrap_or(0);
        let citus: bool = row.get(2);
        let (acl_epoch, workers) = if citus {
            let rows = client.query(PROBE_WORKERS, &[]).await.map_err(|error| self.failed(&error))?;
            let workers = rows
                .iter()
                .map(|row| WorkerNode {
                    address: format!("{}:{}", row.get::<_, String>(0), row.get::<_, i32>(1)),
                    active: row.get(2),
                    identity: WorkerIdentity { node_id: row.get(3), group_id: row.get(4) },
                })
                .collect();
            (None, workers)
        } else {
            let [enter, highest] = HIGHEST_EPOCH_ENTERED;
            let epoch = async {
                client.batch_execute("BEGIN READ ONLY").await?;
                client.query(enter, &[]).await?;
                let epoch: i64 = client.query_one(highest, &[]).await?.get(0);
                client.batch_execute("COMMIT").await?;
                Ok::<_, tokio_postgres::Error>(epoch)
            };
            let epoch = epoch.await.map_err(|error| self.failed(&error))?;
            (Some(epoch.max(0) as u64), Vec::new())
        };
        Ok(CoordinatorState { schema_version, citus, acl_epoch, workers })
    }

    /// One worker's probe from the coordinator, on a connection of its own, answered by
    /// `deadline`; a failure is logged with the worker's address.
    async fn probe_worker(&self, worker: &WorkerNode, deadline: tokio::time::Instant) -> PartHealth {
        let started = Instant::now();
        let address = worker.address.as_str();
        let outcome = if !worker.active {
            PartOutcome::Inactive
        } else {
            // The server's own timeout fires a little before the caller's, so the coordinator
            // stops waiting for a frozen worker by itself.
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let statement_timeout = left.saturating_sub(Duration::from_millis(50));
            let probe = async {
                let (host, port) = address.rsplit_once(':').unwrap_or((address, "5432"));
                let port: i32 = port.parse().unwrap_or(5432);
                let client = self.probe_connection(statement_timeout).await?;
                let reached: bool =
                    client.query_one(PROBE_WORKER, &[&host, &port]).await.map_err(|error| self.failed(&error))?.get(0);
                Ok::<_, PartOutcome>(reached)
            };
            match tokio::time::timeout_at(deadline, probe).await {
                Ok(Ok(true)) => PartOutcome::Ok,
                Ok(Ok(false)) => PartOutcome::Unreachable,
                Ok(Err(outcome)) => outcome,
                Err(_) => PartOutcome::Timeout,
            }
        };
        if outcome != PartOutcome::Ok {
            tracing::warn!(
                worker = address,
                node_id = worker.identity.node_id,
                group_id = worker.identity.group_id,
                outcome = outcome.as_str(),
                "readiness: a citus worker failed its probe"
            );
        }
        let now = Instant::now();
        PartHealth {
            address: address.to_owned(),
            worker: Some(worker.identity),
            outcome,
            elapsed: now - started,
            failing_for: failing_for(&self.lineage, &format!("worker {address}"), outcome, now),
        }
    }

    /// Logs a probe's failure (cause, SQLSTATE, the server's message; the server on the span)
    /// and sorts it.
    fn failed(&self, error: &impl Fault) -> PartOutcome {
        let outcome = PartOutcome::of_cause(error.cause());
        tracing::warn!(
            server = %self.server,
            outcome = outcome.as_str(),
            sqlstate = error.sqlstate().unwrap_or("none"),
            error = %error.describe(),
            "readiness: a database probe failed"
        );
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A part's failure is dated by its first failed probe and cleared by its next success; a
    /// part not probed keeps its date without starting one.
    #[test]
    fn a_part_fails_since_its_first_failure_until_its_next_success() {
        let lineage = uuid::Uuid::new_v4().to_string();
        let start = Instant::now();
        assert_eq!(failing_for(&lineage, "worker a:1", PartOutcome::Unknown, start), None);
        assert_eq!(failing_for(&lineage, "worker a:1", PartOutcome::Timeout, start), Some(Duration::ZERO));
        let later = start + Duration::from_secs(3);
        assert_eq!(failing_for(&lineage, "worker a:1", PartOutcome::Unreachable, later), Some(Duration::from_secs(3)));
        assert_eq!(failing_for(&lineage, "worker a:1", PartOutcome::Unknown, later), Some(Duration::from_secs(3)));
        assert_eq!(failing_for(&lineage, "worker b:1", PartOutcome::Ok, later), None, "another part is its own");
        assert_eq!(failing_for(&lineage, "worker a:1", PartOutcome::Ok, later), None);
        let again = later + Duration::from_secs(1);
        assert_eq!(failing_for(&lineage, "worker a:1", PartOutcome::Error, again), Some(Duration::ZERO));
    }

    #[test]
    fn each_outcome_names_the_code_a_request_to_that_part_gets() {
        assert_eq!(PartOutcome::of_cause(DatabaseCause::Timeout).code(), Some("storage_timeout"));
        assert_eq!(PartOutcome::of_cause(DatabaseCause::Connection).code(), Some("storage_unavailable"));
        assert_eq!(PartOutcome::Ok.code(), None);
        assert_eq!(PartOutcome::Unknown.code(), None);
    }
}
