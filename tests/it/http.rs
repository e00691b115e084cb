//! The HTTP contract over real sockets: a server on an ephemeral loopback port per test.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::scripted::{ScriptStep, ScriptedGenerator};
use base64::Engine as _;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use warrant::answer::providers::generator::{GenerationRequest, Generator, GeneratorError};
use warrant::config::Settings;
use warrant::http::auth::{Claims, mint_hs256};

const SECRET: &str = "test-secret-for-http-tests";

struct Server {
    base: String,
    client: reqwest::Client,
    handle: actix_web::dev::ServerHandle,
}

impl Drop for Server {
    fn drop(&mut self) {
        let handle = self.handle.clone();
        actix_rt::spawn(async move { handle.stop(false).await });
    }
}

fn settings() -> Settings {
    let mut settings = Settings::defaults();
    settings.auth.hs256_secret = SECRET.into();
    settings.auth.rs256_public_key_file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/auth/test_rs256_public.pem").display().to_string();
    // These tests mint HS256 tokens and check RS256 beside them: both keys, explicitly.
    settings.auth.allow_hs256_with_rs256 = true;
    settings.embedder.dim = 64;
    settings.index.shards = 3;
    settings.server.max_body_bytes = 64 * 1024;
    settings.server.max_batch_documents = 5;
    settings
}

async fn start_with(settings: Settings, generator: Option<Arc<dyn Generator>>) -> Server {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let settings = Arc::new(settings);
    let providers = crate::support::hashed_providers(&settings, generator);
    let state = crate::support::demo_state(Arc::clone(&settings), providers).await;
    let (base, handle) = crate::support::listen(state.clone(), 2);
    Server { base, client: reqwest::Client::new(), handle }
}

async fn start() -> Server {
    start_with(settings(), None).await
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

fn token(tenant: &str, sub: &str, groups: &[&str], admin: bool) -> String {
    let claims = Claims {
        sub: sub.into(),
        tenant: tenant.into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        roles: if admin { vec!["admin".into()] } else { vec![] },
        exp: now() + 600,
        iss: None,
        aud: None,
    };
    mint_hs256(SECRET, &claims).unwrap()
}

impl Server {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value, reqwest::header::HeaderMap) {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)), headers)
    }

    async fn post(&self, path: &str, token: &str, body: Value) -> (u16, Value) {
        let (status, body, _) = self.call(reqwest::Method::POST, path, Some(token), Some(body)).await;
        (status, body)
    }
}

fn cited_docs(body: &Value) -> Vec<String> {
    body["answer"]["claims"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|claim| {
            claim["citations"].as_array().unwrap().iter().map(|c| c["doc_id"].as_str().unwrap().to_owned())
        })
        .collect()
}

