//! A shard's images: writing them ([`Shard::export_image`]) and loading a shard from them
//! ([`Shard::load`]), with the compaction rule of the module docs.
//!
//! Invariants kept by this module: a loaded shard's chunks, vector slots and lexical documents
//! agree (every stored chunk is the chunk of exactly one slot with the same ordinal, every
//! alive lexical document names a slot with the same ordinal), or the load is refused naming
//! the image at fault.

use std::sync::{Arc, RwLock};

use super::{Shard, ShardState};
use crate::domain::{Chunk, DocOrdinal};
use crate::index::lexical::LexicalIndex;
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

impl Shard {
    /// The images of this shard, keeping the chunks of slots whose ordinal is `live` (a dead
    /// slot stays in the graph, for its connectivity, without a chunk).
    pub fn export_image(&self, live: impl Fn(DocOrdinal) -> bool) -> Result<ShardImage, IndexError> {
        let state = self.read();
        let mut chunks = Vec::new();
        let positions: Vec<u32> = state
            .chunks
            .iter()
            .map(|chunk| match chunk {
                Some(chunk) if live(chunk.doc_ordinal) => {
                    chunks.push(Arc::clone(chunk));
                    (chunks.len() - 1) as u32
                }
                _ => NO_CHUNK,
            })
            .collect();
        let graph = state.vector.encode_image(&positions);
        let lexical = state.lexical.encode_image()?;
        Ok(ShardImage { chunks, graph, lexical })
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
        let decoded = VectorIndex::decode_image(graph, params).map_err(ShardImageError::Graph)?;
        let vector = decoded.index;
        if let Some(slot) = (0..vector.len() as Slot).find(|slot| vector.doc_ordinal(*slot) >= next_ordinal) {
            return Err(ShardImageError::Graph(format!(
                "slot {slot} has ordinal {}, beyond the next ordinal {next_ordinal}",
                vector.doc_ordinal(slot)
            )));
        }
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
        let dead = slot_chunks.iter().filter(|chunk| chunk.is_none()).count();
        let compaction = if dead as f64 > MAX_DEAD_FRACTION * slot_chunks.len() as f64 {
            Some(Compaction::DeadSlots)
        } else if vector.sealed_graphs() > MAX_SEALED_GRAPHS {
            Some(Compaction::SealedGraphs)
        } else if decoded.built_with.max_connections != params.max_connections
            || decoded.built_with.ef_construction != params.ef_construction
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
                    Some((Chunk::clone(chunk), vector.vector(slot as Slot).to_vec()))
                })
                .collect();
            let shard = Shard::new(id, params)?;
            if !items.is_empty() {
                shard.add(items)?;
            }
            return Ok((shard, Some(reason)));
        }
        let lexical = LexicalIndex::decode_image(lexical).map_err(ShardImageError::Lexical)?;
        for (slot, ordinal) in lexical.alive_slots() {
            if (slot as usize) >= vector.len() || vector.doc_ordinal(slot) != ordinal {
                return Err(ShardImageError::Lexical(format!(
                    "document of slot {slot} (ordinal {ordinal}) matches no slot of the graph image"
                )));
            }
        }
        let shard = Shard { id, state: RwLock::new(ShardState { chunks: slot_chunks, vector, lexical }) };
        Ok((shard, None))
    }

    /// Number of sealed graphs of the vector index (tests and diagnostics).
    pub fn sealed_graphs(&self) -> usize {
        self.read().vector.sealed_graphs()
    }
}
