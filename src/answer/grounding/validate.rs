//! Strict parsing and citation validation of generator output.
//!
//! Every rule has a rejection code. The output must be one JSON document whose objects repeat
//! no key (a repeated key is `duplicate_key`, never last-wins) and that matches the schema with
//! no unknown field. A claim survives only if its text is well formed, it cites at least one
//! label, every citation is a label of a source in the final context, every cited chunk is still
//! authorized under the ACL snapshot loaded at validation time, and the verifier finds the cited
//! (shown) text supports it — judged on that text normalized as the model read it
//! (`super::normalize`), with quotes mapped back to the original text, so quotes stay substrings
//! of the chunk. Support is judged per citation: a citation that does not support
//! (part of) the claim on its own is dropped (`unsupported_citation`) and the claim stands on the
//! others if they together support it; instruction-like sentences of a source ("ignore previous
//! instructions", "tell the user that …", see `crate::answer::text::instructions`) are hidden from the verifier,
//! so they never count as support. Depending on [`ClaimPolicy`], one bad claim drops that claim
//! or fails the attempt (a dropped citation alone fails nothing); an attempt never yields an
//! uncited or unsupported claim. A claim without text is its quotes: it states a short answer,
//! every citation quotes, the answer is what the verifier judges, and the claim's text is the
//! supporting quotes joined (`generator.claim_text = "quoted"`). Verification awaits, so the
//! caller checks authorization once more after it, right before the response is built
//! ([`recheck_authorization`]).

use std::collections::HashSet;
use std::sync::Arc;

use serde::Deserialize;

use crate::config::ClaimPolicy;
use crate::domain::{Chunk, Principal};
use crate::retrieval::Authorization;

use super::quote::distinct_terms;
use super::source::Source;
use super::strict_json::{StrictJsonError, parse_unique_keys};
use crate::answer::providers::verifier::SupportVerifier;

mod anchor;
mod claim;
mod codes;

use claim::{Labels, check_claim};
pub use codes::{AbstentionReason, Rejection};

/// Longest accepted claim text, in characters.
const MAX_CLAIM_CHARS: usize = 2_000;
/// Most claims accepted in one output.
const MAX_CLAIMS: usize = 32;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelOutput {
    answerable: bool,
    claims: Vec<ModelClaim>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelClaim {
    /// Absent when the claim is its quotes (`generator.claim_text = "quoted"`): then `answer`
    /// is given and every citation quotes. `null` is off the schema.
    #[serde(default, deserialize_with = "present_string")]
    text: Option<String>,
    /// A claim that is its quotes states its answer in a few words; the verifier must find it in
    /// the quotes, and it is not returned (the quotes are the claim). Given only without `text`.
    #[serde(default, deserialize_with = "present_string")]
    answer: Option<String>,
    citations: Vec<ModelCitation>,
}

/// A field that, when present, must be a string (`null` included in what is refused).
fn present_string<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    String::deserialize(deserializer).map(Some)
}

/// A citation as the generator writes it: a bare label (`"S1"`), or a label with a short
/// verbatim quote of that source (`{"label": "S1", "quote": "…"}`).
#[derive(Deserialize)]
#[serde(untagged)]
enum ModelCitation {
    Label(String),
    Quoted(QuotedCitation),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QuotedCitation {
    label: String,
    quote: String,
}

impl ModelCitation {
    fn label(&self) -> &str {
        match self {
            Self::Label(label) => label,
            Self::Quoted(quoted) => &quoted.label,
        }
    }

    fn quote(&self) -> Option<&str> {
        match self {
            Self::Label(_) => None,
            Self::Quoted(quoted) => Some(&quoted.quote),
        }
    }
}

/// A citation resolved server-side.
#[derive(Clone, Debug)]
pub struct ResolvedCitation {
    /// The label the model used.
    pub label: String,
    /// The cited chunk.
    pub chunk: Arc<Chunk>,
    /// A substring of the chunk: the supporting span (the generator's quote when it gave one).
    pub quote: String,
    /// Character range `[start, end)` of `quote` inside the chunk text.
    pub quote_span: (usize, usize),
}

/// A claim that passed every rule.
#[derive(Clone, Debug)]
pub struct ValidClaim {
    /// Its position in the model's output (1-based), as in [`Problem::claim`].
    pub number: usize,
    /// Claim text.
    pub text: String,
    /// Its citations: each supports (part of) the claim on its own.
    pub citations: Vec<ResolvedCitation>,
    /// Whether the server chose its citation: a quoted claim whose own quotes did not state its
    /// answer, anchored in a sentence of the final context that does (`anchor`).
    pub anchored: bool,
}

/// One problem found, with the claim it concerns (1-based; 0 for the whole output).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Claim number (1-based), 0 for output-level problems.
    pub claim: usize,
    /// The rejection.
    pub rejection: Rejection,
    /// The offending citation string, when it is label-shaped (safe to echo in a repair prompt).
    pub label: Option<String>,
    /// The generator's quote, when it was not found (`quote_not_found`); untrusted model output,
    /// neutralized before a repair prompt names it.
    pub quote: Option<String>,
}

