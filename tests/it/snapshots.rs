//! Snapshots and replicas: round trip, every corruption case refused with the file named, the
//! golden v1 snapshot, and two real server processes (primary + replica) on loopback.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use warrant::app::load_corpus;
use warrant::config::Settings;
use warrant::domain::Principal;
use warrant::embed::{Embedder, HashedEmbedder};
use warrant::embedded::{Engine, EngineParams};
use warrant::http::auth::{Claims, mint_hs256};
use warrant::snapshot::{self, SnapshotError};

use super::support::{doc, principal};

const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");

pub(crate) fn demo_corpus() -> PathBuf {
    Path::new(MANIFEST_DIR).join("fixtures/demo/corpus.json")
}

pub(crate) fn settings(shards: usize, dim: usize) -> Settings {
    let mut settings = Settings::defaults();
    settings.index.shards = shards;
    settings.embedder.kind = warrant::config::EmbedderKind::Hashed;
    settings.embedder.dim = dim;
    settings
}

fn engine(settings: &Settings) -> Arc<Engine> {
    let embedder = Arc::new(HashedEmbedder::new(settings.embedder.dim));
    Engine::start(EngineParams::from_settings(settings, settings.embedder.dim), embedder).expect("engine starts")
}

pub(crate) fn principals() -> Vec<Principal> {
    vec![
        principal("acme", "alice", &["everyone", "engineering"]),
        principal("acme", "bob", &["everyone"]),
        principal("globex", "gina", &["staff"]),
    ]
}

const QUERIES: &[&str] = &[
    "How much are hotel stays reimbursed per night in London?",
    "reorganisation plan",
    "laptop replacement",
    "expenses",
];

/// (principal, query) -> [(chunk id, doc id, score)] in rank order.
pub(crate) async fn retrieve_all(engine: &Engine, principals: &[Principal]) -> Vec<Vec<(String, String, f64)>> {
    let mut results = Vec::new();
    for principal in principals {
        let scope = engine.scope(principal);
        for query in QUERIES {
            let retrieved = engine.retrieve(&scope, query).await.expect("retrieve");
            results.push(
                retrieved
                    .candidates
                    .iter()
                    .map(|candidate| (candidate.chunk.id.to_string(), candidate.chunk.doc_id.clone(), candidate.score))
                    .collect(),
            );
        }
    }
    results
}

pub(crate) async fn demo_engine_with_history(settings: &Settings) -> Arc<Engine> {
    let engine = engine(settings);
    load_corpus(engine.as_ref(), &demo_corpus()).await.expect("demo corpus");
    // History beyond plain ingestion: a new version (tombstones the old) and a revocation.
    engine
        .upsert("acme", vec![doc("laptop-faq", "Laptop FAQ", "Laptops are replaced every four years.", &["everyone"])])
        .await
        .expect("upsert");
    engine
        .mutate(warrant::acl::AclMutation::Revoke {
            tenant: "acme".into(),
            doc_id: "reorg-plan".into(),
            groups: None,
            users: Some(vec!["alice".into()]),
        })
        .await
        .expect("revoke");
    engine
}

#[actix_web::test]
async fn snapshot_round_trip_gives_identical_retrieval() {
    let settings = settings(3, 64);
    let original = demo_engine_with_history(&settings).await;
    let root = tempfile::tempdir().unwrap();
    let created = snapshot::create(&original, root.path(), 3).await.expect("create");
    assert_eq!(created.acl_epoch, original.acl().epoch());
    let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(64));
    let (restored, manifest) =
        snapshot::start_engine(&settings, embedder, &created.path, false).await.expect("restore");
    assert_eq!(manifest.shards, 3);
    assert_eq!(restored.acl().epoch(), original.acl().epoch());
    assert_eq!(restored.acl().next_ordinal(), original.acl().next_ordinal());
    assert_eq!(restored.acl().log(), original.acl().log());
    assert_eq!(restored.acl().lineage(), original.acl().lineage(), "a replica-style restore keeps the lineage");
    let before = retrieve_all(&original, &principals()).await;
    let after = retrieve_all(&restored, &principals()).await;
    assert!(before.iter().any(|hits| !hits.is_empty()));
    assert_eq!(before.len(), after.len());
    for (expected, got) in before.iter().zip(&after) {
        let ids = |hits: &[(String, String, f64)]| hits.iter().map(|hit| hit.0.clone()).collect::<Vec<_>>();
        assert_eq!(ids(expected), ids(got));
        for (left, right) in expected.iter().zip(got) {
            assert!((left.2 - right.2).abs() < 1e-9, "fused scores differ: {} vs {}", left.2, right.2);
        }
    }
    // Superseded versions are compacted away: only live chunks are stored.
    let live_chunks: usize = restored.stats().iter().map(|shard| shard.chunks).sum();
    assert_eq!(live_chunks, manifest.chunks);
}

