//! The OpenAPI document tells the truth (clients are generated from it): every status a route
//! answers is documented for that route with the `{code, message}` body, a route declares bearer
//! security exactly when it refuses a request without a token, another method gets 405 with
//! `Allow`, and the request constraints the server enforces are declared and mean what the server
//! does. In-process, without Python; `tests/schemathesis.sh` checks the same and more against a
//! real server in CI.

use std::collections::BTreeSet;
use std::sync::Arc;

use actix_web::body::MessageBody;
use actix_web::dev::ServiceResponse;
use actix_web::test::{TestRequest, call_service, init_service, read_body};
use regex::Regex;
use serde_json::{Value, json};
use warrant::config::Settings;
use warrant::http::auth::{Claims, mint_hs256};
use warrant::http::server::app;
use warrant::http::{ROUTES, served_routes};

/// Limits set away from their defaults, so the test sees the document follow the configuration.
const MAX_QUESTION_CHARS: usize = 40;
const MAX_BATCH_DOCUMENTS: usize = 3;
const MAX_BODY_BYTES: usize = 8 * 1024;

fn settings(snapshots: &std::path::Path) -> Settings {
    let mut settings = Settings::defaults();
    settings.auth.hs256_secret = "openapi-test-secret".into();
    settings.embedder.dim = 32;
    settings.index.shards = 2;
    settings.server.max_body_bytes = MAX_BODY_BYTES;
    settings.server.max_question_chars = MAX_QUESTION_CHARS;
    settings.server.max_batch_documents = MAX_BATCH_DOCUMENTS;
    settings.snapshots.dir = snapshots.display().to_string();
    settings
}

fn token(settings: &Settings, roles: &[&str]) -> String {
    let claims = Claims {
        sub: "alice".into(),
        tenant: "acme".into(),
        groups: vec!["everyone".into(), "engineering".into()],
        roles: roles.iter().map(|role| role.to_string()).collect(),
        exp: 4_000_000_000,
        iss: None,
        aud: None,
    };
    mint_hs256(&settings.auth.hs256_secret, &claims).unwrap()
}

/// A request body.
enum Body {
    None,
    Json(Value),
    Raw(&'static str, Vec<u8>),
}

struct Reply {
    status: u16,
    allow: Option<String>,
    body: Value,
}

fn request(method: &str, uri: &str, token: Option<&str>, body: Body) -> TestRequest {
    let mut request = TestRequest::default().method(method.parse().unwrap()).uri(uri);
    if let Some(token) = token {
        request = request.insert_header(("authorization", format!("Bearer {token}")));
    }
    match body {
        Body::None => request,
        Body::Json(value) => request.set_json(value),
        Body::Raw(content_type, bytes) => request.insert_header(("content-type", content_type)).set_payload(bytes),
    }
}

async fn reply<B: MessageBody>(response: ServiceResponse<B>) -> Reply {
    let status = response.status().as_u16();
    let allow = response.headers().get("allow").map(|value| value.to_str().unwrap().to_owned());
    let bytes = read_body(response).await;
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    Reply { status, allow, body }
}

/// Sends one request to the in-process service (a macro: the service type cannot be named).
macro_rules! send {
    ($service:expr, $method:expr, $uri:expr, $token:expr, $body:expr) => {
        reply(call_service($service, request($method, $uri, $token, $body).to_request()).await).await
    };
}

/// Follows a local `$ref` (one level is all the document uses).
fn resolve<'a>(spec: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(reference) => {
            let pointer = reference.strip_prefix('#').expect("local reference");
            spec.pointer(pointer).unwrap_or_else(|| panic!("dangling reference {reference}"))
        }
        None => schema,
    }
}

/// The schema of a property, looking through `oneOf: [null, $ref]` (how `Option<T>` renders).
fn property<'a>(spec: &'a Value, object: &'a Value, name: &str) -> &'a Value {
    let schema = resolve(spec, object);
    let property = &schema["properties"][name];
    assert!(!property.is_null(), "no property {name} in {schema}");
    match property["oneOf"].as_array() {
        Some(options) => resolve(spec, options.iter().find(|option| option["type"] != "null").unwrap()),
        None => resolve(spec, property),
    }
}

