//! Index sets: the shards' vector and lexical index images (the same `graph.bin` /
//! `lexical.bin` images as snapshot format 2) written next to the store, so that a restart
//! loads the indexes instead of rebuilding HNSW and BM25 from the rows.
//!
//! An index set lives in `<storage.dir>/indexes/<epoch>-<unix ms>/`: `manifest.json` (format,
//! lineage, ACL epoch, next ordinal, embedder, shard count, every file with its size and
//! sha256) and per shard `shard-NNNN.graph.bin` and `shard-NNNN.lexical.bin`. It holds no
//! chunk: a slot's chunk is the store row keyed by the slot's ordinal and the chunk's position
//! in its document ([`ChunkPositions::InDocument`]).
//!
//! Invariants kept by this module:
//! - a set appears under its final name only complete (written into `.tmp-<name>/`, every file
//!   and the directory fsynced, renamed, the parent fsynced); at most [`RETAIN`] sets are kept;
//! - [`load_or_build`] uses a set only when its lineage, embedder and shard count are the
//!   store's, its next ordinal and epoch are not beyond the store's, and every file has its
//!   size and checksum and decodes; on anything else it logs why and rebuilds from the rows, so
//!   a damaged set costs time, never answers;
//! - scopes stay the store's: a slot whose ordinal is no longer live has no chunk (dead, outside
//!   every scope, ordinals are never reused), and the live chunks the set does not know (written
//!   after it) are indexed on top of it from their stored vectors, never re-embedded.

use std::collections::HashMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::journal;
use roaring::RoaringBitmap;

use crate::acl::AclStore;
use crate::domain::{Chunk, DocOrdinal};
use crate::index::shard::{DecodedShard, JournalReplay, JournalSink, LoadedShard, Shard};
use crate::index::vector::VectorParams;
use crate::index::{IndexError, IndexResult};

/// Folder of the index sets under the storage directory.
pub const INDEXES_DIR: &str = "indexes";
/// Index sets kept (the newest ones).
pub const RETAIN: usize = 2;
/// The manifest's format this build writes and reads.
const SET_FORMAT: u32 = 1;
const MANIFEST: &str = "manifest.json";
const TMP_PREFIX: &str = ".tmp-";

/// Serializes index-set writing inside one process (temporary directories, pruning).
static WRITE_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `manifest.json` of an index set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexSetManifest {
    /// [`SET_FORMAT`].
    pub format: u32,
    /// Lineage of the store the set was written from.
    pub lineage: String,
    /// ACL epoch at writing.
    pub epoch: u64,
    /// Next ordinal at writing (every slot's ordinal is below it).
    pub next_ordinal: DocOrdinal,
    /// Embedder `name/dimension`.
    pub embedder: String,
    /// Shard count.
    pub shards: usize,
    /// Every file with its size and sha256 (lowercase hex).
    pub files: Vec<(String, u64, String)>,
}

/// How [`load_or_build`] got its shards.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum IndexSetOutcome {
    /// Loaded from the named set; `indexed_after` live chunks were newer than it.
    Loaded {
        /// The set's directory name.
        set: String,
        /// Slots restored from the set's journal (chunks not indexed again).
        journaled: usize,
        /// Journal records applied.
        journal_records: usize,
        /// Chunks indexed on top of the set and its journal (from the store's rows).
        indexed_after: usize,
        /// Why a shard's journal was not applied to its end (each names the file), if any was not.
        journal_stopped: Vec<String>,
        /// Whether every shard journals again from here (otherwise a new index set is due).
        journaling: bool,
    },
    /// No set, or none usable: rebuilt from the rows (`reason` says why).
    Rebuilt {
        /// Why no set was used.
        reason: String,
    },
}

impl IndexSetOutcome {
    /// Whether every shard journals its changes from here on (otherwise a new index set is due:
    /// until one is written, a restart indexes their later chunks again).
    pub fn journaling(&self) -> bool {
        matches!(self, Self::Loaded { journaling: true, .. })
    }
}

/// One shard's live rows keyed by (document ordinal, chunk position in the document).
type ShardRows = HashMap<(DocOrdinal, u32), Chunk>;

fn graph_name(shard: usize) -> String {
    format!("shard-{shard:04}.graph.bin")
}

fn lexical_name(shard: usize) -> String {
    format!("shard-{shard:04}.lexical.bin")
}

fn failure(what: impl std::fmt::Display) -> IndexError {
    IndexError::Lexical(format!("index set: {what}"))
}

