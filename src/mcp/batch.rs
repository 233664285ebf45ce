//! JSON-RPC batches (2025-03-26 only, [`super::era::detect_batch`]): at most `MAX_BATCH` messages answered
//! in one response, in order.
//!
//! Each message is a request of its own as far as limits and the audit log are concerned: it takes a
//! rate-limit token from the key's and the agent's buckets (`Tokens`; the first message has the HTTP
//! request's), and it gets an audit record of its own ([`Item`]) with its method, target, outcome, time,
//! latency and bytes. A batch refused as a whole (too many messages, wrong era, a bad session or `Accept`)
//! is one answer and one record.
//!
//! [`super::era::detect_batch`]: crate::mcp::era::detect_batch
//! [`Item`]: crate::audit::request::Item

use axum::http::HeaderMap;
use axum::response::Response;
use tracing::Instrument as _;

use super::dispatch::{self, Context, Method};
use super::era::{self, Era};
use super::error::McpError;
use super::headers::reply_format;
use super::jsonrpc::{self, Malformed, Message};
use super::span;
use super::transport::{Admitted, accepted, rate_limit, reply};
use crate::audit::request::Item;
use crate::state::AppState;

/// Messages one batch may hold; a larger batch is -32600 (a batch is answered in one response).
const MAX_BATCH: usize = 100;

/// Answers a batch: every request in one JSON array, in order; notifications and responses get no entry; a
/// batch of only those is 202. Each message takes a rate-limit token ([`Tokens`]). Returns the answer and the
/// audit item of each message handled (none when the batch is refused as a whole).
pub(super) async fn answer(
    state: &AppState,
    admitted: Admitted,
    headers: &HeaderMap,
    messages: Vec<Result<Message, Malformed>>,
) -> (Response, Vec<Item>) {
    let whole = |error: McpError| (error.into_http(None), Vec::new());
    if messages.len() > MAX_BATCH {
        return whole(McpError::BatchTooLarge { max: MAX_BATCH });
    }
    let era = match era::detect_batch(headers, &messages) {
        Ok(era) => era,
        Err(error) => return whole(error),
    };
    let format = match reply_format(headers) {
        Ok(format) => format,
        Err(error) => return whole(error),
    };
    let session = match state.sessions.resolve(&admitted.session, &admitted.agent.id, &admitted.key).await {
        Ok(session) => session,
        Err(error) => return whole(error),
    };
    let ctx = admitted.context(state, session, era);
    let mut tokens = Tokens { state, admitted: &admitted, is_first: true, refusal: None };
    let mut answers = Vec::new();
    let mut items = Vec::with_capacity(messages.len());
    for message in messages {
        let (span, parent) = match &message {
            Ok(Message::Request(call) | Message::Notification(call)) => span::of_call(call, "legacy"),
            Ok(Message::Response) | Err(_) => (tracing::Span::none(), None),
        };
        let item = Item::start(message.as_ref().ok().and_then(Message::call), parent.as_ref());
        let (answer, code) = match tokens.take().await {
            Ok(()) => handle(&ctx, era, message).instrument(span).await,
            // A refused message is not handled: a request is answered with the refusal, anything else dropped.
            Err(error) => {
                let answer = match &message {
                    Ok(Message::Request(call)) => call.id.as_ref().map(|id| jsonrpc::failure(Some(id), &error)),
                    Err(Malformed { id, .. }) => Some(jsonrpc::failure(id.as_ref(), &error)),
                    Ok(Message::Notification(_) | Message::Response) => None,
                };
                (answer, Some(error.code()))
            }
        };
        items.push(item.finish(code, answer.as_deref()));
        answers.extend(answer);
    }
    if answers.is_empty() {
        return (accepted(), items);
    }
    let mut body = Vec::with_capacity(answers.iter().map(Vec::len).sum::<usize>() + answers.len() + 1);
    body.push(b'[');
    for (index, answer) in answers.iter().enumerate() {
        if index > 0 {
            body.push(b',');
        }
        body.extend_from_slice(answer);
    }
    body.push(b']');
    (reply(format, body), items)
}

/// The answer to one message of a batch (none for a notification or a client's response), and its error
/// code.
async fn handle(ctx: &Context<'_>, era: Era, message: Result<Message, Malformed>) -> (Option<Vec<u8>>, Option<i32>) {
    let call = match message {
        Err(Malformed { id, error }) => return (Some(jsonrpc::failure(id.as_ref(), &error)), Some(error.code())),
        Ok(Message::Response) => return (None, None),
        Ok(Message::Notification(call)) => {
            dispatch::notify(ctx, &call);
            return (None, None);
        }
        Ok(Message::Request(call)) => call,
    };
    let Some(id) = call.id.as_ref() else { return (None, None) };
    let result = if Method::lookup(&call.method, era, false) == Some(Method::Initialize) {
        Err(McpError::InvalidRequest("initialize must not be part of a batch".to_owned()))
    } else {
        dispatch::call(ctx, &call).await
    };
    match result {
        Ok(result) => (Some(jsonrpc::success(id, &result)), None),
        Err(error) => {
            // One answer holds every item: a refused item is counted here.
            if let Some(limit) = error.limit() {
                ctx.state.metrics.refused(limit);
            }
            (Some(jsonrpc::failure(Some(id), &error)), Some(error.code()))
        }
    }
}

/// The rate-limit tokens of a batch's messages: the first message's is the one its HTTP request took
/// ([`admit`]); every further message takes one more from the key's bucket and the agent's, so that a batch
/// of `n` messages costs what `n` requests cost. The messages are served in order while tokens last: from the
/// first refused one on, every message of the batch is refused with the same error (-31429 with
/// `data.retryAfterMs`, or -31503 when a shared bucket cannot be asked), counted like a refused request.
struct Tokens<'a> {
    state: &'a AppState,
    admitted: &'a Admitted,
    is_first: bool,
    /// The first refusal, and the policy that refused (for the refusal metric).
    refusal: Option<(McpError, Option<&'static str>)>,
}

impl Tokens<'_> {
    async fn take(&mut self) -> Result<(), McpError> {
        if std::mem::take(&mut self.is_first) {
            return Ok(());
        }
        if let Some((error, scope)) = &self.refusal {
            if let Some(scope) = scope {
                self.state.metrics.rate_limited.get_or_create(&crate::metrics::ScopeLabels { scope }).inc();
            }
            return Err(error.clone());
        }
        let Admitted { key, agent, slot, .. } = self.admitted;
        rate_limit(self.state, slot.as_ref(), key, agent).await.map_err(|limited| {
            limited.log_cause();
            self.refusal = Some((limited.error.clone(), limited.policy));
            limited.error
        })
    }
}
