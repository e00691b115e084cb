//! The stages of one answer: a [`Run`] holds the request's deadline, limits and state and
//! drives it `scope` → `retrieve` → `ground` → `attempt` → (`plan_repair` → `attempt`), each stage
//! ending the run early through `?` with an abstention or a fault ([`Halt`]); the repair rule is
//! the pure [`repair_decision`].
//!
//! Invariants kept by this module: the scope is built once and used for every search; a repair
//! prompt shows only sources still authorized; no stage runs past the request deadline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::response::AnswerMetrics;
use super::{AnswerPipeline, AnswerRequest, RequestState, StageClock, StageEvents};
use crate::acl::AuthorizationScope;
use crate::answer::AnswerError;
use crate::answer::grounding::prompt::{Prompt, build_prompt, render_user};
use crate::answer::grounding::repair::repair_instruction;
use crate::answer::grounding::schema::output_schema_for;
use crate::answer::grounding::source::Source;
use crate::answer::grounding::validate::{
    AbstentionReason, Problem, ValidClaim, ValidationContext, Verdict, recheck_authorization, validate,
};
use crate::answer::providers::generator::{GenerationRequest, GeneratorError, MAX_PREVIOUS_CHARS, SourceForModel};
use crate::domain::{Chunk, Principal};
use crate::retrieval::{Authorization, ContextBudget, Retrieved, SelectionLimits};

/// Time kept back from the generation stage for validation and response building.
const VALIDATION_RESERVE: Duration = Duration::from_millis(25);

