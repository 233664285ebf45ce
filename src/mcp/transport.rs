//! The axum handlers of `/{agent_id}/mcp` (Streamable HTTP), with the checks in the contract's order:
//! `Host`/`Origin` (403) → key present and valid (401) → agent exists (404) → key of that agent with scope
//! `mcp` (403) → rate limit (429, [`crate::guard`]) → body size (413) → JSON (400/-32700) → JSON-RPC shape
//! (400/-32600) → era checks ([`super::era`]) → session (legacy, [`super::session`]) → method
//! ([`super::dispatch`]).
//!
//! A legacy `initialize` that succeeds issues a session (`Mcp-Session-Id`); a modern
//! `subscriptions/listen` is answered with a stream ([`super::stream::listen`]). `GET` and `DELETE` are in
//! [`super::stream::standalone`].
//!
//! Unauthenticated callers never learn whether an agent exists, and every error raised before the body is
//! parsed carries `id: null`.
//!
//! [`super::era`]: crate::mcp::era
//! [`super::session`]: crate::mcp::session
//! [`super::dispatch`]: crate::mcp::dispatch
//! [`super::stream::listen`]: crate::mcp::stream::listen
//! [`super::stream::standalone`]: crate::mcp::stream::standalone

use std::sync::Arc;

use axum::body::{Body as HttpBody, Bytes};
use axum::extract::Request;
use axum::http::request::Parts;
use axum::http::{self, HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::Value;
use serde_json::value::RawValue;
use tracing::Instrument as _;

use super::dispatch::{self, Context, Method};
use super::era::{self, Era};
use super::error::McpError;
use super::headers::{ReplyFormat, accepts_event_stream, reply_format};
use super::jsonrpc::{self, Body, Malformed, Message, RequestId};
use super::origin;
use super::session::SessionHeader;
use super::span;
use super::stream::sse;
use super::types::header as header_name;
use crate::audit::request::{Answered, ErrorCode, Trail};
use crate::domain::model::{Agent, KeyRecord};
use crate::domain::session::Session;
use crate::domain::{AgentId, Scope};
use crate::guard::Bucketed;
use crate::guard::{CredentialRefused, RateLimitSlot, presents_credential};
use crate::http::auth::{Challenge, is_key_of};
use crate::metrics::{Refused, TokenOutcome};
use crate::oauth::{self, AuthError, Authenticated, Presented};
use crate::registry::cache::AgentLink;
use crate::state::AppState;

/// A request that passed the gate: the agent it is for, and the key it came with (never logged).
pub(crate) struct Admitted {
    pub agent: Arc<Bucketed<Agent>>,
    pub key: Arc<Bucketed<KeyRecord>>,
    /// Where the rate-limit fields of the answer are left (a costly method's refusal replaces them).
    pub slot: Option<RateLimitSlot>,
    /// The agent's row and registry as found for this request.
    pub link: Option<AgentLink>,
    /// The request's `Mcp-Session-Id`, digested once for a legacy session's lookup and the audit record.
    pub session: SessionHeader,
}

impl Admitted {
    /// The context a method of this request applies against, with its legacy `session` and its `era`.
    pub(super) fn context<'a>(&'a self, state: &'a AppState, session: Option<Arc<Session>>, era: Era) -> Context<'a> {
        Context {
            state,
            agent: self.agent.clone(),
            key: &self.key,
            session,
            era,
            slot: self.slot.as_ref(),
            link: self.link.as_ref(),
        }
    }
}

/// A request refused before its body was read, and its trail when it is refused after the key and the agent
/// are known (another agent's key, no scope `mcp`, the rate limit): such a refusal is audited. With OAuth on
/// for the agent, an authentication refusal carries the OAuth challenge instead of the plain one.
pub(super) struct Refusal {
    error: McpError,
    trail: Option<Trail>,
    challenge: Option<Challenge>,
    /// Whether the request presented a credential: a 401 that refused one is marked [`CredentialRefused`] (the
    /// failed-authentication guard counts it; on any other status the mark is not looked at).
    refused: bool,
}

impl Refusal {
    pub(super) fn into_http(self) -> Answered {
        let mut response = self.error.into_http(None);
        if let Some(challenge) = self.challenge {
            challenge.put_on(response.headers_mut());
        }
        if self.refused {
            response.extensions_mut().insert(CredentialRefused);
        }
        Answered { response, trail: self.trail }
    }
}

impl From<McpError> for Refusal {
    fn from(error: McpError) -> Self {
        Self { error, trail: None, challenge: None, refused: false }
    }
}

/// Every request to `/{agent_id}/mcp`: CORS ([`crate::http::cors`]: a preflight is answered here) around the
/// failed-authentication guard and the `RateLimit*` fields ([`crate::guard::mcp_gate`]) around the audit
/// ([`crate::audit::request::record`]) around the gate (`admit`) and the method's handler: `post`,
/// `super::stream::standalone::get` (`HEAD` too) and `super::stream::standalone::delete`; any other
/// method is 405.
pub async fn endpoint(state: AppState, path_agent: Option<AgentId>, request: Request) -> Response {
    let cors = crate::http::cors::Cors::of(&state, &request);
    if let Some(preflight) = cors.preflight() {
        return preflight;
    }
    let response = crate::guard::mcp_gate(&state, request, |request, slot| {
        crate::audit::request::record(&state, request, |request| async {
            let (parts, body) = request.into_parts();
            // What a refusal at the gate is audited as (a POST's method is only known from its body).
            let audited_as = match parts.method {
                http::Method::POST => UNREAD,
                http::Method::GET | http::Method::HEAD => "GET",
                http::Method::DELETE => "DELETE",
                _ => return method_not_allowed().await.into(),
            };
            let admitted = match admit(&state, path_agent, &parts, audited_as, slot).await {
                Ok(admitted) => admitted,
                Err(refusal) => return refusal.into_http(),
            };
            let headers = &parts.headers;
            // The rarer methods' futures are boxed, so that they do not make every request's larger. A POST
            // names its agent on the span with its method ([`post`]).
            match parts.method {
                http::Method::POST => post(&state, admitted, headers, body).await,
                http::Method::DELETE => {
                    span::record_agent(admitted.agent.id.as_str());
                    Box::pin(super::stream::standalone::delete(&state, &admitted, headers)).await
                }
                // `GET` or `HEAD`.
                _ => {
                    span::record_agent(admitted.agent.id.as_str());
                    Box::pin(super::stream::standalone::get(&state, &admitted, headers)).await
                }
            }
        })
    })
    .await;
    cors.finish(response)
}

/// `POST /{agent_id}/mcp` once [`admit`]ted: one JSON-RPC message, or a batch where 2025-03-26 allows it.
/// The request span is given the agent with the message's method and era, or alone ([`AgentOnDrop`]) for a
/// body that is not a message and for a request that ends before its message is known.
pub(super) async fn post(state: &AppState, admitted: Admitted, headers: &HeaderMap, body: HttpBody) -> Answered {
    let naming = AgentOnDrop(Some(admitted.agent.id.as_str()));
    let unparsed = |admitted: &Admitted| Trail::new(admitted, "-", "");
    let bytes = match read_body(body, headers, state.config.limits.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(error) => return unparsed(&admitted).attach(error.into_http(None)),
    };
    // Nesting is part of "JSON" in the order of checks: counted over the bytes before they are parsed. A
    // key twice in one object is part of the JSON-RPC shape: refused once the body parsed.
    let max_depth = state.config.limits.max_json_depth;
    let shape = crate::http::json_scan::scan(&bytes, max_depth);
    if shape.is_too_deep {
        return unparsed(&admitted).attach(McpError::JsonTooDeep { limit: max_depth }.into_http(None));
    }
    let parsed = jsonrpc::parse(&bytes).and_then(|body| match shape.duplicate_key {
        Some(key) => jsonrpc::refuse_duplicate_key(body, &key),
        None => Ok(body),
    });
    match parsed {
        Ok(Body::Single(message)) => {
            // The era is detected once, here: the trail and span need it, and `single` checks it.
            let detected = message.as_ref().ok().map(|m| era::detect(headers, m));
            let is_modern = matches!(&detected, Some(Ok(era)) if era.is_modern());
            let era_name = if is_modern { "modern" } else { "legacy" };
            let (trail, span) = match &message {
                Ok(Message::Request(call) | Message::Notification(call)) => {
                    naming.disarm();
                    span::record_message(admitted.agent.id.as_str(), Method::label(&call.method), era_name);
                    let (span, parent) = span::of_call(call, era_name);
                    (Trail::of_call(&admitted, call).traced(parent.as_ref()), span)
                }
                Ok(Message::Response) | Err(_) => {
                    drop(naming);
                    (unparsed(&admitted), tracing::Span::none())
                }
            };
            let trail = trail.modern(is_modern);
            trail.attach(single(state, admitted, headers, message, detected).instrument(span).await)
        }
        Ok(Body::Batch(messages)) => {
            naming.disarm();
            span::record_message(admitted.agent.id.as_str(), "batch", "legacy");
            // The target of a batch refused as a whole (handled, it is a record per message).
            let methods: Vec<&str> =
                messages.iter().filter_map(|m| m.as_ref().ok()).filter_map(Message::method).collect();
            let trail = Trail::new(&admitted, "batch", &methods.join(","));
            // Boxed: batches are rare (2025-03-26 only), and their future would make every request's larger.
            let (response, items) = Box::pin(super::batch::answer(state, admitted, headers, messages)).await;
            trail.with_items(items).attach(response)
        }
        Err(error) => unparsed(&admitted).attach(error.into_http(None)),
    }
}

/// Names the admitted agent on the request span when dropped, unless disarmed because the message's record
/// named it with the method ([`span::record_message`]): a POST whose body is refused, or that times out or
/// panics before its message is known, still has every later line of the request name its agent.
struct AgentOnDrop<'a>(Option<&'a str>);

