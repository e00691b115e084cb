//! Database failures sorted by cause, logged with what the operator needs and nothing of the
//! tenant's: the SQLSTATE, the server's message (never its DETAIL, which may quote row values)
//! and the cause chain of a connection failure (refused, reset, TLS, timed out). The server's
//! `host:port` is on the `postgres` span of the request ([`PostgresBackend::span`]). The query's
//! text and its parameters are never logged.
//!
//! Counted in `warrant_storage_errors_total{cause}` (`timeout`, `connection`, `other`; `busy`
//! for a tenant refused by its share of the pool: [`super::limit`]), with
//! `warrant_postgres_pool_wait_seconds` (the wait for a pooled connection) and
//! `warrant_postgres_pool_timeouts_total` beside them.
//!
//! [`PostgresBackend::span`]: super::PostgresBackend::span

use std::time::Instant;

use deadpool_postgres::{Object, Pool, PoolError, TimeoutType};

use crate::retrieval::{DatabaseCause, DatabaseOperation, RetrievalError, RetrievalResult};

/// What a failure tells: its cause, its SQLSTATE (a server error), and a description safe to
/// log.
pub(super) trait Fault {
    /// Timeout, connection or other.
    fn cause(&self) -> DatabaseCause;
    /// The SQLSTATE the server answered, if it answered.
    fn sqlstate(&self) -> Option<&str>;
    /// What happened, for the log: never tenant text or query text.
    fn describe(&self) -> String;
}

/// SQLSTATEs of a deadline: 57014 `query_canceled` (statement_timeout; a cancel request is sent
/// only for an abandoned statement, whose error nobody reads) and 25P03
/// `idle_in_transaction_session_timeout`.
const TIMEOUTS: [&str; 2] = ["57014", "25P03"];

/// SQLSTATEs of an unreachable or departing server: class 08 (connection exception), 57P01
/// `admin_shutdown`, 57P02 `crash_shutdown`, 57P03 `cannot_connect_now` (starting, in recovery),
/// 53300 `too_many_connections`.
fn connection_state(state: &str) -> bool {
    state.starts_with("08") || matches!(state, "57P01" | "57P02" | "57P03" | "53300")
}

impl Fault for tokio_postgres::Error {
    fn cause(&self) -> DatabaseCause {
        if let Some(db) = self.as_db_error() {
            let state = db.code().code();
            return if TIMEOUTS.contains(&state) {
                DatabaseCause::Timeout
            } else if connection_state(state)
                // Citus: a worker the coordinator cannot reach (XX000 with this message).
                || db.message().starts_with("connection to the remote node")
                || db.message().starts_with("could not establish any connections to the node")
            {
                DatabaseCause::Connection
            } else {
                DatabaseCause::Other
            };
        }
        let kind = self.to_string();
        if kind.starts_with("timeout waiting for server") {
            DatabaseCause::Timeout
        } else if self.is_closed()
            || ["error connecting", "error communicating", "error performing TLS", "connection closed"]
                .iter()
                .any(|prefix| kind.starts_with(prefix))
        {
            DatabaseCause::Connection
        } else {
            DatabaseCause::Other
        }
    }

    fn sqlstate(&self) -> Option<&str> {
        self.as_db_error().map(|db| db.code().code())
    }

    fn describe(&self) -> String {
        if let Some(db) = self.as_db_error() {
            // The message alone: DETAIL and WHERE may quote rows or the statement.
            return format!("{}: {}", db.severity(), db.message());
        }
        let mut described = self.to_string();
        if described.starts_with("invalid connection string") || described.starts_with("invalid configuration") {
            // The cause may quote the URL, which may hold a password.
            return described;
        }
        let mut source = std::error::Error::source(self);
        while let Some(error) = source {
            described.push_str(": ");
            described.push_str(&error.to_string());
            source = error.source();
        }
        described
    }
}

