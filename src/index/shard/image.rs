//! A shard's images: writing them ([`Shard::export_image`]) and loading a shard from them
//! ([`Shard::load`]), with the compaction rule of the module docs.
//!
//! Invariants kept by this module: a loaded shard's chunks, vector slots and lexical documents
//! agree (every stored chunk is the chunk of exactly one slot with the same ordinal, every
//! alive lexical document names a slot with the same ordinal), or the load is refused naming
//! the image at fault.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};

use super::journal::{Journal, JournalSink, ShardDelta};
use super::{Shard, ShardState};
use crate::domain::{Chunk, DocOrdinal};
use crate::index::lexical::LexicalFiles;
use crate::index::vector::{NO_CHUNK, VectorIndex, VectorParams};
use crate::index::{IndexError, Slot};

/// A loaded shard holding more sealed graphs than this is compacted.
pub const MAX_SEALED_GRAPHS: usize = 4;

/// A loaded shard with more dead slots than this fraction is compacted.
pub const MAX_DEAD_FRACTION: f64 = 0.25;

/// What a shard writes into a snapshot or an index set.
#[derive(Debug)]
pub struct ShardImage {
    /// The chunks of the live slots, in slot order (the chunk positions of the graph image).
    pub chunks: Vec<Arc<Chunk>>,
    /// [`VectorIndex::encode_image`].
    pub graph: Vec<u8>,
    /// [`LexicalIndex::encode_image`].
    pub lexical: Vec<u8>,
}

/// Why loading a shard failed: which image is at fault, and why.
#[derive(Debug, thiserror::Error)]
pub enum ShardImageError {
    /// The graph image does not decode, or contradicts the chunks.
    #[error("{0}")]
    Graph(String),
    /// The lexical image does not decode, or contradicts the graph's slots.
    #[error("{0}")]
    Lexical(String),
    /// Building the shard failed (compaction).
    #[error(transparent)]
    Index(#[from] IndexError),
}

/// How far a load applied a shard's journal.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct JournalReplay {
    /// Records applied.
    pub records: usize,
    /// Slots they added (chunks not inserted again).
    pub slots: usize,
    /// Records at the journal's end left out because they hold a batch that never committed
    /// (in flight at a crash): the expected end of a journal, nothing is lost.
    pub uncommitted: usize,
    /// Why the replay stopped before the journal's end, if a record was refused (damaged or
    /// not fitting: what the rest held is indexed again from the store's rows).
    pub stopped: Option<String>,
}

/// Why a journal record was not applied.
enum Unapplied {
    /// It holds a batch that never committed.
    Uncommitted,
    /// It does not decode or fit (the reason).
    Refused(String),
}

impl From<String> for Unapplied {
    fn from(reason: String) -> Self {
        Self::Refused(reason)
    }
}

/// Refuses an index whose slots reach `next_ordinal` (a later document would otherwise inherit
/// a dead slot).
fn check_slot_ordinals(vector: &VectorIndex, next_ordinal: DocOrdinal) -> Result<(), ShardImageError> {
    match (0..vector.len() as Slot).find(|slot| vector.doc_ordinal(*slot) >= next_ordinal) {
        Some(slot) => Err(ShardImageError::Graph(format!(
            "slot {slot} has ordinal {}, beyond the next ordinal {next_ordinal}",
            vector.doc_ordinal(slot)
        ))),
        None => Ok(()),
    }
}

/// A shard's images and journal decoded ahead of the store ([`Shard::decode_images`]).
pub struct DecodedShard {
    vectors: crate::index::vector::DecodedVectors,
    lexical: Lexical,
}

/// A shard's lexical index: its files while journal records may still change them, or opened.
enum Lexical {
    Files(LexicalFiles),
    Opened(Box<crate::index::lexical::LexicalIndex>, BTreeSet<String>),
}

/// A shard loaded from an index set and its journal ([`Shard::load_with`]).
pub struct LoadedShard {
    /// The shard.
    pub shard: Shard,
    /// Why it was compacted (then it is no longer the journal's state).
    pub compaction: Option<Compaction>,
    /// What the journal did.
    pub replay: JournalReplay,
    /// The lexical segment files the shard holds.
    pub known: BTreeSet<String>,
}

/// Why a loaded shard was compacted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Compaction {
    /// More than [`MAX_DEAD_FRACTION`] of the slots are dead.
    DeadSlots,
    /// More than [`MAX_SEALED_GRAPHS`] sealed graphs.
    SealedGraphs,
    /// The graphs were built with another M or ef_construction than configured.
    BuildParams,
}