#[actix_web::test]
async fn snapshots_beyond_retain_are_pruned_oldest_first() {
    let settings = settings(2, 32);
    let engine = engine(&settings);
    load_corpus(engine.as_ref(), &demo_corpus()).await.expect("demo corpus");
    let root = tempfile::tempdir().unwrap();
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(snapshot::create(&engine, root.path(), 2).await.expect("create").snapshot_id);
    }
    let mut left: Vec<String> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ids[2..].to_vec());
}

/// A fresh snapshot of the demo corpus (3 shards, hashed-64) to damage.
async fn fresh_snapshot() -> (tempfile::TempDir, PathBuf, Settings) {
    let settings = settings(3, 64);
    let engine = demo_engine_with_history(&settings).await;
    let root = tempfile::tempdir().unwrap();
    let created = snapshot::create(&engine, root.path(), 3).await.expect("create");
    (root, created.path, settings)
}

pub(crate) fn restore_error(path: &Path, settings: &Settings, name: &str, dim: usize) -> SnapshotError {
    let params = EngineParams::from_settings(settings, dim).vector;
    match snapshot::restore(path, name, dim, params) {
        Ok(_) => panic!("a damaged snapshot was restored"),
        Err(error) => error,
    }
}

#[actix_web::test]
async fn restore_refuses_a_truncated_file_naming_it() {
    let (_root, path, settings) = fresh_snapshot().await;
    let file = path.join("shard-0001.graph.bin");
    let length = std::fs::metadata(&file).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&file).unwrap().set_len(length / 2).unwrap();
    let error = restore_error(&path, &settings, "hashed-64", 64);
    assert!(matches!(error, SnapshotError::Size { .. }), "{error}");
    assert!(error.to_string().contains("shard-0001.graph.bin"), "{error}");
}