impl AgentOnDrop<'_> {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for AgentOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(agent) = self.0 {
            span::record_agent(agent);
        }
    }
}

/// The method a refusal before the body is read is audited with (for a POST; `GET` and `DELETE` are
/// themselves).
const UNREAD: &str = "-";

/// The checks before the body is read; a refusal after the key and the agent are known is audited as a
/// request to `method` ([`Refusal`]).
///
/// `path_agent` is the path's agent as far as its syntax goes (whether it exists is checked after the
/// credential): an access token must be for it, and its metadata document is named in the challenge.
pub(super) async fn admit(
    state: &AppState,
    path_agent: Option<AgentId>,
    parts: &Parts,
    method: &str,
    slot: RateLimitSlot,
) -> Result<Admitted, Refusal> {
    let headers = &parts.headers;
    origin::check(headers, &parts.uri, &state.config.mcp)?;
    let oauth = path_agent.as_ref().filter(|agent| state.oauth.is_on_for(agent.as_str()));
    // The OAuth challenge for a refusal with this error code (none while OAuth is off for the agent).
    let challenge = |error: Option<&'static str>, description: Option<String>| {
        oauth.map(|agent| Challenge {
            resource_metadata: Some(state.oauth.metadata_url(agent.as_str())),
            scope: Some(oauth::SCOPE),
            error,
            description,
        })
    };
    let presented = Presented::of(headers, oauth.is_some());
    let authenticated = state.oauth.authenticate(&state.keys, presented, path_agent.as_ref()).await;
    if matches!(presented, Presented::Token(_)) {
        let outcome = match &authenticated {
            Ok(_) => TokenOutcome::Accepted,
            Err(AuthError::Forbidden(_)) => TokenOutcome::Forbidden,
            Err(AuthError::Unavailable(_)) => TokenOutcome::Unavailable,
            Err(_) => TokenOutcome::Invalid,
        };
        state.metrics.oauth_tokens.get_or_create(&crate::metrics::OutcomeLabels { outcome: outcome.as_str() }).inc();
    }
    let Authenticated { key, is_token, link, digest } = match authenticated {
        Ok(authenticated) => authenticated,
        Err(error) => {
            let presented = presented.text();
            let (error, code) = match error {
                _ if presented.is_some_and(|token| state.operator.is_valid(token)) => {
                    (McpError::OperatorToken, Some("invalid_token"))
                }
                AuthError::Missing => (McpError::Unauthenticated, None),
                AuthError::Key => (McpError::Unauthenticated, Some("invalid_token")),
                AuthError::Token(why) => (McpError::InvalidToken(why), Some("invalid_token")),
                AuthError::Forbidden(why) => (McpError::InsufficientScope(why), Some("insufficient_scope")),
                AuthError::Unavailable(why) => {
                    tracing::warn!(error = %why, "credential lookup failed");
                    return Err(McpError::Unavailable.into());
                }
            };
            let challenge = challenge(code, code.map(|_| error.to_string()));
            let refused = presents_credential(headers);
            return Err(Refusal { error, trail: None, challenge, refused });
        }
    };
    let agent_id = path_agent.as_ref().ok_or(McpError::UnknownAgent)?;
    // The agent through the key's link while it holds, else looked up; only the key's own agent is linked
    // (a request for another is refused below, and makes it no registry).
    let found = match link.filter(|link| state.registry.holds(link, agent_id)) {
        Some(link) => Ok(Some((link.agent().clone(), Some(link)))),
        None if is_key_of(&key, agent_id) => state.registry.link(agent_id).await.map(|found| {
            found.map(|link| {
                if let Some(digest) = &digest {
                    state.keys.remember(digest, link.clone());
                }
                (link.agent().clone(), Some(link))
            })
        }),
        None => state.registry.agent(agent_id).await.map(|found| found.map(|agent| (agent, None))),
    };
    let (agent, link) = match found {
        Ok(Some(found)) => found,
        Ok(None) => return Err(McpError::UnknownAgent.into()),
        Err(error) => {
            tracing::warn!(%error, "agent lookup failed");
            return Err(McpError::Unavailable.into());
        }
    };
    // From here on the refusal belongs to the agent's log: the path's agent, and for another agent's key the
    // key's own agent as the target. The request span is given the agent by the refusal, or once admitted by
    // the method's handler ([`endpoint`]).
    let refused = |error: McpError, target: &str| {
        span::record_agent(agent.id.as_str());
        Refusal {
            challenge: None,
            error,
            trail: Some(Trail::of(&agent, &key, headers, method, target)),
            refused: false,
        }
    };
    if !is_key_of(&key, &agent.id) {
        let target = format!("agent:{}", key.agent_id);
        return Err(refused(McpError::Forbidden("the key belongs to another agent"), &target));
    }
    if !key.has_scope(Scope::Mcp) {
        let error = McpError::Forbidden("the key does not have scope mcp");
        let challenge = if is_token { challenge(Some("insufficient_scope"), Some(error.to_string())) } else { None };
        return Err(Refusal { challenge, ..refused(error, "") });
    }
    if let Err(limited) = rate_limit(state, Some(&slot), &key, &agent).await {
        let refusal = refused(limited.error.clone(), "");
        limited.log_cause();
        return Err(refusal);
    }
    Ok(Admitted { agent, key, slot: Some(slot), link, session: SessionHeader::of(headers) })
}

