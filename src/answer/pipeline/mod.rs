//! The request pipeline: scope → retrieval → selection → labeling/prompt → generation →
//! validation → (one repair) → response, under a request deadline with a budget per stage.
//!
//! Invariants: the scope is built once from the principal and used for every search; the
//! generator sees labels and neutralized text only; every returned citation was retrieved, was
//! in the final context, and is authorized under an ACL snapshot loaded after the pipeline's
//! last await (validation awaits the verifier's embedder, so the snapshot of validation time is
//! checked once more right before the response is built), whose epoch the response carries; a
//! repair prompt never contains a source revoked since; the request deadline bounds every stage,
//! validation included.
//!
//! The stages are methods of one `Run` (the request's deadline, limits and state; `run.rs`),
//! each ending the run early through `?` with an abstention or a fault; the repair rule is the
//! pure [`repair_decision`](run::repair_decision). The request actor (`crate::answer::pipeline::request_actor`) owns a run's admission slot
//! and cancellation.
//!
//! Progress: a caller may pass a channel that receives a [`StageEvent`] as each stage ends (for
//! `text/event-stream` responses); events carry stage names and durations only, never claims,
//! sources or anything not yet validated.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::mpsc;

use crate::config::{AnswerSettings, Settings};
use crate::domain::Principal;
use crate::retrieval::ReadSide;

use self::response::{
    Abstention, AnswerBody, AnswerMetrics, AnswerResponse, AnswerStatus, ChunkRef, CitationOut, ClaimOut,
    RetrieveResponse, RetrievedChunk, Withheld,
};
use super::AnswerResult;
use crate::answer::grounding::schema::OutputShape;
use crate::answer::grounding::validate::{AbstentionReason, Problem, ValidClaim};
use crate::answer::providers::generator::Generator;
use crate::answer::providers::verifier::SupportVerifier;

mod materiality;
pub mod request_actor;
pub mod response;
mod run;
mod trace;

use run::{Halt, Run};

/// A validated question.
#[derive(Clone, Debug)]
pub struct AnswerRequest {
    /// The question (trimmed, 1..=max chars).
    pub question: String,
    /// Requested context size (clamped).
    pub top_k: Option<usize>,
    /// Requested deadline (clamped).
    pub deadline_ms: Option<u64>,
}

/// Pipeline limits (a slice of [`Settings`]).
#[derive(Clone, Debug)]
pub struct PipelineSettings {
    /// Answer settings.
    pub answer: AnswerSettings,
    /// Default context size.
    pub top_k_default: usize,
    /// Cap on context size.
    pub top_k_max: usize,
    /// Context token budget.
    pub context_token_budget: usize,
    /// Most chunks per document.
    pub max_chunks_per_doc: usize,
    /// Vector-only candidates below this cosine are not evidence.
    pub min_vector_score: f32,
    /// How the generator is asked to answer: quotes chosen or written, claims written or quoted
    /// (`generator.quote_choices`, `generator.claim_text`).
    pub output: OutputShape,
    /// Anchor a quoted claim's answer in the sentence that states it when the model's own quotes
    /// do not (`generator.anchor_answers`).
    pub anchor_answers: bool,
    /// Question terms a quoted claim's sentences must hold (`generator.min_question_terms`).
    pub min_question_terms: usize,
}

impl PipelineSettings {
    /// From the settings file.
    pub fn from_settings(settings: &Settings) -> Self {
        Self {
            answer: settings.answer.clone(),
            top_k_default: settings.retrieval.top_k_default,
            top_k_max: settings.retrieval.top_k_max,
            context_token_budget: settings.retrieval.context_token_budget,
            max_chunks_per_doc: settings.retrieval.max_chunks_per_doc,
            min_vector_score: settings.answer.min_vector_score,
            output: OutputShape::from_settings(&settings.generator),
            anchor_answers: settings.generator.anchor_answers,
            min_question_terms: settings.generator.min_question_terms,
        }
    }
}

/// One stage of an answer has ended (sent to a progress channel as it happens).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StageEvent {
    /// Stage name, as in `metrics.stages_ms`.
    pub stage: &'static str,
    /// Milliseconds the stage took.
    pub ms: f64,
}

