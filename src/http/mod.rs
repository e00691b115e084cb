//! The HTTP service (actix-web): authentication extractor, one file per resource, error mapping
//! in one place, request ids, limits and backpressure. Only this module knows actix-web.
//!
//! Invariants: every endpoint except `/livez`, `/healthz`, `/readyz`, `/metrics`, `/openapi.json` and the
//! protected resource metadata (`/.well-known/oauth-protected-resource[/mcp]`, [`mcp`]) requires
//! a verified token; bodies reject unknown fields, so no body can carry a tenant,
//! principal, group or role; the answer and retrieve endpoints admit at most
//! `server.max_in_flight` requests at once and answer 503 `overloaded` beyond that (an answer's
//! slot is held by its pipeline until that ends, and a pipeline whose client went away is
//! cancelled, so the limit bounds running work, not waiting handlers); logs carry
//! the request id, method, route pattern and status, never bodies, tokens or document text; a
//! method a path does not serve answers 405 with `Allow` naming the ones it does (from [`ROUTES`]).

pub mod admin;
pub mod answer;
pub mod auth;
pub mod console;
pub mod contract;
pub mod documents;
pub mod error;
pub mod files;
pub mod host;
pub mod mcp;
pub mod openapi;
pub mod ops;
pub mod replica;
pub mod reviews;
pub mod server;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{HttpMessage, HttpResponse, web};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::Semaphore;

use crate::answer::AnswerPipeline;
use crate::config::Settings;
use crate::embedded::Engine;
use crate::retrieval::ReadSide;

use auth::Authenticator;
use error::ApiError;

/// Every route the service serves: (method, path). The OpenAPI document must list exactly these,
/// and a 405 on a path names its methods from here in `Allow`. The MCP endpoint `POST /mcp`
/// ([`mcp`]) is not among them: it speaks JSON-RPC, whose contract is the MCP specification and
/// whose tools publish their own schemas (`tools/list`), not the REST error body.
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/answer"),
    ("post", "/v1/retrieve"),
    ("get", "/v1/documents/{doc_id}"),
    ("put", "/v1/admin/documents"),
    ("delete", "/v1/admin/documents/{doc_id}"),
    ("post", "/v1/admin/files"),
    ("post", "/v1/admin/acl/revoke"),
    ("post", "/v1/admin/acl/grant"),
    ("get", "/v1/admin/acl/changes"),
    ("post", "/v1/admin/snapshots"),
    ("get", "/v1/replica/snapshot"),
    ("get", "/v1/replica/snapshot/{snapshot_id}/{file}"),
    ("get", "/v1/replica/stream"),
    ("post", "/v1/replica/lease"),
    ("get", "/v1/reviews"),
    ("get", "/v1/reviews/{review_id}"),
    ("post", "/v1/reviews/{review_id}/verdicts"),
    ("get", "/livez"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
    ("get", "/.well-known/oauth-protected-resource"),
    ("get", "/.well-known/oauth-protected-resource/mcp"),
    ("get", "/console/demo-users"),
    ("post", "/console/demo-token"),
];

/// The routes only a demo serves ([`console::DemoUsers::demo_mode`]): elsewhere they are neither
/// registered nor documented, so they answer like any unknown route.
pub const DEMO_ROUTES: &[&str] = &["/console/demo-users", "/console/demo-token"];

/// The routes a server with `settings` serves and documents: [`ROUTES`], less [`DEMO_ROUTES`]
/// outside demo mode.
pub fn served_routes(settings: &Settings) -> Vec<(&'static str, &'static str)> {
    let demo = console::DemoUsers::demo_mode(settings);
    ROUTES.iter().copied().filter(|(_, path)| demo || !DEMO_ROUTES.contains(path)).collect()
}

/// Shared state of all handlers.
pub struct AppState {
    /// The backend's read side (documents, readiness; the pipeline holds the same one).
    pub reader: Arc<dyn ReadSide>,
    /// The write path (the admin API's writes): the backend's write side is reached only
    /// through it.
    pub documents: Arc<crate::documents::Documents>,
    /// The embedded engine, when it is the backend: snapshots, the replica feed, index sizes.
    pub engine: Option<Arc<Engine>>,
    /// The PostgreSQL backend, when it is the backend: `/readyz` probes its database's parts.
    pub database: Option<Arc<crate::postgres::PostgresBackend>>,
    /// The answer pipeline (the read side, the generator and the verifier).
    pub pipeline: Arc<AnswerPipeline>,
    /// Token verifier.
    pub authenticator: Authenticator,
    /// Settings.
    pub settings: Arc<Settings>,
    /// Prometheus handle.
    pub metrics: PrometheusHandle,
    /// Admission control of answer/retrieve.
    pub in_flight: Arc<Semaphore>,
    /// Set once indexes are loaded.
    pub ready: AtomicBool,
    /// Freshness of the ACL state when this server is a replica (`None` on a primary).
    pub replica: Option<Arc<crate::replication::status::ReplicaStatus>>,
    /// Serializes writing a snapshot for replicas that ask for one.
    pub replica_snapshot: tokio::sync::Mutex<()>,
    /// The replication log and leases of an embedded primary with configured replicas
    /// (`auth.replica_subjects`); `None` otherwise.
    pub replication: Option<Arc<crate::replication::primary::ReplicationLog>>,
    /// The backend's review store (`/v1/reviews`).
    pub reviews: Arc<dyn crate::review::ReviewStore>,
    /// The review queue's router, when `review.enabled` (written out at shutdown).
    pub review: Option<Arc<crate::review::Router>>,
}

