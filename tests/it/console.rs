//! The web console (`/console`) and what it relies on: embedded assets with their content types
//! and a strict Content-Security-Policy, a script that never writes HTML, demo tokens minted only
//! in demo mode and only for listed users, and `GET /v1/documents/{doc_id}` under the same
//! authorization as answers (its chunks line up with the offsets citations carry).

use std::sync::Arc;

use actix_web::body::MessageBody;
use actix_web::dev::ServiceResponse;
use actix_web::test::{TestRequest, call_service, init_service, read_body};
use serde_json::{Value, json};
use warrant::config::{DEMO_HS256_SECRET, Settings};
use warrant::domain::Role;
use warrant::http::auth::{Authenticator, Claims, mint_hs256};
use warrant::http::console::{ASSETS, CONTENT_SECURITY_POLICY};
use warrant::http::server::app;

const CORPUS: &str = include_str!("../../fixtures/demo/corpus.json");

/// Defaults: the demo corpus, the published demo key, loopback: demo mode.
fn demo_settings() -> Settings {
    let mut settings = Settings::defaults();
    settings.embedder.dim = 32;
    settings.index.shards = 2;
    settings
}

async fn state(settings: Settings) -> actix_web::web::Data<warrant::http::AppState> {
    let providers = crate::support::hashed_providers(&settings, None);
    crate::support::demo_state(Arc::new(settings), providers).await
}

/// An HS256 token signed with `secret`, expiring in 2096.
pub(crate) fn token(secret: &str, tenant: &str, sub: &str, groups: &[&str], roles: &[&str]) -> String {
    let claims = Claims {
        sub: sub.into(),
        tenant: tenant.into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        roles: roles.iter().map(|r| r.to_string()).collect(),
        exp: 4_000_000_000,
        iss: None,
        aud: None,
    };
    mint_hs256(secret, &claims).unwrap()
}

struct Reply {
    status: u16,
    headers: actix_web::http::header::HeaderMap,
    text: String,
    body: Value,
}

async fn reply<B: MessageBody>(response: ServiceResponse<B>) -> Reply {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = read_body(response).await;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Reply { status, headers, text, body }
}

macro_rules! send {
    ($service:expr, $method:expr, $uri:expr, $token:expr, $body:expr) => {{
        let mut request = TestRequest::default().method($method.parse().unwrap()).uri($uri);
        if let Some(token) = $token {
            request = request.insert_header(("authorization", format!("Bearer {token}")));
        }
        let body: Option<Value> = $body;
        if let Some(body) = body {
            request = request.set_json(body);
        }
        reply(call_service($service, request.to_request()).await).await
    }};
}

fn header<'a>(reply: &'a Reply, name: &str) -> &'a str {
    reply.headers.get(name).and_then(|value| value.to_str().ok()).unwrap_or("")
}

#[actix_web::test]
async fn console_assets_are_served_with_their_content_types_and_a_strict_csp() {
    let service = init_service(app(state(demo_settings()).await)).await;
    for (path, content_type) in [
        ("/console", "text/html"),
        ("/console/", "text/html"),
        ("/console/app.js", "text/javascript"),
        ("/console/app.css", "text/css"),
    ] {
        let reply = send!(&service, "GET", path, None::<&str>, None);
        assert_eq!(reply.status, 200, "{path}");
        assert!(header(&reply, "content-type").starts_with(content_type), "{path}: {}", header(&reply, "content-type"));
        let policy = header(&reply, "content-security-policy");
        assert_eq!(policy, CONTENT_SECURITY_POLICY, "{path}");
        assert_eq!(header(&reply, "x-content-type-options"), "nosniff", "{path}");
        assert_eq!(header(&reply, "x-frame-options"), "DENY", "{path}");
        assert!(!reply.text.is_empty(), "{path}");
    }
    for directive in ["default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"] {
        assert!(CONTENT_SECURITY_POLICY.contains(directive), "{directive}");
    }
    for weak in ["unsafe-inline", "unsafe-eval", "unsafe-hashes", "data:", "*", "http:", "https:"] {
        assert!(!CONTENT_SECURITY_POLICY.contains(weak), "the policy allows {weak}");
    }
    let reply = send!(&service, "POST", "/console", None::<&str>, None);
    assert_eq!((reply.status, header(&reply, "allow")), (405, "GET"));
    let reply = send!(&service, "GET", "/console/missing.js", None::<&str>, None);
    assert_eq!(reply.status, 404);
}