#[actix_web::test]
async fn restore_refuses_a_flipped_byte_naming_the_file() {
    let (_root, path, settings) = fresh_snapshot().await;
    for name in ["acl.bin", "acl-changes.json", "shard-0002.chunks.bin"] {
        let file = path.join(name);
        let mut bytes = std::fs::read(&file).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x01;
        std::fs::write(&file, &bytes).unwrap();
        let error = restore_error(&path, &settings, "hashed-64", 64);
        assert!(matches!(error, SnapshotError::Checksum { .. }), "{error}");
        assert!(error.to_string().contains(name), "{error}");
        bytes[middle] ^= 0x01;
        std::fs::write(&file, &bytes).unwrap();
    }
    let manifest = path.join("manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, &text[..text.len() / 2]).unwrap();
    let error = restore_error(&path, &settings, "hashed-64", 64);
    assert!(error.to_string().contains("manifest.json"), "{error}");
}

#[actix_web::test]
async fn restore_refuses_a_missing_file_naming_it() {
    let (_root, path, settings) = fresh_snapshot().await;
    std::fs::remove_file(path.join("acl-changes.json")).unwrap();
    let error = restore_error(&path, &settings, "hashed-64", 64);
    assert!(matches!(error, SnapshotError::Missing { .. }), "{error}");
    assert!(error.to_string().contains("acl-changes.json"), "{error}");
    std::fs::remove_file(path.join("manifest.json")).unwrap();
    let error = restore_error(&path, &settings, "hashed-64", 64);
    assert!(error.to_string().contains("manifest.json"), "{error}");
}

#[actix_web::test]
async fn restore_refuses_a_newer_format_version() {
    let (_root, path, settings) = fresh_snapshot().await;
    let manifest = path.join("manifest.json");
    let mut value: Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    value["format_version"] = json!(3);
    value["a_field_of_version_3"] = json!(true);
    std::fs::write(&manifest, serde_json::to_vec(&value).unwrap()).unwrap();
    let error = restore_error(&path, &settings, "hashed-64", 64);
    assert!(matches!(error, SnapshotError::Format { found: 3, .. }), "{error}");
    assert!(error.to_string().contains("manifest.json"), "{error}");
}

#[actix_web::test]
async fn restore_refuses_another_embedder() {
    let (_root, path, settings) = fresh_snapshot().await;
    for (name, dim) in [("hashed-32", 32), ("minilm:all-MiniLM-L6-v2", 64)] {
        let error = restore_error(&path, &settings, name, dim);
        assert!(matches!(error, SnapshotError::Embedder { .. }), "{error}");
        assert!(error.to_string().contains("hashed-64") && error.to_string().contains(name), "{error}");
    }
}

// ---- golden files ----

const GOLDEN: &str = "tests/golden/snapshot-v1";
const GOLDEN_EXPECTED: &str = "tests/golden/snapshot-v1.expected.json";
const GOLDEN_V2: &str = "tests/golden/snapshot-v2";
const GOLDEN_V2_EXPECTED: &str = "tests/golden/snapshot-v2.expected.json";
const GOLDEN_DIM: usize = 16;

fn golden_settings() -> Settings {
    settings(2, GOLDEN_DIM)
}

fn golden_principals() -> Vec<Principal> {
    vec![
        principal("acme", "alice", &["everyone", "engineering"]),
        principal("acme", "bob", &["everyone"]),
        principal("globex", "gina", &["staff"]),
    ]
}

async fn golden_results(engine: &Engine) -> Value {
    let results = retrieve_all(engine, &golden_principals()).await;
    json!(
        results
            .into_iter()
            .map(|hits| hits.into_iter().map(|(chunk, doc, _)| json!([chunk, doc])).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    )
}

/// The engine the golden snapshots are written from: upserts, a new version and a grant.
async fn golden_engine() -> Arc<Engine> {
    let settings = golden_settings();
    let engine = engine(&settings);
    engine
        .upsert(
            "acme",
            vec![
                doc("travel", "Travel policy", "Hotel stays are reimbursed up to 180 euros per night. Flights longer than six hours may use premium economy.", &["everyone"]),
                doc("reorg-plan", "Reorganisation plan", "The reorganisation plan merges the platform and data teams in March.", &["leads"]),
                doc("laptop-faq", "Laptop FAQ", "Laptops are replaced every three years. Expenses for chargers are reimbursed.", &["everyone"]),
            ],
        )
        .await
        .unwrap();
    engine
        .upsert(
            "globex",
            vec![doc(
                "travel",
                "Globex travel",
                "Hotel stays are reimbursed up to 210 euros per night in London.",
                &["staff"],
            )],
        )
        .await
        .unwrap();
    engine
        .upsert(
            "acme",
            vec![doc(
                "laptop-faq",
                "Laptop FAQ",
                "Laptops are replaced every four years. Expenses for chargers are reimbursed.",
                &["everyone"],
            )],
        )
        .await
        .unwrap();
    engine
        .mutate(warrant::acl::AclMutation::Grant {
            tenant: "acme".into(),
            doc_id: "reorg-plan".into(),
            groups: vec![],
            users: vec!["alice".into()],
        })
        .await
        .unwrap();
    engine
}

/// Writes the golden snapshot of format `format_version` into `directory` and its expected
/// results into `expected_file`.
async fn write_golden(format_version: u32, directory: &str, expected_file: &str) {
    let engine = golden_engine().await;
    let root = tempfile::tempdir().unwrap();
    let created = snapshot::create_in_format(&engine, root.path(), 1, format_version).await.unwrap();
    let target = Path::new(MANIFEST_DIR).join(directory);
    let _ = std::fs::remove_dir_all(&target);
    std::fs::create_dir_all(&target).unwrap();
    for entry in std::fs::read_dir(&created.path).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), target.join(entry.file_name())).unwrap();
    }
    let expected = json!({"epoch": engine.acl().epoch(), "results": golden_results(&engine).await});
    std::fs::write(Path::new(MANIFEST_DIR).join(expected_file), serde_json::to_string_pretty(&expected).unwrap())
        .unwrap();
}

/// Regenerates the golden v1 snapshot and its expected results. Run once per format version:
/// `cargo test --test it snapshots::regenerate_golden_snapshot_v1 -- --ignored`.
#[actix_web::test]
#[ignore = "writes tests/golden; run by hand when a new format version is introduced"]
async fn regenerate_golden_snapshot_v1() {
    write_golden(1, GOLDEN, GOLDEN_EXPECTED).await;
}

