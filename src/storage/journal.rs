//! The files of the shards' index journals: `<storage.dir>/journal/<index set>/shard-NNNN.delta`,
//! one per shard and index set, holding the records ([`crate::index::shard::ShardDelta`]) of
//! every index change since that set's images were taken, so that a restart loads the set and
//! applies them instead of inserting the chunks again ([`super::indexes`]).
//!
//! Layout: a header (`"WRNTJRNL"`, version u32, shard u32), then records, each framed as
//! `length u32 | crc32 u32 | payload` (little-endian; CRC-32 of the payload, crc32fast).
//!
//! Invariants kept by this module:
//! - a record is appended with one `write` and no fsync: the journal only saves work, the store
//!   stays the truth. A process crash keeps what was written (the page cache survives it); a
//!   power loss may tear the tail, which the checksum finds: [`read`] returns the records
//!   before the first torn or damaged one and says what it found, naming the file, and the
//!   chunks the rest held are indexed again from the store's rows;
//! - [`FileSink::resume`] cuts the file after the last record a load applied before appending,
//!   so a record never follows a damaged one;
//! - files are created with mode 0600 inside the private data directory.

use std::fs::{File, OpenOptions};
use std::io::{Seek as _, SeekFrom, Write as _};
use std::ops::Range;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use crate::index::shard::JournalSink;

/// Folder of the journals under the storage directory.
pub const JOURNAL_DIR: &str = "journal";
/// First bytes of a journal file.
const MAGIC: &[u8; 8] = b"WRNTJRNL";
/// The version this build writes and reads.
const VERSION: u32 = 1;
/// Header length.
const HEADER: usize = 16;
/// Header length: a journal file longer than this holds records.
pub const HEADER_BYTES: u64 = HEADER as u64;
/// Frame length before a payload.
const FRAME: usize = 8;
/// Longest payload accepted when reading (a record is one batch of one shard).
const MAX_PAYLOAD: usize = 1 << 31;

/// The journal file of `shard` for the index set `set` under `data_dir`.
pub fn path(data_dir: &Path, set: &str, shard: usize) -> PathBuf {
    data_dir.join(JOURNAL_DIR).join(set).join(format!("shard-{shard:04}.delta"))
}

/// A journal file open for appending.
#[derive(Debug)]
pub struct FileSink {
    file: File,
}

impl FileSink {
    /// Creates (or empties) the journal of `shard` at `path`, its folder included.
    pub fn create(path: &Path, shard: usize) -> std::io::Result<Self> {
        if let Some(folder) = path.parent() {
            std::fs::create_dir_all(folder)?;
        }
        let mut file = OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
        let mut header = Vec::with_capacity(HEADER);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&VERSION.to_le_bytes());
        header.extend_from_slice(&u32::try_from(shard).unwrap_or(u32::MAX).to_le_bytes());
        file.write_all(&header)?;
        Ok(Self { file })
    }

    /// Reopens the journal at `path` for appending after its first `keep` bytes (the header and
    /// the records a load applied; anything after them is cut), or creates it when `keep` is
    /// 0 (no usable header).
    pub fn resume(path: &Path, shard: usize, keep: u64) -> std::io::Result<Self> {
        if keep < HEADER as u64 {
            return Self::create(path, shard);
        }
        let mut file = OpenOptions::new().write(true).open(path)?;
        file.set_len(keep)?;
        file.seek(SeekFrom::End(0))?;
        Ok(Self { file })
    }
}

impl JournalSink for FileSink {
    fn append(&mut self, payload: &[u8]) -> std::io::Result<()> {
        let length = u32::try_from(payload.len()).map_err(|_| std::io::Error::other("record too large"))?;
        let mut frame = Vec::with_capacity(FRAME + payload.len());
        frame.extend_from_slice(&length.to_le_bytes());
        frame.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        frame.extend_from_slice(payload);
        self.file.write_all(&frame)
    }
}

/// A journal file read back: its bytes and the payload of every intact record.
#[derive(Debug, Default)]
pub struct JournalFile {
    /// The file's bytes.
    pub bytes: Vec<u8>,
    /// Byte ranges of the intact records' payloads, in order.
    pub records: Vec<Range<usize>>,
    /// What ended the reading before the file's end (a torn or damaged record), naming the file.
    pub damage: Option<String>,
    /// Whether the header is this shard's (the file can be continued).
    pub header: bool,
}

impl JournalFile {
    /// Bytes up to the end of the first `records` records (header included): what a journal
    /// continuing after them keeps; 0 when the header itself is unusable.
    pub fn keep(&self, records: usize) -> u64 {
        if !self.header {
            return 0;
        }
        records.checked_sub(1).and_then(|last| self.records.get(last)).map_or(HEADER, |range| range.end) as u64
    }

    /// The payloads of the intact records.
    pub fn payloads(&self) -> Vec<&[u8]> {
        self.records.iter().map(|range| &self.bytes[range.clone()]).collect()
    }
}

/// Reads the journal of `shard` at `path`: `None` when there is none; otherwise its intact
/// records, and what stopped the reading early (named in `damage`).
pub fn read(path: &Path, shard: usize) -> Option<JournalFile> {
    let shown = path.display();
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return None,
        Err(error) => return Some(JournalFile { damage: Some(format!("{shown}: {error}")), ..JournalFile::default() }),
    };
    let mut file = JournalFile { bytes, records: Vec::new(), damage: None, header: false };
    let header_ok = file.bytes.len() >= HEADER
        && &file.bytes[..8] == MAGIC
        && file.bytes[8..12] == VERSION.to_le_bytes()
        && u32::from_le_bytes(file.bytes[12..16].try_into().expect("4 bytes")) as usize == shard;
    if !header_ok {
        file.damage = Some(format!("{shown}: not a version {VERSION} journal of shard {shard}"));
        file.bytes.clear();
        return Some(file);
    }
    file.header = true;
    let mut at = HEADER;
    while at < file.bytes.len() {
        let Some(frame) = file.bytes.get(at..at + FRAME) else {
            file.damage = Some(format!("{shown}: a torn record frame at byte {at}"));
            break;
        };
        let length = u32::from_le_bytes(frame[..4].try_into().expect("4 bytes")) as usize;
        let checksum = u32::from_le_bytes(frame[4..].try_into().expect("4 bytes"));
        let start = at + FRAME;
        let Some(payload) = file.bytes.get(start..start + length).filter(|_| length <= MAX_PAYLOAD) else {
            file.damage = Some(format!("{shown}: the record at byte {at} is torn ({length} bytes announced)"));
            break;
        };
        if crc32fast::hash(payload) != checksum {
            file.damage = Some(format!("{shown}: the record at byte {at} fails its checksum"));
            break;
        }
        file.records.push(start..start + length);
        at = start + length;
    }
    Some(file)
}

/// Removes the journals of index sets not in `keep` (their sets were pruned or never completed).
pub fn prune(data_dir: &Path, keep: &[String]) {
    let root = data_dir.join(JOURNAL_DIR);
    let Ok(entries) = std::fs::read_dir(&root) else { return };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !keep.contains(&name)
            && let Err(error) = std::fs::remove_dir_all(entry.path())
        {
            tracing::warn!(%error, journal = %entry.path().display(), "could not remove an old index journal");
        }
    }
}