/// The policy forbids inline script and style; the page must not need them (it would break), and
/// nothing may come from another origin (no CDN).
#[test]
fn the_console_page_has_no_inline_script_or_style_and_nothing_from_another_origin() {
    let (_, _, html) = ASSETS.iter().find(|(path, _, _)| *path == "/console").unwrap();
    let lower = html.to_lowercase();
    for script in lower.split("<script").skip(1) {
        let tag = &script[..script.find('>').unwrap()];
        assert!(tag.contains("src=\"/console/"), "inline or foreign script: <script{tag}>");
        assert!(script[script.find('>').unwrap() + 1..].trim_start().starts_with("</script>"), "inline script body");
    }
    assert!(!lower.contains("<style"), "inline style element");
    let attribute = regex::Regex::new(r#"\s(on[a-z]+|style)\s*="#).unwrap();
    assert!(!attribute.is_match(&lower), "inline handler or style attribute");
    for (path, _, body) in ASSETS {
        for foreign in ["http://", "https://", "//cdn", "@import", "url("] {
            assert!(!body.contains(foreign), "{path} refers to {foreign}");
        }
    }
}

/// Source text, titles and ids are attacker-controlled (document authors): the script must never
/// turn a string into markup or code.
#[test]
fn the_console_script_writes_text_only_and_never_evaluates_strings() {
    let (_, _, script) = ASSETS.iter().find(|(path, _, _)| *path == "/console/app.js").unwrap();
    for sink in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "new Function",
        "setTimeout(\"",
        "createContextualFragment",
        "srcdoc",
        "DOMParser",
    ] {
        assert!(!script.contains(sink), "app.js uses {sink}");
    }
    assert!(script.contains("Array.from(chunk.text)"), "offsets must be applied to code points, not UTF-16 units");
}

