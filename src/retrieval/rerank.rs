//! Rerankers behind the [`Reranker`] seam: [`IdentityReranker`] keeps the fused order;
//! [`SentenceReranker`] adds the rank of each candidate's best-matching sentence (the sentence
//! vectors made at ingestion, `verifier.sentence_vectors`) to the fusion as a third list.
//!
//! A chunk's vector averages all of its sentences, so a paragraph that answers a question in one
//! sentence among eight ranks below one that is loosely about the question throughout. The
//! sentence list ranks the candidates by `max over sentences of dot(query, sentence)`, in the
//! same reciprocal-rank form as the fusion (`1 / (rrf_k + rank)`, so no score scale is mixed),
//! weighted [`SENTENCE_LIST_WEIGHT`].
//!
//! Invariants kept by this module: a reranker returns exactly the candidates it was given (no
//! candidate added or dropped, so it can never widen a scope); the order is a pure function of
//! the candidates and the query (ties keep the fused order).

use std::sync::Arc;

use crate::config::RerankerKind;

use super::fusion::Candidate;

/// Weight of the best-sentence list against the lexical and vector lists (1 each). Chosen on
/// SQuAD dev's tuning slice (offset 300) with the extractive generator at a 400-token budget:
/// 1 moved citation precision 0.748 -> 0.778, 2 to 0.804, 4 back to 0.774 (BENCHMARKS.md,
/// "Reranking by each paragraph's best sentence").
pub const SENTENCE_LIST_WEIGHT: f64 = 2.0;

/// What a reranker may read of the query.
#[derive(Clone, Copy, Debug)]
pub struct RerankQuery<'a> {
    /// The question as asked.
    pub text: &'a str,
    /// Its embedding, when the retrieval embedded it.
    pub vector: Option<&'a [f32]>,
}

/// Reorders authorized candidates. Runs only on candidates that already passed the scope.
pub trait Reranker: Send + Sync {
    /// Name for logs.
    fn name(&self) -> &str;
    /// Reorders (and may rescore) candidates for `query`. Must not add or drop candidates.
    fn rerank(&self, query: &RerankQuery<'_>, candidates: Vec<Candidate>) -> Vec<Candidate>;
}

/// The default reranker: keeps the fused order.
pub struct IdentityReranker;

impl Reranker for IdentityReranker {
    fn name(&self) -> &str {
        "identity"
    }

    fn rerank(&self, _query: &RerankQuery<'_>, candidates: Vec<Candidate>) -> Vec<Candidate> {
        candidates
    }
}

/// Fuses the candidates' best-sentence ranks into their scores (see the module docs). A
/// candidate without sentence vectors, or a query without a vector, gets no share of the third
/// list; with no query vector the fused order stands.
pub struct SentenceReranker {
    /// The fusion constant (`retrieval.rrf_k`), so the third list weighs as the other two.
    pub rrf_k: f64,
}

impl Reranker for SentenceReranker {
    fn name(&self) -> &str {
        "sentences"
    }