/// Writes an index set of `shards` under `<data_dir>/indexes/` for the state of `acl`, then
/// prunes beyond [`RETAIN`]. Needs no writer lock: each shard's images are taken atomically and
/// the next ordinal is read after them (so every slot's ordinal is below it); at open, slots are
/// resolved against the store's live rows. Returns the set's directory.
pub fn write(
    data_dir: &Path,
    acl: &AclStore,
    embedder: &str,
    shards: &[Arc<Shard>],
    journaled: bool,
) -> IndexResult<PathBuf> {
    let _guard = WRITE_LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let root = data_dir.join(INDEXES_DIR);
    fs::create_dir_all(&root).map_err(failure)?;
    let epoch = acl.epoch();
    let mut unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_millis()).unwrap_or(0);
    // A name of its own, also for two sets written within one millisecond at one epoch (each
    // set's journal is named after it).
    let mut name = format!("{epoch:012}-{unix_ms:013}");
    while root.join(&name).exists() || data_dir.join(journal::JOURNAL_DIR).join(&name).exists() {
        unix_ms += 1;
        name = format!("{epoch:012}-{unix_ms:013}");
    }
    let temporary = root.join(format!("{TMP_PREFIX}{name}"));
    let _ = fs::remove_dir_all(&temporary);
    fs::create_dir(&temporary).map_err(failure)?;
    let mut files = Vec::new();
    for (number, shard) in shards.iter().enumerate() {
        // Every chunk is kept: whether its ordinal is live is the store's answer at open. From
        // the image on, the shard's changes go to this set's journal.
        let journal = journal::path(data_dir, &name, number);
        let image = shard.export_image_journaled(|| match journaled.then(|| journal::FileSink::create(&journal, number))? {
            Ok(sink) => Some(Box::new(sink) as Box<dyn JournalSink>),
            Err(error) => {
                tracing::warn!(%error, journal = %journal.display(), "could not start an index journal; a restart indexes this shard's later chunks again");
                None
            }
        })?;
        for (file, bytes) in [(graph_name(number), &image.graph), (lexical_name(number), &image.lexical)] {
            write_synced(&temporary.join(&file), bytes)?;
            files.push((file, bytes.len() as u64, hex::encode(Sha256::digest(bytes))));
        }
    }
    let manifest = IndexSetManifest {
        format: SET_FORMAT,
        lineage: acl.lineage().to_owned(),
        epoch,
        next_ordinal: acl.next_ordinal(),
        embedder: embedder.to_owned(),
        shards: shards.len(),
        files,
    };
    write_synced(&temporary.join(MANIFEST), &serde_json::to_vec_pretty(&manifest).map_err(failure)?)?;
    sync_directory(&temporary)?;
    let target = root.join(&name);
    fs::rename(&temporary, &target).map_err(failure)?;
    sync_directory(&root)?;
    prune(&root);
    journal::prune(data_dir, &list(&root));
    Ok(target)
}

fn write_synced(path: &Path, bytes: &[u8]) -> IndexResult<()> {
    let mut file = fs::File::create(path).map_err(failure)?;
    file.write_all(bytes).map_err(failure)?;
    file.sync_all().map_err(failure)
}

fn sync_directory(directory: &Path) -> IndexResult<()> {
    fs::File::open(directory).and_then(|handle| handle.sync_all()).map_err(failure)
}

/// Complete sets under `root`, oldest first.
fn list(root: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(root) else { return Vec::new() };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| !name.starts_with('.'))
        .collect();
    names.sort();
    names
}

/// Removes sets beyond [`RETAIN`] and leftovers of interrupted writes.
fn prune(root: &Path) {
    let names = list(root);
    let doomed = names.len().saturating_sub(RETAIN);
    let leftovers = fs::read_dir(root)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().starts_with(TMP_PREFIX))
        .map(|entry| entry.path());
    for path in names[..doomed].iter().map(|name| root.join(name)).chain(leftovers) {
        if let Err(error) = fs::remove_dir_all(&path) {
            tracing::warn!(%error, set = %path.display(), "could not remove an old index set");
        }
    }
}

/// The newest index set's manifest and files, read and checked ([`read_ahead`]) while the store
/// opens.
pub struct AheadOfTime {
    name: String,
    files: Result<(IndexSetManifest, HashMap<String, Vec<u8>>), String>,
    /// Every shard's images and journal decoded (when the files were read and the set has the
    /// expected shard count).
    shards: Option<Vec<DecodedLoad>>,
}

/// One shard's images decoded ahead of the store.
type DecodedLoad = Result<DecodedShard, String>;