#[actix_web::test]
async fn demo_tokens_are_refused_outside_demo_mode() {
    let mut private = demo_settings();
    private.auth.hs256_secret = "a-private-secret-of-this-deployment".into();
    let mut exposed = demo_settings();
    exposed.server.bind = "0.0.0.0:8080".into();
    let mut no_corpus = demo_settings();
    no_corpus.demo.load = false;
    let mut no_users = demo_settings();
    no_users.demo.users.clear();
    for (what, settings) in
        [("private key", private), ("exposed bind", exposed), ("no demo", no_corpus), ("no users", no_users)]
    {
        let service = init_service(app(state(settings).await)).await;
        let reply = send!(&service, "POST", "/console/demo-token", None::<&str>, Some(json!({"user": "alice"})));
        assert_eq!((reply.status, reply.body["code"].as_str()), (404, Some("not_found")), "{what}: {}", reply.text);
        assert!(!reply.text.contains("eyJ"), "{what}: a token leaked");
        let reply = send!(&service, "GET", "/console/demo-users", None::<&str>, None);
        assert_eq!(reply.status, 404, "{what}");
        // The console itself is still served (sign in by pasting a token).
        assert_eq!(send!(&service, "GET", "/console", None::<&str>, None).status, 200, "{what}");
        // Neither are the demo routes documented (a document listing them promised 405s).
        let spec = send!(&service, "GET", "/openapi.json", None::<&str>, None).body;
        for path in warrant::http::DEMO_ROUTES {
            assert!(spec["paths"].get(*path).is_none(), "{what}: {path} documented");
        }
        // Regression: malformed requests got 400/405/415 here, telling a prober the routes
        // exist. Every one now gets exactly the reply of an unknown route.
        for path in ["/console/demo-token", "/console/demo-users"] {
            for (method, content_type, body) in [
                ("POST", "application/json", "{not json"),
                ("POST", "text/plain", "alice"),
                ("POST", "application/json", r#"{"who": 1}"#),
                ("GET", "", ""),
                ("PUT", "application/json", "{}"),
                ("DELETE", "", ""),
            ] {
                let ask = |uri: &str| {
                    let mut request = TestRequest::default().method(method.parse().unwrap()).uri(uri);
                    if !content_type.is_empty() {
                        request = request.insert_header(("content-type", content_type)).set_payload(body);
                    }
                    request.to_request()
                };
                let demo = self::reply(call_service(&service, ask(path)).await).await;
                let unknown = self::reply(call_service(&service, ask("/console/no-such-route")).await).await;
                assert_eq!((demo.status, &demo.text), (unknown.status, &unknown.text), "{what}: {method} {path}");
                assert_eq!(demo.status, 404, "{what}: {method} {path}");
                assert!(demo.headers.get("allow").is_none(), "{what}: {method} {path}");
            }
        }
    }
}

/// Regression: in demo mode `POST /console/demo-token` with `Host: rebind.attacker.example`
/// returned an acme admin token, so a DNS-rebinding web page could drive a loopback demo server.
#[actix_web::test]
async fn a_demo_server_answers_loopback_host_names_only() {
    let service = init_service(app(state(demo_settings()).await)).await;
    let with_host = |method: &str, uri: &str, host: &str| {
        let request = TestRequest::default().method(method.parse().unwrap()).uri(uri).insert_header(("host", host));
        if method == "POST" { request.set_json(json!({"user": "root"})) } else { request }.to_request()
    };
    for host in
        ["rebind.attacker.example", "rebind.attacker.example:8080", "localhost.attacker.example", "0.0.0.0:8080"]
    {
        let minted = reply(call_service(&service, with_host("POST", "/console/demo-token", host)).await).await;
        assert_eq!((minted.status, minted.body["code"].as_str()), (421, Some("host_not_allowed")), "{host}");
        assert!(!minted.text.contains("eyJ"), "{host}: a token leaked");
        for uri in ["/console/demo-users", "/console", "/v1/documents/travel-policy", "/healthz"] {
            assert_eq!(
                reply(call_service(&service, with_host("GET", uri, host)).await).await.status,
                421,
                "{host} {uri}"
            );
        }
    }
    let spec = reply(call_service(&service, with_host("GET", "/openapi.json", "localhost:8080")).await).await.body;
    for path in warrant::http::DEMO_ROUTES {
        assert!(spec["paths"][*path].is_object(), "demo mode documents {path}");
    }
    for host in ["localhost:8080", "127.0.0.1:8080", "[::1]:8080", "LOCALHOST"] {
        let minted = reply(call_service(&service, with_host("POST", "/console/demo-token", host)).await).await;
        assert_eq!(minted.status, 200, "{host}: {}", minted.text);
    }
}

#[actix_web::test]
async fn outside_demo_mode_allowed_hosts_name_the_hosts_answered() {
    let mut settings = demo_settings();
    settings.auth.hs256_secret = "a-private-secret-of-this-deployment".into();
    let open = init_service(app(state(settings.clone()).await)).await;
    let get = |uri: &str, host: &str| TestRequest::get().uri(uri).insert_header(("host", host)).to_request();
    assert_eq!(reply(call_service(&open, get("/console", "anything.example")).await).await.status, 200);
    settings.server.allowed_hosts = vec!["warrant.example.com".into()];
    let bound = init_service(app(state(settings).await)).await;
    for host in ["warrant.example.com", "Warrant.Example.com:443"] {
        assert_eq!(reply(call_service(&bound, get("/console", host)).await).await.status, 200, "{host}");
    }
    for host in ["attacker.example", "localhost:8080", "warrant.example.com.attacker.example"] {
        let refused = reply(call_service(&bound, get("/console", host)).await).await;
        assert_eq!((refused.status, refused.body["code"].as_str()), (421, Some("host_not_allowed")), "{host}");
    }
}

#[actix_web::test]
async fn demo_tokens_are_minted_only_for_listed_users_with_their_own_claims() {
    let settings = demo_settings();
    let authenticator = Authenticator::from_settings(&settings.auth).unwrap();
    let service = init_service(app(state(settings).await)).await;
    let users = send!(&service, "GET", "/console/demo-users", None::<&str>, None);
    assert_eq!(users.status, 200, "{}", users.text);
    assert_eq!(header(&users, "cache-control"), "no-store");
    let listed = users.body["users"].as_array().unwrap().clone();
    assert!(listed.len() >= 3);
    for user in &listed {
        let id = user["id"].as_str().unwrap();
        let reply = send!(&service, "POST", "/console/demo-token", None::<&str>, Some(json!({"user": id})));
        assert_eq!(reply.status, 200, "{id}: {}", reply.text);
        assert_eq!(header(&reply, "cache-control"), "no-store");
        let principal = authenticator.verify(reply.body["token"].as_str().unwrap()).unwrap();
        assert_eq!(principal.tenant, user["tenant"].as_str().unwrap());
        assert_eq!(principal.user, user["sub"].as_str().unwrap());
        let groups: Vec<&str> = user["groups"].as_array().unwrap().iter().map(|g| g.as_str().unwrap()).collect();
        assert_eq!(principal.groups.iter().map(String::as_str).collect::<Vec<_>>(), {
            let mut sorted = groups.clone();
            sorted.sort();
            sorted
        });
        for role in &principal.roles {
            assert_eq!(*role, Role::Admin, "{id}: the console minted role {role}");
        }
        assert!(!principal.has_role(Role::Operator) && !principal.has_role(Role::Replica));
    }
    assert!(listed.iter().any(|user| user["roles"] == json!(["admin"])), "one demo admin for the admin view");
    for unknown in ["mallory", "", "ALICE", " alice", "alice\u{0}"] {
        let reply = send!(&service, "POST", "/console/demo-token", None::<&str>, Some(json!({"user": unknown})));
        assert_eq!((reply.status, reply.body["code"].as_str()), (404, Some("unknown_demo_user")), "{unknown:?}");
        assert!(!reply.text.contains("eyJ"));
    }
    // Nothing in the body can add a role, group or tenant.
    for body in [
        json!({"user": "alice", "roles": ["operator"]}),
        json!({"user": "alice", "tenant": "globex"}),
        json!({"user": "alice", "groups": ["finance"]}),
    ] {
        let reply = send!(&service, "POST", "/console/demo-token", None::<&str>, Some(body.clone()));
        assert_eq!((reply.status, reply.body["code"].as_str()), (400, Some("invalid_body")), "{body}");
    }
    // A minted token works against the API, as that user.
    let alice = send!(&service, "POST", "/console/demo-token", None::<&str>, Some(json!({"user": "alice"})));
    let token = alice.body["token"].as_str().unwrap().to_owned();
    let reply = send!(&service, "GET", "/v1/documents/reorg-plan", Some(&token), None);
    assert_eq!(reply.status, 200, "{}", reply.text);
}

/// The demo corpus text of (tenant, doc_id), as characters.
fn corpus_text(tenant: &str, doc_id: &str) -> Vec<char> {
    let corpus: Value = serde_json::from_str(CORPUS).unwrap();
    let document = corpus["documents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|document| document["tenant"] == tenant && document["doc_id"] == doc_id)
        .unwrap();
    document["text"].as_str().unwrap().chars().collect()
}

#[actix_web::test]
async fn a_document_is_readable_exactly_when_the_caller_may_read_it_and_its_chunks_cover_the_text() {
    let settings = demo_settings();
    let secret = DEMO_HS256_SECRET;
    let alice = token(secret, "acme", "alice", &["everyone", "engineering"], &[]);
    let bob = token(secret, "acme", "bob", &["everyone"], &[]);
    let gina = token(secret, "globex", "gina", &["staff"], &[]);
    let root = token(secret, "acme", "root", &["everyone"], &["admin"]);
    let service = init_service(app(state(settings).await)).await;

    let reply = send!(&service, "GET", "/v1/documents/reorg-plan", Some(&alice), None);
    assert_eq!(reply.status, 200, "{}", reply.text);
    let text = corpus_text("acme", "reorg-plan");
    let mut covered = vec![false; text.len()];
    for chunk in reply.body["chunks"].as_array().unwrap() {
        let (start, end) = (chunk["start"].as_u64().unwrap() as usize, chunk["end"].as_u64().unwrap() as usize);
        let expected: String = text[start..end].iter().collect();
        assert_eq!(chunk["text"].as_str().unwrap(), expected, "chunk text is doc.text[start..end] in characters");
        covered[start..end].iter_mut().for_each(|c| *c = true);
    }
    assert!(covered.iter().all(|c| *c), "the chunks cover the whole text");
    assert_eq!(reply.body["doc_version"], 1);
    assert_eq!(reply.body["title"], "Confidential reorganization plan");

    // Not readable, another tenant's, missing: the same 404.
    let hidden = send!(&service, "GET", "/v1/documents/reorg-plan", Some(&bob), None);
    let foreign = send!(&service, "GET", "/v1/documents/reorg-plan", Some(&gina), None);
    let missing = send!(&service, "GET", "/v1/documents/no-such-document", Some(&alice), None);
    for reply in [&hidden, &foreign, &missing] {
        assert_eq!((reply.status, reply.text.as_str()), (404, missing.text.as_str()));
    }
    assert_eq!(send!(&service, "GET", "/v1/documents/reorg-plan", None::<&str>, None).status, 401);
    // Regression: `%ff` was read as U+FFFD (another id than the one sent) instead of the
    // documented 400; a percent-encoded id that is UTF-8 names the document.
    for bad in ["/v1/documents/%ff", "/v1/documents/reorg%C3-plan", "/v1/documents/%ed%a0%80"] {
        let reply = send!(&service, "GET", bad, Some(&alice), None);
        assert_eq!((reply.status, reply.body["code"].as_str()), (400, Some("invalid_path")), "{bad}");
    }
    let epoch = send!(&service, "GET", "/v1/documents/reorg-plan", Some(&alice), None).body["acl_epoch"].clone();
    let reply = send!(&service, "DELETE", "/v1/admin/documents/%ff", Some(&root), None);
    assert_eq!((reply.status, reply.body["code"].as_str()), (400, Some("invalid_path")));
    let encoded = send!(&service, "GET", "/v1/documents/reorg%2Dpl%61n", Some(&alice), None);
    assert_eq!((encoded.status, &encoded.body["acl_epoch"]), (200, &epoch), "nothing changed; the encoded id reads");
    // Same doc_id in two tenants: each reads its own.
    let acme = send!(&service, "GET", "/v1/documents/travel-policy", Some(&bob), None);
    let globex = send!(&service, "GET", "/v1/documents/travel-policy", Some(&gina), None);
    assert_eq!(acme.body["title"], "Acme travel policy");
    assert_eq!(globex.body["title"], "Globex travel policy");

    // A revoke and a delete take effect for the very next read.
    let revoke = send!(&service, "POST", "/v1/admin/acl/revoke", Some(&root), Some(json!({"doc_id": "travel-policy"})));
    assert_eq!(revoke.status, 200, "{}", revoke.text);
    assert_eq!(send!(&service, "GET", "/v1/documents/travel-policy", Some(&bob), None).status, 404);
    assert_eq!(send!(&service, "GET", "/v1/documents/travel-policy", Some(&gina), None).status, 200);
    let delete = send!(&service, "DELETE", "/v1/admin/documents/reorg-plan", Some(&root), None);
    assert_eq!(delete.status, 200, "{}", delete.text);
    assert_eq!(send!(&service, "GET", "/v1/documents/reorg-plan", Some(&alice), None).status, 404);
}

/// What the console does with a citation: open the document and cut `[start, end)` in characters.
#[actix_web::test]
async fn every_citation_lines_up_with_the_document_read_endpoint() {
    let secret = DEMO_HS256_SECRET;
    let alice = token(secret, "acme", "alice", &["everyone", "engineering"], &[]);
    let service = init_service(app(state(demo_settings()).await)).await;
    let mut cited = 0;
    for question in [
        "How much are hotel stays reimbursed per night in London?",
        "How many vacation days do employees get?",
        "What does the on-call engineer do when paged?",
    ] {
        let answer = send!(&service, "POST", "/v1/answer", Some(&alice), Some(json!({"question": question})));
        assert_eq!(answer.status, 200, "{}", answer.text);
        for claim in answer.body["answer"]["claims"].as_array().cloned().unwrap_or_default() {
            for citation in claim["citations"].as_array().unwrap() {
                let doc_id = citation["doc_id"].as_str().unwrap();
                let document = send!(&service, "GET", &format!("/v1/documents/{doc_id}"), Some(&alice), None);
                assert_eq!(document.status, 200);
                assert_eq!(document.body["doc_version"], citation["doc_version"]);
                let chunk = document.body["chunks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|chunk| chunk["chunk_id"] == citation["chunk_id"])
                    .expect("the cited chunk is among the document's chunks");
                assert_eq!((&chunk["start"], &chunk["end"]), (&citation["start"], &citation["end"]));
                let text = corpus_text("acme", doc_id);
                let (start, end) =
                    (citation["start"].as_u64().unwrap() as usize, citation["end"].as_u64().unwrap() as usize);
                let span: String = text[start..end].iter().collect();
                assert_eq!(chunk["text"].as_str().unwrap(), span);
                if let Some(quote) = citation["quote"].as_str() {
                    assert!(span.contains(quote), "the quote is inside the cited span");
                }
                cited += 1;
            }
        }
    }
    assert!(cited > 0, "no citation to check");
}

/// In demo mode `serve` refuses to start on a malformed demo users file, naming it, rather than
/// serving a console whose demo sign-in silently does not work.
#[actix_web::test]
async fn serve_refuses_a_malformed_demo_users_file_naming_it() {
    let directory = tempfile::tempdir().unwrap();
    let users = directory.path().join("bad-users.json");
    std::fs::write(&users, r#"{"users": [{"id": "x", "tenant": " ", "sub": "s"}]}"#).unwrap();
    let mut settings = demo_settings();
    settings.demo.users = users.display().to_string();
    settings.storage.dir = directory.path().join("data").display().to_string();
    settings.server.bind = "127.0.0.1:0".into();
    let providers = crate::support::hashed_providers(&settings, None);
    let settings = Arc::new(settings);
    let served = tokio::time::timeout(std::time::Duration::from_secs(30), warrant::app::serve(settings, providers))
        .await
        .expect("serve started serving instead of refusing");
    let error = served.expect_err("a malformed users file is refused");
    let message = error.to_string();
    assert!(message.contains("bad-users.json") && message.contains("blank"), "{message}");
    assert!(!directory.path().join("data").exists(), "nothing was written before the refusal: {message}");
}
