//! The [`Generator`] trait and its request type. Implementations live beside it; the schema a
//! generator decodes under is grounding's (`crate::answer::grounding::schema`).

use std::time::Duration;

use async_trait::async_trait;

/// One source as the model sees it: a server-assigned label and neutralized, untrusted text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceForModel {
    /// `S1`, `S2`, …
    pub label: String,
    /// Source text normalized (NFKC, invisible characters dropped) with delimiter and
    /// label-shaped sequences neutralized (see `crate::answer::grounding::normalize::neutralize`).
    pub text: String,
}

/// The longest previous output shown back on a repair attempt, in characters.
pub const MAX_PREVIOUS_CHARS: usize = 4000;

/// Everything a generator needs for one call.
#[derive(Clone, Debug)]
pub struct GenerationRequest {
    /// System instruction (sources are untrusted evidence, answer only from them, cite labels).
    pub system: String,
    /// The rendered user message: delimited sources followed by the question.
    pub user: String,
    /// The question alone (trimmed).
    pub question: String,
    /// The labeled sources alone, in label order.
    pub sources: Vec<SourceForModel>,
    /// JSON schema of the expected output (`cited_answer`).
    pub schema: serde_json::Value,
    /// Problems found in the previous attempt, when this is the repair attempt.
    pub repair: Option<String>,
    /// On the repair attempt, the rejected output of the previous one (at most
    /// [`MAX_PREVIOUS_CHARS`]), shown back so the model can fix its own answer instead of
    /// starting blind. `None` on the first attempt, and when a source shown to the previous
    /// attempt is no longer authorized (its output may quote that source).
    pub previous: Option<String>,
    /// Time the generator may take.
    pub timeout: Duration,
}

/// Errors of generators.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum GeneratorError {
    /// No answer within the time allowed.
    #[error("generator timed out")]
    Timeout,
    /// The provider answered with an error status.
    #[error("generator returned status {status}")]
    Status {
        /// HTTP status.
        status: u16,
    },
    /// The provider could not be reached.
    #[error("generator unreachable: {0}")]
    Connection(String),
    /// The provider refused or returned no usable content.
    #[error("generator refused: {0}")]
    Refused(String),
}

impl GeneratorError {
    /// Transport-neutral code (also the abstention diagnostic).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Timeout => "generator_timeout",
            Self::Status { .. } => "generator_status",
            Self::Connection(_) => "generator_unreachable",
            Self::Refused(_) => "generator_refused",
        }
    }
}

/// Produces raw model output (a JSON document, unvalidated) for a labeled prompt.
#[async_trait]
pub trait Generator: Send + Sync {
    /// Name reported in logs and `/readyz`.
    fn name(&self) -> &str;
    /// One generation call.
    async fn generate(&self, request: &GenerationRequest) -> Result<String, GeneratorError>;
}
