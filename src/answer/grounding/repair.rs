//! The repair prompt: what a failed attempt did wrong, in words a small model can act on, with
//! the sentences of a cited source closest to a quote that was not found (read from the
//! [`Source`]s the repair attempt shows).

use std::sync::Arc;

use crate::config::ClaimText;

use super::quote::{closest_sentences, echo_quote};
use super::source::Source;
use super::validate::{Problem, Rejection};

/// A repair instruction naming the problems, for a repair attempt that shows `sources` (the
/// sources of the final context still authorized, as the model sees them).
///
/// It names labels and codes; for a quote that was not found it also echoes the quote
/// ([`echo_quote`]: neutralized, one line, at most 200 characters) and offers the sentences of
/// the cited source closest to it ([`closest_sentences`]), delimited like a source, taken from
/// that source's model text in `sources` only: a source that is not there (revoked, deleted, not
/// in the final context) is never offered, and a sentence sharing too little with the quote is
/// not offered either. No other source text appears. The wording follows `claim_text` (a quoted
/// claim's answer, not its text, is what was unsupported).
pub fn repair_instruction(problems: &[Problem], sources: &[Arc<Source>], claim_text: ClaimText) -> String {
    let quoted = claim_text == ClaimText::Quoted;
    let labels: Vec<&str> = sources.iter().map(|source| source.label()).collect();
    let mut lines =
        vec![format!("Your previous answer needs fixing. Valid citation labels are: {}.", labels.join(", "))];
    for problem in problems {
        let subject = if problem.claim == 0 { "the output".to_owned() } else { format!("claim {}", problem.claim) };
        let detail = match problem.rejection {
            Rejection::Unparseable => "was not valid JSON".to_owned(),
            Rejection::OffSchema if quoted => {
                "did not match the schema (answerable, claims[answer, citations])".to_owned()
            }
            Rejection::OffSchema => "did not match the schema (answerable, claims[text, citations])".to_owned(),
            Rejection::DuplicateKey => "repeated a key inside a JSON object".to_owned(),
            Rejection::Inconsistent => "set answerable inconsistently with its claims".to_owned(),
            Rejection::MalformedClaim if quoted => {
                "had an empty or overlong answer, or a citation without a quote".to_owned()
            }
            Rejection::MalformedClaim => "had an empty or overlong text".to_owned(),
            Rejection::DuplicateClaim => "repeated another claim".to_owned(),
            Rejection::NotALabel => "cited something that is not a source label".to_owned(),
            Rejection::UnknownLabel => format!("cited unknown label {}", problem.label.as_deref().unwrap_or("?")),
            Rejection::NotInContext => "cited a source that is not among the labeled sources".to_owned(),
            Rejection::MissingCitation => "has no citation".to_owned(),
            Rejection::SourceRevoked => "cited a source that is no longer available".to_owned(),
            Rejection::Unsupported if quoted => {
                "gave an answer its quote does not say; quote the sentence that says the answer and give the \
                 answer in its words"
                    .to_owned()
            }
            Rejection::Unsupported => {
                "is not supported by the text it cites; quote or closely paraphrase the source".to_owned()
            }
            Rejection::QuoteNotFound => {
                let label = problem.label.as_deref().unwrap_or("the source it cites");
                let echoed = problem.quote.as_deref().map(echo_quote).unwrap_or_default();
                let offered = problem
                    .label
                    .as_deref()
                    .and_then(|label| sources.iter().find(|source| source.label() == label))
                    .map(|source| {
                        (
                            source.label(),
                            closest_sentences(problem.quote.as_deref().unwrap_or_default(), source.choices()),
                        )
                    })
                    .filter(|(_, sentences)| !sentences.is_empty());
                let mut detail = format!("gave the quote \"{echoed}\", which does not occur in {label}");
                match offered {
                    Some((label, sentences)) => {
                        detail.push_str(&format!(
                            "; copy the quote word for word from {label}, for example from these sentences of \
                             {label}:\n<source label=\"{label}\">\n{}\n</source>\n",
                            sentences.join("\n")
                        ));
                        detail.push_str(if quoted {
                            "Give the answer in the words of its quote"
                        } else {
                            "Write the claim with the words of its quote"
                        });
                    }
                    None => detail.push_str("; copy the quote word for word from the source, or cite another source"),
                }
                detail
            }
            Rejection::OffQuestion => {
                "quoted sentences that are not about the question; quote the sentence that answers what was asked, \
                 or set answerable to false if no source does"
                    .to_owned()
            }
            Rejection::UnsupportedCitation => format!(
                "cited {}, which supports no part of it; cite only sources that state the claim",
                problem.label.as_deref().unwrap_or("a source")
            ),
        };
        lines.push(format!("- {subject} {detail}."));
    }
    lines.join("\n")
}
