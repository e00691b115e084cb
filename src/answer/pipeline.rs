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
//! Admission: the HTTP layer hands each [`Answer`] its slot of `server.max_in_flight` (an
//! [`Admission`]) and the actor keeps it inside the future that does the work, so the slot is
//! free only when the work has ended, however the caller fared. When the caller goes away (its
//! HTTP handler future is dropped, e.g. on a connection reset), the work future is dropped
//! (generator call included) and its slot freed then: an abandoned request neither keeps running
//! nor lets a new one run in its place before it stopped. Work already handed to other threads
//! (a shard search, an embedding batch) finishes there; it is bounded by those pools.
//!
//! Progress: a caller may pass a channel that receives a [`StageEvent`] as each stage ends (for
//! `text/event-stream` responses); events carry stage names and durations only, never claims,
//! sources or anything not yet validated.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Actor, Context, Handler, Message, ResponseFuture};
use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot};

use crate::config::{AnswerSettings, Settings};
use crate::domain::{Chunk, Principal};
use crate::retrieval::{Candidate, Engine, SelectionLimits, select_context};

use super::generator::{GenerationRequest, Generator, GeneratorError, SourceForModel, output_schema};
use super::prompt::{build_prompt, render_user};
use super::response::{
    Abstention, AnswerBody, AnswerMetrics, AnswerResponse, AnswerStatus, ChunkRef, CitationOut, ClaimOut,
    RetrieveResponse, RetrievedChunk, VectorSearchOut,
};
use super::validate::{
    AbstentionReason, Problem, ValidClaim, ValidationContext, Verdict, recheck_authorization, repair_instruction,
    validate,
};
use super::verifier::SupportVerifier;
use super::{AnswerError, AnswerResult};

/// Time kept back from the generation stage for validation and response building.
const VALIDATION_RESERVE: Duration = Duration::from_millis(25);

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
        let elapsed = started.elapsed();
        metrics::histogram!("warrant_stage_duration_seconds", "stage" => stage).record(elapsed.as_secs_f64());
        let ms = elapsed.as_secs_f64() * 1000.0;
        *self.stages.entry(stage.to_owned()).or_default() += ms;
        if let Some(events) = &self.events {
            let _ = events.send(StageEvent { stage, ms });
        }
    }
}

/// The answer pipeline with its providers.
pub struct AnswerPipeline {
    engine: Arc<Engine>,
    generator: Arc<dyn Generator>,
    verifier: Arc<dyn SupportVerifier>,
    settings: PipelineSettings,
}

/// Mutable per-request state.
struct RequestState {
    request_id: String,
    clock: StageClock,
    metrics: AnswerMetrics,
    acl_epoch: u64,
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
        }
    }

    fn answered(mut self, claims: Vec<ValidClaim>) -> AnswerResponse {
        self.metrics.stages_ms = self.clock.stages;
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
                        CitationOut {
                            chunk: ChunkRef::from(citation.chunk.as_ref()),
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
            answer: Some(AnswerBody { claims }),
            abstention: None,
            acl_epoch: self.acl_epoch,
            metrics: self.metrics,
        }
    }
}

fn diagnostics(problems: &[Problem]) -> Vec<String> {
    let mut codes: Vec<String> = problems.iter().map(|problem| problem.rejection.code().to_owned()).collect();
    codes.sort();
    codes.dedup();
    codes
}

impl AnswerPipeline {
    /// A pipeline over an engine and providers.
    pub fn new(
        engine: Arc<Engine>,
        generator: Arc<dyn Generator>,
        verifier: Arc<dyn SupportVerifier>,
        settings: PipelineSettings,
    ) -> Self {
        Self { engine, generator, verifier, settings }
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
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
        let started = Instant::now();
        let answer_settings = &self.settings.answer;
        let deadline_ms =
            request.deadline_ms.unwrap_or(answer_settings.deadline_ms).clamp(1, answer_settings.max_deadline_ms);
        let deadline = started + Duration::from_millis(deadline_ms);
        let top_k = request.top_k.unwrap_or(self.settings.top_k_default).clamp(1, self.settings.top_k_max);
        let mut state = RequestState {
            request_id,
            clock: StageClock::new(events),
            metrics: AnswerMetrics::default(),
            acl_epoch: 0,
        };

        let stage = Instant::now();
        let scope = self.engine.scope(principal);
        state.acl_epoch = scope.epoch();
        state.clock.record("scope", stage);

        let stage = Instant::now();
        let budget = deadline
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(answer_settings.retrieval_budget_ms));
        let retrieved = match tokio::time::timeout(budget, self.engine.retrieve(&scope, &request.question)).await {
            Err(_) => {
                state.clock.record("retrieval", stage);
                return Ok(state.abstain(AbstentionReason::DeadlineExceeded, vec!["retrieval_timeout".into()]));
            }
            Ok(result) => result?,
        };
        state.clock.record("retrieval", stage);
        state.metrics.retrieved = retrieved.candidates.len();