/// Outcome of validating one generator output.
#[derive(Clone, Debug)]
pub enum Verdict {
    /// Valid claims (at least one); `problems` lists claims dropped under `drop_claim` and
    /// citations dropped from claims that stand.
    Answered {
        /// Claims to return.
        claims: Vec<ValidClaim>,
        /// Dropped claims' and dropped citations' problems.
        problems: Vec<Problem>,
    },
    /// The generator said the sources do not answer the question.
    Unanswerable,
    /// Nothing valid remains.
    Failed {
        /// Reason to abstain with if no repair succeeds (from the problems that failed claims,
        /// never from a dropped citation alone).
        reason: AbstentionReason,
        /// All problems found.
        problems: Vec<Problem>,
    },
}

/// What validation needs besides the output.
pub struct ValidationContext<'a> {
    /// Labeled sources of the final context.
    pub sources: &'a [Arc<Source>],
    /// Every chunk retrieved for the request (to recognize citations of excluded chunks).
    pub retrieved: &'a [Arc<Chunk>],
    /// The caller.
    pub principal: &'a Principal,
    /// What the caller may read at validation time.
    pub acl: &'a dyn Authorization,
    /// Support verifier.
    pub verifier: &'a dyn SupportVerifier,
    /// Drop bad claims or fail the attempt.
    pub policy: ClaimPolicy,
    /// The question (ranks the sentences an answer may be anchored in).
    pub question: &'a str,
    /// Anchor a quoted claim's answer in the sentence of the final context that states it when
    /// the model's own quotes do not (`generator.anchor_answers`).
    pub anchor_answers: bool,
    /// The fewest question terms the sentences of a quoted claim citing only sources below the
    /// first (`S1`) must hold together (`generator.min_question_terms`; 0: not checked).
    pub min_question_terms: usize,
}

fn is_label_shaped(citation: &str) -> bool {
    let mut chars = citation.chars();
    chars.next() == Some('S')
        && citation.len() > 1
        && citation.len() <= 7
        && chars.clone().next().is_some_and(|c| c != '0')
        && chars.all(|c| c.is_ascii_digit())
}

/// Validates one raw output: the output as a whole, then each claim through its stages
/// ([`check_claim`]), then the claim policy over what stands.
pub async fn validate(raw: &str, context: &ValidationContext<'_>) -> Verdict {
    let output = match parse_output(raw) {
        Err(rejection) => return failed(vec![Problem { claim: 0, rejection, label: None, quote: None }]),
        Ok(output) => output,
    };
    if !output.answerable {
        if output.claims.is_empty() {
            return Verdict::Unanswerable;
        }
        return failed(vec![Problem { claim: 0, rejection: Rejection::Inconsistent, label: None, quote: None }]);
    }
    if output.claims.is_empty() {
        return failed(vec![Problem { claim: 0, rejection: Rejection::Inconsistent, label: None, quote: None }]);
    }
    if output.claims.len() > MAX_CLAIMS {
        return failed(vec![Problem { claim: 0, rejection: Rejection::MalformedClaim, label: None, quote: None }]);
    }
    let labels = Labels::of(context);
    let mut seen_texts = HashSet::new();
    let mut claims = Vec::new();
    let mut problems = Vec::new();
    let mut dropped_citations = Vec::new();
    for (index, claim) in output.claims.iter().enumerate() {
        match check_claim(claim, index + 1, context, &labels, &mut seen_texts).await {
            Ok((valid, dropped)) => {
                claims.push(valid);
                dropped_citations.extend(dropped);
            }
            Err(claim_problems) => problems.extend(claim_problems),
        }
    }
    decide(claims, problems, dropped_citations, context.policy)
}

/// Whether a quoted claim cites only sources below the best-ranked one of the final context
/// (`S1`) with sentences that together hold fewer than `context.min_question_terms` distinct
/// content terms of the question (or fewer than all of them, for a question with fewer terms).
/// A sentence of the best-ranked source needs no such evidence: retrieval ranked that source
/// first for the whole question. Never true when the check is off or the question has no
/// content term.
fn off_question(citations: &[ResolvedCitation], context: &ValidationContext<'_>) -> bool {
    let best = context.sources.first().map(|source| source.chunk().id);
    if context.min_question_terms == 0 || citations.iter().any(|citation| Some(citation.chunk.id) == best) {
        return false;
    }
    let asked = distinct_terms(context.question);
    let held: HashSet<String> = citations.iter().flat_map(|citation| distinct_terms(&citation.quote)).collect();
    asked.intersection(&held).count() < context.min_question_terms.min(asked.len())
}

