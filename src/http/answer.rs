//! `POST /v1/answer` and `POST /v1/retrieve`: extract, admit, call one function, map errors.
//!
//! An answer's admission slot travels with its work to the request actor and is freed when the
//! work ends; if this handler is dropped first (the client reset the connection), the work is
//! cancelled (see `crate::answer::pipeline`), so `max_in_flight` bounds running pipelines, not
//! waiting handlers.
//!
//! Streaming (`Accept: text/event-stream`, an extension): the same answer as server-sent events,
//! `stage` (`{"stage", "ms"}`) as each pipeline stage ends, then one `claim` (a claim with its
//! citations, as in the envelope) per claim of the final, validated answer, then `answer` (the
//! whole envelope, exactly the JSON response), or `error` (`{code, message}`) for a server fault
//! after the stream began. A comment line (`: keep-alive`) follows each second without an
//! event, so a client that closed its end normally (FIN, not RST) is noticed by the next failed
//! write. Claims are sent only once the answer's verdict is final (validation,
//! the authorization re-check and, under `fail_answer`, every other claim), so nothing
//! unvalidated or later withdrawn is ever streamed. Closing the stream cancels the work.

use std::collections::VecDeque;
use std::sync::Arc;

use actix_web::http::header;
use actix_web::web::Bytes;
use actix_web::{HttpMessage, HttpRequest, HttpResponse, web};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::answer::pipeline::response::AnswerResponse;
use crate::answer::{Admission, Answer, AnswerRequest, RequestActor, StageEvent};
use crate::domain::schema::optional_integer;

use super::auth::Authenticated;
use super::contract;
use super::contract::schema;
use super::error::{ApiError, EngineUnavailable, ErrorBody, JsonBodyRejected, Unauthenticated};
use super::{AppState, RequestId, json};

/// Body of `POST /v1/answer`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerBodyIn {
    /// The question: 1..=`server.max_question_chars` (2000 by default) characters after
    /// trimming (the pattern says so; surrounding whitespace is ignored).
    #[schema(min_length = 1, example = "How much are hotel stays reimbursed per night in London?")]
    pub question: String,
    /// Chunks in the context (clamped to 1..=`retrieval.top_k_max`).
    #[serde(default, deserialize_with = "optional_integer")]
    #[schema(schema_with = top_k_schema)]
    pub top_k: Option<u64>,
    /// Request deadline in ms (clamped to 1..=`answer.max_deadline_ms`).
    #[serde(default, deserialize_with = "optional_integer")]
    #[schema(schema_with = deadline_schema)]
    pub deadline_ms: Option<u64>,
}

/// Body of `POST /v1/retrieve`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetrieveBodyIn {
    /// Query text: 1..=`server.max_question_chars` characters after trimming.
    #[schema(min_length = 1, example = "hotel stays reimbursed")]
    pub query: String,
    /// Chunks wanted (clamped to 1..=`retrieval.top_k_max`).
    #[serde(default, deserialize_with = "optional_integer")]
    #[schema(schema_with = k_schema)]
    pub k: Option<u64>,
}

fn top_k_schema() -> utoipa::openapi::Object {
    schema::unsigned(0, true, "chunks in the context; any value is clamped to 1..=retrieval.top_k_max")
}

fn deadline_schema() -> utoipa::openapi::Object {
    schema::unsigned(0, true, "request deadline in ms; any value is clamped to 1..=answer.max_deadline_ms")
}

fn k_schema() -> utoipa::openapi::Object {
    schema::unsigned(0, true, "chunks wanted; any value is clamped to 1..=retrieval.top_k_max")
}

fn validated_text(text: &str, max_chars: usize, field: &str) -> Result<String, ApiError> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        let code = if field == "question" { "empty_question" } else { "empty_query" };
        return Err(ApiError::bad_request(code, format!("{field} must not be empty")));
    }
    if trimmed.chars().count() > max_chars {
        let code = if field == "question" { "question_too_long" } else { "query_too_long" };
        return Err(ApiError::bad_request(code, format!("{field} is longer than {max_chars} characters")));
    }
    Ok(trimmed.to_owned())
}

fn admit(state: &AppState) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
    Arc::clone(&state.in_flight)
        .try_acquire_owned()
        .map_err(|_| ApiError::overloaded(state.settings.server.retry_after_seconds))
}

