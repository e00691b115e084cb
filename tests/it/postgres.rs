//! The postgres + pgvector backend against a real database: the scope-safety tests of the
//! embedded engine (no hit outside the scope, cross-tenant near-duplicates, revocation seen by
//! another node, all-or-nothing batches) plus migrations.
//!
//! They need `WARRANT_TEST_DATABASE_URL` (a role allowed to create databases; `tests/postgres.sh
//! start` prints one) and skip with a loud message without it. Each test works in a fresh
//! database of its own.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use warrant::acl::AclMutation;
use warrant::domain::{ChunkingConfig, DocAcl, Principal};
use warrant::embed::HashedEmbedder;
use warrant::postgres::{IterativeScan, PostgresBackend, PostgresParams};
use warrant::retrieval::DocumentInput;

use crate::support::{doc, principal};

const DIMENSION: usize = 64;

/// A fresh database on the test server, or `None` (with a loud message) when none is configured.
async fn fresh_database() -> Option<String> {
    let Ok(url) = std::env::var("WARRANT_TEST_DATABASE_URL") else {
        // Straight to stderr, past the test harness's capture, so the skip is seen.
        let notice =
            "SKIPPED: postgres backend test (set WARRANT_TEST_DATABASE_URL; tests/postgres.sh start prints it)\n";
        let _ = std::io::Write::write_all(&mut std::io::stderr(), notice.as_bytes());
        return None;
    };
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("test database");
    tokio::spawn(connection);
    let name = format!("warrant_test_{}", uuid::Uuid::new_v4().simple());
    // Test-only DDL: the name is generated here, never input.
    client.batch_execute(&format!("CREATE DATABASE {name}")).await.expect("create database");
    let (base, _) = url.rsplit_once('/').expect("url ends with /database");
    Some(format!("{base}/{name}"))
}

fn params(url: &str) -> PostgresParams {
    PostgresParams {
        url: url.to_owned(),
        pool_size: 8,
        ef_search: 100,
        iterative_scan: IterativeScan::RelaxedOrder,
        max_scan_tuples: 20_000,
        chunking: ChunkingConfig::default(),
        rrf_k: 60.0,
        lexical_candidates: 20,
        vector_candidates: 20,
    }
}

async fn node(url: &str) -> Arc<PostgresBackend> {
    PostgresBackend::connect(params(url), Arc::new(HashedEmbedder::new(DIMENSION))).await.expect("backend connects")
}

#[actix_web::test]
async fn postgres_migrations_apply_once_and_refuse_another_embedder() {
    let Some(url) = fresh_database().await else { return };
    let first = node(&url).await;
    let second = node(&url).await;
    assert_eq!(first.lineage(), second.lineage());
    let other = PostgresBackend::connect(params(&url), Arc::new(HashedEmbedder::new(DIMENSION * 2))).await;
    assert_eq!(other.expect_err("another dimension is refused").code(), "storage_unavailable");
}

#[actix_web::test]
async fn postgres_cross_tenant_near_duplicate_never_reaches_fusion() {
    let Some(url) = fresh_database().await else { return };
    let backend = node(&url).await;
    let text = "Hotel stays are reimbursed up to 180 euros per night in most cities.";
    backend.upsert("acme", vec![doc("travel", "Travel policy", text, &["everyone"])]).await.unwrap();
    backend
        .upsert("globex", vec![doc("travel", "Travel policy", &text.replace("180", "140"), &["everyone"])])
        .await
        .unwrap();
    let retrieved = backend.retrieve(&principal("acme", "bob", &["everyone"]), "hotel reimbursement per night").await;
    let retrieved = retrieved.unwrap();
    assert!(!retrieved.candidates.is_empty());
    for candidate in &retrieved.candidates {
        assert_eq!(candidate.chunk.tenant, "acme");
        assert!(!candidate.chunk.text.contains("140"));
    }
}

#[actix_web::test]
async fn postgres_the_same_chunk_from_both_retrievers_is_one_candidate() {
    let Some(url) = fresh_database().await else { return };
    let backend = node(&url).await;
    let text = "Employees receive 28 days of paid vacation per year.";
    backend.upsert("acme", vec![doc("vacation", "Vacation", text, &["all"])]).await.unwrap();
    let retrieved = backend.retrieve(&principal("acme", "bob", &["all"]), "paid vacation days per year").await.unwrap();
    assert_eq!(retrieved.candidates.len(), 1);
    assert_eq!(retrieved.candidates[0].retrievers().len(), 2);
}

