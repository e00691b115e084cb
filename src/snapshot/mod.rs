//! Snapshots: the whole retrievable state (ACL snapshot, change log and ordinal counter; per
//! shard the stored chunks with provenance and their embeddings) written to
//! `<dir>/<id>/` and verified whole before anything is built from it. Replica mode, which starts
//! from a snapshot and follows a primary's ACL change feed, is `crate::replication::follower`.
//!
//! Format version 2 (written; `manifest.json` lists every other file with its byte size and
//! sha256):
//! - `manifest.json`: format version, id, creation time, ACL epoch, next ordinal, embedder name
//!   and dimension, shard count, chunking parameters, chunk count, files;
//! - `acl.bin`: bincode 2 (serde, standard config) of the ACL snapshot, epoch and next ordinal;
//! - `acl-changes.json`: the change log, a JSON array in the replica feed's wire format;
//! - `shard-NNNN.chunks.bin`: bincode 2 of the shard's live chunks in slot order;
//! - `shard-NNNN.graph.bin`: the vector index image (`WRNTHNSW`, see
//!   [`crate::index::vector`]'s image: every slot's ordinal, chunk position and vector, each
//!   graph's CSR adjacency), little-endian and versioned;
//! - `shard-NNNN.lexical.bin`: the lexical index image (`WRNTLEXI`: the committed tantivy
//!   segment files);
//! - `shard-NNNN.sentences.bin` (optional; written when a chunk of the shard has sentence
//!   vectors): bincode 2 of one optional [`crate::domain::SentenceVectors`] per chunk, in the
//!   order of the chunks file;
//! - `shard-NNNN.layouts.bin` (optional; written when a chunk of the shard has a layout map, a
//!   document extracted from a file): bincode 2 of one optional [`crate::domain::Layout`] per
//!   chunk, in the order of the chunks file. Snapshots written before it existed have none, and
//!   their chunks no location.
//!
//! Restore reads the indexes instead of rebuilding them: the loaded graphs stay sealed and a
//! fresh graph takes later inserts; slots whose chunks were superseded or deleted stay in the
//! graph as dead slots (outside every scope: their ordinals are tombstoned) until a shard is
//! compacted on load (see [`crate::index::shard`]).
//!
//! Format version 1 (still read; the golden snapshot `tests/golden/snapshot-v1` checks it) has
//! `shard-NNNN.vectors.bin` (little-endian `f32`, `dimension` per chunk) instead of the two
//! images: restore rebuilds both indexes from the stored chunks and vectors (no re-chunking, no
//! re-embedding).
//!
//! Invariants kept by this module:
//! - a snapshot directory appears under its final name only after every file and the directory
//!   itself are fsynced (write into `.tmp-<id>/`, rename, fsync the parent); pruning renames a
//!   snapshot away before deleting it; a crash leaves old or new complete snapshots, and any
//!   partial directory fails verification;
//! - restore checks the manifest, the format version, the embedder and every file's size and
//!   checksum before decoding or building anything, and names the offending file when it refuses;
//!   a file that passes its checksum but does not decode is refused as
//!   [`SnapshotError::Invalid`] naming it, never with a panic.

pub mod checkpoint;
mod read;
mod write;

use serde::{Deserialize, Serialize};

use crate::domain::ChunkingConfig;
use crate::index::IndexError;

pub(crate) use read::read_manifest;
pub use read::{Restored, latest, restore, start_engine};
pub use write::{Created, create, create_in_format, create_protecting};

/// The format version this build writes (it reads this one and every earlier one).
pub const FORMAT_VERSION: u32 = 2;

/// The oldest format version this build reads.
pub const OLDEST_FORMAT_VERSION: u32 = 1;

/// Name of the manifest file.
pub const MANIFEST: &str = "manifest.json";
/// Name of the ACL state file.
pub const ACL_FILE: &str = "acl.bin";
/// Name of the ACL change log file.
pub const CHANGES_FILE: &str = "acl-changes.json";

/// Bytes of the files under `path`, its subdirectories' included (links are not followed; an
/// entry that cannot be read counts 0).
pub fn directory_bytes(path: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else { return 0 };
    entries
        .filter_map(Result::ok)
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => directory_bytes(&entry.path()),
            _ => entry.metadata().map_or(0, |meta| meta.len()),
        })
        .sum()
}

/// Whether `name` is safe as a snapshot id or file name (no separators, no dot-files): names
/// received from a primary or a client are checked before they touch the file system.
pub fn is_safe_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// File holding the chunks of shard `shard`.
pub fn chunks_file(shard: usize) -> String {
    format!("shard-{shard:04}.chunks.bin")
}

/// File holding the vectors of shard `shard` (format version 1).
pub fn vectors_file(shard: usize) -> String {
    format!("shard-{shard:04}.vectors.bin")
}

/// File holding the vector index image of shard `shard` (format version 2).
pub fn graph_file(shard: usize) -> String {
    format!("shard-{shard:04}.graph.bin")
}

/// File holding the lexical index image of shard `shard` (format version 2).
pub fn lexical_file(shard: usize) -> String {
    format!("shard-{shard:04}.lexical.bin")
}

