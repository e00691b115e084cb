//! Writing a snapshot atomically: capture a consistent state under the engine's writer lock
//! (the ACL state, and per shard its live chunks and its vector and lexical index images),
//! write every file into `.tmp-<id>/` (fsynced), write the manifest last, fsync the directory,
//! rename it to `<id>/`, fsync the parent, then prune beyond the retention count.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::acl::{AclChange, AclSnapshot};
use crate::domain::{Chunk, ChunkingConfig, Layout, SentenceVectors};
use crate::embedded::Engine;
use crate::index::shard::{ChunkPositions, ShardImage};

use super::{
    ACL_FILE, CHANGES_FILE, EmbedderInfo, FORMAT_VERSION, FileEntry, MANIFEST, Manifest, SnapshotError, SnapshotResult,
    chunks_file, graph_file, layouts_file, lexical_file, rfc3339, sentences_file, vectors_file,
};

/// Serializes snapshot creation inside one process (ids, temporary directories, pruning).
static CREATE_LOCK: Mutex<()> = Mutex::new(());

/// Prefix of directories being written.
const TMP_PREFIX: &str = ".tmp-";
/// Prefix of directories being deleted by pruning.
const DELETE_PREFIX: &str = ".del-";

/// The ACL part of `acl.bin`.
#[derive(Serialize)]
pub(super) struct AclFileRef<'a> {
    pub(super) epoch: u64,
    pub(super) next_ordinal: u32,
    pub(super) snapshot: &'a AclSnapshot,
}

/// A consistent copy of the engine's state, taken under its writer lock.
struct Captured {
    acl: Arc<AclSnapshot>,
    log: Vec<AclChange>,
    next_ordinal: u32,
    lineage: String,
    embedder: EmbedderInfo,
    chunking: ChunkingConfig,
    /// Per shard: live chunks in slot order and the index images (or their vectors).
    shards: Vec<CapturedShard>,
    /// The format to write.
    format_version: u32,
}

/// What one shard writes.
enum CapturedShard {
    /// Format 2: live chunks and index images.
    Images(ShardImage),
    /// Format 1: live chunks with their vectors.
    Vectors(Vec<(Arc<Chunk>, Vec<f32>)>),
}

/// A written snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Created {
    /// Snapshot id (directory name).
    pub snapshot_id: String,
    /// ACL epoch captured.
    pub acl_epoch: u64,
    /// The snapshot directory.
    pub path: PathBuf,
    /// Chunks written.
    pub chunks: usize,
    /// Bytes written (all files, manifest included).
    pub bytes: u64,
}

/// Captures the engine's state (under its writer lock) and writes it as a new snapshot under
/// `root`, keeping at most `retain` snapshots. File work runs on a blocking thread.
pub async fn create(engine: &Engine, root: &Path, retain: usize) -> SnapshotResult<Created> {
    create_protecting(engine, root, retain, None).await
}

/// [`create`], never pruning the snapshot directory `protected` (the one the server was
/// restored from, which an operator may need again).
pub async fn create_protecting(
    engine: &Engine,
    root: &Path,
    retain: usize,
    protected: Option<&Path>,
) -> SnapshotResult<Created> {
    let captured = capture(engine, FORMAT_VERSION).await?;
    let root = root.to_owned();
    let protected = protected.and_then(|path| path.canonicalize().ok());
    tokio::task::spawn_blocking(move || write_captured(&captured, &root, retain, protected.as_deref()))
        .await
        .map_err(|error| SnapshotError::Io { file: root_name(), reason: error.to_string() })?
}

/// [`create`] in an older format `format_version` (1 or [`FORMAT_VERSION`]): the benchmark
/// compares restoring both, and golden files of old versions are regenerated with it.
pub async fn create_in_format(
    engine: &Engine,
    root: &Path,
    retain: usize,
    format_version: u32,
) -> SnapshotResult<Created> {
    assert!((1..=FORMAT_VERSION).contains(&format_version), "format {format_version} is not one this build writes");
    let captured = capture(engine, format_version).await?;
    let root = root.to_owned();
    tokio::task::spawn_blocking(move || write_captured(&captured, &root, retain, None))
        .await
        .map_err(|error| SnapshotError::Io { file: root_name(), reason: error.to_string() })?
}

fn root_name() -> String {
    "snapshot directory".to_owned()
}