impl Fault for PoolError {
    fn cause(&self) -> DatabaseCause {
        match self {
            Self::Timeout(_) => DatabaseCause::Timeout,
            Self::Backend(error) => error.cause(),
            Self::PostCreateHook(deadpool_postgres::HookError::Backend(error)) => error.cause(),
            Self::PostCreateHook(_) | Self::Closed | Self::NoRuntimeSpecified => DatabaseCause::Other,
        }
    }

    fn sqlstate(&self) -> Option<&str> {
        match self {
            Self::Backend(error) | Self::PostCreateHook(deadpool_postgres::HookError::Backend(error)) => {
                error.sqlstate()
            }
            _ => None,
        }
    }

    fn describe(&self) -> String {
        match self {
            Self::Timeout(TimeoutType::Wait) => "no pooled connection free within the pool wait".into(),
            Self::Timeout(TimeoutType::Create) => "no new connection made within the pool wait".into(),
            Self::Timeout(TimeoutType::Recycle) => "a pooled connection's check timed out".into(),
            Self::Backend(error) | Self::PostCreateHook(deadpool_postgres::HookError::Backend(error)) => {
                error.describe()
            }
            other => other.to_string(),
        }
    }
}

impl Fault for deadpool_postgres::BuildError {
    fn cause(&self) -> DatabaseCause {
        DatabaseCause::Other
    }

    fn sqlstate(&self) -> Option<&str> {
        None
    }

    fn describe(&self) -> String {
        self.to_string()
    }
}

impl Fault for &str {
    fn cause(&self) -> DatabaseCause {
        DatabaseCause::Other
    }

    fn sqlstate(&self) -> Option<&str> {
        None
    }

    fn describe(&self) -> String {
        (*self).to_owned()
    }
}

impl Fault for String {
    fn cause(&self) -> DatabaseCause {
        DatabaseCause::Other
    }

    fn sqlstate(&self) -> Option<&str> {
        None
    }

    fn describe(&self) -> String {
        self.clone()
    }
}

/// The error of a failed database request of a write (or of the start-up); logged and counted
/// here. A read's is [`read_failure`].
pub(crate) fn database(error: impl Fault) -> RetrievalError {
    failure(&error, DatabaseOperation::Write)
}

/// The error of a failed read: as [`database`], saying that a read failed.
pub(super) fn read_failure(error: impl Fault) -> RetrievalError {
    failure(&error, DatabaseOperation::Read)
}

fn failure(error: &impl Fault, operation: DatabaseOperation) -> RetrievalError {
    let cause = error.cause();
    metrics::counter!("warrant_storage_errors_total", "cause" => cause.as_str()).increment(1);
    tracing::warn!(
        cause = cause.as_str(),
        %operation,
        sqlstate = error.sqlstate().unwrap_or("none"),
        error = %error.describe(),
        "postgres request failed"
    );
    RetrievalError::Database { operation, cause }
}

/// A read's error from a write-path one (a value of a read that did not decode).
pub(super) fn as_read(error: RetrievalError) -> RetrievalError {
    match error {
        RetrievalError::Database { cause, .. } => {
            RetrievalError::Database { operation: DatabaseOperation::Read, cause }
        }
        other => other,
    }
}

/// A pooled connection, its wait measured (`warrant_postgres_pool_wait_seconds`) and a wait that
/// ran out counted (`warrant_postgres_pool_timeouts_total`).
pub(super) async fn pooled(pool: &Pool, operation: DatabaseOperation) -> RetrievalResult<Object> {
    let started = Instant::now();
    let got = pool.get().await;
    metrics::histogram!("warrant_postgres_pool_wait_seconds").record(started.elapsed().as_secs_f64());
    got.map_err(|error| {
        if matches!(error, PoolError::Timeout(_)) {
            metrics::counter!("warrant_postgres_pool_timeouts_total").increment(1);
        }
        failure(&error, operation)
    })
}
