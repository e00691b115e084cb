//! Recovery of the store at open ([`Store::recover`]): the ACL checkpoint and the change log
//! after it, replayed in epoch order (gaps are corruption); every live ordinal's chunks (a live
//! ordinal without rows, or unstaged rows of a dead one, is corruption); the change log and the
//! rows are decoded in parallel blocks. Vectors are read on demand ([`Store::vectors`]): a
//! restart reads only those of the chunks its index set and journal lack.

use roaring::RoaringBitmap;

use super::*;

/// One document version's rows as stored (and as replicated), borrowed.
pub(super) struct Rows<'a> {
    pub(super) ordinal: DocOrdinal,
    pub(super) chunks: &'a [u8],
    pub(super) vectors: &'a [u8],
    pub(super) sentences: Option<&'a [u8]>,
    pub(super) layouts: Option<&'a [u8]>,
}

impl Rows<'_> {
    /// Decodes the rows: every chunk must name `ordinal`, the vectors must be `dimension` f32
    /// per chunk, the sentence vectors (when present) one entry per chunk.
    pub(super) fn decode(&self, dimension: usize) -> Result<Vec<(Chunk, Vec<f32>)>, String> {
        let document = self.decode_chunks(dimension)?;
        let mut decoded = Vec::with_capacity(document.len());
        for (chunk, bytes) in document.into_iter().zip(self.vectors.chunks_exact(dimension * 4)) {
            let vector =
                bytes.chunks_exact(4).map(|value| f32::from_le_bytes([value[0], value[1], value[2], value[3]]));
            decoded.push((chunk, vector.collect()));
        }
        Ok(decoded)
    }

    /// The chunks alone (sentence vectors attached), the vectors' size checked but not decoded.
    fn decode_chunks(&self, dimension: usize) -> Result<Vec<Chunk>, String> {
        let document = decode_chunks(self.ordinal, self.chunks, self.sentences, self.layouts)?;
        if dimension == 0 || self.vectors.len() != document.len() * dimension * 4 {
            return Err(format!("vectors of ordinal {} have the wrong size", self.ordinal));
        }
        Ok(document)
    }
}

/// Rows read for decoding off the read transaction (recovery decodes blocks in parallel). The
/// vectors row is not read: its size is checked whenever it is ([`Store::vectors`]).
struct OwnedRows {
    ordinal: DocOrdinal,
    chunks: Vec<u8>,
    sentences: Option<Vec<u8>>,
    layouts: Option<Vec<u8>>,
}

impl OwnedRows {
    fn decode(&self) -> Result<Vec<Chunk>, String> {
        decode_chunks(self.ordinal, &self.chunks, self.sentences.as_deref(), self.layouts.as_deref())
    }
}

/// Rows read and decoded per block at recovery.
const DECODE_BLOCK: usize = 4096;

/// The chunks of one document version's rows (sentence vectors and layout maps attached).
fn decode_chunks(
    ordinal: DocOrdinal,
    chunks: &[u8],
    sentences: Option<&[u8]>,
    layouts: Option<&[u8]>,
) -> Result<Vec<Chunk>, String> {
    let mut document: Vec<Chunk> = exact(&format!("chunks of ordinal {ordinal}"), chunks)?;
    if let Some(bytes) = sentences {
        let what = format!("sentence vectors of ordinal {ordinal}");
        let sentences: Vec<Option<SentenceVectors>> = exact(&what, bytes)?;
        if sentences.len() != document.len() {
            return Err(format!("{what} do not match its chunks"));
        }
        for (chunk, vectors) in document.iter_mut().zip(sentences) {
            chunk.sentence_vectors = vectors.map(std::sync::Arc::new);
        }
    }
    if let Some(bytes) = layouts {
        let what = format!("layout maps of ordinal {ordinal}");
        let layouts: Vec<Option<Layout>> = exact(&what, bytes)?;
        if layouts.len() != document.len() {
            return Err(format!("{what} do not match its chunks"));
        }
        for (chunk, layout) in document.iter_mut().zip(layouts) {
            chunk.layout = layout.map(std::sync::Arc::new);
        }
    }
    if document.iter().any(|chunk| chunk.doc_ordinal != ordinal) {
        return Err(format!("a chunk stored under ordinal {ordinal} names another"));
    }
    Ok(document)
}

