//! Calibration of support verifiers on SciFact claim/abstract pairs (Wadden et al. 2020,
//! "Fact or Fiction: Verifying Scientific Claims"), read from a JSON-lines file such as
//! `../shared/data/scifact-claims/train.jsonl` (never copied into this repository).
//!
//! Each row pairs a claim with one abstract (its sentences joined with spaces, title left out).
//! The positive class is `SUPPORT`; `CONTRADICT` and `NOT_ENOUGH_INFO` rows must not pass. The
//! report favors precision: an unsupported claim reaching a user is the worse error.
//!
//! Quoted mode ([`Evidence::Quoted`]) judges each claim against its rationale sentences only
//! (`evidence_sentences`, what a generator quoting its source would cite; rows without any, the
//! `NOT_ENOUGH_INFO` ones, keep the whole abstract, the more permissive test for a negative).
//! Precision, recall and F1 come with 95 % percentile bootstrap intervals over rows.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;

use crate::answer::providers::lexical_verifier::{LexicalSupportVerifier, SupportSignals};
use crate::answer::providers::verifier::{CitedText, SupportVerifier};
use crate::domain::ChunkId;
use crate::embed::Embedder;

/// Reserved tenant name of the synthetic chunk ids of abstracts (real tenant names are never
/// empty, so these ids cannot equal a chunk id of any tenant).
const ABSTRACT_TENANT: &str = "";

/// One labeled (claim, abstract) pair; other fields of the file are ignored.
#[derive(Clone, Debug, Deserialize)]
pub struct ClaimRow {
    /// The claim.
    pub claim: String,
    /// `SUPPORT`, `CONTRADICT` or `NOT_ENOUGH_INFO`.
    pub label: String,
    /// The abstract's sentences.
    pub sentences: Vec<String>,
    /// Indexes of the rationale sentences (empty for `NOT_ENOUGH_INFO`).
    #[serde(default)]
    pub evidence_sentences: Vec<usize>,
}

/// What a claim is judged against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Evidence {
    /// The whole abstract.
    #[default]
    Abstract,
    /// The rationale sentences (the whole abstract for rows without any).
    Quoted,
}

impl ClaimRow {
    fn abstract_text(&self) -> String {
        self.sentences.join(" ")
    }

    /// The abstract's sentences as `evidence_sentences` counts them: the listed ones, or, when
    /// the file glues them into one string ("cells.Examples include"), that string split after
    /// `.`, `!` or `?` followed directly by an upper-case letter, `(` or `[` (an approximation of
    /// the original split).
    fn rationale_sentences(&self) -> Vec<&str> {
        if self.sentences.len() != 1 {
            return self.sentences.iter().map(String::as_str).collect();
        }
        let text = self.sentences[0].as_str();
        let mut parts = Vec::new();
        let mut start = 0;
        let mut previous = ' ';
        for (byte, character) in text.char_indices() {
            if matches!(previous, '.' | '!' | '?') && (character.is_uppercase() || matches!(character, '(' | '[')) {
                parts.push(&text[start..byte]);
                start = byte;
            }
            previous = character;
        }
        parts.push(&text[start..]);
        parts
    }

    /// The cited text under `evidence`: in quoted mode the rationale sentences, or the whole
    /// abstract when the row lists none or one beyond the recovered sentences.
    pub fn evidence_text(&self, evidence: Evidence) -> String {
        let sentences = self.rationale_sentences();
        let rationale: Option<Vec<&str>> =
            self.evidence_sentences.iter().map(|&index| sentences.get(index).copied()).collect();
        match (evidence, rationale) {
            (Evidence::Quoted, Some(rationale)) if !rationale.is_empty() => rationale.join(" "),
            _ => self.abstract_text(),
        }
    }

    /// A stable synthetic chunk id for an abstract, which is no chunk of any tenant: derived from
    /// the text alone (under [`ABSTRACT_TENANT`]), so rows sharing an abstract share sentence
    /// vectors in a verifier's cache, as citations of one chunk do in the server.
    fn abstract_id(text: &str) -> ChunkId {
        ChunkId::derive(ABSTRACT_TENANT, "scifact-abstract", 0, 0, 0, text)
    }

