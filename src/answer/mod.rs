//! The answer pipeline: labeled context, prompt, structured generation, citation validation,
//! one repair, abstention. Providers (generators, support verifiers) are traits here so that an
//! embedded default, OpenAI-compatible HTTP providers and deterministic fakes plug in alike.

pub mod extractive;
pub mod generator;
mod instructions;
pub mod judge_verifier;
pub mod lexical_verifier;
pub mod normalize;
pub mod openai;
pub mod pipeline;
pub mod prompt;
mod quote;
pub mod request_actor;
pub mod response;
mod strict_json;
mod text;
pub mod validate;
pub mod verifier;

pub use pipeline::{AnswerPipeline, AnswerRequest, PipelineSettings, StageEvent, StageEvents};
pub use request_actor::{Admission, Answer, RequestActor, run_answer};

use crate::retrieval::RetrievalError;

/// Server faults of the answer layer (abstentions are not errors).
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    /// Retrieval failed (index or embedder).
    #[error(transparent)]
    Retrieval(#[from] RetrievalError),
    /// The caller went away before the answer was ready, so its work was stopped.
    #[error("request cancelled: the caller went away")]
    Cancelled,
}

impl AnswerError {
    /// Transport-neutral code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Retrieval(error) => error.code(),
            Self::Cancelled => "cancelled",
        }
    }
}

/// Result alias of this layer.
pub type AnswerResult<T> = Result<T, AnswerError>;