/// Why a run stopped before an answer: an abstention (a response) or a server fault.
pub(super) enum Halt {
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

fn diagnostics(problems: &[Problem]) -> Vec<String> {
    let mut codes: Vec<String> = problems.iter().map(|problem| problem.rejection.code().to_owned()).collect();
    codes.sort();
    codes.dedup();
    codes
}

/// What the context stage settled: the labeled prompt and every retrieved chunk.
struct Grounding {
    prompt: Prompt,
    retrieved: Vec<Arc<Chunk>>,
}

/// One generation attempt: the sources shown and the repair instruction, if any.
struct Attempt {
    number: u32,
    sources: Vec<Arc<Source>>,
    repair: Option<String>,
    previous: Option<String>,
}

/// What validating an attempt's output settled.
enum Outcome {
    /// Claims to answer with, and the citations rejected on the way.
    Answered(Vec<ValidClaim>, Vec<Problem>),
    /// The attempt failed with this reason and these problems; the authorization view it was
    /// re-checked against, and the rejected output (shown back on a repair).
    Failed(AbstentionReason, Vec<Problem>, Arc<dyn Authorization>, String),
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
pub(super) struct Run<'a> {
    pipeline: &'a AnswerPipeline,
    principal: &'a Principal,
    question: String,
    top_k: usize,
    deadline: Instant,
    pub(super) state: RequestState,
}

impl<'a> Run<'a> {
    pub(super) fn new(
        pipeline: &'a AnswerPipeline,
        principal: &'a Principal,
        request: AnswerRequest,
        request_id: String,
        events: Option<StageEvents>,
    ) -> Self {
        let answer = &pipeline.settings.answer;
        let routing = pipeline.review.as_ref().is_some_and(|router| router.policy().enabled());
        let trace = routing.then(|| super::trace::Trace::new(&request.question));
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
                trace,
            },
        }
    }

    pub(super) async fn drive(&mut self) -> Result<(Vec<ValidClaim>, Vec<Problem>), Halt> {
        let scope = self.scope().await?;
        let retrieved = self.retrieve(&scope).await?;
        let grounding = self.ground(retrieved)?;
        let mut attempt =
            Attempt { number: 1, sources: grounding.prompt.sources.clone(), repair: None, previous: None };
        loop {
            match self.attempt(&grounding, &attempt).await? {
                Outcome::Answered(claims, problems) => return Ok((claims, problems)),
                Outcome::Failed(reason, problems, acl, raw) => {
                    self.state.reject(&problems);
                    attempt = self.plan_repair(&grounding, &attempt, reason, &problems, &acl, &raw)?;
                }
            }
        }
    }

    fn time_left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    async fn scope(&mut self) -> Result<AuthorizationScope, Halt> {
        let stage = Instant::now();
        let scope = tokio::time::timeout(self.time_left(), self.pipeline.reader.scope(self.principal)).await;
        self.state.clock.record("scope", stage);
        let Ok(scope) = scope else {
            return abstain(AbstentionReason::DeadlineExceeded, &["scope_timeout"]);
        };
        let scope = scope?;
        self.state.acl_epoch = scope.epoch();
        Ok(scope)
    }

    /// What the principal may read now, of the sources in the final context (bounded by what is
    /// left of the deadline; a backend that does not answer in time ends the request, and the
    /// validation stage begun at `started` is recorded as `stage` before it ends).
    async fn authorization(
        &mut self,
        grounding: &Grounding,
        stage: &'static str,
        started: Instant,
    ) -> Result<Arc<dyn Authorization>, Halt> {
        let view = self.current_authorization(grounding).await;
        if view.is_err() {
            self.state.clock.record(stage, started);
        }
        view
    }

    async fn current_authorization(&mut self, grounding: &Grounding) -> Result<Arc<dyn Authorization>, Halt> {
        let chunks: Vec<Arc<Chunk>> =
            grounding.prompt.sources.iter().map(|source| Arc::clone(source.chunk())).collect();
        let view =
            tokio::time::timeout(self.time_left(), self.pipeline.reader.authorization(self.principal, &chunks)).await;
        let Ok(view) = view else {
            return abstain(AbstentionReason::DeadlineExceeded, &["authorization_timeout"]);
        };
        Ok(view?)
    }

    async fn retrieve(&mut self, scope: &AuthorizationScope) -> Result<Retrieved, Halt> {
        let stage = Instant::now();
        let budget = self.time_left().min(Duration::from_millis(self.pipeline.settings.answer.retrieval_budget_ms));
        let settings = &self.pipeline.settings;
        let context = ContextBudget {
            limits: SelectionLimits {
                top_k: self.top_k,
                token_budget: settings.context_token_budget,
                max_chunks_per_doc: settings.max_chunks_per_doc,
            },
            min_vector_score: settings.min_vector_score,
        };
        let retrieved =
            tokio::time::timeout(budget, self.pipeline.reader.retrieve(scope, &self.question, Some(context))).await;
        let Ok(retrieved) = retrieved else {
            self.state.clock.record("retrieval", stage);
            return abstain(AbstentionReason::DeadlineExceeded, &["retrieval_timeout"]);
        };
        let retrieved = match retrieved {
            Ok(retrieved) => retrieved,
            Err(error) => {
                self.state.clock.record("retrieval", stage);
                return Err(error.into());
            }
        };
        // The coordinator budgeted the context as the last step of retrieval: its own stage.
        let selection = retrieved.selection_elapsed;
        self.state.clock.record_elapsed("retrieval", stage.elapsed().saturating_sub(selection));
        self.state.clock.record_elapsed("selection", selection);
        self.state.metrics.retrieved = retrieved.candidates.len();
        Ok(retrieved)
    }

    /// The prompt over the coordinator's budgeted context: labels, sources.
    fn ground(&mut self, retrieved: Retrieved) -> Result<Grounding, Halt> {
        let settings = &self.pipeline.settings;
        let Some(selection) = retrieved.context else {
            return abstain(AbstentionReason::NoAuthorizedEvidence, &[]);
        };
        let stage = Instant::now();
        let chosen: Vec<Arc<Chunk>> = selection.chosen.iter().map(|candidate| Arc::clone(&candidate.chunk)).collect();
        let prompt = build_prompt(
            self.pipeline.settings.output.system_instruction(),
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
        if let Some(trace) = &mut self.state.trace {
            trace.context(&prompt.sources);
        }
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
        let for_model: Vec<SourceForModel> = attempt.sources.iter().map(|source| source.for_model()).collect();
        let generation = GenerationRequest {
            system: grounding.prompt.system.clone(),
            user: render_user(&self.question, &for_model),
            question: self.question.clone(),
            sources: for_model,
            schema: output_schema_for(&attempt.sources, &self.question, self.pipeline.settings.output),
            repair: attempt.repair.clone(),
            previous: attempt.previous.clone(),
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
        if let Some(trace) = &mut self.state.trace {
            trace.generated(attempt.number, &attempt.sources, &raw);
        }

        let stage = Instant::now();
        let policy = self.pipeline.settings.answer.claim_policy;
        let acl_at_validation = self.authorization(grounding, validation_stage, stage).await?;
        let context = ValidationContext {
            sources: &grounding.prompt.sources,
            retrieved: &grounding.retrieved,
            principal: self.principal,
            acl: acl_at_validation.as_ref(),
            verifier: self.pipeline.verifier.as_ref(),
            policy,
            question: &self.question,
            anchor_answers: self.pipeline.settings.anchor_answers,
            min_question_terms: self.pipeline.settings.min_question_terms,
        };
        // Verifier calls run under what is left of the request deadline.
        let verdict = tokio::time::timeout(self.time_left(), validate(&raw, &context)).await;
        let Ok(verdict) = verdict else {
            self.state.clock.record(validation_stage, stage);
            return abstain(AbstentionReason::DeadlineExceeded, &["validation_timeout"]);
        };
        // The verifier's awaits are behind us: authorize once more against the backend's current
        // state, so a revoke acknowledged while the verifier awaited is not missed. Nothing else
        // awaits between this view and the response.
        let acl = self.authorization(grounding, validation_stage, stage).await?;
        self.state.acl_epoch = acl.epoch();
        let verdict = recheck_authorization(verdict, self.principal, acl.as_ref(), policy);
        let verdict = self.hold_material(verdict, &raw);
        self.state.clock.record(validation_stage, stage);
        if let Some(trace) = &mut self.state.trace {
            trace.judged(&verdict);
        }
        match verdict {
            Verdict::Answered { claims, problems } => Ok(Outcome::Answered(claims, problems)),
            Verdict::Unanswerable => abstain(AbstentionReason::InsufficientEvidence, &[]),
            Verdict::Failed { reason, problems } => Ok(Outcome::Failed(reason, problems, acl, raw)),
        }
    }

    /// An answered verdict that withheld a claim material to the question
    /// ([`super::materiality`]) fails as `material_claim_unsupported` with the same problems (so
    /// it is repaired once, as any failed attempt), when `answer.abstain_on_material_withheld` is
    /// on; any other verdict passes through. Only `drop_claim` withholds claims.
    fn hold_material(&self, verdict: Verdict, raw: &str) -> Verdict {
        if !self.pipeline.settings.answer.abstain_on_material_withheld {
            return verdict;
        }
        let Verdict::Answered { claims, problems } = verdict else { return verdict };
        if super::materiality::material_withheld(&self.question, raw, &claims, &problems).is_empty() {
            return Verdict::Answered { claims, problems };
        }
        Verdict::Failed { reason: AbstentionReason::MaterialClaimUnsupported, problems }
    }

    /// After a failed attempt: the repair attempt (never showing a source revoked since), or the
    /// abstention [`repair_decision`] settles on.
    fn plan_repair(
        &self,
        grounding: &Grounding,
        failed: &Attempt,
        reason: AbstentionReason,
        problems: &[Problem],
        acl: &Arc<dyn Authorization>,
        raw: &str,
    ) -> Result<Attempt, Halt> {
        let prompt = &grounding.prompt;
        let still_authorized: Vec<Arc<Source>> =
            prompt.sources.iter().filter(|source| acl.allows(self.principal, source.chunk())).cloned().collect();
        let min_repair = Duration::from_millis(self.pipeline.settings.answer.min_repair_ms);
        match repair_decision(failed.number, reason, self.time_left(), min_repair, still_authorized.len()) {
            RepairDecision::Repair => {
                // The rejected output goes back to the model only if every source it was written
                // from is still authorized: it may quote any source it saw.
                let shown_still_authorized = failed
                    .sources
                    .iter()
                    .all(|shown| still_authorized.iter().any(|kept| kept.label() == shown.label()));
                let previous = shown_still_authorized.then(|| raw.chars().take(MAX_PREVIOUS_CHARS).collect());
                Ok(Attempt {
                    number: failed.number + 1,
                    repair: Some(repair_instruction(
                        problems,
                        &still_authorized,
                        self.pipeline.settings.output.claim_text,
                    )),
                    previous,
                    sources: still_authorized,
                })
            }
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