/// One token from the key's bucket and from the agent's, which all its keys share ([`crate::guard`]): for
/// each HTTP request, and for each further message of a batch. Refusal is `McpError::RateLimited` (429 +
/// `Retry-After`, -31429) with the refusing policy, a shared bucket the database cannot answer for
/// `McpError::Unavailable` (503). Allowed or not, the `RateLimit*` fields are left in `slot` for the guard's
/// middleware to put on the answer.
pub(super) async fn rate_limit(
    state: &AppState,
    slot: Option<&RateLimitSlot>,
    key: &Bucketed<KeyRecord>,
    agent: &Bucketed<Agent>,
) -> Result<(), Limited> {
    let verdict = state.guard.mcp(key, agent, state.store.as_ref()).await.map_err(|error| Limited {
        error: McpError::Unavailable,
        policy: None,
        cause: Some(error),
    })?;
    let policy = verdict.refused_by;
    verdict.settle_in(slot, &state.metrics).map_err(|wait| Limited {
        error: McpError::RateLimited { retry_after_ms: crate::guard::millis_up(wait) },
        policy,
        cause: None,
    })
}

/// A request [`rate_limit`] refused: the error, the refusing policy, and the database's failure when a
/// shared bucket could not be answered for, which the caller logs once the request span names the agent.
pub(super) struct Limited {
    pub(super) error: McpError,
    pub(super) policy: Option<&'static str>,
    cause: Option<crate::store::StoreError>,
}

