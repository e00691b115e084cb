//! Wire types of `/v1/reviews` responses: mirrors of [`crate::review::view`] that carry the
//! OpenAPI schema, built from them with `From`.
//!
//! Invariant: each type serializes exactly as the review-layer type it mirrors (same fields,
//! order, names and skip rules); the conversions destructure their source without `..`.

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::ToSchema;

use crate::review::view as layer;

/// Whether the generator's text is shown to this reviewer: `shown` only when the reviewer may
/// read every source of the item (and the text was not purged), else `withheld`.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TextAccess {
    /// Shown.
    Shown,
    /// Withheld.
    Withheld,
}

impl From<layer::TextAccess> for TextAccess {
    fn from(access: layer::TextAccess) -> Self {
        match access {
            layer::TextAccess::Shown => Self::Shown,
            layer::TextAccess::Withheld => Self::Withheld,
        }
    }
}

/// One source of the answer's final context. A source the reviewer may not read now (never
/// granted, revoked, deleted or superseded since) carries only `label`, `readable: false` and
/// `withheld`: no id, title, offsets or length.
#[derive(Debug, Serialize, ToSchema)]
pub struct SourceView {
    /// Its label (`S1`…).
    pub label: String,
    /// Whether the reviewer may read it now.
    pub readable: bool,
    /// `not readable by you`, when withheld.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub withheld: Option<String>,
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

impl From<layer::SourceView> for SourceView {
    fn from(source: layer::SourceView) -> Self {
        let layer::SourceView { label, readable, withheld, chunk_id, doc_id, doc_version, start, end, title, text } =
            source;
        Self {
            label,
            readable,
            withheld: withheld.map(str::to_owned),
            chunk_id,
            doc_id,
            doc_version,
            start,
            end,
            title,
            text,
        }
    }
}

/// One citation of a claim.
#[derive(Debug, Serialize, ToSchema)]
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

impl From<layer::CitationView> for CitationView {
    fn from(citation: layer::CitationView) -> Self {
        let layer::CitationView { label, quote_start, quote_end, quote } = citation;
        Self { label, quote_start, quote_end, quote }
    }
}

/// One claim the generator produced, returned or rejected.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClaimView {
    /// Its index: what a verdict names.
    pub index: u32,
    /// The attempt that produced it (1, or 2 for the repair).
    pub attempt: u32,
    /// Its position in that attempt's output (1-based).
    pub position: u32,
    /// `returned` or `rejected`.
    #[schema(example = "rejected")]
    pub status: String,
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

impl From<layer::ClaimView> for ClaimView {
    fn from(claim: layer::ClaimView) -> Self {
        let layer::ClaimView { index, attempt, position, status, codes, anchored, text, answer, citations } = claim;
        Self {
            index,
            attempt,
            position,
            status: status.to_owned(),
            codes,
            anchored,
            text,
            answer,
            citations: citations.into_iter().map(CitationView::from).collect(),
        }
    }
}

/// One generation attempt.
#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptView {
    /// 1, or 2 for the repair.
    pub attempt: u32,
    /// Labels shown to the generator.
    pub shown: Vec<String>,
    /// `answered`, `unanswerable` or `failed`; absent when its output was never judged.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub outcome: Option<String>,
    /// The reason a failed attempt would abstain with.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub reason: Option<String>,
    /// Rejection codes of the whole output.
    pub codes: Vec<String>,
}

impl From<layer::AttemptView> for AttemptView {
    fn from(attempt: layer::AttemptView) -> Self {
        let layer::AttemptView { attempt, shown, outcome, reason, codes } = attempt;
        Self { attempt, shown, outcome: outcome.map(str::to_owned), reason, codes }
    }
}

/// A claim's verdict.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClaimVerdictView {
    /// The claim's index.
    pub index: u32,
    /// `supported`, `partially_supported`, `unsupported` or `wrong_citation`.
    pub verdict: String,
}

impl From<layer::ClaimVerdictView> for ClaimVerdictView {
    fn from(verdict: layer::ClaimVerdictView) -> Self {
        let layer::ClaimVerdictView { index, verdict } = verdict;
        Self { index, verdict: verdict.to_owned() }
    }
}

/// An abstention's verdict.
#[derive(Debug, Serialize, ToSchema)]
pub struct AbstentionVerdictView {
    /// `correct_abstention` or `should_have_answered`.
    pub verdict: String,
    /// The document named, when the reviewer may read it now.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub doc_id: Option<String>,
}