#[actix_web::test]
async fn every_authentication_failure_is_401_and_a_missing_role_403() {
    let server = start().await;
    let question = json!({"question": "How much is the hotel per night?"});
    let (status, body, _) = server.call(reqwest::Method::POST, "/v1/answer", None, Some(question.clone())).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("missing_token")));
    for bad in ["garbage", "a.b.c", &token("acme", "bob", &["everyone"], false).replace('.', "x.")] {
        let (status, body, _) =
            server.call(reqwest::Method::POST, "/v1/answer", Some(bad), Some(question.clone())).await;
        assert_eq!((status, body["code"].as_str()), (401, Some("invalid_token")), "{bad}");
    }
    let wrong_secret = mint_hs256(
        "another-secret",
        &Claims {
            sub: "bob".into(),
            tenant: "acme".into(),
            groups: vec![],
            roles: vec![],
            exp: now() + 60,
            iss: None,
            aud: None,
        },
    )
    .unwrap();
    assert_eq!(
        server.call(reqwest::Method::POST, "/v1/answer", Some(&wrong_secret), Some(question.clone())).await.0,
        401
    );
    let expired = mint_hs256(
        SECRET,
        &Claims {
            sub: "bob".into(),
            tenant: "acme".into(),
            groups: vec![],
            roles: vec![],
            exp: now() - 3600,
            iss: None,
            aud: None,
        },
    )
    .unwrap();
    let (status, body, _) =
        server.call(reqwest::Method::POST, "/v1/answer", Some(&expired), Some(question.clone())).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("token_expired")));
    // A token without exp is refused.
    let no_exp = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &json!({"sub": "bob", "tenant": "acme"}),
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap();
    assert_eq!(server.call(reqwest::Method::POST, "/v1/answer", Some(&no_exp), Some(question.clone())).await.0, 401);
    // alg=none is refused.
    let unsigned = format!(
        "{}.{}.",
        base64url(r#"{"alg":"none","typ":"JWT"}"#),
        base64url(&format!(r#"{{"sub":"bob","tenant":"acme","groups":["everyone"],"exp":{}}}"#, now() + 60))
    );
    assert_eq!(server.call(reqwest::Method::POST, "/v1/answer", Some(&unsigned), Some(question.clone())).await.0, 401);
    // RS256 with the configured public key works; HS256 signed with the public key bytes (alg confusion) does not.
    let private =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/auth/test_rs256_private.pem")).unwrap();
    let rs = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256),
        &json!({"sub": "bob", "tenant": "acme", "groups": ["everyone"], "exp": now() + 60}),
        &jsonwebtoken::EncodingKey::from_rsa_pem(&private).unwrap(),
    )
    .unwrap();
    assert_eq!(server.call(reqwest::Method::POST, "/v1/answer", Some(&rs), Some(question.clone())).await.0, 200);
    let public =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/auth/test_rs256_public.pem")).unwrap();
    let confused = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &json!({"sub": "bob", "tenant": "acme", "exp": now() + 60}),
        &jsonwebtoken::EncodingKey::from_secret(&public),
    )
    .unwrap();
    assert_eq!(server.call(reqwest::Method::POST, "/v1/answer", Some(&confused), Some(question.clone())).await.0, 401);
    // A valid token without the admin role is 403 on the admin API.
    let user = token("acme", "bob", &["everyone"], false);
    let (status, body, _) = server
        .call(reqwest::Method::POST, "/v1/admin/acl/revoke", Some(&user), Some(json!({"doc_id": "travel-policy"})))
        .await;
    assert_eq!((status, body["code"].as_str()), (403, Some("forbidden")));
}

#[actix_web::test]
async fn with_an_rs256_key_hs256_tokens_are_refused_unless_allowed() {
    let mut only_rs256 = settings();
    only_rs256.auth.allow_hs256_with_rs256 = false;
    let server = start_with(only_rs256, None).await;
    let question = json!({"question": "How much is the hotel per night?"});
    let hs = token("acme", "bob", &["everyone"], false);
    let (status, body, _) = server.call(reqwest::Method::POST, "/v1/answer", Some(&hs), Some(question.clone())).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("invalid_token")));
    let private =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/auth/test_rs256_private.pem")).unwrap();
    let rs = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256),
        &json!({"sub": "bob", "tenant": "acme", "groups": ["everyone"], "exp": now() + 60}),
        &jsonwebtoken::EncodingKey::from_rsa_pem(&private).unwrap(),
    )
    .unwrap();
    assert_eq!(server.call(reqwest::Method::POST, "/v1/answer", Some(&rs), Some(question)).await.0, 200);
}

fn base64url(text: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
}

#[actix_web::test]
async fn a_body_cannot_name_a_tenant_or_principal() {
    let server = start().await;
    let user = token("globex", "gina", &["staff"], false);
    for body in [
        json!({"question": "hotel per night?", "tenant": "acme"}),
        json!({"question": "hotel per night?", "groups": ["everyone"]}),
        json!({"question": "hotel per night?", "principal": "alice"}),
        json!({"query": "hotel", "roles": ["admin"]}),
    ] {
        let path = if body.get("query").is_some() { "/v1/retrieve" } else { "/v1/answer" };
        let (status, response) = server.post(path, &user, body).await;
        assert_eq!((status, response["code"].as_str()), (400, Some("invalid_body")));
    }
    let admin = token("globex", "root", &[], true);
    let epoch = acl_epoch(&server, &admin).await;
    let body = json!({"documents": [{"doc_id": "x", "title": "x", "text": "hello", "tenant": "acme"}]});
    let (status, response, _) =
        server.call(reqwest::Method::PUT, "/v1/admin/documents", Some(&admin), Some(body)).await;
    assert_eq!((status, response["code"].as_str()), (400, Some("invalid_body")));
    let after = acl_epoch(&server, &admin).await;
    assert_eq!(epoch, after);
}