    fn is_support(&self) -> bool {
        self.label == "SUPPORT"
    }
}

/// Confusion counts and scores of "supported" against the `SUPPORT` label.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct VerifierReport {
    /// Rows judged.
    pub rows: usize,
    /// `SUPPORT` rows judged supported.
    pub true_positives: usize,
    /// Other rows judged supported.
    pub false_positives: usize,
    /// Other rows judged unsupported.
    pub true_negatives: usize,
    /// `SUPPORT` rows judged unsupported.
    pub false_negatives: usize,
    /// Per label: (rows judged supported, rows).
    pub passed_by_label: BTreeMap<String, (usize, usize)>,
    /// Per row: (labeled `SUPPORT`, judged supported), for the intervals.
    #[serde(skip)]
    pub outcomes: Vec<(bool, bool)>,
}

/// Precision, recall and F1 with 95 % bootstrap intervals over rows.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct ScoreIntervals {
    /// Precision.
    pub precision: super::stats::Interval,
    /// Recall.
    pub recall: super::stats::Interval,
    /// F1.
    pub f1: super::stats::Interval,
}

impl VerifierReport {
    fn record(&mut self, label: &str, support: bool, supported: bool) {
        self.rows += 1;
        self.outcomes.push((support, supported));
        match (support, supported) {
            (true, true) => self.true_positives += 1,
            (false, true) => self.false_positives += 1,
            (false, false) => self.true_negatives += 1,
            (true, false) => self.false_negatives += 1,
        }
        let entry = self.passed_by_label.entry(label.to_owned()).or_default();
        entry.0 += usize::from(supported);
        entry.1 += 1;
    }

    /// Share of passed claims that are `SUPPORT` (1 when nothing passed).
    pub fn precision(&self) -> f64 {
        let passed = self.true_positives + self.false_positives;
        if passed == 0 { 1.0 } else { self.true_positives as f64 / passed as f64 }
    }

    /// Share of `SUPPORT` claims that passed.
    pub fn recall(&self) -> f64 {
        let support = self.true_positives + self.false_negatives;
        if support == 0 { 0.0 } else { self.true_positives as f64 / support as f64 }
    }

    /// Harmonic mean of precision and recall.
    pub fn f1(&self) -> f64 {
        let (precision, recall) = (self.precision(), self.recall());
        if precision + recall == 0.0 { 0.0 } else { 2.0 * precision * recall / (precision + recall) }
    }

    /// Percentile bootstrap (rows resampled with a fixed seed) of precision, recall and F1.
    pub fn intervals(&self) -> ScoreIntervals {
        use rand::{Rng, SeedableRng};
        const SEED: u64 = 0x5eed_00f1;
        let count = self.outcomes.len();
        let mut rng = rand::rngs::SmallRng::seed_from_u64(SEED);
        let mut samples = [Vec::new(), Vec::new(), Vec::new()];
        for _ in 0..super::stats::RESAMPLES {
            let mut resampled = Self::default();
            for _ in 0..count {
                let (support, supported) = self.outcomes[rng.gen_range(0..count)];
                resampled.record("", support, supported);
            }
            for (sample, value) in samples.iter_mut().zip([resampled.precision(), resampled.recall(), resampled.f1()]) {
                sample.push(value);
            }
        }
        let interval = |mean: f64, values: &mut Vec<f64>| {
            if values.iter().all(|value| value.is_nan()) || count == 0 {
                return super::stats::Interval { mean, low: mean, high: mean };
            }
            values.sort_by(f64::total_cmp);
            let at =
                |quantile: f64| values[((quantile * (values.len() - 1) as f64).round() as usize).min(values.len() - 1)];
            super::stats::Interval { mean, low: at(0.025), high: at(0.975) }
        };
        let [precision, recall, f1] = &mut samples;
        ScoreIntervals {
            precision: interval(self.precision(), precision),
            recall: interval(self.recall(), recall),
            f1: interval(self.f1(), f1),
        }
    }
}

