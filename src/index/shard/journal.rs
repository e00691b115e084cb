//! A shard's index journal: one record per published change of its indexes (an insert batch,
//! a purge), appended while the shard's write lock is held, so that a restart loads the base
//! image of the last index set and applies the records after it instead of inserting the
//! chunks again (BENCHMARKS.md, "Recovery").
//!
//! A record ([`ShardDelta`]) holds the new slots' chunk positions, the vector index's
//! [`VectorDelta`] and the lexical index's [`LexicalDelta`] (the new `meta.json` and the segment
//! files it names that the journal had not written yet). Where the bytes go is the caller's
//! ([`JournalSink`]: the storage layer frames each payload with its length and a checksum).
//!
//! Layout of a payload, integers little-endian:
//! ```text
//! kind u8 (1: insert batch, 2: lexical only)
//! [kind 1: first_slot u32 | count u32 | count x (ordinal u32, chunk position u32)
//!          | count x dimension binary16 | graph base u32 | nodes before u32 | nodes after u32
//!          | entry u32 | top u8 | changed u32 | changed x (node u32 | level u8
//!          | (level + 1) x (length u16 | length x u32)) | has_costs u8 | 4 x f64 | calibrated u64]
//! meta length u32 | meta.json | files u32 | files x (name length u16 | name | length u64 | bytes)
//! ```
//!
//! Invariants kept by this module: a record is taken from exactly the state the write lock
//! protects, so records replayed in order onto the base image rebuild the same shard (same
//! slots, rows, lists, entry point, costs and lexical files); decoding checks every length
//! against the bytes left and never panics; a shard whose journal fails to write stops
//! journaling (logged) and keeps serving: a restart then indexes what the journal lacks.

use std::collections::BTreeSet;

use crate::domain::DocOrdinal;
use crate::index::Slot;
use crate::index::bytes::Reader;
use crate::index::lexical::LexicalDelta;
use crate::index::live::GraphChanges;
use crate::index::vector::{PlannerCosts, VectorDelta};

/// Where a shard's journal records go (the storage layer's file).
pub trait JournalSink: Send {
    /// Appends one record's payload.
    fn append(&mut self, payload: &[u8]) -> std::io::Result<()>;
}

/// A shard's open journal: where records go and the lexical files written already.
pub(super) struct Journal {
    pub(super) sink: Box<dyn JournalSink>,
    pub(super) known: BTreeSet<String>,
    /// Payload bytes appended since the journal started.
    pub(super) bytes: u64,
}

/// One journal record (see the module docs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShardDelta {
    /// The chunk position (inside its document) of every new slot.
    pub positions: Vec<u32>,
    /// The vector index's changes (insert batches only).
    pub vector: Option<VectorDelta>,
    /// The lexical index's changes.
    pub lexical: LexicalDelta,
}

const KIND_BATCH: u8 = 1;
const KIND_LEXICAL: u8 = 2;
const NO_ENTRY: u32 = u32::MAX;

fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn to_u32(value: usize) -> u32 {
    u32::try_from(value).expect("journal sizes fit u32")
}

impl ShardDelta {
    /// The payload of this record.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match &self.vector {
            None => out.push(KIND_LEXICAL),
            Some(vector) => {
                out.push(KIND_BATCH);
                encode_vector(&mut out, vector, &self.positions);
            }
        }
        put_u32(&mut out, to_u32(self.lexical.meta.len()));
        out.extend_from_slice(&self.lexical.meta);
        put_u32(&mut out, to_u32(self.lexical.files.len()));
        for (name, content) in &self.lexical.files {
            out.extend_from_slice(&u16::try_from(name.len()).expect("file names are short").to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&(content.len() as u64).to_le_bytes());
            out.extend_from_slice(content);
        }
        out
    }

    /// Decodes a payload of rows of `dimension` components; the error says what is wrong.
    pub fn decode(bytes: &[u8], dimension: usize) -> Result<Self, String> {
        let mut reader = Reader::new(bytes);
        let (positions, vector) = match reader.u8()? {
            KIND_LEXICAL => (Vec::new(), None),
            KIND_BATCH => {
                let (positions, vector) = decode_vector(&mut reader, dimension)?;
                (positions, Some(vector))
            }
            kind => return Err(format!("record kind {kind} is unknown")),
        };
        let meta_length = reader.u32()? as usize;
        let meta = reader.take(meta_length)?.to_vec();
        let count = reader.u32()? as usize;
        reader.ensure(count, 10)?;
        let mut files = Vec::with_capacity(count);
        for _ in 0..count {
            let name_length = usize::from(reader.u16()?);
            let name = std::str::from_utf8(reader.take(name_length)?).map_err(|_| "a file name is not UTF-8")?;
            let length = usize::try_from(reader.u64()?).map_err(|_| "a file is too long")?;
            files.push((name.to_owned(), reader.take(length)?.to_vec()));
        }
        if reader.at != bytes.len() {
            return Err(format!("{} trailing bytes", bytes.len() - reader.at));
        }
        Ok(Self { positions, vector, lexical: LexicalDelta { meta, files } })
    }
}

