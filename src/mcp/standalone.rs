//! `GET` and `DELETE /{agent_id}/mcp` for legacy sessions (protocol versions 2024-11-05 … 2025-11-25):
//! the session's own SSE stream, and ending the session.
//!
//! Both pass the same gate as a POST (origin, key, agent, scope, rate limit), then need a session: none is
//! 400/-32600, an unknown, ended, expired or other key's one 404/-31410. A `GET` that names the modern
//! revision is 405: 2026-07-28 has no standalone stream (it listens with `subscriptions/listen`).
//!
//! A `GET` stream carries the session's change notifications: both list changes and the updates of the
//! URIs it subscribed to, each with an event id. With `Last-Event-ID` it first replays, from the event
//! table, exactly what the session missed after that id; without one it starts with a priming event whose
//! id is the current position (2025-11-25 sessions), so even a client that saw no notification can resume.
//! A second `GET` on the session, on any replica, replaces the first.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::error::McpError;
use super::headers::mirrored;
use super::hub::Kind;
use super::sse::{self, EventId, Interest};
use super::stream::{Flavor, Start, Stream};
use super::transport::{Admitted, admit};
use super::types::{LEGACY_VERSIONS, header as mcp_header};
use crate::audit::request::Trail;
use crate::domain::session::Session;
use crate::events::BusMessage;
use crate::state::AppState;

/// The first revision whose clients expect a priming event (an id with empty data) on a new stream.
const PRIMING_SINCE: &str = "2025-11-25";

/// `GET /{agent_id}/mcp`: the session's SSE stream.
pub async fn get(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    let (parts, _) = request.into_parts();
    let admitted = match admit(&state, path, &parts, "GET").await {
        Ok(admitted) => admitted,
        Err(refusal) => return refusal.into_http(),
    };
    let trail = Trail::new(&admitted, &parts.headers, "GET", "");
    trail.attach(match open(&state, &admitted, &parts.headers).await {
        Ok(response) => response,
        Err(error) => error.into_http(None),
    })
}

async fn open(state: &AppState, admitted: &Admitted, headers: &HeaderMap) -> Result<Response, McpError> {
    check_version(headers)?;
    if !accepts_event_stream(headers) {
        return Err(McpError::NotAcceptable);
    }
    let session =
        state.sessions.resolve(headers, &admitted.agent.id, &admitted.key).await?.ok_or(McpError::MissingSession)?;
    let stream_id = uuid::Uuid::new_v4().to_string();
    let kind = Kind::Legacy { session: session.digest.clone(), stream: stream_id.clone() };
    let everything = Interest { resources_list: true, prompts_list: true, uris: Default::default() };
    let registration = state.hub.register(&admitted.agent, &admitted.key.id, kind, everything)?;
    // Any other stream of the session, on any replica, is replaced by this one.
    let opened = BusMessage::StreamOpened {
        agent: admitted.agent.id.to_string(),
        session: session.digest.as_str().to_owned(),
        stream: stream_id,
    };
    if let Err(error) = state.store.announce(opened).await {
        tracing::warn!(%error, "could not announce a new session stream");
        // Its announcement will not come back: a later GET must still be able to replace it.
        registration.shared.is_announced.store(true, std::sync::atomic::Ordering::Release);
    }
    let uris = state.store.subscriptions(&session.digest).await?;
    registration.shared.set_interest_uris(uris.into_iter().collect());
    let epoch = registration.epoch();
    let (start, first) = match last_event_id(headers) {
        Some(Some(id)) if id.epoch == epoch => {
            let after = if id.index.is_some() { id.seq - 1 } else { id.seq };
            (Start::Replay { after, partial: id.index.map(|index| (id.seq, index)) }, None)
        }
        // An id that is not ours, or from another incarnation of the agent: nothing can be replayed exactly.
        Some(_) => (Start::Resync(head(state, &session).await?), None),
        None => {
            let head = head(state, &session).await?;
            let priming = (session.protocol_version.as_str() >= PRIMING_SINCE)
                .then(|| sse::priming(&EventId { epoch, seq: head, index: None }));
            (Start::At(head), priming)
        }
    };
    let flavor = Flavor::Legacy { session: session.digest.clone(), sessions: state.sessions.clone() };
    let keep_alive = Duration::from_millis(state.config.streams.keep_alive_ms);
    let stream =
        Stream::new(registration, state.store.clone(), session.agent_id.clone(), flavor, start, first, keep_alive)
            .until(admitted.key.expires_at);
    Ok((StatusCode::OK, sse::headers(), stream.into_body()).into_response())
}

