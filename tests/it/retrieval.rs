//! Retrieval core: scoped hybrid search, fusion, revocation and budgeted selection over the real
//! engine (shard actors, tantivy, warrant's own HNSW graphs of `src/index/live.rs`) on the hashed
//! embedder.

use std::collections::HashSet;

use proptest::prelude::*;
use warrant::acl::AclMutation;
use warrant::retrieval::{Retriever, SelectionLimits, select_context};

use crate::support::{FakeCountingEmbedder, doc, engine, principal, settings};

#[actix_web::test]
async fn cross_tenant_near_duplicate_never_reaches_fusion() {
    let engine = engine(&settings(3));
    let text = "Hotel stays are reimbursed up to 180 euros per night in most cities.";
    engine.upsert("acme", vec![doc("travel", "Travel policy", text, &["everyone"])]).await.unwrap();
    engine
        .upsert("globex", vec![doc("travel", "Travel policy", &text.replace("180", "140"), &["everyone"])])
        .await
        .unwrap();
    let scope = engine.scope(&principal("acme", "bob", &["everyone"]));
    let retrieved = engine.retrieve(&scope, "hotel reimbursement per night").await.unwrap();
    assert!(!retrieved.candidates.is_empty());
    for candidate in &retrieved.candidates {
        assert_eq!(candidate.chunk.tenant, "acme");
        assert!(!candidate.chunk.text.contains("140"));
    }
}

#[actix_web::test]
async fn the_same_chunk_from_both_retrievers_is_one_candidate() {
    let engine = engine(&settings(2));
    engine
        .upsert(
            "acme",
            vec![doc("vacation", "Vacation", "Employees receive 28 days of paid vacation per year.", &["all"])],
        )
        .await
        .unwrap();
    let scope = engine.scope(&principal("acme", "bob", &["all"]));
    let retrieved = engine.retrieve(&scope, "paid vacation days per year").await.unwrap();
    assert_eq!(retrieved.candidates.len(), 1);
    assert_eq!(retrieved.candidates[0].retrievers(), vec![Retriever::Lexical, Retriever::Vector]);
}

#[actix_web::test]
async fn a_revoked_document_still_present_in_a_shard_is_never_returned() {
    let engine = engine(&settings(2));
    engine
        .upsert(
            "acme",
            vec![
                doc("secret", "Merger", "The merger with Initech closes in March.", &["exec"]),
                doc("public", "Picnic", "The company picnic is in June.", &["exec"]),
            ],
        )
        .await
        .unwrap();
    let exec = principal("acme", "carol", &["exec"]);
    let before = engine.retrieve(&engine.scope(&exec), "merger Initech March").await.unwrap();
    assert!(before.candidates.iter().any(|c| c.chunk.doc_id == "secret"));
    let revoke = AclMutation::Revoke { tenant: "acme".into(), doc_id: "secret".into(), groups: None, users: None };
    engine.mutate(revoke).await.unwrap();
    // The chunk is still physically in its shard (HNSW has no delete) but outside every scope.
    assert!(engine.stats().iter().map(|s| s.vectors).sum::<usize>() >= 2);
    let after = engine.retrieve(&engine.scope(&exec), "merger Initech March").await.unwrap();
    assert!(after.candidates.iter().all(|c| c.chunk.doc_id != "secret"));
}

#[actix_web::test]
async fn upsert_replaces_the_old_version_atomically() {
    let engine = engine(&settings(2));
    engine.upsert("acme", vec![doc("policy", "Policy", "The office opens at eight.", &["all"])]).await.unwrap();
    engine.upsert("acme", vec![doc("policy", "Policy", "The office opens at nine.", &["all"])]).await.unwrap();
    let scope = engine.scope(&principal("acme", "bob", &["all"]));
    let retrieved = engine.retrieve(&scope, "when does the office open").await.unwrap();
    assert_eq!(retrieved.candidates.len(), 1);
    assert_eq!(retrieved.candidates[0].chunk.doc_version, 2);
    assert!(retrieved.candidates[0].chunk.text.contains("nine"));
}

