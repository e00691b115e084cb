//! Deterministic, diversified context selection within a token budget.
//!
//! Candidates (already fused and ordered) are grouped by document in order of each document's
//! best candidate. Selection walks rounds: round 0 takes each document's best chunk, round 1 its
//! second, … up to `max_chunks_per_doc` rounds, skipping a chunk that would overflow the token
//! budget and stopping at `top_k`. The same candidates always give the same selection.

use std::collections::HashMap;

use crate::domain::tokens::count_tokens;

use super::fusion::Candidate;

/// Selection limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SelectionLimits {
    /// Chunks wanted.
    pub top_k: usize,
    /// Total tokens allowed (counted with [`count_tokens`]).
    pub token_budget: usize,
    /// Most chunks taken from one document.
    pub max_chunks_per_doc: usize,
}

/// The selected context.
#[derive(Clone, Debug)]
pub struct Selection {
    /// Selected candidates in selection order (labels S1.. follow this order).
    pub chosen: Vec<Candidate>,
    /// Tokens of the chosen chunks' texts.
    pub tokens: usize,
    /// Fewer authorized candidates existed than `top_k`.
    pub short: bool,
}

/// Selects the context; see the module docs.
pub fn select_context(candidates: &[Candidate], limits: SelectionLimits) -> Selection {
    let mut documents: Vec<Vec<&Candidate>> = Vec::new();
    let mut position: HashMap<(&str, &str), usize> = HashMap::new();
    for candidate in candidates {
        let key = (candidate.chunk.tenant.as_str(), candidate.chunk.doc_id.as_str());
        let index = *position.entry(key).or_insert_with(|| {
            documents.push(Vec::new());
            documents.len() - 1
        });
        documents[index].push(candidate);
    }
    let mut chosen = Vec::new();
    let mut tokens = 0;
    'rounds: for round in 0..limits.max_chunks_per_doc {
        for chunks in &documents {
            if chosen.len() == limits.top_k {
                break 'rounds;
            }
            let Some(candidate) = chunks.get(round) else { continue };
            let cost = count_tokens(&candidate.chunk.text);
            if tokens + cost <= limits.token_budget {
                tokens += cost;
                chosen.push((*candidate).clone());
            }
        }
    }
    Selection { chosen, tokens, short: candidates.len() < limits.top_k }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;
    use crate::domain::{Chunk, ChunkId};

    fn candidate(doc: usize, ordinal: u32, words: usize, score: f64) -> Candidate {
        let text = vec!["word"; words].join(" ");
        Candidate {
            chunk: Arc::new(Chunk {
                id: ChunkId::derive("t", &format!("d{doc}"), 1, ordinal as usize, 0, &text),
                tenant: "t".into(),
                doc_id: format!("d{doc}"),
                doc_version: 1,
                doc_ordinal: doc as u32,
                ordinal,
                start: 0,
                end: 0,
                title: String::new(),
                text,
                sentence_vectors: None,
                layout: None,
            }),
            score,
            lexical: None,
            vector: None,
        }
    }

    #[test]
    fn round_robin_diversifies_documents() {
        let candidates =
            vec![candidate(1, 0, 5, 0.9), candidate(1, 1, 5, 0.8), candidate(1, 2, 5, 0.7), candidate(2, 0, 5, 0.6)];
        let selection =
            select_context(&candidates, SelectionLimits { top_k: 3, token_budget: 100, max_chunks_per_doc: 2 });
        let picked: Vec<(String, u32)> =
            selection.chosen.iter().map(|c| (c.chunk.doc_id.clone(), c.chunk.ordinal)).collect();
        assert_eq!(picked, vec![("d1".into(), 0), ("d2".into(), 0), ("d1".into(), 1)]);
        assert!(!selection.short);
    }

    #[test]
    fn several_useful_chunks_over_the_budget_select_the_same_way_every_time() {
        let candidates: Vec<Candidate> = (0..10).map(|i| candidate(i, 0, 30 + i, 1.0 - i as f64 / 100.0)).collect();
        let limits = SelectionLimits { top_k: 8, token_budget: 100, max_chunks_per_doc: 2 };
        let first = select_context(&candidates, limits);
        assert!(first.tokens <= 100);
        assert_eq!(first.chosen.len(), 3);
        for _ in 0..5 {
            let again = select_context(&candidates, limits);
            let ids = |s: &Selection| s.chosen.iter().map(|c| c.chunk.id).collect::<Vec<_>>();
            assert_eq!(ids(&first), ids(&again));
        }
    }

    proptest! {
        #[test]
        fn budget_is_never_exceeded(
            specs in proptest::collection::vec((0usize..6, 1usize..60), 0..30),
            top_k in 1usize..10, budget in 1usize..300, per_doc in 1usize..4,
        ) {
            let candidates: Vec<Candidate> = specs.iter().enumerate()
                .map(|(i, (doc, words))| candidate(*doc, i as u32, *words, 1.0 / (i as f64 + 1.0)))
                .collect();
            let limits = SelectionLimits { top_k, token_budget: budget, max_chunks_per_doc: per_doc };
            let selection = select_context(&candidates, limits);
            prop_assert!(selection.tokens <= budget);
            prop_assert!(selection.chosen.len() <= top_k);
            let total: usize = selection.chosen.iter().map(|c| count_tokens(&c.chunk.text)).sum();
            prop_assert_eq!(total, selection.tokens);
            let mut per: HashMap<String, usize> = HashMap::new();
            for c in &selection.chosen { *per.entry(c.chunk.doc_id.clone()).or_default() += 1; }
            prop_assert!(per.values().all(|n| *n <= per_doc));
            prop_assert_eq!(selection.short, candidates.len() < top_k);
        }
    }
}
