//! A tenant's epoch for the reads of one node, one statement shared by the reads that may share
//! it (group commit, for reads).
//!
//! Every read starts by learning its tenant's epoch from the database ([`super::sql::TENANT_EPOCH`])
//! so that whatever any node acknowledged before the read began is enforced. A statement gives
//! such an epoch to every read that began before the statement was sent: the database takes the
//! statement's snapshot after it arrives, so it holds every commit acknowledged before then. A
//! statement already sent when a read begins may miss a commit acknowledged in between, so that
//! read never takes its answer.
//!
//! Invariants:
//! - Per tenant, the slots hold at most one flight whose statement was sent (no read joins it)
//!   and at most one that waits: a read joins the waiting one, or makes one. The waiting flight
//!   is sent once the sent one has answered (or after `EpochReads::wait` at most, so a statement
//!   that hangs does not hold the next one longer than that), and the door to it closes (it
//!   becomes the sent one, under the lock readers join under) before its statement goes out.
//!   So every read that joined a flight began before its statement was sent, which is the proof
//!   the reads need (`a_read_takes_only_an_epoch_read_after_it_began`).
//! - A flight runs in a task of its own: a read that is abandoned abandons its wait, never the
//!   statement others wait on, nor the connection it holds.
//! - A failed statement fails the reads that shared it, each with the failure's operation and
//!   cause (counted once, where the statement failed); the next read makes a new flight.
//!
//! One read at a time sends one statement, as before; under concurrency the reads of a tenant
//! share statements (`warrant_postgres_epoch_reads_total{shared}`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};

use crate::retrieval::{DatabaseCause, DatabaseOperation, RetrievalError, RetrievalResult};

/// What a flight's readers get: the epoch, or the failure's operation and cause.
type Outcome = Result<u64, (DatabaseOperation, DatabaseCause)>;

/// One epoch statement and the reads waiting for it.
type Flight = Shared<BoxFuture<'static, Outcome>>;

/// A flight and its number (to tell whether the slot still holds it).
struct Slot {
    id: u64,
    flight: Flight,
}

/// A tenant's flights.
#[derive(Default)]
struct Flights {
    /// The statement sent and not answered yet: no read joins it.
    sent: Option<Slot>,
    /// The statement that goes out next: reads join it.
    waiting: Option<Slot>,
}

type Tenants = Arc<Mutex<HashMap<String, Flights>>>;

/// The epoch reads of one node's backend.
pub(super) struct EpochReads {
    tenants: Tenants,
    ids: AtomicU64,
    wait: Duration,
    /// Off: every read sends its own statement ([`super::PostgresBackend::share_epoch_reads`]).
    shared: AtomicBool,
}

impl std::fmt::Debug for EpochReads {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("EpochReads").field("wait", &self.wait).finish_non_exhaustive()
    }
}

impl EpochReads {
    /// Reads that wait for the statement after the one in flight wait `wait` at most for it to
    /// answer before theirs is sent anyway.
    pub(super) fn new(wait: Duration) -> Self {
        Self { tenants: Arc::default(), ids: AtomicU64::new(0), wait, shared: AtomicBool::new(true) }
    }

    /// Whether reads share statements from now on (on by default).
    pub(super) fn share(&self, on: bool) {
        self.shared.store(on, Ordering::Relaxed);
    }

