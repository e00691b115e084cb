//! The system of record: one [redb](https://www.redb.org) database file, `<storage.dir>/warrant.redb`,
//! holding every acknowledged write — documents' chunks with provenance and their embeddings,
//! the ACL change log, an ACL checkpoint, the ordinal counter and the lineage id.
//!
//! redb is an embedded, pure-Rust, ACID key-value store with copy-on-write B-trees: a write
//! transaction becomes visible and durable atomically when `commit` returns (with the default
//! `Durability::Immediate` it fsyncs before returning), and a crash at any moment leaves the file
//! at the last committed transaction. Every file is opened with its integrity check on, so a
//! file altered or torn outside redb's own commit protocol is refused with an error naming it
//! instead of being trusted; the one exception is a file that is byte for byte the one redb
//! closed at the last graceful shutdown ([`seal`]: its BLAKE3 hash, checked at open).
//!
//! Next to the file, [`indexes`] keeps index sets (the shards' graph and lexical images), so a
//! restart loads the indexes instead of rebuilding them from the rows.
//!
//! Tables:
//! - `meta`: `format` (u32 LE), `lineage` (UTF-8), `next_ordinal` (u32 LE), `embedder`
//!   (`name\0dimension`), `checkpoint` (bincode of the checkpoint epoch and ACL snapshot);
//! - `changes`: epoch (u64) → JSON array of that epoch's mutations (one published batch, in the
//!   replica feed's wire format);
//! - `chunks`: document ordinal (u32) → bincode of the live version's chunks;
//! - `vectors`: document ordinal (u32) → their embeddings, little-endian `f32`, chunk after chunk;
//! - `staged`: document ordinal (u32) → empty: rows of a document batch written ahead of its
//!   publication ([`Store::stage`]), not yet live;
//! - `sentences`: document ordinal (u32) → bincode of its chunks' sentence vectors (one
//!   optional [`crate::domain::SentenceVectors`] per chunk, in chunk order); absent for a
//!   document ingested without them, and in files written before the table existed (such a
//!   file opens as it is: its chunks have none);
//! - `layouts`: document ordinal (u32) → bincode of its chunks' layout maps (one optional
//!   [`crate::domain::Layout`] per chunk, in chunk order: the pages and heading paths citations
//!   name); absent for a document submitted as text, and in files written before the table
//!   existed (such a file opens as it is: its chunks have no location).
//!
//! Invariants:
//! - one published ACL change (a document batch whose rows were staged, a delete, a grant, a
//!   revoke) is exactly one write transaction, committed before the change is published in
//!   memory and before it is acknowledged;
//! - `chunks`/`vectors`/`sentences`/`layouts` hold exactly the live document versions plus the staged ones: the
//!   transaction that tombstones an ordinal (delete, superseding upsert) removes its rows, and
//!   the one that publishes a staged batch removes its `staged` marks. Staging writes a large
//!   batch's rows in small transactions outside the engine's writer lock, so a revoke never
//!   waits for a 500-document commit; recovery deletes staged rows that were never published;
//! - recovery = checkpoint + every change after it, replayed in epoch order; the log is only
//!   compacted behind a checkpoint;
//! - the ordinal counter is stored with every commit, so ordinals are never reused across
//!   restarts, and the lineage id is written once, when the file is created.

mod files;
pub mod indexes;
pub mod journal;
pub mod progress;
mod recover;
mod rows;
pub mod seal;

use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use roaring::RoaringBitmap;

use crate::acl::{AclChange, AclMutation, AclSnapshot, AclStore, new_lineage};
use crate::domain::{Chunk, DocOrdinal, Layout, SentenceVectors};
use rows::DocumentRows;

pub use files::{DIRECTORY_MODE, FILE_MODE, private_directory, private_file};
pub use rows::EncodedDocument;

/// The database file inside the data directory.
pub const STORE_FILE: &str = "warrant.redb";
/// The on-disk layout version this build writes and reads.
pub const STORE_FORMAT: u32 = 1;

