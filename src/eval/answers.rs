//! Answer quality on labeled collections (`warrant eval answers`): every sampled question is asked
//! by a principal of its own tenant through the same [`AnswerPipeline`] that serves `/v1/answer`
//! (configured generator, verifier, deadlines and all), and the responses are scored:
//! - answer rate: answered over asked (every asked question has a positive judgment, so it is
//!   answerable from the corpus), abstentions by reason, and partial answers (claims withheld by
//!   validation while others stand);
//! - citation precision against the qrels: cited documents judged relevant over all citations
//!   (micro), and the share of answers citing at least one relevant document;
//! - correctness where the dataset carries gold answers (`answers.jsonl`, `{"_id", "answers"}`):
//!   an answer is correct when a gold answer, normalized as in the SQuAD v1.1 evaluation script
//!   (lowercase, punctuation and articles removed, whitespace collapsed), occurs in a claim;
//! - quote anchoring: every returned citation's quote must lie inside its chunk
//!   (`quote_start..quote_end` within `start..end`); violations are counted and must be 0;
//! - stage latencies (p50/p95, milliseconds) as the pipeline records them;
//! - where the dataset carries gold answers, whether the first attempt's sources (what the
//!   generator was shown, recorded by [`ContextRecorder`] around the configured generator) hold
//!   one, so a run tells questions lost to retrieval and selection (no gold answer in the
//!   context) from questions the generator and the checks lost (one was there), and the answer
//!   rate and correctness on the latter.
//!
//! - with a judge ([`AnswersOptions::judge`], `--judge`): judge-labelled groundedness, the share
//!   of returned claims that a separate model, asked about each of the claim's quoted spans in
//!   turn, says one of them supports ([`JudgeSupportVerifier::model_only`]: no lexical stage, no
//!   floor; [`super::judge`]). It is the model's opinion, not a person's:
//!   [`super::judge::judge_agreement`] states beside it how that model agrees with SciFact's claim
//!   labels (precision and recall of its "yes" against `SUPPORT`, each claim against its
//!   rationale sentences, as `warrant eval verifier --quoted`).
//!
//! Rates come with 95 % percentile bootstrap intervals over questions ([`super::stats`]);
//! judge-labelled groundedness over returned claims.
//!
//! [`JudgeSupportVerifier::model_only`]: crate::answer::providers::judge_verifier::JudgeSupportVerifier::model_only
//! Questions are sampled with a fixed seed, so a report is reproducible: one seeded shuffle of
//! the judged questions, of which a run asks the window `[offset, offset + n)`. Windows of one
//! seed never overlap, so a tuning slice (`--n 30`) and a held-out slice (`--offset 100 --n 100`)
//! are disjoint by construction. With a checkpoint file, the scores of every question asked so
//! far are rewritten (temporary file, then rename) after each question, so a run stopped midway
//! leaves a complete prefix behind.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use async_trait::async_trait;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use super::dataset::{Dataset, DatasetResult, IngestSummary, Progress, ingest, principal_of, read_jsonl};
use super::judge::{JudgeAgreement, judge_claims};
use super::retrieval::{Checkpointing, EvalError, INGEST_BATCH, save};
use super::stats::{Interval, mean_interval};
use crate::answer::pipeline::response::{AnswerResponse, AnswerStatus};
use crate::answer::pipeline::{AnswerPipeline, AnswerRequest, PipelineSettings};
use crate::answer::providers::generator::{GenerationRequest, Generator, GeneratorError};
use crate::answer::providers::verifier::SupportVerifier;
use crate::config::Settings;
use crate::embedded::{Engine, EngineParams};

/// Gold answers of one question (a line of `answers.jsonl`).
#[derive(Clone, Debug, Deserialize)]
pub struct GoldAnswers {
    /// Query id.
    #[serde(rename = "_id")]
    pub id: String,
    /// Acceptable answers.
    pub answers: Vec<String>,
}

/// Reads `answers.jsonl` into query id → gold answers.
pub fn read_gold(path: &Path) -> DatasetResult<HashMap<String, Vec<String>>> {
    Ok(read_jsonl::<GoldAnswers>(path)?.into_iter().map(|gold| (gold.id, gold.answers)).collect())
}