        let stage = Instant::now();
        let evidence: Vec<Candidate> = retrieved
            .candidates
            .iter()
            .filter(|candidate| {
                candidate.lexical.is_some()
                    || candidate.vector.is_some_and(|placement| placement.score >= self.settings.min_vector_score)
            })
            .cloned()
            .collect();
        if evidence.is_empty() {
            state.clock.record("selection", stage);
            return Ok(state.abstain(AbstentionReason::NoAuthorizedEvidence, vec![]));
        }
        let limits = SelectionLimits {
            top_k,
            token_budget: self.settings.context_token_budget,
            max_chunks_per_doc: self.settings.max_chunks_per_doc,
        };
        let selection = select_context(&evidence, limits);
        state.clock.record("selection", stage);

        let stage = Instant::now();
        let chosen: Vec<Arc<Chunk>> = selection.chosen.iter().map(|candidate| Arc::clone(&candidate.chunk)).collect();
        let prompt = build_prompt(
            &request.question,
            &chosen,
            answer_settings.prompt_token_budget,
            answer_settings.min_source_tokens,
        );
        state.clock.record("prompt", stage);
        let Some(prompt) = prompt else {
            return Ok(state.abstain(AbstentionReason::ContextOverflow, vec![]));
        };
        state.metrics.context = prompt.sources.len();
        let retrieved_chunks: Vec<Arc<Chunk>> =
            retrieved.candidates.iter().map(|candidate| Arc::clone(&candidate.chunk)).collect();

        let mut sources_for_model = prompt.for_model.clone();
        let mut repair: Option<String> = None;
        for attempt in 1..=2u32 {
            let (generation_stage, validation_stage) =
                if attempt == 1 { ("generation", "validation") } else { ("repair_generation", "repair_validation") };
            let remaining = deadline.saturating_duration_since(Instant::now()).saturating_sub(VALIDATION_RESERVE);
            if remaining.is_zero() {
                return Ok(state.abstain(AbstentionReason::DeadlineExceeded, vec!["no_time_for_generation".into()]));
            }
            let generation = GenerationRequest {
                system: prompt.system.clone(),
                user: render_user(&request.question, &sources_for_model),
                question: request.question.clone(),
                sources: sources_for_model.clone(),
                schema: output_schema(),
                repair: repair.clone(),
                timeout: remaining,
            };
            let stage = Instant::now();
            state.metrics.generator_attempts = attempt;
            let output = tokio::time::timeout(remaining, self.generator.generate(&generation)).await;
            state.clock.record(generation_stage, stage);
            let raw = match output {
                Err(_) | Ok(Err(GeneratorError::Timeout)) => {
                    return Ok(state.abstain(AbstentionReason::GeneratorTimeout, vec!["generator_timeout".into()]));
                }
                Ok(Err(error)) => {
                    return Ok(state.abstain(AbstentionReason::GeneratorError, vec![error.code().to_owned()]));
                }
                Ok(Ok(raw)) => raw,
            };

            let stage = Instant::now();
            let acl_at_validation = self.engine.acl().load();
            let context = ValidationContext {
                sources: &prompt.sources,
                retrieved: &retrieved_chunks,
                principal,
                acl: &acl_at_validation,
                verifier: self.verifier.as_ref(),
                policy: answer_settings.claim_policy,
            };
            // Verifier calls run under what is left of the request deadline.
            let validation_budget = deadline.saturating_duration_since(Instant::now());
            let verdict = match tokio::time::timeout(validation_budget, validate(&raw, &context)).await {
                Ok(verdict) => verdict,
                Err(_) => {
                    state.clock.record(validation_stage, stage);
                    return Ok(state.abstain(AbstentionReason::DeadlineExceeded, vec!["validation_timeout".into()]));
                }
            };
            // The last await is behind us: authorize against the current snapshot once more, so
            // a revoke that landed while the verifier awaited is not missed. Nothing awaits
            // between here and the response.
            let acl = self.engine.acl().load();
            state.acl_epoch = acl.epoch();
            let verdict = recheck_authorization(verdict, principal, &acl, answer_settings.claim_policy);
            state.clock.record(validation_stage, stage);
            let (reason, problems) = match verdict {
                Verdict::Answered { claims, problems } => {
                    state.reject(&problems);
                    return Ok(state.answered(claims));
                }
                Verdict::Unanswerable => return Ok(state.abstain(AbstentionReason::InsufficientEvidence, vec![])),
                Verdict::Failed { reason, problems } => (reason, problems),
            };
            state.reject(&problems);
            // Repair only once, only with time left, and never showing a revoked source again.
            let time_left = deadline.saturating_duration_since(Instant::now());
            let still_authorized: Vec<SourceForModel> = prompt
                .sources
                .iter()
                .zip(&prompt.for_model)
                .filter(|(source, _)| acl.allows(principal, source.chunk.doc_ordinal))
                .map(|(_, shown)| shown.clone())
                .collect();
            let can_repair = attempt == 1
                && time_left >= Duration::from_millis(answer_settings.min_repair_ms)
                && reason != AbstentionReason::SourceRevoked
                && !still_authorized.is_empty();
            if !can_repair {
                let mut codes = diagnostics(&problems);
                if attempt == 1
                    && reason != AbstentionReason::SourceRevoked
                    && time_left < Duration::from_millis(answer_settings.min_repair_ms)
                {
                    codes.push("no_time_for_repair".into());
                }
                if still_authorized.is_empty() {
                    return Ok(state.abstain(AbstentionReason::SourceRevoked, codes));
                }
                return Ok(state.abstain(reason, codes));
            }
            repair = Some(repair_instruction(&problems, &still_authorized));
            sources_for_model = still_authorized;
        }
        unreachable!("the loop returns on its second attempt")
    }

    /// Retrieves up to `k` fused chunks for `query` inside the principal's scope (`/v1/retrieve`).
    pub async fn retrieve(
        &self,
        principal: &Principal,
        query: &str,
        k: Option<usize>,
    ) -> AnswerResult<RetrieveResponse> {
        let k = k.unwrap_or(self.settings.top_k_default).clamp(1, self.settings.top_k_max);
        let scope = self.engine.scope(principal);
        let retrieved = self.engine.retrieve(&scope, query).await?;
        let short = retrieved.candidates.len() < k;
        let vector_search = retrieved
            .vector_reports
            .iter()
            .map(|shard| VectorSearchOut {
                shard: shard.shard,
                strategy: shard.report.strategy.as_str().to_owned(),
                allowed: shard.report.allowed,
                distance_computations: shard.report.distance_computations,
            })
            .collect();
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
        Ok(RetrieveResponse { chunks, acl_epoch: scope.epoch(), short, vector_search })
    }
}

