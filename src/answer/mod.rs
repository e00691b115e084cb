//! The answer pipeline: labeled context, prompt, structured generation, citation validation,
//! one repair, abstention. Grouped by trade:
//! - `pipeline/`: the request's run through its stages, the request actor and the response.
//! - `grounding/`: what the model is shown and how its output is held to it: the sources of the
//!   final context ([`source::Source`], built once), normalization and neutralization, the prompt
//!   and the schema, quote location, strict parsing and citation validation.
//! - `providers/`: the seams to models, each a trait with an embedded default, an
//!   OpenAI-compatible HTTP implementation and test fakes: generators and support verifiers.
//! - `text/`: sentences, content terms and instruction-like sentences, read by both.
//!
//! Dependencies run one way: `pipeline` → `grounding` → `providers` → `text`.

pub mod grounding;
pub mod pipeline;
pub mod providers;
mod text;

pub use pipeline::request_actor::{Admission, Answer, RequestActor, run_answer};
pub use pipeline::{AnswerPipeline, AnswerRequest, PipelineSettings, StageEvent, StageEvents};

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