/// Reads the labeled rows of `path` (JSON lines).
pub fn read_rows(path: &Path) -> Result<Vec<ClaimRow>, String> {
    let text = std::fs::read_to_string(path).map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(number, line)| {
            serde_json::from_str(line).map_err(|error| format!("{}:{}: {error}", path.display(), number + 1))
        })
        .collect()
}

/// Keeps a seeded random sample of `count` of `rows` (all of them when there are no more), in
/// their file order.
pub fn sample_rows(rows: &mut Vec<ClaimRow>, count: usize, seed: u64) {
    if count >= rows.len() {
        return;
    }
    let kept = sampled(rows.len(), count, seed);
    let mut index = 0;
    rows.retain(|_| {
        index += 1;
        kept.contains(&(index - 1))
    });
}

/// Drops from `rows` the ones [`sample_rows`] with `count` and `seed` would keep, so that a
/// slice tuned on never overlaps the one measured on (`--exclude-seed`).
pub fn exclude_sample(rows: &mut Vec<ClaimRow>, count: usize, seed: u64) {
    if count >= rows.len() {
        rows.clear();
        return;
    }
    let excluded = sampled(rows.len(), count, seed);
    let mut index = 0;
    rows.retain(|_| {
        index += 1;
        !excluded.contains(&(index - 1))
    });
}

/// The `count` of `len` row indices a seeded sample keeps.
fn sampled(len: usize, count: usize, seed: u64) -> std::collections::HashSet<usize> {
    use rand::SeedableRng;
    use rand::seq::index::sample;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    sample(&mut rng, len, count).into_iter().collect()
}

/// Judges every row of `path` with `verifier` and counts the outcomes.
pub async fn evaluate(
    path: &Path,
    verifier: &dyn SupportVerifier,
    evidence: Evidence,
) -> Result<VerifierReport, String> {
    let rows = read_rows(path)?;
    Ok(evaluate_rows(&rows, verifier, evidence).await)
}

/// Judges `rows` with `verifier`, each against its `evidence`.
pub async fn evaluate_rows(rows: &[ClaimRow], verifier: &dyn SupportVerifier, evidence: Evidence) -> VerifierReport {
    let mut report = VerifierReport::default();
    for row in rows {
        let text = row.evidence_text(evidence);
        let cited = CitedText { chunk: ClaimRow::abstract_id(&text), text: &text, sentence_vectors: None };
        let verdict = verifier.verify(&row.claim, &[cited]).await;
        report.record(&row.label, row.is_support(), verdict.supported);
    }
    report
}

/// Sentence vectors kept while a sweep measures its rows (SciFact claims cite ~1,000 abstracts).
const SWEEP_SENTENCE_CACHE: usize = 100_000;

/// One point of a threshold sweep.
#[derive(Clone, Debug)]
pub struct SweepPoint {
    /// `min_coverage` used.
    pub min_coverage: f64,
    /// `min_similarity` used (meaningful only with an embedder).
    pub min_similarity: f64,
    /// Whether the polarity (negation and direction) check was on.
    pub polarity_check: bool,
    /// Outcome.
    pub report: VerifierReport,
}

/// One line: `min_cov min_sim polarity | precision recall f1 | passed SUPPORT/CONTRADICT/NEI`.
impl std::fmt::Display for SweepPoint {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let report = &self.report;
        let passed = |label: &str| report.passed_by_label.get(label).copied().unwrap_or_default().0;
        write!(
            formatter,
            "{:.2} {:.2} {} | {:.3} {:.3} {:.3} | {}/{}/{}",
            self.min_coverage,
            self.min_similarity,
            if self.polarity_check { "pol" } else { "---" },
            report.precision(),
            report.recall(),
            report.f1(),
            passed("SUPPORT"),
            passed("CONTRADICT"),
            passed("NOT_ENOUGH_INFO"),
        )
    }
}

