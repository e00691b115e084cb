//! `POST /mcp`: a Model Context Protocol server (protocol revision 2025-11-25, also answering
//! 2025-06-18 and 2025-03-26 clients) over the streamable HTTP transport in its JSON-response
//! mode, and the OAuth protected resource metadata (RFC 9728) that tells an MCP client where to
//! get a token for it.
//!
//! Tools: `answer` (the validated answer, or the typed abstention), `retrieve` (the authorized
//! chunks with their locations) and `read_document` (a document's text or a span of it). Each
//! calls the function its REST route calls ([`super::answer::answer_once`],
//! [`super::answer::retrieve_once`], [`super::documents::document_out`]), so limits, admission,
//! deadlines, review routing and replica freshness are the REST ones, and publishes its input and
//! output schemas, derived from the same wire types as the OpenAPI document.
//!
//! Invariants:
//! - every `POST /mcp` is authenticated by the REST extractor ([`Authenticated`]) before its body
//!   is read; without a valid token it gets 401 with `WWW-Authenticate: Bearer
//!   resource_metadata="…"` naming this server's metadata URL, and every tool runs under the
//!   token's principal: no server credential is ever used on a caller's behalf;
//! - stateless: no `Mcp-Session-Id` is issued (one sent is ignored) and nothing of one request is
//!   kept for another, so one caller's results cannot reach another; `GET /mcp` (a
//!   server-initiated stream) and `DELETE /mcp` (ending a session) answer 405;
//! - bad input executes nothing: a body that is not JSON is -32700, not a JSON-RPC 2.0 message
//!   (or a batch) -32600, an unknown method -32601, an unknown tool, arguments of the wrong
//!   shape or type, unknown fields, or a question or query over `server.max_question_chars`
//!   -32602; a body over `server.max_body_bytes` is 413 before it is parsed;
//! - metrics per tool are bounded by the three tool names (`warrant_mcp_tool_calls_total{tool,
//!   outcome}`, `warrant_mcp_tool_duration_seconds{tool}`); an unknown tool counts as `unknown`.

use std::time::Instant;

use actix_web::dev::Payload;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{FromRequest, HttpMessage, HttpRequest, HttpResponse, ResponseError, web};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use crate::config::Settings;
use crate::domain::Principal;

use super::answer::{AnswerBodyIn, RetrieveBodyIn};
use super::auth::Authenticated;
use super::documents::DocumentChunk;
use super::error::{ApiError, ErrorBody};
use super::{AppState, RequestId};

mod metadata;
mod tools;

pub(crate) use metadata::{__path_mcp_metadata, __path_origin_metadata};
pub use metadata::{ResourceMetadata, mcp_metadata, metadata_url, origin_metadata};
use tools::Tool;
pub use tools::Tools;

/// The protocol revisions this server speaks, newest first: an `initialize` naming one gets it
/// back, any other gets the newest (the client then decides whether to go on).
pub const PROTOCOL_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// The MCP endpoint's path.
pub const PATH: &str = "/mcp";

/// Protected resource metadata of the origin (RFC 9728 §3).
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// Protected resource metadata of `/mcp` (the well-known path with the resource's path appended,
/// RFC 9728 §3.1), which MCP clients ask for first.
pub const MCP_METADATA_PATH: &str = "/.well-known/oauth-protected-resource/mcp";

/// JSON-RPC 2.0 error codes used here.
mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
}

/// Arguments of the `read_document` tool.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadDocumentIn {
    /// Document id (a citation's `chunk.doc_id`).
    #[schema(min_length = 1, max_length = 512, example = "travel-policy")]
    pub doc_id: String,
    /// First character of the span to read (a citation's `chunk.start`); 0 when absent.
    #[serde(default)]
    pub start: Option<u64>,
    /// One past the span's last character (a citation's `chunk.end`); the end of the document
    /// when absent or beyond it.
    #[serde(default)]
    pub end: Option<u64>,
}

/// Longest document id `read_document` takes, in characters.
const MAX_DOC_ID_CHARS: usize = 512;

/// Result of the `read_document` tool: the span's text and the chunks that overlap it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReadDocumentOut {
    /// Document id.
    pub doc_id: String,
    /// Live version.
    pub doc_version: u64,
    /// Title.
    pub title: String,
    /// ACL epoch of the snapshot the read was authorized under.
    pub acl_epoch: u64,
    /// Character offset of the span's first character.
    pub start: usize,
    /// Character offset one past the span's last character.
    pub end: usize,
    /// Length of the document's text in characters.
    pub length: usize,
    /// The span's text (`doc.text[start..end]` in characters).
    pub text: String,
    /// The live version's chunks that overlap the span, in document order, with their locations.
    pub chunks: Vec<DocumentChunk>,
}

