//! The request actor: one actor per answer, started by the HTTP handler on the worker thread that
//! received the request. It owns that request (principal, validated question, admission slot,
//! cancellation signal, progress channel) and the run of the pipeline over it, replies once and
//! stops. Answers thus run on every HTTP worker at once; none waits behind another tenant's slow
//! generation on a shared actor's thread.
//!
//! Admission: the HTTP layer hands each [`Answer`] its slot of `server.max_in_flight` (an
//! [`Admission`]) and the actor keeps it inside the future that does the work, so the slot is
//! free only when the work has ended, however the caller fared. When the caller goes away (its
//! HTTP handler future is dropped, e.g. on a connection reset), the work future is dropped
//! (generator call included) and its slot freed then: an abandoned request neither keeps running
//! nor lets a new one run in its place before it stopped. Work already handed to other threads
//! (a shard search, an embedding batch) finishes there; it is bounded by those pools.
//!
//! The actor's handler holds no logic of its own: it forwards to [`run_answer`], a plain async
//! function that tests call directly.

use std::sync::Arc;

use actix::{Actor, ActorContext, ActorFutureExt, AsyncContext, Context, WrapFuture};
use tokio::sync::{OwnedSemaphorePermit, oneshot};

use super::response::AnswerResponse;
use super::{AnswerPipeline, AnswerRequest, StageEvents};
use crate::answer::{AnswerError, AnswerResult};
use crate::domain::Principal;

/// A slot of the in-flight limit (`server.max_in_flight`), held by the work it admitted.
/// Dropping it frees the slot; while held it counts in `warrant_in_flight_requests`.
#[derive(Debug)]
pub struct Admission {
    _permit: OwnedSemaphorePermit,
}

impl Admission {
    /// Holds `permit` (a slot of the admission semaphore) until dropped.
    pub fn new(permit: OwnedSemaphorePermit) -> Self {
        metrics::gauge!("warrant_in_flight_requests").increment(1.0);
        Self { _permit: permit }
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        metrics::gauge!("warrant_in_flight_requests").decrement(1.0);
    }
}

/// One question for one principal, with what the work owns while it runs.
pub struct Answer {
    /// The verified caller.
    pub principal: Principal,
    /// The validated request.
    pub request: AnswerRequest,
    /// Request id.
    pub request_id: String,
    /// The caller's admission slot: held by the work until it ends (completed or cancelled).
    pub admission: Option<Admission>,
    /// Resolves (sent or dropped) when the caller stops waiting; the work is then cancelled and
    /// answers [`AnswerError::Cancelled`]. `None`: the work always runs to its end.
    pub caller_gone: Option<oneshot::Receiver<()>>,
    /// Receives each stage as it ends (streamed answers), if given.
    pub progress: Option<StageEvents>,
}

/// Runs `answer` through `pipeline` to its end or until its caller goes away, then frees its
/// admission slot.
pub async fn run_answer(pipeline: Arc<AnswerPipeline>, answer: Answer) -> AnswerResult<AnswerResponse> {
    let Answer { principal, request, request_id, admission, caller_gone, progress } = answer;
    let work = pipeline.answer_with_progress(&principal, request, request_id, progress);
    let result = match caller_gone {
        None => work.await,
        Some(caller_gone) => {
            tokio::select! {
                biased;
                result = work => result,
                _ = caller_gone => {
                    metrics::counter!("warrant_answers_cancelled_total").increment(1);
                    Err(AnswerError::Cancelled)
                }
            }
        }
    };
    // The work (and everything it awaited) has ended or been dropped: free the slot.
    drop(admission);
    result
}

/// The actor of one answer: started with its request, it runs it once, replies and stops.
pub struct RequestActor {
    pipeline: Arc<AnswerPipeline>,
    answer: Option<Answer>,
    reply: Option<oneshot::Sender<AnswerResult<AnswerResponse>>>,
}

impl RequestActor {
    /// Starts the actor of `answer` on the current thread's arbiter (the HTTP worker that
    /// received the request); the receiver resolves with its result. Dropping the receiver
    /// does not stop the work: [`Answer::caller_gone`] does.
    pub fn start(pipeline: Arc<AnswerPipeline>, answer: Answer) -> oneshot::Receiver<AnswerResult<AnswerResponse>> {
        let (reply, receiver) = oneshot::channel();
        Actor::start(Self { pipeline, answer: Some(answer), reply: Some(reply) });
        receiver
    }
}

impl Actor for RequestActor {
    type Context = Context<Self>;

    fn started(&mut self, context: &mut Context<Self>) {
        let Some(answer) = self.answer.take() else {
            context.stop();
            return;
        };
        let work = run_answer(Arc::clone(&self.pipeline), answer).into_actor(self).map(|result, actor, context| {
            if let Some(reply) = actor.reply.take() {
                // The caller may have gone; its result then has nobody to go to.
                let _ = reply.send(result);
            }
            context.stop();
        });
        context.spawn(work);
    }
}