/// Regenerates the golden v2 snapshot (with index images) and its expected results:
/// `cargo test --test it snapshots::regenerate_golden_snapshot_v2 -- --ignored`.
#[actix_web::test]
#[ignore = "writes tests/golden; run by hand when a new format version is introduced"]
async fn regenerate_golden_snapshot_v2() {
    write_golden(2, GOLDEN_V2, GOLDEN_V2_EXPECTED).await;
}

/// Format v2 stays readable: the committed golden snapshot loads its index images (no rebuild)
/// and answers as it did.
#[actix_web::test]
async fn golden_snapshot_v2_still_loads_and_retrieves_the_same() {
    let settings = golden_settings();
    let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(GOLDEN_DIM));
    let (engine, manifest) =
        snapshot::start_engine(&settings, embedder, &Path::new(MANIFEST_DIR).join(GOLDEN_V2), false)
            .await
            .expect("golden loads");
    assert_eq!((manifest.format_version, manifest.shards), (2, 2));
    assert!(engine.shards().iter().all(|shard| shard.sealed_graphs() <= 1), "loaded, not compacted into more graphs");
    let expected: Value =
        serde_json::from_slice(&std::fs::read(Path::new(MANIFEST_DIR).join(GOLDEN_V2_EXPECTED)).unwrap()).unwrap();
    assert_eq!(json!(engine.acl().epoch()), expected["epoch"]);
    assert_eq!(golden_results(&engine).await, expected["results"]);
    // The golden's graphs were built by hnsw_rs; each loaded one takes inserts again.
    assert!(engine.shards().iter().all(|shard| shard.sealed_graphs() == 0), "a loaded graph stayed sealed");
    assert!(engine.shards().iter().map(|shard| shard.loaded_graphs()).sum::<usize>() >= 1);
    let badges = "Visitor badges are returned at the front desk before leaving.";
    engine.upsert("acme", vec![doc("badge-policy", "Badge policy", badges, &["everyone"])]).await.unwrap();
    let bob = principal("acme", "bob", &["everyone"]);
    let retrieved = engine.retrieve(&engine.scope(&bob), "visitor badges front desk").await.unwrap();
    assert_eq!(retrieved.candidates.first().map(|candidate| candidate.chunk.doc_id.as_str()), Some("badge-policy"));
}

/// Format v1 stays readable: the committed golden snapshot loads and answers as it did.
#[actix_web::test]
async fn golden_snapshot_v1_still_loads_and_retrieves_the_same() {
    let settings = golden_settings();
    let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(GOLDEN_DIM));
    let (engine, manifest) = snapshot::start_engine(&settings, embedder, &Path::new(MANIFEST_DIR).join(GOLDEN), false)
        .await
        .expect("golden loads");
    assert_eq!((manifest.format_version, manifest.shards), (1, 2));
    let expected: Value =
        serde_json::from_slice(&std::fs::read(Path::new(MANIFEST_DIR).join(GOLDEN_EXPECTED)).unwrap()).unwrap();
    assert_eq!(json!(engine.acl().epoch()), expected["epoch"]);
    assert_eq!(golden_results(&engine).await, expected["results"]);
}

// ---- two real processes: primary and replica ----

const REPLICA_TOKEN_ENV: &str = "WARRANT_IT_REPLICA_TOKEN";
const MAX_LAG_MS: u64 = 1500;