#[actix_web::test]
async fn a_failed_batch_changes_nothing() {
    let engine = engine(&settings(2));
    let epoch = engine.acl().epoch();
    let bad = vec![doc("fine", "Fine", "Good text.", &["all"]), doc("", "Bad", "No id.", &["all"])];
    assert!(engine.upsert("acme", bad).await.is_err());
    let duplicate = vec![doc("same", "A", "One.", &["all"]), doc("same", "B", "Two.", &["all"])];
    assert!(engine.upsert("acme", duplicate).await.is_err());
    assert_eq!(engine.acl().epoch(), epoch);
    let retrieved =
        engine.retrieve(&engine.scope(&principal("acme", "bob", &["all"])), "good text one two").await.unwrap();
    assert!(retrieved.candidates.is_empty());
}

#[actix_web::test]
async fn several_useful_chunks_over_the_budget_select_the_same_way_every_time() {
    let engine = engine(&settings(3));
    let documents = (0..8)
        .map(|i| {
            doc(
                &format!("d{i}"),
                "Refunds",
                &format!("Refund rule {i}: refunds are paid within {i} days. {}", "Detail words. ".repeat(20)),
                &["all"],
            )
        })
        .collect();
    engine.upsert("acme", documents).await.unwrap();
    let scope = engine.scope(&principal("acme", "bob", &["all"]));
    let limits = SelectionLimits { top_k: 6, token_budget: 150, max_chunks_per_doc: 1 };
    let mut selections = Vec::new();
    for _ in 0..4 {
        let retrieved = engine.retrieve(&scope, "when are refunds paid").await.unwrap();
        let selection = select_context(&retrieved.candidates, limits);
        assert!(selection.tokens <= 150);
        selections.push(selection.chosen.iter().map(|c| c.chunk.id).collect::<Vec<_>>());
    }
    assert!(selections[0].len() >= 2);
    assert!(selections.windows(2).all(|pair| pair[0] == pair[1]));
}

const WORDS: &[&str] = &["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// No hit outside the scope, in both indexes and after fusion, for random corpora, ACLs and
    /// principals (including revocations and deletions).
    #[test]
    fn no_hit_outside_the_scope(
        docs in proptest::collection::vec((0usize..2, proptest::collection::vec(0usize..10, 3..12), proptest::collection::btree_set(0usize..4, 0..3), any::<bool>()), 1..14),
        tenant in 0usize..2,
        groups in proptest::collection::btree_set(0usize..4, 0..3),
        query in proptest::collection::vec(0usize..10, 1..4),
        revoke in proptest::collection::vec(any::<bool>(), 14),
    ) {
        actix_rt::System::new().block_on(async move {
            let engine = engine(&settings(3));
            let tenants = ["acme", "globex"];
            for (index, (doc_tenant, words, doc_groups, to_user)) in docs.iter().enumerate() {
                let text: Vec<&str> = words.iter().map(|w| WORDS[*w]).collect();
                let group_names: Vec<String> = doc_groups.iter().map(|g| format!("g{g}")).collect();
                let group_refs: Vec<&str> = group_names.iter().map(String::as_str).collect();
                let mut input = doc(&format!("d{index}"), "", &text.join(" "), &group_refs);
                if *to_user { input.acl.users.push("u".into()); }
                engine.upsert(tenants[*doc_tenant], vec![input]).await.unwrap();
            }
            for (index, (doc_tenant, ..)) in docs.iter().enumerate() {
                if revoke[index] {
                    let mutation = if index % 2 == 0 {
                        AclMutation::Revoke { tenant: tenants[*doc_tenant].into(), doc_id: format!("d{index}"), groups: None, users: None }
                    } else {
                        AclMutation::Delete { tenant: tenants[*doc_tenant].into(), doc_id: format!("d{index}") }
                    };
                    engine.mutate(mutation).await.unwrap();
                }
            }
            let group_names: Vec<String> = groups.iter().map(|g| format!("g{g}")).collect();
            let group_refs: Vec<&str> = group_names.iter().map(String::as_str).collect();
            let who = principal(tenants[tenant], "u", &group_refs);
            // Reference: the access rule applied naively to the documents.
            let allowed: HashSet<String> = docs.iter().enumerate().filter(|(index, (doc_tenant, _, doc_groups, to_user))| {
                *doc_tenant == tenant && !revoke[*index] && (*to_user || doc_groups.iter().any(|g| groups.contains(g)))
            }).map(|(index, _)| format!("d{index}")).collect();
            let scope = engine.scope(&who);
            let text: Vec<&str> = query.iter().map(|w| WORDS[*w]).collect();
            let retrieved = engine.retrieve(&scope, &text.join(" ")).await.unwrap();
            for candidate in &retrieved.candidates {
                assert_eq!(candidate.chunk.tenant, tenants[tenant]);
                assert!(allowed.contains(&candidate.chunk.doc_id), "{} is outside the scope", candidate.chunk.doc_id);
            }
            // Vector search sees every allowed document (k exceeds the corpus), so nothing valid is crowded out.
            let found: HashSet<String> = retrieved.candidates.iter().filter(|c| c.vector.is_some()).map(|c| c.chunk.doc_id.clone()).collect();
            assert_eq!(found, allowed);
        });
    }
}

