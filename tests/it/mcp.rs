//! The MCP endpoint (`POST /mcp`) driven in process: the handshake, the tool list and its
//! schemas, each tool under two tenants' tokens, a revoke seen at once, the OAuth resource server
//! answers (401 with the metadata link, the metadata, another audience refused) and bad input
//! refused with JSON-RPC codes, nothing executed.

use std::sync::Arc;

use actix_web::body::MessageBody;
use actix_web::dev::ServiceResponse;
use actix_web::test::{TestRequest, call_service, init_service, read_body};
use serde_json::{Value, json};
use warrant::config::Settings;
use warrant::http::auth::{Claims, mint_hs256};
use warrant::http::server::app;

const SECRET: &str = "mcp-test-secret";
const AUDIENCE: &str = "warrant-mcp-tests";
const MAX_BODY_BYTES: usize = 16 * 1024;
const MAX_QUESTION_CHARS: usize = 300;

fn settings() -> Settings {
    let mut settings = crate::support::settings(2);
    settings.auth.hs256_secret = SECRET.into();
    settings.auth.audience = AUDIENCE.into();
    settings.server.max_body_bytes = MAX_BODY_BYTES;
    settings.server.max_question_chars = MAX_QUESTION_CHARS;
    settings
}

fn token_for(tenant: &str, user: &str, groups: &[&str], admin: bool, audience: &str) -> String {
    let claims = Claims {
        sub: user.into(),
        tenant: tenant.into(),
        groups: groups.iter().map(|group| group.to_string()).collect(),
        roles: if admin { vec!["admin".into()] } else { vec![] },
        exp: 4_000_000_000,
        iss: None,
        aud: Some(audience.into()),
    };
    mint_hs256(SECRET, &claims).unwrap()
}

fn alice() -> String {
    token_for("acme", "alice", &["everyone", "engineering"], false, AUDIENCE)
}

fn gina() -> String {
    token_for("globex", "gina", &["staff"], false, AUDIENCE)
}

struct Reply {
    status: u16,
    headers: actix_web::http::header::HeaderMap,
    body: Value,
}

async fn reply<B: MessageBody>(response: ServiceResponse<B>) -> Reply {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = read_body(response).await;
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    Reply { status, headers, body }
}

fn post(token: Option<&str>, body: Vec<u8>) -> TestRequest {
    let mut request = TestRequest::post()
        .uri("/mcp")
        .insert_header(("host", "warrant.example"))
        .insert_header(("content-type", "application/json"))
        .insert_header(("accept", "application/json, text/event-stream"))
        .set_payload(body);
    if let Some(token) = token {
        request = request.insert_header(("authorization", format!("Bearer {token}")));
    }
    request
}

/// Sends one raw request to the in-process service (a macro: the service type cannot be named).
macro_rules! send {
    ($service:expr, $request:expr) => {
        reply(call_service($service, $request.to_request()).await).await
    };
}

/// One JSON-RPC request with `token`; returns the reply.
macro_rules! rpc {
    ($service:expr, $token:expr, $method:expr, $params:expr) => {
        send!(
            $service,
            post(
                Some($token),
                serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 7, "method": $method, "params": $params})).unwrap()
            )
        )
    };
}

/// `tools/call` of `tool` with `arguments`; returns the JSON-RPC reply's body.
macro_rules! call_tool {
    ($service:expr, $token:expr, $tool:expr, $arguments:expr) => {{
        let reply = rpc!($service, $token, "tools/call", json!({"name": $tool, "arguments": $arguments}));
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.body["id"], 7, "{}", reply.body);
        reply.body
    }};
}

async fn state(settings: Settings) -> actix_web::web::Data<warrant::http::AppState> {
    let providers = crate::support::hashed_providers(&settings, None);
    crate::support::demo_state(Arc::new(settings), providers).await
}

/// The documents an answer's citations name.
fn cited_documents(result: &Value) -> Vec<String> {
    let mut documents: Vec<String> = result["structuredContent"]["answer"]["claims"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|claim| claim["citations"].as_array().into_iter().flatten())
        .map(|citation| citation["doc_id"].as_str().unwrap().to_owned())
        .collect();
    documents.sort();
    documents.dedup();
    documents
}

fn tool_calls(tool: &str, outcome: &str) -> f64 {
    let prefix = format!("warrant_mcp_tool_calls_total{{tool=\"{tool}\",outcome=\"{outcome}\"}} ");
    let rendered = warrant::telemetry::metrics_handle().render();
    rendered.lines().find_map(|line| line.strip_prefix(&prefix)).map_or(0.0, |value| value.trim().parse().unwrap())
}