    /// `tenant`'s epoch from a `statement` sent after this call began: the waiting flight's, or a
    /// new one's (`statement` is called for a new flight alone; its future is first polled when
    /// the flight's statement goes out, in a task of its own).
    pub(super) async fn read<S>(&self, tenant: &str, statement: S) -> RetrievalResult<u64>
    where
        S: FnOnce() -> BoxFuture<'static, RetrievalResult<u64>>,
    {
        if !self.shared.load(Ordering::Relaxed) {
            return statement().await;
        }
        let flight = {
            let mut tenants = lock(&self.tenants);
            let flights = tenants.entry(tenant.to_owned()).or_default();
            if let Some(waiting) = &flights.waiting {
                metrics::counter!("warrant_postgres_epoch_reads_total", "shared" => "true").increment(1);
                waiting.flight.clone()
            } else {
                metrics::counter!("warrant_postgres_epoch_reads_total", "shared" => "false").increment(1);
                let id = self.ids.fetch_add(1, Ordering::Relaxed);
                let before = flights.sent.as_ref().map(|sent| sent.flight.clone());
                let queued = before.is_some();
                let flight = self.flight(tenant, id, before, statement());
                let slot = Some(Slot { id, flight: flight.clone() });
                if queued {
                    flights.waiting = slot;
                } else {
                    flights.sent = slot;
                }
                flight
            }
        };
        flight.await.map_err(|(operation, cause)| RetrievalError::Database { operation, cause })
    }

    /// A flight's task: waits for `before` (the statement in flight, `wait` at most), moves
    /// itself from waiting to sent, sends `statement`, then leaves its slot.
    fn flight(
        &self,
        tenant: &str,
        id: u64,
        before: Option<Flight>,
        statement: BoxFuture<'static, RetrievalResult<u64>>,
    ) -> Flight {
        let (tenants, tenant, wait) = (Arc::clone(&self.tenants), tenant.to_owned(), self.wait);
        let task = tokio::spawn(async move {
            if let Some(before) = before {
                // Its readers share this statement; a statement that hangs holds it `wait` at most.
                let _ = tokio::time::timeout(wait, before).await;
                let mut held = lock(&tenants);
                if let Some(flights) = held.get_mut(&tenant)
                    && flights.waiting.as_ref().is_some_and(|waiting| waiting.id == id)
                {
                    // The door closes before the statement goes out.
                    flights.sent = flights.waiting.take();
                }
            }
            let outcome = statement.await.map_err(|error| match error {
                RetrievalError::Database { operation, cause } => (operation, cause),
                other => {
                    tracing::warn!(error = %other, "an epoch read failed");
                    (DatabaseOperation::Read, DatabaseCause::Other)
                }
            });
            let mut held = lock(&tenants);
            if let Some(flights) = held.get_mut(&tenant) {
                if flights.sent.as_ref().is_some_and(|sent| sent.id == id) {
                    flights.sent = None;
                }
                if flights.sent.is_none() && flights.waiting.is_none() {
                    held.remove(&tenant);
                }
            }
            outcome
        });
        async move { task.await.unwrap_or(Err((DatabaseOperation::Read, DatabaseCause::Other))) }.boxed().shared()
    }

    /// Tenants with a flight now (tests: none is left once the reads are answered).
    #[cfg(test)]
    fn tenants_in_flight(&self) -> usize {
        lock(&self.tenants).len()
    }
}

