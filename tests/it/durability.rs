//! Durable state: every acknowledged write survives a restart and nothing else does; a failure
//! between any two steps of the write path leaves a write whole or absent; a crash loop with
//! `kill -9` against a real server under concurrent writes; storage failures answer 503 and keep
//! reads served; ordinals are never reused; a hit of another tenant is dropped and counted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use actix_web::test as actix_test;
use rand::{Rng, SeedableRng};
use roaring::RoaringBitmap;
use serde_json::{Value, json};
use warrant::acl::{AclMutation, AuthorizationScope};
use warrant::config::Settings;
use warrant::embed::HashedEmbedder;
use warrant::embedded::{Engine, EngineParams, FaultHook};
use warrant::retrieval::RetrievalQuery;
use warrant::storage::WriteStep;

use super::snapshots::{Process, call, command, spawn_command, token};
use super::support::{doc, principal, settings};

async fn open(directory: &Path, settings: &Settings) -> Arc<Engine> {
    let embedder = Arc::new(HashedEmbedder::new(settings.embedder.dim));
    let params = EngineParams::from_settings(settings, settings.embedder.dim);
    Engine::open(params, embedder, directory).await.expect("data directory opens").0
}

/// What a reader sees: per document id, the live version readable by `principal`, if any.
async fn visible(engine: &Engine, tenant: &str, user: &str, groups: &[&str]) -> BTreeMap<String, u64> {
    let snapshot = engine.acl().load();
    let who = principal(tenant, user, groups);
    snapshot
        .entries(tenant)
        .filter(|entry| snapshot.allows(&who, entry.ordinal))
        .map(|entry| (entry.doc_id.to_string(), entry.version))
        .collect()
}

/// Document ids that retrieval returns for `query` as `who`.
async fn retrieved(engine: &Engine, who: &warrant::domain::Principal, query: &str) -> BTreeSet<String> {
    let scope = engine.scope(who);
    let result = engine.retrieve(&scope, query).await.unwrap();
    result.candidates.iter().map(|candidate| candidate.chunk.doc_id.clone()).collect()
}

#[actix_web::test]
async fn every_acknowledged_write_survives_a_restart_with_its_lineage_and_nothing_is_re_embedded() {
    let settings = settings(2);
    let directory = tempfile::tempdir().unwrap();
    // The counting fake proves the restart embeds nothing.
    let counting = super::support::FakeCountingEmbedder::new(settings.embedder.dim);
    let params = EngineParams::from_settings(&settings, settings.embedder.dim);
    let (engine, _) = Engine::open(params.clone(), counting.clone(), directory.path()).await.unwrap();
    let lineage = engine.acl().lineage().to_owned();
    engine
        .upsert(
            "acme",
            vec![
                doc("hotel", "Hotels", "Hotel stays are reimbursed up to 180 euros per night.", &["all"]),
                doc("merger", "Merger", "The merger with Initech closes in March.", &["exec"]),
                doc("wiki", "Wiki", "The office opens at eight in the morning.", &["all"]),
            ],
        )
        .await
        .unwrap();
    engine.upsert("globex", vec![doc("hotel", "Hotels", "Globex pays 90 euros per night.", &["all"])]).await.unwrap();
    engine
        .upsert("acme", vec![doc("hotel", "Hotels", "Hotel stays are reimbursed up to 200 euros.", &["all"])])
        .await
        .unwrap();
    let revoke = AclMutation::Revoke { tenant: "acme".into(), doc_id: "wiki".into(), groups: None, users: None };
    let revoked_at = engine.mutate(revoke).await.unwrap();
    let grant = AclMutation::Grant {
        tenant: "acme".into(),
        doc_id: "merger".into(),
        groups: vec![],
        users: vec!["bob".into()],
    };
    engine.mutate(grant).await.unwrap();
    engine.mutate(AclMutation::Delete { tenant: "globex".into(), doc_id: "hotel".into() }).await.unwrap();
    let epoch = engine.acl().epoch();
    let next_ordinal = engine.acl().next_ordinal();
    let before_bob = visible(&engine, "acme", "bob", &["all"]).await;
    let before_globex = visible(&engine, "globex", "g", &["all"]).await;
    let bob = principal("acme", "bob", &["all"]);
    let hits_before = retrieved(&engine, &bob, "merger Initech hotel night office").await;
    drop(engine);
    counting.take();

    let (engine, recovery) = Engine::open(params, counting.clone(), directory.path()).await.unwrap();
    assert!(!recovery.created);
    assert_eq!(counting.take(), 0, "restart must not re-embed");
    assert_eq!(engine.acl().lineage(), lineage);
    assert_eq!(engine.acl().epoch(), epoch);
    assert!(engine.acl().epoch() >= revoked_at);
    assert_eq!(engine.acl().next_ordinal(), next_ordinal);
    assert_eq!(visible(&engine, "acme", "bob", &["all"]).await, before_bob);
    assert_eq!(visible(&engine, "globex", "g", &["all"]).await, before_globex);
    assert!(before_bob.contains_key("merger") && !before_bob.contains_key("wiki"));
    assert_eq!(before_bob["hotel"], 2);
    assert!(before_globex.is_empty());
    assert_eq!(retrieved(&engine, &bob, "merger Initech hotel night office").await, hits_before);
    // Ordinals are never reused across restarts.
    engine.upsert("acme", vec![doc("new", "New", "A brand new document.", &["all"])]).await.unwrap();
    let fresh = engine.acl().load().entry("acme", "new").unwrap().ordinal;
    assert!(fresh >= next_ordinal, "ordinal {fresh} reused (counter was {next_ordinal})");
}

/// One write of each kind, applied to an engine holding `hotel` (v1, group all).
/// Regression: `warrant.redb` was created 0644 in a 0755 data directory, readable by every
/// local user though it holds every tenant's text (snapshots of the same data were 0600/0700).
#[actix_web::test]
async fn the_data_directory_and_its_store_are_private_new_or_existing() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    let chmod = |path: &Path, mode: u32| std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    let root = tempfile::tempdir().unwrap();
    let settings = settings(2);
    let data = root.path().join("new").join("data");
    let engine = open(&data, &settings).await;
    engine.upsert("acme", vec![doc("a", "A", "Hotel stays cost 180 euros.", &["all"])]).await.unwrap();
    drop(engine);
    assert_eq!(mode(&data), 0o700, "a new data directory");
    assert_eq!(mode(&data.join(warrant::storage::STORE_FILE)), 0o600, "a new store");
    // An existing directory and store left readable (an older build made them so): tightened at
    // start, the data kept.
    chmod(&data, 0o755);
    chmod(&data.join(warrant::storage::STORE_FILE), 0o644);
    let engine = open(&data, &settings).await;
    assert_eq!(mode(&data), 0o700, "an existing data directory");
    assert_eq!(mode(&data.join(warrant::storage::STORE_FILE)), 0o600, "an existing store");
    assert_eq!(visible(&engine, "acme", "u", &["all"]).await.len(), 1);
    drop(engine);
    // A shared directory that is not a data directory is refused, never changed.
    let shared = root.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::write(shared.join("someone-elses-file"), b"x").unwrap();
    chmod(&shared, 0o1777);
    let embedder = Arc::new(HashedEmbedder::new(settings.embedder.dim));
    let params = EngineParams::from_settings(&settings, settings.embedder.dim);
    let refused = Engine::open(params, embedder, &shared).await.err().expect("refused");
    assert!(refused.to_string().contains("storage.dir"), "{refused}");
    assert_eq!(mode(&shared), 0o777, "left as it was");
}

