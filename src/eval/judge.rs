//! The model judge of `warrant eval answers --judge`: whether a separate model, asked about each
//! of a returned claim's quoted spans in turn, says one supports it ([`judge_claims`]), and how
//! that model agrees with SciFact's claim labels ([`judge_agreement`], as
//! `warrant eval verifier --quoted` measures it), stated beside the groundedness it labels.
//!
//! Invariant: the judge caches nothing across quotes (each quote gets an id of its own, under
//! no tenant), and its verdicts are the model's opinion, never reported as a person's.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::stats::Interval;
use crate::answer::pipeline::response::AnswerResponse;
use crate::answer::providers::verifier::{CitedText, SupportVerifier};

/// A judge's agreement with labeled claims (SciFact: `SUPPORT` against `CONTRADICT` and
/// `NOT_ENOUGH_INFO`), each claim judged against its rationale sentences.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JudgeAgreement {
    /// The labeled file.
    pub data: String,
    /// Rows judged (a seeded sample).
    pub rows: usize,
    /// Seed of the sample.
    pub seed: u64,
    /// Of the claims the judge said are supported, the share labelled `SUPPORT`.
    pub precision: Interval,
    /// Of the claims labelled `SUPPORT`, the share the judge said are supported.
    pub recall: Interval,
    /// Per label: (rows the judge said are supported, rows).
    pub passed_by_label: BTreeMap<String, (usize, usize)>,
}

/// The agreement of `judge` with a seeded sample of `rows` rows of the labeled claims at
/// `path` (`../shared/data/scifact-claims/train.jsonl`).
pub async fn judge_agreement(
    path: &Path,
    rows: usize,
    seed: u64,
    judge: &dyn SupportVerifier,
) -> Result<JudgeAgreement, String> {
    let mut labeled = super::verifier::read_rows(path)?;
    super::verifier::sample_rows(&mut labeled, rows, seed);
    let report = super::verifier::evaluate_rows(&labeled, judge, super::verifier::Evidence::Quoted).await;
    let intervals = report.intervals();
    Ok(JudgeAgreement {
        data: path.display().to_string(),
        rows: report.rows,
        seed,
        precision: intervals.precision,
        recall: intervals.recall,
        passed_by_label: report.passed_by_label,
    })
}

/// Per returned claim of `response`: whether `judge` says one of its citations' quotes supports
/// it.
pub async fn judge_claims(judge: &dyn SupportVerifier, response: &AnswerResponse) -> Vec<bool> {
    let mut judged = Vec::new();
    for claim in response.answer.iter().flat_map(|answer| &answer.claims) {
        let quotes: Vec<(crate::domain::ChunkId, &str)> = claim
            .citations
            .iter()
            .map(|citation| {
                // An id reserved for the quote (no tenant is empty): the judge caches nothing.
                (crate::domain::ChunkId::derive("", "eval-quote", 0, 0, 0, &citation.quote), citation.quote.as_str())
            })
            .collect();
        let cited: Vec<CitedText<'_>> =
            quotes.iter().map(|(chunk, text)| CitedText { chunk: *chunk, text, sentence_vectors: None }).collect();
        judged.push(judge.verify(&claim.text, &cited).await.supported);
    }
    judged
}
