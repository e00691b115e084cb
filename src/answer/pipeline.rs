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
//! The stages are methods of one `Run` (the request's deadline, limits and state), each ending
//! the run early through `?` with an abstention or a fault; the repair rule is the pure
//! [`repair_decision`]. The request actor (`super::request_actor`) owns a run's admission slot
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

use crate::acl::AuthorizationScope;
use crate::config::{AnswerSettings, Settings};
use crate::domain::{Chunk, Principal};
use crate::retrieval::{Candidate, Engine, Retrieved, SelectionLimits, select_context};

use super::generator::{GenerationRequest, Generator, GeneratorError, SourceForModel, output_schema};
use super::prompt::{Prompt, build_prompt, render_user};
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
        let mut run = Run::new(self, principal, request, request_id, events);
        let outcome = run.drive().await;
        let Run { mut state, .. } = run;
        match outcome {
            Ok((claims, problems)) => {
                state.reject(&problems);
                Ok(state.answered(claims))
            }
            Err(Halt::Abstain(reason, diagnostics)) => Ok(state.abstain(reason, diagnostics)),
            Err(Halt::Fault(error)) => Err(error),
        }
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

/// Why a run stopped before an answer: an abstention (a response) or a server fault.
enum Halt {
    /// Abstain with this reason and these diagnostic codes.
    Abstain(AbstentionReason, Vec<String>),
    /// A server fault (no response body of ours).
    Fault(AnswerError),
}

impl From<AnswerError> for Halt {
    fn from(error: AnswerError) -> Self {
        Self::Fault(error)
    }
}

impl From<crate::retrieval::RetrievalError> for Halt {
    fn from(error: crate::retrieval::RetrievalError) -> Self {
        Self::Fault(error.into())
    }
}

fn abstain<T>(reason: AbstentionReason, diagnostics: &[&str]) -> Result<T, Halt> {
    Err(Halt::Abstain(reason, diagnostics.iter().map(|code| (*code).to_owned()).collect()))
}

/// What the context stage settled: the labeled prompt and every retrieved chunk.
struct Grounding {
    prompt: Prompt,
    retrieved: Vec<Arc<Chunk>>,
}

/// One generation attempt: the sources shown and the repair instruction, if any.
struct Attempt {
    number: u32,
    sources: Vec<SourceForModel>,
    repair: Option<String>,
}

/// What validating an attempt's output settled.
enum Outcome {
    /// Claims to answer with, and the citations rejected on the way.
    Answered(Vec<ValidClaim>, Vec<Problem>),
    /// The attempt failed with this reason; the ACL snapshot it was re-checked against.
    Failed(AbstentionReason, Vec<Problem>, Arc<crate::acl::AclSnapshot>),
}

/// The repair rule after a failed attempt, as a pure decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RepairDecision {
    /// Repair once more with the still authorized sources.
    Repair,
    /// Abstain with this reason; `no_time` adds the `no_time_for_repair` diagnostic.
    Abstain {
        /// The abstention reason.
        reason: AbstentionReason,
        /// Whether the only obstacle was the deadline.
        no_time: bool,
    },
}

/// Repair only once, only with time left, never after a revocation and never without an
/// authorized source to show; with no authorized source left the abstention is `source_revoked`.
pub(crate) fn repair_decision(
    attempt: u32,
    reason: AbstentionReason,
    time_left: Duration,
    min_repair: Duration,
    authorized_sources: usize,
) -> RepairDecision {
    let first = attempt == 1;
    let revoked = reason == AbstentionReason::SourceRevoked;
    if first && !revoked && time_left >= min_repair && authorized_sources > 0 {
        return RepairDecision::Repair;
    }
    let no_time = first && !revoked && time_left < min_repair;
    let reason = if authorized_sources == 0 { AbstentionReason::SourceRevoked } else { reason };
    RepairDecision::Abstain { reason, no_time }
}

/// One answer in progress: the request's deadline, limits and state, driven through the stages
/// `scope` → `retrieve` → `ground` → `attempt` → (`plan_repair` → `attempt`). Each stage ends the
/// run early through `?` with an abstention or a fault.
struct Run<'a> {
    pipeline: &'a AnswerPipeline,
    principal: &'a Principal,
    question: String,
    top_k: usize,
    deadline: Instant,
    state: RequestState,
}

impl<'a> Run<'a> {
    fn new(
        pipeline: &'a AnswerPipeline,
        principal: &'a Principal,
        request: AnswerRequest,
        request_id: String,
        events: Option<StageEvents>,
    ) -> Self {
        let answer = &pipeline.settings.answer;
        let deadline_ms = request.deadline_ms.unwrap_or(answer.deadline_ms).clamp(1, answer.max_deadline_ms);
        let top_k = request.top_k.unwrap_or(pipeline.settings.top_k_default).clamp(1, pipeline.settings.top_k_max);
        Self {
            pipeline,
            principal,
            question: request.question,
            top_k,
            deadline: Instant::now() + Duration::from_millis(deadline_ms),
            state: RequestState {
                request_id,
                clock: StageClock::new(events),
                metrics: AnswerMetrics::default(),
                acl_epoch: 0,
            },
        }
    }

