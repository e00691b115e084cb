//! The HTTP servers: the actix-web application factory ([`app`]) and the small server that holds
//! the port while the state loads ([`loading_server`]). [`crate::app::serve`] runs them.
//!
//! Invariants of the request deadline (`server.request_timeout_ms`, [`request_deadline`]):
//! - It cuts the reads alone ([`deadline_applies`]): `GET` routes and `POST /v1/retrieve`. A read
//!   past it answers 503 `request_timeout` with `Retry-After`; its work is dropped (a PostgreSQL
//!   statement still running is cancelled on the server: `crate::postgres`'s reader), and nothing
//!   was changed.
//! - It never cuts a write (`PUT`, `DELETE`, the other `POST`s): a write cut between its commit
//!   and its answer would be applied and reported as not applied. A write runs to its end, bounded
//!   by the database's own deadlines (`storage.postgres.statement_timeout_ms`,
//!   `idle_in_transaction_timeout_ms`, `acquire_timeout_ms`), which roll it back whole (503
//!   `storage_timeout` / `storage_unavailable`): a write is either applied whole and acknowledged
//!   or not applied at all, and its answer says which.
//! - `POST /v1/answer` keeps its own deadline (`deadline_ms`, up to `answer.max_deadline_ms`),
//!   `POST /mcp` its tools' (the answer tool's, and the writes'), and the replica routes
//!   (a stream, snapshot files) last as long as their transfer.

use std::sync::Arc;
use std::time::Duration;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::middleware::Next;
use actix_web::{App, HttpServer, middleware, web};

use super::AppState;
use super::error::ApiError;

/// `server.request_timeout_ms` as [`request_deadline`] applies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestDeadline {
    /// How long a read may take before it answers 503 `request_timeout`.
    pub timeout: Duration,
    /// `Retry-After` of that answer, seconds (`server.retry_after_seconds`).
    pub retry_after_seconds: u64,
}

impl RequestDeadline {
    /// The deadline of `settings.server`.
    pub fn from_settings(settings: &crate::config::Settings) -> Self {
        Self {
            timeout: Duration::from_millis(settings.server.request_timeout_ms),
            retry_after_seconds: settings.server.retry_after_seconds,
        }
    }
}

/// Whether the request deadline cuts `method` on the route `pattern`: reads only (see the
/// module's invariants).
pub fn deadline_applies(method: &Method, pattern: &str) -> bool {
    if pattern.starts_with("/v1/replica/") {
        return false;
    }
    match *method {
        Method::GET | Method::HEAD => true,
        Method::POST => pattern == "/v1/retrieve",
        _ => false,
    }
}

/// Middleware: a read (per [`deadline_applies`]) that has not answered within the
/// [`RequestDeadline`] of the app's data answers 503 `request_timeout` with `Retry-After`, and its
/// handler is dropped. Counted in `warrant_http_request_timeouts_total{route}`.
///
/// The answer is an error ([`ApiError`]'s response), which the request-id middleware around it
/// renders with the request's `x-request-id` ([`super::request_id`]): building a response here
/// would need a clone of the request, and a request cloned before routing cannot be routed.
pub async fn request_deadline(
    request: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let deadline: Option<RequestDeadline> =
        request.app_data::<web::Data<RequestDeadline>>().map(|deadline| *deadline.get_ref());
    let route: Option<String> = request.match_pattern();
    let cut = match (deadline, route) {
        (Some(deadline), Some(route)) if deadline_applies(request.method(), route.as_str()) => Some((deadline, route)),
        _ => None,
    };
    let Some((deadline, route)) = cut else {
        return next.call(request).await;
    };
    match tokio::time::timeout(deadline.timeout, next.call(request)).await {
        Ok(response) => response,
        Err(_) => {
            metrics::counter!("warrant_http_request_timeouts_total", "route" => route.clone()).increment(1);
            tracing::warn!(
                route = %route,
                timeout_ms = deadline.timeout.as_millis() as u64,
                "request ran past server.request_timeout_ms; answered 503 request_timeout"
            );
            let error = ApiError {
                retry_after: Some(deadline.retry_after_seconds),
                ..ApiError::new(
                    actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
                    "request_timeout",
                    "the request ran past its deadline (server.request_timeout_ms) and was stopped; nothing was changed",
                )
            };
            Err(error.into())
        }
    }
}

/// The actix-web application factory for a state (used by `serve` and by tests).
pub fn app(
    state: web::Data<AppState>,
) -> App<
    impl actix_web::dev::ServiceFactory<
        actix_web::dev::ServiceRequest,
        Config = (),
        Response = actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    let settings = Arc::clone(&state.settings);
    App::new()
        .app_data(state)
        .app_data(web::Data::new(super::host::HostPolicy::from_settings(&settings)))
        .app_data(web::Data::new(RequestDeadline::from_settings(&settings)))
        .wrap(middleware::from_fn(request_deadline))
        .wrap(middleware::from_fn(super::host::check_host))
        .wrap(middleware::from_fn(super::request_id))
        .wrap(middleware::from_fn(super::ops::count_responses))
        .configure(super::mcp::configure(&settings))
        .configure(super::configure(&settings))
}