/// Decodes every shard's images (taken out of `contents`) of the set `name`, as many shards at
/// once as there are cores; a shard whose journal holds records keeps its lexical files unopened
/// (its journal is read and applied once the store is open, a record at a time, as before).
fn decode_shards(
    data_dir: &Path,
    name: &str,
    count: usize,
    contents: &mut HashMap<String, Vec<u8>>,
    params: VectorParams,
) -> Vec<DecodedLoad> {
    let images: Vec<_> = (0..count)
        .map(|number| (number, contents.remove(&graph_name(number)), contents.remove(&lexical_name(number))))
        .collect();
    on_every_core(images, |(number, graph, lexical)| {
        let (Some(graph), Some(lexical)) = (graph, lexical) else {
            return Err(format!("shard {number}'s files are not listed"));
        };
        let path = journal::path(data_dir, name, number);
        let records = fs::metadata(&path).is_ok_and(|meta| meta.len() > journal::HEADER_BYTES);
        Shard::decode_images(params, (&graph, &lexical), !records).map_err(|error| format!("shard {number}: {error}"))
    })
}

/// Runs `work` on every item, as many at once as there are cores; results in order (a thread
/// that panicked is an error).
fn on_every_core<T: Send, R: Send>(
    items: Vec<T>,
    work: impl Fn(T) -> Result<R, String> + Sync,
) -> Vec<Result<R, String>> {
    let parallel = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let mut results = Vec::with_capacity(items.len());
    let mut items = items.into_iter().peekable();
    let work = &work;
    while items.peek().is_some() {
        let group: Vec<T> = items.by_ref().take(parallel).collect();
        results.extend(std::thread::scope(|scope| {
            let handles: Vec<_> = group.into_iter().map(|item| scope.spawn(move || work(item))).collect();
            handles
                .into_iter()
                .map(|handle| handle.join().unwrap_or_else(|_| Err("a shard's thread panicked".to_owned())))
                .collect::<Vec<_>>()
        }));
    }
    results
}

/// Reads and checks the newest index set under `data_dir` (its manifest's format, every file's
/// size and sha256), so that this I/O and hashing overlap with opening the store; `None` when
/// there is no set. [`load_or_build`] uses it when it is still the newest set.
pub fn read_ahead(data_dir: &Path, params: VectorParams, shard_count: usize) -> Option<AheadOfTime> {
    let name = list(&data_dir.join(INDEXES_DIR)).pop()?;
    let started = std::time::Instant::now();
    let mut files = read_set(data_dir, &name);
    tracing::info!(set = name, seconds = started.elapsed().as_secs_f64(), "index set read and verified");
    let shards = match &mut files {
        Ok((manifest, contents)) if manifest.shards == shard_count => {
            let decoded = decode_shards(data_dir, &name, shard_count, contents, params);
            tracing::info!(set = name, seconds = started.elapsed().as_secs_f64(), "index set decoded");
            Some(decoded)
        }
        _ => None,
    };
    Some(AheadOfTime { name, files, shards })
}

/// The manifest and files of the set `name`, each file's size and sha256 checked (on every
/// core: sha256 of ~1 KB per chunk).
fn read_set(data_dir: &Path, name: &str) -> Result<(IndexSetManifest, HashMap<String, Vec<u8>>), String> {
    use rayon::prelude::*;
    let directory = data_dir.join(INDEXES_DIR).join(name);
    let bytes = fs::read(directory.join(MANIFEST)).map_err(|error| format!("{MANIFEST}: {error}"))?;
    let manifest: IndexSetManifest = serde_json::from_slice(&bytes).map_err(|error| format!("{MANIFEST}: {error}"))?;
    if manifest.format != SET_FORMAT {
        return Err(format!("format {} is not {SET_FORMAT}", manifest.format));
    }
    let contents = manifest
        .files
        .par_iter()
        .map(|(file, size, sha256)| {
            let content = fs::read(directory.join(file)).map_err(|error| format!("{file}: {error}"))?;
            if content.len() as u64 != *size || hex::encode(Sha256::digest(&content)) != *sha256 {
                return Err(format!("{file} has another size or checksum than the manifest records"));
            }
            Ok((file.clone(), content))
        })
        .collect::<Result<_, String>>()?;
    Ok((manifest, contents))
}

/// Stored vectors by (document ordinal, chunk position), read for the given ordinals.
pub type StoredVectors = HashMap<(DocOrdinal, u32), Vec<f32>>;

