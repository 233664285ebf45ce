//! `GET /.well-known/oauth-protected-resource/{agent_id}/mcp`: an agent's Protected Resource Metadata
//! (RFC 9728), which a client reads from the URL in a 401's `WWW-Authenticate` to find the authorization
//! server. 404 for an unknown agent, and for every agent while OAuth is off for it.

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::domain::AgentId;
use crate::state::AppState;

/// The well-known path prefix of the documents (RFC 9728 §3).
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The document (RFC 9728 §2).
#[derive(Debug, Serialize)]
pub struct ResourceMetadata<'a> {
    /// The agent's canonical MCP URL.
    pub resource: String,
    pub authorization_servers: [&'a str; 1],
    pub scopes_supported: [&'static str; 1],
    pub bearer_methods_supported: [&'static str; 1],
    pub resource_name: String,
}

/// The handler of `{WELL_KNOWN}/{agent_id}/mcp`.
pub async fn document(State(state): State<AppState>, Path(agent): Path<String>) -> Response {
    let oauth = &state.oauth;
    let Some(issuer) = oauth.issuer() else { return not_found() };
    let Ok(agent) = AgentId::parse(&agent) else { return not_found() };
    if !oauth.is_on_for(agent.as_str()) {
        return not_found();
    }
    match state.registry.agent(&agent).await {
        Ok(Some(found)) => {
            let document = ResourceMetadata {
                resource: oauth.resource(agent.as_str()),
                authorization_servers: [issuer],
                scopes_supported: [super::SCOPE],
                bearer_methods_supported: ["header"],
                resource_name: found.name.clone(),
            };
            let body = serde_json::to_vec(&document).unwrap_or_default();
            (StatusCode::OK, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body)
                .into_response()
        }
        Ok(None) => not_found(),
        Err(error) => {
            tracing::warn!(%error, "agent lookup failed");
            (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "1")], "database unavailable").into_response()
        }
    }
}

fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "application/problem+json")],
        r#"{"type":"about:blank","title":"Not Found","status":404,"detail":"no protected resource here"}"#,
    )
        .into_response()
}