#[actix_web::test]
async fn cross_tenant_questions_on_the_near_duplicate_corpus_stay_in_their_tenant() {
    let server = start().await;
    let question = json!({"question": "How much are hotel stays reimbursed per night in London?"});
    let (status, acme) = server.post("/v1/answer", &token("acme", "bob", &["everyone"], false), question.clone()).await;
    assert_eq!(status, 200);
    let (_, globex) = server.post("/v1/answer", &token("globex", "gina", &["staff"], false), question.clone()).await;
    assert_eq!(acme["status"], "answered", "{acme}");
    assert_eq!(globex["status"], "answered", "{globex}");
    let acme_text = acme.to_string();
    let globex_text = globex.to_string();
    assert!(acme_text.contains("250 euros") && !acme_text.contains("210 euros"));
    assert!(globex_text.contains("210 euros") && !globex_text.contains("250 euros"));
    // Retrieval too: only the caller's tenant.
    let (_, retrieved) = server
        .post(
            "/v1/retrieve",
            &token("globex", "gina", &["staff"], false),
            json!({"query": "hotel stays reimbursed", "k": 20}),
        )
        .await;
    for chunk in retrieved["chunks"].as_array().unwrap() {
        assert!(!chunk["text"].as_str().unwrap().contains("250 euros"));
    }
    assert_eq!(retrieved["short"], true);
    // A user outside the group sees nothing of the group-only document.
    let (_, outsider) = server.post("/v1/answer", &token("acme", "eve", &["nobody"], false), question).await;
    assert_eq!(outsider["status"], "abstained");
    assert_eq!(outsider["abstention"]["reason"], "no_authorized_evidence");
}

/// The top-level keys of a `/v1/retrieve` response, each chunk's keys, and the ids of the
/// chunks lexical search found (exact inside the scope; the graph walk is approximate).
fn retrieve_shape(
    response: &Value,
) -> (Vec<String>, std::collections::BTreeSet<Vec<String>>, std::collections::BTreeSet<String>) {
    let keys = |value: &Value| value.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    let chunks = response["chunks"].as_array().unwrap();
    let lexical = chunks.iter().filter(|chunk| chunk["retrievers"].as_array().unwrap().contains(&json!("lexical")));
    (
        keys(response),
        chunks.iter().map(keys).collect(),
        lexical.map(|chunk| chunk["chunk_id"].as_str().unwrap().to_owned()).collect(),
    )
}

/// Regression: `/v1/retrieve` reported each shard's distance computations, which rose for the
/// same caller and query after another tenant added chunks (the walk passes through every
/// tenant's nodes): another tenant's volume, read off one's own query.
#[actix_web::test]
async fn retrieve_reports_nothing_that_another_tenants_volume_moves() {
    let mut settings = settings();
    settings.server.max_batch_documents = 500;
    settings.server.max_body_bytes = 4 << 20;
    // Walk the graph for every scope (no exact scan), as a large shard does.
    settings.index.exact_scan_threshold = 0;
    settings.index.exact_scan_max_fraction = 0.0;
    let server = start_with(settings, None).await;
    let gina = token("globex", "gina", &["staff"], false);
    let ask = json!({"query": "hotel stays reimbursed per night", "k": 20});
    let (status, before) = server.post("/v1/retrieve", &gina, ask.clone()).await;
    assert_eq!(status, 200, "{before}");
    let initech = token("initech", "root", &[], true);
    for batch in 0..3 {
        let documents: Vec<Value> = (0..400)
            .map(|index| {
                json!({"doc_id": format!("filler-{batch}-{index}"), "title": "filler",
                       "text": format!("Hotel stays and meals are reimbursed per night of travel, rule {batch}-{index}."),
                       "acl": {"groups": ["staff"]}})
            })
            .collect();
        let (status, body, _) = server
            .call(reqwest::Method::PUT, "/v1/admin/documents", Some(&initech), Some(json!({"documents": documents})))
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let (_, after) = server.post("/v1/retrieve", &gina, ask).await;
    assert_eq!(retrieve_shape(&before), retrieve_shape(&after), "{before}\n{after}");
    assert_eq!(retrieve_shape(&before).0, ["acl_epoch", "chunks", "short"]);
}

#[actix_web::test]
async fn an_admin_of_one_tenant_cannot_touch_another_tenant() {
    let server = start().await;
    let globex_admin = token("globex", "root", &[], true);
    let (status, body, _) =
        server.call(reqwest::Method::DELETE, "/v1/admin/documents/reorg-plan", Some(&globex_admin), None).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("document_not_found")));
    let (status, _) =
        server.post("/v1/admin/acl/grant", &globex_admin, json!({"doc_id": "reorg-plan", "users": ["root"]})).await;
    assert_eq!(status, 404);
    let (status, _) = server.post("/v1/admin/acl/revoke", &globex_admin, json!({"doc_id": "vacation-policy"})).await;
    assert_eq!(status, 404);
    // acme's documents are untouched and globex's feed shows none of acme's changes.
    let (_, acme) = server
        .post(
            "/v1/answer",
            &token("acme", "alice", &[], false),
            json!({"question": "When do support and success teams merge?"}),
        )
        .await;
    assert_eq!(acme["status"], "answered", "{acme}");
    let (_, feed, _) =
        server.call(reqwest::Method::GET, "/v1/admin/acl/changes?since=0", Some(&globex_admin), None).await;
    assert!(feed["changes"].as_array().unwrap().iter().all(|change| change["mutation"]["tenant"] == "globex"));
}