/// File holding the sentence vectors of shard `shard`'s chunks (format version 2, optional).
pub fn sentences_file(shard: usize) -> String {
    format!("shard-{shard:04}.sentences.bin")
}

/// File holding the layout maps of shard `shard`'s chunks (format version 2, optional).
pub fn layouts_file(shard: usize) -> String {
    format!("shard-{shard:04}.layouts.bin")
}

/// The embedder a snapshot's vectors were made with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbedderInfo {
    /// [`crate::embed::Embedder::name`].
    pub name: String,
    /// Vector dimension.
    pub dimension: usize,
}

/// One file of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// File name inside the snapshot directory.
    pub name: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Lowercase hex sha256 of the content.
    pub sha256: String,
}

/// `manifest.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Format version ([`FORMAT_VERSION`]).
    pub format_version: u32,
    /// Snapshot id (the directory name).
    pub snapshot_id: String,
    /// Creation time, RFC 3339 UTC.
    pub created_at: String,
    /// ACL epoch captured.
    pub acl_epoch: u64,
    /// Lineage of that epoch (absent in snapshots written before lineages existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage: Option<String>,
    /// Next document ordinal the store would reserve.
    pub next_ordinal: u32,
    /// Embedder of the stored vectors.
    pub embedder: EmbedderInfo,
    /// Shard count (documents are placed by a hash modulo this count).
    pub shards: usize,
    /// Chunking parameters the chunks were cut with.
    pub chunking: ChunkingConfig,
    /// Chunks stored in all shards.
    pub chunks: usize,
    /// Every other file with its size and checksum.
    pub files: Vec<FileEntry>,
}

/// Errors of snapshot writing, verification and restore. Each names the file involved.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Reading or writing failed.
    #[error("snapshot file {file}: {reason}")]
    Io {
        /// File or directory.
        file: String,
        /// The IO error.
        reason: String,
    },
    /// A file the format requires is absent.
    #[error("snapshot file {file} is missing")]
    Missing {
        /// File.
        file: String,
    },
    /// A file has another size than the manifest records (truncated or extended).
    #[error("snapshot file {file} has {got} bytes, the manifest records {expected} (truncated or altered)")]
    Size {
        /// File.
        file: String,
        /// Size in the manifest.
        expected: u64,
        /// Size on disk.
        got: u64,
    },
    /// A file's sha256 differs from the manifest's.
    #[error("snapshot file {file} is corrupted (sha256 mismatch)")]
    Checksum {
        /// File.
        file: String,
    },
    /// The format version is not one this build reads.
    #[error("snapshot file {file} has format_version {found}; this build reads versions 1 to {supported}")]
    Format {
        /// File (the manifest).
        file: String,
        /// Version found.
        found: u64,
        /// Version supported.
        supported: u32,
    },
    /// A file could not be parsed, or its content contradicts the manifest.
    #[error("snapshot file {file} is invalid: {reason}")]
    Invalid {
        /// File.
        file: String,
        /// Why.
        reason: String,
    },
    /// The configured embedder is not the one the stored vectors were made with.
    #[error(
        "snapshot file manifest.json records embedder {snapshot_name} (dimension {snapshot_dimension}) but the configured embedder is {configured_name} (dimension {configured_dimension}); refusing to mix vector spaces"
    )]
    Embedder {
        /// Embedder in the manifest.
        snapshot_name: String,
        /// Its dimension.
        snapshot_dimension: usize,
        /// Configured embedder.
        configured_name: String,
        /// Its dimension.
        configured_dimension: usize,
    },
    /// Rebuilding an index from the stored data failed.
    #[error("rebuilding indexes from the snapshot failed: {0}")]
    Index(#[from] IndexError),
}

impl SnapshotError {
    /// Transport-neutral code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Io { .. } => "snapshot_io",
            Self::Missing { .. } => "snapshot_missing_file",
            Self::Size { .. } => "snapshot_truncated",
            Self::Checksum { .. } => "snapshot_corrupted",
            Self::Format { .. } => "snapshot_format",
            Self::Invalid { .. } => "snapshot_invalid",
            Self::Embedder { .. } => "snapshot_embedder_mismatch",
            Self::Index(error) => error.code(),
        }
    }

    pub(crate) fn io(file: impl std::fmt::Display, error: std::io::Error) -> Self {
        if error.kind() == std::io::ErrorKind::NotFound {
            return Self::Missing { file: file.to_string() };
        }
        Self::Io { file: file.to_string(), reason: error.to_string() }
    }
}

/// Result alias of this layer.
pub type SnapshotResult<T> = Result<T, SnapshotError>;

/// RFC 3339 UTC time of `unix_ms` (civil-from-days, Howard Hinnant's algorithm).
pub(crate) fn rfc3339(unix_ms: u64) -> String {
    let seconds = unix_ms / 1000;
    let days = (seconds / 86_400) as i64;
    let second_of_day = seconds % 86_400;
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60,
        unix_ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_matches_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(1_735_689_599_000), "2024-12-31T23:59:59.000Z");
    }
}