impl Store {
    /// The recovered state, and the staged ordinals that were never published.
    pub(super) fn recover(&self, configured: &str, created: bool) -> StorageResult<(Recovered, RoaringBitmap)> {
        let started = std::time::Instant::now();
        let file = self.file.as_str();
        let db = self.database()?;
        let txn = db.begin_read().map_err(|error| io(file, error))?;
        let meta = txn.open_table(META).map_err(|error| corrupted(file, error))?;
        let get = |key: &str| -> StorageResult<Vec<u8>> {
            meta.get(key)
                .map_err(|error| io(file, error))?
                .map(|value| value.value().to_vec())
                .ok_or_else(|| corrupted(file, format!("meta {key} is missing")))
        };
        let format = u32_value(file, "format", &get("format")?)?;
        if format != STORE_FORMAT {
            return Err(corrupted(file, format!("format {format}; this build reads format {STORE_FORMAT}")));
        }
        let stored = String::from_utf8(get("embedder")?).map_err(|_| corrupted(file, "meta embedder is not UTF-8"))?;
        if stored != configured {
            return Err(StorageError::Embedder {
                file: file.to_owned(),
                stored: stored.replace('\0', "/"),
                configured: configured.replace('\0', "/"),
            });
        }
        let lineage = String::from_utf8(get("lineage")?).map_err(|_| corrupted(file, "meta lineage is not UTF-8"))?;
        let next_ordinal = u32_value(file, "next_ordinal", &get("next_ordinal")?)?;
        let checkpoint: AclSnapshot = match meta.get("checkpoint").map_err(|error| io(file, error))? {
            Some(bytes) => decode(file, "checkpoint", bytes.value())?,
            None => AclSnapshot::default(),
        };
        let checkpoint_epoch = checkpoint.epoch();
        let mut retained = Vec::new();
        let mut replay = Vec::new();
        let changes = txn.open_table(CHANGES).map_err(|error| corrupted(file, error))?;
        // Read in order, decoded in parallel a block at a time (JSON decoding is most of a
        // restart's ACL cost).
        let mut block: Vec<(u64, Vec<u8>)> = Vec::with_capacity(DECODE_BLOCK);
        let mut rows = changes.iter().map_err(|error| io(file, error))?.peekable();
        while rows.peek().is_some() {
            block.clear();
            for row in rows.by_ref().take(DECODE_BLOCK) {
                let (epoch, bytes) = row.map_err(|error| io(file, error))?;
                block.push((epoch.value(), bytes.value().to_vec()));
            }
            let decoded: Vec<Result<(u64, Vec<AclMutation>), String>> = {
                use rayon::prelude::*;
                block
                    .par_iter()
                    .map(|(epoch, bytes)| {
                        serde_json::from_slice(bytes)
                            .map(|mutations| (*epoch, mutations))
                            .map_err(|error| format!("changes of epoch {epoch}: {error}"))
                    })
                    .collect()
            };
            for entry in decoded {
                let (epoch, mutations) = entry.map_err(|reason| corrupted(file, reason))?;
                let target = if epoch <= checkpoint_epoch { &mut retained } else { &mut replay };
                target.extend(mutations.into_iter().map(|mutation| AclChange { epoch, mutation }));
            }
        }
        let replayed_epochs: std::collections::BTreeSet<u64> = replay.iter().map(|change| change.epoch).collect();
        if let (Some(first), Some(last)) = (replayed_epochs.first(), replayed_epochs.last())
            && (*first != checkpoint_epoch + 1 || (last - first + 1) as usize != replayed_epochs.len())
        {
            return Err(corrupted(file, format!("the change log after checkpoint epoch {checkpoint_epoch} has gaps")));
        }
        let acl = AclStore::restore(checkpoint, retained, next_ordinal, lineage);
        acl.apply_remote(&replay).map_err(|error| corrupted(file, format!("replaying the change log: {error}")))?;
        tracing::info!(replayed = replay.len(), seconds = started.elapsed().as_secs_f64(), "acl state recovered");
        let snapshot = acl.load();
        let live: RoaringBitmap =
            snapshot.tenant_names().flat_map(|tenant| snapshot.entries(tenant).map(|entry| entry.ordinal)).collect();
        let abandoned: RoaringBitmap = match txn.open_table(STAGED) {
            Ok(staged) => {
                let mut ordinals = RoaringBitmap::new();
                for row in staged.iter().map_err(|error| io(file, error))? {
                    ordinals.insert(row.map_err(|error| io(file, error))?.0.value());
                }
                ordinals
            }
            Err(redb::TableError::TableDoesNotExist(_)) => RoaringBitmap::new(),
            Err(error) => return Err(corrupted(file, error)),
        };
        if let Some(both) = (&abandoned & &live).min() {
            return Err(corrupted(file, format!("ordinal {both} is both live and staged")));
        }
        let chunk_rows = txn.open_table(CHUNKS).map_err(|error| corrupted(file, error))?;
        // Every document version's rows are written and removed together: one vectors row per
        // chunks row. The vectors are not read here (a restart that loads its index set needs
        // none); their size is checked whenever they are read.
        let vector_rows = txn.open_table(VECTORS).map_err(|error| corrupted(file, error))?;
        let (documents, vectors) =
            (chunk_rows.len().map_err(|error| io(file, error))?, vector_rows.len().map_err(|error| io(file, error))?);
        if documents != vectors {
            return Err(corrupted(
                file,
                format!("{documents} documents' chunks are stored with {vectors} vectors rows"),
            ));
        }
        let optional_table = |table| match txn.open_table(table) {
            Ok(table) => Ok(Some(table)),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
            Err(error) => Err(corrupted(file, error)),
        };
        let sentence_rows = optional_table(SENTENCES)?;
        let layout_rows = optional_table(LAYOUTS)?;
        let optional_row =
            |rows: &Option<redb::ReadOnlyTable<u32, &[u8]>>, ordinal: u32| -> StorageResult<Option<Vec<u8>>> {
                let row = rows.as_ref().map(|rows| rows.get(ordinal)).transpose();
                Ok(row.map_err(|error| io(file, error))?.flatten().map(|row| row.value().to_vec()))
            };
        let mut chunks = Vec::new();
        let mut found = RoaringBitmap::new();
        // Rows are read in key order and decoded in parallel a block at a time.
        let mut block: Vec<OwnedRows> = Vec::with_capacity(DECODE_BLOCK);
        let decode_block = |block: &mut Vec<OwnedRows>, chunks: &mut Vec<Chunk>| -> StorageResult<()> {
            use rayon::prelude::*;
            let decoded: Vec<Result<Vec<Chunk>, String>> = block.par_iter().map(OwnedRows::decode).collect();
            block.clear();
            for document in decoded {
                chunks.extend(document.map_err(|reason| corrupted(file, reason))?);
            }
            Ok(())
        };
        for row in chunk_rows.iter().map_err(|error| io(file, error))? {
            let (ordinal, bytes) = row.map_err(|error| io(file, error))?;
            let ordinal = ordinal.value();
            if abandoned.contains(ordinal) {
                continue;
            }
            if !live.contains(ordinal) {
                return Err(corrupted(file, format!("holds chunks of ordinal {ordinal}, which is not live")));
            }
            if ordinal >= next_ordinal {
                return Err(corrupted(file, format!("holds ordinal {ordinal} beyond next_ordinal {next_ordinal}")));
            }
            block.push(OwnedRows {
                ordinal,
                chunks: bytes.value().to_vec(),
                sentences: optional_row(&sentence_rows, ordinal)?,
                layouts: optional_row(&layout_rows, ordinal)?,
            });
            if block.len() == DECODE_BLOCK {
                decode_block(&mut block, &mut chunks)?;
            }
            found.insert(ordinal);
        }
        decode_block(&mut block, &mut chunks)?;
        if let Some(missing) = (&live - &found).min() {
            return Err(corrupted(file, format!("the chunks of live ordinal {missing} are missing")));
        }
        Ok((
            Recovered { acl, chunks, checkpoint_epoch, replayed: replayed_epochs.len(), created, sealed: false },
            abandoned,
        ))
    }