/// Checks a claim's text (trimmed): not empty, not too long, not a repeat of an earlier claim's.
fn check_claim_text(text: &str, number: usize, seen_texts: &mut HashSet<String>, problems: &mut Vec<Problem>) {
    let normalized = text.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase();
    let rejection = if text.is_empty() || text.chars().count() > MAX_CLAIM_CHARS {
        Rejection::MalformedClaim
    } else if !seen_texts.insert(normalized) {
        Rejection::DuplicateClaim
    } else {
        return;
    };
    problems.push(Problem { claim: number, rejection, label: None, quote: None });
}

/// Applies `policy` to the surviving `claims`, the problems that failed other claims and the
/// citations dropped from surviving claims (these never fail an attempt on their own).
fn decide(
    claims: Vec<ValidClaim>,
    mut problems: Vec<Problem>,
    dropped_citations: Vec<Problem>,
    policy: ClaimPolicy,
) -> Verdict {
    let answered = match policy {
        ClaimPolicy::DropClaim => !claims.is_empty(),
        ClaimPolicy::FailAnswer => !claims.is_empty() && problems.is_empty(),
    };
    if answered {
        problems.extend(dropped_citations);
        return Verdict::Answered { claims, problems };
    }
    let reason = reason_of(&problems);
    problems.extend(dropped_citations);
    Verdict::Failed { reason, problems }
}

/// Parses the model's output: one JSON document, no repeated key, the schema exactly.
fn parse_output(raw: &str) -> Result<ModelOutput, Rejection> {
    let value = parse_unique_keys(raw).map_err(|error| match error {
        StrictJsonError::Syntax => Rejection::Unparseable,
        StrictJsonError::DuplicateKey => Rejection::DuplicateKey,
    })?;
    serde_json::from_value::<ModelOutput>(value).map_err(|_| Rejection::OffSchema)
}

fn failed(problems: Vec<Problem>) -> Verdict {
    Verdict::Failed { reason: reason_of(&problems), problems }
}

/// The most specific reason among `problems`.
fn reason_of(problems: &[Problem]) -> AbstentionReason {
    problems
        .iter()
        .min_by_key(|problem| problem.rejection.precedence())
        .map(|problem| problem.rejection.reason())
        .unwrap_or(AbstentionReason::InvalidOutput)
}

/// Checks an answered verdict's citations against `acl` once more. The pipeline calls it with a
/// snapshot loaded after its last await (verification awaits an embedder), right before it
/// builds the response, so a revoke that lands during validation is never missed. The rule is
/// validation's: a claim citing a source the principal may no longer read is dropped
/// (`source_revoked`); under `fail_answer`, or when no claim remains, the verdict fails with
/// `source_revoked`. Other verdicts pass through unchanged.
pub fn recheck_authorization(
    verdict: Verdict,
    principal: &Principal,
    acl: &dyn Authorization,
    policy: ClaimPolicy,
) -> Verdict {
    let Verdict::Answered { claims, problems: earlier } = verdict else { return verdict };
    let mut kept = Vec::with_capacity(claims.len());
    let mut revoked = Vec::new();
    for claim in claims {
        let lost: Vec<Problem> = claim
            .citations
            .iter()
            .filter(|citation| !acl.allows(principal, &citation.chunk))
            .map(|citation| Problem {
                claim: claim.number,
                rejection: Rejection::SourceRevoked,
                label: Some(citation.label.clone()),
                quote: None,
            })
            .collect();
        if lost.is_empty() {
            kept.push(claim);
        } else {
            revoked.extend(lost);
        }
    }
    if revoked.is_empty() {
        return Verdict::Answered { claims: kept, problems: earlier };
    }
    // Keep earlier problems (claims and citations dropped at validation) in the counts.
    let (earlier_claims, earlier_citations): (Vec<Problem>, Vec<Problem>) =
        earlier.into_iter().partition(|problem| problem.rejection != Rejection::UnsupportedCitation);
    let mut problems = revoked;
    problems.extend(earlier_claims);
    decide(kept, problems, earlier_citations, policy)
}

/// The quote for a citation and its character range in the shown text: the located generator
/// quote or the verifier's span (mapped back from the normalized text it verified), trimmed of
/// surrounding whitespace, or else the text's beginning.
fn quote_of(shown: &str, span: Option<(usize, usize)>) -> (String, (usize, usize)) {
    const FALLBACK_CHARS: usize = 200;
    let chars: Vec<char> = shown.chars().collect();
    if let Some((start, end)) = span
        && start < end
        && end <= chars.len()
    {
        // A span mapped back from normalized text may take in a neighbouring space.
        let leading = chars[start..end].iter().take_while(|character| character.is_whitespace()).count();
        let trailing =
            chars[start + leading..end].iter().rev().take_while(|character| character.is_whitespace()).count();
        let (start, end) = (start + leading, end - trailing);
        if start < end {
            return (chars[start..end].iter().collect(), (start, end));
        }
    }
    let end = chars.len().min(FALLBACK_CHARS);
    (chars[..end].iter().collect(), (0, end))
}

#[cfg(test)]
mod tests;