#[derive(Clone, Copy, Debug)]
enum Write {
    NewDocument,
    NewVersion,
    Delete,
    Revoke,
    Grant,
}

impl Write {
    const ALL: [Write; 5] = [Self::NewDocument, Self::NewVersion, Self::Delete, Self::Revoke, Self::Grant];

    async fn apply(self, engine: &Engine) -> Result<u64, warrant::retrieval::RetrievalError> {
        match self {
            Self::NewDocument => engine
                .upsert("acme", vec![doc("extra", "Extra", "An extra document about trains.", &["all"])])
                .await
                .map(|outcome| outcome.acl_epoch),
            Self::NewVersion => engine
                .upsert("acme", vec![doc("hotel", "Hotels", "Hotels now cost 250 euros.", &["all"])])
                .await
                .map(|outcome| outcome.acl_epoch),
            Self::Delete => engine.mutate(AclMutation::Delete { tenant: "acme".into(), doc_id: "hotel".into() }).await,
            Self::Revoke => {
                let revoke = AclMutation::Revoke {
                    tenant: "acme".into(),
                    doc_id: "hotel".into(),
                    groups: Some(vec!["all".into()]),
                    users: None,
                };
                engine.mutate(revoke).await
            }
            Self::Grant => {
                let grant = AclMutation::Grant {
                    tenant: "acme".into(),
                    doc_id: "hotel".into(),
                    groups: vec![],
                    users: vec!["carol".into()],
                };
                engine.mutate(grant).await
            }
        }
    }
}

#[actix_web::test]
async fn a_failure_between_any_two_steps_of_the_write_path_leaves_the_write_whole_or_absent() {
    let settings = settings(2);
    for step in WriteStep::ALL {
        for write in Write::ALL {
            let directory = tempfile::tempdir().unwrap();
            let engine = open(directory.path(), &settings).await;
            engine
                .upsert("acme", vec![doc("hotel", "Hotels", "Hotel stays cost 180 euros per night.", &["all"])])
                .await
                .unwrap();
            let before = (visible(&engine, "acme", "carol", &["all"]).await, engine.acl().epoch());
            // What the write does when nothing fails, on a twin engine.
            let twin_directory = tempfile::tempdir().unwrap();
            let twin = open(twin_directory.path(), &settings).await;
            twin.upsert("acme", vec![doc("hotel", "Hotels", "Hotel stays cost 180 euros per night.", &["all"])])
                .await
                .unwrap();
            write.apply(&twin).await.unwrap();
            let after = (visible(&twin, "acme", "carol", &["all"]).await, twin.acl().epoch());
            drop(twin);

            let hook: FaultHook = Arc::new(move |at| at == step);
            engine.inject_faults(Some(hook));
            let result = write.apply(&engine).await;
            let case = format!("{write:?} failing before {step:?}: {result:?}");
            // Before the commit nothing is durable and nothing is visible; the engine goes on.
            let reached = matches!(
                (write, step),
                (Write::NewDocument | Write::NewVersion, WriteStep::Embed | WriteStep::Index | WriteStep::Stage)
                    | (_, WriteStep::Commit)
            );
            if reached {
                assert!(result.is_err(), "{case}");
                assert_eq!((visible(&engine, "acme", "carol", &["all"]).await, engine.acl().epoch()), before, "{case}");
                engine.inject_faults(None);
                // The failed write left no lock held and no state behind: the engine still writes.
                engine.upsert("acme", vec![doc("later", "Later", "A later document.", &["all"])]).await.unwrap();
                engine.mutate(AclMutation::Delete { tenant: "acme".into(), doc_id: "later".into() }).await.unwrap();
            }
            // "Crash" here (drop without any cleanup) and restart from the data directory.
            drop(engine);
            let restarted = open(directory.path(), &settings).await;
            let state = (visible(&restarted, "acme", "carol", &["all"]).await, restarted.acl().load());
            let committed = match step {
                WriteStep::Embed | WriteStep::Index | WriteStep::Stage => {
                    !matches!(write, Write::NewDocument | Write::NewVersion)
                }
                WriteStep::Commit => false,
                WriteStep::Publish | WriteStep::Purge => true,
            };
            let expected = if committed { &after.0 } else { &before.0 };
            assert_eq!(&state.0, expected, "{case}");
            if committed && result.is_ok() {
                assert!(state.1.epoch() >= after.1, "{case}");
            }
            if !committed {
                // The failed write left nothing: no epoch consumed by it beyond the two cleanup
                // writes of the surviving engine.
                assert_eq!(state.1.entry("acme", "extra"), None, "{case}");
            }
        }
    }
}

/// The coordinator's tenant check drops a hit of another tenant and counts it in
/// `warrant_scope_violations_total` (read from the process's Prometheus recorder, the one
/// `/metrics` renders; only this test forges such a hit, so the counter moves for it alone).
#[actix_web::test]
async fn a_hit_of_another_tenant_is_dropped_by_the_coordinator_and_counted() {
    let violations = || {
        let rendered = warrant::telemetry::metrics_handle().render();
        rendered
            .lines()
            .find_map(|line| line.strip_prefix("warrant_scope_violations_total "))
            .map_or(0.0, |value| value.trim().parse::<f64>().expect("a counter's value is a number"))
    };
    let settings = settings(1);
    let engine = super::support::engine(&settings);
    engine.upsert("acme", vec![doc("secret", "Secret", "The acme launch code is swordfish.", &["all"])]).await.unwrap();
    let ordinal = engine.acl().load().entry("acme", "secret").unwrap().ordinal;
    // A scope of another tenant that (as if an ordinal mapping were corrupted) names acme's ordinal.
    let forged = AuthorizationScope::from_bitmap("globex", engine.acl().epoch(), RoaringBitmap::from_iter([ordinal]));
    let vector = engine.embed_query("globex", "g", "launch code swordfish").await.unwrap();
    let query = RetrievalQuery {
        text: "launch code swordfish".into(),
        vector: Some(vector.as_ref().clone()),
        lexical_candidates: 10,
        vector_candidates: 10,
    };
    let before = violations();
    let result = engine.read_path().retrieve_query(&forged, query.clone(), None).await.unwrap();
    assert!(result.candidates.is_empty(), "another tenant's chunk reached fusion");
    // Both retrievers found acme's chunk for globex's scope: each hit is counted.
    assert!(violations() >= before + 2.0, "the dropped hits were not counted: {before} -> {}", violations());
}