/// The server that holds the port while the state loads: `/livez`, `/healthz`, `/readyz` with the
/// progress of opening the data directory, and 503 `starting` for every other path. It does not
/// handle signals (a stop during the load ends the process; nothing was acknowledged yet).
pub fn loading_server(
    listener: std::net::TcpListener,
    names: super::ops::Names,
) -> std::io::Result<actix_web::dev::Server> {
    let names = web::Data::new(names);
    Ok(HttpServer::new(move || {
        App::new()
            .app_data(names.clone())
            .route("/livez", web::get().to(super::ops::livez))
            .route("/healthz", web::get().to(super::ops::healthz))
            .route("/readyz", web::get().to(super::ops::loading))
            .default_service(web::to(super::ops::not_yet))
    })
    .workers(1)
    .disable_signals()
    // No connection outlives the loading server: each answer closes its connection, and the
    // stop lets answers in progress finish, so a client never sees a reset at the handover.
    .keep_alive(actix_web::http::KeepAlive::Disabled)
    .shutdown_timeout(1)
    .listen(listener)?
    .run())
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::{TestRequest, init_service, read_body_json, try_call_service};

    /// Issue 59: only `/v1/answer` had a deadline; a read stuck on a frozen database hung its
    /// client. A read past the deadline answers 503 `request_timeout` with `Retry-After`; a write
    /// is never cut (it would be applied and reported as not).
    #[actix_web::test]
    async fn a_read_past_its_deadline_answers_503_and_a_write_runs_to_its_end() {
        let deadline = RequestDeadline { timeout: Duration::from_millis(50), retry_after_seconds: 2 };
        let slow = || async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            actix_web::HttpResponse::Ok().finish()
        };
        let app = init_service(
            App::new()
                .app_data(web::Data::new(deadline))
                .wrap(middleware::from_fn(request_deadline))
                .route("/v1/retrieve", web::post().to(slow))
                .route("/v1/documents/{doc_id}", web::get().to(slow))
                .route("/v1/admin/documents", web::put().to(slow)),
        )
        .await;
        for request in [TestRequest::post().uri("/v1/retrieve"), TestRequest::get().uri("/v1/documents/a")] {
            let error = try_call_service(&app, request.to_request()).await.err().expect("cut at the deadline");
            let response = actix_web::dev::ServiceResponse::new(
                TestRequest::default().to_http_request(),
                error.as_response_error().error_response(),
            );
            assert_eq!(response.status(), 503);
            assert_eq!(response.headers().get("retry-after").and_then(|value| value.to_str().ok()), Some("2"));
            let body: serde_json::Value = read_body_json(response).await;
            assert_eq!(body["code"], "request_timeout", "{body}");
        }
        let write = try_call_service(&app, TestRequest::put().uri("/v1/admin/documents").to_request()).await;
        assert_eq!(write.map(|response| response.status()).ok(), Some(actix_web::http::StatusCode::OK), "never cut");
    }

    /// Regression (issue 59): a read cut at its deadline answered 503 without `x-request-id`
    /// (every other response carries one) and left no request line in the log: the deadline's
    /// answer is an error, and the request-id middleware passed errors through untouched.
    #[actix_web::test]
    async fn a_read_cut_at_its_deadline_carries_its_request_id() {
        let deadline = RequestDeadline { timeout: Duration::from_millis(50), retry_after_seconds: 2 };
        let slow = || async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            actix_web::HttpResponse::Ok().finish()
        };
        // The order of `app`: the deadline innermost, the request id around it.
        let app = init_service(
            App::new()
                .app_data(web::Data::new(deadline))
                .wrap(middleware::from_fn(request_deadline))
                .wrap(middleware::from_fn(super::super::request_id))
                .route("/v1/retrieve", web::post().to(slow)),
        )
        .await;
        let request = TestRequest::post().uri("/v1/retrieve").insert_header(("x-request-id", "cut-read-1"));
        let error = try_call_service(&app, request.to_request()).await.err().expect("cut at the deadline");
        let response = error.as_response_error().error_response();
        assert_eq!(response.status(), 503);
        assert_eq!(
            response.headers().get("x-request-id").and_then(|value| value.to_str().ok()),
            Some("cut-read-1"),
            "the 503 request_timeout names its request"
        );
        assert_eq!(response.headers().get("retry-after").and_then(|value| value.to_str().ok()), Some("2"));
    }

    #[test]
    fn the_deadline_cuts_reads_and_never_a_write_a_stream_or_an_answer() {
        for (method, route) in
            [(Method::GET, "/v1/documents/{doc_id}"), (Method::POST, "/v1/retrieve"), (Method::GET, "/readyz")]
        {
            assert!(deadline_applies(&method, route), "{method} {route}");
        }
        for (method, route) in [
            (Method::PUT, "/v1/admin/documents"),
            (Method::DELETE, "/v1/admin/documents/{doc_id}"),
            (Method::POST, "/v1/admin/acl/revoke"),
            (Method::POST, "/v1/reviews/{review_id}/verdicts"),
            (Method::POST, "/v1/answer"),
            (Method::POST, "/mcp"),
            (Method::GET, "/v1/replica/stream"),
            (Method::GET, "/v1/replica/snapshot/{snapshot_id}/{file}"),
        ] {
            assert!(!deadline_applies(&method, route), "{method} {route}");
        }
    }
}
