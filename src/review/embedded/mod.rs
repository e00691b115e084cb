//! The review store of the embedded backend: a redb file of its own beside the system of record,
//! `<storage.dir>/reviews.redb` (0600 in the 0700 data directory), or a redb database in memory
//! when the engine has no data directory.
//!
//! A file of its own rather than tables of `warrant.redb`: redb has one writer per file, and a
//! review write (one fsync per batch of queued items) must never hold up a revoke; the store's
//! seal and snapshot code stay as they are. Every commit is `Durability::Immediate` (fsynced when
//! it returns), so an item written survives `kill -9`; the file is opened with redb's integrity
//! check (it is bounded by `review.max_items_per_tenant`).
//!
//! Tables (keys are redb tuples, ordered element by element):
//! - `review_tenants`: tenant → (last sequence given, items held);
//! - `review_items`: (tenant, seq) → the encoded [`ReviewItem`](super::ReviewItem);
//! - `review_ids`: (tenant, review id) → seq;
//! - `review_status`: (tenant, 0 pending | 1 reviewed, seq) → ();
//! - `review_sources`: (tenant, doc id, doc version, seq) → the encoded texts of that document's
//!   sources in the item (document first, so a purge is a range);
//! - `review_generated`: (tenant, seq) → the encoded [`GeneratedText`](super::GeneratedText);
//! - `review_verdicts`: (tenant, seq, number) → an encoded [`Verdict`](super::Verdict).
//!
//! Invariant: whether a document version is live is asked inside the write transaction that
//! stores its text, under the store's gate; a purge takes the gate before it looks for texts to
//! delete. So a purge that follows a delete's publication either sees the text written or the
//! write saw the document gone; and a purge that finds nothing (every upsert asks) costs a read
//! transaction, no commit.
//!
//! This file opens the store and answers the [`ReviewStore`] calls; the item-level writes inside
//! one transaction (insert, evict, remove, purge) are [`tables`].

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::item::{self, GeneratedText, ReviewItem, ReviewStatus, SourceText, StoredItem, Summary, Verdict};
use super::{Inserted, NewItem, ReviewError, ReviewResult, ReviewStore};
use tables::{Tables, versions};

mod tables;

/// The file inside the data directory.
pub const REVIEWS_FILE: &str = "reviews.redb";

const TENANTS: TableDefinition<&str, (u64, u64)> = TableDefinition::new("review_tenants");
const ITEMS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("review_items");
const IDS: TableDefinition<(&str, &str), u64> = TableDefinition::new("review_ids");
const STATUS: TableDefinition<(&str, u8, u64), ()> = TableDefinition::new("review_status");
const SOURCES: TableDefinition<(&str, &str, u64, u64), &[u8]> = TableDefinition::new("review_sources");
const GENERATED: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("review_generated");
const VERDICTS: TableDefinition<(&str, u64, u32), &[u8]> = TableDefinition::new("review_verdicts");

const PENDING: u8 = 0;
const REVIEWED: u8 = 1;

/// Which document versions are live now (the embedded engine's ACL snapshot).
pub trait Liveness: Send + Sync {
    /// The live version of `doc_id` in `tenant`, if the document exists.
    fn live_version(&self, tenant: &str, doc_id: &str) -> Option<u64>;
}

impl Liveness for crate::embedded::Engine {
    fn live_version(&self, tenant: &str, doc_id: &str) -> Option<u64> {
        self.acl().load().entry(tenant, doc_id).map(|entry| entry.version)
    }
}

/// The embedded review store (see the module's documentation).
pub struct EmbeddedReviews {
    db: Arc<Database>,
    file: String,
    liveness: Arc<dyn Liveness>,
    /// Held by an insert from its liveness checks to its commit, and by a purge from its search
    /// to its commit.
    gate: Arc<std::sync::Mutex<()>>,
}

fn failed(file: &str, error: impl std::fmt::Display) -> ReviewError {
    ReviewError::Storage(format!("{file}: {error}"))
}

impl EmbeddedReviews {
    /// Opens (or creates) `<directory>/reviews.redb`, or a store in memory when `directory` is
    /// `None`. Blocking: call it off the async runtime's threads.
    pub fn open(directory: Option<&Path>, liveness: Arc<dyn Liveness>) -> ReviewResult<Self> {
        let (db, file) = match directory {
            Some(directory) => {
                let path = directory.join(REVIEWS_FILE);
                let file = path.display().to_string();
                crate::storage::private_directory(directory).map_err(|error| failed(&file, error))?;
                crate::storage::private_file(&path).map_err(|error| failed(&file, error))?;
                let db = std::panic::catch_unwind(|| {
                    redb::Builder::new().set_check_integrity_on_open(true).set_cache_size(8 << 20).create(&path)
                })
                .map_err(|_| failed(&file, "the file could not be read (redb panicked while opening it)"))?
                .map_err(|error| failed(&file, error))?;
                (db, file)
            }
            None => {
                let db = redb::Builder::new()
                    .create_with_backend(redb::backends::InMemoryBackend::new())
                    .map_err(|error| failed("reviews (in memory)", error))?;
                (db, "reviews (in memory)".to_owned())
            }
        };
        let store = Self { db: Arc::new(db), file, liveness, gate: Arc::default() };
        store.create_tables()?;
        Ok(store)
    }