    async fn drive(&mut self) -> Result<(Vec<ValidClaim>, Vec<Problem>), Halt> {
        let scope = self.scope();
        let retrieved = self.retrieve(&scope).await?;
        let grounding = self.ground(retrieved)?;
        let mut attempt = Attempt { number: 1, sources: grounding.prompt.for_model.clone(), repair: None };
        loop {
            match self.attempt(&grounding, &attempt).await? {
                Outcome::Answered(claims, problems) => return Ok((claims, problems)),
                Outcome::Failed(reason, problems, acl) => {
                    self.state.reject(&problems);
                    attempt = self.plan_repair(&grounding, &attempt, reason, &problems, &acl)?;
                }
            }
        }
    }

    fn time_left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    fn scope(&mut self) -> AuthorizationScope {
        let stage = Instant::now();
        let scope = self.pipeline.engine.scope(self.principal);
        self.state.acl_epoch = scope.epoch();
        self.state.clock.record("scope", stage);
        scope
    }

    async fn retrieve(&mut self, scope: &AuthorizationScope) -> Result<Retrieved, Halt> {
        let stage = Instant::now();
        let budget = self.time_left().min(Duration::from_millis(self.pipeline.settings.answer.retrieval_budget_ms));
        let retrieved = tokio::time::timeout(budget, self.pipeline.engine.retrieve(scope, &self.question)).await;
        self.state.clock.record("retrieval", stage);
        let Ok(retrieved) = retrieved else {
            return abstain(AbstentionReason::DeadlineExceeded, &["retrieval_timeout"]);
        };
        let retrieved = retrieved?;
        self.state.metrics.retrieved = retrieved.candidates.len();
        Ok(retrieved)
    }

    /// Selection and prompt: the evidence among the candidates, the budgeted context, labels.
    fn ground(&mut self, retrieved: Retrieved) -> Result<Grounding, Halt> {
        let settings = &self.pipeline.settings;
        let stage = Instant::now();
        let evidence: Vec<Candidate> = retrieved
            .candidates
            .iter()
            .filter(|candidate| {
                candidate.lexical.is_some()
                    || candidate.vector.is_some_and(|placement| placement.score >= settings.min_vector_score)
            })
            .cloned()
            .collect();
        if evidence.is_empty() {
            self.state.clock.record("selection", stage);
            return abstain(AbstentionReason::NoAuthorizedEvidence, &[]);
        }
        let limits = SelectionLimits {
            top_k: self.top_k,
            token_budget: settings.context_token_budget,
            max_chunks_per_doc: settings.max_chunks_per_doc,
        };
        let selection = select_context(&evidence, limits);
        self.state.clock.record("selection", stage);

        let stage = Instant::now();
        let chosen: Vec<Arc<Chunk>> = selection.chosen.iter().map(|candidate| Arc::clone(&candidate.chunk)).collect();
        let prompt = build_prompt(
            &self.question,
            &chosen,
            settings.answer.prompt_token_budget,
            settings.answer.min_source_tokens,
        );
        self.state.clock.record("prompt", stage);
        let Some(prompt) = prompt else {
            return abstain(AbstentionReason::ContextOverflow, &[]);
        };
        self.state.metrics.context = prompt.sources.len();
        let retrieved = retrieved.candidates.iter().map(|candidate| Arc::clone(&candidate.chunk)).collect();
        Ok(Grounding { prompt, retrieved })
    }

    /// Generation and validation of one attempt, under what is left of the deadline.
    async fn attempt(&mut self, grounding: &Grounding, attempt: &Attempt) -> Result<Outcome, Halt> {
        let (generation_stage, validation_stage) =
            if attempt.number == 1 { ("generation", "validation") } else { ("repair_generation", "repair_validation") };
        let remaining = self.time_left().saturating_sub(VALIDATION_RESERVE);
        if remaining.is_zero() {
            return abstain(AbstentionReason::DeadlineExceeded, &["no_time_for_generation"]);
        }
        let generation = GenerationRequest {
            system: grounding.prompt.system.clone(),
            user: render_user(&self.question, &attempt.sources),
            question: self.question.clone(),
            sources: attempt.sources.clone(),
            schema: output_schema(),
            repair: attempt.repair.clone(),
            timeout: remaining,
        };
        let stage = Instant::now();
        self.state.metrics.generator_attempts = attempt.number;
        let output = tokio::time::timeout(remaining, self.pipeline.generator.generate(&generation)).await;
        self.state.clock.record(generation_stage, stage);
        let raw = match output {
            Err(_) | Ok(Err(GeneratorError::Timeout)) => {
                return abstain(AbstentionReason::GeneratorTimeout, &["generator_timeout"]);
            }
            Ok(Err(error)) => return abstain(AbstentionReason::GeneratorError, &[error.code()]),
            Ok(Ok(raw)) => raw,
        };

        let stage = Instant::now();
        let policy = self.pipeline.settings.answer.claim_policy;
        let acl_at_validation = self.pipeline.engine.acl().load();
        let context = ValidationContext {
            sources: &grounding.prompt.sources,
            retrieved: &grounding.retrieved,
            principal: self.principal,
            acl: &acl_at_validation,
            verifier: self.pipeline.verifier.as_ref(),
            policy,
        };
        // Verifier calls run under what is left of the request deadline.
        let verdict = tokio::time::timeout(self.time_left(), validate(&raw, &context)).await;
        let Ok(verdict) = verdict else {
            self.state.clock.record(validation_stage, stage);
            return abstain(AbstentionReason::DeadlineExceeded, &["validation_timeout"]);
        };
        // The last await is behind us: authorize against the current snapshot once more, so a
        // revoke that landed while the verifier awaited is not missed. Nothing awaits between
        // here and the response.
        let acl = self.pipeline.engine.acl().load();
        self.state.acl_epoch = acl.epoch();
        let verdict = recheck_authorization(verdict, self.principal, &acl, policy);
        self.state.clock.record(validation_stage, stage);
        match verdict {
            Verdict::Answered { claims, problems } => Ok(Outcome::Answered(claims, problems)),
            Verdict::Unanswerable => abstain(AbstentionReason::InsufficientEvidence, &[]),
            Verdict::Failed { reason, problems } => Ok(Outcome::Failed(reason, problems, acl)),
        }
    }