/// A child server process, killed (by its own pid) when dropped.
pub(crate) struct Process {
    pub(crate) child: Child,
    pub(crate) base: String,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn command(snapshot_dir: &Path, arguments: &[&str]) -> Command {
    // Measurements run by hand may point WARRANT_BIN at a release build.
    let binary = std::env::var_os("WARRANT_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_warrant").into());
    let mut command = Command::new(binary);
    command
        .current_dir(MANIFEST_DIR)
        .arg("serve")
        .arg("--config")
        .arg(Path::new(MANIFEST_DIR).join("config/default.toml"))
        .args(arguments)
        .env("WARRANT__SERVER__BIND", "127.0.0.1:0")
        .env("WARRANT__EMBEDDER__KIND", "hashed")
        .env("WARRANT__EMBEDDER__DIM", "64")
        .env("WARRANT__INDEX__SHARDS", "2")
        .env("WARRANT__DEMO__CORPUS", demo_corpus())
        .env("WARRANT__SNAPSHOTS__DIR", snapshot_dir)
        .env("WARRANT__STORAGE__DIR", "")
        .env("WARRANT__REPLICA__TOKEN_ENV", REPLICA_TOKEN_ENV)
        .env("WARRANT__AUTH__REPLICA_SUBJECTS", r#"["replica-1"]"#)
        .env("WARRANT__REPLICA__MAX_LAG_MS", MAX_LAG_MS.to_string())
        .env("WARRANT__REPLICA__POLL_INTERVAL_MS", "100")
        .env(REPLICA_TOKEN_ENV, token("replication", "replica-1", &[], "replica"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// Starts a server and waits (at most 60 s) for the address it prints.
fn spawn(snapshot_dir: &Path, arguments: &[&str]) -> Process {
    spawn_command(command(snapshot_dir, arguments))
}

/// Starts a prepared server command and waits (at most 60 s) for the address it prints.
pub(crate) fn spawn_command(mut command: Command) -> Process {
    let mut child = command.spawn().expect("spawn warrant");
    let stderr = child.stderr.take().unwrap();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Keeps draining stderr so the server never blocks on a full pipe.
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(address) = line.strip_prefix("warrant listening on ") {
                let _ = sender.send(address.trim().to_owned());
            }
        }
    });
    let base = receiver.recv_timeout(Duration::from_secs(60)).expect("server printed its address");
    Process { child, base }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

pub(crate) fn token(tenant: &str, sub: &str, groups: &[&str], role: &str) -> String {
    let claims = Claims {
        sub: sub.into(),
        tenant: tenant.into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        roles: if role.is_empty() { vec![] } else { vec![role.into()] },
        exp: now() + 600,
        iss: None,
        aud: None,
    };
    mint_hs256(&Settings::defaults().auth.hs256_secret, &claims).unwrap()
}

pub(crate) async fn call(
    client: &reqwest::Client,
    base: &str,
    method: reqwest::Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request =
        client.request(method, format!("{base}{path}")).bearer_auth(token).timeout(Duration::from_secs(10));
    if let Some(body) = body {
        request = request.json(&body);
    }
    match request.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            (status, response.json().await.unwrap_or(Value::Null))
        }
        Err(_) => (0, Value::Null),
    }
}

pub(crate) fn retrieved_docs(body: &Value) -> Vec<String> {
    body["chunks"].as_array().into_iter().flatten().map(|chunk| chunk["doc_id"].as_str().unwrap().to_owned()).collect()
}

