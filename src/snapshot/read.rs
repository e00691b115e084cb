//! Verifying and restoring a snapshot: manifest, format version, embedder and every file's size
//! and checksum are checked before anything is decoded; then, one thread per shard, the shards
//! are loaded from their index images (format 2; compacted where the shard's rule says so) or
//! their indexes rebuilt from the stored chunks and vectors (format 1).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::acl::{AclChange, AclSnapshot, AclStore};
use crate::config::Settings;
use crate::domain::{Chunk, Layout, SentenceVectors};
use crate::embed::Embedder;
use crate::embedded::{Engine, EngineParams};
use crate::index::shard::{Shard, ShardImageError};
use crate::index::vector::VectorParams;

use super::{
    ACL_FILE, CHANGES_FILE, FORMAT_VERSION, MANIFEST, Manifest, OLDEST_FORMAT_VERSION, SnapshotError, SnapshotResult,
    chunks_file, graph_file, layouts_file, lexical_file, sentences_file, vectors_file,
};

/// Largest manifest accepted, in bytes (it lists a few files per shard).
const MAX_MANIFEST_BYTES: u64 = 16 * 1024 * 1024;

/// The owned form of `acl.bin`.
#[derive(Deserialize)]
struct AclFile {
    epoch: u64,
    next_ordinal: u32,
    snapshot: AclSnapshot,
}

/// A verified snapshot with its shards rebuilt.
pub struct Restored {
    /// The manifest.
    pub manifest: Manifest,
    /// The ACL store (snapshot, change log, ordinal counter).
    pub acl: AclStore,
    /// Shards with rebuilt vector and lexical indexes, in shard order.
    pub shards: Vec<Arc<Shard>>,
}

fn invalid(file: &str, reason: impl std::fmt::Display) -> SnapshotError {
    SnapshotError::Invalid { file: file.to_owned(), reason: reason.to_string() }
}

/// Reads and checks `manifest.json`: format version first (a newer one is refused before its
/// schema is trusted), then the strict schema and the file list the format requires.
pub(crate) fn read_manifest(directory: &Path) -> SnapshotResult<Manifest> {
    let path = directory.join(MANIFEST);
    let metadata = std::fs::metadata(&path).map_err(|error| SnapshotError::io(MANIFEST, error))?;
    if metadata.len() > MAX_MANIFEST_BYTES {
        return Err(invalid(MANIFEST, "larger than 16 MiB"));
    }
    let bytes = std::fs::read(&path).map_err(|error| SnapshotError::io(MANIFEST, error))?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|error| invalid(MANIFEST, error))?;
    let version = value
        .get("format_version")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| invalid(MANIFEST, "format_version is missing"))?;
    if !(u64::from(OLDEST_FORMAT_VERSION)..=u64::from(FORMAT_VERSION)).contains(&version) {
        return Err(SnapshotError::Format { file: MANIFEST.into(), found: version, supported: FORMAT_VERSION });
    }
    let manifest: Manifest = serde_json::from_value(value).map_err(|error| invalid(MANIFEST, error))?;
    let mut expected: BTreeSet<String> = [ACL_FILE.to_owned(), CHANGES_FILE.to_owned()].into();
    let mut optional: BTreeSet<String> = BTreeSet::new();
    for shard in 0..manifest.shards {
        expected.insert(chunks_file(shard));
        if manifest.format_version == 1 {
            expected.insert(vectors_file(shard));
        } else {
            expected.insert(graph_file(shard));
            expected.insert(lexical_file(shard));
            optional.insert(sentences_file(shard));
            optional.insert(layouts_file(shard));
        }
    }
    let listed: BTreeSet<String> = manifest.files.iter().map(|file| file.name.clone()).collect();
    if listed.len() != manifest.files.len() {
        return Err(invalid(MANIFEST, "a file is listed twice"));
    }
    if let Some(missing) = expected.difference(&listed).next() {
        return Err(invalid(MANIFEST, format!("the file list lacks {missing}")));
    }
    if let Some(extra) = listed.difference(&expected).find(|name| !optional.contains(*name)) {
        return Err(invalid(MANIFEST, format!("the file list names an unknown file {extra:?}")));
    }
    if !(1..=256).contains(&manifest.shards) {
        return Err(invalid(MANIFEST, "shards must be in 1..=256"));
    }
    Ok(manifest)
}

