//! The review queue: a bounded channel to one writer task that writes items to the
//! [`ReviewStore`], in batches of what is waiting, and on a timer expires old items and sweeps
//! texts of documents that are no longer live.
//!
//! Invariants: [`ReviewQueue::offer`] never waits and never fails its caller — a full queue, a
//! stopped writer and a failed write each drop the item and count it in
//! `warrant_reviews_dropped_total{reason}` (`queue_full`, `queue_closed`, `write_failed`: a fixed
//! set, never tenant or user text), logged without content; items are written in the order they
//! were offered; [`ReviewQueue::flush`] returns once everything offered before it was written (or
//! dropped).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::{NewItem, ReviewStore, now_ms};

/// Most items written in one store transaction.
const MAX_BATCH: usize = 64;

/// The queue's bounds.
#[derive(Clone, Debug)]
pub struct QueueSettings {
    /// Items waiting for the writer.
    pub capacity: usize,
    /// Items one tenant keeps.
    pub max_items_per_tenant: u64,
    /// Items older than this are deleted.
    pub retention: Duration,
    /// How often expiry and the sweep of dead documents' texts run (and once at start).
    pub sweep_every: Duration,
}

impl QueueSettings {
    /// From `[review]`; sweeps hourly.
    pub fn from_settings(settings: &crate::config::ReviewSettings) -> Self {
        Self {
            capacity: settings.queue_capacity,
            max_items_per_tenant: settings.max_items_per_tenant,
            retention: Duration::from_secs(settings.retention_days.saturating_mul(86_400)),
            sweep_every: Duration::from_secs(3600),
        }
    }
}

enum Message {
    Item(Box<NewItem>),
    /// Acknowledged once every message before it was handled.
    Flush(oneshot::Sender<()>),
    /// Like `Flush`, then the writer stops.
    Stop(oneshot::Sender<()>),
}

/// Why an offered item was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// The queue was full.
    QueueFull,
    /// The writer has stopped.
    QueueClosed,
}

impl Dropped {
    fn reason(&self) -> &'static str {
        match self {
            Self::QueueFull => "queue_full",
            Self::QueueClosed => "queue_closed",
        }
    }
}

/// The sending end of the queue (cheap to share).
pub struct ReviewQueue {
    sender: mpsc::Sender<Message>,
}

impl ReviewQueue {
    /// Starts the writer task over `store` (on the current tokio runtime).
    pub fn start(store: Arc<dyn ReviewStore>, settings: QueueSettings) -> Self {
        let (sender, receiver) = mpsc::channel(settings.capacity.max(1));
        tokio::spawn(write(store, receiver, settings));
        Self { sender }
    }

    /// Hands `item` to the writer without waiting. A refused item is counted and logged.
    pub fn offer(&self, item: NewItem) -> Result<(), Dropped> {
        let refused = match self.sender.try_send(Message::Item(Box::new(item))) {
            Ok(()) => return Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => Dropped::QueueFull,
            Err(mpsc::error::TrySendError::Closed(_)) => Dropped::QueueClosed,
        };
        dropped(refused.reason(), 1);
        Err(refused)
    }

    /// Waits until everything offered before this call was written or dropped; `false` when
    /// the writer has stopped.
    pub async fn flush(&self) -> bool {
        let (done, finished) = oneshot::channel();
        self.sender.send(Message::Flush(done)).await.is_ok() && finished.await.is_ok()
    }

    /// Writes what is queued, then stops the writer (a graceful shutdown); later offers are
    /// dropped as `queue_closed`. Gives up after `timeout`.
    pub async fn close(&self, timeout: Duration) {
        let (done, finished) = oneshot::channel();
        let stop = async { self.sender.send(Message::Stop(done)).await.is_ok() && finished.await.is_ok() };
        if !tokio::time::timeout(timeout, stop).await.unwrap_or(false) {
            tracing::warn!("the review queue was not written out before shutdown; its items are lost");
        }
    }
}

fn dropped(reason: &'static str, items: u64) {
    metrics::counter!("warrant_reviews_dropped_total", "reason" => reason).increment(items);
    tracing::warn!(reason, items, "review items dropped");
}

/// The writer task: batches of waiting items, flushes in order, the sweep on its timer.
async fn write(store: Arc<dyn ReviewStore>, mut receiver: mpsc::Receiver<Message>, settings: QueueSettings) {
    let mut sweeps = tokio::time::interval(settings.sweep_every);
    sweeps.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let first = tokio::select! {
            message = receiver.recv() => message,
            _ = sweeps.tick() => {
                sweep(store.as_ref(), settings.retention).await;
                continue;
            }
        };
        let Some(first) = first else { return };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(message) => batch.push(message),
                Err(_) => break,
            }
        }
        let mut items = Vec::new();
        let mut messages = batch.into_iter();
        while let Some(message) = messages.next() {
            match message {
                Message::Item(item) => items.push(*item),
                Message::Flush(done) => {
                    insert(store.as_ref(), std::mem::take(&mut items), settings.max_items_per_tenant).await;
                    let _ = done.send(());
                }
                Message::Stop(done) => {
                    insert(store.as_ref(), std::mem::take(&mut items), settings.max_items_per_tenant).await;
                    receiver.close();
                    let mut late = 0;
                    for message in messages.chain(std::iter::from_fn(|| receiver.try_recv().ok())) {
                        match message {
                            Message::Item(_) => late += 1,
                            Message::Flush(waiting) | Message::Stop(waiting) => drop(waiting),
                        }
                    }
                    if late > 0 {
                        dropped("queue_closed", late);
                    }
                    let _ = done.send(());
                    return;
                }
            }
        }
        insert(store.as_ref(), items, settings.max_items_per_tenant).await;
    }
}