    /// The stored vectors of the chunks of `ordinals` (live versions), by (ordinal, chunk
    /// position): what indexing them needs (a restart reads only those its index set and journal
    /// lack).
    pub fn vectors(&self, ordinals: &RoaringBitmap) -> StorageResult<indexes::StoredVectors> {
        let file = self.file.as_str();
        let db = self.database()?;
        let txn = db.begin_read().map_err(|error| io(file, error))?;
        let chunk_rows = txn.open_table(CHUNKS).map_err(|error| corrupted(file, error))?;
        let vector_rows = txn.open_table(VECTORS).map_err(|error| corrupted(file, error))?;
        let mut stored = indexes::StoredVectors::new();
        for ordinal in ordinals {
            let missing = || corrupted(file, format!("the rows of ordinal {ordinal} are missing"));
            let chunks = chunk_rows.get(ordinal).map_err(|error| io(file, error))?.ok_or_else(missing)?;
            let vectors = vector_rows.get(ordinal).map_err(|error| io(file, error))?.ok_or_else(missing)?;
            let rows =
                Rows { ordinal, chunks: chunks.value(), vectors: vectors.value(), sentences: None, layouts: None };
            for (chunk, vector) in rows.decode(self.dimension).map_err(|reason| corrupted(file, reason))? {
                stored.insert((ordinal, chunk.ordinal), vector);
            }
        }
        Ok(stored)
    }
}
