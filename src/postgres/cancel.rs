//! Read statements that stop when their caller stops waiting.
//!
//! [`Reader`] also runs each statement in a transaction of its own that first enters the
//! statement's tenant ([`sql::ENTER_TENANT`]; or the database-wide scope of the two
//! database-wide reads), so the row-level security of migration 0007 admits that tenant's rows
//! alone. BEGIN, the entry, the statement and COMMIT are sent together, pipelined on the
//! connection (one round trip; the statements are prepared once per connection), and the setting
//! ends with the transaction: a pooled connection never carries a tenant into its next use.
//!
//! A tokio-postgres query whose future is dropped (an answer's retrieval ran out of its
//! deadline, an HTTP client went away) is not stopped by the drop: the server runs the statement
//! to its end, and the pooled connection it ran on serves the next request only after it. A
//! lexical statement over a term most chunks hold runs for seconds at 100,000 chunks
//! (BENCHMARKS.md), so abandoned statements would pile up in the database exactly when it is
//! overloaded.
//!
//! [`Reader`] holds one pooled connection for a caller's read statements. Dropped while one of
//! them is in flight, it asks the server to cancel it (PostgreSQL's cancel request, over the
//! same TLS settings as the connection) and takes the connection out of the pool instead of
//! returning it: a cancel request names a backend process, not a statement, so a connection it
//! may still reach must never carry another caller's statement. A statement that completed with
//! its rows leaves the connection to the pool as usual; one that failed (the statement or its
//! transaction) takes it out as well, so no connection returns in an unknown transaction state.
//!
//! A read also gives up on its own at its bound ([`DatabaseLimits::read_bound`]: the statement
//! timeout and a small margin) when no answer came: cancelled and taken out of the pool as
//! above, it fails with `storage_timeout`. The server's own timeout cannot end a statement on a
//! frozen server, nor (seen on Citus) a coordinator's wait on a frozen worker.
//!
//! Counted in `warrant_postgres_statements_cancelled_total`.
//!
//! [`DatabaseLimits::read_bound`]: super::DatabaseLimits::read_bound
//!
//! A read that Citus refused because the shard it was planned against moved meanwhile (a
//! rebalance or a tenant isolation finishing) is run once more on the same connection
//! (`warrant_postgres_reads_retried_total{reason="shard_moved"}`): reads are idempotent and each
//! runs in a read-only transaction of its own.

use deadpool_postgres::{Object, Pool};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::limit::{TenantLimiter, TenantPermit};
use super::{pooled, read_failure, sql};
use crate::retrieval::{DatabaseOperation, RetrievalResult};

/// Whose rows a [`Reader`]'s statements may see (row-level security, migration 0007).
#[derive(Clone, Debug)]
pub(super) enum Entered {
    /// One tenant's rows: every read for a principal, and every tenant statement.
    Tenant(String),
    /// `warrant_tenants` rows, for SELECT: [`sql::HIGHEST_EPOCH`] and [`sql::ANY_TENANT`] alone.
    Database,
}

/// One pooled connection running a caller's read statements, each in a transaction that entered
/// the caller's tenant, cancelled if abandoned mid-statement.
pub(super) struct Reader {
    /// The connection; `None` once it has been handed to the cancelling task or discarded.
    client: Option<Object>,
    tls: MakeRustlsConnect,
    entered: Entered,
    /// Whether a statement was sent and its result not yet received.
    in_flight: bool,
    /// How long a statement's answer is waited for ([`super::DatabaseLimits::read_bound`]).
    bound: Option<std::time::Duration>,
    /// The tenant's share of the pool this connection counts against (none for the
    /// database-wide reads); released with the reader.
    _permit: Option<TenantPermit>,
}

impl Reader {
    /// Takes a connection from `pool` for statements that see what `entered` admits, within
    /// the tenant's share of the pool (`limiter`); `tls` connects the cancel request if one is
    /// needed.
    /// `limiter` is `None` when the caller holds the tenant's permits already
    /// ([`TenantLimiter::admit_many`]).
    /// `bound`: how long each statement's answer is waited for (`None`: as long as it takes).
    pub(super) async fn checkout(
        pool: &Pool,
        tls: &MakeRustlsConnect,
        limiter: Option<&TenantLimiter>,
        entered: Entered,
        bound: Option<std::time::Duration>,
    ) -> RetrievalResult<Self> {
        let permit = match (&entered, limiter) {
            (Entered::Tenant(tenant), Some(limiter)) => Some(limiter.admit(tenant, DatabaseOperation::Read).await?),
            (Entered::Tenant(_), None) | (Entered::Database, _) => None,
        };
        let client = pooled(pool, DatabaseOperation::Read).await?;
        Ok(Self { client: Some(client), tls: tls.clone(), entered, in_flight: false, bound, _permit: permit })
    }