/// Receives the [`StageEvent`]s of one answer.
pub type StageEvents = mpsc::UnboundedSender<StageEvent>;

/// Records stage durations for the response and Prometheus, and reports each to the progress
/// channel, if any (a closed channel is ignored: the caller has gone).
struct StageClock {
    stages: BTreeMap<String, f64>,
    events: Option<StageEvents>,
}

impl StageClock {
    fn new(events: Option<StageEvents>) -> Self {
        Self { stages: BTreeMap::new(), events }
    }

    fn record(&mut self, stage: &'static str, started: Instant) {
        self.record_elapsed(stage, started.elapsed());
    }

    fn record_elapsed(&mut self, stage: &'static str, elapsed: Duration) {
        metrics::histogram!("warrant_stage_duration_seconds", "stage" => stage).record(elapsed.as_secs_f64());
        let ms = elapsed.as_secs_f64() * 1000.0;
        *self.stages.entry(stage.to_owned()).or_default() += ms;
        if let Some(events) = &self.events {
            let _ = events.send(StageEvent { stage, ms });
        }
    }
}

/// The claims of the generator's output that validation dropped while others stand, in its
/// order: one entry each, with the code of its first problem (a problem of a claim that stands
/// is a dropped citation, not a withheld claim).
fn withheld(claims: &[ValidClaim], problems: &[Problem]) -> Vec<Withheld> {
    let standing: std::collections::BTreeSet<usize> = claims.iter().map(|claim| claim.number).collect();
    let mut dropped: std::collections::BTreeMap<usize, &'static str> = std::collections::BTreeMap::new();
    for problem in problems.iter().filter(|problem| problem.claim > 0 && !standing.contains(&problem.claim)) {
        dropped.entry(problem.claim).or_insert(problem.rejection.code());
    }
    dropped.into_values().map(|code| Withheld { reason: code.to_owned() }).collect()
}

/// The answer pipeline with its providers.
pub struct AnswerPipeline {
    reader: Arc<dyn ReadSide>,
    generator: Arc<dyn Generator>,
    verifier: Arc<dyn SupportVerifier>,
    settings: PipelineSettings,
    /// Routes finished answers to human review (`[review]`), when on.
    review: Option<Arc<crate::review::Router>>,
}

/// Mutable per-request state.
struct RequestState {
    request_id: String,
    clock: StageClock,
    metrics: AnswerMetrics,
    acl_epoch: u64,
    /// What the run saw, for review (only while routing is on).
    trace: Option<trace::Trace>,
}

impl RequestState {
    fn reject(&mut self, problems: &[Problem]) {
        for problem in problems {
            *self.metrics.citations_rejected.entry(problem.rejection.code().to_owned()).or_default() += 1;
            metrics::counter!("warrant_citations_rejected_total", "reason" => problem.rejection.code()).increment(1);
        }
    }

    fn abstain(mut self, reason: AbstentionReason, diagnostics: Vec<String>) -> AnswerResponse {
        self.metrics.stages_ms = self.clock.stages;
        metrics::counter!("warrant_answers_total", "status" => "abstained", "reason" => reason.as_str()).increment(1);
        AnswerResponse {
            request_id: self.request_id,
            status: AnswerStatus::Abstained,
            answer: None,
            abstention: Some(Abstention { reason, diagnostics }),
            acl_epoch: self.acl_epoch,
            metrics: self.metrics,
            review: None,
        }
    }