#[actix_web::test]
async fn postgres_upsert_replaces_the_old_version_atomically() {
    let Some(url) = fresh_database().await else { return };
    let backend = node(&url).await;
    backend.upsert("acme", vec![doc("policy", "Policy", "The office opens at eight.", &["all"])]).await.unwrap();
    backend.upsert("acme", vec![doc("policy", "Policy", "The office opens at nine.", &["all"])]).await.unwrap();
    let retrieved = backend.retrieve(&principal("acme", "bob", &["all"]), "when does the office open").await.unwrap();
    assert_eq!(retrieved.candidates.len(), 1);
    assert_eq!(retrieved.candidates[0].chunk.doc_version, 2);
    assert!(retrieved.candidates[0].chunk.text.contains("nine"));
}

#[actix_web::test]
async fn postgres_a_failed_batch_changes_nothing() {
    let Some(url) = fresh_database().await else { return };
    let backend = node(&url).await;
    backend.upsert("acme", vec![doc("kept", "Kept", "Version one of the kept text.", &["all"])]).await.unwrap();
    let epoch = backend.epoch("acme").await.unwrap();
    // The second document fails inside the transaction (stale explicit version) after the first
    // one's rows were written: the whole batch rolls back.
    let mut stale = doc("kept", "Kept", "Version zero again.", &["all"]);
    stale.version = Some(1);
    let batch = vec![doc("fresh", "Fresh", "Good fresh text about lanterns.", &["all"]), stale];
    assert_eq!(backend.upsert("acme", batch).await.expect_err("stale version").code(), "stale_version");
    let invalid = vec![doc("fine", "Fine", "Good text.", &["all"]), doc("", "Bad", "No id.", &["all"])];
    assert!(backend.upsert("acme", invalid).await.is_err());
    assert_eq!(backend.epoch("acme").await.unwrap(), epoch);
    let bob = principal("acme", "bob", &["all"]);
    let retrieved = backend.retrieve(&bob, "fresh lanterns good text version zero").await.unwrap();
    assert!(retrieved.candidates.iter().all(|c| c.chunk.doc_id == "kept" && c.chunk.doc_version == 1));
}

/// A revoke acknowledged by node A is enforced by node B's next query, while B serves a
/// concurrent load; prints how long enforcement took after the revoke started.
#[actix_web::test]
async fn postgres_revocation_on_one_node_is_enforced_by_another_under_load() {
    let Some(url) = fresh_database().await else { return };
    let writer = node(&url).await;
    let reader = node(&url).await;
    let mut documents = vec![doc("secret", "Merger", "The merger with Initech closes in March.", &["exec"])];
    for i in 0..20 {
        documents.push(doc(&format!("filler{i}"), "Notes", &format!("Meeting notes {i} about the merger."), &["exec"]));
    }
    writer.upsert("acme", documents).await.unwrap();
    let exec = principal("acme", "carol", &["exec"]);
    let before = reader.retrieve(&exec, "merger Initech March").await.unwrap();
    assert!(before.candidates.iter().any(|c| c.chunk.doc_id == "secret"));

    let stop = Arc::new(AtomicBool::new(false));
    let origin = Instant::now();
    let mut load = Vec::new();
    for _ in 0..4 {
        let (reader, exec, stop) = (Arc::clone(&reader), exec.clone(), Arc::clone(&stop));
        load.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let started = origin.elapsed();
                let retrieved = reader.retrieve(&exec, "merger Initech March").await.unwrap();
                seen.push((started, retrieved.candidates.iter().any(|c| c.chunk.doc_id == "secret")));
            }
            seen
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let revoke_started = origin.elapsed();
    let revoke = AclMutation::Revoke { tenant: "acme".into(), doc_id: "secret".into(), groups: None, users: None };
    writer.mutate(revoke).await.unwrap();
    let acknowledged = origin.elapsed();
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.store(true, Ordering::SeqCst);
    let mut last_seen = Duration::ZERO;
    let mut after = 0;
    for task in load {
        for (started, secret) in task.await.unwrap() {
            if secret {
                last_seen = last_seen.max(started);
            }
            if started > acknowledged {
                after += 1;
                assert!(!secret, "a query started after the revoke was acknowledged returned the revoked document");
            }
        }
    }
    assert!(after > 0, "the load ran queries after the revoke");
    eprintln!(
        "revocation: acknowledged {:?} after start; last query that saw it started {:?} after the revoke started",
        acknowledged - revoke_started,
        last_seen.saturating_sub(revoke_started)
    );
    let direct = reader.retrieve(&exec, "merger Initech March").await.unwrap();
    assert!(direct.candidates.iter().all(|c| c.chunk.doc_id != "secret"));
}