fn component<'a>(spec: &'a Value, name: &str) -> &'a Value {
    let schema = &spec["components"]["schemas"][name];
    assert!(!schema.is_null(), "no component schema {name}");
    schema
}

fn json_body_schema(operation: &Value) -> Option<&Value> {
    operation["requestBody"]["content"].get("application/json").map(|content| &content["schema"])
}

/// A valid body for each route that takes one, and a concrete URI for each route.
fn probe(path: &str) -> (String, Option<Value>) {
    match path {
        "/v1/answer" => (path.into(), Some(json!({"question": "How much is a hotel night in London?"}))),
        "/v1/retrieve" => (path.into(), Some(json!({"query": "hotel", "k": 3}))),
        "/v1/admin/documents" => (
            path.into(),
            Some(
                json!({"documents": [{"doc_id": "probe", "text": "A probe document.", "acl": {"groups": ["everyone"]}}]}),
            ),
        ),
        "/v1/admin/acl/revoke" => (path.into(), Some(json!({"doc_id": "no-such-document"}))),
        "/v1/admin/acl/grant" => (path.into(), Some(json!({"doc_id": "no-such-document", "users": ["bob"]}))),
        "/v1/admin/documents/{doc_id}" => ("/v1/admin/documents/no-such-document".into(), None),
        "/v1/documents/{doc_id}" => ("/v1/documents/travel-policy".into(), None),
        "/console/demo-token" => (path.into(), Some(json!({"user": "alice"}))),
        "/v1/admin/acl/changes" => ("/v1/admin/acl/changes?since=0".into(), None),
        "/v1/replica/snapshot/{snapshot_id}/{file}" => ("/v1/replica/snapshot/no-such-snapshot/acl.bin".into(), None),
        "/v1/reviews/{review_id}" => ("/v1/reviews/0b7e3c1a-5d2f-4e8a-9c6b-1f2e3d4c5b6a".into(), None),
        "/v1/reviews/{review_id}/verdicts" => (
            "/v1/reviews/0b7e3c1a-5d2f-4e8a-9c6b-1f2e3d4c5b6a/verdicts".into(),
            Some(json!({"claims": [{"index": 0, "verdict": "supported"}]})),
        ),
        other => {
            assert!(!other.contains('{'), "give the new route {other} a probe");
            (other.into(), None)
        }
    }
}

/// The service with the demo corpus loaded.
async fn state(settings: Settings) -> actix_web::web::Data<warrant::http::AppState> {
    let providers = crate::support::hashed_providers(&settings, None);
    crate::support::demo_state(Arc::new(settings), providers).await
}