#[actix_web::test]
async fn the_query_cache_is_never_shared_across_tenants() {
    let settings = settings(2);
    let embedder = FakeCountingEmbedder::new(settings.embedder.dim);
    let engine = warrant::embedded::Engine::start(
        warrant::embedded::EngineParams::from_settings(&settings, settings.embedder.dim),
        embedder.clone(),
    )
    .unwrap();
    for tenant in ["acme", "globex"] {
        engine
            .upsert(tenant, vec![doc("merger", "Plans", "The merger with Initech closes in May.", &["all"])])
            .await
            .unwrap();
    }
    let count = || embedder.count();
    let ask = |tenant: &'static str| {
        let engine = engine.clone();
        async move { engine.retrieve(&engine.scope(&principal(tenant, "u", &["all"])), "Initech merger date?").await }
    };
    let before = count();
    ask("acme").await.unwrap();
    assert_eq!(count(), before + 1, "a first question is embedded");
    ask("acme").await.unwrap();
    assert_eq!(count(), before + 1, "the same tenant asking again hits the cache");
    // A hit would answer globex faster, telling it what acme asked: it must miss.
    ask("globex").await.unwrap();
    assert_eq!(count(), before + 2, "another tenant's identical question is embedded afresh");
}

/// Regression: the query cache was keyed by tenant only, so one user could time whether another
/// user of the same tenant had just asked a question. It is keyed by principal now.
#[actix_web::test]
async fn the_query_cache_is_never_shared_between_users_of_one_tenant() {
    let settings = settings(2);
    let embedder = FakeCountingEmbedder::new(settings.embedder.dim);
    let engine = warrant::embedded::Engine::start(
        warrant::embedded::EngineParams::from_settings(&settings, settings.embedder.dim),
        embedder.clone(),
    )
    .unwrap();
    engine
        .upsert("acme", vec![doc("merger", "Plans", "The merger with Initech closes in May.", &["all"])])
        .await
        .unwrap();
    let ask = |user: &'static str| {
        let engine = engine.clone();
        async move { engine.retrieve(&engine.scope(&principal("acme", user, &["all"])), "Initech merger date?").await }
    };
    let before = embedder.count();
    ask("alice").await.unwrap();
    ask("alice").await.unwrap();
    assert_eq!(embedder.count(), before + 1, "the same user asking again hits the cache");
    ask("bob").await.unwrap();
    assert_eq!(embedder.count(), before + 2, "another user's identical question is embedded afresh");
}

/// FAKE embedder whose document batches (more than one text) wait at a gate while `closed`.
struct GatedEmbedder {
    inner: warrant::embed::HashedEmbedder,
    closed: std::sync::atomic::AtomicBool,
    entered: tokio::sync::Notify,
    open: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl warrant::embed::Embedder for GatedEmbedder {
    fn name(&self) -> &str {
        "fake-gated"
    }

    fn dimension(&self) -> usize {
        self.inner.dimension()
    }

    async fn embed(&self, texts: &[String]) -> warrant::embed::EmbedResult<Vec<Vec<f32>>> {
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            self.entered.notify_one();
            self.open.notified().await;
        }
        self.inner.embed(texts).await
    }
}