impl From<layer::AbstentionVerdictView> for AbstentionVerdictView {
    fn from(verdict: layer::AbstentionVerdictView) -> Self {
        let layer::AbstentionVerdictView { verdict, doc_id } = verdict;
        Self { verdict: verdict.to_owned(), doc_id }
    }
}

/// One reviewer's verdict (kept with the reviewer and the time: an audit trail).
#[derive(Debug, Serialize, ToSchema)]
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

impl From<layer::VerdictView> for VerdictView {
    fn from(verdict: layer::VerdictView) -> Self {
        let layer::VerdictView { reviewer, at_ms, claims, abstention, note } = verdict;
        Self {
            reviewer,
            at_ms,
            claims: claims.into_iter().map(ClaimVerdictView::from).collect(),
            abstention: abstention.map(AbstentionVerdictView::from),
            note,
        }
    }
}

/// The abstention of an item: reason and diagnostic codes.
#[derive(Debug, Serialize, ToSchema)]
pub struct AbstentionView {
    /// Reason code.
    pub reason: String,
    /// Diagnostic codes.
    pub diagnostics: Vec<String>,
}

impl From<layer::AbstentionView> for AbstentionView {
    fn from(abstention: layer::AbstentionView) -> Self {
        let layer::AbstentionView { reason, diagnostics } = abstention;
        Self { reason, diagnostics }
    }
}