/// Reads every listed file and checks size and sha256 against the manifest.
fn read_verified(directory: &Path, manifest: &Manifest) -> SnapshotResult<std::collections::HashMap<String, Vec<u8>>> {
    let mut contents = std::collections::HashMap::new();
    for entry in &manifest.files {
        let path = directory.join(&entry.name);
        let size = std::fs::metadata(&path).map_err(|error| SnapshotError::io(&entry.name, error))?.len();
        if size != entry.bytes {
            return Err(SnapshotError::Size { file: entry.name.clone(), expected: entry.bytes, got: size });
        }
        let bytes = std::fs::read(&path).map_err(|error| SnapshotError::io(&entry.name, error))?;
        if bytes.len() as u64 != entry.bytes {
            return Err(SnapshotError::Size {
                file: entry.name.clone(),
                expected: entry.bytes,
                got: bytes.len() as u64,
            });
        }
        if hex::encode(Sha256::digest(&bytes)) != entry.sha256 {
            return Err(SnapshotError::Checksum { file: entry.name.clone() });
        }
        contents.insert(entry.name.clone(), bytes);
    }
    Ok(contents)
}

fn decode<T: serde::de::DeserializeOwned>(file: &str, bytes: &[u8]) -> SnapshotResult<T> {
    let (value, read) = bincode::serde::decode_from_slice::<T, _>(bytes, bincode::config::standard())
        .map_err(|error| invalid(file, error))?;
    if read != bytes.len() {
        return Err(invalid(file, "trailing bytes after the encoded value"));
    }
    Ok(value)
}

/// Verifies the snapshot in `directory` completely, checks that it was made with the embedder
/// `embedder_name`/`dimension`, then rebuilds its shards with `vector` parameters.
pub fn restore(
    directory: &Path,
    embedder_name: &str,
    dimension: usize,
    vector: VectorParams,
) -> SnapshotResult<Restored> {
    let manifest = read_manifest(directory)?;
    if manifest.embedder.name != embedder_name || manifest.embedder.dimension != dimension {
        return Err(SnapshotError::Embedder {
            snapshot_name: manifest.embedder.name.clone(),
            snapshot_dimension: manifest.embedder.dimension,
            configured_name: embedder_name.to_owned(),
            configured_dimension: dimension,
        });
    }
    let mut contents = read_verified(directory, &manifest)?;
    let mut take = |name: &str| contents.remove(name).expect("verified files are all present");
    let acl: AclFile = decode(ACL_FILE, &take(ACL_FILE))?;
    if acl.epoch != manifest.acl_epoch || acl.snapshot.epoch() != manifest.acl_epoch {
        return Err(invalid(ACL_FILE, "epoch differs from the manifest's acl_epoch"));
    }
    if acl.next_ordinal != manifest.next_ordinal {
        return Err(invalid(ACL_FILE, "next_ordinal differs from the manifest's"));
    }
    let log: Vec<AclChange> =
        serde_json::from_slice(&take(CHANGES_FILE)).map_err(|error| invalid(CHANGES_FILE, error))?;
    if log.windows(2).any(|pair| pair[0].epoch > pair[1].epoch)
        || log.last().is_some_and(|last| last.epoch > manifest.acl_epoch)
    {
        return Err(invalid(CHANGES_FILE, "epochs are out of order or beyond the manifest's acl_epoch"));
    }
    let shards = if manifest.format_version == 1 {
        rebuild_shards(&manifest, &mut take, dimension, vector)?
    } else {
        load_shards(&manifest, &mut take, vector)?
    };
    // A snapshot written before lineages existed gets a fresh one: its epochs are comparable with
    // nothing (a replica started from it re-synchronizes with its primary).
    let lineage = manifest.lineage.clone().unwrap_or_else(crate::acl::new_lineage);
    let acl = AclStore::restore(acl.snapshot, log, acl.next_ordinal, lineage);
    Ok(Restored { manifest, acl, shards })
}