/// Regression: an upsert held the engine's writer lock while it embedded, so one tenant's upload
/// stalled every tenant's revocations. Embedding (and indexing) now run outside the lock.
#[actix_web::test]
async fn a_revoke_never_waits_for_another_requests_embedding() {
    let settings = settings(2);
    let embedder = std::sync::Arc::new(GatedEmbedder {
        inner: warrant::embed::HashedEmbedder::new(settings.embedder.dim),
        closed: Default::default(),
        entered: tokio::sync::Notify::new(),
        open: tokio::sync::Notify::new(),
    });
    let engine = warrant::embedded::Engine::start(
        warrant::embedded::EngineParams::from_settings(&settings, settings.embedder.dim),
        embedder.clone(),
    )
    .unwrap();
    engine.upsert("acme", vec![doc("hotel", "Hotels", "Hotels cost 180 euros per night.", &["all"])]).await.unwrap();
    embedder.closed.store(true, std::sync::atomic::Ordering::SeqCst);
    let uploading = {
        let engine = engine.clone();
        actix_rt::spawn(async move {
            engine.upsert("globex", vec![doc("big", "Big", "A large upload that embeds slowly.", &["all"])]).await
        })
    };
    embedder.entered.notified().await; // the upload is embedding now
    let revoke =
        warrant::acl::AclMutation::Revoke { tenant: "acme".into(), doc_id: "hotel".into(), groups: None, users: None };
    let revoked = tokio::time::timeout(std::time::Duration::from_secs(10), engine.mutate(revoke)).await;
    assert!(revoked.is_ok(), "the revoke waited for another request's embedding");
    revoked.unwrap().unwrap();
    embedder.closed.store(false, std::sync::atomic::Ordering::SeqCst);
    embedder.open.notify_one();
    uploading.await.unwrap().unwrap();
    assert!(engine.acl().load().entry("globex", "big").is_some());
}

/// `retrieval.reranker = "sentences"` reaches the coordinator with the query vector, and the
/// chunks carry the sentence vectors made at ingestion: every candidate gets exactly one share
/// of the best-sentence list (`2 / (rrf_k + rank)`), the candidates are the same ones, and the
/// fused order changes only by those shares. With the identity reranker the scores are the
/// fusion's alone.
#[actix_web::test]
async fn the_sentence_reranker_adds_one_best_sentence_share_to_every_candidate() {
    use warrant::config::RerankerKind;
    use warrant::embedded::{Engine, EngineParams};
    let documents = vec![
        doc("hotel", "Travel", "Hotel stays are reimbursed up to 180 euros per night. Taxis need a receipt.", &["all"]),
        doc("taxi", "Taxis", "Taxi receipts are reimbursed within a month. Keep every receipt.", &["all"]),
        doc("lunch", "Canteen", "Lunch is served at noon. The canteen closes at three.", &["all"]),
    ];
    let query = "taxi receipt reimbursed";
    let mut retrieved = Vec::new();
    for kind in [RerankerKind::Identity, RerankerKind::Sentences] {
        let mut settings = settings(2);
        settings.retrieval.reranker = kind;
        // A semantic embedder (as MiniLM is), so sentence vectors are made at ingestion.
        let embedder = FakeCountingEmbedder::new(settings.embedder.dim);
        let engine = Engine::start(EngineParams::from_settings(&settings, settings.embedder.dim), embedder).unwrap();
        engine.upsert("acme", documents.clone()).await.unwrap();
        let scope = engine.scope(&principal("acme", "bob", &["all"]));
        retrieved.push((settings.retrieval.rrf_k, engine.retrieve(&scope, query).await.unwrap().candidates));
    }
    let ((rrf_k, identity), (_, sentences)) = (&retrieved[0], &retrieved[1]);
    assert!(identity.len() >= 2, "{identity:?}");
    let ids = |candidates: &[warrant::retrieval::Candidate]| -> HashSet<String> {
        candidates.iter().map(|candidate| candidate.chunk.id.to_string()).collect()
    };
    assert_eq!(ids(identity), ids(sentences));
    assert!(sentences.iter().all(|candidate| candidate.chunk.sentence_vectors.is_some()));
    let total = |candidates: &[warrant::retrieval::Candidate]| candidates.iter().map(|c| c.score).sum::<f64>();
    let weight = warrant::retrieval::SENTENCE_LIST_WEIGHT;
    let shares: f64 = (1..=identity.len()).map(|rank| weight / (rrf_k + rank as f64)).sum();
    assert!((total(sentences) - total(identity) - shares).abs() < 1e-9, "{identity:?} {sentences:?}");
    assert!(sentences.windows(2).all(|pair| pair[0].score >= pair[1].score));
}