#[actix_web::test]
async fn every_status_a_route_answers_is_documented_and_security_is_declared_where_enforced() {
    let snapshots = tempfile::tempdir().unwrap();
    let settings = settings(snapshots.path());
    let (admin, user) = (token(&settings, &["admin"]), token(&settings, &[]));
    let served = served_routes(&settings);
    let service = init_service(app(state(settings).await)).await;
    let spec = send!(&service, "GET", "/openapi.json", None, Body::None).body;
    let mut undocumented = Vec::new();
    for (method, path) in served {
        let operation = &spec["paths"][path][method];
        assert!(operation.is_object(), "{method} {path} is not documented");
        let (uri, body) = probe(path);
        let json_body = || body.clone().map_or(Body::None, Body::Json);
        let mut probes = vec![
            ("no token", None, json_body(), uri.clone()),
            ("garbage token", Some("not-a-token".to_owned()), json_body(), uri.clone()),
            ("user token", Some(user.clone()), json_body(), uri.clone()),
            ("admin token", Some(admin.clone()), json_body(), uri.clone()),
        ];
        if json_body_schema(operation).is_some() {
            let admin = Some(admin.clone());
            probes.extend([
                ("text body", admin.clone(), Body::Raw("text/plain", b"{}".to_vec()), uri.clone()),
                ("broken json", admin.clone(), Body::Raw("application/json", b"{not json".to_vec()), uri.clone()),
                ("unknown field", admin.clone(), Body::Json(json!({"tenant": "globex"})), uri.clone()),
                ("no body", admin.clone(), Body::None, uri.clone()),
                ("oversized body", admin, Body::Raw("application/json", vec![b' '; MAX_BODY_BYTES + 1]), uri.clone()),
            ]);
        }
        if uri.contains('?') {
            for query in ["since=-1", "since=x", "since=0&tenant=globex"] {
                probes.push(("bad query", Some(admin.clone()), Body::None, format!("{path}?{query}")));
            }
        }
        let declares_security = operation["security"].as_array().is_some_and(|list| !list.is_empty());
        for (what, token, body, uri) in probes {
            let reply = send!(&service, &method.to_uppercase(), &uri, token.as_deref(), body);
            if what == "no token" {
                assert_eq!(
                    declares_security,
                    reply.status == 401,
                    "{method} {path}: declares security {declares_security} but answers {} without a token",
                    reply.status
                );
            }
            let Some(response) = operation["responses"].get(reply.status.to_string()) else {
                undocumented.push(format!("{method} {path} ({what}): {}", reply.status));
                continue;
            };
            if reply.status >= 400 {
                let schema = &response["content"]["application/json"]["schema"];
                assert_eq!(
                    schema["$ref"], "#/components/schemas/ErrorBody",
                    "{method} {path}: {} is not documented with the error body",
                    reply.status
                );
                assert!(reply.body["code"].is_string() && reply.body["message"].is_string(), "{}", reply.body);
            }
        }
    }
    assert!(undocumented.is_empty(), "statuses the document does not list:\n{}", undocumented.join("\n"));
}

#[actix_web::test]
async fn another_method_on_a_route_is_405_with_allow_naming_the_served_methods() {
    let snapshots = tempfile::tempdir().unwrap();
    let service = init_service(app(state(settings(snapshots.path())).await)).await;
    let paths: BTreeSet<&str> = ROUTES.iter().map(|(_, path)| *path).collect();
    for path in paths {
        let served: BTreeSet<String> =
            ROUTES.iter().filter(|(_, other)| *other == path).map(|(method, _)| method.to_uppercase()).collect();
        let (uri, _) = probe(path);
        for method in ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"] {
            if served.contains(method) {
                continue;
            }
            let reply = send!(&service, method, &uri, None, Body::None);
            if path.starts_with("/console/demo-") {
                // Not demo mode (a key of its own): the demo routes do not exist, so every
                // method gets the 404 of an unknown route (console::demo_tokens_are_refused_outside_demo_mode).
                assert_eq!((reply.status, &reply.body["code"]), (404, &json!("not_found")), "{method} {path}");
                continue;
            }
            assert_eq!(reply.status, 405, "{method} {path}");
            let allow: BTreeSet<String> = reply
                .allow
                .unwrap_or_else(|| panic!("{method} {path}: 405 without Allow"))
                .split(',')
                .map(|method| method.trim().to_owned())
                .collect();
            assert_eq!(allow, served, "{method} {path}");
            if method != "HEAD" {
                assert_eq!(reply.body["code"], "method_not_allowed");
            }
        }
    }
}

