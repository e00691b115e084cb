//! The embedded review store against its invariants: items read back whole across a reopen,
//! pages and cursors, eviction and retention, and purges of dead document versions.

use std::sync::Mutex;

use super::*;
use crate::review::item::tests::sample;
use crate::review::item::{ClaimLabel, ClaimVerdict};

/// Live versions set by the test.
#[derive(Default)]
struct Versions(Mutex<BTreeMap<(String, String), u64>>);

impl Versions {
    fn set(&self, tenant: &str, doc_id: &str, version: Option<u64>) {
        let mut live = self.0.lock().unwrap();
        match version {
            Some(version) => live.insert((tenant.into(), doc_id.into()), version),
            None => live.remove(&(tenant.to_owned(), doc_id.to_owned())),
        };
    }
}

impl Liveness for Versions {
    fn live_version(&self, tenant: &str, doc_id: &str) -> Option<u64> {
        self.0.lock().unwrap().get(&(tenant.to_owned(), doc_id.to_owned())).copied()
    }
}

fn item(tenant: &str, created_ms: u64) -> NewItem {
    let mut new = sample();
    new.tenant = tenant.to_owned();
    new.item.review_id = crate::review::new_review_id();
    new.item.created_ms = created_ms;
    new
}

fn live_sample(versions: &Versions) {
    versions.set("acme", "travel-policy", Some(3));
    versions.set("acme", "london-rates", Some(1));
}

fn verdict() -> Verdict {
    Verdict {
        reviewer: "rita".into(),
        at_ms: 5,
        claims: vec![ClaimVerdict { index: 0, label: ClaimLabel::Supported }],
        abstention: None,
        note: None,
    }
}

async fn store(directory: Option<&Path>, versions: Arc<Versions>) -> EmbeddedReviews {
    let directory = directory.map(Path::to_owned);
    tokio::task::spawn_blocking(move || EmbeddedReviews::open(directory.as_deref(), versions).unwrap()).await.unwrap()
}

#[tokio::test]
async fn an_item_is_read_back_whole_and_survives_reopening() {
    let directory = tempfile::tempdir().unwrap();
    let versions = Arc::new(Versions::default());
    live_sample(&versions);
    let reviews = store(Some(directory.path()), versions.clone()).await;
    let new = item("acme", 10);
    assert_eq!(reviews.insert(vec![new.clone()], 100).await.unwrap(), Inserted { written: 1, evicted: 0 });
    assert!(reviews.add_verdict("acme", &new.item.review_id, &verdict(), 100).await.unwrap());
    drop(reviews);
    let reviews = store(Some(directory.path()), versions).await;
    let stored = reviews.get("acme", &new.item.review_id).await.unwrap().expect("stored");
    assert_eq!(
        (stored.seq, &stored.item, &stored.sources, stored.generated.as_ref(), stored.verdicts.as_slice()),
        (1, &new.item, &new.sources, Some(&new.generated), [verdict()].as_slice())
    );
    assert!(reviews.get("globex", &new.item.review_id).await.unwrap().is_none(), "another tenant's id");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(directory.path().join(REVIEWS_FILE)).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[tokio::test]
async fn pages_go_newest_first_by_status_and_a_cursor_sees_no_later_write() {
    let versions = Arc::new(Versions::default());
    live_sample(&versions);
    let reviews = store(None, versions).await;
    let first: Vec<NewItem> = (0..5).map(|index| item("acme", index)).collect();
    reviews.insert(first.clone(), 100).await.unwrap();
    reviews.insert(vec![item("globex", 9)], 100).await.unwrap();
    reviews.add_verdict("acme", &first[1].item.review_id, &verdict(), 100).await.unwrap();
    let seqs = |page: Vec<Summary>| page.into_iter().map(|summary| summary.seq).collect::<Vec<_>>();
    let page = reviews.page("acme", None, None, 2).await.unwrap();
    assert_eq!(seqs(page), [5, 4]);
    // Written after the first page was read: above the cursor, never inside a later page.
    reviews.insert(vec![item("acme", 20)], 100).await.unwrap();
    assert_eq!(seqs(reviews.page("acme", None, Some(4), 10).await.unwrap()), [3, 2, 1]);
    assert_eq!(seqs(reviews.page("acme", Some(ReviewStatus::Pending), None, 10).await.unwrap()), [6, 5, 4, 3, 1]);
    assert_eq!(seqs(reviews.page("acme", Some(ReviewStatus::Reviewed), None, 10).await.unwrap()), [2]);
    assert_eq!(seqs(reviews.page("globex", None, None, 10).await.unwrap()), [1]);
}

#[tokio::test]
async fn the_oldest_items_go_first_beyond_the_tenant_bound_and_past_retention() {
    let versions = Arc::new(Versions::default());
    live_sample(&versions);
    let reviews = store(None, versions).await;
    let items: Vec<NewItem> = (0..5).map(|index| item("acme", 100 + index)).collect();
    let inserted = reviews.insert(items.clone(), 3).await.unwrap();
    assert_eq!(inserted, Inserted { written: 5, evicted: 2 });
    assert!(reviews.get("acme", &items[1].item.review_id).await.unwrap().is_none());
    assert!(reviews.get("acme", &items[2].item.review_id).await.unwrap().is_some());
    reviews.insert(vec![item("globex", 100)], 3).await.unwrap();
    assert_eq!(reviews.expire(104).await.unwrap(), 3, "acme 102 and 103, globex 100");
    let left: Vec<u64> =
        reviews.page("acme", None, None, 10).await.unwrap().into_iter().map(|summary| summary.seq).collect();
    assert_eq!(left, [5]);
    // The count followed: three more fit before the next eviction.
    let inserted = reviews.insert((0..2).map(|index| item("acme", 200 + index)).collect(), 3).await.unwrap();
    assert_eq!(inserted.evicted, 0);
}

#[tokio::test]
async fn a_dead_document_version_leaves_no_text_written_before_or_after() {
    let versions = Arc::new(Versions::default());
    live_sample(&versions);
    let reviews = store(None, versions.clone()).await;
    let before = item("acme", 1);
    reviews.insert(vec![before.clone()], 100).await.unwrap();
    // Deleted: the purge takes its texts and the generated text of the items that had it.
    versions.set("acme", "london-rates", None);
    assert_eq!(reviews.purge_documents("acme", &["london-rates".into(), "unknown".into()]).await.unwrap(), 1);
    assert_eq!(reviews.purge_documents("acme", &["london-rates".into()]).await.unwrap(), 0, "nothing left");
    let stored = reviews.get("acme", &before.item.review_id).await.unwrap().unwrap();
    assert_eq!(stored.sources.keys().collect::<Vec<_>>(), ["travel-policy"]);
    assert_eq!(stored.generated, None);
    assert_eq!(stored.item, before.item, "ids stay");
    // Written after the delete: its text never lands.
    let after = item("acme", 2);
    reviews.insert(vec![after.clone()], 100).await.unwrap();
    let stored = reviews.get("acme", &after.item.review_id).await.unwrap().unwrap();
    assert_eq!((stored.sources.len(), stored.generated.is_none()), (1, true));
    // Superseded, with the purge lost (a crash): the sweep takes it.
    versions.set("acme", "travel-policy", Some(4));
    assert_eq!(reviews.sweep_dead_documents().await.unwrap(), 2);
    for id in [&before.item.review_id, &after.item.review_id] {
        assert!(reviews.get("acme", id).await.unwrap().unwrap().sources.is_empty());
    }
}
