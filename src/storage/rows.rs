//! A document version's rows: encoded once outside the writer lock ([`EncodedDocument`]; the
//! same bytes are written to the tables and sent to replicas), decoded back (a replica checks
//! what it is sent), and written or removed as one unit of the per-document tables (`chunks`,
//! `vectors`, `sentences`, `layouts`) inside a write transaction ([`DocumentRows`]).
//!
//! Invariant: the four tables change together: a version's rows are inserted or removed in all
//! of them under one ordinal, and an empty `sentences` or `layouts` encoding removes the row
//! (a version without them holds none).

use crate::domain::{Chunk, DocOrdinal, Layout, SentenceVectors};

use super::recover::Rows;
use super::{CHUNKS, LAYOUTS, SENTENCES, StorageResult, VECTORS, encode, io};

/// A document version encoded for the store (encoded outside the writer lock).
#[derive(Clone, Debug)]
pub struct EncodedDocument {
    /// Ordinal of the version.
    pub ordinal: DocOrdinal,
    /// bincode of its chunks.
    pub chunks: Vec<u8>,
    /// Its vectors, little-endian f32.
    pub vectors: Vec<u8>,
    /// bincode of its chunks' sentence vectors; empty when no chunk has any.
    pub sentences: Vec<u8>,
    /// bincode of its chunks' layout maps; empty when no chunk has one.
    pub layouts: Vec<u8>,
}

impl EncodedDocument {
    /// Encodes the chunks (all of one ordinal) and their vectors.
    pub fn encode(ordinal: DocOrdinal, items: &[(&Chunk, &[f32])]) -> Self {
        let chunks: Vec<&Chunk> = items.iter().map(|(chunk, _)| *chunk).collect();
        debug_assert!(chunks.iter().all(|chunk| chunk.doc_ordinal == ordinal));
        let chunks = bincode::serde::encode_to_vec(&chunks, bincode::config::standard())
            .expect("chunks are plain data and always encode");
        let mut vectors = Vec::with_capacity(items.iter().map(|(_, vector)| vector.len() * 4).sum());
        for value in items.iter().flat_map(|(_, vector)| vector.iter()) {
            vectors.extend_from_slice(&value.to_le_bytes());
        }
        let sentences = if items.iter().any(|(chunk, _)| chunk.sentence_vectors.is_some()) {
            let per_chunk: Vec<Option<&SentenceVectors>> =
                items.iter().map(|(chunk, _)| chunk.sentence_vectors.as_deref()).collect();
            encode(&per_chunk)
        } else {
            Vec::new()
        };
        let layouts = if items.iter().any(|(chunk, _)| chunk.layout.is_some()) {
            let per_chunk: Vec<Option<&Layout>> = items.iter().map(|(chunk, _)| chunk.layout.as_deref()).collect();
            encode(&per_chunk)
        } else {
            Vec::new()
        };
        Self { ordinal, chunks, vectors, sentences, layouts }
    }
}

impl EncodedDocument {
    /// The chunks (sentence vectors attached) and vectors of dimension `dimension` these rows
    /// hold; an error says what does not decode or fit (a replica refuses the change).
    pub fn decode(&self, dimension: usize) -> Result<Vec<(Chunk, Vec<f32>)>, String> {
        let sentences = (!self.sentences.is_empty()).then_some(self.sentences.as_slice());
        let layouts = (!self.layouts.is_empty()).then_some(self.layouts.as_slice());
        Rows { ordinal: self.ordinal, chunks: &self.chunks, vectors: &self.vectors, sentences, layouts }
            .decode(dimension)
    }
}

/// The per-document tables (`chunks`, `vectors`, `sentences`, `layouts`) inside one write
/// transaction.
pub(super) struct DocumentRows<'txn> {
    chunks: redb::Table<'txn, u32, &'static [u8]>,
    vectors: redb::Table<'txn, u32, &'static [u8]>,
    sentences: redb::Table<'txn, u32, &'static [u8]>,
    layouts: redb::Table<'txn, u32, &'static [u8]>,
}

impl<'txn> DocumentRows<'txn> {
    pub(super) fn open(txn: &'txn redb::WriteTransaction, file: &str) -> StorageResult<Self> {
        Ok(Self {
            chunks: txn.open_table(CHUNKS).map_err(|error| io(file, error))?,
            vectors: txn.open_table(VECTORS).map_err(|error| io(file, error))?,
            sentences: txn.open_table(SENTENCES).map_err(|error| io(file, error))?,
            layouts: txn.open_table(LAYOUTS).map_err(|error| io(file, error))?,
        })
    }

    /// Writes one document version's rows (replacing any under its ordinal).
    pub(super) fn insert(&mut self, document: &EncodedDocument, file: &str) -> StorageResult<()> {
        self.chunks.insert(document.ordinal, document.chunks.as_slice()).map_err(|error| io(file, error))?;
        self.vectors.insert(document.ordinal, document.vectors.as_slice()).map_err(|error| io(file, error))?;
        if document.sentences.is_empty() {
            self.sentences.remove(document.ordinal).map_err(|error| io(file, error))?;
        } else {
            self.sentences.insert(document.ordinal, document.sentences.as_slice()).map_err(|error| io(file, error))?;
        }
        if document.layouts.is_empty() {
            self.layouts.remove(document.ordinal).map_err(|error| io(file, error))?;
        } else {
            self.layouts.insert(document.ordinal, document.layouts.as_slice()).map_err(|error| io(file, error))?;
        }
        Ok(())
    }

    /// Deletes one ordinal's rows.
    pub(super) fn remove(&mut self, ordinal: DocOrdinal, file: &str) -> StorageResult<()> {
        self.chunks.remove(ordinal).map_err(|error| io(file, error))?;
        self.vectors.remove(ordinal).map_err(|error| io(file, error))?;
        self.sentences.remove(ordinal).map_err(|error| io(file, error))?;
        self.layouts.remove(ordinal).map_err(|error| io(file, error))?;
        Ok(())
    }
}