/// Default page cache of the store in MiB (`storage.cache_mb`).
pub const DEFAULT_CACHE_MB: usize = 32;

const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const CHANGES: TableDefinition<u64, &[u8]> = TableDefinition::new("changes");
const CHUNKS: TableDefinition<u32, &[u8]> = TableDefinition::new("chunks");
const VECTORS: TableDefinition<u32, &[u8]> = TableDefinition::new("vectors");
const STAGED: TableDefinition<u32, &[u8]> = TableDefinition::new("staged");
const SENTENCES: TableDefinition<u32, &[u8]> = TableDefinition::new("sentences");
const LAYOUTS: TableDefinition<u32, &[u8]> = TableDefinition::new("layouts");

/// Errors of the storage layer. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// Opening, reading or committing failed (disk full, permission denied, I/O error, lock).
    #[error("storage file {file}: {reason}")]
    Io {
        /// The file.
        file: String,
        /// What failed.
        reason: String,
    },
    /// The file is not a warrant store, or its content contradicts itself.
    #[error("storage file {file} is corrupted or invalid: {reason}")]
    Corrupted {
        /// The file.
        file: String,
        /// What is wrong.
        reason: String,
    },
    /// The stored vectors were made by another embedder than the configured one.
    #[error(
        "storage file {file} holds vectors of embedder {stored} but the configured embedder is {configured}; refusing to mix vector spaces"
    )]
    Embedder {
        /// The file.
        file: String,
        /// `name/dimension` stored.
        stored: String,
        /// `name/dimension` configured.
        configured: String,
    },
    /// Another process holds the store open (a running server): one process at a time.
    #[error("storage file {file} is in use by another process (a running server?)")]
    InUse {
        /// The file.
        file: String,
    },
    /// A fault injected by a test at a step of the write path (never configured in production).
    #[error("injected fault at {0:?}")]
    Injected(WriteStep),
}

impl StorageError {
    /// Transport-neutral code: every storage failure is `storage_unavailable` to clients.
    pub fn code(&self) -> &'static str {
        "storage_unavailable"
    }
}

/// Result alias of this layer.
pub type StorageResult<T> = Result<T, StorageError>;

/// Steps of the engine's write path, in order; a test can inject a failure before any of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteStep {
    /// Chunks are embedded (outside the writer lock).
    Embed,
    /// Chunks are indexed under fresh, unpublished ordinals.
    Index,
    /// The batch's rows are written to the store, marked staged (durable, not live).
    Stage,
    /// The write transaction is committed (durable from here on).
    Commit,
    /// The new ACL snapshot is published (visible from here on).
    Publish,
    /// Tombstoned ordinals are purged from the lexical indexes.
    Purge,
}

impl WriteStep {
    /// Every step, in write-path order.
    pub const ALL: [WriteStep; 6] = [Self::Embed, Self::Index, Self::Stage, Self::Commit, Self::Publish, Self::Purge];
}

/// One durable write: the change-log entries of one published epoch, the document versions it
/// adds, the ordinals it tombstones, and the ordinal counter after it.
pub struct Commit<'a> {
    /// Log entries (all of one epoch).
    pub changes: &'a [AclChange],
    /// New document versions.
    pub added: &'a [EncodedDocument],
    /// Tombstoned ordinals (their rows are removed).
    pub removed: &'a RoaringBitmap,
    /// Staged ordinals this change makes live (their `staged` marks are removed).
    pub published: &'a RoaringBitmap,
    /// The ordinal counter.
    pub next_ordinal: DocOrdinal,
}

/// The database of an open store, held for one transaction ([`Store::database`]).
struct Open<'a>(std::sync::RwLockReadGuard<'a, Option<Database>>);

impl std::ops::Deref for Open<'_> {
    type Target = Database;

    fn deref(&self) -> &Database {
        self.0.as_ref().expect("Store::database checked that the store is open")
    }
}