/// A review item as the calling reviewer may see it now (`GET /v1/reviews/{review_id}`).
#[derive(Debug, Serialize, ToSchema)]
pub struct ReviewView {
    /// Review id.
    pub review_id: String,
    /// The answer's request id.
    pub request_id: String,
    /// When it was routed, ms since the Unix epoch.
    pub created_ms: u64,
    /// `pending` or `reviewed`.
    #[schema(example = "pending")]
    pub status: String,
    /// Why it was routed: `abstention`, `partial` or `sample`.
    #[schema(example = "partial")]
    pub route: String,
    /// The asker's `sub`.
    pub asker: String,
    /// The question.
    pub question: String,
    /// `answered` or `abstained`.
    pub outcome: String,
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

impl From<layer::ReviewView> for ReviewView {
    fn from(view: layer::ReviewView) -> Self {
        let layer::ReviewView {
            review_id,
            request_id,
            created_ms,
            status,
            route,
            asker,
            question,
            outcome,
            partial,
            abstention,
            acl_epoch,
            generated_text,
            sources,
            claims,
            attempts,
            stages_ms,
            verdicts,
        } = view;
        Self {
            review_id,
            request_id,
            created_ms,
            status: status.to_owned(),
            route: route.to_owned(),
            asker,
            question,
            outcome: outcome.to_owned(),
            partial,
            abstention: abstention.map(AbstentionView::from),
            acl_epoch,
            generated_text: generated_text.into(),
            sources: sources.into_iter().map(SourceView::from).collect(),
            claims: claims.into_iter().map(ClaimView::from).collect(),
            attempts: attempts.into_iter().map(AttemptView::from).collect(),
            stages_ms,
            verdicts: verdicts.into_iter().map(VerdictView::from).collect(),
        }
    }
}

/// One item of a page: no text taken from documents.
#[derive(Debug, Serialize, ToSchema)]
pub struct SummaryView {
    /// Review id.
    pub review_id: String,
    /// When it was routed, ms since the Unix epoch.
    pub created_ms: u64,
    /// `pending` or `reviewed`.
    pub status: String,
    /// `abstention`, `partial` or `sample`.
    pub route: String,
    /// The asker's `sub`.
    pub asker: String,
    /// The question.
    pub question: String,
    /// `answered` or `abstained`.
    pub outcome: String,
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

impl From<layer::SummaryView> for SummaryView {
    fn from(summary: layer::SummaryView) -> Self {
        let layer::SummaryView {
            review_id,
            created_ms,
            status,
            route,
            asker,
            question,
            outcome,
            reason,
            partial,
            claims,
            verdicts,
        } = summary;
        Self {
            review_id,
            created_ms,
            status: status.to_owned(),
            route: route.to_owned(),
            asker,
            question,
            outcome: outcome.to_owned(),
            reason,
            partial,
            claims,
            verdicts,
        }
    }
}

/// A page of the tenant's review queue, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct PageView {
    /// The items.
    pub items: Vec<SummaryView>,
    /// Pass as `cursor` for the next (older) page; absent on the last page. Opaque.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub next_cursor: Option<String>,
}

impl From<layer::PageView> for PageView {
    fn from(page: layer::PageView) -> Self {
        let layer::PageView { items, next_cursor } = page;
        Self { items: items.into_iter().map(SummaryView::from).collect(), next_cursor }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Principal;
    use crate::retrieval::{Authorization, DocumentView, ReadPath, RetrievalResult};
    use crate::review::item::tests::sample;
    use crate::review::item::{ClaimLabel, ClaimVerdict, StoredItem, Summary, Verdict};

    /// Reads every ordinal but 12 (the sample's second source) and no document.
    struct AllButTwelve;

    impl Authorization for AllButTwelve {
        fn epoch(&self) -> u64 {
            1
        }

        fn allows(&self, _: &Principal, chunk: &crate::domain::Chunk) -> bool {
            chunk.doc_ordinal != 12
        }
    }

    struct Reader;

    #[async_trait::async_trait]
    impl crate::retrieval::ReadSide for Reader {
        async fn scope(&self, _: &Principal) -> RetrievalResult<crate::acl::AuthorizationScope> {
            unreachable!("the review view never asks for a scope or a read path")
        }
        fn read_path(&self) -> std::sync::Arc<ReadPath> {
            unreachable!("the review view never asks for a scope or a read path")
        }
        async fn authorization(
            &self,
            _: &Principal,
            _: &[std::sync::Arc<crate::domain::Chunk>],
        ) -> RetrievalResult<std::sync::Arc<dyn Authorization>> {
            Ok(std::sync::Arc::new(AllButTwelve))
        }
        async fn document(&self, _: &Principal, _: &str) -> RetrievalResult<Option<DocumentView>> {
            Ok(None)
        }
        fn embedder_name(&self) -> &str {
            "none"
        }
        async fn acl_state(&self) -> RetrievalResult<(u64, String)> {
            Ok((1, String::new()))
        }
    }

    fn assert_same_json<Layer: Serialize + Clone, Contract: Serialize + From<Layer>>(
        value: Layer,
    ) -> serde_json::Value {
        let layer = serde_json::to_value(&value).unwrap();
        assert_eq!(serde_json::to_value(Contract::from(value)).unwrap(), layer);
        layer
    }

    #[actix_web::test]
    async fn a_review_and_a_page_are_sent_as_the_review_layer_serializes_them() {
        let new = sample();
        let verdict = Verdict {
            reviewer: "rita".into(),
            at_ms: 3,
            claims: vec![ClaimVerdict { index: 0, label: ClaimLabel::Supported }],
            abstention: None,
            note: Some("fine".into()),
        };
        let stored = StoredItem {
            seq: 4,
            item: new.item.clone(),
            sources: new.sources.clone(),
            generated: Some(new.generated.clone()),
            verdicts: vec![verdict],
        };
        let rita = Principal::new("acme", "rita", ["reviewers"]);
        let access = crate::review::view::access(&Reader, &rita, &stored).await.unwrap();
        let view = crate::review::view::view(&Reader, &rita, stored.clone(), &access).await.unwrap();
        let json = assert_same_json::<_, ReviewView>(view);
        // S2 (ordinal 12) is not readable: nothing of it but its label, and no generated text.
        assert_eq!(json["generated_text"], "withheld");
        assert_eq!(json["sources"][0]["doc_id"], "travel-policy");
        assert_eq!(
            json["sources"][1],
            serde_json::json!({"label": "S2", "readable": false, "withheld": "not readable by you"})
        );
        assert!(json["claims"][0].get("text").is_none() && json["verdicts"][0].get("note").is_none(), "{json}");
        // A returned claim's quote is its span of the readable source (offsets 134..157, the
        // chunk starting at 120).
        let source = &new.sources["travel-policy"][0].text;
        let quote: String = source.chars().skip(14).take(23).collect();
        assert_eq!(json["claims"][0]["citations"][0]["quote"], quote.as_str());
        let page = crate::review::view::page(vec![Summary { seq: 9, item: new.item, verdicts: 1 }], 1);
        let json = assert_same_json::<_, PageView>(page);
        assert_eq!((json["next_cursor"].as_str(), json["items"][0]["status"].as_str()), (Some("9"), Some("reviewed")));
    }
}
