//! Reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009) keyed by [`ChunkId`].
//!
//! Invariants: every input list is deduplicated by chunk id (keeping its best rank) before
//! ranks are assigned; the output holds each chunk once, ordered by fused score descending and
//! then by chunk id ascending, so the result does not depend on input order within ties.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use serde::Serialize;

use crate::domain::{Chunk, ChunkId};

/// Which retriever produced a ranked list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Retriever {
    /// BM25 over tantivy.
    Lexical,
    /// HNSW / exact vector search.
    Vector,
}

impl Retriever {
    /// Wire name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Lexical => "lexical",
            Self::Vector => "vector",
        }
    }
}

/// A chunk with its retriever score, as one retriever ranked it.
#[derive(Clone, Debug)]
pub struct ScoredChunk {
    /// The chunk.
    pub chunk: Arc<Chunk>,
    /// Retriever score (higher is better).
    pub score: f32,
}

/// Where one retriever placed a candidate.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Placement {
    /// 1-based rank in that retriever's deduplicated list.
    pub rank: u32,
    /// That retriever's score.
    pub score: f32,
}

/// One fused, deduplicated candidate with provenance.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The chunk (text and provenance).
    pub chunk: Arc<Chunk>,
    /// Sum of `1 / (k + rank)` over the retrievers that found it (replaced by a reranker's score
    /// when one runs).
    pub score: f64,
    /// Lexical placement, when found by BM25.
    pub lexical: Option<Placement>,
    /// Vector placement, when found by vector search.
    pub vector: Option<Placement>,
}

impl Candidate {
    /// Retrievers that found the candidate, in a fixed order.
    pub fn retrievers(&self) -> Vec<Retriever> {
        let mut found = Vec::with_capacity(2);
        if self.lexical.is_some() {
            found.push(Retriever::Lexical);
        }
        if self.vector.is_some() {
            found.push(Retriever::Vector);
        }
        found
    }
}

/// Sorts a retriever's hits best first (score desc, chunk id asc) and keeps the best entry of
/// every chunk id.
pub fn dedup_ranked(mut hits: Vec<ScoredChunk>) -> Vec<ScoredChunk> {
    hits.sort_by(|left, right| right.score.total_cmp(&left.score).then_with(|| left.chunk.id.cmp(&right.chunk.id)));
    let mut seen = std::collections::HashSet::with_capacity(hits.len());
    hits.retain(|hit| seen.insert(hit.chunk.id));
    hits
}

/// Fuses ranked lists with RRF constant `k`. Each list is deduplicated first.
pub fn reciprocal_rank_fusion(lists: Vec<(Retriever, Vec<ScoredChunk>)>, k: f64) -> Vec<Candidate> {
    let mut fused: HashMap<ChunkId, Candidate> = HashMap::new();
    for (retriever, hits) in lists {
        for (index, hit) in dedup_ranked(hits).into_iter().enumerate() {
            let rank = index as u32 + 1;
            let placement = Placement { rank, score: hit.score };
            let contribution = 1.0 / (k + f64::from(rank));
            let candidate = match fused.entry(hit.chunk.id) {
                Entry::Occupied(entry) => entry.into_mut(),
                Entry::Vacant(entry) => {
                    entry.insert(Candidate { chunk: hit.chunk, score: 0.0, lexical: None, vector: None })
                }
            };
            candidate.score += contribution;
            let slot = match retriever {
                Retriever::Lexical => &mut candidate.lexical,
                Retriever::Vector => &mut candidate.vector,
            };
            debug_assert!(slot.is_none(), "lists are deduplicated");
            *slot = Some(placement);
        }
    }
    let mut candidates: Vec<Candidate> = fused.into_values().collect();
    sort_candidates(&mut candidates);
    candidates
}

