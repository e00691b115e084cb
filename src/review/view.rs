//! What one reviewer may see of an item (what a reviewer may write is [`super::judge`]).
//!
//! Access is the reviewer's own, now, decided by the backend
//! ([`ReadSide::authorization`](crate::retrieval::ReadSide::authorization), the re-check the
//! answer pipeline uses, over the item's cited document versions): a source whose version the
//! reviewer may not read — never granted, revoked since, deleted or superseded since — is
//! withheld with nothing of it shown but its label (no document id, title, offsets or length).
//! What the generator wrote may quote any source of its prompt, so the claims' text, the
//! rejected claims' citations as written and the reviewers' notes are shown only to a reviewer
//! who may read every source of the item (and only while the text is stored); a returned claim's
//! quote is shown with its source. Everything else — the question, the asker, codes, labels,
//! counts, timings, verdict labels — is the tenant's review record and shown to any reviewer of
//! the tenant.
//!
//! The views exist only to be sent (`GET /v1/reviews`, `GET /v1/reviews/{review_id}`), so they
//! carry their OpenAPI schema here (`ToSchema`, named as the types are) and the handlers send
//! them as they are: one shape per thing, no wire mirror. Their doc comments are the schema's
//! descriptions, written for API clients.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::{Chunk, ChunkId, Principal};
use crate::retrieval::ReadSide;

use super::item::{AbstentionRecord, AttemptOutcome, ReviewItem, ReviewStatus, StoredItem, Summary};
use super::{ReviewError, ReviewResult};

/// Why a part of an item is not shown.
pub const NOT_READABLE: &str = "not readable by you";

/// Whether the generator's text is shown to this reviewer: `shown` only when the reviewer may
/// read every source of the item (and the text was not purged), else `withheld`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TextAccess {
    /// Shown.
    Shown,
    /// Withheld.
    Withheld,
}

/// One source of the answer's final context. A source the reviewer may not read now (never
/// granted, revoked, deleted or superseded since) carries only `label`, `readable: false` and
/// `withheld`: no id, title, offsets or length.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct SourceView {
    /// Its label (`S1`…).
    pub label: String,
    /// Whether the reviewer may read it now.
    pub readable: bool,
    /// `not readable by you`, when withheld.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub withheld: Option<&'static str>,
    /// Canonical chunk id.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub chunk_id: Option<String>,
    /// Document id.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub doc_id: Option<String>,
    /// Document version.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub doc_version: Option<u64>,
    /// Character offset of the chunk in the document text.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub start: Option<u64>,
    /// One past its end.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub end: Option<u64>,
    /// Document title.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub title: Option<String>,
    /// The chunk text (`doc.text[start..end]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub text: Option<String>,
}

/// One citation of a claim.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct CitationView {
    /// The label cited (a rejected claim's as written).
    pub label: String,
    /// Character offset of a returned claim's quote in the document text (its source readable).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub quote_start: Option<u64>,
    /// One past its end.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub quote_end: Option<u64>,
    /// A returned claim's supporting span, or a rejected claim's quote as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub quote: Option<String>,
}

/// One claim the generator produced, returned or rejected.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct ClaimView {
    /// Its index: what a verdict names.
    pub index: u32,
    /// The attempt that produced it (1, or 2 for the repair).
    pub attempt: u32,
    /// Its position in that attempt's output (1-based).
    pub position: u32,
    /// `returned` or `rejected`.
    #[schema(example = "rejected")]
    pub status: &'static str,
    /// Rejection codes: why it was withheld, or the citations dropped from a returned claim.
    pub codes: Vec<String>,
    /// Whether the server chose its citation.
    pub anchored: bool,
    /// Its text, when the generator's text is shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub text: Option<String>,
    /// Its short answer (a claim that is its quotes), when shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub answer: Option<String>,
    /// Its citations.
    pub citations: Vec<CitationView>,
}

/// One generation attempt.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct AttemptView {
    /// 1, or 2 for the repair.
    pub attempt: u32,
    /// Labels shown to the generator.
    pub shown: Vec<String>,
    /// `answered`, `unanswerable` or `failed`; absent when its output was never judged.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub outcome: Option<&'static str>,
    /// The reason a failed attempt would abstain with.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub reason: Option<String>,
    /// Rejection codes of the whole output.
    pub codes: Vec<String>,
}