/// Issue 44: a query vector entered retrieval unchecked (another dimension, NaN, any norm).
/// Now each is a typed error where it enters retrieval, and a unit or all-zero vector passes.
#[actix_web::test]
async fn a_query_vector_is_checked_where_it_enters_retrieval() {
    let settings = settings(1);
    let engine = super::support::engine(&settings);
    engine.upsert("acme", vec![doc("memo", "Memo", "The budget memo is due in March.", &["all"])]).await.unwrap();
    let scope = engine.scope(&principal("acme", "u", &["all"]));
    let dimension = settings.embedder.dim;
    let query = |vector: Vec<f32>| RetrievalQuery {
        text: "budget memo".into(),
        vector: Some(vector),
        lexical_candidates: 10,
        vector_candidates: 10,
    };
    let mut unit = vec![0.0; dimension];
    unit[0] = 1.0;
    let mut not_finite = unit.clone();
    not_finite[1] = f32::NAN;
    for (what, vector) in [
        ("short", vec![1.0; dimension - 1]),
        ("long", {
            let mut long = unit.clone();
            long.push(0.0);
            long
        }),
        ("not finite", not_finite),
        ("not unit", vec![1.0; dimension]),
    ] {
        let error = engine
            .read_path()
            .retrieve_query(&scope, query(vector), None)
            .await
            .err()
            .unwrap_or_else(|| panic!("{what} passed"));
        assert_eq!(error.code(), "invalid_query_vector", "{what}");
    }
    assert!(engine.read_path().retrieve_query(&scope, query(unit), None).await.is_ok());
    assert!(
        engine.read_path().retrieve_query(&scope, query(vec![0.0; dimension]), None).await.is_ok(),
        "text without features"
    );
}

// ---- HTTP: storage failures, roles, revoke rules ----

async fn durable_state(directory: &Path) -> actix_web::web::Data<warrant::http::AppState> {
    let mut settings = settings(2);
    settings.storage.dir = directory.join("data").display().to_string();
    settings.snapshots.dir = directory.join("snapshots").display().to_string();
    settings.auth.replica_subjects = vec!["replica-1".into()];
    let embedder: Arc<dyn warrant::embed::Embedder> = Arc::new(HashedEmbedder::new(settings.embedder.dim));
    let providers = warrant::providers::Providers {
        embedder: Arc::clone(&embedder),
        generator: Arc::new(warrant::answer::providers::extractive::ExtractiveGenerator::new(
            settings.generator.max_claims,
        )),
        verifier: Arc::new(warrant::answer::providers::lexical_verifier::LexicalSupportVerifier::new(
            settings.verifier.min_coverage,
            settings.verifier.min_similarity,
            Some(embedder),
        )),
    };
    warrant::app::build_state(Arc::new(settings), providers).await.expect("state")
}

/// `send!(app, METHOD, path, bearer[, body])` → (status, JSON body).
macro_rules! send {
    ($app:expr, $method:ident, $path:expr, $bearer:expr) => {
        send!(@go $app, actix_test::TestRequest::default()
            .method(actix_web::http::Method::$method)
            .uri(&$path)
            .insert_header(("authorization", format!("Bearer {}", $bearer))))
    };
    ($app:expr, $method:ident, $path:expr, $bearer:expr, $body:expr) => {
        send!(@go $app, actix_test::TestRequest::default()
            .method(actix_web::http::Method::$method)
            .uri(&$path)
            .insert_header(("authorization", format!("Bearer {}", $bearer)))
            .set_json($body))
    };
    (@go $app:expr, $request:expr) => {{
        let response = actix_test::call_service(&$app, $request.to_request()).await;
        let status = response.status().as_u16();
        let bytes = actix_test::read_body(response).await;
        (status, serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null), bytes)
    }};
}

#[actix_web::test]
async fn a_storage_failure_answers_503_acknowledges_nothing_and_reads_go_on() {
    let directory = tempfile::tempdir().unwrap();
    let state = durable_state(directory.path()).await;
    let app = actix_test::init_service(warrant::http::server::app(state.clone())).await;
    let admin = token("acme", "root", &[], "admin");
    let reader = token("acme", "alice", &["all"], "");
    let upload = json!({"documents": [{"doc_id": "hotel", "text": "Hotel stays cost 180 euros per night.", "acl": {"groups": ["all"]}}]});
    let (status, body, _) = send!(app, PUT, "/v1/admin/documents", &admin, upload);
    assert_eq!(status, 200, "{body}");
    let epoch = body["acl_epoch"].as_u64().unwrap();

    // The disk "fails" at the commit of every write from now on.
    let engine = state.engine.as_ref().expect("the embedded engine");
    engine.inject_faults(Some(Arc::new(|step| step == WriteStep::Commit)));
    let second =
        json!({"documents": [{"doc_id": "train", "text": "Trains are second class.", "acl": {"groups": ["all"]}}]});
    let (status, body, _) = send!(app, PUT, "/v1/admin/documents", &admin, second);
    assert_eq!((status, body["code"].as_str()), (503, Some("storage_unavailable")), "{body}");
    let revoke = json!({"doc_id": "hotel"});
    let (status, body, _) = send!(app, POST, "/v1/admin/acl/revoke", &admin, revoke);
    assert_eq!((status, body["code"].as_str()), (503, Some("storage_unavailable")), "{body}");
    assert!(!body["message"].as_str().unwrap().contains(".redb"), "no path reaches a client");
    assert_eq!(engine.acl().epoch(), epoch, "nothing was applied");
    let (status, body, _) = send!(app, POST, "/v1/retrieve", &reader, json!({"query": "hotel night"}));
    assert_eq!(status, 200, "reads are still served: {body}");
    assert_eq!(body["chunks"][0]["doc_id"], "hotel", "the failed revoke did not apply");
}