/// The agent's current position.
async fn head(state: &AppState, session: &Session) -> Result<i64, McpError> {
    let (_, head) = state.store.event_head(&session.agent_id).await?.ok_or(McpError::UnknownAgent)?;
    Ok(head)
}

/// `Last-Event-ID`: absent (`None`), ours (`Some(Some(id))`) or not ours (`Some(None)`).
fn last_event_id(headers: &HeaderMap) -> Option<Option<EventId>> {
    let value = headers.get("last-event-id")?;
    Some(value.to_str().ok().and_then(EventId::parse))
}

/// A `MCP-Protocol-Version` on a `GET` or `DELETE` must be a legacy revision; the modern one has neither.
fn check_version(headers: &HeaderMap) -> Result<(), McpError> {
    match mirrored(headers, mcp_header::PROTOCOL_VERSION, false)? {
        None => Ok(()),
        Some(version) if LEGACY_VERSIONS.contains(&version.as_str()) => Ok(()),
        Some(version) if version.as_str() > LEGACY_VERSIONS[0] => Err(McpError::HttpMethodNotAllowed),
        Some(version) => Err(McpError::UnsupportedVersion { requested: version }),
    }
}

/// Whether `Accept` allows an event stream (absent allows anything).
pub(super) fn accepts_event_stream(headers: &HeaderMap) -> bool {
    let mut values = headers.get_all(header::ACCEPT).iter().filter_map(|v| v.to_str().ok()).peekable();
    if values.peek().is_none() {
        return true;
    }
    values.flat_map(|value| value.split(',')).any(|member| {
        let mut parts = member.split(';');
        let range = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let is_refused = parts.any(|param| {
            param.trim().split_once('=').is_some_and(|(name, q)| {
                name.trim().eq_ignore_ascii_case("q") && q.trim().parse::<f32>().is_ok_and(|q| q <= 0.0)
            })
        });
        !is_refused && matches!(range.as_str(), "text/event-stream" | "text/*" | "*/*")
    })
}

/// `DELETE /{agent_id}/mcp`: ends the session on every replica (its stream closes); 204.
pub async fn delete(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    let (parts, _) = request.into_parts();
    let admitted = match admit(&state, path, &parts, "DELETE").await {
        Ok(admitted) => admitted,
        Err(refusal) => return refusal.into_http(),
    };
    let trail = Trail::new(&admitted, &parts.headers, "DELETE", "");
    let ended = async {
        check_version(&parts.headers)?;
        let session: Arc<Session> = state
            .sessions
            .resolve(&parts.headers, &admitted.agent.id, &admitted.key)
            .await?
            .ok_or(McpError::MissingSession)?;
        state.sessions.end(&session).await?;
        // Answer once every replica has been sent the ending, like an admin write.
        state.bus.settle(state.store.as_ref()).await;
        Ok::<_, McpError>(())
    };
    trail.attach(match ended.await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(error) => error.into_http(None),
    })
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn with(name: &'static str, value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(name, HeaderValue::from_str(value).expect("header value"));
        headers
    }

    #[test]
    fn accept_for_streams() {
        assert!(accepts_event_stream(&HeaderMap::new()));
        assert!(accepts_event_stream(&with("accept", "text/event-stream")));
        assert!(accepts_event_stream(&with("accept", "application/json, */*")));
        assert!(!accepts_event_stream(&with("accept", "application/json")));
        assert!(!accepts_event_stream(&with("accept", "text/event-stream;q=0")));
    }

    #[test]
    fn versions_on_get() {
        assert!(check_version(&HeaderMap::new()).is_ok());
        assert!(check_version(&with("mcp-protocol-version", "2025-06-18")).is_ok());
        assert!(matches!(
            check_version(&with("mcp-protocol-version", "2026-07-28")),
            Err(McpError::HttpMethodNotAllowed)
        ));
        assert!(matches!(
            check_version(&with("mcp-protocol-version", "2024-01-01")),
            Err(McpError::UnsupportedVersion { .. })
        ));
    }

    #[test]
    fn last_event_ids() {
        assert_eq!(last_event_id(&HeaderMap::new()), None);
        assert_eq!(last_event_id(&with("last-event-id", "nonsense")), Some(None));
        let id = EventId { epoch: 5, seq: 9, index: Some(2) };
        let headers = with("last-event-id", &id.encode());
        assert_eq!(last_event_id(&headers), Some(Some(id)));
    }
}