/// A claim's verdict.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct ClaimVerdictView {
    /// The claim's index.
    pub index: u32,
    /// `supported`, `partially_supported`, `unsupported` or `wrong_citation`.
    pub verdict: &'static str,
}

/// An abstention's verdict.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct AbstentionVerdictView {
    /// `correct_abstention` or `should_have_answered`.
    pub verdict: &'static str,
    /// The document named, when the reviewer may read it now.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub doc_id: Option<String>,
}

/// One reviewer's verdict (kept with the reviewer and the time: an audit trail).
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct VerdictView {
    /// The reviewer's `sub`.
    pub reviewer: String,
    /// When, ms since the Unix epoch.
    pub at_ms: u64,
    /// Claims judged.
    pub claims: Vec<ClaimVerdictView>,
    /// The abstention judged.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub abstention: Option<AbstentionVerdictView>,
    /// The note, when the generator's text is shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub note: Option<String>,
}

/// The abstention of an item: reason and diagnostic codes.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct AbstentionView {
    /// Reason code.
    pub reason: String,
    /// Diagnostic codes.
    pub diagnostics: Vec<String>,
}

impl From<AbstentionRecord> for AbstentionView {
    fn from(record: AbstentionRecord) -> Self {
        let AbstentionRecord { reason, diagnostics } = record;
        Self { reason, diagnostics }
    }
}

/// A review item as the calling reviewer may see it now (`GET /v1/reviews/{review_id}`).
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct ReviewView {
    /// Review id.
    pub review_id: String,
    /// The answer's request id.
    pub request_id: String,
    /// When it was routed, ms since the Unix epoch.
    pub created_ms: u64,
    /// `pending` or `reviewed`.
    #[schema(example = "pending")]
    pub status: &'static str,
    /// Why it was routed: `abstention`, `partial` or `sample`.
    #[schema(example = "partial")]
    pub route: &'static str,
    /// The asker's `sub`.
    pub asker: String,
    /// The question.
    pub question: String,
    /// `answered` or `abstained`.
    pub outcome: &'static str,
    /// Whether claims were withheld from the answer.
    pub partial: bool,
    /// The abstention, if it abstained.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub abstention: Option<AbstentionView>,
    /// The ACL epoch the answer was validated against.
    pub acl_epoch: u64,
    /// Whether the generator's text (claims, citations as written, notes) is shown.
    pub generated_text: TextAccess,
    /// The final context.
    pub sources: Vec<SourceView>,
    /// Every claim of every attempt.
    pub claims: Vec<ClaimView>,
    /// The attempts.
    pub attempts: Vec<AttemptView>,
    /// Milliseconds per stage.
    pub stages_ms: BTreeMap<String, f64>,
    /// Verdicts, oldest first.
    pub verdicts: Vec<VerdictView>,
}

/// One item of a page: no text taken from documents.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct SummaryView {
    /// Review id.
    pub review_id: String,
    /// When it was routed, ms since the Unix epoch.
    pub created_ms: u64,
    /// `pending` or `reviewed`.
    pub status: &'static str,
    /// `abstention`, `partial` or `sample`.
    pub route: &'static str,
    /// The asker's `sub`.
    pub asker: String,
    /// The question.
    pub question: String,
    /// `answered` or `abstained`.
    pub outcome: &'static str,
    /// The abstention reason, if it abstained.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub reason: Option<String>,
    /// Whether claims were withheld from the answer.
    pub partial: bool,
    /// Claims the generator produced (all attempts).
    pub claims: usize,
    /// Verdicts given.
    pub verdicts: u32,
}

/// A page of the tenant's review queue, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct PageView {
    /// The items.
    pub items: Vec<SummaryView>,
    /// Pass as `cursor` for the next (older) page; absent on the last page. Opaque.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub next_cursor: Option<String>,
}

fn outcome(item: &ReviewItem) -> &'static str {
    if item.answered { "answered" } else { "abstained" }
}

fn status(verdicts: usize) -> ReviewStatus {
    if verdicts == 0 { ReviewStatus::Pending } else { ReviewStatus::Reviewed }
}