/// A primary with the demo corpus, a snapshot of it, and a replica following it (ready).
async fn primary_and_replica(client: &reqwest::Client, root: &Path) -> (Process, Process) {
    let primary = spawn(root, &[]);
    let operator = token("ops", "operator-1", &[], "operator");
    let (status, created) =
        call(client, &primary.base, reqwest::Method::POST, "/v1/admin/snapshots", &operator, None).await;
    assert_eq!(status, 200, "{created}");
    let snapshot = root.join(created["snapshot_id"].as_str().unwrap());
    let replica = spawn(root, &["--restore", snapshot.to_str().unwrap(), "--follow", &primary.base]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = client.get(format!("{}/readyz", replica.base)).send().await.map(|r| r.status().as_u16());
        if matches!(ready, Ok(200)) {
            break;
        }
        assert!(Instant::now() < deadline, "replica never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (primary, replica)
}

#[actix_web::test]
async fn replica_enforces_a_revoke_on_the_primary_within_its_lag_bound() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let root = tempfile::tempdir().unwrap();
    let (primary, replica) = primary_and_replica(&client, root.path()).await;
    let alice = token("acme", "alice", &["everyone", "engineering"], "");
    let query = json!({"query": "How much are hotel stays reimbursed per night in London?"});
    let (status, body) =
        call(&client, &replica.base, reqwest::Method::POST, "/v1/retrieve", &alice, Some(query.clone())).await;
    assert_eq!(status, 200, "{body}");
    assert!(retrieved_docs(&body).contains(&"travel-policy".to_owned()));

    // The feed: a replica token reads every tenant; an admin only its own.
    let replica_token = token("replication", "replica-1", &[], "replica");
    let (_, feed) =
        call(&client, &primary.base, reqwest::Method::GET, "/v1/admin/acl/changes?since=0", &replica_token, None).await;
    let tenants: std::collections::BTreeSet<&str> = feed["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|change| change["mutation"]["tenant"].as_str().unwrap())
        .collect();
    assert_eq!(tenants.into_iter().collect::<Vec<_>>(), ["acme", "globex"]);
    let admin = token("acme", "root", &[], "admin");
    let (_, own) =
        call(&client, &primary.base, reqwest::Method::GET, "/v1/admin/acl/changes?since=0", &admin, None).await;
    assert!(own["changes"].as_array().unwrap().iter().all(|change| change["mutation"]["tenant"] == "acme"));
    // Writes go to the primary only.
    let (status, body) = call(
        &client,
        &replica.base,
        reqwest::Method::POST,
        "/v1/admin/acl/revoke",
        &admin,
        Some(json!({"doc_id": "travel-policy"})),
    )
    .await;
    assert_eq!((status, body["code"].as_str()), (409, Some("read_only_replica")));

    let (status, revoked) = call(
        &client,
        &primary.base,
        reqwest::Method::POST,
        "/v1/admin/acl/revoke",
        &admin,
        Some(json!({"doc_id": "travel-policy"})),
    )
    .await;
    assert_eq!(status, 200, "{revoked}");
    let revoked_at = Instant::now();
    // Within the bound the replica either stops serving the document or refuses (fail closed);
    // the deadline adds slack for a loaded machine, never enough to hide a missing revoke.
    let deadline = revoked_at + Duration::from_millis(MAX_LAG_MS) + Duration::from_secs(5);
    let mut enforced = false;
    for _ in 0..1000 {
        let (status, body) =
            call(&client, &replica.base, reqwest::Method::POST, "/v1/retrieve", &alice, Some(query.clone())).await;
        if status == 200 && !retrieved_docs(&body).contains(&"travel-policy".to_owned()) {
            assert!(body["acl_epoch"].as_u64().unwrap() >= revoked["acl_epoch"].as_u64().unwrap());
            enforced = true;
            break;
        }
        if Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(enforced, "replica still served a revoked document past its lag bound");
    let ready: Value = client.get(format!("{}/readyz", replica.base)).send().await.unwrap().json().await.unwrap();
    assert_eq!(ready["acl_epoch"], revoked["acl_epoch"]);
    assert_eq!(ready["replica"]["fresh"], true);
    let metrics = client.get(format!("{}/metrics", replica.base)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("warrant_replica_lag_seconds") && metrics.contains("warrant_acl_epoch"));
}

#[actix_web::test]
async fn replica_cut_off_from_its_primary_goes_stale_and_answers_503() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let root = tempfile::tempdir().unwrap();
    let (primary, replica) = primary_and_replica(&client, root.path()).await;
    drop(primary);
    let alice = token("acme", "alice", &["everyone", "engineering"], "");
    let deadline = Instant::now() + Duration::from_millis(MAX_LAG_MS) + Duration::from_secs(10);
    let mut last = (0, Value::Null);
    for _ in 0..1000 {
        last = call(
            &client,
            &replica.base,
            reqwest::Method::POST,
            "/v1/answer",
            &alice,
            Some(json!({"question": "hotel per night?"})),
        )
        .await;
        if last.0 == 503 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!((last.0, last.1["code"].as_str()), (503, Some("replica_stale")), "{}", last.1);
    let (status, body) =
        call(&client, &replica.base, reqwest::Method::POST, "/v1/retrieve", &alice, Some(json!({"query": "hotel"})))
            .await;
    assert_eq!((status, body["code"].as_str()), (503, Some("replica_stale")));
    let ready = client.get(format!("{}/readyz", replica.base)).send().await.unwrap();
    assert_eq!(ready.status().as_u16(), 503);
}

#[test]
fn serve_refuses_to_start_from_a_damaged_snapshot_and_names_the_file() {
    let root = tempfile::tempdir().unwrap();
    let snapshot = root.path().join("broken");
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::write(snapshot.join("manifest.json"), br#"{"format_version": 9}"#).unwrap();
    let mut child = command(root.path(), &["--restore", snapshot.to_str().unwrap()]).spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut text).unwrap();
        text
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("server started from a damaged snapshot");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = reader.join().unwrap();
    assert!(!status.success());
    assert!(text.contains("manifest.json") && text.contains("format_version 9"), "{text}");
}