async fn capture(engine: &Engine, format_version: u32) -> SnapshotResult<Captured> {
    let embedder = EmbedderInfo { name: engine.embedder().name().to_owned(), dimension: engine.embedder().dimension() };
    let chunking = engine.params().chunking;
    engine
        .quiesced(|acl, shards| {
            let snapshot = acl.load();
            let live: HashSet<u32> = snapshot
                .tenant_names()
                .flat_map(|tenant| snapshot.entries(tenant).map(|entry| entry.ordinal))
                .collect();
            let shards = shards
                .iter()
                .map(|shard| match format_version {
                    1 => Ok(CapturedShard::Vectors(
                        shard.export().into_iter().filter(|(chunk, _)| live.contains(&chunk.doc_ordinal)).collect(),
                    )),
                    _ => shard
                        .export_image(|ordinal| live.contains(&ordinal), ChunkPositions::InImage)
                        .map(CapturedShard::Images),
                })
                .collect::<Result<Vec<CapturedShard>, _>>()?;
            Ok(Captured {
                log: acl.log(),
                next_ordinal: acl.next_ordinal(),
                lineage: acl.lineage().to_owned(),
                acl: snapshot,
                embedder,
                chunking,
                shards,
                format_version,
            })
        })
        .await
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_millis() as u64).unwrap_or(0)
}

/// Writes `captured` as a new snapshot under `root` and prunes beyond `retain`.
fn write_captured(
    captured: &Captured,
    root: &Path,
    retain: usize,
    protected: Option<&Path>,
) -> SnapshotResult<Created> {
    let _guard = CREATE_LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let root_display = root.display().to_string();
    fs::create_dir_all(root).map_err(|error| SnapshotError::io(&root_display, error))?;
    remove_leftovers(root);
    let created_ms = unix_ms();
    let epoch = captured.acl.epoch();
    let mut snapshot_id = format!("{created_ms:013}-e{epoch}");
    let mut attempt = 1;
    while root.join(&snapshot_id).exists() {
        attempt += 1;
        snapshot_id = format!("{created_ms:013}-e{epoch}-{attempt}");
    }
    let temporary = root.join(format!("{TMP_PREFIX}{snapshot_id}"));
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&temporary)
        .map_err(|error| SnapshotError::io(temporary.display(), error))?;
    let mut files = Vec::new();
    let acl = AclFileRef { epoch, next_ordinal: captured.next_ordinal, snapshot: &captured.acl };
    files.push(write_file(&temporary, ACL_FILE, &encode(ACL_FILE, &acl)?)?);
    let log = serde_json::to_vec(&captured.log)
        .map_err(|error| SnapshotError::Invalid { file: CHANGES_FILE.into(), reason: error.to_string() })?;
    files.push(write_file(&temporary, CHANGES_FILE, &log)?);
    let mut chunk_total = 0;
    for (shard, captured_shard) in captured.shards.iter().enumerate() {
        match captured_shard {
            CapturedShard::Images(image) => {
                let chunks: Vec<&Chunk> = image.chunks.iter().map(Arc::as_ref).collect();
                chunk_total += chunks.len();
                files.push(write_file(&temporary, &chunks_file(shard), &encode(&chunks_file(shard), &chunks)?)?);
                files.push(write_file(&temporary, &graph_file(shard), &image.graph)?);
                files.push(write_file(&temporary, &lexical_file(shard), &image.lexical)?);
                if chunks.iter().any(|chunk| chunk.sentence_vectors.is_some()) {
                    let name = sentences_file(shard);
                    let sentences: Vec<Option<&SentenceVectors>> =
                        chunks.iter().map(|chunk| chunk.sentence_vectors.as_deref()).collect();
                    files.push(write_file(&temporary, &name, &encode(&name, &sentences)?)?);
                }
                if chunks.iter().any(|chunk| chunk.layout.is_some()) {
                    let name = layouts_file(shard);
                    let layouts: Vec<Option<&Layout>> = chunks.iter().map(|chunk| chunk.layout.as_deref()).collect();
                    files.push(write_file(&temporary, &name, &encode(&name, &layouts)?)?);
                }
            }
            CapturedShard::Vectors(items) => {
                let chunks: Vec<&Chunk> = items.iter().map(|(chunk, _)| chunk.as_ref()).collect();
                chunk_total += chunks.len();
                files.push(write_file(&temporary, &chunks_file(shard), &encode(&chunks_file(shard), &chunks)?)?);
                let mut vectors = Vec::with_capacity(items.len() * captured.embedder.dimension * 4);
                for (_, vector) in items {
                    debug_assert_eq!(vector.len(), captured.embedder.dimension);
                    for value in vector {
                        vectors.extend_from_slice(&value.to_le_bytes());
                    }
                }
                files.push(write_file(&temporary, &vectors_file(shard), &vectors)?);
            }
        }
    }
    let manifest = Manifest {
        format_version: captured.format_version,
        snapshot_id: snapshot_id.clone(),
        created_at: rfc3339(created_ms),
        acl_epoch: epoch,
        lineage: Some(captured.lineage.clone()),
        next_ordinal: captured.next_ordinal,
        embedder: captured.embedder.clone(),
        shards: captured.shards.len(),
        chunking: captured.chunking,
        chunks: chunk_total,
        files,
    };
    let manifest_bytes = serde_json::to_vec_pretty(&manifest)
        .map_err(|error| SnapshotError::Invalid { file: MANIFEST.into(), reason: error.to_string() })?;
    let manifest_entry = write_file(&temporary, MANIFEST, &manifest_bytes)?;
    sync_directory(&temporary)?;
    let target = root.join(&snapshot_id);
    fs::rename(&temporary, &target).map_err(|error| SnapshotError::io(target.display(), error))?;
    sync_directory(root)?;
    prune(root, retain, protected)?;
    let bytes = manifest.files.iter().map(|file| file.bytes).sum::<u64>() + manifest_entry.bytes;
    Ok(Created { snapshot_id, acl_epoch: epoch, path: target, chunks: chunk_total, bytes })
}