/// Format 1: decodes every shard's chunks and vectors and rebuilds its indexes.
fn rebuild_shards(
    manifest: &Manifest,
    take: &mut impl FnMut(&str) -> Vec<u8>,
    dimension: usize,
    vector: VectorParams,
) -> SnapshotResult<Vec<Arc<Shard>>> {
    let mut shard_items = Vec::with_capacity(manifest.shards);
    let mut total = 0;
    for shard in 0..manifest.shards {
        let chunk_name = chunks_file(shard);
        let vector_name = vectors_file(shard);
        let chunks: Vec<Chunk> = decode(&chunk_name, &take(&chunk_name))?;
        let raw = take(&vector_name);
        if raw.len() != chunks.len() * dimension * 4 {
            return Err(invalid(
                &vector_name,
                format!("holds {} bytes for {} chunks of dimension {dimension}", raw.len(), chunks.len()),
            ));
        }
        if let Some(chunk) = chunks.iter().find(|chunk| chunk.doc_ordinal >= manifest.next_ordinal) {
            return Err(invalid(&chunk_name, format!("chunk of ordinal {} beyond next_ordinal", chunk.doc_ordinal)));
        }
        total += chunks.len();
        let items: Vec<(Chunk, Vec<f32>)> = chunks
            .into_iter()
            .zip(raw.chunks_exact(dimension * 4))
            .map(|(chunk, bytes)| {
                let vector =
                    bytes.chunks_exact(4).map(|value| f32::from_le_bytes(value.try_into().expect("4 bytes"))).collect();
                (chunk, vector)
            })
            .collect();
        shard_items.push(items);
    }
    if total != manifest.chunks {
        return Err(invalid(MANIFEST, format!("records {} chunks, the shard files hold {total}", manifest.chunks)));
    }
    Ok(Shard::build_all(shard_items, vector)?)
}

/// Format 2: decodes every shard's chunks and loads the shard from its images, one thread per
/// shard; a refusal names the file at fault.
fn load_shards(
    manifest: &Manifest,
    take: &mut impl FnMut(&str) -> Vec<u8>,
    vector: VectorParams,
) -> SnapshotResult<Vec<Arc<Shard>>> {
    let next_ordinal = manifest.next_ordinal;
    let mut parts = Vec::with_capacity(manifest.shards);
    let mut total = 0;
    for shard in 0..manifest.shards {
        let chunk_name = chunks_file(shard);
        let mut chunks: Vec<Chunk> = decode(&chunk_name, &take(&chunk_name))?;
        if let Some(chunk) = chunks.iter().find(|chunk| chunk.doc_ordinal >= manifest.next_ordinal) {
            return Err(invalid(&chunk_name, format!("chunk of ordinal {} beyond next_ordinal", chunk.doc_ordinal)));
        }
        let sentence_name = sentences_file(shard);
        if manifest.files.iter().any(|file| file.name == sentence_name) {
            let sentences: Vec<Option<SentenceVectors>> = decode(&sentence_name, &take(&sentence_name))?;
            if sentences.len() != chunks.len() {
                return Err(invalid(
                    &sentence_name,
                    format!("holds {} entries for {} chunks", sentences.len(), chunks.len()),
                ));
            }
            for (chunk, vectors) in chunks.iter_mut().zip(sentences) {
                chunk.sentence_vectors = vectors.map(Arc::new);
            }
        }
        let layout_name = layouts_file(shard);
        if manifest.files.iter().any(|file| file.name == layout_name) {
            let layouts: Vec<Option<Layout>> = decode(&layout_name, &take(&layout_name))?;
            if layouts.len() != chunks.len() {
                return Err(invalid(
                    &layout_name,
                    format!("holds {} entries for {} chunks", layouts.len(), chunks.len()),
                ));
            }
            for (chunk, layout) in chunks.iter_mut().zip(layouts) {
                chunk.layout = layout.map(Arc::new);
            }
        }
        total += chunks.len();
        parts.push((chunks, take(&graph_file(shard)), take(&lexical_file(shard))));
    }
    if total != manifest.chunks {
        return Err(invalid(MANIFEST, format!("records {} chunks, the shard files hold {total}", manifest.chunks)));
    }
    let loaded: Vec<SnapshotResult<Arc<Shard>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .into_iter()
            .enumerate()
            .map(|(id, (chunks, graph, lexical))| {
                scope.spawn(move || -> SnapshotResult<Arc<Shard>> {
                    let (shard, compaction) = Shard::load(id, vector, chunks, &graph, &lexical, next_ordinal).map_err(
                        |error| match error {
                            ShardImageError::Graph(reason) => invalid(&graph_file(id), reason),
                            ShardImageError::Lexical(reason) => invalid(&lexical_file(id), reason),
                            ShardImageError::Index(inner) => SnapshotError::Index(inner),
                        },
                    )?;
                    if let Some(reason) = compaction {
                        tracing::info!(shard = id, ?reason, "compacted a shard while loading it");
                    }
                    Ok(Arc::new(shard))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle.join().unwrap_or_else(|_| Err(invalid(MANIFEST, "a shard failed to load (thread panicked)")))
            })
            .collect()
    });
    loaded.into_iter().collect()
}

