//! `subscriptions/listen` (2026-07-28): a POST answered with an SSE stream of the change notifications
//! the request's filter asks for.
//!
//! The first message is `notifications/subscriptions/acknowledged` with the part of the filter hivegate
//! honours: `promptsListChanged`, `resourcesListChanged` (resources and templates) and the
//! `resourceSubscriptions` that are valid URIs (also ones that do not exist yet). `toolsListChanged` is
//! never honoured: hivegate serves no tools. Every message carries `io.modelcontextprotocol/subscriptionId`,
//! the listen request's id exactly as the client wrote it. The stream starts at the agent's current
//! position, carries no event ids (modern streams are not resumable) and, when the server ends it
//! (shutdown, revoked or expired key, deleted agent), closes with the listen request's result.

use std::collections::HashSet;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::body::{Flavor, Start, Stream};
use super::hub::StreamKind;
use super::sse::{self, Interest};
use crate::domain::ResourceUri;
use crate::mcp::error::McpError;
use crate::mcp::jsonrpc::RequestId;
use crate::mcp::methods::params;
use crate::mcp::transport::Admitted;
use crate::state::AppState;

/// The `notifications` filter of a listen request; absent fields are not subscribed.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Filter {
    #[serde(default)]
    tools_list_changed: Option<bool>,
    #[serde(default)]
    prompts_list_changed: Option<bool>,
    #[serde(default)]
    resources_list_changed: Option<bool>,
    #[serde(default)]
    resource_subscriptions: Option<Vec<String>>,
}

/// The params: the filter is `notifications`; anything else but `_meta` is refused (-32602), so that a
/// filter sent under another name (`filter`) is not acknowledged as an empty one.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListenParams {
    #[serde(default)]
    notifications: Option<Filter>,
    #[serde(default, rename = "_meta")]
    _meta: Option<serde::de::IgnoredAny>,
}

/// A parsed listen request: what the stream delivers, and the acknowledgement's `notifications`.
#[derive(Debug, PartialEq)]
pub struct Listen {
    pub interest: Interest,
    pub honoured: Value,
}

impl Listen {
    /// Parses the params; a malformed filter, or more URIs than `max_uris`, is -32602.
    pub fn parse(raw: Option<Value>, max_uris: u32) -> Result<Self, McpError> {
        let parsed: ListenParams = params(raw.as_ref())?;
        let filter = parsed.notifications.unwrap_or_default();
        // Tools are never served, so never honoured.
        let _ = filter.tools_list_changed;
        let requested = filter.resource_subscriptions.unwrap_or_default();
        if requested.len() > max_uris as usize {
            return Err(McpError::OverLimit {
                limit: crate::metrics::ConfiguredLimit::Subscriptions,
                message: format!(
                    "a listen names at most {max_uris} resourceSubscriptions (sessions.max_subscriptions)"
                ),
            });
        }
        let mut seen = HashSet::new();
        let uris: Vec<String> = requested
            .into_iter()
            .filter(|uri| ResourceUri::parse(uri).is_ok())
            .filter(|uri| seen.insert(uri.clone()))
            .collect();
        let interest = Interest {
            resources_list: filter.resources_list_changed == Some(true),
            prompts_list: filter.prompts_list_changed == Some(true),
            uris: uris.iter().cloned().collect(),
        };
        let mut honoured = Map::new();
        if interest.prompts_list {
            honoured.insert("promptsListChanged".to_owned(), Value::Bool(true));
        }
        if interest.resources_list {
            honoured.insert("resourcesListChanged".to_owned(), Value::Bool(true));
        }
        if !uris.is_empty() {
            honoured.insert("resourceSubscriptions".to_owned(), Value::from(uris));
        }
        Ok(Self { interest, honoured: Value::Object(honoured) })
    }
}

/// Opens the listen stream for request `id`: the acknowledgement, then live notifications.
pub(in crate::mcp) async fn open(
    state: &AppState,
    admitted: &Admitted,
    id: &RequestId,
    params: Option<Value>,
) -> Result<axum::body::Body, McpError> {
    let listen = Listen::parse(params, state.config.sessions.max_subscriptions)?;
    let kind = StreamKind::Modern { listen_id: id.to_value() };
    let registration = state.hub.register(&admitted.agent, &admitted.key.id, kind, listen.interest)?;
    let (_, head) = state.store.event_head(&admitted.agent.id).await?.ok_or(McpError::UnknownAgent)?;
    let listen_id = id.as_raw().to_owned();
    let ack = sse::acknowledgement(&listen_id, &listen.honoured);
    let keep_alive = Duration::from_millis(state.config.streams.keep_alive_ms);
    let flavor = Flavor::Modern { listen_id };
    let stream = Stream::new(
        registration,
        state.store.clone(),
        admitted.agent.id.clone(),
        flavor,
        Start::At(head),
        Some(ack),
        keep_alive,
    )
    .until(admitted.key.expires_at);
    Ok(stream.into_body())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_honoured_filter_is_what_is_served() {
        let listen = Listen::parse(
            Some(json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true,
                "resourcesListChanged": false, "resourceSubscriptions": ["test://a", "not a uri", "test://a"]}})),
            10,
        )
        .expect("parses");
        assert_eq!(listen.honoured, json!({"promptsListChanged": true, "resourceSubscriptions": ["test://a"]}));
        assert!(listen.interest.prompts_list && !listen.interest.resources_list);
        assert_eq!(listen.interest.uris.len(), 1);
        let empty = Listen::parse(Some(json!({"_meta": {}})), 10).expect("parses");
        assert_eq!(empty.honoured, json!({}));
    }

    #[test]
    fn malformed_filters_are_invalid_params() {
        for params in [
            json!({"notifications": {"promptsListChanged": "yes"}}),
            json!({"notifications": {"resourceSubscriptions": "test://a"}}),
            // The filter under another name is not an empty filter.
            json!({"filter": {"promptsListChanged": true}}),
        ] {
            assert!(matches!(Listen::parse(Some(params), 2), Err(McpError::InvalidParams(_))));
        }
        let over = json!({"notifications": {"resourceSubscriptions": ["a://1", "a://2", "a://3"]}});
        let Err(error) = Listen::parse(Some(over), 2) else { panic!("over the limit") };
        assert_eq!((error.code(), error.limit()), (-32602, Some(crate::metrics::ConfiguredLimit::Subscriptions)));
    }
}