#[actix_web::test]
async fn snapshots_need_the_operator_role_and_replica_endpoints_the_replica_role() {
    let directory = tempfile::tempdir().unwrap();
    let state = durable_state(directory.path()).await;
    let app = actix_test::init_service(warrant::http::server::app(state)).await;
    let acme_admin = token("acme", "root", &[], "admin");
    let upload = json!({"documents": [{"doc_id": "hotel", "text": "Hotel stays cost 180 euros per night.", "acl": {"groups": ["all"]}}]});
    assert_eq!(send!(app, PUT, "/v1/admin/documents", &acme_admin, upload).0, 200);
    let globex_admin = token("globex", "root", &[], "admin");
    for bearer in [&acme_admin, &globex_admin] {
        let (status, _, _) = send!(app, POST, "/v1/admin/snapshots", bearer);
        assert_eq!(status, 403, "a tenant admin may not copy every tenant's data");
        let (status, _, _) = send!(app, GET, "/v1/replica/snapshot", bearer);
        assert_eq!(status, 403, "a tenant admin may not read the replica snapshot");
    }
    let (_, feed, _) = send!(app, GET, "/v1/admin/acl/changes?since=0", &globex_admin);
    assert_eq!(feed["changes"], json!([]), "globex's admin sees none of acme's changes");
    assert!(feed["lineage"].as_str().is_some_and(|lineage| !lineage.is_empty()));

    let operator = token("ops", "op", &[], "operator");
    let (status, created, _) = send!(app, POST, "/v1/admin/snapshots", &operator);
    assert_eq!(status, 200, "{created}");
    let snapshot_dir = directory.path().join("snapshots").join(created["snapshot_id"].as_str().unwrap());
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(&snapshot_dir).unwrap() {
        let mode = entry.unwrap().metadata().unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "snapshot files are readable by the server's user only");
    }
    let replica = token("replication", "replica-1", &[], "replica");
    let (status, manifest, _) = send!(app, GET, "/v1/replica/snapshot", &replica);
    assert_eq!(status, 200, "{manifest}");
    assert_eq!(manifest["lineage"], feed["lineage"]);
    let id = manifest["snapshot_id"].as_str().unwrap();
    let name = manifest["files"][0]["name"].as_str().unwrap();
    let (status, _, bytes) = send!(app, GET, &format!("/v1/replica/snapshot/{id}/{name}"), &replica);
    assert_eq!(status, 200);
    assert_eq!(bytes.len() as u64, manifest["files"][0]["bytes"].as_u64().unwrap());
    for forged in
        [format!("/v1/replica/snapshot/{id}/..%2Fmanifest.json"), format!("/v1/replica/snapshot/..%2F{id}/{name}")]
    {
        let (status, _, _) = send!(app, GET, &forged, &replica);
        assert_eq!(status, 404, "{forged}");
    }
    let (status, _, _) = send!(app, GET, &format!("/v1/replica/snapshot/{id}/{name}"), &acme_admin);
    assert_eq!(status, 403);
    // Role `replica` is a credential only for a configured replica subject (auth.replica_subjects):
    // with any other subject, in any tenant, it reads neither snapshots nor the whole feed.
    for unlisted in [token("nobody", "nobody", &[], "replica"), token("globex", "replica-2", &[], "replica")] {
        assert_eq!(send!(app, GET, "/v1/replica/snapshot", &unlisted).0, 403);
        assert_eq!(send!(app, GET, &format!("/v1/replica/snapshot/{id}/{name}"), &unlisted).0, 403);
        assert_eq!(send!(app, GET, "/v1/admin/acl/changes?since=0", &unlisted).0, 403);
    }
    let (status, feed, _) = send!(app, GET, "/v1/admin/acl/changes?since=0", &replica);
    assert_eq!(status, 200);
    assert!(!feed["changes"].as_array().unwrap().is_empty(), "the configured replica reads every tenant's changes");
    // A replica of another lineage gets no stream, so no session and no lease.
    let (status, refused, _) = send!(app, GET, "/v1/replica/stream?since=0&lineage=another-history", &replica);
    assert_eq!((status, refused["code"].as_str()), (409, Some("lineage_mismatch")));
    let lineage = feed["lineage"].as_str().unwrap();
    let ahead = format!("/v1/replica/stream?since={}&lineage={lineage}", feed["acl_epoch"].as_u64().unwrap() + 1);
    assert_eq!(send!(app, GET, ahead, &replica).1["code"], "lineage_mismatch", "an epoch ahead of the primary's");
    let renewal = json!({"session": "forged-session", "applied_epoch": 1_000_000});
    let (status, refused, _) = send!(app, POST, "/v1/replica/lease", &replica, renewal.clone());
    assert_eq!((status, refused["code"].as_str()), (404, Some("unknown_session")));
    for unlisted in [token("nobody", "nobody", &[], "replica"), acme_admin.clone()] {
        let stream = format!("/v1/replica/stream?since=0&lineage={lineage}");
        assert_eq!(send!(app, GET, stream, &unlisted).0, 403);
        assert_eq!(send!(app, POST, "/v1/replica/lease", &unlisted, renewal.clone()).0, 403);
    }
}

#[actix_web::test]
async fn empty_revoke_lists_are_refused_and_no_op_changes_keep_the_epoch() {
    let directory = tempfile::tempdir().unwrap();
    let state = durable_state(directory.path()).await;
    let app = actix_test::init_service(warrant::http::server::app(state)).await;
    let admin = token("acme", "root", &[], "admin");
    let upload =
        json!({"documents": [{"doc_id": "hotel", "text": "Hotel stays cost 180 euros.", "acl": {"groups": ["all"]}}]});
    let (_, body, _) = send!(app, PUT, "/v1/admin/documents", &admin, upload);
    let epoch = body["acl_epoch"].as_u64().unwrap();
    for empty in [json!({"doc_id": "hotel", "groups": [], "users": []}), json!({"doc_id": "hotel", "groups": []})] {
        let (status, body, _) = send!(app, POST, "/v1/admin/acl/revoke", &admin, empty);
        assert_eq!((status, body["code"].as_str()), (400, Some("empty_revoke")), "{body}");
    }
    let again = json!({"doc_id": "hotel", "groups": ["all"]});
    let (status, body, _) = send!(app, POST, "/v1/admin/acl/grant", &admin, again);
    assert_eq!((status, body["acl_epoch"].as_u64()), (200, Some(epoch)), "granting what is granted changes nothing");
    let absent = json!({"doc_id": "hotel", "users": ["nobody"]});
    let (status, body, _) = send!(app, POST, "/v1/admin/acl/revoke", &admin, absent);
    assert_eq!((status, body["acl_epoch"].as_u64()), (200, Some(epoch)));
    let (_, feed, _) = send!(app, GET, "/v1/admin/acl/changes?since=0", &admin);
    assert_eq!(feed["changes"].as_array().unwrap().len(), 1, "no-ops never grow the log: {feed}");
    let all = json!({"doc_id": "hotel"});
    let (status, body, _) = send!(app, POST, "/v1/admin/acl/revoke", &admin, all);
    assert_eq!((status, body["acl_epoch"].as_u64()), (200, Some(epoch + 1)), "omitting both lists revokes everything");
}

