//! The record of one answer for human review: what the run saw and settled (the final context,
//! each attempt's raw output and verdict), kept only while review routing is on, and turned into
//! a review item when the routing policy sends the finished answer to review ([`route`]).
//!
//! Invariants: every claim of every judged attempt's output is recorded, returned or rejected,
//! with the codes of its problems (parsed leniently from the raw output, numbered as validation
//! numbers them); a returned claim is recorded as returned (its text, citations and quote spans
//! from validation); nothing is queued unless the policy routes the answer, and queueing never
//! waits.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::answer::grounding::source::Source;
use crate::answer::grounding::validate::{Problem, ValidClaim, Verdict};
use crate::answer::pipeline::response::{AnswerResponse, ReviewTicket};
use crate::domain::{Chunk, Principal};
use crate::review::item::{
    AbstentionRecord, AttemptOutcome, AttemptRecord, CitationRecord, ClaimRecord, ClaimText, GeneratedText,
    MAX_CLAIM_CHARS, MAX_CLAIMS, MAX_RAW_CHARS, NewItem, ReviewItem, Route, SourceRecord, SourceText, WrittenCitation,
    bounded,
};
use crate::review::policy::Outcome;
use crate::review::{Router, new_review_id, now_ms};

/// One attempt as the run saw it.
struct Traced {
    number: u32,
    shown: Vec<String>,
    raw: String,
    verdict: Option<Verdict>,
}

/// What one answer's run saw and settled, for review.
pub(in crate::answer) struct Trace {
    question: String,
    sources: Vec<(String, Arc<Chunk>)>,
    attempts: Vec<Traced>,
}

impl Trace {
    /// A record of the answer to `question`.
    pub(in crate::answer) fn new(question: &str) -> Self {
        Self { question: question.to_owned(), sources: Vec::new(), attempts: Vec::new() }
    }

    /// The final context.
    pub(in crate::answer) fn context(&mut self, sources: &[Arc<Source>]) {
        self.sources = sources.iter().map(|source| (source.label().to_owned(), Arc::clone(source.chunk()))).collect();
    }

    /// Attempt `number` showed `shown` and the generator wrote `raw`.
    pub(in crate::answer) fn generated(&mut self, number: u32, shown: &[Arc<Source>], raw: &str) {
        self.attempts.push(Traced {
            number,
            shown: shown.iter().map(|source| source.label().to_owned()).collect(),
            raw: bounded(raw, MAX_RAW_CHARS),
            verdict: None,
        });
    }

    /// Validation's final verdict on the last attempt's output.
    pub(in crate::answer) fn judged(&mut self, verdict: &Verdict) {
        if let Some(last) = self.attempts.last_mut() {
            last.verdict = Some(verdict.clone());
        }
    }