#[actix_web::test]
async fn postgres_grant_delete_and_noops() {
    let Some(url) = fresh_database().await else { return };
    let backend = node(&url).await;
    backend.upsert("acme", vec![doc("plan", "Plan", "The launch plan targets April.", &["exec"])]).await.unwrap();
    let dave = principal("acme", "dave", &["staff"]);
    assert!(backend.retrieve(&dave, "launch plan April").await.unwrap().candidates.is_empty());
    let grant =
        |users: Vec<String>| AclMutation::Grant { tenant: "acme".into(), doc_id: "plan".into(), groups: vec![], users };
    let epoch = backend.mutate(grant(vec!["dave".into()])).await.unwrap();
    assert!(!backend.retrieve(&dave, "launch plan April").await.unwrap().candidates.is_empty());
    assert_eq!(backend.mutate(grant(vec!["dave".into()])).await.unwrap(), epoch, "a no-op keeps the epoch");
    let delete = AclMutation::Delete { tenant: "acme".into(), doc_id: "plan".into() };
    backend.mutate(delete.clone()).await.unwrap();
    assert!(backend.retrieve(&dave, "launch plan April").await.unwrap().candidates.is_empty());
    assert_eq!(backend.mutate(delete).await.expect_err("deleted").code(), "document_not_found");
}

/// One random corpus: (tenant index, groups, users) per document.
type Corpus = Vec<(usize, Vec<usize>, Vec<usize>)>;

fn corpus() -> impl Strategy<Value = (Corpus, usize, Vec<usize>, usize)> {
    let document = (0..2usize, prop::collection::vec(0..4usize, 0..3), prop::collection::vec(0..3usize, 0..2));
    (prop::collection::vec(document, 1..12), 0..2usize, prop::collection::vec(0..4usize, 0..3), 0..3usize)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Whatever the corpus and the principal, every candidate the database returns belongs to
    /// the principal's tenant and names the principal or one of its groups (naive model).
    #[test]
    fn postgres_no_hit_outside_the_scope((documents, tenant, groups, user) in corpus()) {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(async {
            let Some(url) = shared_database().await else { return };
            let backend = node(&url).await;
            // Fresh tenant names per case keep the cases independent inside one database.
            let run = uuid::Uuid::new_v4().simple().to_string();
            let tenants = [format!("a{run}"), format!("b{run}")];
            let mut model = Vec::new();
            for (index, (owner, readers, users)) in documents.iter().enumerate() {
                let acl = DocAcl {
                    groups: readers.iter().map(|g| format!("g{g}")).collect::<BTreeSet<_>>().into_iter().collect(),
                    users: users.iter().map(|u| format!("u{u}")).collect::<BTreeSet<_>>().into_iter().collect(),
                };
                let input = DocumentInput {
                    doc_id: format!("d{index}"),
                    title: "Shared title".into(),
                    text: format!("Common words about budgets and plans, copy {index}."),
                    acl: acl.clone(),
                    version: None,
                };
                backend.upsert(&tenants[*owner], vec![input]).await.unwrap();
                model.push((tenants[*owner].clone(), format!("d{index}"), acl));
            }
            let asking = Principal::new(tenants[tenant].clone(), format!("u{user}"), groups.iter().map(|g| format!("g{g}")));
            let retrieved = backend.retrieve(&asking, "common budgets plans copy shared title").await.unwrap();
            let allowed: BTreeSet<&str> = model
                .iter()
                .filter(|(owner, _, acl)| {
                    *owner == asking.tenant
                        && (acl.users.contains(&asking.user) || acl.groups.iter().any(|g| asking.groups.contains(g)))
                })
                .map(|(_, doc_id, _)| doc_id.as_str())
                .collect();
            for candidate in &retrieved.candidates {
                assert_eq!(candidate.chunk.tenant, asking.tenant, "a hit of another tenant");
                assert!(allowed.contains(candidate.chunk.doc_id.as_str()), "a hit outside the ACL: {}", candidate.chunk.doc_id);
            }
            // Recall inside the scope: every allowed document is found (small corpus).
            let found: BTreeSet<&str> = retrieved.candidates.iter().map(|c| c.chunk.doc_id.as_str()).collect();
            assert_eq!(found, allowed);
        });
    }
}

/// One database for all cases of the property test (created once per test process).
async fn shared_database() -> Option<String> {
    static URL: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    if let Some(url) = URL.get() {
        return url.clone();
    }
    let url = fresh_database().await;
    Some(URL.get_or_init(|| url).clone()).flatten()
}