impl AppState {
    /// Fails closed on a replica whose ACL state is not confirmed fresh within its bound.
    /// Returns what `principal`'s request sees of the replica, to be checked again with
    /// [`AppState::ensure_same_state`] before a response built from that state is returned.
    pub fn ensure_fresh(
        &self,
        principal: &crate::domain::Principal,
    ) -> Result<crate::replication::status::Observed, ApiError> {
        match &self.replica {
            Some(status) if !status.is_fresh(Instant::now()) => Err(stale()),
            Some(status) => Ok(status.observe(principal)),
            None => Ok(Default::default()),
        }
    }

    /// Fails closed when the replica diverged (another lineage, an epoch that went backwards)
    /// after a request started, or applied a change that can take something from the
    /// request's principal: what the request computed came from a state it must not serve. A
    /// change in another tenant, or that removes other readers, fails nothing (issue 59).
    pub fn ensure_same_state(&self, observed: &crate::replication::status::Observed) -> Result<(), ApiError> {
        match &self.replica {
            Some(status) if !status.unchanged_for(observed) || !status.is_fresh(Instant::now()) => Err(stale()),
            _ => Ok(()),
        }
    }

    /// The embedded engine, or 409 `backend_unsupported` for what only it offers (snapshots and
    /// the replica feed: a PostgreSQL deployment replicates and backs up through the database).
    pub fn engine(&self) -> Result<&Arc<Engine>, ApiError> {
        self.engine.as_ref().ok_or_else(|| {
            ApiError::conflict(
                "backend_unsupported",
                "this server's storage backend does not offer this operation; use the database's own tools",
            )
        })
    }
}

fn stale() -> ApiError {
    ApiError::unavailable(
        "replica_stale",
        "replica cannot confirm its access control state is fresh; retry later or ask the primary",
    )
}

/// The request id of a request (set by the request-id middleware).
#[derive(Clone, Debug)]
pub struct RequestId(pub String);

/// Registers every route, body limits and JSON error handling.
pub fn configure(settings: &Settings) -> impl FnOnce(&mut web::ServiceConfig) + use<> {
    let max_body = settings.server.max_body_bytes;
    let console = console::configure(settings);
    move |config: &mut web::ServiceConfig| {
        let json = web::JsonConfig::default().limit(max_body).error_handler(|error, _| json_error(error).into());
        let query = web::QueryConfig::default()
            .error_handler(|error, _| ApiError::bad_request("invalid_query", error.to_string().to_lowercase()).into());
        let path = web::PathConfig::default()
            .error_handler(|error, _| ApiError::bad_request("invalid_path", error.to_string().to_lowercase()).into());
        config
            .app_data(json)
            .app_data(query)
            .app_data(path)
            .service(resource("/v1/answer", web::post().to(answer::answer)))
            .service(resource("/v1/retrieve", web::post().to(answer::retrieve)))
            .service(resource("/v1/documents/{doc_id}", web::get().to(documents::document)))
            .service(resource("/v1/admin/documents", web::put().to(admin::upsert_documents)))
            .service(resource("/v1/admin/documents/{doc_id}", web::delete().to(admin::delete_document)))
            .service(resource("/v1/admin/files", web::post().to(files::upload_files)))
            .service(resource("/v1/admin/acl/revoke", web::post().to(admin::revoke)))
            .service(resource("/v1/admin/acl/grant", web::post().to(admin::grant)))
            .service(resource("/v1/admin/acl/changes", web::get().to(admin::changes)))
            .service(resource("/v1/admin/snapshots", web::post().to(admin::create_snapshot)))
            .service(resource("/v1/replica/snapshot", web::get().to(replica::manifest)))
            .service(resource("/v1/replica/snapshot/{snapshot_id}/{file}", web::get().to(replica::file)))
            .service(resource("/v1/replica/stream", web::get().to(replica::stream)))
            .service(resource("/v1/replica/lease", web::post().to(replica::lease)))
            .service(resource("/v1/reviews", web::get().to(reviews::page)))
            .service(resource("/v1/reviews/{review_id}", web::get().to(reviews::item)))
            .service(resource("/v1/reviews/{review_id}/verdicts", web::post().to(reviews::verdict)))
            .service(resource("/livez", web::get().to(ops::livez)))
            .service(resource("/healthz", web::get().to(ops::healthz)))
            .service(resource("/readyz", web::get().to(ops::readyz)))
            .service(resource("/metrics", web::get().to(ops::metrics)))
            .service(resource("/openapi.json", web::get().to(openapi::openapi)))
            .configure(console)
            .default_service(web::to(not_found));
    }
}

