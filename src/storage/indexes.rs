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

use crate::acl::AclStore;
use crate::domain::{Chunk, DocOrdinal};
use crate::index::shard::{ChunkPositions, Shard};
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
        /// Chunks indexed on top of the set.
        indexed_after: usize,
    },
    /// No set, or none usable: rebuilt from the rows (`reason` says why).
    Rebuilt {
        /// Why no set was used.
        reason: String,
    },
}

/// One shard's live rows keyed by (document ordinal, chunk position in the document).
type ShardRows = HashMap<(DocOrdinal, u32), (Chunk, Vec<f32>)>;

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
pub fn write(data_dir: &Path, acl: &AclStore, embedder: &str, shards: &[Arc<Shard>]) -> IndexResult<PathBuf> {
    let _guard = WRITE_LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let root = data_dir.join(INDEXES_DIR);
    fs::create_dir_all(&root).map_err(failure)?;
    let epoch = acl.epoch();
    let unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_millis()).unwrap_or(0);
    let name = format!("{epoch:012}-{unix_ms:013}");
    let temporary = root.join(format!("{TMP_PREFIX}{name}"));
    let _ = fs::remove_dir_all(&temporary);
    fs::create_dir(&temporary).map_err(failure)?;
    let mut files = Vec::new();
    for (number, shard) in shards.iter().enumerate() {
        // Every chunk is kept: whether its ordinal is live is the store's answer at open.
        let image = shard.export_image(|_| true, ChunkPositions::InDocument)?;
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

/// The shards of a store that recovered `acl` and the live `chunks` (with their vectors): loaded
/// from the newest index set under `data_dir` when it is usable, the chunks it does not know
/// indexed on top; otherwise (logged) rebuilt from the chunks.
pub fn load_or_build(
    data_dir: &Path,
    acl: &AclStore,
    embedder: &str,
    shard_of: impl Fn(&Chunk) -> usize,
    shard_count: usize,
    chunks: Vec<(Chunk, Vec<f32>)>,
    params: VectorParams,
) -> IndexResult<(Vec<Arc<Shard>>, IndexSetOutcome)> {
    let root = data_dir.join(INDEXES_DIR);
    let newest = list(&root).pop();
    let mut per_shard: Vec<ShardRows> = vec![HashMap::new(); shard_count];
    for (chunk, vector) in chunks {
        per_shard[shard_of(&chunk).min(shard_count - 1)].insert((chunk.doc_ordinal, chunk.ordinal), (chunk, vector));
    }
    let attempt = match &newest {
        None => Err(LoadFailure::Unusable("no index set".to_owned())),
        Some(name) => load_set(&root.join(name), acl, embedder, params, &mut per_shard)
            .map(|(shards, after)| (shards, IndexSetOutcome::Loaded { set: name.clone(), indexed_after: after })),
    };
    match attempt {
        Ok(loaded) => Ok(loaded),
        Err(LoadFailure::Index(error)) => Err(error),
        Err(LoadFailure::Unusable(reason)) => {
            if newest.is_some() {
                tracing::warn!(%reason, "index set not used; rebuilding the indexes from the stored rows");
            }
            let items: Vec<Vec<(Chunk, Vec<f32>)>> = per_shard
                .into_iter()
                .map(|rows| {
                    let mut rows: Vec<(Chunk, Vec<f32>)> = rows.into_values().collect();
                    rows.sort_by_key(|(chunk, _)| (chunk.doc_ordinal, chunk.ordinal));
                    rows
                })
                .collect();
            Ok((Shard::build_all(items, params)?, IndexSetOutcome::Rebuilt { reason }))
        }
    }
}

/// Why a set was not loaded.
enum LoadFailure {
    /// The set is unusable (missing, damaged, mismatched): rebuild from the rows.
    Unusable(String),
    /// Indexing the rows newer than the set failed (a rebuild would fail the same way).
    Index(IndexError),
}

impl From<String> for LoadFailure {
    fn from(reason: String) -> Self {
        Self::Unusable(reason)
    }
}

/// Loads every shard of the set in `directory`, taking the chunks it names out of `per_shard`
/// and indexing what is left there on top. When the set is unusable the error says why and
/// `per_shard` still holds every chunk (rows are only taken once every shard loaded).
fn load_set(
    directory: &Path,
    acl: &AclStore,
    embedder: &str,
    params: VectorParams,
    per_shard: &mut [ShardRows],
) -> Result<(Vec<Arc<Shard>>, usize), LoadFailure> {
    let bytes = fs::read(directory.join(MANIFEST)).map_err(|error| format!("{MANIFEST}: {error}"))?;
    let manifest: IndexSetManifest = serde_json::from_slice(&bytes).map_err(|error| format!("{MANIFEST}: {error}"))?;
    if manifest.format != SET_FORMAT {
        return Err(format!("format {} is not {SET_FORMAT}", manifest.format).into());
    }
    if manifest.lineage != acl.lineage() || manifest.embedder != embedder || manifest.shards != per_shard.len() {
        return Err(LoadFailure::Unusable("lineage, embedder or shard count differs from the store's".into()));
    }
    if manifest.next_ordinal > acl.next_ordinal() || manifest.epoch > acl.epoch() {
        return Err(LoadFailure::Unusable("the set is newer than the store".into()));
    }
    let mut contents: HashMap<String, Vec<u8>> = HashMap::new();
    for (name, size, sha256) in &manifest.files {
        let content = fs::read(directory.join(name)).map_err(|error| format!("{name}: {error}"))?;
        if content.len() as u64 != *size || hex::encode(Sha256::digest(&content)) != *sha256 {
            return Err(format!("{name} has another size or checksum than the manifest records").into());
        }
        contents.insert(name.clone(), content);
    }
    let mut shards = Vec::with_capacity(per_shard.len());
    let mut taken: Vec<Vec<(DocOrdinal, u32)>> = Vec::with_capacity(per_shard.len());
    for (number, rows) in per_shard.iter().enumerate() {
        let (graph, lexical) = match (contents.get(&graph_name(number)), contents.get(&lexical_name(number))) {
            (Some(graph), Some(lexical)) => (graph, lexical),
            _ => return Err(format!("shard {number}'s files are not listed").into()),
        };
        let mut used = Vec::new();
        let (shard, compaction) =
            Shard::load_with(number, params, graph, lexical, manifest.next_ordinal, |ordinal, position| {
                let (chunk, _) = rows.get(&(ordinal, position))?;
                used.push((ordinal, position));
                Some(chunk.clone())
            })
            .map_err(|error| format!("shard {number}: {error}"))?;
        if let Some(reason) = compaction {
            tracing::info!(shard = number, ?reason, "compacted a shard while loading its index set");
        }
        shards.push(shard);
        taken.push(used);
    }
    let mut indexed_after = 0;
    let mut loaded = Vec::with_capacity(shards.len());
    for ((shard, used), rows) in shards.into_iter().zip(taken).zip(per_shard.iter_mut()) {
        for key in used {
            rows.remove(&key);
        }
        let mut later: Vec<(Chunk, Vec<f32>)> = rows.drain().map(|(_, row)| row).collect();
        later.sort_by_key(|(chunk, _)| (chunk.doc_ordinal, chunk.ordinal));
        indexed_after += later.len();
        if !later.is_empty() {
            shard.add(later).map_err(LoadFailure::Index)?;
        }
        loaded.push(Arc::new(shard));
    }
    Ok((loaded, indexed_after))
}