fn request_id(request: &HttpRequest) -> String {
    request.extensions().get::<RequestId>().map(|id| id.0.clone()).unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
}

fn clamp_u64(value: Option<u64>) -> Option<usize> {
    value.map(|value| usize::try_from(value).unwrap_or(usize::MAX))
}

/// Answers a question with validated citations, or abstains. 400 codes: `empty_question`,
/// `question_too_long`.
#[utoipa::path(post, path = "/v1/answer", request_body = AnswerBodyIn,
    responses((status = 200, description = "answered or abstained; with `Accept: text/event-stream`, server-sent \
                events `stage` ({stage, ms}) as stages end, `claim` (a validated claim with its citations) per claim \
                of the final answer, then `answer` (this envelope) or `error` ({code, message})",
               content((contract::answer::AnswerResponse = "application/json"), (String = "text/event-stream"))),
              JsonBodyRejected, Unauthenticated, EngineUnavailable),
    security(("bearer" = [])))]
pub async fn answer(
    state: web::Data<AppState>,
    Authenticated(principal): Authenticated,
    request: HttpRequest,
    body: web::Json<AnswerBodyIn>,
) -> Result<HttpResponse, ApiError> {
    let body = body.into_inner();
    if !wants_event_stream(&request) {
        return Ok(json(&answer_once(&state, principal, request_id(&request), body).await?));
    }
    let (generation, message, waiting) = prepare_answer(&state, principal, request_id(&request), body)?;
    let (progress, events) = tokio::sync::mpsc::unbounded_channel();
    let message = Answer { progress: Some(progress), ..message };
    let reply = RequestActor::start(Arc::clone(&state.pipeline), message);
    let stream = EventStream { state, generation, waiting: Some(waiting), events, reply: Some(reply) };
    Ok(HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        // Never buffered by the compression middleware: events must leave as they happen.
        .insert_header((header::CONTENT_ENCODING, "identity"))
        .streaming(stream.into_stream()))
}

/// Checks freshness, the question and admission, in that order, and builds the request actor's
/// message: (the replica generation, the message, the sender whose drop cancels the work).
fn prepare_answer(
    state: &AppState,
    principal: crate::domain::Principal,
    request_id: String,
    body: AnswerBodyIn,
) -> Result<(crate::replication::status::Observed, Answer, tokio::sync::oneshot::Sender<()>), ApiError> {
    let generation = state.ensure_fresh(&principal)?;
    let question = validated_text(&body.question, state.settings.server.max_question_chars, "question")?;
    let admission = Admission::new(admit(state)?);
    let (waiting, caller_gone) = tokio::sync::oneshot::channel::<()>();
    let message = Answer {
        principal,
        request: AnswerRequest { question, top_k: clamp_u64(body.top_k), deadline_ms: body.deadline_ms },
        request_id,
        admission: Some(admission),
        caller_gone: Some(caller_gone),
        progress: None,
    };
    Ok((generation, message, waiting))
}

/// One answer as a single JSON envelope, for `principal`: what `POST /v1/answer` (without
/// `text/event-stream`) and the MCP tool `answer` ([`super::mcp`]) both call, so both share the
/// question limits, admission, deadlines, review routing and the replica freshness checks.
/// Dropping the returned future (the caller went away) cancels the work.
pub(crate) async fn answer_once(
    state: &AppState,
    principal: crate::domain::Principal,
    request_id: String,
    body: AnswerBodyIn,
) -> Result<contract::answer::AnswerResponse, ApiError> {
    let (generation, message, waiting) = prepare_answer(state, principal, request_id, body)?;
    // The actor of this request runs on this worker's arbiter (the thread that received it).
    let reply = RequestActor::start(Arc::clone(&state.pipeline), message).await;
    drop(waiting);
    let response = reply.map_err(|_| request_actor_gone())??;
    state.ensure_same_state(&generation)?;
    Ok(contract::answer::AnswerResponse::from(response))
}

/// Whether the request accepts `text/event-stream` (any `Accept` value naming it).
fn wants_event_stream(request: &HttpRequest) -> bool {
    request
        .headers()
        .get_all(header::ACCEPT)
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|media| media.split(';').next().is_some_and(|kind| kind.trim().eq_ignore_ascii_case("text/event-stream")))
}

