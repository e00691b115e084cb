//! Unit tests of `eval/retrieval`.

use super::*;

fn ranked(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|id| (*id).to_owned()).collect()
}

fn judged(pairs: &[(&str, u32)]) -> HashMap<String, u32> {
    pairs.iter().map(|(id, relevance)| ((*id).to_owned(), *relevance)).collect()
}

fn close(left: f64, right: f64) -> bool {
    (left - right).abs() < 1e-9
}

#[test]
fn ndcg_with_graded_relevance_matches_hand_computation() {
    // Ranking: d1 (rel 1), d2 (rel 0), d3 (rel 2).
    // DCG = 1/log2(2) + 0 + 2/log2(4) = 1 + 1 = 2.
    // Ideal: d3 (2), d1 (1): IDCG = 2/log2(2) + 1/log2(3) = 2 + 0.6309297535714575.
    let qrels = judged(&[("d1", 1), ("d3", 2)]);
    let value = ndcg_at_k(&ranked(&["d1", "d2", "d3"]), &qrels, 10);
    assert!(close(value, 2.0 / (2.0 + 1.0 / 3f64.log2())), "{value}");
    assert!(close(ndcg_at_k(&ranked(&["d3", "d1"]), &qrels, 10), 1.0));
    // Cut-off: at k = 1 only d1 counts: DCG 1, IDCG 2.
    assert!(close(ndcg_at_k(&ranked(&["d1", "d3"]), &qrels, 1), 0.5));
    assert!(close(ndcg_at_k(&ranked(&["x", "y"]), &qrels, 10), 0.0));
}

#[test]
fn ndcg_ideal_uses_all_judged_documents_even_unretrieved() {
    // One of three relevant documents retrieved at rank 1.
    // DCG = 1; IDCG = 1 + 1/log2(3) + 1/log2(4) = 1 + 0.63093 + 0.5.
    let qrels = judged(&[("a", 1), ("b", 1), ("c", 1)]);
    let value = ndcg_at_k(&ranked(&["a"]), &qrels, 10);
    assert!(close(value, 1.0 / (1.5 + 1.0 / 3f64.log2())), "{value}");
}

#[test]
fn recall_counts_relevant_found_within_cutoff() {
    let qrels = judged(&[("a", 1), ("b", 2), ("c", 1), ("d", 1)]);
    let run = ranked(&["a", "x", "b", "y", "c"]);
    assert!(close(recall_at_k(&run, &qrels, 2), 0.25));
    assert!(close(recall_at_k(&run, &qrels, 3), 0.5));
    assert!(close(recall_at_k(&run, &qrels, 100), 0.75));
    assert!(close(recall_at_k(&run, &judged(&[]), 10), 0.0));
}

#[test]
fn mrr_is_reciprocal_rank_of_first_relevant_within_cutoff() {
    let qrels = judged(&[("b", 1), ("c", 2)]);
    assert!(close(mrr_at_k(&ranked(&["a", "b", "c"]), &qrels, 10), 0.5));
    assert!(close(mrr_at_k(&ranked(&["c"]), &qrels, 10), 1.0));
    let late: Vec<String> = (0..10).map(|index| format!("x{index}")).chain(["b".to_owned()]).collect();
    assert!(close(mrr_at_k(&late, &qrels, 10), 0.0));
}

#[test]
fn means_average_over_queries() {
    let mut total = RetrieverMetrics::default();
    total.add(RetrieverMetrics { ndcg_at_10: 1.0, recall_at_10: 1.0, recall_at_100: 1.0, mrr_at_10: 1.0 });
    total.add(RetrieverMetrics::default());
    assert_eq!(total.mean(2).ndcg_at_10, 0.5);
}