// ---- real processes: kill -9 in a loop under concurrent writes ----

/// The operations one client made on its own documents, in order, with the epoch each was
/// acknowledged at (`None`: in flight when the server died).
#[derive(Clone, Debug)]
struct Sent {
    doc_id: String,
    kind: &'static str,
    user: Option<String>,
    epoch: Option<u64>,
}

fn durable_server(root: &Path) -> Process {
    let mut command = command(&root.join("snapshots"), &[]);
    command
        .env("WARRANT__STORAGE__DIR", root.join("data"))
        .env("WARRANT__DEMO__LOAD", "false")
        // Checkpoints (snapshot + compaction) happen often enough to be crashed into.
        .env("WARRANT__STORAGE__CHECKPOINT_CHANGES", "40")
        .env("WARRANT__SERVER__ADMIN_ACL_CHANGES_PER_TENANT", "64");
    spawn_command(command)
}

/// One client: sequential writes on its own documents until `stop`, recording each and counting
/// the acknowledged ones in `acknowledged`.
async fn client_load(
    base: String,
    client: usize,
    seed: u64,
    stop: Instant,
    mut next_user: usize,
    acknowledged: Arc<AtomicUsize>,
) -> Vec<Sent> {
    let http = reqwest::Client::new();
    let admin = token("acme", "root", &[], "admin");
    let mut random = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut sent = Vec::new();
    let mut alive: BTreeMap<String, Vec<String>> = BTreeMap::new();
    while Instant::now() < stop {
        let doc_id = format!("c{client}d{}", random.gen_range(0..4));
        let granted = alive.get(&doc_id).cloned();
        let (kind, path, method, body, user) = match (granted, random.gen_range(0..4)) {
            (None, _) | (Some(_), 0) => {
                let text = format!("zq{doc_id} marker text version {}", random.r#gen::<u32>());
                let body = json!({"documents": [{"doc_id": doc_id, "text": text, "acl": {"groups": ["all"]}}]});
                ("upsert", "/v1/admin/documents".to_owned(), reqwest::Method::PUT, Some(body), None)
            }
            (Some(_), 1) => ("delete", format!("/v1/admin/documents/{doc_id}"), reqwest::Method::DELETE, None, None),
            (Some(users), 2) if !users.is_empty() => {
                let user = users[random.gen_range(0..users.len())].clone();
                let body = json!({"doc_id": doc_id, "users": [user]});
                ("revoke", "/v1/admin/acl/revoke".to_owned(), reqwest::Method::POST, Some(body), Some(user))
            }
            (Some(_), _) => {
                next_user += 1;
                let user = format!("u{client}x{next_user}");
                let body = json!({"doc_id": doc_id, "users": [user]});
                ("grant", "/v1/admin/acl/grant".to_owned(), reqwest::Method::POST, Some(body), Some(user))
            }
        };
        sent.push(Sent { doc_id: doc_id.clone(), kind, user: user.clone(), epoch: None });
        let (status, reply) = call(&http, &base, method, &path, &admin, body).await;
        if status != 200 {
            // The server died mid-request (status 0) or refused: this write is not acknowledged.
            if status == 0 {
                break;
            }
            assert_eq!(status, 503, "unexpected refusal {reply}");
            sent.pop();
            continue;
        }
        sent.last_mut().unwrap().epoch = reply["acl_epoch"].as_u64();
        acknowledged.fetch_add(1, Ordering::SeqCst);
        match kind {
            "upsert" => {
                alive.insert(doc_id, Vec::new());
            }
            "delete" => {
                alive.remove(&doc_id);
            }
            "grant" => alive.get_mut(&doc_id).unwrap().push(user.unwrap()),
            _ => alive.get_mut(&doc_id).unwrap().retain(|granted| Some(granted) != user.as_ref()),
        }
    }
    sent
}

/// The feed's changes of the tenant, as (epoch, kind, doc_id, user).
fn feed_changes(feed: &Value) -> Vec<(u64, String, String, Option<String>)> {
    feed["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|change| {
            let mutation = &change["mutation"];
            let user = mutation["users"].as_array().and_then(|users| users.first()).and_then(Value::as_str);
            (
                change["epoch"].as_u64().unwrap(),
                mutation["kind"].as_str().unwrap().to_owned(),
                mutation["doc_id"].as_str().unwrap().to_owned(),
                user.map(str::to_owned),
            )
        })
        .collect()
}