/// SQuAD v1.1 answer normalization: lowercase, punctuation removed, articles (`a`, `an`, `the`)
/// removed, whitespace collapsed to single spaces.
pub fn squad_normalize(text: &str) -> String {
    // The script deletes punctuation characters (no space in their place): "U.S." is "us".
    let deleted: String = text.to_lowercase().chars().filter(|character| !character.is_ascii_punctuation()).collect();
    deleted.split_whitespace().filter(|word| !matches!(*word, "a" | "an" | "the")).collect::<Vec<_>>().join(" ")
}

/// Whether some normalized gold answer occurs, on word boundaries, in the normalized `claim`.
pub fn contains_gold(claim: &str, gold: &[String]) -> bool {
    let claim = format!(" {} ", squad_normalize(claim));
    gold.iter()
        .map(|answer| squad_normalize(answer))
        .filter(|answer| !answer.is_empty())
        .any(|answer| claim.contains(&format!(" {answer} ")))
}

/// The scores of one question.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QuestionScores {
    /// Query id.
    pub query_id: String,
    /// `answered` or `abstained`.
    pub status: AnswerStatus,
    /// Abstention reason, when abstained.
    pub abstention: Option<String>,
    /// Whether the answer is partial: claims the generator wrote were withheld by validation
    /// (`answer.partial`; false when abstained).
    pub partial: bool,
    /// Claims returned.
    pub claims: usize,
    /// Citations returned.
    pub citations: usize,
    /// Citations whose document is judged relevant.
    pub relevant_citations: usize,
    /// The claims' texts, in order (what correctness is judged on).
    pub claim_texts: Vec<String>,
    /// The cited documents, one per citation, in order.
    pub cited_docs: Vec<String>,
    /// The cited labels (`S1` is the best-ranked source of the final context), one per citation.
    pub cited_labels: Vec<String>,
    /// Whether a gold answer occurs in a claim (`None` without gold answers or when abstained).
    pub correct: Option<bool>,
    /// Citations whose quote is not inside its chunk (must be 0).
    pub unanchored_quotes: usize,
    /// Claims whose citation the server chose (`generator.anchor_answers`).
    pub claims_anchored: u32,
    /// Rejections by code during the request.
    pub citations_rejected: BTreeMap<String, u32>,
    /// Milliseconds per stage.
    pub stages_ms: BTreeMap<String, f64>,
    /// Milliseconds for the whole request, measured around the pipeline call.
    pub total_ms: f64,
    /// Whether the first attempt's sources hold a gold answer (`None` without gold answers or
    /// without a [`ContextRecorder`]; `Some(false)` when no generator was called).
    pub context_holds_gold: Option<bool>,
    /// Which sources of the first attempt hold a gold answer, by label number (1 for `S1`).
    pub gold_sources: Vec<usize>,
    /// Per returned claim, in order: whether the judge says its quotes support it (empty
    /// without a judge).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub judge_supported: Vec<bool>,
}