/// What the store held when it was opened.
pub struct Recovered {
    /// The ACL store: checkpoint + replayed log, the retained log, ordinals, lineage.
    pub acl: AclStore,
    /// Every live document version's chunks (their vectors are read on demand:
    /// [`Store::vectors`]).
    pub chunks: Vec<Chunk>,
    /// Epoch of the checkpoint recovery started from.
    pub checkpoint_epoch: u64,
    /// Change batches replayed on top of it.
    pub replayed: usize,
    /// Whether the file was created by this open (a new lineage).
    pub created: bool,
    /// Whether the file was the one redb closed at the last graceful shutdown, byte for byte
    /// ([`seal`]), so redb's integrity check was skipped.
    pub sealed: bool,
}

/// The open store.
pub struct Store {
    /// `None` once [`Store::close`]d.
    db: std::sync::RwLock<Option<Database>>,
    file: String,
    /// Components of a stored vector.
    dimension: usize,
}

fn io(file: &str, error: impl std::fmt::Display) -> StorageError {
    StorageError::Io { file: file.to_owned(), reason: error.to_string() }
}

fn corrupted(file: &str, reason: impl std::fmt::Display) -> StorageError {
    StorageError::Corrupted { file: file.to_owned(), reason: reason.to_string() }
}

fn open_error(file: &str, error: redb::DatabaseError) -> StorageError {
    match error {
        redb::DatabaseError::Storage(redb::StorageError::Corrupted(reason)) => corrupted(file, reason),
        redb::DatabaseError::Storage(redb::StorageError::Io(error))
            if error.kind() == std::io::ErrorKind::UnexpectedEof || error.kind() == std::io::ErrorKind::InvalidData =>
        {
            corrupted(file, error)
        }
        redb::DatabaseError::DatabaseAlreadyOpen => StorageError::InUse { file: file.to_owned() },
        other => io(file, other),
    }
}

fn decode<T: serde::de::DeserializeOwned>(file: &str, what: &str, bytes: &[u8]) -> StorageResult<T> {
    exact(what, bytes).map_err(|reason| corrupted(file, reason))
}

/// The bincode value that `bytes` hold exactly (no trailing bytes); the error names `what`.
fn exact<T: serde::de::DeserializeOwned>(what: &str, bytes: &[u8]) -> Result<T, String> {
    let (value, read) = bincode::serde::decode_from_slice::<T, _>(bytes, bincode::config::standard())
        .map_err(|error| format!("{what}: {error}"))?;
    if read != bytes.len() {
        return Err(format!("{what}: trailing bytes"));
    }
    Ok(value)
}

fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, bincode::config::standard()).expect("plain data always encodes")
}

/// The mutations of one epoch as JSON (the replica feed's wire format of a mutation: tagged by
/// `kind`, which bincode cannot decode).
fn encode_changes(changes: &[AclChange]) -> Vec<u8> {
    let mutations: Vec<&AclMutation> = changes.iter().map(|change| &change.mutation).collect();
    serde_json::to_vec(&mutations).expect("mutations always encode")
}

fn u32_value(file: &str, key: &str, bytes: &[u8]) -> StorageResult<u32> {
    Ok(u32::from_le_bytes(bytes.try_into().map_err(|_| corrupted(file, format!("meta {key} is not 4 bytes")))?))
}