/// A resource with one route; any other method answers 405 `method_not_allowed` with `Allow`.
fn resource(path: &str, route: actix_web::Route) -> actix_web::Resource {
    debug_assert!(ROUTES.iter().any(|(_, served)| *served == path), "{path} is missing from ROUTES");
    web::resource(path).route(route).default_service(web::to(method_not_allowed))
}

/// The `Allow` value of a route pattern: its methods in [`ROUTES`], e.g. `POST`.
pub fn allowed_methods(path: &str) -> String {
    let methods: Vec<String> =
        ROUTES.iter().filter(|(_, served)| *served == path).map(|(method, _)| method.to_ascii_uppercase()).collect();
    methods.join(", ")
}

fn json_error(error: actix_web::error::JsonPayloadError) -> ApiError {
    use actix_web::error::JsonPayloadError;
    match error {
        JsonPayloadError::OverflowKnownLength { .. } | JsonPayloadError::Overflow { .. } => {
            ApiError::payload_too_large()
        }
        JsonPayloadError::ContentType => ApiError::unsupported_media_type(),
        JsonPayloadError::Deserialize(inner) => {
            let code = if inner.is_data() { "invalid_body" } else { "invalid_json" };
            ApiError::bad_request(code, sanitize(&inner.to_string()))
        }
        other => ApiError::bad_request("invalid_json", sanitize(&other.to_string())),
    }
}

/// Lowercases a serde message and cuts it so no large echo of input reaches the client.
fn sanitize(message: &str) -> String {
    message.to_lowercase().chars().take(200).collect()
}

async fn not_found() -> HttpResponse {
    actix_web::ResponseError::error_response(&ApiError::not_found("not_found", "no such route"))
}

/// 405 with `Allow` (RFC 9110 §15.5.6): the methods [`ROUTES`] lists for the matched pattern.
async fn method_not_allowed(request: actix_web::HttpRequest) -> HttpResponse {
    let allow = allowed_methods(&request.match_pattern().unwrap_or_default());
    actix_web::ResponseError::error_response(&ApiError::method_not_allowed(allow))
}

/// Middleware: assigns a request id (kept from a sane incoming `x-request-id`), logs one line
/// per request with the route pattern (not the raw path) and echoes the id in the response, an
/// error's response included (a read cut at its deadline).
pub async fn request_id(
    request: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let incoming = request
        .headers()
        .get("x-request-id")
        .and_then(|value| value.to_str().ok())
        .filter(|value| {
            !value.is_empty() && value.len() <= 64 && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
        .map(str::to_owned);
    let id = incoming.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    request.extensions_mut().insert(RequestId(id.clone()));
    let method = request.method().to_string();
    let route = request.match_pattern().unwrap_or_else(|| "unmatched".to_owned());
    let started = Instant::now();
    let called = next.call(request).await;
    let status = match &called {
        Ok(response) => response.status(),
        Err(error) => error.as_response_error().status_code(),
    };
    tracing::info!(request_id = %id, %method, %route, status = status.as_u16(), elapsed_ms = started.elapsed().as_secs_f64() * 1000.0, "request");
    let header = HeaderValue::from_str(&id).ok().map(|value| (HeaderName::from_static("x-request-id"), value));
    match called {
        Ok(mut response) => {
            if let Some((name, value)) = header {
                response.headers_mut().insert(name, value);
            }
            Ok(response)
        }
        // An error a middleware inside answered with (the request deadline's 503
        // `request_timeout`): rendered here, so its response carries the id too.
        Err(error) => {
            let mut rendered = error.as_response_error().error_response();
            if let Some((name, value)) = header {
                rendered.headers_mut().insert(name, value);
            }
            Err(actix_web::error::InternalError::from_response(error, rendered).into())
        }
    }
}

/// The `{doc_id}` of a route that ends with it: the raw last path segment, percent-decoded;
/// 400 `invalid_path` when the decoded bytes are not UTF-8 (actix's `web::Path` would read
/// `%ff` as U+FFFD, naming another document than the one asked for).
pub(crate) fn doc_id_of(request: &actix_web::HttpRequest) -> Result<String, ApiError> {
    let raw = request.uri().path().rsplit('/').next().unwrap_or_default();
    percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .map(std::borrow::Cow::into_owned)
        .map_err(|_| ApiError::bad_request("invalid_path", "the document id is not UTF-8 after percent-decoding"))
}

/// Builds an `HttpResponse` with a JSON body.
pub(crate) fn json<T: serde::Serialize>(value: &T) -> HttpResponse {
    HttpResponse::Ok().json(value)
}