impl Limited {
    /// Logs the database's failure, if that is why the request was refused.
    pub(super) fn log_cause(&self) {
        if let Some(error) = &self.cause {
            tracing::warn!(%error, "shared rate limit unavailable");
        }
    }
}

/// Any other HTTP method on `/{agent_id}/mcp`: 405 with `Allow` and a JSON-RPC error body, so that a curl user
/// sees why.
pub async fn method_not_allowed() -> Response {
    let mut response =
        McpError::InvalidRequest("this endpoint serves POST, and GET and DELETE for legacy sessions".to_owned())
            .into_http(None);
    *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
    response
}

/// Reads the body, refusing it with 413 as soon as it is known to exceed `limit`.
async fn read_body(body: HttpBody, headers: &HeaderMap, limit: usize) -> Result<Vec<u8>, McpError> {
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(McpError::BodyTooLarge { limit });
    }
    let mut bytes = Vec::with_capacity(declared.map_or(0, |length| length as usize));
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|error| McpError::InvalidRequest(format!("could not read the body: {error}")))?;
        if bytes.len() + chunk.len() > limit {
            return Err(McpError::BodyTooLarge { limit });
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

async fn single(
    state: &AppState,
    admitted: Admitted,
    headers: &HeaderMap,
    message: Result<Message, Malformed>,
    detected: Option<Result<Era, McpError>>,
) -> Response {
    let message = match message {
        Ok(message) => message,
        Err(Malformed { id, error }) => return error.into_http(id.as_ref()),
    };
    let era = match detected.unwrap_or_else(|| era::detect(headers, &message)) {
        Ok(era) => era,
        Err(error) => return error.into_http(message.id()),
    };
    let (era, session) = match legacy_session(state, &admitted, headers, era).await {
        Ok(checked) => checked,
        Err(error) => return error.into_http(message.id()),
    };
    let ctx = admitted.context(state, session, era);
    let call = match message {
        Message::Response => return accepted(),
        Message::Notification(call) => {
            dispatch::notify(&ctx, &call);
            return accepted();
        }
        Message::Request(call) => call,
    };
    let Some(id) = call.id.as_ref() else {
        return McpError::InvalidRequest("a request needs an id".to_owned()).into_http(None);
    };
    let method = Method::lookup(&call.method, era, false);
    if method == Some(Method::Listen) {
        return Box::pin(listen(state, &admitted, headers, id, call.params)).await;
    }
    let format = match reply_format(headers) {
        Ok(format) => format,
        Err(error) => return error.into_http(Some(id)),
    };
    match dispatch::call(&ctx, &call).await {
        Ok(result) if method == Some(Method::Initialize) => {
            let mut response = reply(format, jsonrpc::success(id, &result));
            let Some(result) = result.whole() else { return McpError::Internal.into_http(Some(id)) };
            match Box::pin(issue_session(state, &admitted, result)).await {
                Ok(session_id) => {
                    response.headers_mut().insert(header_name::SESSION_ID, session_id);
                    response
                }
                Err(error) => error.into_http(Some(id)),
            }
        }
        Ok(result) => match (format, jsonrpc::success_in_pieces(id, &result)) {
            (ReplyFormat::Json, Some(pieces)) => json_reply(HttpBody::new(Pieces::new(pieces))),
            _ => reply(format, jsonrpc::success(id, &result)),
        },
        Err(error) if error.status() == StatusCode::OK => {
            failed(reply(format, jsonrpc::failure(Some(id), &error)), &error)
        }
        Err(error) => error.into_http(Some(id)),
    }
}

/// Marks an answer that carries a JSON-RPC error (with HTTP 200) for the audit record, and for the limit
/// counter when a limit refused it.
fn failed(mut response: Response, error: &McpError) -> Response {
    response.extensions_mut().insert(ErrorCode(error.code()));
    if let Some(limit) = error.limit() {
        response.extensions_mut().insert(Refused(limit));
    }
    response
}

/// The legacy session named by `Mcp-Session-Id`, checked (404/-31410 when it cannot be used); without a
/// protocol header, the session's negotiated version is the request's. The modern wire has no sessions
/// and ignores the header.
async fn legacy_session(
    state: &AppState,
    admitted: &Admitted,
    headers: &HeaderMap,
    era: Era,
) -> Result<(Era, Option<Arc<Session>>), McpError> {
    if era.is_modern() {
        return Ok((era, None));
    }
    let session = state.sessions.resolve(&admitted.session, &admitted.agent.id, &admitted.key).await?;
    let era = match &session {
        Some(session) if !headers.contains_key(&header_name::PROTOCOL_VERSION) => {
            era::of_session(&session.protocol_version).unwrap_or(era)
        }
        _ => era,
    };
    Ok((era, session))
}

/// Stores a session for a successful `initialize`, at the version its result negotiated; the value of the
/// `Mcp-Session-Id` response header.
async fn issue_session(state: &AppState, admitted: &Admitted, result: &RawValue) -> Result<HeaderValue, McpError> {
    let negotiated: Value = serde_json::from_str(result.get()).map_err(|_| McpError::Internal)?;
    let version = negotiated["protocolVersion"].as_str().ok_or(McpError::Internal)?;
    let token = state.sessions.create(&admitted.agent.id, &admitted.key, version).await?;
    HeaderValue::from_str(token.expose()).map_err(|_| McpError::Internal)
}

/// `subscriptions/listen`: a stream when the client accepts one (406 otherwise); errors the method raises
/// on valid JSON-RPC (bad filter) answer HTTP 200 as JSON.
async fn listen(
    state: &AppState,
    admitted: &Admitted,
    headers: &HeaderMap,
    id: &RequestId,
    params: Option<Value>,
) -> Response {
    if !accepts_event_stream(headers) {
        return McpError::NotAcceptable.into_http(Some(id));
    }
    match super::stream::listen::open(state, admitted, id, params).await {
        Ok(body) => (StatusCode::OK, sse::headers(), body).into_response(),
        Err(error) if error.status() == StatusCode::OK => {
            failed(reply(ReplyFormat::Json, jsonrpc::failure(Some(id), &error)), &error)
        }
        Err(error) => error.into_http(Some(id)),
    }
}

/// 202 Accepted, no body: the answer to notifications and client responses.
pub(super) fn accepted() -> Response {
    StatusCode::ACCEPTED.into_response()
}

/// A 200 answer in the negotiated format: a JSON body, or an event stream whose one event is the answer.
pub(super) fn reply(format: ReplyFormat, json: Vec<u8>) -> Response {
    match format {
        ReplyFormat::Json => json_reply(HttpBody::from(json)),
        ReplyFormat::EventStream => (StatusCode::OK, sse::headers(), sse::message(&json)).into_response(),
    }
}

/// A 200 answer with a JSON body. Its header map is made with room for the fields the answer gets on its way
/// out (the rate limits and their scope, `Vary`, the request id, CORS), so that it is not grown and rehashed
/// on the way.
fn json_reply(body: HttpBody) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.reserve(ANSWER_FIELDS);
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// Room for the header fields of an MCP answer.
const ANSWER_FIELDS: usize = 12;

/// A body of a few pieces of known length (`Content-Length`), each handed to the connection as it is: hyper
/// writes them to the socket in one vectored write, so none is copied into a buffer first.
struct Pieces {
    pieces: std::array::IntoIter<Bytes, 3>,
    left: u64,
}

impl Pieces {
    fn new(pieces: [Bytes; 3]) -> Self {
        let left = pieces.iter().map(|piece| piece.len() as u64).sum();
        Self { pieces: pieces.into_iter(), left }
    }
}

impl http_body::Body for Pieces {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let piece = self.pieces.by_ref().find(|piece| !piece.is_empty());
        if let Some(piece) = &piece {
            self.left -= piece.len() as u64;
        }
        std::task::Poll::Ready(piece.map(|piece| Ok(http_body::Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.left)
    }
}
