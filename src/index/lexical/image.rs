//! The lexical index image (`lexical.bin`): the committed tantivy segment files of a
//! [`LexicalIndex`] and its `meta.json`, copied raw from its RAM directory (tantivy's managed
//! directory strips each file's footer on read, so the files are read from the RAM directory
//! under it), so that restore loads the index instead of re-analyzing every chunk.
//!
//! Layout (version 1), integers little-endian:
//! ```text
//! magic "WRNTLEXI" | version u32 | files u32
//! | files x (name length u32 | name (UTF-8) | length u64 | bytes)
//! ```
//!
//! Invariants kept by this module:
//! - an image holds exactly the files of the segments its `meta.json` names (the export
//!   retries when a background merge replaces segments while it copies);
//! - decoding checks every length before allocating and every file name, loads the files into a
//!   fresh RAM directory, checks tantivy's per-file checksums and that the schema is this
//!   build's, and turns a tantivy panic into an error: it never panics and never shares state
//!   with the index the image came from. A decoded index accepts writes and deletes like a new one.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use tantivy::directory::RamDirectory;
use tantivy::index::SegmentId;
use tantivy::{Directory, Index};

use super::{LexicalIndex, schema};
use crate::index::{IndexError, IndexResult};

/// First bytes of a lexical image.
pub const LEXICAL_MAGIC: &[u8; 8] = b"WRNTLEXI";
/// The version this build writes and reads.
pub const LEXICAL_VERSION: u32 = 1;

const META_FILE: &str = "meta.json";
const MANAGED_FILE: &str = ".managed.json";
/// Extensions of the files of a committed segment (the delete file is added when it has one).
const SEGMENT_EXTENSIONS: &[&str] = &["idx", "pos", "term", "store", "fast", "fieldnorm"];
/// Longest file name accepted.
const MAX_NAME_BYTES: usize = 255;
/// Attempts to copy a consistent set of files while merges replace segments.
const EXPORT_ATTEMPTS: usize = 8;

/// The files of an image: name and raw content.
type ImageFiles = Vec<(String, Vec<u8>)>;

/// A committed state read consistently: `meta.json`, the files read, every file name it names.
type Committed = (Vec<u8>, ImageFiles, BTreeSet<String>);

/// The part of `meta.json` the export needs.
#[derive(serde::Deserialize)]
struct Meta {
    segments: Vec<SegmentEntry>,
}

#[derive(serde::Deserialize)]
struct SegmentEntry {
    segment_id: SegmentId,
    deletes: Option<DeleteEntry>,
}

#[derive(serde::Deserialize)]
struct DeleteEntry {
    opstamp: u64,
}

fn image_error(reason: impl std::fmt::Display) -> IndexError {
    IndexError::Lexical(format!("lexical image: {reason}"))
}

impl LexicalIndex {
    /// The image of the committed state of this index.
    pub fn encode_image(&self) -> IndexResult<Vec<u8>> {
        Ok(self.encode_image_named()?.0)
    }

    /// The image of the committed state of this index and the names of the segment files it
    /// holds (what a journal started with the image knows already).
    pub fn encode_image_named(&self) -> IndexResult<(Vec<u8>, BTreeSet<String>)> {
        let (meta, files, names) = self.files_since(&BTreeSet::new())?;
        let mut all = vec![(META_FILE.to_owned(), meta)];
        all.extend(files);
        Ok((encode(&all), names))
    }

    /// What the committed state holds beyond the segment files named `known`: its `meta.json`
    /// and the files it names that are not in `known`; `known` becomes the files it names.
    pub fn journal_delta(&self, known: &mut BTreeSet<String>) -> IndexResult<LexicalDelta> {
        let (meta, files, names) = self.files_since(known)?;
        *known = names;
        Ok(LexicalDelta { meta, files })
    }

    /// `meta.json`, the files it names except `known` ones (read), and every name it names,
    /// consistent with each other (retried while background merges replace segments).
    fn files_since(&self, known: &BTreeSet<String>) -> IndexResult<Committed> {
        for _ in 0..EXPORT_ATTEMPTS {
            if let Some(found) = self.try_files_since(known)? {
                return Ok(found);
            }
        }
        Err(image_error("segments kept changing while they were copied"))
    }

