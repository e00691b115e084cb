//! The closed vocabularies of validation: why an attempt abstains ([`AbstentionReason`], wire
//! codes of the HTTP contract) and why a claim, a citation or an output was rejected
//! ([`Rejection`], the codes of `citations_rejected`, metrics and diagnostics).
//!
//! Invariant kept by this module: every rejection maps to exactly one abstention reason, and the
//! codes are stable (they are part of the contract).

/// Abstention reason codes of the HTTP contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AbstentionReason {
    /// Nothing authorized and relevant was retrieved.
    NoAuthorizedEvidence,
    /// The generator said the context does not answer the question.
    InsufficientEvidence,
    /// Output unparseable or off-schema, also after repair.
    InvalidOutput,
    /// Unknown labels, chunks outside the context, or unsupported text, also after repair.
    UnsupportedCitation,
    /// Factual claims without citations, also after repair.
    MissingCitation,
    /// A cited source was revoked or deleted between retrieval and response.
    SourceRevoked,
    /// The generator did not answer within its stage deadline.
    GeneratorTimeout,
    /// The generator failed.
    GeneratorError,
    /// Not even the smallest useful context fits the token budget.
    ContextOverflow,
    /// The request deadline ran out in another stage.
    DeadlineExceeded,
    /// Extension: claims stand, but one validation withheld is material to the question
    /// (`answer.abstain_on_material_withheld`; see `crate::answer::pipeline`), also after repair.
    MaterialClaimUnsupported,
}

impl AbstentionReason {
    /// Wire code.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::NoAuthorizedEvidence => "no_authorized_evidence",
            Self::InsufficientEvidence => "insufficient_evidence",
            Self::InvalidOutput => "invalid_output",
            Self::UnsupportedCitation => "unsupported_citation",
            Self::MissingCitation => "missing_citation",
            Self::SourceRevoked => "source_revoked",
            Self::GeneratorTimeout => "generator_timeout",
            Self::GeneratorError => "generator_error",
            Self::ContextOverflow => "context_overflow",
            Self::DeadlineExceeded => "deadline_exceeded",
            Self::MaterialClaimUnsupported => "material_claim_unsupported",
        }
    }
}

/// Why a claim, a citation or a whole output was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rejection {
    /// Not JSON.
    Unparseable,
    /// JSON, but not the schema (unknown fields, wrong types).
    OffSchema,
    /// JSON in which some object repeats a key.
    DuplicateKey,
    /// `answerable: false` with claims, or `answerable: true` without any.
    Inconsistent,
    /// Empty or oversized claim text, or too many claims.
    MalformedClaim,
    /// The same claim text twice.
    DuplicateClaim,
    /// A citation that is not a label (URL, title, chunk id…).
    NotALabel,
    /// A label-shaped citation naming no source of this prompt.
    UnknownLabel,
    /// A citation of a chunk retrieved for this request but not in the final context.
    NotInContext,
    /// A claim with no citation.
    MissingCitation,
    /// A cited chunk is no longer authorized (revoked, deleted, superseded).
    SourceRevoked,
    /// The cited text does not support the claim.
    Unsupported,
    /// One citation of a claim that stands on its other citations does not support any part of
    /// it on its own; the citation is dropped, the claim is not.
    UnsupportedCitation,
    /// A citation's `quote` does not occur in the source it cites (or is empty or oversized).
    QuoteNotFound,
    /// A quoted claim's sentences hold too few of the question's content terms: they state the
    /// model's answer, but not about what was asked (`generator.min_question_terms`).
    OffQuestion,
}

impl Rejection {
    /// Code used in `citations_rejected`, metrics and diagnostics.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unparseable => "unparseable",
            Self::OffSchema => "off_schema",
            Self::DuplicateKey => "duplicate_key",
            Self::Inconsistent => "inconsistent_output",
            Self::MalformedClaim => "malformed_claim",
            Self::DuplicateClaim => "duplicate_claim",
            Self::NotALabel => "not_a_label",
            Self::UnknownLabel => "unknown_label",
            Self::NotInContext => "not_in_context",
            Self::MissingCitation => "missing_citation",
            Self::SourceRevoked => "source_revoked",
            Self::Unsupported => "unsupported_claim",
            Self::UnsupportedCitation => "unsupported_citation",
            Self::QuoteNotFound => "quote_not_found",
            Self::OffQuestion => "off_question",
        }
    }

    /// The abstention reason this rejection leads to when nothing valid remains.
    pub fn reason(&self) -> AbstentionReason {
        match self {
            Self::Unparseable
            | Self::OffSchema
            | Self::DuplicateKey
            | Self::Inconsistent
            | Self::MalformedClaim
            | Self::DuplicateClaim => AbstentionReason::InvalidOutput,
            Self::NotALabel
            | Self::UnknownLabel
            | Self::NotInContext
            | Self::Unsupported
            | Self::UnsupportedCitation
            | Self::QuoteNotFound
            | Self::OffQuestion => AbstentionReason::UnsupportedCitation,
            Self::MissingCitation => AbstentionReason::MissingCitation,
            Self::SourceRevoked => AbstentionReason::SourceRevoked,
        }
    }

    /// Precedence when several problems fail an attempt: the most specific reason wins.
    pub(super) fn precedence(&self) -> u8 {
        match self.reason() {
            AbstentionReason::SourceRevoked => 0,
            AbstentionReason::InvalidOutput => 1,
            AbstentionReason::UnsupportedCitation => 2,
            AbstentionReason::MissingCitation => 3,
            _ => 4,
        }
    }
}
