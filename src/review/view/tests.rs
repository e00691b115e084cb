//! The review view under a reviewer's own access (a source not readable shows only its label,
//! and no generated text), and page cursors.

use super::*;
use crate::retrieval::{Authorization, DocumentView, ReadPath, RetrievalResult};
use crate::review::item::tests::sample;
use crate::review::item::{ClaimLabel, ClaimVerdict, Verdict};

/// Reads every ordinal but 12 (the sample's second source) and no document.
struct AllButTwelve;

impl Authorization for AllButTwelve {
    fn epoch(&self) -> u64 {
        1
    }

    fn allows(&self, _: &Principal, chunk: &Chunk) -> bool {
        chunk.doc_ordinal != 12
    }
}

struct Reader;

#[async_trait::async_trait]
impl ReadSide for Reader {
    async fn scope(&self, _: &Principal) -> RetrievalResult<crate::acl::AuthorizationScope> {
        unreachable!("the review view never asks for a scope or a read path")
    }
    fn read_path(&self) -> Arc<ReadPath> {
        unreachable!("the review view never asks for a scope or a read path")
    }
    async fn authorization(&self, _: &Principal, _: &[Arc<Chunk>]) -> RetrievalResult<Arc<dyn Authorization>> {
        Ok(Arc::new(AllButTwelve))
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

#[actix_web::test]
async fn a_review_and_a_page_show_only_what_the_reviewer_may_read() {
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
    let access = access(&Reader, &rita, &stored).await.unwrap();
    let json = serde_json::to_value(view(&Reader, &rita, stored.clone(), &access).await.unwrap()).unwrap();
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
    let json = serde_json::to_value(page(vec![Summary { seq: 9, item: new.item, verdicts: 1 }], 1)).unwrap();
    assert_eq!((json["next_cursor"].as_str(), json["items"][0]["status"].as_str()), (Some("9"), Some("reviewed")));
}

#[test]
fn cursors_are_positive_integers_only() {
    assert_eq!(parse_cursor("17").unwrap(), 17);
    for bad in ["", "0", "-1", "1.5", "abc", "99999999999999999999999", " 1"] {
        assert_eq!(parse_cursor(bad).unwrap_err().code(), "invalid_cursor", "{bad:?}");
    }
}