impl Store {
    /// Opens (or creates) the store in `directory` and recovers its state. `embedder` is the
    /// configured `name/dimension`; a store made with another one is refused.
    pub fn open(
        directory: &Path,
        embedder: &str,
        dimension: usize,
        cache_bytes: usize,
    ) -> StorageResult<(Self, Recovered)> {
        private_directory(directory)?;
        let path: PathBuf = directory.join(STORE_FILE);
        let file = path.display().to_string();
        let existed = std::fs::metadata(&path).map(|metadata| metadata.len() > 0).unwrap_or(false);
        private_file(&path)?;
        // A file redb did not write last (torn or altered) must be refused, never trusted: unless
        // it is byte for byte the file redb closed at the last graceful shutdown (its seal), the
        // integrity check verifies every page checksum of the committed trees on open.
        let opened = std::time::Instant::now();
        let sealed = existed && {
            let found = seal::take(&path);
            if let seal::Seal::Refused(reason) = &found {
                tracing::warn!(file, %reason, "the store's seal does not vouch for the file; checking every page");
            }
            found == seal::Seal::Matches
        };
        let db = std::panic::catch_unwind(|| {
            redb::Builder::new().set_check_integrity_on_open(!sealed).set_cache_size(cache_bytes).create(&path)
        })
        .map_err(|_| corrupted(&file, "the database file could not be read (redb panicked while opening it)"))?
        .map_err(|error| open_error(&file, error))?;
        if sealed {
            tracing::info!(seconds = opened.elapsed().as_secs_f64(), "store opened, the file sealed at its last close");
        } else {
            tracing::info!(seconds = opened.elapsed().as_secs_f64(), "store opened, every page checksum verified");
        }
        let store = Self { db: std::sync::RwLock::new(Some(db)), file, dimension };
        let configured = format!("{embedder}\0{dimension}");
        if !existed {
            store.initialize(&configured)?;
        }
        let (mut recovered, abandoned) = store.recover(&configured, !existed)?;
        recovered.sealed = sealed;
        if !abandoned.is_empty() {
            // Rows staged by a batch that was never published (a crash or failure in between).
            store.unstage(&abandoned)?;
        }
        Ok((store, recovered))
    }

    /// Creates a new store in `directory` holding `acl` (as the checkpoint, with its retained
    /// log and lineage) and `chunks` (restore of a primary from a snapshot). Refuses when a store
    /// already exists there.
    pub fn seed(
        directory: &Path,
        embedder: &str,
        dimension: usize,
        acl: &AclStore,
        chunks: &[(std::sync::Arc<Chunk>, Vec<f32>)],
        cache_bytes: usize,
    ) -> StorageResult<Self> {
        private_directory(directory)?;
        let path = directory.join(STORE_FILE);
        let file = path.display().to_string();
        if std::fs::metadata(&path).map(|metadata| metadata.len() > 0).unwrap_or(false) {
            return Err(io(&file, "a store already exists here; restore only seeds a new data directory"));
        }
        private_file(&path)?;
        let db =
            redb::Builder::new().set_cache_size(cache_bytes).create(&path).map_err(|error| open_error(&file, error))?;
        let store = Self { db: std::sync::RwLock::new(Some(db)), file, dimension };
        store.write_seed(&format!("{embedder}\0{dimension}"), acl, chunks)?;
        Ok(store)
    }

    /// Replaces everything this open store holds with `acl` and `chunks` (a durable replica
    /// re-bootstrapped from its primary's snapshot), in one durable transaction: a crash leaves
    /// the old contents or the new, whole. The embedder stays the store's.
    pub fn reseed(&self, acl: &AclStore, chunks: &[(std::sync::Arc<Chunk>, Vec<f32>)]) -> StorageResult<()> {
        let file = self.file.as_str();
        let embedder = {
            let db = self.database()?;
            let txn = db.begin_read().map_err(|error| io(file, error))?;
            let meta = txn.open_table(META).map_err(|error| corrupted(file, error))?;
            let value = meta.get("embedder").map_err(|error| io(file, error))?;
            let value = value.ok_or_else(|| corrupted(file, "meta embedder is missing"))?;
            String::from_utf8(value.value().to_vec()).map_err(|_| corrupted(file, "meta embedder is not UTF-8"))?
        };
        self.write_seed(&embedder, acl, chunks)
    }