    /// The review item of this answer.
    fn into_item(self, principal: &Principal, response: &AnswerResponse, route: Route, review_id: String) -> NewItem {
        let mut attempts = Vec::with_capacity(self.attempts.len());
        let mut claims = Vec::new();
        let mut texts = Vec::new();
        let mut outputs = Vec::with_capacity(self.attempts.len());
        for traced in self.attempts {
            let (outcome, problems, valid): (_, &[Problem], &[ValidClaim]) = match &traced.verdict {
                None => (None, &[], &[]),
                Some(Verdict::Answered { claims, problems }) => (Some(AttemptOutcome::Answered), problems, claims),
                Some(Verdict::Unanswerable) => (Some(AttemptOutcome::Unanswerable), &[], &[]),
                Some(Verdict::Failed { reason, problems }) => {
                    (Some(AttemptOutcome::Failed(reason.as_str().to_owned())), problems, &[])
                }
            };
            // An output never judged (the deadline ran out) has no claims to record: only its raw
            // output is kept.
            let written = if traced.verdict.is_some() { written_claims(&traced.raw) } else { Vec::new() };
            let positions = written.len().max(valid.iter().map(|claim| claim.number).max().unwrap_or(0));
            for position in 1..=positions {
                let codes = codes_of(problems, position);
                let returned = valid.iter().find(|claim| claim.number == position);
                let (record, text) = match returned {
                    Some(claim) => returned_claim(traced.number, position, claim, codes, written.get(position - 1)),
                    None => (
                        ClaimRecord {
                            attempt: traced.number,
                            position: position as u32,
                            returned: false,
                            codes,
                            citations: Vec::new(),
                            anchored: false,
                        },
                        written.get(position - 1).cloned().unwrap_or(ClaimText {
                            text: None,
                            answer: None,
                            citations: Vec::new(),
                        }),
                    ),
                };
                claims.push(record);
                texts.push(text);
            }
            attempts.push(AttemptRecord {
                number: traced.number,
                shown: traced.shown,
                outcome,
                codes: codes_of(problems, 0),
            });
            outputs.push((traced.number, traced.raw));
        }
        let mut sources = Vec::with_capacity(self.sources.len());
        let mut source_texts: BTreeMap<String, Vec<SourceText>> = BTreeMap::new();
        for (label, chunk) in &self.sources {
            sources.push(SourceRecord {
                label: label.clone(),
                chunk_id: *chunk.id.as_bytes(),
                doc_id: chunk.doc_id.clone(),
                doc_version: chunk.doc_version,
                doc_ordinal: chunk.doc_ordinal,
                chunk_ordinal: chunk.ordinal,
                start: chunk.start as u64,
                end: chunk.end as u64,
            });
            source_texts.entry(chunk.doc_id.clone()).or_default().push(SourceText {
                label: label.clone(),
                title: chunk.title.clone(),
                text: chunk.text.clone(),
            });
        }
        let item = ReviewItem {
            review_id,
            request_id: response.request_id.clone(),
            created_ms: now_ms(),
            asker: principal.user.clone(),
            question: self.question,
            route,
            answered: response.answer.is_some(),
            partial: response.answer.as_ref().is_some_and(|answer| answer.partial),
            abstention: response.abstention.as_ref().map(|abstention| AbstentionRecord {
                reason: abstention.reason.as_str().to_owned(),
                diagnostics: abstention.diagnostics.clone(),
            }),
            acl_epoch: response.acl_epoch,
            sources,
            attempts,
            claims,
            stages_ms: response.metrics.stages_ms.clone(),
        };
        NewItem {
            tenant: principal.tenant.clone(),
            item,
            sources: source_texts,
            generated: GeneratedText { claims: texts, outputs },
        }
    }
}

/// The codes of `problems` about claim `position` (0: the whole output), each once, in order.
fn codes_of(problems: &[Problem], position: usize) -> Vec<String> {
    let mut codes: Vec<String> = Vec::new();
    for problem in problems.iter().filter(|problem| problem.claim == position) {
        let code = problem.rejection.code();
        if !codes.iter().any(|known| known == code) {
            codes.push(code.to_owned());
        }
    }
    codes
}

/// A returned claim: validation's text, citations and spans.
fn returned_claim(
    attempt: u32,
    position: usize,
    claim: &ValidClaim,
    codes: Vec<String>,
    written: Option<&ClaimText>,
) -> (ClaimRecord, ClaimText) {
    let citations = claim
        .citations
        .iter()
        .map(|citation| CitationRecord {
            label: citation.label.clone(),
            quote_start: (citation.chunk.start + citation.quote_span.0) as u64,
            quote_end: (citation.chunk.start + citation.quote_span.1) as u64,
        })
        .collect();
    let record =
        ClaimRecord { attempt, position: position as u32, returned: true, codes, citations, anchored: claim.anchored };
    let text = ClaimText {
        text: Some(claim.text.clone()),
        answer: written.and_then(|written| written.answer.clone()),
        citations: written.map(|written| written.citations.clone()).unwrap_or_default(),
    };
    (record, text)
}