/// One server-sent event (`data` is one line of JSON).
fn event(name: &str, data: &impl serde::Serialize) -> Bytes {
    let data = serde_json::to_string(data).unwrap_or_else(|_| "{}".to_owned());
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

type AnswerReply = tokio::sync::oneshot::Receiver<crate::answer::AnswerResult<AnswerResponse>>;

/// The request actor stopped without replying (its arbiter is shutting down).
fn request_actor_gone() -> ApiError {
    ApiError::unavailable("unavailable", "request actor unavailable")
}

/// Longest silence on an event stream before a `: keep-alive` comment is sent.
const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(1);

/// A streamed answer in flight: stage events until the reply, then claims and the envelope.
struct EventStream {
    state: web::Data<AppState>,
    generation: crate::replication::status::Observed,
    /// Dropped when the client goes away (the stream is dropped), which cancels the work.
    waiting: Option<tokio::sync::oneshot::Sender<()>>,
    events: tokio::sync::mpsc::UnboundedReceiver<StageEvent>,
    reply: Option<AnswerReply>,
}

impl EventStream {
    fn into_stream(self) -> impl futures::Stream<Item = Result<Bytes, actix_web::Error>> {
        futures::stream::unfold((self, VecDeque::new()), |(mut stream, mut pending)| async move {
            loop {
                if let Some(bytes) = pending.pop_front() {
                    return Some((Ok(bytes), (stream, pending)));
                }
                let reply = stream.reply.as_mut()?;
                tokio::select! {
                    biased;
                    Some(stage) = stream.events.recv() => pending.push_back(event("stage", &stage)),
                    // A client that closed its end normally (FIN) is noticed only when a write
                    // fails: a comment line (ignored by event-stream readers) after each silent
                    // second makes one, so a closed stream stops the work within two of them.
                    () = tokio::time::sleep(HEARTBEAT) => pending.push_back(Bytes::from_static(b": keep-alive\n\n")),
                    outcome = reply => {
                        stream.reply = None;
                        drop(stream.waiting.take());
                        while let Ok(stage) = stream.events.try_recv() {
                            pending.push_back(event("stage", &stage));
                        }
                        let outcome = outcome
                            .map_err(|_| request_actor_gone())
                            .and_then(|result| result.map_err(ApiError::from))
                            .and_then(|response| stream.state.ensure_same_state(&stream.generation).map(|()| response));
                        match outcome {
                            Ok(response) => {
                                let response = contract::answer::AnswerResponse::from(response);
                                for claim in response.answer.iter().flat_map(|answer| &answer.claims) {
                                    pending.push_back(event("claim", claim));
                                }
                                pending.push_back(event("answer", &response));
                            }
                            Err(error) => pending.push_back(event(
                                "error",
                                &ErrorBody { code: error.code.to_owned(), message: error.message },
                            )),
                        }
                    }
                }
            }
        })
    }
}

/// Returns the fused, authorized chunks for a query. 400 codes: `empty_query`, `query_too_long`.
#[utoipa::path(post, path = "/v1/retrieve", request_body = RetrieveBodyIn,
    responses((status = 200, description = "authorized chunks, best first", body = contract::answer::RetrieveResponse),
              JsonBodyRejected, Unauthenticated, EngineUnavailable),
    security(("bearer" = [])))]
pub async fn retrieve(
    state: web::Data<AppState>,
    Authenticated(principal): Authenticated,
    body: web::Json<RetrieveBodyIn>,
) -> Result<HttpResponse, ApiError> {
    Ok(json(&retrieve_once(&state, &principal, body.into_inner()).await?))
}

/// The authorized chunks of one query, for `principal`: what `POST /v1/retrieve` and the MCP
/// tool `retrieve` ([`super::mcp`]) both call (same limits, admission and freshness checks).
pub(crate) async fn retrieve_once(
    state: &AppState,
    principal: &crate::domain::Principal,
    body: RetrieveBodyIn,
) -> Result<contract::answer::RetrieveResponse, ApiError> {
    let generation = state.ensure_fresh(principal)?;
    let query = validated_text(&body.query, state.settings.server.max_question_chars, "query")?;
    let _permit = admit(state)?;
    let response = state.pipeline.retrieve(principal, &query, clamp_u64(body.k)).await?;
    state.ensure_same_state(&generation)?;
    Ok(contract::answer::RetrieveResponse::from(response))
}