    /// [`LexicalIndex::files_since`] once, or `None` when a merge replaced a segment while the
    /// files were read (try again).
    fn try_files_since(&self, known: &BTreeSet<String>) -> IndexResult<Option<Committed>> {
        let read_meta = || self.directory.atomic_read(Path::new(META_FILE)).map_err(image_error);
        let meta_bytes = read_meta()?;
        let meta: Meta = serde_json::from_slice(&meta_bytes).map_err(image_error)?;
        let mut files = Vec::new();
        let mut names = BTreeSet::new();
        for name in segment_files(&meta) {
            let path = PathBuf::from(&name);
            if !self.directory.exists(&path).map_err(image_error)? {
                // Positions are only written for fields that record them; anything else
                // missing means the segment was merged away meanwhile.
                if name.ends_with(".pos") {
                    continue;
                }
                return Ok(None);
            }
            if !known.contains(&name) {
                let Ok(slice) = self.directory.open_read(&path) else {
                    return Ok(None);
                };
                let bytes = slice.read_bytes().map_err(image_error)?;
                files.push((name.clone(), bytes.as_slice().to_vec()));
            }
            names.insert(name);
        }
        Ok((read_meta()? == meta_bytes).then_some((meta_bytes, files, names)))
    }

    /// Loads an image written by [`LexicalIndex::encode_image`] into a fresh in-RAM index. The
    /// error says what is wrong; a panic inside tantivy is caught and reported as an error.
    pub fn decode_image(bytes: &[u8]) -> Result<Self, String> {
        LexicalFiles::from_image(bytes)?.open()
    }
}

/// The file names a `meta.json` names (`.pos` files may not exist).
fn segment_files(meta: &Meta) -> Vec<String> {
    let mut names = Vec::new();
    for segment in &meta.segments {
        let uuid = segment.segment_id.uuid_string();
        names.extend(SEGMENT_EXTENSIONS.iter().map(|extension| format!("{uuid}.{extension}")));
        if let Some(deletes) = &segment.deletes {
            names.push(format!("{uuid}.{}.del", deletes.opstamp));
        }
    }
    names
}

/// What a commit (or a merge) added to a lexical index since a known state: the new
/// `meta.json` and the segment files it names that the known state lacked (a journal record's
/// lexical part).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LexicalDelta {
    /// The committed `meta.json`.
    pub meta: Vec<u8>,
    /// New segment files: name and raw content.
    pub files: Vec<(String, Vec<u8>)>,
}

/// The files of a lexical index being assembled from an image and the journal's deltas after
/// it, opened once complete ([`LexicalFiles::open`]).
#[derive(Debug)]
pub struct LexicalFiles {
    /// Every file by name, `meta.json` included; only those the current `meta.json` names.
    files: std::collections::BTreeMap<String, Vec<u8>>,
}

impl LexicalFiles {
    /// The files of an image written by [`LexicalIndex::encode_image`].
    pub fn from_image(bytes: &[u8]) -> Result<Self, String> {
        let files = decode(bytes)?;
        if !files.iter().any(|(name, _)| name == META_FILE) {
            return Err(format!("the image lacks {META_FILE}"));
        }
        Ok(Self { files: files.into_iter().collect() })
    }

    /// Applies a delta: checks its names and that every file its `meta.json` names is held or
    /// added (the error says which is not, and nothing changed), then keeps only those.
    pub fn apply(&mut self, delta: &LexicalDelta) -> Result<(), String> {
        let named = self.check(delta)?;
        for (name, content) in &delta.files {
            self.files.insert(name.clone(), content.clone());
        }
        self.files.retain(|name, _| named.contains(name));
        self.files.insert(META_FILE.to_owned(), delta.meta.clone());
        Ok(())
    }

    /// Whether [`LexicalFiles::apply`] would accept `delta`: the files its `meta.json` names.
    pub fn check(&self, delta: &LexicalDelta) -> Result<BTreeSet<String>, String> {
        let meta: Meta = serde_json::from_slice(&delta.meta).map_err(|error| format!("{META_FILE}: {error}"))?;
        if let Some((name, _)) = delta.files.iter().find(|(name, _)| !is_plain_name(name) || name == META_FILE) {
            return Err(format!("file {name:?} is not a segment file"));
        }
        let named: BTreeSet<String> = segment_files(&meta).into_iter().collect();
        let added: BTreeSet<&str> = delta.files.iter().map(|(name, _)| name.as_str()).collect();
        if let Some(missing) = named
            .iter()
            .find(|name| !name.ends_with(".pos") && !added.contains(name.as_str()) && !self.files.contains_key(*name))
        {
            return Err(format!("{META_FILE} names {missing}, which neither the image nor the journal holds"));
        }
        Ok(named)
    }

    /// The segment files held (what a journal continuing from here knows already).
    pub fn names(&self) -> BTreeSet<String> {
        self.files.keys().filter(|name| *name != META_FILE).cloned().collect()
    }