    fn create_tables(&self) -> ReviewResult<()> {
        let file = self.file.as_str();
        let txn = self.db.begin_write().map_err(|error| failed(file, error))?;
        {
            Tables::open(&txn, file)?;
        }
        txn.commit().map_err(|error| failed(file, error))
    }

    /// Runs `work` on a blocking thread with this store.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Database, &str, &dyn Liveness) -> ReviewResult<T> + Send + 'static,
    ) -> ReviewResult<T> {
        let (db, file, liveness) = (Arc::clone(&self.db), self.file.clone(), Arc::clone(&self.liveness));
        tokio::task::spawn_blocking(move || work(&db, &file, liveness.as_ref()))
            .await
            .map_err(|error| failed(&self.file, error))?
    }

    /// [`Self::blocking`] holding the gate.
    async fn gated<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Database, &str, &dyn Liveness) -> ReviewResult<T> + Send + 'static,
    ) -> ReviewResult<T> {
        let gate = Arc::clone(&self.gate);
        self.blocking(move |db, file, liveness| {
            let _held = gate.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            work(db, file, liveness)
        })
        .await
    }
}

/// The verdicts of item `seq`, oldest first.
fn verdicts_of(
    table: &impl ReadableTable<(&'static str, u64, u32), &'static [u8]>,
    tenant: &str,
    seq: u64,
    file: &str,
) -> ReviewResult<Vec<Verdict>> {
    let mut verdicts = Vec::new();
    for entry in table.range((tenant, seq, 0)..=(tenant, seq, u32::MAX)).map_err(|error| failed(file, error))? {
        let (_, value) = entry.map_err(|error| failed(file, error))?;
        verdicts.push(item::decode("review verdict", value.value())?);
    }
    Ok(verdicts)
}

#[async_trait]
impl ReviewStore for EmbeddedReviews {
    async fn insert(&self, items: Vec<NewItem>, max_items_per_tenant: u64) -> ReviewResult<Inserted> {
        self.gated(move |db, file, liveness| {
            let txn = db.begin_write().map_err(|error| failed(file, error))?;
            let mut inserted = Inserted::default();
            {
                let mut tables = Tables::open(&txn, file)?;
                for new in &items {
                    tables.insert(new, liveness, file)?;
                    inserted.written += 1;
                }
                let mut tenants: Vec<&str> = items.iter().map(|new| new.tenant.as_str()).collect();
                tenants.sort_unstable();
                tenants.dedup();
                for tenant in tenants {
                    inserted.evicted += tables.evict(tenant, max_items_per_tenant, file)?;
                }
            }
            txn.commit().map_err(|error| failed(file, error))?;
            Ok(inserted)
        })
        .await
    }

    async fn page(
        &self,
        tenant: &str,
        status: Option<ReviewStatus>,
        before: Option<u64>,
        limit: usize,
    ) -> ReviewResult<Vec<Summary>> {
        let tenant = tenant.to_owned();
        self.blocking(move |db, file, _| {
            let txn = db.begin_read().map_err(|error| failed(file, error))?;
            let items = txn.open_table(ITEMS).map_err(|error| failed(file, error))?;
            let verdicts = txn.open_table(VERDICTS).map_err(|error| failed(file, error))?;
            let below = before.unwrap_or(u64::MAX);
            let tenant = tenant.as_str();
            let seqs: Vec<u64> = match status {
                None => items
                    .range((tenant, 0)..(tenant, below))
                    .map_err(|error| failed(file, error))?
                    .rev()
                    .take(limit)
                    .map(|entry| entry.map(|(key, _)| key.value().1))
                    .collect::<Result<_, _>>()
                    .map_err(|error| failed(file, error))?,
                Some(status) => {
                    let code = if status == ReviewStatus::Pending { PENDING } else { REVIEWED };
                    let index = txn.open_table(STATUS).map_err(|error| failed(file, error))?;
                    index
                        .range((tenant, code, 0)..(tenant, code, below))
                        .map_err(|error| failed(file, error))?
                        .rev()
                        .take(limit)
                        .map(|entry| entry.map(|(key, _)| key.value().2))
                        .collect::<Result<_, _>>()
                        .map_err(|error| failed(file, error))?
                }
            };
            let mut page = Vec::with_capacity(seqs.len());
            for seq in seqs {
                let Some(bytes) = items.get((tenant, seq)).map_err(|error| failed(file, error))? else { continue };
                let item = item::decode("review item", bytes.value())?;
                let count = verdicts
                    .range((tenant, seq, 0)..=(tenant, seq, u32::MAX))
                    .map_err(|error| failed(file, error))?
                    .count();
                page.push(Summary { seq, item, verdicts: u32::try_from(count).unwrap_or(u32::MAX) });
            }
            Ok(page)
        })
        .await
    }

    async fn get(&self, tenant: &str, review_id: &str) -> ReviewResult<Option<StoredItem>> {
        let (tenant, review_id) = (tenant.to_owned(), review_id.to_owned());
        self.blocking(move |db, file, _| {
            let txn = db.begin_read().map_err(|error| failed(file, error))?;
            let tenant = tenant.as_str();
            let Some(seq) = txn
                .open_table(IDS)
                .map_err(|error| failed(file, error))?
                .get((tenant, review_id.as_str()))
                .map_err(|error| failed(file, error))?
            else {
                return Ok(None);
            };
            let seq = seq.value();
            let Some(bytes) = txn
                .open_table(ITEMS)
                .map_err(|error| failed(file, error))?
                .get((tenant, seq))
                .map_err(|error| failed(file, error))?
            else {
                return Ok(None);
            };
            let item: ReviewItem = item::decode("review item", bytes.value())?;
            let source_table = txn.open_table(SOURCES).map_err(|error| failed(file, error))?;
            let mut sources = BTreeMap::new();
            for (doc_id, version) in versions(&item) {
                if let Some(bytes) =
                    source_table.get((tenant, doc_id, version, seq)).map_err(|error| failed(file, error))?
                {
                    sources
                        .insert(doc_id.to_owned(), item::decode::<Vec<SourceText>>("review sources", bytes.value())?);
                }
            }
            let generated = match txn
                .open_table(GENERATED)
                .map_err(|error| failed(file, error))?
                .get((tenant, seq))
                .map_err(|error| failed(file, error))?
            {
                Some(bytes) => Some(item::decode::<GeneratedText>("review generated text", bytes.value())?),
                None => None,
            };
            let verdicts =
                verdicts_of(&txn.open_table(VERDICTS).map_err(|error| failed(file, error))?, tenant, seq, file)?;
            Ok(Some(StoredItem { seq, item, sources, generated, verdicts }))
        })
        .await
    }

    async fn add_verdict(
        &self,
        tenant: &str,
        review_id: &str,
        verdict: &Verdict,
        max_verdicts: u32,
    ) -> ReviewResult<bool> {
        let (tenant, review_id, encoded) = (tenant.to_owned(), review_id.to_owned(), item::encode(verdict));
        self.blocking(move |db, file, _| {
            let txn = db.begin_write().map_err(|error| failed(file, error))?;
            let tenant = tenant.as_str();
            {
                let mut tables = Tables::open(&txn, file)?;
                let Some(seq) = tables
                    .ids
                    .get((tenant, review_id.as_str()))
                    .map_err(|error| failed(file, error))?
                    .map(|guard| guard.value())
                else {
                    return Ok(false);
                };
                let last = tables
                    .verdicts
                    .range((tenant, seq, 0)..=(tenant, seq, u32::MAX))
                    .map_err(|error| failed(file, error))?
                    .next_back()
                    .transpose()
                    .map_err(|error| failed(file, error))?
                    .map_or(0, |(key, _)| key.value().2);
                if last >= max_verdicts {
                    return Err(ReviewError::TooManyVerdicts(max_verdicts));
                }
                tables
                    .verdicts
                    .insert((tenant, seq, last + 1), encoded.as_slice())
                    .map_err(|error| failed(file, error))?;
                tables.status.remove((tenant, PENDING, seq)).map_err(|error| failed(file, error))?;
                tables.status.insert((tenant, REVIEWED, seq), ()).map_err(|error| failed(file, error))?;
            }
            txn.commit().map_err(|error| failed(file, error))?;
            Ok(true)
        })
        .await
    }

    async fn purge_documents(&self, tenant: &str, doc_ids: &[String]) -> ReviewResult<u64> {
        let (tenant, doc_ids) = (tenant.to_owned(), doc_ids.to_vec());
        self.gated(move |db, file, liveness| {
            // Under the gate, a read finds every text an insert wrote: commit only if there is one.
            let read = db.begin_read().map_err(|error| failed(file, error))?;
            let sources = read.open_table(SOURCES).map_err(|error| failed(file, error))?;
            let mut found = Vec::new();
            for doc_id in &doc_ids {
                let range =
                    (tenant.as_str(), doc_id.as_str(), 0, 0)..=(tenant.as_str(), doc_id.as_str(), u64::MAX, u64::MAX);
                if sources.range(range).map_err(|error| failed(file, error))?.next().is_some() {
                    found.push(doc_id);
                }
            }
            drop(sources);
            drop(read);
            if found.is_empty() {
                return Ok(0);
            }
            let txn = db.begin_write().map_err(|error| failed(file, error))?;
            let mut purged = 0;
            {
                let mut tables = Tables::open(&txn, file)?;
                for doc_id in found {
                    purged += tables.purge(&tenant, doc_id, liveness, file)?;
                }
            }
            txn.commit().map_err(|error| failed(file, error))?;
            Ok(purged)
        })
        .await
    }

    async fn expire(&self, cutoff_ms: u64) -> ReviewResult<u64> {
        self.blocking(move |db, file, _| {
            let txn = db.begin_write().map_err(|error| failed(file, error))?;
            let mut expired = 0;
            {
                let mut tables = Tables::open(&txn, file)?;
                let tenants: Vec<String> = tables
                    .tenants
                    .iter()
                    .map_err(|error| failed(file, error))?
                    .map(|entry| entry.map(|(key, _)| key.value().to_owned()))
                    .collect::<Result<_, _>>()
                    .map_err(|error| failed(file, error))?;
                for tenant in &tenants {
                    let tenant = tenant.as_str();
                    // Oldest first; items are written in about the order they were created.
                    let mut old = Vec::new();
                    for entry in
                        tables.items.range((tenant, 0)..=(tenant, u64::MAX)).map_err(|error| failed(file, error))?
                    {
                        let (key, value) = entry.map_err(|error| failed(file, error))?;
                        let created =
                            item::decode::<ReviewItem>("review item", value.value()).map_or(0, |item| item.created_ms);
                        if created >= cutoff_ms {
                            break;
                        }
                        old.push(key.value().1);
                    }
                    for seq in old {
                        tables.remove(tenant, seq, file)?;
                        expired += 1;
                    }
                }
            }
            txn.commit().map_err(|error| failed(file, error))?;
            Ok(expired)
        })
        .await
    }

    async fn sweep_dead_documents(&self) -> ReviewResult<u64> {
        self.gated(move |db, file, liveness| {
            let txn = db.begin_write().map_err(|error| failed(file, error))?;
            let mut purged = 0;
            {
                let mut tables = Tables::open(&txn, file)?;
                let mut documents: Vec<(String, String)> = Vec::new();
                for entry in tables.sources.iter().map_err(|error| failed(file, error))? {
                    let (key, _) = entry.map_err(|error| failed(file, error))?;
                    let (tenant, doc_id, version, _) = key.value();
                    let pair = (tenant.to_owned(), doc_id.to_owned());
                    if liveness.live_version(tenant, doc_id) != Some(version) && documents.last() != Some(&pair) {
                        documents.push(pair);
                    }
                }
                for (tenant, doc_id) in documents {
                    purged += tables.purge(&tenant, &doc_id, liveness, file)?;
                }
            }
            txn.commit().map_err(|error| failed(file, error))?;
            Ok(purged)
        })
        .await
    }

    async fn tenants(&self) -> ReviewResult<Vec<String>> {
        self.blocking(|db, file, _| {
            let txn = db.begin_read().map_err(|error| failed(file, error))?;
            let tenants = txn.open_table(TENANTS).map_err(|error| failed(file, error))?;
            tenants
                .iter()
                .map_err(|error| failed(file, error))?
                .map(|entry| entry.map(|(key, _)| key.value().to_owned()).map_err(|error| failed(file, error)))
                .collect()
        })
        .await
    }
}

/// The liveness of a store opened only to be read, by the offline tools: no document is live, so
/// a write through such a store would keep no text (none is made).
pub struct ReadOnly;

impl Liveness for ReadOnly {
    fn live_version(&self, _: &str, _: &str) -> Option<u64> {
        None
    }
}

impl EmbeddedReviews {
    /// Opens the existing `<directory>/reviews.redb` to read it (the offline tools); an error
    /// when there is none, or when a running server holds it (redb locks the file).
    pub fn open_to_read(directory: &Path) -> ReviewResult<Self> {
        let path = directory.join(REVIEWS_FILE);
        if !path.is_file() {
            return Err(failed(&path.display().to_string(), "no review store here (routing never wrote one)"));
        }
        Self::open(Some(directory), Arc::new(ReadOnly))
    }
}

#[cfg(test)]
mod tests;