/// The page of `summaries` (at most `limit` were asked for).
pub fn page(summaries: Vec<Summary>, limit: usize) -> PageView {
    let next_cursor = (summaries.len() >= limit).then(|| summaries.last().map(|last| last.seq.to_string())).flatten();
    let items = summaries
        .into_iter()
        .map(|Summary { seq: _, item, verdicts }| SummaryView {
            outcome: outcome(&item),
            status: status(verdicts as usize).as_str(),
            route: item.route.as_str(),
            reason: item.abstention.as_ref().map(|abstention| abstention.reason.clone()),
            claims: item.claims.len(),
            review_id: item.review_id,
            created_ms: item.created_ms,
            asker: item.asker,
            question: item.question,
            partial: item.partial,
            verdicts,
        })
        .collect();
    PageView { items, next_cursor }
}

/// The sequence a cursor of [`page`] names.
pub fn parse_cursor(cursor: &str) -> ReviewResult<u64> {
    if cursor.is_empty() || cursor.len() > 20 || !cursor.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(ReviewError::InvalidCursor);
    }
    cursor.parse::<u64>().ok().filter(|seq| *seq > 0).ok_or(ReviewError::InvalidCursor)
}

/// What one reviewer may read of an item, now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    /// Per source (same order): readable, and its text still stored.
    pub sources: Vec<bool>,
    /// Whether the generator's text is shown (every source readable, the text stored).
    pub text: TextAccess,
}

/// Asks the backend what `reviewer` may read of `stored`'s sources now.
pub async fn access(reader: &dyn ReadSide, reviewer: &Principal, stored: &StoredItem) -> ReviewResult<Access> {
    let chunks: Vec<Arc<Chunk>> = stored
        .item
        .sources
        .iter()
        .map(|source| {
            Arc::new(Chunk {
                id: ChunkId::from_bytes(source.chunk_id),
                tenant: reviewer.tenant.clone(),
                doc_id: source.doc_id.clone(),
                doc_version: source.doc_version,
                doc_ordinal: source.doc_ordinal,
                ordinal: source.chunk_ordinal,
                start: source.start as usize,
                end: source.end as usize,
                title: String::new(),
                text: String::new(),
                sentence_vectors: None,
                layout: None,
            })
        })
        .collect();
    let authorization = reader.authorization(reviewer, &chunks).await?;
    let sources: Vec<bool> = chunks
        .iter()
        .zip(&stored.item.sources)
        .map(|(chunk, source)| {
            authorization.allows(reviewer, chunk)
                && stored
                    .sources
                    .get(&source.doc_id)
                    .is_some_and(|texts| texts.iter().any(|text| text.label == source.label))
        })
        .collect();
    let shown = stored.generated.is_some() && sources.iter().all(|readable| *readable);
    Ok(Access { sources, text: if shown { TextAccess::Shown } else { TextAccess::Withheld } })
}