    /// Opens the files as a fresh in-RAM index: checks tantivy's per-file checksums and that
    /// the schema is this build's; a panic inside tantivy is caught and reported as an error.
    pub fn open(self) -> Result<LexicalIndex, String> {
        let directory = RamDirectory::create();
        let mut managed = BTreeSet::new();
        for (name, content) in &self.files {
            directory.atomic_write(Path::new(name), content).map_err(|error| error.to_string())?;
            managed.insert(name.clone());
        }
        // The managed-file list lets tantivy check each segment file's checksum and later delete
        // the files of merged-away segments.
        let mut list = serde_json::to_vec(&managed).map_err(|error| error.to_string())?;
        writeln!(list).map_err(|error| error.to_string())?;
        directory.atomic_write(Path::new(MANAGED_FILE), &list).map_err(|error| error.to_string())?;
        let opened = catch_unwind(AssertUnwindSafe(|| -> Result<LexicalIndex, String> {
            let index = Index::open(directory.clone()).map_err(|error| error.to_string())?;
            let (expected, fields) = schema();
            if index.schema() != expected {
                return Err("the schema is not this build's lexical schema".into());
            }
            let damaged = index.validate_checksum().map_err(|error| error.to_string())?;
            if let Some(file) = damaged.iter().next() {
                return Err(format!("segment file {} fails its checksum", file.display()));
            }
            LexicalIndex::over(index, directory, fields).map_err(|error| error.to_string())
        }));
        match opened {
            Ok(result) => result,
            Err(_) => Err("tantivy panicked while opening the image".into()),
        }
    }
}

fn encode(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let total: usize = files.iter().map(|(name, content)| 12 + name.len() + content.len()).sum();
    let mut out = Vec::with_capacity(16 + total);
    out.extend_from_slice(LEXICAL_MAGIC);
    out.extend_from_slice(&LEXICAL_VERSION.to_le_bytes());
    out.extend_from_slice(&(files.len() as u32).to_le_bytes());
    for (name, content) in files {
        out.extend_from_slice(&(name.len() as u32).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(content.len() as u64).to_le_bytes());
        out.extend_from_slice(content);
    }
    out
}

/// Whether `name` is a plain file name tantivy could have written (no separators, no `..`).
fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name != MANAGED_FILE
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