impl QuestionScores {
    /// Scores `response` against the question's judgments and gold answers.
    pub fn of(
        query_id: &str,
        response: &AnswerResponse,
        judged: &HashMap<String, u32>,
        gold: Option<&[String]>,
        total_ms: f64,
    ) -> Self {
        let claims = response.answer.as_ref().map(|answer| answer.claims.as_slice()).unwrap_or_default();
        let citations: Vec<_> = claims.iter().flat_map(|claim| &claim.citations).collect();
        let relevant_citations = citations
            .iter()
            .filter(|citation| judged.get(&citation.chunk.doc_id).is_some_and(|&relevance| relevance > 0))
            .count();
        let unanchored_quotes = citations
            .iter()
            .filter(|citation| {
                let (start, end) = (citation.chunk.start, citation.chunk.end);
                !(start <= citation.quote_start
                    && citation.quote_start < citation.quote_end
                    && citation.quote_end <= end
                    && citation.quote.chars().count() == citation.quote_end - citation.quote_start)
            })
            .count();
        let correct = match (response.status, gold) {
            (AnswerStatus::Answered, Some(gold)) => Some(claims.iter().any(|claim| contains_gold(&claim.text, gold))),
            _ => None,
        };
        Self {
            query_id: query_id.to_owned(),
            status: response.status,
            abstention: response.abstention.as_ref().map(|abstention| abstention.reason.as_str().to_owned()),
            partial: response.answer.as_ref().is_some_and(|answer| answer.partial),
            claims: claims.len(),
            citations: citations.len(),
            relevant_citations,
            claim_texts: claims.iter().map(|claim| claim.text.clone()).collect(),
            cited_docs: citations.iter().map(|citation| citation.chunk.doc_id.clone()).collect(),
            cited_labels: citations.iter().map(|citation| citation.label.clone()).collect(),
            correct,
            unanchored_quotes,
            claims_anchored: response.metrics.claims_anchored,
            citations_rejected: response.metrics.citations_rejected.clone(),
            stages_ms: response.metrics.stages_ms.clone(),
            total_ms,
            context_holds_gold: None,
            gold_sources: Vec::new(),
            judge_supported: Vec::new(),
        }
    }

    /// These scores with [`Self::context_holds_gold`] set from the first attempt's source texts
    /// (`None`: no generator call), when the question has gold answers.
    pub fn with_context(mut self, sources: Option<&[String]>, gold: Option<&[String]>) -> Self {
        let sources = sources.unwrap_or_default();
        self.gold_sources = gold
            .map(|gold| {
                let holding = sources.iter().enumerate().filter(|(_, text)| contains_gold(text, gold));
                holding.map(|(index, _)| index + 1).collect()
            })
            .unwrap_or_default();
        self.context_holds_gold = gold.map(|_| !self.gold_sources.is_empty());
        self
    }

    fn answered(&self) -> bool {
        self.status == AnswerStatus::Answered
    }
}