    /// One transaction that leaves the store holding exactly `acl` (its snapshot as the
    /// checkpoint, its retained log, lineage and ordinal counter) and `chunks`.
    fn write_seed(
        &self,
        embedder: &str,
        acl: &AclStore,
        chunks: &[(std::sync::Arc<Chunk>, Vec<f32>)],
    ) -> StorageResult<()> {
        let file = self.file.as_str();
        let snapshot = acl.load();
        let db = self.database()?;
        let txn = db.begin_write().map_err(|error| io(file, error))?;
        {
            txn.delete_table(CHANGES).map_err(|error| io(file, error))?;
            for table in [CHUNKS, VECTORS, SENTENCES, LAYOUTS, STAGED] {
                txn.delete_table(table).map_err(|error| io(file, error))?;
            }
            let mut meta = txn.open_table(META).map_err(|error| io(file, error))?;
            meta.insert("format", STORE_FORMAT.to_le_bytes().as_slice()).map_err(|error| io(file, error))?;
            meta.insert("lineage", acl.lineage().as_bytes()).map_err(|error| io(file, error))?;
            meta.insert("next_ordinal", acl.next_ordinal().to_le_bytes().as_slice())
                .map_err(|error| io(file, error))?;
            meta.insert("embedder", embedder.as_bytes()).map_err(|error| io(file, error))?;
            meta.insert("checkpoint", encode(snapshot.as_ref()).as_slice()).map_err(|error| io(file, error))?;
            let mut changes = txn.open_table(CHANGES).map_err(|error| io(file, error))?;
            let log = acl.log();
            for batch in log.chunk_by(|a, b| a.epoch == b.epoch) {
                changes.insert(batch[0].epoch, encode_changes(batch).as_slice()).map_err(|error| io(file, error))?;
            }
            let mut rows = DocumentRows::open(&txn, file)?;
            let mut by_ordinal: std::collections::BTreeMap<DocOrdinal, Vec<(&Chunk, &[f32])>> = Default::default();
            for (chunk, vector) in chunks {
                by_ordinal.entry(chunk.doc_ordinal).or_default().push((chunk.as_ref(), vector.as_slice()));
            }
            for (ordinal, mut items) in by_ordinal {
                items.sort_by_key(|(chunk, _)| chunk.ordinal);
                rows.insert(&EncodedDocument::encode(ordinal, &items), file)?;
            }
        }
        txn.commit().map_err(|error| io(file, error))
    }