/// The request actor: one actor whose handler runs each request as its own future, so requests
/// proceed concurrently while the actor owns the pipeline.
pub struct AnswerActor {
    pipeline: Arc<AnswerPipeline>,
}

impl AnswerActor {
    /// An actor over a pipeline.
    pub fn new(pipeline: Arc<AnswerPipeline>) -> Self {
        Self { pipeline }
    }
}

impl Actor for AnswerActor {
    type Context = Context<Self>;
}

/// A slot of the in-flight limit (`server.max_in_flight`), held by the work it admitted.
/// Dropping it frees the slot; while held it counts in `warrant_in_flight_requests`.
#[derive(Debug)]
pub struct Admission {
    _permit: OwnedSemaphorePermit,
}

impl Admission {
    /// Holds `permit` (a slot of the admission semaphore) until dropped.
    pub fn new(permit: OwnedSemaphorePermit) -> Self {
        metrics::gauge!("warrant_in_flight_requests").increment(1.0);
        Self { _permit: permit }
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        metrics::gauge!("warrant_in_flight_requests").decrement(1.0);
    }
}

/// Answer one question for one principal.
#[derive(Message)]
#[rtype(result = "AnswerResult<AnswerResponse>")]
pub struct Answer {
    /// The verified caller.
    pub principal: Principal,
    /// The validated request.
    pub request: AnswerRequest,
    /// Request id.
    pub request_id: String,
    /// The caller's admission slot: held by the work until it ends (completed or cancelled).
    pub admission: Option<Admission>,
    /// Resolves (sent or dropped) when the caller stops waiting; the work is then cancelled and
    /// answers [`AnswerError::Cancelled`]. `None`: the work always runs to its end.
    pub caller_gone: Option<oneshot::Receiver<()>>,
    /// Receives each stage as it ends (streamed answers), if given.
    pub progress: Option<StageEvents>,
}

impl Handler<Answer> for AnswerActor {
    type Result = ResponseFuture<AnswerResult<AnswerResponse>>;

    fn handle(&mut self, message: Answer, _: &mut Context<Self>) -> Self::Result {
        let pipeline = Arc::clone(&self.pipeline);
        Box::pin(async move {
            let Answer { principal, request, request_id, admission, caller_gone, progress } = message;
            let work = pipeline.answer_with_progress(&principal, request, request_id, progress);
            let result = match caller_gone {
                None => work.await,
                Some(caller_gone) => {
                    tokio::select! {
                        biased;
                        result = work => result,
                        _ = caller_gone => {
                            metrics::counter!("warrant_answers_cancelled_total").increment(1);
                            Err(AnswerError::Cancelled)
                        }
                    }
                }
            };
            // The work (and everything it awaited) has ended or been dropped: free the slot.
            drop(admission);
            result
        })
    }
}