    /// After a failed attempt: the repair attempt (never showing a source revoked since), or the
    /// abstention [`repair_decision`] settles on.
    fn plan_repair(
        &self,
        grounding: &Grounding,
        failed: &Attempt,
        reason: AbstentionReason,
        problems: &[Problem],
        acl: &crate::acl::AclSnapshot,
    ) -> Result<Attempt, Halt> {
        let prompt = &grounding.prompt;
        let still_authorized: Vec<SourceForModel> = prompt
            .sources
            .iter()
            .zip(&prompt.for_model)
            .filter(|(source, _)| acl.allows(self.principal, source.chunk.doc_ordinal))
            .map(|(_, shown)| shown.clone())
            .collect();
        let min_repair = Duration::from_millis(self.pipeline.settings.answer.min_repair_ms);
        match repair_decision(failed.number, reason, self.time_left(), min_repair, still_authorized.len()) {
            RepairDecision::Repair => Ok(Attempt {
                number: failed.number + 1,
                repair: Some(repair_instruction(problems, &still_authorized)),
                sources: still_authorized,
            }),
            RepairDecision::Abstain { reason, no_time } => {
                let mut codes = diagnostics(problems);
                if no_time {
                    codes.push("no_time_for_repair".into());
                }
                Err(Halt::Abstain(reason, codes))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every combination of attempt, failure reason, time left and authorized sources: repair
    /// happens only on the first attempt, with time for it, after anything but a revocation and
    /// with a source left to show; with none left the abstention is always `source_revoked`.
    #[test]
    fn repair_decision_table() {
        let min_repair = Duration::from_millis(100);
        let reasons = [
            AbstentionReason::InvalidOutput,
            AbstentionReason::UnsupportedCitation,
            AbstentionReason::MissingCitation,
            AbstentionReason::SourceRevoked,
        ];
        for attempt in [1, 2] {
            for reason in reasons {
                for time_left in [Duration::ZERO, Duration::from_millis(99), min_repair, Duration::from_secs(5)] {
                    for authorized in [0, 1, 3] {
                        let decision = repair_decision(attempt, reason, time_left, min_repair, authorized);
                        let may_repair = attempt == 1
                            && reason != AbstentionReason::SourceRevoked
                            && time_left >= min_repair
                            && authorized > 0;
                        let expected = if may_repair {
                            RepairDecision::Repair
                        } else {
                            RepairDecision::Abstain {
                                reason: if authorized == 0 { AbstentionReason::SourceRevoked } else { reason },
                                no_time: attempt == 1
                                    && reason != AbstentionReason::SourceRevoked
                                    && time_left < min_repair,
                            }
                        };
                        assert_eq!(decision, expected, "{attempt} {reason:?} {time_left:?} {authorized}");
                    }
                }
            }
        }
        // Spot checks stated plainly.
        assert_eq!(
            repair_decision(1, AbstentionReason::UnsupportedCitation, Duration::from_secs(1), min_repair, 2),
            RepairDecision::Repair
        );
        assert_eq!(
            repair_decision(2, AbstentionReason::UnsupportedCitation, Duration::from_secs(1), min_repair, 2),
            RepairDecision::Abstain { reason: AbstentionReason::UnsupportedCitation, no_time: false }
        );
        assert_eq!(
            repair_decision(1, AbstentionReason::InvalidOutput, Duration::from_millis(10), min_repair, 2),
            RepairDecision::Abstain { reason: AbstentionReason::InvalidOutput, no_time: true }
        );
        assert_eq!(
            repair_decision(1, AbstentionReason::UnsupportedCitation, Duration::from_secs(1), min_repair, 0),
            RepairDecision::Abstain { reason: AbstentionReason::SourceRevoked, no_time: false }
        );
    }
}