fn lock(tenants: &Tenants) -> MutexGuard<'_, HashMap<String, Flights>> {
    // Every update is a few slot moves under the lock: a poisoned lock holds usable slots.
    tenants.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A fake database: a clock that ticks when a read begins and when a statement is sent; a
    /// statement answers the tick at which it was sent as the epoch, after `answer_after`.
    #[derive(Clone, Default)]
    struct FakeDatabase {
        clock: Arc<AtomicU64>,
        sent: Arc<AtomicU64>,
    }

    impl FakeDatabase {
        fn tick(&self) -> u64 {
            self.clock.fetch_add(1, Ordering::SeqCst) + 1
        }

        fn statement(&self, answer_after: Duration, fails: bool) -> BoxFuture<'static, RetrievalResult<u64>> {
            let database = self.clone();
            async move {
                let sent_at = database.tick();
                database.sent.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(answer_after).await;
                if fails {
                    return Err(RetrievalError::Database {
                        operation: DatabaseOperation::Read,
                        cause: DatabaseCause::Connection,
                    });
                }
                Ok(sent_at)
            }
            .boxed()
        }
    }

    /// Reads beginning at the given offsets (microseconds), each statement answering after its
    /// duration; what each read began at and got.
    async fn race(reads: &[(u64, u64)], wait: Duration, shared: bool) -> (Vec<(u64, u64)>, u64, usize) {
        let epochs = Arc::new(EpochReads::new(wait));
        epochs.share(shared);
        let database = FakeDatabase::default();
        let tasks: Vec<_> = reads
            .iter()
            .map(|&(begins_after, answers_after)| {
                let (epochs, database) = (Arc::clone(&epochs), database.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_micros(begins_after)).await;
                    let began = database.tick();
                    let statement = || database.statement(Duration::from_micros(answers_after), false);
                    (began, epochs.read("acme", statement).await.expect("the fake never fails"))
                })
            })
            .collect();
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(task.await.expect("a read's task"));
        }
        (outcomes, database.sent.load(Ordering::SeqCst), epochs.tenants_in_flight())
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime")
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// Whatever the interleaving, every read's epoch comes from a statement sent after the
        /// read began, and no flight is left behind. (A read that joined the statement in flight
        /// fails this.)
        #[test]
        fn a_read_takes_only_an_epoch_read_after_it_began(
            reads in proptest::collection::vec((0_u64..3_000, 0_u64..2_000), 1..40),
            wait_us in 200_u64..5_000,
        ) {
            let (outcomes, sent, left) = runtime().block_on(race(&reads, Duration::from_micros(wait_us), true));
            for (began, epoch) in outcomes {
                prop_assert!(epoch > began, "a read that began at {began} took the epoch sent at {epoch}");
            }
            prop_assert!(sent as usize <= reads.len());
            prop_assert_eq!(left, 0);
        }
    }

    #[test]
    fn concurrent_reads_share_statements_and_one_read_alone_sends_one() {
        let runtime = runtime();
        let (alone, sent, _) = runtime.block_on(race(&[(0, 100)], Duration::from_millis(5), true));
        assert_eq!((alone.len(), sent), (1, 1));
        // Forty reads together while statements take 2 ms: one goes out, the other 39 share the next.
        let together = [(0, 2_000); 40];
        let (outcomes, sent, left) = runtime.block_on(race(&together, Duration::from_millis(50), true));
        assert_eq!(outcomes.len(), 40);
        assert!(sent <= 3, "{sent} statements for 40 reads begun together");
        assert_eq!(left, 0);
        // Switched off, each read sends its own.
        let (_, sent, left) = runtime.block_on(race(&together, Duration::from_millis(50), false));
        assert_eq!((sent, left), (40, 0));
    }

    #[test]
    fn a_hung_statement_holds_the_next_one_wait_at_most_and_a_failure_fails_its_readers_alone() {
        runtime().block_on(async {
            let epochs = Arc::new(EpochReads::new(Duration::from_millis(20)));
            let database = FakeDatabase::default();
            let hung = {
                let (epochs, database) = (Arc::clone(&epochs), database.clone());
                tokio::spawn(async move {
                    epochs.read("acme", || database.statement(Duration::from_secs(3_600), false)).await
                })
            };
            tokio::time::sleep(Duration::from_millis(5)).await;
            let started = std::time::Instant::now();
            let failed = epochs.read("acme", || database.statement(Duration::ZERO, true)).await;
            assert!(
                matches!(failed, Err(RetrievalError::Database { cause: DatabaseCause::Connection, .. })),
                "{failed:?}"
            );
            assert!(started.elapsed() < Duration::from_secs(5), "the next statement went out after the wait");
            // The hung statement is no longer in a slot: the next read is held neither by it nor by
            // the failure.
            let after = epochs.read("acme", || database.statement(Duration::ZERO, false)).await;
            assert!(after.is_ok(), "{after:?}");
            // Another tenant never waits on acme's.
            let other = epochs.read("globex", || database.statement(Duration::ZERO, false)).await;
            assert!(other.is_ok());
            hung.abort();
        });
    }
}