/// The shards of a store that recovered `acl` and the live `chunks`: loaded from the newest
/// index set under `data_dir` and its journal when it is usable, the chunks they do not know
/// indexed on top; otherwise (logged) rebuilt from the chunks. Only the chunks to index have
/// their vectors read (`vectors`, from the store): a set and its journal hold the others'.
pub fn load_or_build<E: From<IndexError>>(
    data_dir: &Path,
    acl: &AclStore,
    embedder: &str,
    (shard_of, shard_count): (impl Fn(&Chunk) -> usize, usize),
    chunks: Vec<Chunk>,
    vectors: impl Fn(&RoaringBitmap) -> Result<StoredVectors, E>,
    (params, journaled, ahead): (VectorParams, bool, Option<AheadOfTime>),
) -> Result<(Vec<Arc<Shard>>, IndexSetOutcome), E> {
    let root = data_dir.join(INDEXES_DIR);
    let newest = list(&root).pop();
    let mut per_shard: Vec<ShardRows> = vec![HashMap::new(); shard_count];
    for chunk in chunks {
        per_shard[shard_of(&chunk).min(shard_count - 1)].insert((chunk.doc_ordinal, chunk.ordinal), chunk);
    }
    let attempt = match &newest {
        None => Err("no index set".to_owned()),
        Some(name) => load_set(data_dir, (name, ahead), acl, embedder, (params, journaled), &mut per_shard),
    };
    match attempt {
        Ok((shards, outcome)) => {
            // What the set and its journal lack: indexed on top (and journaled).
            for (shard, rows) in shards.iter().zip(per_shard) {
                let later = with_vectors(rows, &vectors)?;
                if !later.is_empty() {
                    shard.add(later)?;
                }
            }
            Ok((shards, outcome))
        }
        Err(reason) => {
            super::progress::enter(super::progress::Phase::Indexing);
            if newest.is_some() {
                tracing::warn!(%reason, "index set not used; rebuilding the indexes from the stored rows");
            }
            let items = per_shard.into_iter().map(|rows| with_vectors(rows, &vectors)).collect::<Result<_, E>>()?;
            Ok((Shard::build_all(items, params)?, IndexSetOutcome::Rebuilt { reason }))
        }
    }
}

/// `rows` with their stored vectors, in (ordinal, position) order.
fn with_vectors<E: From<IndexError>>(
    rows: ShardRows,
    vectors: &impl Fn(&RoaringBitmap) -> Result<StoredVectors, E>,
) -> Result<Vec<(Chunk, Vec<f32>)>, E> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let ordinals: RoaringBitmap = rows.keys().map(|(ordinal, _)| *ordinal).collect();
    let mut stored = vectors(&ordinals)?;
    let mut items = Vec::with_capacity(rows.len());
    for (key, chunk) in rows {
        let vector = stored.remove(&key).ok_or_else(|| failure(format!("no stored vector for chunk {key:?}")))?;
        items.push((chunk, vector));
    }
    items.sort_by_key(|(chunk, _)| (chunk.doc_ordinal, chunk.ordinal));
    Ok(items)
}

/// One shard loaded from its images and journal: the shard, the rows it took, and its journal
/// (path, bytes to keep, what the replay did).
type ShardLoad = (LoadedShard, Vec<(DocOrdinal, u32)>, (PathBuf, u64, JournalReplay));

/// Loads shard `number` from its images (`graph`, `lexical`) and its journal in the set `name`,
/// taking its slots' chunks from `rows` (the keys it took are returned).
fn load_shard(
    data_dir: &Path,
    name: &str,
    params: VectorParams,
    next_ordinal: DocOrdinal,
    (number, decoded): (usize, Result<DecodedShard, String>),
    rows: &ShardRows,
) -> Result<ShardLoad, String> {
    let path = journal::path(data_dir, name, number);
    let file = journal::read(&path, number);
    let payloads = file.as_ref().map(journal::JournalFile::payloads).unwrap_or_default();
    let mut used = Vec::new();
    let shard = Shard::assemble(number, params, decoded?, &payloads, next_ordinal, |ordinal, position| {
        let chunk = rows.get(&(ordinal, position))?;
        used.push((ordinal, position));
        Some(chunk.clone())
    })
    .map_err(|error| format!("shard {number}: {error}"))?;
    super::progress::shard_loaded();
    if let Some(reason) = shard.compaction {
        tracing::info!(shard = number, ?reason, "compacted a shard while loading its index set");
    }
    let mut replay = shard.replay.clone();
    if let Some(stopped) = replay.stopped.take() {
        replay.stopped = Some(format!("{}: {stopped}", path.display()));
    }
    if let Some(damage) = file.as_ref().and_then(|file| file.damage.clone()) {
        replay.stopped.get_or_insert(damage);
    }
    let keep = file.as_ref().map_or(0, |file| file.keep(shard.replay.records));
    Ok((shard, used, (path, keep, replay)))
}