    fn rerank(&self, query: &RerankQuery<'_>, mut candidates: Vec<Candidate>) -> Vec<Candidate> {
        let Some(vector) = query.vector else {
            return candidates;
        };
        let best: Vec<Option<f32>> = candidates
            .iter()
            .map(|candidate| candidate.chunk.sentence_vectors.as_ref().and_then(|sentences| sentences.max_dot(vector)))
            .collect();
        // Positions of the candidates with a best sentence, best first (ties: fused order).
        let mut ranked: Vec<usize> = (0..candidates.len()).filter(|&position| best[position].is_some()).collect();
        ranked.sort_by(|&left, &right| {
            let score = |position: usize| best[position].unwrap_or(f32::NEG_INFINITY);
            score(right).total_cmp(&score(left)).then(left.cmp(&right))
        });
        for (rank, &position) in ranked.iter().enumerate() {
            candidates[position].score += SENTENCE_LIST_WEIGHT / (self.rrf_k + rank as f64 + 1.0);
        }
        // Stable: equal scores keep the fused order.
        let mut order: Vec<(usize, Candidate)> = candidates.into_iter().enumerate().collect();
        order.sort_by(|(left_position, left), (right_position, right)| {
            right.score.total_cmp(&left.score).then(left_position.cmp(right_position))
        });
        order.into_iter().map(|(_, candidate)| candidate).collect()
    }
}

/// The reranker `retrieval.reranker` names, fusing with the constant `rrf_k`.
pub fn reranker(kind: RerankerKind, rrf_k: f64) -> Arc<dyn Reranker> {
    match kind {
        RerankerKind::Identity => Arc::new(IdentityReranker),
        RerankerKind::Sentences => Arc::new(SentenceReranker { rrf_k }),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Arc;

    use super::*;
    use crate::domain::{Chunk, ChunkId, SentenceVectors};

    /// A candidate of document `doc` with fused `score` whose sentences have `vectors`.
    fn candidate(doc: u32, score: f64, vectors: Option<&[&[f32]]>) -> Candidate {
        let sentence_vectors = vectors.map(|vectors| {
            let texts: Vec<String> = (0..vectors.len()).map(|number| format!("sentence {number}")).collect();
            Arc::new(SentenceVectors::quantize(texts.iter().map(String::as_str).zip(vectors.iter().copied())))
        });
        Candidate {
            chunk: Arc::new(Chunk {
                id: ChunkId::derive("t", &format!("d{doc}"), 1, 0, 1, "x"),
                tenant: "t".into(),
                doc_id: format!("d{doc}"),
                doc_version: 1,
                doc_ordinal: doc,
                ordinal: 0,
                start: 0,
                end: 1,
                title: String::new(),
                text: "x".into(),
                sentence_vectors,
                layout: None,
            }),
            score,
            lexical: None,
            vector: None,
        }
    }

    fn docs(candidates: &[Candidate]) -> Vec<u32> {
        candidates.iter().map(|candidate| candidate.chunk.doc_ordinal).collect()
    }

    #[test]
    fn the_best_sentence_lifts_a_paragraph_over_one_ranked_just_above_it() {
        let query: &[f32] = &[1.0, 0.0];
        let (near, far, middle): (&[f32], &[f32], &[f32]) = (&[1.0, 0.0], &[0.0, 1.0], &[0.6, 0.8]);
        let reranker = SentenceReranker { rrf_k: 20.0 };
        let fused = vec![
            candidate(0, 1.0 / 21.0, Some(&[far])),
            candidate(1, 1.0 / 22.0, Some(&[far, near])),
            candidate(2, 1.0 / 23.0, Some(&[middle])),
            candidate(3, 1.0 / 24.0, None),
        ];
        let reranked = reranker.rerank(&RerankQuery { text: "q", vector: Some(query) }, fused.clone());
        // Sentence ranks: d1 (1.0), d2 (0.6), d0 (0.0); d3 has no sentence vectors. d1 rises
        // over d0; d0 (1/21 + 2/23) stays just above d2 (1/23 + 2/22): two fused ranks are not
        // undone by one sentence rank.
        assert_eq!(docs(&reranked), vec![1, 0, 2, 3]);
        let expected = 1.0 / 22.0 + SENTENCE_LIST_WEIGHT / 21.0;
        assert!((reranked[0].score - expected).abs() < 1e-12, "{}", reranked[0].score);
        // Nothing added or dropped.
        let ids = |candidates: &[Candidate]| -> HashSet<ChunkId> {
            candidates.iter().map(|candidate| candidate.chunk.id).collect()
        };
        assert_eq!((reranked.len(), ids(&reranked)), (fused.len(), ids(&fused)));
        // Without a query vector, or with the identity reranker, the fused order stands.
        let unchanged = reranker.rerank(&RerankQuery { text: "q", vector: None }, fused.clone());
        assert_eq!(docs(&unchanged), vec![0, 1, 2, 3]);
        let identity = IdentityReranker.rerank(&RerankQuery { text: "q", vector: Some(query) }, fused);
        assert_eq!(docs(&identity), vec![0, 1, 2, 3]);
    }

    #[test]
    fn ties_keep_the_fused_order_and_other_dimensions_are_ignored() {
        let query: &[f32] = &[1.0, 0.0];
        let same: &[f32] = &[0.8, 0.6];
        let wrong_dimension: &[f32] = &[1.0, 0.0, 0.0];
        let reranker = SentenceReranker { rrf_k: 20.0 };
        let fused = vec![
            candidate(5, 0.5, Some(&[same])),
            candidate(6, 0.5, Some(&[same])),
            candidate(7, 0.5, Some(&[wrong_dimension])),
        ];
        let reranked = reranker.rerank(&RerankQuery { text: "q", vector: Some(query) }, fused);
        assert_eq!(docs(&reranked), vec![5, 6, 7]);
        assert_eq!(reranked[2].score, 0.5, "a vector of another dimension has no sentence rank");
        assert!(reranked[0].score > reranked[1].score);
    }
}
