//! Per-shard indexes over chunks: an HNSW vector index (cosine; Malkov & Yashunin 2018; built
//! over flat arrays, `live.rs`, and read through `frozen.rs`'s `Adjacency`) with a selectivity
//! planner, and an in-RAM tantivy BM25 index (Robertson & Zaragoza), both restricted to an
//! authorization bitmap *inside* the search, plus the shard actor that owns them, and their
//! persisted images (`vector/image.rs`: `graph.bin`, `lexical/image.rs`: `lexical.bin`,
//! `shard/image.rs`: loading a shard from them), which snapshots of format 2 hold so that a
//! restore loads the indexes instead of rebuilding them.
//!
//! Invariants kept by this module:
//! - a search returns only slots whose document ordinal is in the `allowed` bitmap it was given;
//!   nothing outside it is scored into a top-k (no post-filtering);
//! - slots are shard-local, dense and append-only (`0..len`); the same slot names the same chunk
//!   in both indexes and in the shard's chunk store (a slot loaded without a chunk is dead: its
//!   ordinal is tombstoned and ordinals are never reused, so it is outside every scope).

use std::cmp::Ordering;

mod bytes;
pub mod distance;
mod frozen;
pub mod lexical;
mod live;
pub mod shard;
pub mod vector;

/// Shard-local dense position of a chunk (also its HNSW data id and its tantivy `slot` value).
pub type Slot = u32;

/// One scored search result.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hit {
    /// The chunk's slot in its shard.
    pub slot: Slot,
    /// Retriever score: BM25 for lexical, cosine similarity for vector. Higher is better.
    pub score: f32,
}

/// A hit ordered so that the *worse* hit is greater: lower score, then higher slot. A max-heap
/// of these keeps the worst retained hit on top.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WorseFirst(pub(crate) Hit);

impl PartialEq for WorseFirst {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for WorseFirst {}

impl PartialOrd for WorseFirst {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for WorseFirst {
    fn cmp(&self, other: &Self) -> Ordering {
        other.0.score.total_cmp(&self.0.score).then(self.0.slot.cmp(&other.0.slot))
    }
}

/// Sorts hits best first: descending score, ties by ascending slot.
pub(crate) fn sort_best_first(hits: &mut [Hit]) {
    hits.sort_unstable_by_key(|hit| WorseFirst(*hit));
}

/// Errors of the index layer.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// tantivy failed.
    #[error("lexical index failure: {0}")]
    Lexical(String),
    /// A vector had the wrong dimension or non-finite values.
    #[error("vector has dimension {got}, index expects {expected}")]
    Dimension {
        /// Index dimension.
        expected: usize,
        /// Received dimension.
        got: usize,
    },
    /// A vector contained NaN, infinity or a component beyond binary16's range (the index
    /// stores binary16; every embedder returns unit vectors).
    #[error("vector contains non-finite values or values beyond ±65504")]
    NonFinite,
    /// Slots were not appended densely.
    #[error("slot {got} inserted where {expected} was expected")]
    SlotOrder {
        /// Next expected slot.
        expected: Slot,
        /// Received slot.
        got: Slot,
    },
    /// The shard actor is gone (mailbox closed).
    #[error("shard unavailable")]
    Unavailable,
}

impl IndexError {
    /// Transport-neutral code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Lexical(_) => "lexical_index_error",
            Self::Dimension { .. } => "vector_dimension",
            Self::NonFinite => "vector_non_finite",
            Self::SlotOrder { .. } => "slot_order",
            Self::Unavailable => "shard_unavailable",
        }
    }
}

/// Result alias of this layer.
pub type IndexResult<T> = Result<T, IndexError>;