/// What a graph image's chunk position of a slot counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkPositions {
    /// The chunk's index in the image's own chunk list (snapshots).
    InImage,
    /// The chunk's position inside its document (index sets: the chunk is the store row keyed
    /// by the slot's ordinal and this position).
    InDocument,
}

impl Shard {
    /// The images of this shard, keeping the chunks of slots whose ordinal is `live` (a dead
    /// slot stays in the graph, for its connectivity, without a chunk). The graph image records
    /// for every kept slot its chunk's index in [`ShardImage::chunks`] (`positions` =
    /// [`ChunkPositions::InImage`], snapshots) or the chunk's position inside its document
    /// ([`ChunkPositions::InDocument`], index sets, whose chunks are the store's rows).
    pub fn export_image(
        &self,
        live: impl Fn(DocOrdinal) -> bool,
        positions: ChunkPositions,
    ) -> Result<ShardImage, IndexError> {
        Ok(Self::image_of(&self.read(), live, positions)?.0)
    }

    /// The images of `state` and the lexical segment files the image holds.
    fn image_of(
        state: &ShardState,
        live: impl Fn(DocOrdinal) -> bool,
        positions: ChunkPositions,
    ) -> Result<(ShardImage, BTreeSet<String>), IndexError> {
        let mut chunks = Vec::new();
        let positions: Vec<u32> = state
            .chunks
            .iter()
            .map(|chunk| match chunk {
                Some(chunk) if live(chunk.doc_ordinal) => {
                    chunks.push(Arc::clone(chunk));
                    match positions {
                        ChunkPositions::InImage => (chunks.len() - 1) as u32,
                        ChunkPositions::InDocument => chunk.ordinal,
                    }
                }
                _ => NO_CHUNK,
            })
            .collect();
        let graph = state.vector.encode_image(&positions);
        let (lexical, known) = state.lexical.encode_image_named()?;
        Ok((ShardImage { chunks, graph, lexical }, known))
    }

    /// [`Shard::export_image`] with [`ChunkPositions::InDocument`] (an index set), and from the
    /// same state on, every index change journaled into what `sink` returns (`None`: the shard
    /// is not journaled). The image and the journal's start are one atomic step: no change falls
    /// between them.
    pub fn export_image_journaled(
        &self,
        sink: impl FnOnce() -> Option<Box<dyn JournalSink>>,
    ) -> Result<ShardImage, IndexError> {
        let state = self.read();
        let (image, known) = Self::image_of(&state, |_| true, ChunkPositions::InDocument)?;
        *self.journal() = sink().map(|sink| Journal { sink, known, bytes: 0 });
        Ok(image)
    }

    /// Loads shard `id` from its images (`chunks` in the order the graph image's chunk
    /// positions refer to), searched with `params`; every slot's ordinal must be below
    /// `next_ordinal` (a later document would otherwise inherit a dead slot); compacts it when the rule says so (then the
    /// lexical image is not read: both indexes are rebuilt from the live chunks and their stored
    /// vectors). Returns the shard and why it was compacted, if it was.
    pub fn load(
        id: usize,
        params: VectorParams,
        chunks: Vec<Chunk>,
        graph: &[u8],
        lexical: &[u8],
        next_ordinal: DocOrdinal,
    ) -> Result<(Shard, Option<Compaction>), ShardImageError> {
        let decoded = Self::decode_graph(graph, params, next_ordinal)?;
        let vector = decoded.index;
        let mut slot_chunks: Vec<Option<Arc<Chunk>>> = vec![None; vector.len()];
        let mut owners: Vec<Option<Slot>> = vec![None; chunks.len()];
        for (slot, &position) in decoded.chunk_positions.iter().enumerate() {
            if position == NO_CHUNK {
                continue;
            }
            let Some(owner) = owners.get_mut(position as usize) else {
                return Err(ShardImageError::Graph(format!(
                    "slot {slot} names chunk {position}, the chunks file holds {}",
                    chunks.len()
                )));
            };
            if let Some(other) = owner.replace(slot as Slot) {
                return Err(ShardImageError::Graph(format!("slots {other} and {slot} name the same chunk {position}")));
            }
        }
        if let Some(position) = owners.iter().position(Option::is_none) {
            return Err(ShardImageError::Graph(format!("no slot names stored chunk {position}")));
        }
        for (chunk, owner) in chunks.into_iter().zip(owners) {
            let slot = owner.expect("every chunk has an owner");
            if chunk.doc_ordinal != vector.doc_ordinal(slot) {
                return Err(ShardImageError::Graph(format!(
                    "slot {slot} has ordinal {}, its chunk ordinal {}",
                    vector.doc_ordinal(slot),
                    chunk.doc_ordinal
                )));
            }
            slot_chunks[slot as usize] = Some(Arc::new(chunk));
        }
        let lexical = Lexical::Files(LexicalFiles::from_image(lexical).map_err(ShardImageError::Lexical)?);
        let (shard, compaction, _) = Self::finish_load(id, params, vector, decoded.built_with, slot_chunks, lexical)?;
        Ok((shard, compaction))
    }