#[actix_web::test]
async fn initialize_negotiates_the_revision_and_lists_three_tools_with_schemas() {
    let service = init_service(app(state(settings()).await)).await;
    let reply = rpc!(
        &service,
        &alice(),
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}})
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.headers.get("content-type").unwrap(), "application/json");
    assert!(reply.headers.get("mcp-session-id").is_none(), "stateless: no session is issued");
    let result = &reply.body["result"];
    assert_eq!(result["protocolVersion"], "2025-06-18");
    assert!(result["capabilities"]["tools"].is_object(), "{result}");
    assert_eq!(result["serverInfo"]["name"], "warrant");
    let reply = rpc!(&service, &alice(), "initialize", json!({"protocolVersion": "2024-01-01"}));
    assert_eq!(reply.body["result"]["protocolVersion"], warrant::http::mcp::PROTOCOL_VERSIONS[0]);

    let initialized = serde_json::to_vec(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).unwrap();
    let reply = send!(&service, post(Some(&alice()), initialized));
    assert_eq!(reply.status, 202);
    let reply = rpc!(&service, &alice(), "ping", json!({}));
    assert_eq!(reply.body["result"], json!({}), "{}", reply.body);

    let reply = rpc!(&service, &alice(), "tools/list", json!({}));
    let tools = reply.body["result"]["tools"].as_array().unwrap_or_else(|| panic!("{}", reply.body));
    let names: Vec<&str> = tools.iter().map(|tool| tool["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["answer", "retrieve", "read_document"]);
    for tool in tools {
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
        assert_eq!(tool["outputSchema"]["type"], "object", "{tool}");
        assert!(tool["description"].as_str().is_some_and(|text| text.len() > 20), "{tool}");
    }
    assert_eq!(tools[0]["inputSchema"]["required"], json!(["question"]));
    assert_eq!(tools[1]["inputSchema"]["required"], json!(["query"]));
    assert_eq!(tools[2]["inputSchema"]["required"], json!(["doc_id"]));
    assert!(tools[0]["outputSchema"]["properties"]["abstention"].is_object());

    // Without an OpenID provider the metadata names no authorization server (tokens are minted
    // by the operator), and still names the resource.
    let metadata =
        TestRequest::get().uri("/.well-known/oauth-protected-resource/mcp").insert_header(("host", "warrant.example"));
    let reply = send!(&service, metadata);
    assert_eq!((reply.status, &reply.body["resource"]), (200, &json!("http://warrant.example/mcp")));
    assert!(reply.body.get("authorization_servers").is_none(), "{}", reply.body);
}

/// Each tool under alice's (acme) and gina's (globex) tokens: each sees her own tenant only.
#[actix_web::test]
async fn each_tool_answers_under_the_callers_own_tenant() {
    let service = init_service(app(state(settings()).await)).await;
    let before = tool_calls("answer", "ok");
    let question = json!({"question": "How much is reimbursed for hotel stays per night?"});
    let acme = call_tool!(&service, &alice(), "answer", question.clone());
    let globex = call_tool!(&service, &gina(), "answer", question);
    for (result, tenant) in [(&acme["result"], "acme"), (&globex["result"], "globex")] {
        assert_eq!(result["isError"], false, "{result}");
        assert_eq!(result["structuredContent"]["status"], "answered", "{tenant}: {result}");
        assert_eq!(cited_documents(result), ["travel-policy"], "{tenant}");
        let text = result["content"][0]["text"].as_str().unwrap();
        assert_eq!(serde_json::from_str::<Value>(text).unwrap(), result["structuredContent"], "text mirrors structure");
        let citation = &result["structuredContent"]["answer"]["claims"][0]["citations"][0];
        assert!(citation["quote"].as_str().is_some_and(|quote| !quote.is_empty()), "{citation}");
        assert!(citation["title"].as_str().unwrap().starts_with(if tenant == "acme" { "Acme" } else { "Globex" }));
    }
    assert!(tool_calls("answer", "ok") >= before + 2.0, "per-tool counter");

    let acme = call_tool!(&service, &alice(), "retrieve", json!({"query": "security handbook passwords", "k": 5}));
    let globex = call_tool!(&service, &gina(), "retrieve", json!({"query": "security handbook passwords", "k": 5}));
    let documents = |result: &Value| -> Vec<String> {
        result["result"]["structuredContent"]["chunks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|chunk| chunk["doc_id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(!documents(&acme).iter().any(|doc| doc == "security-handbook" || doc == "benefits"), "{acme}");
    assert!(documents(&globex).iter().any(|doc| doc == "security-handbook"), "{globex}");
    assert!(!documents(&globex).iter().any(|doc| doc == "reorg-plan" || doc == "vacation-policy"), "{globex}");

    let read = call_tool!(&service, &alice(), "read_document", json!({"doc_id": "reorg-plan"}));
    let document = &read["result"]["structuredContent"];
    assert_eq!((document["doc_id"].as_str(), document["start"].as_u64()), (Some("reorg-plan"), Some(0)), "{read}");
    assert_eq!(document["end"], document["length"]);
    assert!(document["text"].as_str().unwrap().chars().count() > 20, "{read}");
    let span = call_tool!(&service, &alice(), "read_document", json!({"doc_id": "reorg-plan", "start": 5, "end": 15}));
    let whole: Vec<char> = document["text"].as_str().unwrap().chars().collect();
    assert_eq!(span["result"]["structuredContent"]["text"], whole[5..15].iter().collect::<String>());
    // Gina is of another tenant: acme's document does not exist for her.
    let hidden = call_tool!(&service, &gina(), "read_document", json!({"doc_id": "reorg-plan"}));
    assert_eq!(hidden["result"]["isError"], true, "{hidden}");
    assert!(hidden["result"]["content"][0]["text"].as_str().unwrap().starts_with("not_found"), "{hidden}");
    assert!(hidden["result"].get("structuredContent").is_none());
}

/// A revoke is seen by the very next call: the document leaves `answer` and `read_document`.
#[actix_web::test]
async fn a_revoked_document_disappears_from_answer_and_read_document_at_once() {
    let service = init_service(app(state(settings()).await)).await;
    let question = json!({"question": "How much is reimbursed for hotel stays per night?"});
    let before = call_tool!(&service, &alice(), "answer", question.clone());
    assert_eq!(cited_documents(&before["result"]), ["travel-policy"]);
    let read = call_tool!(&service, &alice(), "read_document", json!({"doc_id": "travel-policy"}));
    assert_eq!(read["result"]["isError"], false);

    let admin = token_for("acme", "root", &[], true, AUDIENCE);
    let revoke = TestRequest::post()
        .uri("/v1/admin/acl/revoke")
        .insert_header(("authorization", format!("Bearer {admin}")))
        .set_json(json!({"doc_id": "travel-policy", "groups": ["everyone"]}));
    let reply = send!(&service, revoke);
    assert_eq!(reply.status, 200, "{}", reply.body);

    let after = call_tool!(&service, &alice(), "answer", question);
    assert!(!cited_documents(&after["result"]).contains(&"travel-policy".to_owned()), "{after}");
    let read = call_tool!(&service, &alice(), "read_document", json!({"doc_id": "travel-policy"}));
    assert_eq!(read["result"]["isError"], true, "{read}");
    let retrieved = call_tool!(&service, &alice(), "retrieve", json!({"query": "hotel stays per night"}));
    let chunks = retrieved["result"]["structuredContent"]["chunks"].as_array().unwrap();
    assert!(chunks.iter().all(|chunk| chunk["doc_id"] != "travel-policy"), "{retrieved}");
}

/// Without a valid token: 401 with `WWW-Authenticate` naming the resource metadata, which
/// names this server's `/mcp`; a token for another audience is refused the same way.
#[actix_web::test]
async fn a_call_without_a_valid_token_gets_401_with_the_resource_metadata_link() {
    let mut settings = settings();
    settings.auth.oidc.issuer = "https://idp.example.com".into();
    settings.auth.oidc.jwks_url = "https://idp.example.com/jwks".into();
    settings.auth.oidc.audience = AUDIENCE.into();
    let service = init_service(app(state(settings).await)).await;
    let list = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).unwrap();
    let expected = "Bearer resource_metadata=\"http://warrant.example/.well-known/oauth-protected-resource/mcp\"";
    let reply = send!(&service, post(None, list.clone()));
    assert_eq!(reply.status, 401);
    assert_eq!(reply.headers.get("www-authenticate").unwrap(), expected);
    assert_eq!(reply.body["code"], "missing_token");

    let other_audience = token_for("acme", "alice", &["everyone"], false, "another-service");
    for token in [other_audience.as_str(), "not-a-token"] {
        let reply = send!(&service, post(Some(token), list.clone()));
        assert_eq!(reply.status, 401, "{}", reply.body);
        let challenge = reply.headers.get("www-authenticate").unwrap().to_str().unwrap();
        assert_eq!(challenge, format!("{expected}, error=\"invalid_token\""));
    }

    let metadata =
        TestRequest::get().uri("/.well-known/oauth-protected-resource/mcp").insert_header(("host", "warrant.example"));
    let reply = send!(&service, metadata);
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body["resource"], "http://warrant.example/mcp");
    assert_eq!(reply.body["authorization_servers"], json!(["https://idp.example.com"]));
    assert_eq!(reply.body["bearer_methods_supported"], json!(["header"]));
    let origin =
        TestRequest::get().uri("/.well-known/oauth-protected-resource").insert_header(("host", "warrant.example"));
    assert_eq!(send!(&service, origin).body["resource"], "http://warrant.example");

    // No server-initiated stream, no sessions to end.
    for method in [actix_web::http::Method::GET, actix_web::http::Method::DELETE] {
        let reply = send!(&service, TestRequest::default().method(method.clone()).uri("/mcp"));
        assert_eq!(reply.status, 405, "{method}");
        assert_eq!(reply.headers.get("allow").unwrap(), "POST");
    }
}

/// Malformed JSON-RPC, unknown methods and tools, wrong argument types, unknown fields and
/// oversized arguments are refused with their codes, and no tool runs.
#[actix_web::test]
async fn bad_input_is_refused_with_json_rpc_codes_and_nothing_runs() {
    let settings = settings();
    let embedder = crate::support::FakeCountingEmbedder::new(settings.embedder.dim);
    let mut providers = crate::support::hashed_providers(&settings, None);
    providers.embedder = embedder.clone();
    let state = crate::support::demo_state(Arc::new(settings), providers).await;
    let service = init_service(app(state)).await;
    embedder.take();
    let token = alice();

    for (body, code) in [
        (b"{not json".to_vec(), -32700),
        (b"[{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"ping\"}]".to_vec(), -32600),
        (b"\"ping\"".to_vec(), -32600),
        (b"{\"jsonrpc\": \"1.0\", \"id\": 1, \"method\": \"ping\"}".to_vec(), -32600),
        (b"{\"jsonrpc\": \"2.0\", \"id\": {}, \"method\": \"ping\"}".to_vec(), -32600),
        (b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": 5}".to_vec(), -32600),
    ] {
        let reply = send!(&service, post(Some(&token), body.clone()));
        assert_eq!(reply.status, 400, "{}", String::from_utf8_lossy(&body));
        assert_eq!(reply.body["error"]["code"], code, "{}", reply.body);
        assert_eq!(reply.body["jsonrpc"], "2.0");
    }

    let reply = rpc!(&service, &token, "resources/list", json!({}));
    assert_eq!((reply.status, &reply.body["error"]["code"]), (200, &json!(-32601)), "{}", reply.body);

    let oversized = "x".repeat(MAX_QUESTION_CHARS + 1);
    for (params, what) in [
        (json!({"name": "shell", "arguments": {}}), "unknown tool"),
        (json!({"name": 3}), "name not a string"),
        (json!({"name": "answer", "arguments": "how much?"}), "arguments not an object"),
        (json!({"name": "answer", "arguments": {"question": 42}}), "wrong type"),
        (json!({"name": "answer", "arguments": {}}), "missing question"),
        (json!({"name": "answer", "arguments": {"question": "hotel?", "tenant": "globex"}}), "unknown field"),
        (json!({"name": "answer", "arguments": {"question": oversized}}), "oversized question"),
        (json!({"name": "answer", "arguments": {"question": "   "}}), "blank question"),
        (json!({"name": "retrieve", "arguments": {"query": "hotel", "k": "five"}}), "wrong type"),
        (json!({"name": "read_document", "arguments": {"doc_id": "travel-policy", "start": -1}}), "negative"),
        (json!({"name": "read_document", "arguments": {"doc_id": "travel-policy", "start": 9, "end": 2}}), "span"),
        (json!({"name": "read_document", "arguments": {"doc_id": ""}}), "empty id"),
    ] {
        let reply = rpc!(&service, &token, "tools/call", params);
        assert_eq!((reply.status, &reply.body["error"]["code"]), (200, &json!(-32602)), "{what}: {}", reply.body);
    }
    let reply = send!(&service, post(Some(&token), vec![b' '; MAX_BODY_BYTES + 1]));
    assert_eq!((reply.status, &reply.body["code"]), (413, &json!("payload_too_large")));
    let mut text = post(Some(&token), b"{}".to_vec());
    text = text.insert_header(("content-type", "text/plain"));
    assert_eq!(send!(&service, text).status, 415);
    let mut future = post(Some(&token), b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"ping\"}".to_vec());
    future = future.insert_header(("mcp-protocol-version", "2099-01-01"));
    assert_eq!(send!(&service, future).status, 400);

    assert_eq!(embedder.count(), 0, "no question or query was embedded: nothing ran");
    // The counter moves when a tool does run.
    call_tool!(&service, &token, "retrieve", json!({"query": "hotel stays"}));
    assert!(embedder.count() > 0);
}