/// `stored` as `reviewer` may see it under `access` ([`access`]); a document named in a verdict
/// is shown when the reviewer may read it now.
pub async fn view(
    reader: &dyn ReadSide,
    reviewer: &Principal,
    stored: StoredItem,
    access: &Access,
) -> ReviewResult<ReviewView> {
    let StoredItem { seq: _, item, sources: texts, generated, verdicts } = stored;
    let shown = access.text == TextAccess::Shown;
    let generated = generated.filter(|_| shown);
    let readable: BTreeSet<&str> = item
        .sources
        .iter()
        .zip(&access.sources)
        .filter(|(_, readable)| **readable)
        .map(|(source, _)| source.label.as_str())
        .collect();
    let text_of = |label: &str| -> Option<(&str, &str, u64)> {
        let source = item.sources.iter().find(|source| source.label == label)?;
        let text = texts.get(&source.doc_id)?.iter().find(|text| text.label == label)?;
        Some((text.text.as_str(), text.title.as_str(), source.start))
    };
    let sources = item
        .sources
        .iter()
        .map(|source| match text_of(&source.label).filter(|_| readable.contains(source.label.as_str())) {
            Some((text, title, _)) => SourceView {
                label: source.label.clone(),
                readable: true,
                withheld: None,
                chunk_id: Some(hex::encode(source.chunk_id)),
                doc_id: Some(source.doc_id.clone()),
                doc_version: Some(source.doc_version),
                start: Some(source.start),
                end: Some(source.end),
                title: Some(title.to_owned()),
                text: Some(text.to_owned()),
            },
            None => SourceView {
                label: source.label.clone(),
                readable: false,
                withheld: Some(NOT_READABLE),
                chunk_id: None,
                doc_id: None,
                doc_version: None,
                start: None,
                end: None,
                title: None,
                text: None,
            },
        })
        .collect();
    let claims = item
        .claims
        .iter()
        .enumerate()
        .map(|(index, claim)| {
            let written = generated.as_ref().and_then(|generated| generated.claims.get(index));
            let citations = if claim.returned {
                claim
                    .citations
                    .iter()
                    .map(|citation| {
                        let quote = text_of(&citation.label)
                            .filter(|_| readable.contains(citation.label.as_str()))
                            .and_then(|(text, _, start)| {
                                let from = usize::try_from(citation.quote_start.checked_sub(start)?).ok()?;
                                let to = usize::try_from(citation.quote_end.checked_sub(start)?).ok()?;
                                Some(text.chars().skip(from).take(to.saturating_sub(from)).collect::<String>())
                            });
                        CitationView {
                            label: citation.label.clone(),
                            quote_start: quote.as_ref().map(|_| citation.quote_start),
                            quote_end: quote.as_ref().map(|_| citation.quote_end),
                            quote,
                        }
                    })
                    .collect()
            } else {
                written
                    .map(|written| {
                        written
                            .citations
                            .iter()
                            .map(|citation| CitationView {
                                label: citation.label.clone(),
                                quote_start: None,
                                quote_end: None,
                                quote: citation.quote.clone(),
                            })
                            .collect()
                    })
                    .unwrap_or_default()
            };
            ClaimView {
                index: u32::try_from(index).unwrap_or(u32::MAX),
                attempt: claim.attempt,
                position: claim.position,
                status: if claim.returned { "returned" } else { "rejected" },
                codes: claim.codes.clone(),
                anchored: claim.anchored,
                text: written.and_then(|written| written.text.clone()),
                answer: written.and_then(|written| written.answer.clone()),
                citations,
            }
        })
        .collect();
    let attempts = item
        .attempts
        .iter()
        .map(|attempt| {
            let (outcome, reason) = match &attempt.outcome {
                None => (None, None),
                Some(AttemptOutcome::Answered) => (Some("answered"), None),
                Some(AttemptOutcome::Unanswerable) => (Some("unanswerable"), None),
                Some(AttemptOutcome::Failed(reason)) => (Some("failed"), Some(reason.clone())),
            };
            AttemptView {
                attempt: attempt.number,
                shown: attempt.shown.clone(),
                outcome,
                reason,
                codes: attempt.codes.clone(),
            }
        })
        .collect();
    let mut verdict_views = Vec::with_capacity(verdicts.len());
    for verdict in &verdicts {
        let abstention = match &verdict.abstention {
            None => None,
            Some(judged) => {
                let doc_id = match &judged.doc_id {
                    Some(doc_id) if reader.document(reviewer, doc_id).await?.is_some() => Some(doc_id.clone()),
                    _ => None,
                };
                Some(AbstentionVerdictView { verdict: judged.label.as_str(), doc_id })
            }
        };
        verdict_views.push(VerdictView {
            reviewer: verdict.reviewer.clone(),
            at_ms: verdict.at_ms,
            claims: verdict
                .claims
                .iter()
                .map(|claim| ClaimVerdictView { index: claim.index, verdict: claim.label.as_str() })
                .collect(),
            abstention,
            note: verdict.note.clone().filter(|_| shown),
        });
    }
    Ok(ReviewView {
        outcome: outcome(&item),
        status: status(verdicts.len()).as_str(),
        route: item.route.as_str(),
        review_id: item.review_id,
        request_id: item.request_id,
        created_ms: item.created_ms,
        asker: item.asker,
        question: item.question,
        partial: item.partial,
        abstention: item.abstention.map(AbstentionView::from),
        acl_epoch: item.acl_epoch,
        generated_text: access.text,
        sources,
        claims,
        attempts,
        stages_ms: item.stages_ms,
        verdicts: verdict_views,
    })
}

#[cfg(test)]
mod tests;