    /// Loads shard `id` from an index set's images and the `journal` records written after
    /// them (payloads in order): the records are applied in order up to the first that does not
    /// decode, does not fit, or names an ordinal at or beyond `next_ordinal` (a batch that was
    /// never committed); [`JournalReplay`] says how far it went and why it stopped. The chunk of
    /// each slot is what `resolve` returns for the slot's ordinal and chunk position inside its
    /// document (`None`: the document was deleted or superseded since, or never committed: the
    /// slot is dead). Otherwise as [`Shard::load`]. Returns the shard, why it was compacted (then
    /// it is no longer the journal's state), what the journal did, and the lexical segment
    /// files the shard holds (the `known` of a journal continuing from it).
    pub fn load_with(
        id: usize,
        params: VectorParams,
        images: (&[u8], &[u8]),
        journal: &[&[u8]],
        next_ordinal: DocOrdinal,
        resolve: impl FnMut(DocOrdinal, u32) -> Option<Chunk>,
    ) -> Result<LoadedShard, ShardImageError> {
        Self::assemble(
            id,
            params,
            Self::decode_images(params, images, journal.is_empty())?,
            journal,
            next_ordinal,
            resolve,
        )
    }

    /// What [`Shard::load_with`] does before it needs the store: the graph image decoded (the
    /// last graph revived) and the lexical image's files, opened as an index when no journal
    /// record will change them (`open_lexical`). Runs while the store opens.
    pub fn decode_images(
        params: VectorParams,
        (graph, lexical): (&[u8], &[u8]),
        open_lexical: bool,
    ) -> Result<DecodedShard, ShardImageError> {
        let vectors = VectorIndex::decode_image(graph, params).map_err(ShardImageError::Graph)?;
        let files = LexicalFiles::from_image(lexical).map_err(ShardImageError::Lexical)?;
        let lexical = if open_lexical {
            let known = files.names();
            Lexical::Opened(Box::new(files.open().map_err(ShardImageError::Lexical)?), known)
        } else {
            Lexical::Files(files)
        };
        Ok(DecodedShard { vectors, lexical })
    }

    /// The rest of [`Shard::load_with`], once the store is open: every slot's ordinal checked
    /// against `next_ordinal`, the `journal`'s records decoded and applied one at a time,
    /// chunks attached. A journal given to a shard whose lexical index was opened already is
    /// refused (its records are not applied: the rows are indexed again).
    pub fn assemble(
        id: usize,
        params: VectorParams,
        decoded: DecodedShard,
        journal: &[&[u8]],
        next_ordinal: DocOrdinal,
        mut resolve: impl FnMut(DocOrdinal, u32) -> Option<Chunk>,
    ) -> Result<LoadedShard, ShardImageError> {
        let DecodedShard { vectors, mut lexical } = decoded;
        check_slot_ordinals(&vectors.index, next_ordinal)?;
        let built_with = vectors.built_with;
        let mut vector = vectors.index;
        let mut positions = vectors.chunk_positions;
        let mut replay = JournalReplay::default();
        let total = journal.len();
        for (number, payload) in journal.iter().enumerate() {
            let applied = match &mut lexical {
                Lexical::Files(files) => ShardDelta::decode(payload, vector.dimension())
                    .map_err(Unapplied::Refused)
                    .and_then(|delta| Self::apply_record(&mut vector, files, &mut positions, delta, next_ordinal)),
                Lexical::Opened(..) => {
                    Err(Unapplied::Refused("the lexical index was opened before the journal".into()))
                }
            };
            match applied {
                Ok(slots) => {
                    replay.records += 1;
                    replay.slots += slots;
                }
                Err(Unapplied::Uncommitted) => {
                    replay.uncommitted = total - number;
                    break;
                }
                Err(Unapplied::Refused(reason)) => {
                    replay.stopped = Some(format!("record {}: {reason}", number + 1));
                    break;
                }
            }
        }
        let mut slot_chunks: Vec<Option<Arc<Chunk>>> = vec![None; vector.len()];
        for (slot, &position) in positions.iter().enumerate() {
            if position == NO_CHUNK {
                continue;
            }
            let ordinal = vector.doc_ordinal(slot as Slot);
            if let Some(chunk) = resolve(ordinal, position) {
                if chunk.doc_ordinal != ordinal || chunk.ordinal != position {
                    return Err(ShardImageError::Graph(format!(
                        "slot {slot} names chunk ({ordinal}, {position}), the store returned ({}, {})",
                        chunk.doc_ordinal, chunk.ordinal
                    )));
                }
                slot_chunks[slot] = Some(Arc::new(chunk));
            }
        }
        let (shard, compaction, known) = Self::finish_load(id, params, vector, built_with, slot_chunks, lexical)?;
        Ok(LoadedShard { shard, compaction, replay, known })
    }