/// Registers `/mcp` and the two metadata routes.
pub fn configure(settings: &Settings) -> impl FnOnce(&mut web::ServiceConfig) + use<> {
    let tools = web::Data::new(Tools::new(settings));
    move |config: &mut web::ServiceConfig| {
        config
            .service(
                web::resource(PATH)
                    .app_data(tools)
                    .route(web::post().to(post))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(super::resource(METADATA_PATH, web::get().to(origin_metadata)))
            .service(super::resource(MCP_METADATA_PATH, web::get().to(mcp_metadata)));
    }
}

/// 405 for `GET /mcp` (no server-initiated stream is offered) and every other method.
async fn method_not_allowed() -> HttpResponse {
    ApiError::method_not_allowed("POST").error_response()
}

/// A JSON-RPC error object.
#[derive(Debug, Serialize)]
struct RpcError {
    code: i64,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<Value>,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), data: None }
    }

    /// -32602 for a request the server refused before running anything, carrying its REST code.
    fn invalid_params(message: impl Into<String>, rest_code: Option<&'static str>) -> Self {
        Self {
            code: code::INVALID_PARAMS,
            message: message.into(),
            data: rest_code.map(|rest_code| json!({ "code": rest_code })),
        }
    }
}

fn rpc_result(id: &Value, result: Value) -> HttpResponse {
    HttpResponse::Ok().json(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// A response whose result is already serialized (a tool's result: its output is written once as
/// JSON text and placed both as the text content and, verbatim, as the structured content).
fn rpc_result_text(id: &Value, result: &str) -> HttpResponse {
    let id = serde_json::to_string(id).unwrap_or_else(|_| "null".to_owned());
    HttpResponse::Ok()
        .content_type("application/json")
        .body(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#))
}

fn rpc_error(status: actix_web::http::StatusCode, id: &Value, error: RpcError) -> HttpResponse {
    HttpResponse::build(status).json(json!({"jsonrpc": "2.0", "id": id, "error": error}))
}

/// Cuts a client-supplied string for an error message (no large echo of input).
fn cut(text: &str) -> String {
    text.chars().take(100).collect()
}

/// 401 with `WWW-Authenticate` naming the metadata URL (RFC 9728 §5.1, RFC 6750 §3); any other
/// refusal of the extractor as the REST routes answer it.
fn refused(request: &HttpRequest, error: &ApiError) -> HttpResponse {
    let mut response = error.error_response();
    if error.status == actix_web::http::StatusCode::UNAUTHORIZED {
        let mut challenge = format!("Bearer resource_metadata=\"{}\"", metadata_url(request));
        if error.code != "missing_token" {
            challenge.push_str(", error=\"invalid_token\"");
        }
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
        }
    }
    response
}

/// Reads the body, at most `limit` bytes (413 `payload_too_large` beyond).
async fn read_body(mut payload: web::Payload, limit: usize) -> Result<web::Bytes, ApiError> {
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|_| ApiError::bad_request("invalid_body", "the request body could not be read"))?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::payload_too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// Whether the request's content type is JSON (`application/json`, parameters allowed).
fn is_json(request: &HttpRequest) -> bool {
    request.mime_type().ok().flatten().is_some_and(|mime| mime.type_() == "application" && mime.subtype() == "json")
}

/// `POST /mcp`: one JSON-RPC message in, one JSON reply (a request) or 202 (a notification or
/// a response).
pub async fn post(
    state: web::Data<AppState>,
    tools: web::Data<Tools>,
    request: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let principal = match Authenticated::from_request(&request, &mut Payload::None).await {
        Ok(Authenticated(principal)) => principal,
        Err(error) => return refused(&request, &error),
    };
    if !is_json(&request) {
        return ApiError::unsupported_media_type().error_response();
    }
    let bad_request = actix_web::http::StatusCode::BAD_REQUEST;
    if let Some(version) = request.headers().get("mcp-protocol-version") {
        let known = version.to_str().is_ok_and(|version| PROTOCOL_VERSIONS.contains(&version.trim()));
        if !known {
            let message =
                format!("unsupported mcp-protocol-version; this server speaks {}", PROTOCOL_VERSIONS.join(", "));
            return rpc_error(bad_request, &Value::Null, RpcError::new(code::INVALID_REQUEST, message));
        }
    }
    let body = match read_body(payload, state.settings.server.max_body_bytes).await {
        Ok(body) => body,
        Err(error) => return error.error_response(),
    };
    let message: Value = match serde_json::from_slice(&body) {
        Ok(message) => message,
        Err(_) => return rpc_error(bad_request, &Value::Null, RpcError::new(code::PARSE_ERROR, "parse error")),
    };
    let Value::Object(message) = message else {
        let what = if message.is_array() { "batches are not supported" } else { "not a json-rpc message" };
        return rpc_error(bad_request, &Value::Null, RpcError::new(code::INVALID_REQUEST, what));
    };
    let id = match message.get("id") {
        None => None,
        Some(id @ (Value::String(_) | Value::Number(_))) => Some(id.clone()),
        Some(_) => {
            let error = RpcError::new(code::INVALID_REQUEST, "id must be a string or a number");
            return rpc_error(bad_request, &Value::Null, error);
        }
    };
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        let error = RpcError::new(code::INVALID_REQUEST, "jsonrpc must be \"2.0\"");
        return rpc_error(bad_request, id.as_ref().unwrap_or(&Value::Null), error);
    }
    let method = match (message.get("method"), &id) {
        (Some(Value::String(method)), Some(_)) => method.as_str(),
        // A notification, or the client's response to a server request (none are sent): accepted.
        (Some(Value::String(_)), None) => return HttpResponse::Accepted().finish(),
        (None, Some(_)) if message.contains_key("result") || message.contains_key("error") => {
            return HttpResponse::Accepted().finish();
        }
        _ => {
            let error = RpcError::new(code::INVALID_REQUEST, "not a json-rpc request, notification or response");
            return rpc_error(bad_request, id.as_ref().unwrap_or(&Value::Null), error);
        }
    };
    let id = id.unwrap_or(Value::Null);
    let params = match message.get("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(params)) => params.clone(),
        Some(_) => return rpc_error(bad_request, &id, RpcError::invalid_params("params must be an object", None)),
    };
    let ok = actix_web::http::StatusCode::OK;
    match method {
        "initialize" => match params.get("protocolVersion").and_then(Value::as_str) {
            Some(asked) => rpc_result(&id, initialize_result(asked)),
            None => rpc_error(ok, &id, RpcError::invalid_params("protocolVersion is required", None)),
        },
        "ping" => rpc_result(&id, json!({})),
        "tools/list" => rpc_result(&id, tools.list.clone()),
        "tools/call" => match call(&state, principal, request_id(&request), &params).await {
            Ok(result) => rpc_result_text(&id, &result),
            Err(error) => rpc_error(ok, &id, error),
        },
        other => rpc_error(ok, &id, RpcError::new(code::METHOD_NOT_FOUND, format!("method not found: {}", cut(other)))),
    }
}

/// The `initialize` result: the asked revision when spoken, else the newest.
fn initialize_result(asked: &str) -> Value {
    let version = PROTOCOL_VERSIONS.iter().find(|known| **known == asked).unwrap_or(&PROTOCOL_VERSIONS[0]);
    json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": false}},
        "serverInfo": {"name": "warrant", "title": "warrant", "version": env!("CARGO_PKG_VERSION")},
        "instructions": "Tools over the documents this token may read. 'answer' gives claims with checked \
                         citations or a typed abstention; 'retrieve' gives passages; 'read_document' opens a \
                         cited span. Cite only what the tools return.",
    })
}

