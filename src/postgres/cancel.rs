//! Read statements that stop when their caller stops waiting.
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
//! may still reach must never carry another caller's statement. A statement that completed, with
//! rows or with an error, leaves the connection to the pool as usual.
//!
//! Counted in `warrant_postgres_statements_cancelled_total`.

use deadpool_postgres::{Object, Pool};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::database;
use crate::retrieval::RetrievalResult;

/// One pooled connection running a caller's read statements, cancelled if abandoned mid-statement.
pub(super) struct Reader {
    /// The connection; `None` once it has been handed to the cancelling task.
    client: Option<Object>,
    tls: MakeRustlsConnect,
    /// Whether a statement was sent and its result not yet received.
    in_flight: bool,
}

impl Reader {
    /// Takes a connection from `pool`; `tls` connects the cancel request if one is needed.
    pub(super) async fn checkout(pool: &Pool, tls: &MakeRustlsConnect) -> RetrievalResult<Self> {
        let client = pool.get().await.map_err(database)?;
        Ok(Self { client: Some(client), tls: tls.clone(), in_flight: false })
    }

    /// Runs `statement` and returns its rows.
    pub(super) async fn query(&mut self, statement: &str, params: &[&(dyn ToSql + Sync)]) -> RetrievalResult<Vec<Row>> {
        self.in_flight = true;
        let rows = self.client().query(statement, params).await;
        self.in_flight = false;
        rows.map_err(database)
    }

    /// Runs `statement`, which returns exactly one row.
    pub(super) async fn query_one(&mut self, statement: &str, params: &[&(dyn ToSql + Sync)]) -> RetrievalResult<Row> {
        self.in_flight = true;
        let row = self.client().query_one(statement, params).await;
        self.in_flight = false;
        row.map_err(database)
    }

    fn client(&self) -> &Object {
        self.client.as_ref().expect("the connection leaves only in drop")
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        if !self.in_flight {
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
