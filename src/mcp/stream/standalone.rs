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

use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::body::{Flavor, Start, Stream};
use super::hub::StreamKind;
use super::sse::{self, EventId, Interest};
use crate::audit::request::{Answered, Trail};
use crate::domain::session::Session;
use crate::events::BusMessage;
use crate::mcp::error::McpError;
use crate::mcp::headers::{accepts_event_stream, mirrored};
use crate::mcp::transport::Admitted;
use crate::mcp::types::{LEGACY_VERSIONS, header as mcp_header};
use crate::state::AppState;

/// The first revision whose clients expect a priming event (an id with empty data) on a new stream.
const PRIMING_SINCE: &str = "2025-11-25";

/// `GET /{agent_id}/mcp` once admitted ([`crate::mcp::transport::endpoint`]): the session's SSE stream.
pub(in crate::mcp) async fn get(state: &AppState, admitted: &Admitted, headers: &HeaderMap) -> Answered {
    let trail = Trail::new(admitted, "GET", "");
    trail.attach(open(state, admitted, headers).await.unwrap_or_else(|error| error.into_http(None)))
}

async fn open(state: &AppState, admitted: &Admitted, headers: &HeaderMap) -> Result<Response, McpError> {
    check_version(headers)?;
    if !accepts_event_stream(headers) {
        return Err(McpError::NotAcceptable);
    }
    let session = state
        .sessions
        .resolve(&admitted.session, &admitted.agent.id, &admitted.key)
        .await?
        .ok_or(McpError::MissingSession)?;
    let stream_id = uuid::Uuid::new_v4().to_string();
    let kind = StreamKind::Legacy { session: session.digest.clone(), stream: stream_id.clone() };
    let everything = Interest { resources_list: true, prompts_list: true, uris: Default::default() };
    let registration = state.hub.register(&admitted.agent, &admitted.key.id, kind, everything)?;
    // Any other stream of the session, on any replica, is replaced by this one.
    let opened = BusMessage::StreamOpened {
        agent: admitted.agent.id.clone(),
        session: session.digest.clone(),
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
    match mirrored(headers, &mcp_header::PROTOCOL_VERSION, false)? {
        None => Ok(()),
        Some(version) if LEGACY_VERSIONS.contains(&version.as_ref()) => Ok(()),
        Some(version) if version.as_ref() > LEGACY_VERSIONS[0] => Err(McpError::HttpMethodNotAllowed),
        Some(version) => Err(McpError::UnsupportedVersion { requested: version.into_owned() }),
    }
}

/// `DELETE /{agent_id}/mcp` once admitted: ends the session on every replica (its stream closes); 204.
pub(in crate::mcp) async fn delete(state: &AppState, admitted: &Admitted, headers: &HeaderMap) -> Answered {
    let trail = Trail::new(admitted, "DELETE", "");
    trail.attach(end(state, admitted, headers).await.unwrap_or_else(|error| error.into_http(None)))
}

async fn end(state: &AppState, admitted: &Admitted, headers: &HeaderMap) -> Result<Response, McpError> {
    check_version(headers)?;
    let session = state
        .sessions
        .resolve(&admitted.session, &admitted.agent.id, &admitted.key)
        .await?
        .ok_or(McpError::MissingSession)?;
    state.sessions.end(&session).await?;
    // Answer once every replica has been sent the ending, like an admin write.
    state.bus.settle(state.store.as_ref()).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::headers::tests::with;

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