#[actix_web::test]
async fn request_constraints_are_declared_and_mean_what_the_server_enforces() {
    let snapshots = tempfile::tempdir().unwrap();
    let settings = settings(snapshots.path());
    let (admin, user) = (token(&settings, &["admin"]), token(&settings, &[]));
    let served = served_routes(&settings);
    let service = init_service(app(state(settings).await)).await;
    let spec = send!(&service, "GET", "/openapi.json", None, Body::None).body;
    let operation = |method: &str, path: &str| spec["paths"][path][method].clone();

    // question and query: 1..=max_question_chars characters after trimming, declared as a
    // pattern the server agrees with on every sample.
    let samples = [
        String::new(),
        " ".into(),
        "\u{3000}\t\n".into(),
        "a".into(),
        " a ".into(),
        "x".repeat(MAX_QUESTION_CHARS),
        format!("\u{a0} {}\n", "x".repeat(MAX_QUESTION_CHARS)),
        "x".repeat(MAX_QUESTION_CHARS + 1),
        format!(" {} ", "x".repeat(MAX_QUESTION_CHARS + 1)),
    ];
    for (path, field) in [("/v1/answer", "question"), ("/v1/retrieve", "query")] {
        let body = json_body_schema(&spec["paths"][path]["post"]).expect("json body").clone();
        let schema = property(&spec, &body, field);
        assert_eq!(schema["minLength"], 1, "{path} {field}: {schema}");
        let pattern = schema["pattern"].as_str().unwrap_or_else(|| panic!("{path} {field} has no pattern: {schema}"));
        let pattern = Regex::new(pattern).unwrap();
        for sample in &samples {
            let declared = sample.chars().count() >= 1 && pattern.is_match(sample);
            let reply = send!(&service, "POST", path, Some(&user), Body::Json(json!({field: sample})));
            assert!([200, 400].contains(&reply.status), "{path} {sample:?}: {}", reply.status);
            assert_eq!(declared, reply.status == 200, "{path} {field} {sample:?}: the schema and the server disagree");
        }
    }

    // Integers are unsigned 64-bit: declared without the int64 format, whose bound is 2^63 - 1.
    let answer = json_body_schema(&operation("post", "/v1/answer")).unwrap().clone();
    let retrieve = json_body_schema(&operation("post", "/v1/retrieve")).unwrap().clone();
    let changes = operation("get", "/v1/admin/acl/changes");
    let since = changes["parameters"].as_array().unwrap().iter().find(|p| p["name"] == "since").unwrap();
    // Its fields are the first `allOf` item (the second says: text, or content and content_type).
    let document = &component(&spec, "DocumentInput")["allOf"][0];
    for (name, schema, minimum) in [
        ("top_k", property(&spec, &answer, "top_k"), 0),
        ("deadline_ms", property(&spec, &answer, "deadline_ms"), 0),
        ("k", property(&spec, &retrieve, "k"), 0),
        ("since", &since["schema"], 0),
        ("version", property(&spec, document, "version"), 1),
    ] {
        let types = schema["type"].clone();
        assert!(types == "integer" || types.as_array().is_some_and(|t| t.contains(&json!("integer"))), "{name}");
        assert_eq!(schema["minimum"], minimum, "{name}: {schema}");
        assert_eq!(schema["maximum"], json!(u64::MAX), "{name}: {schema}");
        assert!(schema.get("format").is_none_or(|format| format != "int64"), "{name}: {schema}");
    }
    let over = br#"{"query": "hotel", "k": 18446744073709551616}"#.to_vec();
    let reply = send!(&service, "POST", "/v1/retrieve", Some(&user), Body::Raw("application/json", over));
    assert_eq!(reply.status, 400);
    let reply =
        send!(&service, "POST", "/v1/retrieve", Some(&user), Body::Json(json!({"query": "hotel", "k": u64::MAX})));
    assert_eq!(reply.status, 200);
    // JSON Schema's `integer` admits 3.0; so does the server (a regression: serde's u64 did not).
    let reply = send!(&service, "POST", "/v1/retrieve", Some(&user), Body::Json(json!({"query": "hotel", "k": 3.0})));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let reply =
        send!(&service, "POST", "/v1/answer", Some(&user), Body::Json(json!({"question": "hotel?", "top_k": 2.0})));
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(since["in"], "query", "{since}");
    for (query, status) in [("since=1.0", 200), ("since=1.5", 400), ("since=18446744073709551616", 400)] {
        let reply = send!(&service, "GET", &format!("/v1/admin/acl/changes?{query}"), Some(&admin), Body::None);
        assert_eq!(reply.status, status, "{query}: {}", reply.body);
    }

    // The upsert batch: 1..=max_batch_documents documents, each with its field rules.
    let upsert = json_body_schema(&operation("put", "/v1/admin/documents")).unwrap().clone();
    let documents = property(&spec, &upsert, "documents");
    assert_eq!(documents["minItems"], 1, "{documents}");
    assert_eq!(documents["maxItems"], MAX_BATCH_DOCUMENTS, "{documents}");
    let batch = |n: usize| {
        let documents: Vec<Value> = (0..n)
            .map(|i| json!({"doc_id": format!("batch-{i}"), "text": "Some text.", "acl": {"users": ["alice"]}}))
            .collect();
        Body::Json(json!({ "documents": documents }))
    };
    for (n, status) in [(0, 400), (MAX_BATCH_DOCUMENTS, 200), (MAX_BATCH_DOCUMENTS + 1, 400)] {
        let reply = send!(&service, "PUT", "/v1/admin/documents", Some(&admin), batch(n));
        assert_eq!(reply.status, status, "{n} documents: {}", reply.body);
    }
    let doc_id = property(&spec, document, "doc_id");
    assert_eq!((doc_id["minLength"].clone(), doc_id["maxLength"].clone()), (json!(1), json!(256)), "{doc_id}");
    let text = property(&spec, document, "text");
    assert_eq!(text["minLength"], 1, "{text}");
    assert_eq!(property(&spec, document, "title")["maxLength"], 1000);
    for (field, value, valid) in [
        ("doc_id", "  ", false),
        ("doc_id", "a\u{7}b", false),
        ("doc_id", "a b", true),
        ("text", "\u{2028}\u{3000}", false),
        ("text", " x ", true),
    ] {
        let schema = property(&spec, document, field);
        let declared = Regex::new(schema["pattern"].as_str().expect("pattern")).unwrap().is_match(value);
        assert_eq!(declared, valid, "{field} {value:?}: {schema}");
        let mut input = json!({"doc_id": "pattern-probe", "text": "Some text."});
        input[field] = json!(value);
        let reply =
            send!(&service, "PUT", "/v1/admin/documents", Some(&admin), Body::Json(json!({"documents": [input]})));
        assert_eq!(reply.status == 200, valid, "{field} {value:?}: {}", reply.body);
    }
    let acl = property(&spec, document, "acl");
    assert_eq!(acl["additionalProperties"], false, "{acl}");
    for list in ["groups", "users"] {
        let names = property(&spec, acl, list);
        let item = resolve(&spec, &names["items"]);
        assert_eq!((item["minLength"].clone(), item["maxLength"].clone()), (json!(1), json!(256)), "{item}");
        assert!(item["pattern"].is_string(), "{item}");
    }

    // Grant needs at least one non-empty list; the schema says so (revoke does not).
    let grant = resolve(&spec, json_body_schema(&operation("post", "/v1/admin/acl/grant")).unwrap()).clone();
    let parts = grant["allOf"].as_array().cloned().unwrap_or_else(|| vec![grant.clone()]);
    let any_of = parts
        .iter()
        .find_map(|part| part["anyOf"].as_array())
        .unwrap_or_else(|| panic!("grant body without anyOf: {grant}"));
    let required: BTreeSet<&str> = any_of
        .iter()
        .flat_map(|option| option["required"].as_array().unwrap())
        .map(|name| name.as_str().unwrap())
        .collect();
    assert_eq!(required, BTreeSet::from(["groups", "users"]));
    let reply =
        send!(&service, "POST", "/v1/admin/acl/grant", Some(&admin), Body::Json(json!({"doc_id": "travel-policy"})));
    assert_eq!(reply.status, 400);

    // Every request body rejects unknown fields, and says so.
    for (method, path) in served {
        if let Some(body) = json_body_schema(&spec["paths"][path][method]) {
            let body = resolve(&spec, body);
            let object = body["allOf"].as_array().map_or(body, |parts| resolve(&spec, &parts[0]));
            assert_eq!(object["additionalProperties"], false, "{method} {path}: {body}");
        }
    }
}

#[actix_web::test]
async fn every_reference_in_the_document_resolves() {
    let snapshots = tempfile::tempdir().unwrap();
    let service = init_service(app(state(settings(snapshots.path())).await)).await;
    let spec = send!(&service, "GET", "/openapi.json", None, Body::None).body;
    fn walk(spec: &Value, value: &Value) {
        match value {
            Value::Object(map) => {
                if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
                    resolve(spec, value);
                    assert!(reference.starts_with("#/components/"), "{reference}");
                }
                map.values().for_each(|inner| walk(spec, inner));
            }
            Value::Array(items) => items.iter().for_each(|inner| walk(spec, inner)),
            _ => {}
        }
    }
    walk(&spec, &spec);
}