/// Loads every shard of the set `name` and applies its journal, taking the chunks they name out
/// of `per_shard` (what is left there is for the caller to index on top), and journals on from
/// there. When the set is unusable the error says why and `per_shard` still holds every chunk
/// (rows are only taken once every shard loaded).
fn load_set(
    data_dir: &Path,
    (name, ahead): (&str, Option<AheadOfTime>),
    acl: &AclStore,
    embedder: &str,
    (params, journaled): (VectorParams, bool),
    per_shard: &mut [ShardRows],
) -> Result<(Vec<Arc<Shard>>, IndexSetOutcome), String> {
    let started = std::time::Instant::now();
    let (manifest, mut contents, decoded) = match ahead.filter(|ahead| ahead.name == name) {
        Some(ahead) => {
            let (manifest, contents) = ahead.files?;
            (manifest, contents, ahead.shards)
        }
        None => {
            let (manifest, contents) = read_set(data_dir, name)?;
            (manifest, contents, None)
        }
    };
    if manifest.lineage != acl.lineage() || manifest.embedder != embedder || manifest.shards != per_shard.len() {
        return Err("lineage, embedder or shard count differs from the store's".into());
    }
    if manifest.next_ordinal > acl.next_ordinal() || manifest.epoch > acl.epoch() {
        return Err("the set is newer than the store".into());
    }
    tracing::info!(set = name, seconds = started.elapsed().as_secs_f64(), "index set checked against the store");
    // The store's next ordinal bounds every committed chunk; a journal slot beyond it belongs to
    // a batch that never committed.
    let next_ordinal = acl.next_ordinal();
    // Decoded while the store opened (read_ahead), or now.
    let decoded = match decoded {
        Some(decoded) => decoded,
        None => decode_shards(data_dir, name, per_shard.len(), &mut contents, params),
    };
    // Shards are assembled in parallel, as many at once as there are cores.
    let work: Vec<_> = decoded.into_iter().zip(per_shard.iter()).enumerate().collect();
    let mut results = Vec::with_capacity(work.len());
    for result in on_every_core(work, |(number, (shard, rows))| {
        load_shard(data_dir, name, params, next_ordinal, (number, shard), rows)
    }) {
        results.push(result?);
    }
    let (mut loaded, mut taken, mut journals) = (Vec::new(), Vec::new(), Vec::new());
    for (shard, used, journal) in results {
        loaded.push(shard);
        taken.push(used);
        journals.push(journal);
    }
    tracing::info!(set = name, seconds = started.elapsed().as_secs_f64(), "index set and journals loaded");
    super::progress::enter(super::progress::Phase::Indexing);
    let mut outcome = (0, 0, 0, Vec::new(), true);
    let mut shards = Vec::with_capacity(loaded.len());
    for (number, (((loaded, used), rows), (path, keep, replay))) in
        loaded.into_iter().zip(taken).zip(per_shard.iter_mut()).zip(journals).enumerate()
    {
        let LoadedShard { shard, compaction, known, .. } = loaded;
        for key in used {
            rows.remove(&key);
        }
        if let Some(stopped) = &replay.stopped {
            metrics::counter!("warrant_index_journal_refused_total").increment(1);
            tracing::warn!(shard = number, reason = %stopped, "the index journal was not applied to its end; what it lacks is indexed again from the store's rows");
        }
        // A compacted shard is no longer the set's state: it journals again from the next set.
        let resumed = (journaled && compaction.is_none()).then(|| journal::FileSink::resume(&path, number, keep));
        match resumed {
            Some(Ok(sink)) => shard.attach_journal(Box::new(sink), known),
            Some(Err(error)) => {
                tracing::warn!(%error, journal = %path.display(), "could not reopen the index journal");
                outcome.4 = false;
            }
            None => outcome.4 = false,
        }
        let JournalReplay { records, slots, stopped, .. } = replay;
        outcome.0 += slots;
        outcome.1 += records;
        outcome.2 += rows.len();
        outcome.3.extend(stopped);
        shards.push(Arc::new(shard));
    }
    let (journaled, journal_records, indexed_after, journal_stopped, journaling) = outcome;
    metrics::counter!("warrant_index_journal_restored_total").increment(journaled as u64);
    Ok((
        shards,
        IndexSetOutcome::Loaded {
            set: name.to_owned(),
            journaled,
            journal_records,
            indexed_after,
            journal_stopped,
            journaling,
        },
    ))
}