/// Orders candidates by score descending, then chunk id ascending.
pub fn sort_candidates(candidates: &mut [Candidate]) {
    candidates
        .sort_by(|left, right| right.score.total_cmp(&left.score).then_with(|| left.chunk.id.cmp(&right.chunk.id)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{ChunkingConfig, DocAcl, Document, chunk_document};
    use proptest::prelude::*;

    fn chunk(number: usize) -> Arc<Chunk> {
        let document = Document {
            tenant: "t".into(),
            doc_id: format!("d{number}"),
            version: 1,
            title: String::new(),
            text: format!("text number {number}"),
            acl: DocAcl::default(),
            layout: None,
        };
        Arc::new(chunk_document(&document, number as u32, &ChunkingConfig::default()).remove(0))
    }

    fn naive(lists: &[(Retriever, Vec<(usize, f32)>)], k: f64) -> Vec<(ChunkId, f64)> {
        let mut scores: HashMap<ChunkId, f64> = HashMap::new();
        for (_, hits) in lists {
            let mut sorted: Vec<(ChunkId, f32)> = hits.iter().map(|(n, s)| (chunk(*n).id, *s)).collect();
            sorted.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            let mut seen = std::collections::HashSet::new();
            let mut rank = 0;
            for (id, _) in sorted {
                if seen.insert(id) {
                    rank += 1;
                    *scores.entry(id).or_default() += 1.0 / (k + rank as f64);
                }
            }
        }
        let mut out: Vec<(ChunkId, f64)> = scores.into_iter().collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        out
    }

    fn to_lists(lists: &[(Retriever, Vec<(usize, f32)>)]) -> Vec<(Retriever, Vec<ScoredChunk>)> {
        lists
            .iter()
            .map(|(retriever, hits)| {
                (*retriever, hits.iter().map(|(n, s)| ScoredChunk { chunk: chunk(*n), score: *s }).collect())
            })
            .collect()
    }

    #[test]
    fn the_same_chunk_from_both_retrievers_is_one_candidate() {
        let lists = vec![(Retriever::Lexical, vec![(1, 3.0), (2, 2.0)]), (Retriever::Vector, vec![(2, 0.9), (3, 0.5)])];
        let fused = reciprocal_rank_fusion(to_lists(&lists), 60.0);
        assert_eq!(fused.len(), 3);
        assert_eq!(fused[0].chunk.id, chunk(2).id);
        assert_eq!(fused[0].retrievers(), vec![Retriever::Lexical, Retriever::Vector]);
    }

    proptest! {
        #[test]
        fn rrf_equals_naive_reference_and_ignores_input_order(
            lexical in proptest::collection::vec((0usize..20, 0f32..10.0), 0..25),
            vector in proptest::collection::vec((0usize..20, 0f32..1.0), 0..25),
            k in 1f64..100.0,
            seed in any::<u64>(),
        ) {
            let lists = vec![(Retriever::Lexical, lexical.clone()), (Retriever::Vector, vector.clone())];
            let fused = reciprocal_rank_fusion(to_lists(&lists), k);
            let reference = naive(&lists, k);
            prop_assert_eq!(fused.len(), reference.len());
            for (candidate, (id, score)) in fused.iter().zip(&reference) {
                prop_assert_eq!(candidate.chunk.id, *id);
                prop_assert!((candidate.score - score).abs() < 1e-12);
            }
            // Shuffling the inputs (including duplicates) changes nothing.
            let mut shuffled = lists.clone();
            let mut state = seed;
            for (_, hits) in shuffled.iter_mut() {
                for index in (1..hits.len()).rev() {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    hits.swap(index, (state >> 33) as usize % (index + 1));
                }
            }
            shuffled.reverse();
            let again = reciprocal_rank_fusion(to_lists(&shuffled), k);
            let ids: Vec<ChunkId> = fused.iter().map(|c| c.chunk.id).collect();
            let again_ids: Vec<ChunkId> = again.iter().map(|c| c.chunk.id).collect();
            prop_assert_eq!(ids, again_ids);
        }
    }
}