/// p50 and p95 of a latency, milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of `values` (zeros when empty).
    pub fn of(values: &[f64]) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let rank =
            |quantile: f64| sorted[((quantile * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
        Self { p50: rank(0.5), p95: rank(0.95) }
    }
}

/// The report of `warrant eval answers`.
#[derive(Clone, Debug, Serialize)]
pub struct AnswersReport {
    /// Dataset name.
    pub dataset: String,
    /// Generator name.
    pub generator: String,
    /// Embedder name.
    pub embedder: String,
    /// Sampling seed.
    pub seed: u64,
    /// Questions of the seeded shuffle skipped before the window asked.
    pub offset: usize,
    /// Questions asked (all judged, so answerable).
    pub questions: usize,
    /// Answered over asked, with its interval.
    pub answer_rate: Interval,
    /// Abstentions by reason.
    pub abstentions: BTreeMap<String, usize>,
    /// Answered questions whose answer is partial (claims withheld by validation).
    pub partial_answers: usize,
    /// Citations returned.
    pub citations: usize,
    /// Relevant citations over citations (micro average).
    pub citation_precision: f64,
    /// Per answered question, relevant citations over its citations, averaged, with interval.
    pub citation_precision_per_answer: Interval,
    /// Share of answers citing at least one relevant document, with interval.
    pub answers_citing_relevant: Interval,
    /// Share of answers holding a gold answer (questions with gold answers), with interval.
    pub correct_of_answered: Option<Interval>,
    /// Share of all questions answered correctly, with interval.
    pub correct_of_questions: Option<Interval>,
    /// Share of questions whose first attempt's sources hold a gold answer, with interval.
    pub context_holds_gold: Option<Interval>,
    /// Of the questions whose context holds a gold answer: answered, with interval.
    pub answer_rate_given_gold_in_context: Option<Interval>,
    /// Of the questions whose context holds a gold answer: answered correctly, with interval.
    pub correct_given_gold_in_context: Option<Interval>,
    /// Returned citations whose quote lies outside its chunk (must be 0).
    pub unanchored_quotes: usize,
    /// Claims whose citation the server chose, summed (`generator.anchor_answers`).
    pub claims_anchored: u32,
    /// Rejected citations and claims by code, summed.
    pub citations_rejected: BTreeMap<String, u32>,
    /// p50/p95 per stage and `total`, milliseconds.
    pub latency_ms: BTreeMap<String, Percentiles>,
    /// The judge of `--judge`, when there was one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judge: Option<String>,
    /// Returned claims the judge was asked about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judged_claims: Option<usize>,
    /// Judge-labelled groundedness: returned claims the judge says their quotes support, with
    /// its interval over claims (a model's labels, not people's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judge_labelled_groundedness: Option<Interval>,
    /// The judge's own agreement with labeled claims, to read beside the figure above.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judge_agreement: Option<JudgeAgreement>,
    /// Per-question scores (written by `--per-query`).
    #[serde(skip)]
    pub per_query: Vec<QuestionScores>,
    /// Seconds spent asking.
    pub query_seconds: f64,
}

fn rate(flags: impl Iterator<Item = bool>) -> Interval {
    let values: Vec<f64> = flags.map(|flag| f64::from(u8::from(flag))).collect();
    mean_interval(&values)
}

impl AnswersReport {
    /// Aggregates per-question scores.
    pub fn of(dataset: &str, generator: &str, embedder: &str, seed: u64, per_query: Vec<QuestionScores>) -> Self {
        let answered: Vec<&QuestionScores> = per_query.iter().filter(|scores| scores.answered()).collect();
        let mut abstentions = BTreeMap::new();
        for reason in per_query.iter().filter_map(|scores| scores.abstention.clone()) {
            *abstentions.entry(reason).or_default() += 1;
        }
        let citations: usize = answered.iter().map(|scores| scores.citations).sum();
        let relevant: usize = answered.iter().map(|scores| scores.relevant_citations).sum();
        let per_answer: Vec<f64> = answered
            .iter()
            .filter(|scores| scores.citations > 0)
            .map(|scores| scores.relevant_citations as f64 / scores.citations as f64)
            .collect();
        let graded: Vec<bool> = answered.iter().filter_map(|scores| scores.correct).collect();
        let with_context: Vec<&QuestionScores> =
            per_query.iter().filter(|scores| scores.context_holds_gold.is_some()).collect();
        let gold_in_context: Vec<&QuestionScores> =
            with_context.iter().copied().filter(|scores| scores.context_holds_gold == Some(true)).collect();
        let has_gold = !graded.is_empty();
        let mut citations_rejected = BTreeMap::new();
        let mut stages: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for scores in &per_query {
            for (code, count) in &scores.citations_rejected {
                *citations_rejected.entry(code.clone()).or_default() += count;
            }
            for (stage, milliseconds) in &scores.stages_ms {
                stages.entry(stage.clone()).or_default().push(*milliseconds);
            }
            stages.entry("total".to_owned()).or_default().push(scores.total_ms);
        }
        Self {
            dataset: dataset.to_owned(),
            generator: generator.to_owned(),
            embedder: embedder.to_owned(),
            seed,
            offset: 0,
            questions: per_query.len(),
            answer_rate: rate(per_query.iter().map(|scores| scores.answered())),
            abstentions,
            partial_answers: answered.iter().filter(|scores| scores.partial).count(),
            citations,
            citation_precision: if citations == 0 { 0.0 } else { relevant as f64 / citations as f64 },
            citation_precision_per_answer: mean_interval(&per_answer),
            answers_citing_relevant: rate(answered.iter().map(|scores| scores.relevant_citations > 0)),
            correct_of_answered: has_gold.then(|| rate(graded.iter().copied())),
            correct_of_questions: has_gold.then(|| rate(per_query.iter().map(|scores| scores.correct == Some(true)))),
            context_holds_gold: (!with_context.is_empty())
                .then(|| rate(with_context.iter().map(|scores| scores.context_holds_gold == Some(true)))),
            answer_rate_given_gold_in_context: (!gold_in_context.is_empty())
                .then(|| rate(gold_in_context.iter().map(|scores| scores.answered()))),
            correct_given_gold_in_context: (!gold_in_context.is_empty())
                .then(|| rate(gold_in_context.iter().map(|scores| scores.correct == Some(true)))),
            unanchored_quotes: per_query.iter().map(|scores| scores.unanchored_quotes).sum(),
            claims_anchored: per_query.iter().map(|scores| scores.claims_anchored).sum(),
            citations_rejected,
            latency_ms: stages.into_iter().map(|(stage, values)| (stage, Percentiles::of(&values))).collect(),
            judge: None,
            judged_claims: None,
            judge_labelled_groundedness: None,
            judge_agreement: None,
            per_query,
            query_seconds: 0.0,
        }
    }

    /// This report with the judge's figures: `judge` names it, and the claims it judged are in
    /// the per-question scores.
    pub fn with_judge(mut self, judge: &str) -> Self {
        let judged: Vec<bool> =
            self.per_query.iter().flat_map(|scores| scores.judge_supported.iter().copied()).collect();
        self.judge = Some(judge.to_owned());
        self.judged_claims = Some(judged.len());
        self.judge_labelled_groundedness = (!judged.is_empty()).then(|| rate(judged.into_iter()));
        self
    }
}

/// Options of `warrant eval answers`.
#[derive(Clone)]
pub struct AnswersOptions {
    /// Questions to ask (sampled from the judged ones; all when `None`).
    pub questions: Option<usize>,
    /// Sampling seed.
    pub seed: u64,
    /// Gold answers (`answers.jsonl`), when the dataset has them.
    pub gold: HashMap<String, Vec<String>>,
    /// Questions of the seeded shuffle skipped before the window asked.
    pub offset: usize,
    /// Per-question scores rewritten after every question (JSON Lines), when given.
    pub checkpoint: Option<PathBuf>,
    /// Folder of the on-disk embedding cache (`None`: no cache), as in `eval retrieval`.
    pub cache_dir: Option<PathBuf>,
    /// The judge of every returned claim (`--judge`), when one is asked for.
    pub judge: Option<Arc<dyn SupportVerifier>>,
}

impl AnswersOptions {
    /// The first `questions` of the shuffle with `seed` (all when `None`), no gold answers, no
    /// checkpoint.
    pub fn new(questions: Option<usize>, seed: u64) -> Self {
        Self { questions, seed, gold: HashMap::new(), offset: 0, checkpoint: None, cache_dir: None, judge: None }
    }
}

/// The judged queries of `dataset` in the order of one shuffle with `seed`, from position
/// `offset` on, at most `questions` of them (all the rest when `None`).
pub fn sample_queries(
    dataset: &Dataset,
    questions: Option<usize>,
    seed: u64,
    offset: usize,
) -> Vec<&super::dataset::EvalQuery> {
    let mut judged: Vec<_> = dataset
        .queries
        .iter()
        .filter(|query| dataset.qrels.get(&query.id).is_some_and(|judged| !judged.is_empty()))
        .collect();
    judged.shuffle(&mut SmallRng::seed_from_u64(seed));
    judged.into_iter().skip(offset).take(questions.unwrap_or(usize::MAX)).collect()
}

/// Writes `scores` as JSON Lines to `path` through a temporary file renamed over it, so a reader
/// (or a run stopped while writing) sees the previous complete file or the new one.
pub fn write_scores<T: Serialize>(path: &Path, scores: &[T]) -> std::io::Result<()> {
    let mut lines = String::new();
    for score in scores {
        lines.push_str(&serde_json::to_string(score).map_err(std::io::Error::other)?);
        lines.push('\n');
    }
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    std::fs::write(&temporary, lines)?;
    std::fs::rename(&temporary, path)
}

/// A generator wrapper for evaluation: passes every call to the generator it wraps and keeps
/// the source texts of the first call since the last [`ContextRecorder::take`] (the first
/// attempt's context, as the model saw it). Questions are asked one at a time, so a take after
/// each question reads that question's context.
pub struct ContextRecorder {
    inner: Arc<dyn Generator>,
    first: Mutex<Option<Vec<String>>>,
}

impl ContextRecorder {
    /// Records around `inner`.
    pub fn new(inner: Arc<dyn Generator>) -> Self {
        Self { inner, first: Mutex::new(None) }
    }

    /// The first call's source texts since the last take (`None`: no call).
    pub fn take(&self) -> Option<Vec<String>> {
        self.first.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

#[async_trait]
impl Generator for ContextRecorder {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn generate(&self, request: &GenerationRequest) -> Result<String, GeneratorError> {
        self.first
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(|| request.sources.iter().map(|source| source.text.clone()).collect());
        self.inner.generate(request).await
    }
}

/// Asks the sampled questions of `dataset` (already ingested into the pipeline's engine).
pub async fn evaluate(
    pipeline: &AnswerPipeline,
    dataset: &Dataset,
    options: &AnswersOptions,
) -> Result<AnswersReport, EvalError> {
    evaluate_recording(pipeline, dataset, options, None).await
}

/// [`evaluate`], scoring each question's context too when `recorder` is the pipeline's
/// generator.
pub async fn evaluate_recording(
    pipeline: &AnswerPipeline,
    dataset: &Dataset,
    options: &AnswersOptions,
    recorder: Option<&ContextRecorder>,
) -> Result<AnswersReport, EvalError> {
    let started = Instant::now();
    let mut per_query = Vec::new();
    for query in sample_queries(dataset, options.questions, options.seed, options.offset) {
        let principal = principal_of(query.tenant());
        let request = AnswerRequest { question: query.text.clone(), top_k: None, deadline_ms: None };
        let asked = Instant::now();
        let response = pipeline
            .answer(&principal, request, format!("eval-{}", query.id))
            .await
            .map_err(|error| EvalError::Answer(error.to_string()))?;
        let total_ms = asked.elapsed().as_secs_f64() * 1000.0;
        let gold = options.gold.get(&query.id).map(Vec::as_slice);
        let mut scores = QuestionScores::of(&query.id, &response, &dataset.qrels[&query.id], gold, total_ms);
        if let Some(recorder) = recorder {
            scores = scores.with_context(recorder.take().as_deref(), gold);
        }
        if let Some(judge) = &options.judge {
            scores.judge_supported = judge_claims(judge.as_ref(), &response).await;
        }
        per_query.push(scores);
        if let Some(path) = &options.checkpoint {
            write_scores(path, &per_query)
                .map_err(|error| EvalError::Answer(format!("cannot write {}: {error}", path.display())))?;
        }
    }
    let mut report = AnswersReport::of(
        &dataset.name,
        pipeline.generator().name(),
        pipeline.reader().embedder_name(),
        options.seed,
        per_query,
    );
    if let Some(judge) = &options.judge {
        report = report.with_judge(judge.name());
    }
    report.offset = options.offset;
    report.query_seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The whole `warrant eval answers` run: the configured providers, an engine with the configured
/// parameters, the corpus ingested, the sampled questions asked. Must run inside an actix System.
pub async fn run(
    settings: &Settings,
    dataset: &Dataset,
    options: &AnswersOptions,
    progress: &dyn Progress,
) -> Result<(IngestSummary, AnswersReport), EvalError> {
    let providers = crate::providers::from_settings(settings).await?;
    let (embedder, cache) = super::retrieval::cached(providers.embedder, dataset, options.cache_dir.as_deref())?;
    let params = EngineParams::from_settings(settings, embedder.dimension());
    let engine = Engine::start(params, embedder)?;
    let checkpointing = Checkpointing::new(progress, cache.as_deref());
    let summary = ingest(&engine, dataset, INGEST_BATCH, &checkpointing).await?;
    save(cache.as_deref())?;
    let recorder = Arc::new(ContextRecorder::new(providers.generator));
    let pipeline = AnswerPipeline::new(
        engine,
        Arc::clone(&recorder) as Arc<dyn Generator>,
        providers.verifier,
        PipelineSettings::from_settings(settings),
    );
    let report = evaluate_recording(&pipeline, dataset, options, Some(&recorder)).await?;
    save(cache.as_deref())?;
    Ok((summary, report))
}

#[cfg(test)]
mod tests;