fn request_id(request: &HttpRequest) -> String {
    request.extensions().get::<RequestId>().map(|id| id.0.clone()).unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
}

/// `tools/call`: checks the tool and its arguments (nothing runs on a refusal), runs it under
/// `principal`, and counts it.
async fn call(
    state: &AppState,
    principal: Principal,
    request_id: String,
    params: &Map<String, Value>,
) -> Result<String, RpcError> {
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return Err(RpcError::invalid_params("name must be a string naming a tool", None));
    };
    let Some(tool) = Tool::parse(name) else {
        metrics::counter!("warrant_mcp_tool_calls_total", "tool" => "unknown", "outcome" => "invalid").increment(1);
        return Err(RpcError::invalid_params(format!("unknown tool: {}", cut(name)), None));
    };
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(arguments @ Value::Object(_)) => arguments.clone(),
        Some(_) => return Err(invalid(tool, RpcError::invalid_params("arguments must be an object", None))),
    };
    let started = Instant::now();
    let outcome = run(state, tool, principal, request_id, arguments).await;
    metrics::histogram!("warrant_mcp_tool_duration_seconds", "tool" => tool.name())
        .record(started.elapsed().as_secs_f64());
    match outcome {
        Ok(structured) => {
            metrics::counter!("warrant_mcp_tool_calls_total", "tool" => tool.name(), "outcome" => "ok").increment(1);
            // `structured` is the output's JSON text (an object): the text content carries it as a
            // string, the structured content as itself.
            let text = serde_json::to_string(&structured).unwrap_or_default();
            Ok(format!(
                r#"{{"content":[{{"type":"text","text":{text}}}],"structuredContent":{structured},"isError":false}}"#
            ))
        }
        Err(Refusal::Params(error)) => Err(invalid(tool, error)),
        Err(Refusal::Failed(error)) => {
            metrics::counter!("warrant_mcp_tool_calls_total", "tool" => tool.name(), "outcome" => "error").increment(1);
            // A tool execution error (the spec's `isError`), with the REST code and message.
            let body = ErrorBody { code: error.code.to_owned(), message: error.message.clone() };
            let mut text = format!("{}: {}", body.code, body.message);
            if let Some(seconds) = error.retry_after {
                text.push_str(&format!(" (retry after {seconds} s)"));
            }
            Ok(json!({"content": [{"type": "text", "text": text}], "isError": true}).to_string())
        }
    }
}