    /// The database file (for messages).
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The open database, or an error once the store is closed. Held for a whole transaction,
    /// so [`Store::close`] waits for the transactions in flight.
    fn database(&self) -> StorageResult<Open<'_>> {
        let guard = self.db.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        if guard.is_none() {
            return Err(io(&self.file, "the store is closed"));
        }
        Ok(Open(guard))
    }

    fn initialize(&self, embedder: &str) -> StorageResult<()> {
        let file = &self.file;
        let db = self.database()?;
        let txn = db.begin_write().map_err(|error| io(file, error))?;
        {
            let mut meta = txn.open_table(META).map_err(|error| io(file, error))?;
            meta.insert("format", STORE_FORMAT.to_le_bytes().as_slice()).map_err(|error| io(file, error))?;
            meta.insert("lineage", new_lineage().as_bytes()).map_err(|error| io(file, error))?;
            meta.insert("next_ordinal", 0u32.to_le_bytes().as_slice()).map_err(|error| io(file, error))?;
            meta.insert("embedder", embedder.as_bytes()).map_err(|error| io(file, error))?;
            txn.open_table(CHANGES).map_err(|error| io(file, error))?;
            DocumentRows::open(&txn, file)?;
        }
        txn.commit().map_err(|error| io(file, error))
    }

    /// Writes `documents`' rows ahead of their publication, marked as staged, in one durable
    /// transaction. Called outside the engine's writer lock, in small pieces, so that a large
    /// batch never holds up another write; [`Store::commit`] with `published` makes them live.
    pub fn stage(&self, documents: &[EncodedDocument]) -> StorageResult<()> {
        let file = self.file.as_str();
        let db = self.database()?;
        let txn = db.begin_write().map_err(|error| io(file, error))?;
        {
            let mut staged = txn.open_table(STAGED).map_err(|error| io(file, error))?;
            let mut rows = DocumentRows::open(&txn, file)?;
            for document in documents {
                staged.insert(document.ordinal, [].as_slice()).map_err(|error| io(file, error))?;
                rows.insert(document, file)?;
            }
        }
        txn.commit().map_err(|error| io(file, error))
    }

    /// Deletes the rows of staged ordinals among `ordinals` (a batch that will never be
    /// published). Live ordinals are left alone.
    pub fn unstage(&self, ordinals: &RoaringBitmap) -> StorageResult<()> {
        let file = self.file.as_str();
        let db = self.database()?;
        let txn = db.begin_write().map_err(|error| io(file, error))?;
        {
            let mut staged = txn.open_table(STAGED).map_err(|error| io(file, error))?;
            let mut rows = DocumentRows::open(&txn, file)?;
            for ordinal in ordinals {
                if staged.remove(ordinal).map_err(|error| io(file, error))?.is_some() {
                    rows.remove(ordinal, file)?;
                }
            }
        }
        txn.commit().map_err(|error| io(file, error))
    }

    /// Commits one published change as one durable transaction (fsynced when this returns).
    pub fn commit(&self, commit: &Commit<'_>) -> StorageResult<()> {
        let file = self.file.as_str();
        let epoch = commit.changes.first().map(|change| change.epoch);
        debug_assert!(commit.changes.iter().all(|change| Some(change.epoch) == epoch));
        let db = self.database()?;
        let txn = db.begin_write().map_err(|error| io(file, error))?;
        {
            if let Some(epoch) = epoch {
                let mut changes = txn.open_table(CHANGES).map_err(|error| io(file, error))?;
                changes.insert(epoch, encode_changes(commit.changes).as_slice()).map_err(|error| io(file, error))?;
            }
            let mut rows = DocumentRows::open(&txn, file)?;
            for ordinal in commit.removed {
                rows.remove(ordinal, file)?;
            }
            for document in commit.added {
                rows.insert(document, file)?;
            }
            if !commit.published.is_empty() {
                let mut staged = txn.open_table(STAGED).map_err(|error| io(file, error))?;
                for ordinal in commit.published {
                    if staged.remove(ordinal).map_err(|error| io(file, error))?.is_none() {
                        return Err(io(file, format!("ordinal {ordinal} was published without being staged")));
                    }
                }
            }
            let mut meta = txn.open_table(META).map_err(|error| io(file, error))?;
            meta.insert("next_ordinal", commit.next_ordinal.to_le_bytes().as_slice())
                .map_err(|error| io(file, error))?;
        }
        txn.commit().map_err(|error| io(file, error))
    }

    /// Stores `snapshot` as the checkpoint and deletes log entries with `epoch <= compact_up_to`
    /// (at most the checkpoint's epoch), in one transaction.
    pub fn checkpoint(&self, snapshot: &AclSnapshot, compact_up_to: u64) -> StorageResult<()> {
        let file = self.file.as_str();
        let compact_up_to = compact_up_to.min(snapshot.epoch());
        let db = self.database()?;
        let txn = db.begin_write().map_err(|error| io(file, error))?;
        {
            let mut meta = txn.open_table(META).map_err(|error| io(file, error))?;
            meta.insert("checkpoint", encode(snapshot).as_slice()).map_err(|error| io(file, error))?;
            let mut changes = txn.open_table(CHANGES).map_err(|error| io(file, error))?;
            changes.retain_in(..=compact_up_to, |_, _| false).map_err(|error| io(file, error))?;
        }
        txn.commit().map_err(|error| io(file, error))
    }

    /// Number of change batches stored (for tests and measurements).
    pub fn change_batches(&self) -> StorageResult<u64> {
        let file = self.file.as_str();
        let db = self.database()?;
        let txn = db.begin_read().map_err(|error| io(file, error))?;
        let changes = txn.open_table(CHANGES).map_err(|error| io(file, error))?;
        changes.len().map_err(|error| io(file, error))
    }
}

#[cfg(test)]
mod tests;