    /// Applies one journal record (all of it or, with the reason, none of it); returns the
    /// slots it added.
    fn apply_record(
        vector: &mut VectorIndex,
        files: &mut LexicalFiles,
        positions: &mut Vec<u32>,
        delta: ShardDelta,
        next_ordinal: DocOrdinal,
    ) -> Result<usize, Unapplied> {
        files.check(&delta.lexical)?;
        let mut slots = 0;
        if let Some(changes) = &delta.vector {
            if changes.ordinals().len() != delta.positions.len() {
                return Err(Unapplied::Refused("the slots and their chunk positions differ in number".into()));
            }
            if changes.ordinals().iter().any(|ordinal| *ordinal >= next_ordinal) {
                // Every later record is of a batch indexed after this one reserved its
                // ordinals: none of them committed either (a commit records the next ordinal).
                return Err(Unapplied::Uncommitted);
            }
            vector.apply_delta(changes)?;
            positions.extend_from_slice(&delta.positions);
            slots = delta.positions.len();
        }
        files.apply(&delta.lexical)?;
        Ok(slots)
    }

    /// The decoded graph image, every slot's ordinal checked against `next_ordinal`.
    fn decode_graph(
        graph: &[u8],
        params: VectorParams,
        next_ordinal: DocOrdinal,
    ) -> Result<crate::index::vector::DecodedVectors, ShardImageError> {
        let decoded = VectorIndex::decode_image(graph, params).map_err(ShardImageError::Graph)?;
        check_slot_ordinals(&decoded.index, next_ordinal)?;
        Ok(decoded)
    }

    /// Compacts (rule of the module docs) or loads the lexical image and assembles the shard.
    fn finish_load(
        id: usize,
        params: VectorParams,
        vector: VectorIndex,
        built_with: crate::index::vector::BuildParams,
        slot_chunks: Vec<Option<Arc<Chunk>>>,
        lexical: Lexical,
    ) -> Result<(Shard, Option<Compaction>, BTreeSet<String>), ShardImageError> {
        let dead = slot_chunks.iter().filter(|chunk| chunk.is_none()).count();
        let compaction = if dead as f64 > MAX_DEAD_FRACTION * slot_chunks.len() as f64 {
            Some(Compaction::DeadSlots)
        } else if vector.sealed_graphs() > MAX_SEALED_GRAPHS {
            Some(Compaction::SealedGraphs)
        } else if built_with.max_connections != params.max_connections
            || built_with.ef_construction != params.ef_construction
        {
            Some(Compaction::BuildParams)
        } else {
            None
        };
        if let Some(reason) = compaction {
            let items: Vec<(Chunk, Vec<f32>)> = slot_chunks
                .iter()
                .enumerate()
                .filter_map(|(slot, chunk)| {
                    let chunk = chunk.as_ref()?;
                    Some((Chunk::clone(chunk), vector.vector(slot as Slot)))
                })
                .collect();
            let shard = Shard::new(id, params)?;
            if !items.is_empty() {
                shard.add(items)?;
            }
            return Ok((shard, Some(reason), BTreeSet::new()));
        }
        let (lexical, known) = match lexical {
            Lexical::Opened(index, known) => (*index, known),
            Lexical::Files(files) => {
                let known = files.names();
                (files.open().map_err(ShardImageError::Lexical)?, known)
            }
        };
        for (slot, ordinal) in lexical.alive_slots() {
            if (slot as usize) >= vector.len() || vector.doc_ordinal(slot) != ordinal {
                return Err(ShardImageError::Lexical(format!(
                    "document of slot {slot} (ordinal {ordinal}) matches no slot of the graph image"
                )));
            }
        }
        let shard = Shard {
            id,
            state: RwLock::new(ShardState { chunks: slot_chunks, vector, lexical }),
            journal: std::sync::Mutex::new(None),
        };
        Ok((shard, None, known))
    }

    /// Number of sealed graphs of the vector index (tests and diagnostics).
    pub fn sealed_graphs(&self) -> usize {
        self.read().vector.sealed_graphs()
    }

    /// Number of graphs the vector index was loaded with (0 when it was built by inserts; tests
    /// and diagnostics).
    pub fn loaded_graphs(&self) -> usize {
        self.read().vector.loaded_graphs()
    }
}