async fn acl_epoch(server: &Server, admin: &str) -> u64 {
    server.call(reqwest::Method::GET, "/v1/admin/acl/changes", Some(admin), None).await.1["acl_epoch"].as_u64().unwrap()
}

/// Regression: nothing capped the names on one document (1.05 M names took 545 MB and made the
/// tenant's grants 70x slower). Beyond either cap: 400 `acl_too_large`, and nothing changes.
#[actix_web::test]
async fn acl_names_are_capped_per_change_and_per_document() {
    let mut settings = settings();
    settings.server.max_acl_names_per_document = 6;
    settings.server.max_acl_names_per_change = 4;
    let server = start_with(settings, None).await;
    let admin = token("acme", "root", &[], true);
    let names = |prefix: &str, count: usize| (0..count).map(|index| format!("{prefix}-{index}")).collect::<Vec<_>>();
    let too_large = |(status, body): (u16, Value)| {
        assert_eq!((status, body["code"].as_str()), (400, Some("acl_too_large")), "{body}");
    };
    let epoch = acl_epoch(&server, &admin).await;
    // One upsert's list past the per-document cap.
    let document = json!({"doc_id": "crowded", "title": "c", "text": "Crowded document.",
                          "acl": {"groups": names("g", 4), "users": names("u", 3)}});
    let (status, body, _) = server
        .call(reqwest::Method::PUT, "/v1/admin/documents", Some(&admin), Some(json!({"documents": [document]})))
        .await;
    too_large((status, body));
    // One grant or revoke past the per-change cap.
    too_large(
        server.post("/v1/admin/acl/grant", &admin, json!({"doc_id": "laptop-faq", "users": names("u", 5)})).await,
    );
    too_large(
        server
            .post(
                "/v1/admin/acl/grant",
                &admin,
                json!({"doc_id": "laptop-faq", "groups": names("g", 3), "users": names("u", 2)}),
            )
            .await,
    );
    too_large(
        server.post("/v1/admin/acl/revoke", &admin, json!({"doc_id": "laptop-faq", "users": names("u", 5)})).await,
    );
    assert_eq!(acl_epoch(&server, &admin).await, epoch, "refused changes changed nothing");
    // Grants within the per-change cap that add up past the per-document cap.
    let document = json!({"doc_id": "crowded", "title": "c", "text": "Crowded document.", "acl": {"groups": ["g-0"]}});
    let (status, _, _) = server
        .call(reqwest::Method::PUT, "/v1/admin/documents", Some(&admin), Some(json!({"documents": [document]})))
        .await;
    assert_eq!(status, 200);
    let (status, _) =
        server.post("/v1/admin/acl/grant", &admin, json!({"doc_id": "crowded", "users": names("u", 4)})).await;
    assert_eq!(status, 200, "1 + 4 names");
    let epoch = acl_epoch(&server, &admin).await;
    too_large(server.post("/v1/admin/acl/grant", &admin, json!({"doc_id": "crowded", "users": names("v", 2)})).await);
    assert_eq!(acl_epoch(&server, &admin).await, epoch, "the refused grant changed nothing");
    let (status, _) =
        server.post("/v1/admin/acl/grant", &admin, json!({"doc_id": "crowded", "users": ["v-0", "u-0"]})).await;
    assert_eq!(status, 200, "a name already there adds nothing: 6 names");
}