fn decode(bytes: &[u8]) -> Result<ImageFiles, String> {
    let mut at = 0usize;
    let mut take = |length: usize| -> Result<&[u8], String> {
        match at.checked_add(length).filter(|end| *end <= bytes.len()) {
            Some(end) => {
                let slice = &bytes[at..end];
                at = end;
                Ok(slice)
            }
            None => Err(format!("truncated: {length} bytes wanted at offset {at}, {} held", bytes.len())),
        }
    };
    if take(LEXICAL_MAGIC.len())? != LEXICAL_MAGIC {
        return Err("not a lexical image (magic bytes differ)".into());
    }
    let version = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes"));
    if version != LEXICAL_VERSION {
        return Err(format!("lexical image version {version}; this build reads version {LEXICAL_VERSION}"));
    }
    let count = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
    let mut files: ImageFiles = Vec::new();
    let mut names = BTreeSet::new();
    for number in 0..count {
        let name_length = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
        if name_length > MAX_NAME_BYTES {
            return Err(format!("file {number}'s name is {name_length} bytes long"));
        }
        let name = std::str::from_utf8(take(name_length)?)
            .map_err(|_| format!("file {number}'s name is not UTF-8"))?
            .to_owned();
        if !is_plain_name(&name) {
            return Err(format!("file {number} has the name {name:?}, which tantivy does not write"));
        }
        if !names.insert(name.clone()) {
            return Err(format!("file {name:?} appears twice"));
        }
        let length = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes"));
        let length = usize::try_from(length).map_err(|_| format!("file {name:?} is {length} bytes long"))?;
        // `take` checks the length against the bytes left before anything is copied.
        let content = take(length)?.to_vec();
        files.push((name, content));
    }
    if at != bytes.len() {
        return Err(format!("{} trailing bytes after the last file", bytes.len() - at));
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use roaring::RoaringBitmap;

    use super::*;
    use crate::domain::DocOrdinal;
    use crate::index::{Hit, Slot};

    const TEXTS: &[&str] = &[
        "hotel stays are reimbursed up to 180 euros per night",
        "flights longer than six hours may use premium economy",
        "laptops are replaced every three years and chargers reimbursed",
        "the reorganisation plan merges the platform and data teams",
        "hotel breakfast is reimbursed when it is not included",
        "premium economy needs the approval of a manager",
    ];

    fn add(index: &mut LexicalIndex, first: Slot, count: usize) {
        let rows: Vec<(Slot, DocOrdinal, String, String)> = (0..count)
            .map(|offset| {
                let slot = first + offset as Slot;
                let text =
                    format!("{} {}", TEXTS[slot as usize % TEXTS.len()], TEXTS[(slot as usize * 7 + 3) % TEXTS.len()]);
                (slot, slot / 2, format!("Policy {}", slot % 4), text)
            })
            .collect();
        let items: Vec<(Slot, DocOrdinal, &str, &str)> =
            rows.iter().map(|(slot, ordinal, title, text)| (*slot, *ordinal, title.as_str(), text.as_str())).collect();
        index.add_batch(&items).expect("add batch");
    }

    /// Three commits (three segments unless merged) and a delete.
    fn sample() -> LexicalIndex {
        let mut index = LexicalIndex::new().expect("index");
        add(&mut index, 0, 40);
        add(&mut index, 40, 30);
        index.delete_ordinals(&RoaringBitmap::from_iter([3u32, 11, 30])).expect("delete");
        add(&mut index, 70, 20);
        index
    }

    fn bits(hits: &[Hit]) -> Vec<(Slot, u32)> {
        hits.iter().map(|hit| (hit.slot, hit.score.to_bits())).collect()
    }

    fn scopes() -> Vec<RoaringBitmap> {
        vec![
            RoaringBitmap::from_iter(0..1000u32),
            RoaringBitmap::from_iter((0..1000u32).filter(|ordinal| ordinal % 3 == 0)),
            RoaringBitmap::from_iter([1u32, 2, 3, 40]),
            RoaringBitmap::new(),
        ]
    }

    const QUERIES: &[&str] = &["hotel reimbursed", "premium economy flights", "reorganisation teams", "nothing-here"];

    fn assert_same_answers(left: &LexicalIndex, right: &LexicalIndex) {
        assert_eq!(left.len(), right.len());
        for scope in scopes() {
            for query in QUERIES {
                let expected = left.search(query, 20, &scope).expect("search");
                let got = right.search(query, 20, &scope).expect("search");
                assert_eq!(bits(&got.hits), bits(&expected.hits), "{query}");
                assert_eq!(
                    right.statistics(query, &scope).expect("statistics"),
                    left.statistics(query, &scope).expect("statistics")
                );
            }
        }
    }

    #[test]
    fn lexical_image_round_trips_with_identical_scores_and_statistics() {
        let original = sample();
        let image = original.encode_image().expect("encode");
        let decoded = LexicalIndex::decode_image(&image).expect("decode");
        assert_same_answers(&original, &decoded);
        let mut alive = decoded.alive_slots();
        alive.sort_unstable();
        let mut expected = original.alive_slots();
        expected.sort_unstable();
        assert_eq!(alive, expected);
        assert!(alive.iter().all(|(_, ordinal)| ![3, 11, 30].contains(ordinal)), "deleted docs stay deleted");
    }

    #[test]
    fn decoded_lexical_index_keeps_accepting_writes_and_deletes() {
        let mut original = sample();
        let mut decoded = LexicalIndex::decode_image(&original.encode_image().expect("encode")).expect("decode");
        for index in [&mut original, &mut decoded] {
            add(index, 90, 25);
            index.delete_ordinals(&RoaringBitmap::from_iter([0u32, 46, 50])).expect("delete");
        }
        assert_same_answers(&original, &decoded);
        // And its own image again (a second load).
        let again = LexicalIndex::decode_image(&decoded.encode_image().expect("encode")).expect("decode again");
        assert_same_answers(&original, &again);
    }

    #[test]
    fn every_truncation_and_a_damaged_segment_are_refused() {
        let image = sample().encode_image().expect("encode");
        for length in 0..image.len() {
            assert!(LexicalIndex::decode_image(&image[..length]).is_err(), "{length} bytes accepted");
        }
        // A flipped byte in every 97th position: refused or (rarely, in meta.json's whitespace)
        // accepted, never a panic.
        for position in (0..image.len()).step_by(97) {
            let mut damaged = image.clone();
            damaged[position] ^= 0x41;
            let _ = LexicalIndex::decode_image(&damaged);
        }
        // The last file's footer: tantivy's checksum or footer check refuses it.
        let mut damaged = image.clone();
        let at = damaged.len() - 10;
        damaged[at] ^= 0x5a;
        assert!(LexicalIndex::decode_image(&damaged).is_err());
    }
}