fn invalid(tool: Tool, error: RpcError) -> RpcError {
    metrics::counter!("warrant_mcp_tool_calls_total", "tool" => tool.name(), "outcome" => "invalid").increment(1);
    error
}

/// Why a tool call gave no result.
enum Refusal {
    /// Refused before anything ran (-32602).
    Params(RpcError),
    /// The tool ran and failed (a tool result with `isError`).
    Failed(ApiError),
}

impl From<ApiError> for Refusal {
    /// A 400 of the shared functions is a refused argument (they check before they run);
    /// anything else a failure of the tool.
    fn from(error: ApiError) -> Self {
        if error.status == actix_web::http::StatusCode::BAD_REQUEST {
            Refusal::Params(RpcError::invalid_params(error.message, Some(error.code)))
        } else {
            Refusal::Failed(error)
        }
    }
}

fn arguments<T: serde::de::DeserializeOwned>(arguments: Value) -> Result<T, Refusal> {
    serde_json::from_value(arguments).map_err(|error| {
        let message: String = error.to_string().to_lowercase().chars().take(200).collect();
        Refusal::Params(RpcError::invalid_params(format!("invalid arguments: {message}"), Some("invalid_body")))
    })
}

/// The tool's output as JSON text, written once (no intermediate `Value` tree).
fn to_json<T: Serialize>(value: &T) -> Result<String, Refusal> {
    serde_json::to_string(value).map_err(|_| Refusal::Failed(ApiError::internal("internal")))
}

async fn run(
    state: &AppState,
    tool: Tool,
    principal: Principal,
    request_id: String,
    raw: Value,
) -> Result<String, Refusal> {
    match tool {
        Tool::Answer => {
            let body: AnswerBodyIn = arguments(raw)?;
            to_json(&super::answer::answer_once(state, principal, request_id, body).await?)
        }
        Tool::Retrieve => {
            let body: RetrieveBodyIn = arguments(raw)?;
            to_json(&super::answer::retrieve_once(state, &principal, body).await?)
        }
        Tool::ReadDocument => {
            let input: ReadDocumentIn = arguments(raw)?;
            if input.doc_id.is_empty() || input.doc_id.chars().count() > MAX_DOC_ID_CHARS {
                let message = format!("doc_id must have 1 to {MAX_DOC_ID_CHARS} characters");
                return Err(Refusal::Params(RpcError::invalid_params(message, Some("invalid_doc_id"))));
            }
            if let (Some(start), Some(end)) = (input.start, input.end)
                && start > end
            {
                return Err(Refusal::Params(RpcError::invalid_params(
                    "start must not exceed end",
                    Some("invalid_span"),
                )));
            }
            let document = super::documents::document_out(state, &principal, &input.doc_id).await?;
            to_json(&span(document, input.start, input.end))
        }
    }
}