/// Restores the snapshot in `directory` (verified whole first, on a blocking thread) and starts
/// an engine on it with `settings`' retrieval parameters and the snapshot's shard count. With
/// `fork_lineage` (a primary restored from a snapshot) the state gets a new lineage; without it
/// (a replica) it keeps the snapshot's. Must run inside an actix System.
pub async fn start_engine(
    settings: &Settings,
    embedder: Arc<dyn Embedder>,
    directory: &Path,
    fork_lineage: bool,
) -> SnapshotResult<(Arc<Engine>, Manifest)> {
    let mut params = EngineParams::from_settings(settings, embedder.dimension());
    let name = embedder.name().to_owned();
    let dimension = embedder.dimension();
    let vector = params.vector;
    let owned = directory.to_owned();
    let restored = tokio::task::spawn_blocking(move || restore(&owned, &name, dimension, vector))
        .await
        .map_err(|error| invalid(MANIFEST, format!("restore task failed: {error}")))??;
    if restored.manifest.chunking != params.chunking {
        tracing::warn!("snapshot chunking differs from the configured chunking; new documents use the configured one");
    }
    params.shards = restored.manifest.shards;
    let acl = if fork_lineage { restored.acl.relabeled(crate::acl::new_lineage()) } else { restored.acl };
    let engine =
        Engine::start_with(params, embedder, Arc::new(acl), Some(restored.shards)).map_err(|error| match error {
            crate::retrieval::RetrievalError::Index(inner) => SnapshotError::Index(inner),
            other => invalid(MANIFEST, other),
        })?;
    metrics::gauge!("warrant_acl_epoch").set(engine.acl().epoch() as f64);
    Ok((engine, restored.manifest))
}

/// The newest complete snapshot under `root` of `lineage` whose epoch is at least `min_epoch`
/// (a replica can follow the feed from it), with its directory.
pub fn latest(root: &Path, lineage: &str, min_epoch: u64) -> Option<(std::path::PathBuf, Manifest)> {
    let names = super::write::list(root).ok()?;
    names.into_iter().rev().find_map(|name| {
        let directory = root.join(&name);
        let manifest = read_manifest(&directory).ok()?;
        (manifest.lineage.as_deref() == Some(lineage)
            && manifest.acl_epoch >= min_epoch
            && manifest.snapshot_id == name)
            .then_some((directory, manifest))
    })
}