/// Evaluates [`LexicalSupportVerifier`] over every combination of `coverages`, `similarities`
/// (ignored without an embedder) and the polarity check off/on. Signals are measured once per
/// row, so a large grid costs little more than one pass.
pub async fn sweep(
    path: &Path,
    coverages: &[f64],
    similarities: &[f64],
    embedder: Option<Arc<dyn Embedder>>,
    evidence: Evidence,
) -> Result<Vec<SweepPoint>, String> {
    let rows = read_rows(path)?;
    let has_embedder = embedder.is_some();
    // Rows citing the same abstract share its sentence vectors.
    let measuring = LexicalSupportVerifier::new(0.0, -1.0, embedder.clone()).with_sentence_cache(SWEEP_SENTENCE_CACHE);
    let mut measured: Vec<(&ClaimRow, SupportSignals)> = Vec::with_capacity(rows.len());
    for row in &rows {
        let text = row.evidence_text(evidence);
        let cited = CitedText { chunk: ClaimRow::abstract_id(&text), text: &text, sentence_vectors: None };
        measured.push((row, measuring.signals(&row.claim, &[cited]).await));
    }
    let similarities = if has_embedder { similarities.to_vec() } else { vec![-1.0] };
    let mut points = Vec::new();
    for &min_coverage in coverages {
        for &min_similarity in &similarities {
            for polarity_check in [false, true] {
                let verifier = LexicalSupportVerifier::new(min_coverage, min_similarity, embedder.clone())
                    .with_polarity_check(polarity_check);
                let mut report = VerifierReport::default();
                for (row, signals) in &measured {
                    report.record(&row.label, row.is_support(), verifier.decide(signals));
                }
                points.push(SweepPoint { min_coverage, min_similarity, polarity_check, report });
            }
        }
    }
    Ok(points)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use futures::executor::block_on;

    use super::*;
    use crate::embed::HashedEmbedder;

    const FIXTURE: &str = r#"{"claim": "Aspirin lowers fever in adults.", "label": "SUPPORT", "sentences": ["We studied adults.", "Aspirin lowered fever in adults."]}
{"claim": "Vitamin C cures the common cold.", "label": "NOT_ENOUGH_INFO", "sentences": ["We measured sleep in mice."]}
{"claim": "Aspirin does not lower fever.", "label": "CONTRADICT", "sentences": ["Aspirin lowered fever in adults."]}
"#;

    fn fixture() -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().expect("temp file");
        file.write_all(FIXTURE.as_bytes()).expect("write fixture");
        file
    }

    #[test]
    fn a_sample_is_seeded_keeps_file_order_and_never_grows() {
        let file = fixture();
        let rows = read_rows(file.path()).expect("rows");
        let claims = |rows: &[ClaimRow]| rows.iter().map(|row| row.claim.clone()).collect::<Vec<_>>();
        let sampled = |count: usize, seed: u64| {
            let mut rows = rows.clone();
            sample_rows(&mut rows, count, seed);
            claims(&rows)
        };
        for seed in 0..8 {
            let two = sampled(2, seed);
            assert_eq!(two, sampled(2, seed), "seeded");
            assert_eq!(two.len(), 2);
            let positions: Vec<usize> =
                two.iter().map(|claim| claims(&rows).iter().position(|c| c == claim).unwrap()).collect();
            assert!(positions[0] < positions[1], "file order: {positions:?}");
        }
        assert_eq!(sampled(3, 1), claims(&rows));
        assert_eq!(sampled(10, 1), claims(&rows));
        assert!(sampled(0, 1).is_empty());
    }

    #[test]
    fn an_excluded_sample_is_exactly_the_rest() {
        let file = fixture();
        let rows = read_rows(file.path()).expect("rows");
        for seed in 0..8 {
            let (mut kept, mut rest) = (rows.clone(), rows.clone());
            sample_rows(&mut kept, 1, seed);
            exclude_sample(&mut rest, 1, seed);
            assert_eq!(kept.len() + rest.len(), rows.len());
            assert!(rest.iter().all(|row| kept.iter().all(|kept| kept.claim != row.claim)), "disjoint");
        }
        let mut all = rows.clone();
        exclude_sample(&mut all, 3, 1);
        assert!(all.is_empty(), "a sample of every row leaves none");
    }

    #[test]
    fn evaluates_a_small_fixture() {
        let file = fixture();
        let verifier = LexicalSupportVerifier::new(0.6, 0.35, None);
        let report = block_on(evaluate(file.path(), &verifier, Evidence::Abstract)).expect("report");
        assert_eq!(report.rows, 3);
        assert_eq!((report.true_positives, report.false_positives), (1, 0));
        assert_eq!(report.precision(), 1.0);
        assert_eq!(report.recall(), 1.0);
        assert_eq!(report.passed_by_label["CONTRADICT"], (0, 1));
    }

    #[test]
    fn quoted_evidence_is_the_rationale_and_intervals_bracket_the_scores() {
        let rows = read_rows(fixture().path()).expect("rows");
        assert_eq!(rows[0].evidence_text(Evidence::Abstract), "We studied adults. Aspirin lowered fever in adults.");
        // The fixture's first row names no rationale: quoted mode keeps the abstract.
        assert_eq!(rows[0].evidence_text(Evidence::Quoted), rows[0].evidence_text(Evidence::Abstract));
        let with_rationale = ClaimRow { evidence_sentences: vec![1], ..rows[0].clone() };
        assert_eq!(with_rationale.evidence_text(Evidence::Quoted), "Aspirin lowered fever in adults.");
        let out_of_range = ClaimRow { evidence_sentences: vec![1, 7], ..rows[0].clone() };
        assert_eq!(out_of_range.evidence_text(Evidence::Quoted), out_of_range.evidence_text(Evidence::Abstract));
        let glued = ClaimRow {
            sentences: vec!["We studied 3.5 mg doses in mice.Aspirin lowered fever.(See methods.) Done".into()],
            evidence_sentences: vec![1, 2],
            ..rows[0].clone()
        };
        assert_eq!(glued.evidence_text(Evidence::Quoted), "Aspirin lowered fever. (See methods.) Done");
        let mut report = VerifierReport::default();
        for index in 0..200 {
            report.record("X", index % 2 == 0, index % 3 != 0);
        }
        let intervals = report.intervals();
        for (interval, value) in [
            (intervals.precision, report.precision()),
            (intervals.recall, report.recall()),
            (intervals.f1, report.f1()),
        ] {
            assert_eq!(interval.mean, value);
            assert!(interval.low < value && value < interval.high, "{interval:?}");
        }
        assert_eq!(report.intervals(), intervals, "seeded");
    }

    #[test]
    fn sweep_covers_the_grid() {
        let file = fixture();
        let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(64));
        let points = block_on(sweep(file.path(), &[0.5, 0.9], &[0.1, 0.2, 0.3], Some(embedder), Evidence::Abstract))
            .expect("sweep");
        assert_eq!(points.len(), 2 * 3 * 2);
        let lexical =
            block_on(sweep(file.path(), &[0.5, 0.9], &[0.1, 0.2, 0.3], None, Evidence::Abstract)).expect("sweep");
        assert_eq!(lexical.len(), 2 * 2);
        assert!(
            block_on(sweep(Path::new("/nonexistent/claims.jsonl"), &[0.5], &[0.1], None, Evidence::Abstract)).is_err()
        );
    }

    /// Prints the calibration table on the shared SciFact claims (not part of the repository).
    #[test]
    #[ignore = "reads ../shared/data/scifact-claims/train.jsonl"]
    fn scifact_calibration_report() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/scifact-claims/train.jsonl");
        let path =
            if path.exists() { path } else { Path::new("/work/shared/data/scifact-claims/train.jsonl").to_owned() };
        let coverages: Vec<f64> = (10..=20).map(|step| f64::from(step) * 0.05).collect();
        let similarities: Vec<f64> = (0..=5).map(|step| f64::from(step) * 0.1).collect();
        for (name, embedder) in
            [("lexical", None), ("lexical+hashed-384", Some(Arc::new(HashedEmbedder::new(384)) as Arc<dyn Embedder>))]
        {
            let started = std::time::Instant::now();
            let points =
                block_on(sweep(&path, &coverages, &similarities, embedder, Evidence::Abstract)).expect("sweep");
            println!("\n{name}: measured and swept in {:?}", started.elapsed());
            println!("\n{name}: min_cov min_sim polarity | P R F1 | passed SUPPORT/CONTRADICT/NEI");
            for point in points {
                println!("{name} {point}");
            }
        }
    }
}