#[actix_web::test]
async fn kill_9_at_random_moments_loses_no_acknowledged_write_and_invents_none() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    const ITERATIONS: usize = 20;
    const CLIENTS: usize = 3;
    let root = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let admin = token("acme", "root", &[], "admin");
    let mut random = rand::rngs::SmallRng::seed_from_u64(0x5eed);
    let mut history: Vec<Vec<Sent>> = vec![Vec::new(); CLIENTS];
    let mut last_epoch = 0;
    let mut lineage = None;
    for iteration in 0..ITERATIONS {
        let mut server = durable_server(root.path());
        // Restart: every acknowledged write is there, the epoch never goes backwards, the lineage
        // is the data directory's.
        let (status, feed) =
            call(&http, &server.base, reqwest::Method::GET, "/v1/admin/acl/changes?since=0", &admin, None).await;
        assert_eq!(status, 200, "{feed}");
        let epoch = feed["acl_epoch"].as_u64().unwrap();
        assert!(epoch >= last_epoch, "iteration {iteration}: epoch went back from {last_epoch} to {epoch}");
        let seen_lineage = feed["lineage"].as_str().unwrap().to_owned();
        assert_eq!(lineage.get_or_insert_with(|| seen_lineage.clone()), &seen_lineage);
        verify(&feed, &mut history, iteration);
        last_epoch = epoch;

        // The kill comes after a seeded number of acknowledged writes, then a seeded delay that
        // lands anywhere inside the next requests: a count, not a wall time, so a loaded machine
        // (slower writes) crashes the server at as many points as an idle one.
        let kill_after = random.gen_range(5..60);
        let then = Duration::from_micros(random.gen_range(0..20_000));
        let acknowledged = Arc::new(AtomicUsize::new(0));
        let stop = Instant::now() + Duration::from_secs(30);
        let loads: Vec<_> = (0..CLIENTS)
            .map(|client| {
                let base = server.base.clone();
                let next_user = iteration * 10_000;
                actix_rt::spawn(client_load(base, client, random.r#gen(), stop, next_user, acknowledged.clone()))
            })
            .collect();
        while acknowledged.load(Ordering::SeqCst) < kill_after && Instant::now() < stop {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(then).await;
        server.child.kill().unwrap(); // SIGKILL: no shutdown path runs
        server.child.wait().unwrap();
        for (client, load) in loads.into_iter().enumerate() {
            history[client].extend(load.await.unwrap());
        }
        drop(server);
    }
    let server = durable_server(root.path());
    let (_, feed) =
        call(&http, &server.base, reqwest::Method::GET, "/v1/admin/acl/changes?since=0", &admin, None).await;
    verify(&feed, &mut history, ITERATIONS);
    let acknowledged =
        history.iter().map(|sent| sent.iter().filter(|write| write.epoch.is_some()).count()).sum::<usize>();
    assert!(acknowledged >= 5 * ITERATIONS, "only {acknowledged} writes acknowledged in {ITERATIONS} runs");

    // What a reader sees after the last restart is what the feed says: every live document of
    // each client is retrievable by its marker, with the granted users, and nothing else.
    let mut live: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (_, kind, doc_id, user) in feed_changes(&feed) {
        match kind.as_str() {
            "upsert" => {
                live.insert(doc_id, BTreeSet::new());
            }
            "delete" => {
                live.remove(&doc_id);
            }
            "grant" => {
                live.get_mut(&doc_id).unwrap().insert(user.unwrap());
            }
            _ => {
                live.get_mut(&doc_id).unwrap().remove(&user.unwrap());
            }
        }
    }
    for client in 0..CLIENTS {
        for document in 0..4 {
            let doc_id = format!("c{client}d{document}");
            let reader = token("acme", "reader", &["all"], "");
            let (status, body) = call(
                &http,
                &server.base,
                reqwest::Method::POST,
                "/v1/retrieve",
                &reader,
                Some(json!({"query": format!("zq{doc_id} marker"), "k": 20})),
            )
            .await;
            assert_eq!(status, 200, "{body}");
            let found = super::snapshots::retrieved_docs(&body).contains(&doc_id);
            assert_eq!(
                found,
                live.contains_key(&doc_id),
                "{doc_id}: served {found}, live per feed {}",
                live.contains_key(&doc_id)
            );
        }
    }
    // A revoked user reads nothing of the document; a granted one reads it.
    let revoked = feed_changes(&feed)
        .into_iter()
        .rev()
        .find(|(_, kind, doc_id, _)| kind == "revoke" && live.contains_key(doc_id));
    if let Some((_, _, doc_id, Some(user))) = revoked
        && !live[&doc_id].contains(&user)
    {
        let bearer = token("acme", &user, &[], "");
        let (_, body) = call(
            &http,
            &server.base,
            reqwest::Method::POST,
            "/v1/retrieve",
            &bearer,
            Some(json!({"query": format!("zq{doc_id} marker")})),
        )
        .await;
        assert!(!super::snapshots::retrieved_docs(&body).contains(&doc_id), "a revoke came back after a crash");
        // ... and a replica started from a checkpoint taken after the crash enforces it too.
        let operator = token("ops", "op", &[], "operator");
        let (status, created) =
            call(&http, &server.base, reqwest::Method::POST, "/v1/admin/snapshots", &operator, None).await;
        assert_eq!(status, 200, "{created}");
        let snapshot = root.path().join("snapshots").join(created["snapshot_id"].as_str().unwrap());
        let replica = spawn_command(command(
            &root.path().join("snapshots"),
            &["--restore", snapshot.to_str().unwrap(), "--follow", &server.base],
        ));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, body) = call(
                &http,
                &replica.base,
                reqwest::Method::POST,
                "/v1/retrieve",
                &bearer,
                Some(json!({"query": format!("zq{doc_id} marker")})),
            )
            .await;
            assert!(status == 503 || status == 200, "{body}");
            assert!(
                !super::snapshots::retrieved_docs(&body).contains(&doc_id),
                "the replica served a revoked document"
            );
            if status == 200 {
                break;
            }
            assert!(Instant::now() < deadline, "the replica never became fresh");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Checks the restarted server's feed against what the clients sent: every acknowledged write is
/// in it at its epoch, each client's writes appear in the order sent, only the last write of a
/// client may be missing (in flight at the kill) or present without acknowledgement, and nothing
/// appears that nobody sent. Writes in flight that the feed holds count as acknowledged from now.
fn verify(feed: &Value, history: &mut [Vec<Sent>], iteration: usize) {
    let changes = feed_changes(feed);
    let epochs: Vec<u64> = changes.iter().map(|change| change.0).collect();
    assert!(epochs.windows(2).all(|pair| pair[0] <= pair[1]), "feed out of order");
    for (client, sent) in history.iter_mut().enumerate() {
        let prefix = format!("c{client}d");
        let mine: Vec<_> = changes.iter().filter(|change| change.2.starts_with(&prefix)).collect();
        let mut index = 0;
        let mut kept = Vec::new();
        for write in sent.drain(..) {
            let matches = mine.get(index).is_some_and(|(epoch, kind, doc_id, user)| {
                kind == write.kind
                    && *doc_id == write.doc_id
                    && *user == write.user
                    && write.epoch.is_none_or(|at| at == *epoch)
            });
            match (matches, write.epoch) {
                (true, _) => {
                    let epoch = mine[index].0;
                    index += 1;
                    kept.push(Sent { epoch: Some(epoch), ..write });
                }
                (false, Some(epoch)) => {
                    panic!("iteration {iteration}: acknowledged {write:?} (epoch {epoch}) is missing or out of place")
                }
                // In flight at the kill and not durable: it never happened.
                (false, None) => {}
            }
        }
        assert_eq!(
            index,
            mine.len(),
            "iteration {iteration}: the feed holds writes client {client} never sent: {:?}",
            &mine[index..]
        );
        *sent = kept;
    }
}

// ---- lineage: a primary restored from an older snapshot while a replica follows ----

async fn readyz(http: &reqwest::Client, base: &str) -> (u16, Value) {
    match http.get(format!("{base}/readyz")).timeout(Duration::from_secs(5)).send().await {
        Ok(response) => (response.status().as_u16(), response.json().await.unwrap_or(Value::Null)),
        Err(_) => (0, Value::Null),
    }
}

#[actix_web::test]
async fn a_replica_refuses_a_primary_restored_from_an_older_snapshot_until_it_re_synchronizes() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    const LAG_MS: u64 = 1500; // replica.max_lag_ms of `command`
    let root = tempfile::tempdir().unwrap();
    let snapshots = root.path().join("snapshots");
    let http = reqwest::Client::new();
    let mut primary_command = command(&snapshots, &[]);
    primary_command.env("WARRANT__STORAGE__DIR", root.path().join("data-1"));
    let mut primary = spawn_command(primary_command);
    let operator = token("ops", "op", &[], "operator");
    let admin = token("acme", "root", &[], "admin");
    let alice = token("acme", "alice", &["everyone", "engineering"], "");
    let (status, created) =
        call(&http, &primary.base, reqwest::Method::POST, "/v1/admin/snapshots", &operator, None).await;
    assert_eq!(status, 200, "{created}");
    let snapshot = snapshots.join(created["snapshot_id"].as_str().unwrap());
    let replica =
        spawn_command(command(&snapshots, &["--restore", snapshot.to_str().unwrap(), "--follow", &primary.base]));
    let vacation = json!({"query": "How many paid vacation days per year?"});
    let travel = json!({"query": "hotel stays reimbursed per night in London"});
    let deadline = Instant::now() + Duration::from_secs(30);
    while readyz(&http, &replica.base).await.0 != 200 {
        assert!(Instant::now() < deadline, "replica never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, ready) = readyz(&http, &replica.base).await;
    let (_, primary_ready) = readyz(&http, &primary.base).await;
    assert_eq!(ready["lineage"], primary_ready["lineage"], "a replica keeps its primary's lineage");
    let old_lineage = ready["lineage"].as_str().unwrap().to_owned();

    // The primary revokes travel-policy; the replica enforces it.
    revoke(&http, &primary.base, &admin, "travel-policy").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) =
            call(&http, &replica.base, reqwest::Method::POST, "/v1/retrieve", &alice, Some(travel.clone())).await;
        if status == 200 && !super::snapshots::retrieved_docs(&body).contains(&"travel-policy".to_owned()) {
            break;
        }
        assert!(Instant::now() < deadline, "the replica never enforced the revoke");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The primary dies and is restored from the older snapshot into a new data directory, on the
    // same address: a new lineage, whose epochs start below the replica's.
    let address = primary.base.trim_start_matches("http://").to_owned();
    primary.child.kill().unwrap();
    primary.child.wait().unwrap();
    // With its primary gone the replica fails closed once its lease runs out (one lease, 2 s).
    let mut refused = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while refused == 0 {
        let (status, body) =
            call(&http, &replica.base, reqwest::Method::POST, "/v1/retrieve", &alice, Some(travel.clone())).await;
        match status {
            503 => {
                assert_eq!(body["code"], "replica_stale");
                refused += 1;
            }
            200 => assert!(!super::snapshots::retrieved_docs(&body).contains(&"travel-policy".to_owned())),
            other => panic!("unexpected status {other}: {body}"),
        }
        assert!(Instant::now() < deadline, "the replica kept serving with its primary gone");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut restored_command = command(&snapshots, &["--restore", snapshot.to_str().unwrap()]);
    restored_command.env("WARRANT__STORAGE__DIR", root.path().join("data-2")).env("WARRANT__SERVER__BIND", &address);
    let restored = spawn_command(restored_command);
    // A new client: the old one may hold a pooled connection to the dead primary's address.
    let http = reqwest::Client::new();
    // After the restore the primary revokes vacation-policy, then moves its epoch past the
    // replica's with grants: a replica comparing bare epochs would skip that revoke.
    revoke(&http, &restored.base, &admin, "vacation-policy").await;
    let revoked_at = Instant::now();
    for index in 0..6 {
        let grant = json!({"doc_id": "laptop-faq", "users": [format!("extra-{index}")]});
        assert_eq!(
            call(&http, &restored.base, reqwest::Method::POST, "/v1/admin/acl/grant", &admin, Some(grant)).await.0,
            200
        );
    }
    let (_, restored_ready) = readyz(&http, &restored.base).await;
    let new_lineage = restored_ready["lineage"].as_str().unwrap().to_owned();
    assert_ne!(new_lineage, old_lineage, "a restore forks the lineage");

    // Until the replica has re-synchronized it refuses; it never serves the revoked document.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let started = Instant::now();
        let (status, body) =
            call(&http, &replica.base, reqwest::Method::POST, "/v1/retrieve", &alice, Some(vacation.clone())).await;
        let (_, ready) = readyz(&http, &replica.base).await;
        match status {
            503 => {
                assert_eq!(body["code"], "replica_stale");
                refused += 1;
            }
            200 => {
                let served = super::snapshots::retrieved_docs(&body).contains(&"vacation-policy".to_owned());
                assert!(
                    !served || started < revoked_at + Duration::from_millis(LAG_MS),
                    "the replica served a document its primary revoked after the restore"
                );
            }
            other => panic!("unexpected status {other}: {body}"),
        }
        if ready["lineage"] == new_lineage.as_str() && ready["replica"]["fresh"] == true && status == 200 {
            assert_eq!(ready["acl_epoch"], restored_ready["acl_epoch"]);
            assert!(!super::snapshots::retrieved_docs(&body).contains(&"vacation-policy".to_owned()));
            break;
        }
        assert!(Instant::now() < deadline, "the replica never re-synchronized: {ready}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(refused > 0, "the replica never refused while it could not follow");
}

/// A replica whose snapshot is older than the primary's retention window (the changes it needs
/// were compacted into a checkpoint: 410 `changes_compacted`) re-bootstraps from the primary's
/// latest snapshot by itself, and never serves what the primary revoked meanwhile.
#[actix_web::test]
async fn a_replica_behind_the_retention_window_re_bootstraps_from_the_primarys_snapshot() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let root = tempfile::tempdir().unwrap();
    let snapshots = root.path().join("snapshots");
    let http = reqwest::Client::new();
    let operator = token("ops", "op", &[], "operator");
    let admin = token("acme", "root", &[], "admin");
    let alice = token("acme", "alice", &["everyone", "engineering"], "");
    let replication = token("replication", "replica-1", &[], "replica");
    // A primary that checkpoints after every change and keeps no log behind its checkpoints.
    let mut primary_command = command(&snapshots, &[]);
    primary_command
        .env("WARRANT__STORAGE__DIR", root.path().join("data"))
        .env("WARRANT__STORAGE__CHECKPOINT_CHANGES", "1")
        .env("WARRANT__STORAGE__LOG_RETENTION_EPOCHS", "0");
    let primary = spawn_command(primary_command);
    let (status, created) =
        call(&http, &primary.base, reqwest::Method::POST, "/v1/admin/snapshots", &operator, None).await;
    assert_eq!(status, 200, "{created}");
    // Keep a copy: the primary's own checkpoints may prune it from its snapshot directory.
    let old = root.path().join("old-snapshot");
    std::fs::create_dir_all(&old).unwrap();
    let source = snapshots.join(created["snapshot_id"].as_str().unwrap());
    for entry in std::fs::read_dir(&source).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), old.join(entry.file_name())).unwrap();
    }
    let old_epoch = created["acl_epoch"].as_u64().unwrap();

    // The primary revokes, and a checkpoint compacts that change away.
    revoke(&http, &primary.base, &admin, "vacation-policy").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let path = format!("/v1/admin/acl/changes?since={old_epoch}");
        let (status, body) = call(&http, &primary.base, reqwest::Method::GET, &path, &replication, None).await;
        if status == 410 {
            assert_eq!(body["code"], "changes_compacted");
            break;
        }
        assert_eq!(status, 200, "{body}");
        assert!(Instant::now() < deadline, "the primary never compacted its log");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, primary_ready) = readyz(&http, &primary.base).await;

    // A replica from the old snapshot cannot follow the feed from it: it re-bootstraps.
    let replica = spawn_command(command(&snapshots, &["--restore", old.to_str().unwrap(), "--follow", &primary.base]));
    let vacation = json!({"query": "How many paid vacation days per year?"});
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) =
            call(&http, &replica.base, reqwest::Method::POST, "/v1/retrieve", &alice, Some(vacation.clone())).await;
        let (_, ready) = readyz(&http, &replica.base).await;
        match status {
            503 => assert_eq!(body["code"], "replica_stale", "{body}"),
            200 => assert!(
                !super::snapshots::retrieved_docs(&body).contains(&"vacation-policy".to_owned()),
                "the replica served a document revoked before its snapshot was compacted away: {ready}"
            ),
            other => panic!("unexpected status {other}: {body}"),
        }
        if status == 200 && ready["replica"]["fresh"] == true {
            assert_eq!(ready["lineage"], primary_ready["lineage"]);
            assert!(ready["acl_epoch"].as_u64().unwrap() > old_epoch, "{ready}");
            break;
        }
        assert!(Instant::now() < deadline, "the replica never re-bootstrapped: {ready}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Revokes all access to `doc_id` on the primary at `base` as `admin`; the call must succeed.
async fn revoke(http: &reqwest::Client, base: &str, admin: &str, doc_id: &str) {
    let body = json!({"doc_id": doc_id});
    let (status, reply) = call(http, base, reqwest::Method::POST, "/v1/admin/acl/revoke", admin, Some(body)).await;
    assert_eq!(status, 200, "revoke {doc_id}: {reply}");
}

/// Every sentence vector of the chunks of `shards`, by chunk id (chunks without any are left out).
fn sentence_vectors(
    shards: &[Arc<warrant::index::shard::Shard>],
) -> BTreeMap<String, Arc<warrant::domain::SentenceVectors>> {
    shards
        .iter()
        .flat_map(|shard| shard.export())
        .filter_map(|(chunk, _)| Some((chunk.id.to_string(), chunk.sentence_vectors.clone()?)))
        .collect()
}

#[actix_web::test]
async fn sentence_vectors_are_made_once_at_ingestion_and_kept_through_restarts_and_snapshots() {
    use warrant::embed::Embedder;
    let settings = settings(2);
    let directory = tempfile::tempdir().unwrap();
    // The counting fake is a semantic embedder (as MiniLM is): the engine embeds sentences too.
    let counting = super::support::FakeCountingEmbedder::new(settings.embedder.dim);
    let params = EngineParams::from_settings(&settings, settings.embedder.dim);
    let (engine, _) = Engine::open(params.clone(), counting.clone(), directory.path()).await.unwrap();
    let text = "Hotel stays are reimbursed up to 180 euros per night. Taxis need a receipt. \
                Hotel stays are reimbursed up to 180 euros per night.";
    engine.upsert("acme", vec![doc("hotel", "Hotels", text, &["all"])]).await.unwrap();
    // One text for the chunk, then each distinct sentence once (the repeated one is not).
    assert_eq!(counting.take(), 1 + 2);
    let made = sentence_vectors(&engine.shards());
    assert_eq!(made.len(), 1, "the one chunk has its sentence vectors");
    let vectors = made.values().next().unwrap();
    assert_eq!(vectors.len(), 2);
    let expected = counting.embed(&["Taxis need a receipt.".to_owned()]).await.unwrap().remove(0);
    let stored = vectors.vector(&warrant::domain::sentence_digest("Taxis need a receipt.")).expect("stored");
    let cosine: f32 = stored.iter().zip(&expected).map(|(a, b)| a * b).sum();
    assert!(cosine > 0.999, "the stored vector is the sentence's own (cosine {cosine})");
    assert!(vectors.vector(&warrant::domain::sentence_digest("Taxis need a receipt")).is_none());
    drop(engine);

    let (engine, _) = Engine::open(params.clone(), counting.clone(), directory.path()).await.unwrap();
    assert_eq!(sentence_vectors(&engine.shards()), made, "a restart keeps them (nothing re-embedded)");
    assert_eq!(counting.take(), 1, "only the check above embedded");
    let root = tempfile::tempdir().unwrap();
    let created = warrant::snapshot::create(&engine, root.path(), 1).await.unwrap();
    let restored = warrant::snapshot::restore(&created.path, "fake-counting", settings.embedder.dim, params.vector)
        .expect("the snapshot restores");
    assert_eq!(sentence_vectors(&restored.shards), made, "a snapshot keeps them");

    // The hashed embedder is not semantic: the verifier does not embed with it, so nothing is made.
    let plain = Engine::start(params.clone(), Arc::new(HashedEmbedder::new(settings.embedder.dim))).unwrap();
    plain.upsert("acme", vec![doc("hotel", "Hotels", text, &["all"])]).await.unwrap();
    assert!(sentence_vectors(&plain.shards()).is_empty());
    // Nor with the setting off.
    let mut off = settings.clone();
    off.verifier.sentence_vectors = false;
    let params = EngineParams::from_settings(&off, off.embedder.dim);
    let quiet = Engine::start(params, counting.clone()).unwrap();
    quiet.upsert("acme", vec![doc("hotel", "Hotels", text, &["all"])]).await.unwrap();
    assert!(sentence_vectors(&quiet.shards()).is_empty());
    assert_eq!(counting.take(), 1);
}