/// Measurement, not a check (`--ignored`; BENCHMARKS.md "PostgreSQL backend"): vector recall@10
/// against an exact scan of the same scope, and latency, for each `hnsw.iterative_scan` mode at
/// 1 %, 10 % and 100 % of the tenant readable. Corpus size: `WARRANT_PG_BENCH_CHUNKS` (20,000).
#[actix_web::test]
#[ignore = "measurement; run with --ignored against WARRANT_TEST_DATABASE_URL"]
async fn postgres_measure_iterative_scan_recall_and_latency() {
    use warrant::retrieval::{RetrievalQuery, RetrievalRepository};
    let Some(url) = fresh_database().await else { return };
    let chunks: usize = std::env::var("WARRANT_PG_BENCH_CHUNKS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let dimension = 384;
    let connect = |mode: IterativeScan| {
        let mut parameters = params(&url);
        parameters.iterative_scan = mode;
        PostgresBackend::connect(parameters, Arc::new(HashedEmbedder::new(dimension)))
    };
    let loader = connect(IterativeScan::RelaxedOrder).await.expect("connects");
    // Clustered text: 50 topics of 40 words each plus common words (a seeded LCG).
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |bound: u64| {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % bound
    };
    let text = |next: &mut dyn FnMut(u64) -> u64| {
        let topic = next(50);
        (0..14)
            .map(|_| if next(4) == 0 { format!("common{}", next(200)) } else { format!("t{topic}w{}", next(40)) })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let started = Instant::now();
    let mut batch = Vec::new();
    for index in 0..chunks {
        let groups = ["all".to_owned(), format!("ten{}", index % 10), format!("pct{}", index % 100)];
        let mut input = doc(&format!("d{index}"), "", &text(&mut next), &[]);
        input.acl.groups = Vec::from(groups);
        batch.push(input);
        if batch.len() == 1000 || index + 1 == chunks {
            loader.upsert("acme", std::mem::take(&mut batch)).await.unwrap();
        }
    }
    eprintln!("loaded {chunks} chunks in {:.1} s", started.elapsed().as_secs_f64());
    let queries: Vec<String> = (0..100).map(|_| text(&mut next)).collect();
    let vectors = loader.embedder().embed(&queries).await.unwrap();
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    // Test-only exact reference: no index, the same scope.
    client.batch_execute("SET enable_indexscan = off; SET enable_bitmapscan = off").await.unwrap();
    let exact_sql = "SELECT c.doc_id FROM chunks c WHERE c.tenant_id = 'acme' AND EXISTS (SELECT 1 FROM \
        document_readers r WHERE r.tenant_id = 'acme' AND r.doc_id = c.doc_id AND r.kind = 'g' AND r.name = $1) \
        ORDER BY c.embedding <=> $2 LIMIT 10";
    for mode in [IterativeScan::Off, IterativeScan::StrictOrder, IterativeScan::RelaxedOrder] {
        let backend = connect(mode).await.expect("connects");
        for (label, group) in [("1%", "pct7"), ("10%", "ten3"), ("100%", "all")] {
            let scope = warrant::acl::AuthorizationScope::for_principal(&principal("acme", "nobody", &[group]), 0);
            let (mut found, mut expected, mut latencies) = (0usize, 0usize, Vec::new());
            for vector in &vectors {
                let query = RetrievalQuery {
                    text: String::new(),
                    vector: Some(vector.clone()),
                    lexical_candidates: 0,
                    vector_candidates: 10,
                };
                let begun = Instant::now();
                let retrieved = RetrievalRepository::retrieve(&*backend, &scope, &query).await.unwrap();
                latencies.push(begun.elapsed());
                let exact: BTreeSet<String> = client
                    .query(exact_sql, &[&group, &pgvector::Vector::from(vector.clone())])
                    .await
                    .unwrap()
                    .iter()
                    .map(|row| row.get(0))
                    .collect();
                expected += exact.len();
                found += retrieved.candidates.iter().filter(|c| exact.contains(&c.chunk.doc_id)).count();
            }
            latencies.sort();
            eprintln!(
                "iterative_scan={:<13} readable={label:<5} recall@10={:.3} p50={:.2} ms p99={:.2} ms",
                mode.as_str(),
                found as f64 / expected.max(1) as f64,
                latencies[latencies.len() / 2].as_secs_f64() * 1e3,
                latencies[latencies.len() * 99 / 100].as_secs_f64() * 1e3,
            );
        }
    }
}

/// Measurement, not a check (`--ignored`; BENCHMARKS.md "PostgreSQL backend"): nDCG@10 per
/// retriever on SciFact test (hashed embedder, so it runs in minutes) through the embedded engine
/// and through the postgres backend, with the evaluation's candidate budget for both.
#[actix_web::test]
#[ignore = "measurement; run with --ignored against WARRANT_TEST_DATABASE_URL"]
async fn postgres_measure_scifact_against_embedded() {
    use warrant::eval::dataset::{Dataset, NoProgress, document_input, group_of, principal_of};
    use warrant::eval::retrieval::{DEEP_CUTOFF, RunOptions, documents_of, ndcg_at_k, run};
    use warrant::retrieval::{RetrievalQuery, RetrievalRepository};
    let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/scifact");
    if !folder.join("corpus.jsonl").exists() {
        eprintln!("SKIPPED: {} is absent", folder.display());
        return;
    }
    let Some(url) = fresh_database().await else { return };
    let dataset = Dataset::load(&folder, None).expect("scifact loads");
    let mut settings = warrant::config::Settings::defaults();
    settings.embedder.kind = warrant::config::EmbedderKind::Hashed;
    settings.embedder.dim = 384;
    let (_, embedded) = run(&settings, &dataset, &RunOptions::default(), &NoProgress).await.expect("embedded run");

    let mut parameters = params(&url);
    parameters.lexical_candidates = settings.retrieval.lexical_candidates.max(DEEP_CUTOFF);
    parameters.vector_candidates = settings.retrieval.vector_candidates.max(DEEP_CUTOFF);
    parameters.rrf_k = settings.retrieval.rrf_k;
    parameters.chunking = settings.chunking;
    // `hnsw.ef_search` for this run (WARRANT_PG_EF_SEARCH; the default is the configured 100).
    if let Some(ef_search) = std::env::var("WARRANT_PG_EF_SEARCH").ok().and_then(|v| v.parse().ok()) {
        parameters.ef_search = ef_search;
    }
    let backend = PostgresBackend::connect(parameters.clone(), Arc::new(HashedEmbedder::new(384))).await.unwrap();
    let started = Instant::now();
    for (tenant, documents) in dataset.corpus_by_tenant() {
        for group in documents.chunks(128) {
            let acl = DocAcl { groups: vec![group_of(tenant)], users: vec![] };
            let inputs: Vec<DocumentInput> =
                group.iter().filter_map(|document| document_input(document, &acl)).collect();
            backend.upsert(tenant, inputs).await.unwrap();
        }
    }
    eprintln!("postgres: loaded {} documents in {:.1} s", dataset.corpus.len(), started.elapsed().as_secs_f64());
    let mut totals = [0.0f64; 3];
    let mut count = 0usize;
    for query in &dataset.queries {
        let Some(judged) = dataset.qrels.get(&query.id).filter(|judged| !judged.is_empty()) else { continue };
        let scope = warrant::acl::AuthorizationScope::for_principal(&principal_of(query.tenant()), 0);
        let vector = backend.embedder().embed(std::slice::from_ref(&query.text)).await.unwrap().pop().unwrap();
        let ask = |vector: Option<Vec<f32>>, lexical: usize| RetrievalQuery {
            text: query.text.clone(),
            vector,
            lexical_candidates: lexical,
            vector_candidates: parameters.vector_candidates,
        };
        let runs = [
            ask(None, parameters.lexical_candidates),
            ask(Some(vector.clone()), 0),
            ask(Some(vector), parameters.lexical_candidates),
        ];
        for (total, request) in totals.iter_mut().zip(runs) {
            let retrieved = RetrievalRepository::retrieve(&*backend, &scope, &request).await.unwrap();
            assert!(retrieved.candidates.iter().all(|c| c.chunk.tenant == query.tenant()));
            *total += ndcg_at_k(&documents_of(&retrieved.candidates), judged, 10);
        }
        count += 1;
    }
    let postgres = totals.map(|total| total / count.max(1) as f64);
    eprintln!(
        "scifact ({count} queries, hashed-384, ef_search {}) nDCG@10  lexical  vector  hybrid",
        parameters.ef_search
    );
    eprintln!(
        "  embedded                              {:.4}   {:.4}  {:.4}",
        embedded.lexical.ndcg_at_10, embedded.vector.ndcg_at_10, embedded.hybrid.ndcg_at_10
    );
    eprintln!("  postgres                              {:.4}   {:.4}  {:.4}", postgres[0], postgres[1], postgres[2]);
}