    fn answered(mut self, claims: Vec<ValidClaim>, problems: &[Problem]) -> AnswerResponse {
        self.metrics.stages_ms = self.clock.stages;
        let withheld = withheld(&claims, problems);
        let anchored = claims.iter().filter(|claim| claim.anchored).count();
        self.metrics.claims_anchored = u32::try_from(anchored).unwrap_or(u32::MAX);
        metrics::counter!("warrant_claims_anchored_total").increment(anchored as u64);
        metrics::counter!("warrant_answers_total", "status" => "answered", "reason" => "none").increment(1);
        let claims = claims
            .into_iter()
            .map(|claim| ClaimOut {
                text: claim.text,
                citations: claim
                    .citations
                    .into_iter()
                    .map(|citation| {
                        let (quote_start, quote_end) = citation.quote_span;
                        debug_assert!(citation.chunk.start + quote_end <= citation.chunk.end);
                        let (start, end) = (citation.chunk.start + quote_start, citation.chunk.start + quote_end);
                        CitationOut {
                            chunk: ChunkRef::located(citation.chunk.as_ref(), start, end),
                            label: citation.label,
                            quote: citation.quote,
                            quote_start: citation.chunk.start + quote_start,
                            quote_end: citation.chunk.start + quote_end,
                        }
                    })
                    .collect(),
            })
            .collect();
        AnswerResponse {
            request_id: self.request_id,
            status: AnswerStatus::Answered,
            answer: Some(AnswerBody { claims, partial: !withheld.is_empty(), withheld }),
            abstention: None,
            acl_epoch: self.acl_epoch,
            metrics: self.metrics,
            review: None,
        }
    }
}

impl AnswerPipeline {
    /// A pipeline over a backend's read side and providers.
    pub fn new(
        reader: Arc<dyn ReadSide>,
        generator: Arc<dyn Generator>,
        verifier: Arc<dyn SupportVerifier>,
        settings: PipelineSettings,
    ) -> Self {
        Self { reader, generator, verifier, settings, review: None }
    }

    /// This pipeline routing its finished answers to review through `router`.
    pub fn with_review(self, router: Arc<crate::review::Router>) -> Self {
        Self { review: Some(router), ..self }
    }

    /// The backend's read side.
    pub fn reader(&self) -> &Arc<dyn ReadSide> {
        &self.reader
    }

    /// The generator.
    pub fn generator(&self) -> &Arc<dyn Generator> {
        &self.generator
    }

    /// Answers `request` for `principal`. Abstentions are `Ok`; `Err` is a server fault.
    pub async fn answer(
        &self,
        principal: &Principal,
        request: AnswerRequest,
        request_id: String,
    ) -> AnswerResult<AnswerResponse> {
        self.answer_with_progress(principal, request, request_id, None).await
    }

    /// [`Self::answer`], reporting each stage to `events` as it ends.
    pub async fn answer_with_progress(
        &self,
        principal: &Principal,
        request: AnswerRequest,
        request_id: String,
        events: Option<StageEvents>,
    ) -> AnswerResult<AnswerResponse> {
        let mut run = Run::new(self, principal, request, request_id, events);
        let outcome = run.drive().await;
        let Run { mut state, .. } = run;
        let trace = state.trace.take();
        let mut response = match outcome {
            Ok((claims, problems)) => {
                state.reject(&problems);
                state.answered(claims, &problems)
            }
            Err(Halt::Abstain(reason, diagnostics)) => state.abstain(reason, diagnostics),
            Err(Halt::Fault(error)) => return Err(error),
        };
        if let (Some(router), Some(trace)) = (&self.review, trace) {
            response.review = trace::route(router, principal, trace, &response);
        }
        Ok(response)
    }

    /// Retrieves up to `k` fused chunks for `query` inside the principal's scope (`/v1/retrieve`).
    pub async fn retrieve(
        &self,
        principal: &Principal,
        query: &str,
        k: Option<usize>,
    ) -> AnswerResult<RetrieveResponse> {
        let k = k.unwrap_or(self.settings.top_k_default).clamp(1, self.settings.top_k_max);
        let scope = self.reader.scope(principal).await?;
        let retrieved = self.reader.retrieve(&scope, query, None).await?;
        let short = retrieved.candidates.len() < k;
        let chunks = retrieved
            .candidates
            .into_iter()
            .take(k)
            .map(|candidate| RetrievedChunk {
                chunk: ChunkRef::from(candidate.chunk.as_ref()),
                text: candidate.chunk.text.clone(),
                score: candidate.score,
                retrievers: candidate.retrievers().iter().map(|retriever| retriever.as_str().to_owned()).collect(),
            })
            .collect();
        Ok(RetrieveResponse { chunks, acl_epoch: scope.epoch(), short })
    }
}