#[actix_web::test]
async fn bad_input_is_a_clear_400_and_changes_nothing() {
    let server = start().await;
    let user = token("acme", "bob", &["everyone"], false);
    let admin = token("acme", "root", &[], true);
    let before = acl_epoch(&server, &admin).await;
    let raw = server
        .client
        .post(format!("{}/v1/answer", server.base))
        .bearer_auth(&user)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status().as_u16(), 400);
    assert_eq!(raw.json::<Value>().await.unwrap()["code"], "invalid_json");
    let cases = [
        ("/v1/answer", json!({"question": 42}), "invalid_body"),
        ("/v1/answer", json!({"question": "   "}), "empty_question"),
        ("/v1/answer", json!({"question": "x".repeat(2001)}), "question_too_long"),
        ("/v1/answer", json!({"question": "ok", "top_k": -1}), "invalid_body"),
        ("/v1/retrieve", json!({"query": ""}), "empty_query"),
    ];
    for (path, body, code) in cases {
        let (status, response) = server.post(path, &user, body).await;
        assert_eq!((status, response["code"].as_str()), (400, Some(code)), "{path}");
        assert!(response["message"].as_str().unwrap().chars().all(|c| !c.is_uppercase()));
    }
    let docs = |n: usize| {
        (0..n).map(|i| json!({"doc_id": format!("d{i}"), "title": "t", "text": "some text", "acl": {"groups": ["everyone"]}})).collect::<Vec<_>>()
    };
    let upserts = [
        (json!({"documents": docs(6)}), 400, "batch_too_large"),
        (json!({"documents": []}), 400, "empty_batch"),
        (json!({"documents": [docs(1)[0].clone(), docs(1)[0].clone()]}), 400, "duplicate_document"),
        (json!({"documents": [docs(1)[0].clone(), {"doc_id": "", "text": "x"}]}), 400, "invalid_document"),
        (json!({"documents": [{"doc_id": "big", "text": "x".repeat(70 * 1024)}]}), 413, "payload_too_large"),
    ];
    for (body, status_expected, code) in upserts {
        let (status, response, _) =
            server.call(reqwest::Method::PUT, "/v1/admin/documents", Some(&admin), Some(body)).await;
        assert_eq!((status, response["code"].as_str()), (status_expected, Some(code)));
    }
    assert_eq!(acl_epoch(&server, &admin).await, before, "a rejected request changed the acl epoch");
    let (status, body, _) = server.call(reqwest::Method::GET, "/v1/nothing-here", Some(&user), None).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
    let (status, body, _) = server.call(reqwest::Method::GET, "/v1/answer", Some(&user), None).await;
    assert_eq!((status, body["code"].as_str()), (405, Some("method_not_allowed")));
}

#[actix_web::test]
async fn overload_answers_503_with_retry_after() {
    let mut settings = settings();
    settings.server.max_in_flight = 1;
    let slow: Arc<dyn Generator> = Arc::new(ScriptedGenerator::new(vec![
        ScriptStep::output(r#"{"answerable": false, "claims": []}"#).delayed(Duration::from_millis(600)),
    ]));
    let server = Arc::new(start_with(settings, Some(slow)).await);
    let user = token("acme", "bob", &["everyone"], false);
    let first = {
        let server = Arc::clone(&server);
        let user = user.clone();
        actix_rt::spawn(async move { server.post("/v1/answer", &user, json!({"question": "hotel per night"})).await })
    };
    actix_rt::time::sleep(Duration::from_millis(150)).await;
    let (status, body, headers) = server
        .call(reqwest::Method::POST, "/v1/answer", Some(&user), Some(json!({"question": "hotel per night"})))
        .await;
    assert_eq!((status, body["code"].as_str()), (503, Some("overloaded")));
    assert_eq!(headers.get("retry-after").unwrap(), "1");
    assert_eq!(first.await.unwrap().0, 200);
}

/// FAKE generator: its first call takes 20 s, every later call answers at once. It counts calls
/// running at the same time and calls dropped before they finished (cancelled).
#[derive(Default)]
struct SlowFirstCall {
    started: AtomicUsize,
    running: AtomicUsize,
    max_running: AtomicUsize,
    cancelled: AtomicUsize,
}

/// Marks one call of [`SlowFirstCall`] as running until dropped.
struct RunningCall<'a> {
    generator: &'a SlowFirstCall,
    finished: bool,
}