    /// Runs `statement` (read-only) in a transaction of its own that entered this reader's
    /// tenant, and returns its rows.
    pub(super) async fn query(&mut self, statement: &str, params: &[&(dyn ToSql + Sync)]) -> RetrievalResult<Vec<Row>> {
        let Some(client) = self.client.as_ref() else {
            return Err(read_failure("a reader whose statement failed was used again"));
        };
        self.in_flight = true;
        let entered = &self.entered;
        let attempt = async {
            let rows = entered_transaction(client, entered, statement, params).await;
            if rows.as_ref().is_err_and(shard_moved) {
                // Read-only and in a transaction of its own that rolled back: run it once more.
                metrics::counter!("warrant_postgres_reads_retried_total", "reason" => "shard_moved").increment(1);
                return entered_transaction(client, entered, statement, params).await;
            }
            rows
        };
        let rows = match self.bound {
            None => attempt.await,
            Some(bound) => match tokio::time::timeout(bound, attempt).await {
                Ok(rows) => rows,
                Err(_) => {
                    // No answer within the bound: cancelled and out of the pool, as if abandoned.
                    self.abandon();
                    return Err(read_failure(GaveUp(bound)));
                }
            },
        };
        self.in_flight = false;
        if rows.is_err()
            && let Some(client) = self.client.take()
        {
            // Out of the pool: whatever failed, the connection is not reused.
            drop(Object::take(client));
        }
        rows.map_err(read_failure)
    }

    /// Runs `statement`, which returns exactly one row.
    pub(super) async fn query_one(&mut self, statement: &str, params: &[&(dyn ToSql + Sync)]) -> RetrievalResult<Row> {
        let mut rows = self.query(statement, params).await?;
        match rows.len() {
            1 => Ok(rows.remove(0)),
            count => Err(read_failure(format!("a statement returned {count} rows where one was expected"))),
        }
    }
}

/// Whether `error` is Citus refusing a statement that was planned against a shard a move or a
/// split (`citus_rebalance_start`, `isolate_tenant_to_new_shard`) dropped as it finished ("could
/// not find valid entry for shard N"): the next plan finds the shard's new placement, so a read
/// is run once more instead of failing its caller (seen twice in ~300 retrievals while a tenant
/// was isolated under load: `citus::grow`).
fn shard_moved(error: &tokio_postgres::Error) -> bool {
    error.as_db_error().is_some_and(|db| db.message().starts_with("could not find valid entry for shard"))
}

/// BEGIN READ ONLY, the entry into `entered`, `statement` and COMMIT, pipelined on `client`:
/// each request is sent when its future is first polled, and `join!` polls them in order, so the
/// four go out together and the server runs them in order. A failure anywhere aborts the
/// transaction (COMMIT then rolls back); the first error is returned.
async fn entered_transaction(
    client: &Object,
    entered: &Entered,
    statement: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, tokio_postgres::Error> {
    let (enter, tenant): (&str, Vec<&(dyn ToSql + Sync)>) = match entered {
        Entered::Tenant(tenant) => (sql::ENTER_TENANT, vec![tenant]),
        Entered::Database => (sql::ENTER_DATABASE, Vec::new()),
    };
    let (enter, statement) = futures::try_join!(client.prepare_cached(enter), client.prepare_cached(statement))?;
    let (begun, entered, rows, committed) = futures::join!(
        client.batch_execute("BEGIN READ ONLY"),
        client.query(&enter, &tenant),
        client.query(&statement, params),
        client.batch_execute("COMMIT"),
    );
    begun?;
    entered?;
    let rows = rows?;
    committed?;
    Ok(rows)
}

/// A read that got no answer within its bound (a timeout, as the server's own would be).
struct GaveUp(std::time::Duration);

impl super::fault::Fault for GaveUp {
    fn cause(&self) -> crate::retrieval::DatabaseCause {
        crate::retrieval::DatabaseCause::Timeout
    }

    fn sqlstate(&self) -> Option<&str> {
        None
    }

    fn describe(&self) -> String {
        format!("no answer within the read's bound of {} ms; cancelled", self.0.as_millis())
    }
}

impl Reader {
    /// Cancels the statement in flight (PostgreSQL's cancel request) and takes the connection
    /// out of the pool; nothing when no statement is in flight.
    fn abandon(&mut self) {
        if !std::mem::take(&mut self.in_flight) {
            return;
        }
        let Some(client) = self.client.take() else { return };
        let cancel = client.cancel_token();
        // Out of the pool: closed once the cancel request is sent, never reused.
        let detached = Object::take(client);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to send the cancel request from: closing the connection is all there is.
            return;
        };
        let tls = self.tls.clone();
        metrics::counter!("warrant_postgres_statements_cancelled_total").increment(1);
        runtime.spawn(async move {
            if let Err(error) = cancel.cancel_query(tls).await {
                tracing::warn!(%error, "could not send a cancel request for an abandoned statement");
            }
            drop(detached);
        });
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.abandon();
    }
}