async fn insert(store: &dyn ReviewStore, items: Vec<NewItem>, max_items_per_tenant: u64) {
    if items.is_empty() {
        return;
    }
    let count = items.len() as u64;
    match store.insert(items, max_items_per_tenant).await {
        Ok(inserted) => {
            metrics::counter!("warrant_reviews_written_total").increment(inserted.written as u64);
            if inserted.evicted > 0 {
                metrics::counter!("warrant_reviews_removed_total", "reason" => "max_items").increment(inserted.evicted);
            }
        }
        Err(error) => {
            tracing::error!(code = error.code(), %error, "review items could not be written");
            dropped("write_failed", count);
        }
    }
}

/// Expiry, then the sweep of dead documents' texts.
async fn sweep(store: &dyn ReviewStore, retention: Duration) {
    let retention_ms = u64::try_from(retention.as_millis()).unwrap_or(u64::MAX);
    match store.expire(now_ms().saturating_sub(retention_ms)).await {
        Ok(expired) if expired > 0 => {
            metrics::counter!("warrant_reviews_removed_total", "reason" => "retention").increment(expired);
            tracing::info!(expired, "review items past retention deleted");
        }
        Ok(_) => {}
        Err(error) => tracing::error!(code = error.code(), %error, "review items past retention were not deleted"),
    }
    match store.sweep_dead_documents().await {
        Ok(purged) if purged > 0 => {
            metrics::counter!("warrant_review_texts_purged_total").increment(purged);
            tracing::info!(items = purged, "texts of deleted documents purged from review items by the sweep");
        }
        Ok(_) => {}
        Err(error) => tracing::error!(code = error.code(), %error, "the sweep of deleted documents' texts failed"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;
    use crate::review::{Inserted, ReviewResult, ReviewStatus, StoredItem, Summary, Verdict};

    /// A store that records inserts, optionally failing them, blocked until `gate` has permits.
    struct Recording {
        batches: Mutex<Vec<Vec<String>>>,
        fail: bool,
        gate: tokio::sync::Semaphore,
    }

    impl Recording {
        fn new(fail: bool, permits: usize) -> Self {
            Self { batches: Mutex::default(), fail, gate: tokio::sync::Semaphore::new(permits) }
        }
    }

    #[async_trait]
    impl ReviewStore for Recording {
        async fn insert(&self, items: Vec<NewItem>, _: u64) -> ReviewResult<Inserted> {
            let _open = self.gate.acquire().await.expect("gate");
            if self.fail {
                return Err(crate::review::ReviewError::Storage("injected".into()));
            }
            let written = items.len();
            self.batches.lock().unwrap().push(items.into_iter().map(|item| item.item.review_id).collect());
            Ok(Inserted { written, evicted: 0 })
        }
        async fn page(&self, _: &str, _: Option<ReviewStatus>, _: Option<u64>, _: usize) -> ReviewResult<Vec<Summary>> {
            Ok(Vec::new())
        }
        async fn get(&self, _: &str, _: &str) -> ReviewResult<Option<StoredItem>> {
            Ok(None)
        }
        async fn add_verdict(&self, _: &str, _: &str, _: &Verdict, _: u32) -> ReviewResult<bool> {
            Ok(false)
        }
        async fn purge_documents(&self, _: &str, _: &[String]) -> ReviewResult<u64> {
            Ok(0)
        }
        async fn expire(&self, _: u64) -> ReviewResult<u64> {
            Ok(0)
        }
        async fn sweep_dead_documents(&self) -> ReviewResult<u64> {
            Ok(0)
        }
        async fn tenants(&self) -> ReviewResult<Vec<String>> {
            Ok(Vec::new())
        }
    }

    fn item(id: &str) -> NewItem {
        let mut item = crate::review::item::tests::sample();
        item.item.review_id = id.to_owned();
        item
    }

    fn settings(capacity: usize) -> QueueSettings {
        QueueSettings {
            capacity,
            max_items_per_tenant: 100,
            retention: Duration::from_secs(3600),
            sweep_every: Duration::from_secs(3600),
        }
    }

    #[tokio::test]
    async fn items_are_written_in_order_and_a_full_queue_drops_without_waiting() {
        let store = Arc::new(Recording::new(false, 0));
        let queue = ReviewQueue::start(store.clone(), settings(2));
        // The writer takes the first item and blocks on the gate; two more fill the channel.
        queue.offer(item("a")).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        queue.offer(item("b")).unwrap();
        queue.offer(item("c")).unwrap();
        assert_eq!(queue.offer(item("d")), Err(Dropped::QueueFull));
        store.gate.add_permits(100);
        assert!(queue.flush().await);
        let written: Vec<String> = store.batches.lock().unwrap().iter().flatten().cloned().collect();
        assert_eq!(written, ["a", "b", "c"]);
        queue.close(Duration::from_secs(5)).await;
        assert_eq!(queue.offer(item("e")), Err(Dropped::QueueClosed));
    }

    #[tokio::test]
    async fn a_failing_store_never_fails_the_offer() {
        let store = Arc::new(Recording::new(true, 100));
        let queue = ReviewQueue::start(store.clone(), settings(8));
        assert_eq!(queue.offer(item("a")), Ok(()));
        assert!(queue.flush().await);
        assert!(store.batches.lock().unwrap().is_empty());
    }
}