fn encode<T: Serialize>(file: &str, value: &T) -> SnapshotResult<Vec<u8>> {
    bincode::serde::encode_to_vec(value, bincode::config::standard())
        .map_err(|error| SnapshotError::Invalid { file: file.to_owned(), reason: error.to_string() })
}

fn write_file(directory: &Path, name: &str, bytes: &[u8]) -> SnapshotResult<FileEntry> {
    let path = directory.join(name);
    // Snapshots hold every tenant's documents: readable by the server's user only.
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|error| SnapshotError::io(name, error))?;
    file.write_all(bytes).map_err(|error| SnapshotError::io(name, error))?;
    file.sync_all().map_err(|error| SnapshotError::io(name, error))?;
    Ok(FileEntry { name: name.to_owned(), bytes: bytes.len() as u64, sha256: hex::encode(Sha256::digest(bytes)) })
}

fn sync_directory(directory: &Path) -> SnapshotResult<()> {
    File::open(directory)
        .and_then(|handle| handle.sync_all())
        .map_err(|error| SnapshotError::io(directory.display(), error))
}

/// Complete snapshots under `root` (directories with a manifest), oldest first.
pub(super) fn list(root: &Path) -> SnapshotResult<Vec<String>> {
    let entries = fs::read_dir(root).map_err(|error| SnapshotError::io(root.display(), error))?;
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.path().join(MANIFEST).is_file())
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| !name.starts_with('.'))
        .collect();
    names.sort();
    Ok(names)
}

/// Deletes the oldest snapshots beyond `retain`: each is renamed away first, so a crash during
/// deletion never leaves a partial directory under a snapshot name.
fn prune(root: &Path, retain: usize, protected: Option<&Path>) -> SnapshotResult<()> {
    let names = list(root)?;
    let excess = names.len().saturating_sub(retain);
    for name in &names[..excess] {
        if protected.is_some_and(|path| root.join(name).canonicalize().is_ok_and(|candidate| candidate == path)) {
            continue;
        }
        let doomed = root.join(format!("{DELETE_PREFIX}{name}"));
        fs::rename(root.join(name), &doomed).map_err(|error| SnapshotError::io(name, error))?;
        sync_directory(root)?;
        if let Err(error) = fs::remove_dir_all(&doomed) {
            tracing::warn!(%error, snapshot = %name, "could not delete a pruned snapshot");
        }
    }
    Ok(())
}

/// Removes directories left by an interrupted write or prune (only ever partial data).
fn remove_leftovers(root: &Path) {
    let Ok(entries) = fs::read_dir(root) else { return };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if (name.starts_with(TMP_PREFIX) || name.starts_with(DELETE_PREFIX))
            && let Err(error) = fs::remove_dir_all(entry.path())
        {
            tracing::warn!(%error, directory = %name, "could not remove an interrupted snapshot directory");
        }
    }
}