/// The span `[start, end)` of a document (clamped to its text), rebuilt from its chunks, which
/// cover the text in order and may overlap.
fn span(document: super::documents::DocumentOut, start: Option<u64>, end: Option<u64>) -> ReadDocumentOut {
    let mut chunks = document.chunks;
    chunks.sort_by_key(|chunk| (chunk.start, chunk.end));
    let mut text: Vec<char> = Vec::new();
    for chunk in &chunks {
        if chunk.end <= text.len() {
            continue;
        }
        let skip = text.len().saturating_sub(chunk.start);
        if chunk.start > text.len() {
            // A gap the chunks do not cover (never expected): kept as spaces, so offsets hold.
            text.resize(chunk.start, ' ');
        }
        text.extend(chunk.text.chars().skip(skip));
    }
    let length = text.len();
    let clamp = |offset: u64| usize::try_from(offset).unwrap_or(usize::MAX).min(length);
    let end = end.map_or(length, clamp);
    let start = start.map_or(0, clamp).min(end);
    let overlapping = chunks.into_iter().filter(|chunk| chunk.start < end && chunk.end > start).collect();
    ReadDocumentOut {
        doc_id: document.doc_id,
        doc_version: document.doc_version,
        title: document.title,
        acl_epoch: document.acl_epoch,
        start,
        end,
        length,
        text: text[start..end].iter().collect(),
        chunks: overlapping,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(start: usize, end: usize, text: &str) -> DocumentChunk {
        DocumentChunk { chunk_id: format!("c{start}"), start, end, text: text.to_owned(), location: None }
    }

    fn document(chunks: Vec<DocumentChunk>) -> super::super::documents::DocumentOut {
        super::super::documents::DocumentOut {
            doc_id: "d".into(),
            doc_version: 1,
            title: "t".into(),
            acl_epoch: 1,
            chunks,
        }
    }

    #[test]
    fn a_span_is_rebuilt_from_overlapping_chunks() {
        // "héllo wörld!" in two overlapping chunks.
        let whole = "héllo wörld!";
        let chunks = vec![chunk(6, 12, "wörld!"), chunk(0, 8, "héllo wö")];
        let read = span(document(chunks), None, None);
        assert_eq!((read.text.as_str(), read.length), (whole, 12));
        let read = span(document(vec![chunk(0, 8, "héllo wö"), chunk(6, 12, "wörld!")]), Some(3), Some(9));
        assert_eq!(read.text, "lo wör");
        assert_eq!(read.chunks.len(), 2);
        let read = span(document(vec![chunk(0, 8, "héllo wö"), chunk(6, 12, "wörld!")]), Some(9), Some(400));
        assert_eq!((read.text.as_str(), read.start, read.end), ("ld!", 9, 12));
        assert_eq!(read.chunks.iter().map(|chunk| chunk.start).collect::<Vec<_>>(), [6]);
    }

    /// Every `$ref` of every tool schema resolves inside the schema itself (`#/$defs/…`), so a
    /// client validating `structuredContent` needs nothing else.
    #[test]
    fn tool_schemas_are_self_contained_objects() {
        fn walk(root: &Value, value: &Value) {
            match value {
                Value::Object(object) => {
                    if let Some(Value::String(target)) = object.get("$ref") {
                        let name = target.strip_prefix("#/$defs/").unwrap_or_else(|| panic!("{target}"));
                        assert!(root["$defs"][name].is_object(), "{target} does not resolve");
                    }
                    object.values().for_each(|member| walk(root, member));
                }
                Value::Array(items) => items.iter().for_each(|item| walk(root, item)),
                _ => {}
            }
        }
        let tools = Tools::new(&Settings::defaults());
        let list = tools.list["tools"].as_array().unwrap();
        assert_eq!(list.len(), 3);
        for tool in list {
            for key in ["inputSchema", "outputSchema"] {
                let schema = &tool[key];
                assert_eq!(schema["type"], "object", "{} {key}", tool["name"]);
                walk(schema, schema);
            }
        }
        let answer = &list[0];
        assert!(answer["inputSchema"]["properties"]["question"]["pattern"].is_string(), "{answer}");
        assert!(answer["outputSchema"]["$defs"]["ClaimOut"].is_object(), "{answer}");
    }

    #[test]
    fn initialize_echoes_a_known_revision_and_offers_the_newest_otherwise() {
        assert_eq!(initialize_result("2025-06-18")["protocolVersion"], "2025-06-18");
        assert_eq!(initialize_result("1999-01-01")["protocolVersion"], PROTOCOL_VERSIONS[0]);
        assert_eq!(initialize_result("2025-11-25")["capabilities"]["tools"]["listChanged"], false);
    }
}