fn encode_vector(out: &mut Vec<u8>, vector: &VectorDelta, positions: &[u32]) {
    put_u32(out, vector.first_slot);
    put_u32(out, to_u32(vector.ordinals.len()));
    for (ordinal, position) in vector.ordinals.iter().zip(positions) {
        put_u32(out, *ordinal);
        put_u32(out, *position);
    }
    out.reserve(2 * vector.rows.len());
    for bits in &vector.rows {
        out.extend_from_slice(&bits.to_le_bytes());
    }
    let graph = &vector.graph;
    for value in [graph.base, graph.nodes_before, graph.nodes_after, graph.entry.unwrap_or(NO_ENTRY)] {
        put_u32(out, value);
    }
    out.push(graph.top);
    put_u32(out, to_u32(graph.nodes.len()));
    for (node, level, lists) in &graph.nodes {
        put_u32(out, *node);
        out.push(*level);
        for list in lists {
            out.extend_from_slice(&u16::try_from(list.len()).expect("lists fit u16").to_le_bytes());
            for neighbour in list {
                put_u32(out, *neighbour);
            }
        }
    }
    out.push(u8::from(vector.costs.is_some()));
    let costs = vector.costs.map_or([0.0; 4], |costs| {
        [costs.scan_ns_per_vector, costs.walk_ns_per_evaluation, costs.walk_evaluations_unfiltered, costs.walk_growth]
    });
    for value in costs {
        out.extend_from_slice(&value.to_le_bytes());
    }
    out.extend_from_slice(&vector.calibrated_len.to_le_bytes());
}

fn decode_vector(reader: &mut Reader<'_>, dimension: usize) -> Result<(Vec<u32>, VectorDelta), String> {
    let first_slot: Slot = reader.u32()?;
    let count = reader.u32()? as usize;
    reader.ensure(count, 8 + 2 * dimension)?;
    let mut ordinals: Vec<DocOrdinal> = Vec::with_capacity(count);
    let mut positions = Vec::with_capacity(count);
    for _ in 0..count {
        ordinals.push(reader.u32()?);
        positions.push(reader.u32()?);
    }
    let row_bytes = reader.take(count * 2 * dimension)?;
    let rows = row_bytes.chunks_exact(2).map(|pair| u16::from_le_bytes([pair[0], pair[1]])).collect();
    let (base, nodes_before, nodes_after, entry) = (reader.u32()?, reader.u32()?, reader.u32()?, reader.u32()?);
    let top = reader.u8()?;
    let changed = reader.u32()? as usize;
    reader.ensure(changed, 7)?;
    let mut nodes = Vec::with_capacity(changed);
    for _ in 0..changed {
        let node = reader.u32()?;
        let level = reader.u8()?;
        let mut lists = Vec::with_capacity(usize::from(level) + 1);
        for _ in 0..=level {
            let length = usize::from(reader.u16()?);
            let list = reader.take(4 * length)?;
            lists.push(
                list.chunks_exact(4).map(|bytes| u32::from_le_bytes(bytes.try_into().expect("4 bytes"))).collect(),
            );
        }
        nodes.push((node, level, lists));
    }
    let has_costs = match reader.u8()? {
        0 => false,
        1 => true,
        other => return Err(format!("has_costs is {other}")),
    };
    let values = [reader.f64()?, reader.f64()?, reader.f64()?, reader.f64()?];
    let calibrated_len = reader.u64()?;
    let costs = has_costs.then_some(PlannerCosts {
        scan_ns_per_vector: values[0],
        walk_ns_per_evaluation: values[1],
        walk_evaluations_unfiltered: values[2],
        walk_growth: values[3],
    });
    let graph =
        GraphChanges { base, nodes_before, nodes_after, entry: (entry != NO_ENTRY).then_some(entry), top, nodes };
    Ok((positions, VectorDelta { first_slot, ordinals, rows, graph, costs, calibrated_len }))
}
