use super::*;

#[test]
fn stale_until_first_poll_then_fresh_within_the_bound_only() {
    let status = ReplicaStatus::new(Duration::from_millis(100));
    status.require_lease(false);
    let start = status.started;
    assert!(!status.is_fresh(start));
    status.record_poll(start + Duration::from_millis(10), 5, 5);
    assert!(status.is_fresh(start + Duration::from_millis(100)));
    assert!(!status.is_fresh(start + Duration::from_millis(111)));
}

#[test]
fn with_leases_on_it_serves_only_while_its_own_count_of_the_lease_runs() {
    let status = ReplicaStatus::new(Duration::from_secs(10));
    let start = status.started;
    status.record_poll(start, 5, 5);
    assert!(!status.is_fresh(start), "in sync but never leased");
    // Granted 2 s from when the renewal was sent (at 1 s), less a 200 ms margin.
    status.extend_lease(start + Duration::from_secs(1), Duration::from_secs(2), Duration::from_millis(200));
    assert!(status.is_fresh(start + Duration::from_millis(2_700)));
    assert!(!status.is_fresh(start + Duration::from_millis(2_800)), "the margin ends it before the primary does");
    // An older grant never shortens it.
    status.extend_lease(start, Duration::from_secs(2), Duration::from_millis(200));
    assert!(status.is_fresh(start + Duration::from_millis(2_700)));
    // Divergence drops the lease with the generation.
    let generation = status.generation();
    status.mark_stale();
    assert!(status.generation() > generation);
    status.record_poll(start + Duration::from_secs(2), 6, 6);
    assert!(!status.is_fresh(start + Duration::from_secs(2)));
}

/// Records what a primary hands its replicas.
#[derive(Default)]
struct Capture {
    staged: std::sync::Mutex<Vec<Vec<crate::storage::EncodedDocument>>>,
    committed: std::sync::Mutex<Vec<(Vec<crate::acl::AclChange>, Vec<crate::storage::EncodedDocument>)>>,
}

impl crate::embedded::ChangeSink for Capture {
    fn committed(&self, committed: crate::embedded::Committed<'_>) {
        let entry = (committed.changes.to_vec(), committed.documents.to_vec());
        self.committed.lock().unwrap().push(entry);
    }

    fn staged(&self, documents: &[crate::storage::EncodedDocument]) {
        self.staged.lock().unwrap().push(documents.to_vec());
    }
}

fn engine() -> Arc<Engine> {
    let mut settings = Settings::defaults();
    settings.embedder.dim = 16;
    let params = crate::embedded::EngineParams::from_settings(&settings, 16);
    Engine::start(params, Arc::new(crate::embed::HashedEmbedder::new(16))).unwrap()
}

fn chunks_of(engine: &Engine, ordinals: &RoaringBitmap) -> usize {
    engine
        .shards()
        .iter()
        .map(|shard| ordinals.iter().map(|ordinal| shard.chunks_of(ordinal).len()).sum::<usize>())
        .sum()
}

#[actix_rt::test]
async fn a_batch_indexed_ahead_is_published_once_and_a_late_hint_is_never_indexed_again() {
    let (primary, replica) = (engine(), engine());
    let capture = Arc::new(Capture::default());
    primary.attach_sink(Arc::clone(&capture) as Arc<dyn crate::embedded::ChangeSink>);
    let input = |doc_id: &str| crate::retrieval::DocumentInput {
        doc_id: doc_id.into(),
        title: String::new(),
        text: "Hotel stays are reimbursed up to 180 euros per night. Receipts are required for every stay.".into(),
        acl: crate::domain::DocAcl { groups: vec!["all".into()], users: vec![] },
        version: None,
        layout: None,
    };
    primary.upsert("t", vec![input("a"), input("b")]).await.unwrap();
    let hinted = capture.staged.lock().unwrap()[0].clone();
    let (changes, documents) = capture.committed.lock().unwrap()[0].clone();
    let shipped: RoaringBitmap = documents.iter().map(|document| document.ordinal).collect();
    let expected = chunks_of(&primary, &shipped);
    assert!(expected > 0);
    let mut ahead = Ahead::default();
    ahead.start(&replica, hinted.clone());
    let indexed = ahead.take(&shipped).await.unwrap();
    assert_eq!(indexed, shipped, "the hint was indexed ahead");
    replica.apply_replicated(&changes, &documents, &indexed).await.unwrap();
    assert_eq!(chunks_of(&replica, &shipped), expected, "published once, never indexed twice");
    // The same hint arriving after its change (a stream that sent the change first).
    ahead.start(&replica, hinted);
    assert!(ahead.batches.is_empty(), "a hint below the published ordinals is ignored");
    assert_eq!(chunks_of(&replica, &shipped), expected);
    // Without a hint the change alone carries the content.
    primary.upsert("t", vec![input("c")]).await.unwrap();
    let (changes, documents) = capture.committed.lock().unwrap()[1].clone();
    let shipped: RoaringBitmap = documents.iter().map(|document| document.ordinal).collect();
    replica.apply_replicated(&changes, &documents, &RoaringBitmap::new()).await.unwrap();
    assert_eq!(chunks_of(&replica, &shipped), chunks_of(&primary, &shipped));
}

#[test]
fn a_poll_that_leaves_the_replica_behind_does_not_refresh() {
    let status = ReplicaStatus::new(Duration::from_millis(100));
    status.require_lease(false);
    let start = status.started;
    status.record_poll(start, 5, 5);
    status.record_poll(start + Duration::from_millis(90), 5, 7);
    assert!(!status.is_fresh(start + Duration::from_millis(150)));
}