/// The claims of a raw output as written, read leniently (anything but the claims' own fields
/// ignored, at most [`MAX_CLAIMS`], texts bounded); none when the output is not a JSON object
/// with a `claims` array. Materiality reads what withheld claims said from it too.
pub(super) fn written_claims(raw: &str) -> Vec<ClaimText> {
    let Ok(serde_json::Value::Object(output)) = serde_json::from_str::<serde_json::Value>(raw) else {
        return Vec::new();
    };
    let Some(serde_json::Value::Array(claims)) = output.get("claims") else {
        return Vec::new();
    };
    let text = |value: Option<&serde_json::Value>| {
        value.and_then(|value| value.as_str()).map(|text| bounded(text, MAX_CLAIM_CHARS))
    };
    claims
        .iter()
        .take(MAX_CLAIMS)
        .map(|claim| {
            let citations = claim
                .get("citations")
                .and_then(|citations| citations.as_array())
                .map(|citations| {
                    citations
                        .iter()
                        .take(MAX_CLAIMS)
                        .map(|citation| match citation {
                            serde_json::Value::String(label) => {
                                WrittenCitation { label: bounded(label, MAX_CLAIM_CHARS), quote: None }
                            }
                            other => WrittenCitation {
                                label: text(other.get("label"))
                                    .unwrap_or_else(|| bounded(&other.to_string(), MAX_CLAIM_CHARS)),
                                quote: text(other.get("quote")),
                            },
                        })
                        .collect()
                })
                .unwrap_or_default();
            ClaimText { text: text(claim.get("text")), answer: text(claim.get("answer")), citations }
        })
        .collect()
}

/// Routes the finished answer `response` of `principal`: when the policy sends it to review, its
/// item goes to the queue and the ticket to put in the response is returned (`None` when it is
/// not routed, or the queue dropped it).
pub(in crate::answer) fn route(
    router: &Router,
    principal: &Principal,
    trace: Trace,
    response: &AnswerResponse,
) -> Option<ReviewTicket> {
    let outcome = match (&response.abstention, &response.answer) {
        (Some(abstention), _) => Outcome::Abstained(abstention.reason.as_str()),
        (None, Some(answer)) => Outcome::Answered { partial: answer.partial },
        (None, None) => return None,
    };
    let route = router.policy().route(&response.request_id, outcome)?;
    let review_id = new_review_id();
    let item = trace.into_item(principal, response, route, review_id.clone());
    router.queue().offer(item).ok()?;
    metrics::counter!("warrant_reviews_queued_total", "route" => route.as_str()).increment(1);
    Some(ReviewTicket { queued: true, review_id })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_claims_are_read_leniently_and_bounded() {
        let raw = r#"{"answerable": true, "claims": [
            {"text": "A", "citations": ["S1", {"label": "S2", "quote": "q"}, {"weird": 1}]},
            {"answer": "B", "citations": [{"label": "S3", "quote": "b"}]},
            7
        ]}"#;
        let claims = written_claims(raw);
        assert_eq!(claims.len(), 3);
        assert_eq!(claims[0].text.as_deref(), Some("A"));
        assert_eq!(
            claims[0].citations,
            [
                WrittenCitation { label: "S1".into(), quote: None },
                WrittenCitation { label: "S2".into(), quote: Some("q".into()) },
                WrittenCitation { label: r#"{"weird":1}"#.into(), quote: None },
            ]
        );
        assert_eq!((claims[1].text.as_deref(), claims[1].answer.as_deref()), (None, Some("B")));
        assert_eq!(claims[2], ClaimText { text: None, answer: None, citations: vec![] });
        assert!(written_claims("not json").is_empty());
        assert!(written_claims(r#"{"claims": "no"}"#).is_empty());
        let long = format!(r#"{{"claims": [{{"text": "{}"}}]}}"#, "x".repeat(MAX_CLAIM_CHARS + 10));
        assert_eq!(written_claims(&long)[0].text.as_ref().map(|text| text.chars().count()), Some(MAX_CLAIM_CHARS));
        let many = format!(r#"{{"claims": [{}]}}"#, vec![r#"{"text": "t"}"#; MAX_CLAIMS + 5].join(","));
        assert_eq!(written_claims(&many).len(), MAX_CLAIMS);
    }
}