impl Drop for RunningCall<'_> {
    fn drop(&mut self) {
        self.generator.running.fetch_sub(1, Ordering::SeqCst);
        if !self.finished {
            self.generator.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[async_trait::async_trait]
impl Generator for SlowFirstCall {
    fn name(&self) -> &str {
        "slow-first-call-fake"
    }

    async fn generate(&self, _request: &GenerationRequest) -> Result<String, GeneratorError> {
        let call = self.started.fetch_add(1, Ordering::SeqCst);
        let running = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(running, Ordering::SeqCst);
        let mut guard = RunningCall { generator: self, finished: false };
        if call == 0 {
            tokio::time::sleep(Duration::from_secs(20)).await;
        }
        guard.finished = true;
        Ok(r#"{"answerable": false, "claims": []}"#.to_owned())
    }
}

/// A client that reset its connection mid-answer freed its `max_in_flight` slot while its
/// pipeline (generator call included) kept running, so the limit no longer bounded real work.
/// Now the slot is held by the work itself, and the work of a client that went away is cancelled.
#[actix_web::test]
async fn a_disconnected_client_cannot_free_its_in_flight_slot_while_its_work_runs() {
    let mut settings = settings();
    settings.server.max_in_flight = 1;
    settings.answer.deadline_ms = 30_000;
    let generator = Arc::new(SlowFirstCall::default());
    let server = start_with(settings, Some(Arc::clone(&generator) as Arc<dyn Generator>)).await;
    let user = token("acme", "bob", &["everyone"], false);
    let body = json!({"question": "How much are hotel stays reimbursed per night?"}).to_string();
    let address = server.base.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address).await.expect("connect");
    let request = format!(
        "POST /v1/answer HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer {user}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    for _ in 0..1_000 {
        if generator.started.load(Ordering::SeqCst) > 0 {
            break;
        }
        actix_rt::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(generator.started.load(Ordering::SeqCst), 1, "the first request reached the generator");
    // A reset (not a polite close) makes actix-web drop the request's handler future.
    stream.set_zero_linger().expect("linger");
    drop(stream);
    // Ask again until admitted (503 while the abandoned work still holds the only slot).
    let mut admitted = None;
    for _ in 0..2_000 {
        let (status, response) = server.post("/v1/answer", &user, json!({"question": "hotel per night"})).await;
        if status != 503 {
            admitted = Some((status, response));
            break;
        }
        assert_eq!(response["code"], "overloaded");
        actix_rt::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, response) = admitted.expect("a later request is admitted");
    assert_eq!(status, 200, "{response}");
    assert_eq!(generator.started.load(Ordering::SeqCst), 2);
    assert_eq!(generator.max_running.load(Ordering::SeqCst), 1, "two pipelines ran at once under max_in_flight = 1");
    assert_eq!(generator.cancelled.load(Ordering::SeqCst), 1, "the abandoned pipeline was cancelled, not finished");
}

#[actix_web::test]
async fn metrics_are_exposed_without_tenant_data_and_openapi_lists_every_route() {
    let server = start().await;
    let user = token("acme", "bob", &["everyone"], false);
    server.post("/v1/answer", &user, json!({"question": "How much are hotel stays per night in London?"})).await;
    server.post("/v1/answer", &token("acme", "user-q7x", &["nobody"], false), json!({"question": "hotel"})).await;
    let (status, body, _) = server.call(reqwest::Method::GET, "/metrics", None, None).await;
    assert_eq!(status, 200);
    let text = body.as_str().unwrap().to_owned();
    for series in [
        "warrant_stage_duration_seconds_bucket",
        "warrant_answers_total",
        "warrant_filter_strategy_total",
        "warrant_acl_epoch",
        "warrant_in_flight_requests",
    ] {
        assert!(text.contains(series), "missing {series}");
    }
    for secret in ["acme", "globex", "\"bob", "user-q7x", "travel-policy", "hotel", "everyone", "London"] {
        assert!(!text.contains(secret), "metrics leak {secret}");
    }
    let (status, spec, _) = server.call(reqwest::Method::GET, "/openapi.json", None, None).await;
    assert_eq!(status, 200);
    assert!(spec["openapi"].as_str().unwrap().starts_with("3."));
    let paths = spec["paths"].as_object().unwrap();
    let served = warrant::http::served_routes(&settings());
    assert_eq!(served.len(), warrant::http::ROUTES.len() - warrant::http::DEMO_ROUTES.len(), "not demo mode");
    for (method, path) in &served {
        assert!(paths.get(*path).and_then(|p| p.get(*method)).is_some(), "openapi lacks {method} {path}");
    }
    let documented: usize = paths.values().map(|p| p.as_object().unwrap().len()).sum();
    assert_eq!(documented, served.len(), "openapi documents a route the server does not serve");
    let (status, ready, _) = server.call(reqwest::Method::GET, "/readyz", None, None).await;
    assert_eq!((status, ready["status"].as_str()), (200, Some("ready")));
    assert_eq!(server.call(reqwest::Method::GET, "/healthz", None, None).await.0, 200);
}

/// Issue 59: no metric counted responses. They are counted by the route's pattern and the
/// status class: never by the raw path (a document id, a probe of unknown paths), so the
/// labels stay bounded and name no tenant data.
#[actix_web::test]
async fn responses_are_counted_by_route_pattern_and_status_class_never_by_raw_path() {
    let server = start().await;
    let user = token("acme", "bob", &["everyone"], false);
    let (status, _, _) =
        server.call(reqwest::Method::GET, "/v1/documents/doc-q8z-never-indexed", Some(&user), None).await;
    assert_eq!(status, 404);
    let (status, _, _) = server.call(reqwest::Method::GET, "/no-such-path-k4w", None, None).await;
    assert_eq!(status, 404);
    let (_, body, _) = server.call(reqwest::Method::GET, "/metrics", None, None).await;
    let text = body.as_str().unwrap().to_owned();
    let counted = |route: &str, class: &str| {
        text.lines().any(|line| {
            line.starts_with("warrant_http_responses_total{")
                && line.contains(&format!("route=\"{route}\""))
                && line.contains(&format!("class=\"{class}\""))
        })
    };
    assert!(counted("/v1/documents/{doc_id}", "4xx"), "{text}");
    assert!(counted("unmatched", "4xx"), "{text}");
    assert!(text.contains("warrant_http_response_seconds"), "{text}");
    for raw in ["doc-q8z-never-indexed", "no-such-path-k4w"] {
        assert!(!text.contains(raw), "metrics name the raw path {raw}");
    }
}

/// 32 concurrent clients ask about a document while an admin revokes it. No request that
/// started after the revoke returned may cite it; in-flight ones drop it at validation.
#[actix_web::test]
async fn revocation_under_load_is_enforced_for_every_later_request() {
    let mut settings = settings();
    settings.server.max_in_flight = 256;
    let server = Arc::new(start_with(settings, None).await);
    let question = json!({"question": "How much is the daily meal allowance during travel?"});
    let (_, warm) = server.post("/v1/answer", &token("acme", "bob", &["everyone"], false), question.clone()).await;
    assert!(cited_docs(&warm).contains(&"travel-policy".to_owned()), "{warm}");
    let revoked_at: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
    let mut clients = Vec::new();
    for client in 0..32 {
        let server = Arc::clone(&server);
        let question = question.clone();
        let revoked_at = Arc::clone(&revoked_at);
        clients.push(actix_rt::spawn(async move {
            let user = token("acme", &format!("user{client}"), &["everyone"], false);
            let mut results = Vec::new();
            for _ in 0..6 {
                let started = Instant::now();
                let (status, body) = server.post("/v1/answer", &user, question.clone()).await;
                let after_revoke = revoked_at.lock().unwrap().is_some_and(|at| started >= at);
                results.push((
                    status,
                    after_revoke,
                    cited_docs(&body),
                    body["abstention"]["reason"].as_str().map(str::to_owned),
                ));
            }
            results
        }));
    }
    actix_rt::time::sleep(Duration::from_millis(30)).await;
    let admin = token("acme", "root", &[], true);
    let (status, _) = server.post("/v1/admin/acl/revoke", &admin, json!({"doc_id": "travel-policy"})).await;
    let responded = Instant::now();
    *revoked_at.lock().unwrap() = Some(responded);
    assert_eq!(status, 200);
    let (_, first_after) =
        server.post("/v1/answer", &token("acme", "bob", &["everyone"], false), question.clone()).await;
    let enforcement = responded.elapsed();
    assert!(!cited_docs(&first_after).contains(&"travel-policy".to_owned()));
    let mut after = 0;
    let mut dropped = 0;
    for client in clients {
        for (status, after_revoke, docs, reason) in client.await.unwrap() {
            assert_eq!(status, 200);
            if after_revoke {
                after += 1;
                assert!(
                    !docs.contains(&"travel-policy".to_owned()),
                    "a request started after the revoke cited the document"
                );
            } else if reason.as_deref() == Some("source_revoked") {
                dropped += 1;
            }
        }
    }
    println!(
        "revocation under load: {after} requests started after the revoke, none cited it; {dropped} in-flight dropped with source_revoked; first request after the admin response completed {:.2} ms after it",
        enforcement.as_secs_f64() * 1000.0
    );
}

/// FAKE generator recording the thread each generation runs on (answers unanswerable).
#[derive(Default)]
struct ThreadRecorder {
    threads: std::sync::Mutex<std::collections::HashSet<std::thread::ThreadId>>,
}

#[async_trait::async_trait]
impl Generator for ThreadRecorder {
    fn name(&self) -> &str {
        "thread-recorder-fake"
    }

    async fn generate(&self, _request: &GenerationRequest) -> Result<String, GeneratorError> {
        self.threads.lock().unwrap().insert(std::thread::current().id());
        // Long enough that concurrent requests overlap on every worker.
        tokio::time::sleep(Duration::from_millis(30)).await;
        Ok(r#"{"answerable": false, "claims": []}"#.to_owned())
    }
}

/// Every answer ran on one global actor's thread, so one slow generation delayed every tenant
/// and answers never used more than one core. Each answer now has its own request actor on the
/// HTTP worker that received it.
#[actix_web::test]
async fn concurrent_answers_run_on_every_http_worker() {
    let mut settings = settings();
    settings.server.max_in_flight = 64;
    let generator = Arc::new(ThreadRecorder::default());
    let server = start_with(settings, Some(Arc::clone(&generator) as Arc<dyn Generator>)).await;
    let user = token("acme", "bob", &["everyone"], false);
    let calls = (0..16).map(|_| server.post("/v1/answer", &user, json!({"question": "hotel per night"})));
    for (status, body) in futures::future::join_all(calls).await {
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], "abstained", "{body}");
    }
    let threads = generator.threads.lock().unwrap().len();
    assert_eq!(threads, 2, "generations ran on {threads} thread(s) of 2 workers");
}

/// `context_overflow` cannot happen at the shipped limits (a question of at most
/// `server.max_question_chars` = 2,000 characters, the system instruction and one source of
/// `answer.min_source_tokens` fit `answer.prompt_token_budget` = 3,000); a deployment for a model
/// with a small context window configures a smaller budget, and then the abstention must reach
/// the caller as the contract says: 200, `abstained`, `context_overflow`, nothing cited.
#[actix_web::test]
async fn a_prompt_budget_too_small_for_any_source_abstains_with_context_overflow() {
    let mut settings = settings();
    settings.answer.prompt_token_budget = 64;
    let server = start_with(settings, None).await;
    let alice = token("acme", "alice", &["everyone", "engineering"], false);
    let (status, body) = server
        .post("/v1/answer", &alice, json!({"question": "How much is reimbursed for hotel stays per night?"}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "abstained", "{body}");
    assert_eq!(body["abstention"]["reason"], "context_overflow", "{body}");
    assert!(body["answer"].is_null() || body["answer"]["claims"].as_array().is_none_or(Vec::is_empty), "{body}");
}
