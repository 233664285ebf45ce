//! `resources/subscribe` and `resources/unsubscribe` (legacy): a session's subscriptions, kept in the
//! database so that the session's stream receives `notifications/resources/updated` for them on whichever
//! replica it is open.
//!
//! Any syntactically valid URI may be subscribed, also before a resource with that URI exists. The change
//! reaches the session's stream through the bus in commit order, so a change committed after the answer
//! is notified and one committed before is not.

use serde::Deserialize;
use serde_json::Value;

use super::{McpMethod, params};
use crate::domain::ResourceUri;
use crate::domain::id::InvalidValue;
use crate::mcp::dispatch::Context;
use crate::mcp::error::McpError;
use crate::mcp::types::EmptyObject;
use crate::metrics::ConfiguredLimit;
use crate::store::StoreError;

#[derive(Deserialize)]
struct UriParams {
    uri: String,
}

impl UriParams {
    /// The params' `uri` as `check` takes it (invalid params when it refuses it).
    fn of<T>(raw: Option<&Value>, check: impl FnOnce(&str) -> Result<T, InvalidValue>) -> Result<T, McpError> {
        let parsed: Self = params(raw)?;
        check(&parsed.uri).map_err(|error| McpError::InvalidParams(error.0))
    }
}

/// `resources/subscribe`: `{}` once the URI is among the session's subscriptions.
pub struct Subscribe {
    uri: ResourceUri,
}

impl McpMethod for Subscribe {
    type Output = EmptyObject;

    fn parse(raw: Option<&Value>) -> Result<Self, McpError> {
        let uri = UriParams::of(raw, ResourceUri::parse)?;
        Ok(Self { uri })
    }

    async fn apply(self, ctx: &Context<'_>) -> Result<EmptyObject, McpError> {
        let session = ctx.session.as_ref().ok_or(McpError::MissingSession)?;
        let limit = ctx.state.config.sessions.max_subscriptions;
        match ctx.state.store.subscribe(&ctx.agent.id, &session.digest, &self.uri, limit).await {
            Ok(true) => Ok(EmptyObject {}),
            Ok(false) => Err(McpError::OverLimit {
                limit: ConfiguredLimit::Subscriptions,
                message: format!("a session subscribes to at most {limit} URIs (sessions.max_subscriptions)"),
            }),
            // The session ended while the request was on its way.
            Err(StoreError::NotFound) => Err(McpError::UnknownSession),
            Err(error) => Err(error.into()),
        }
    }
}

/// `resources/unsubscribe`: `{}`, whether or not the URI was subscribed.
pub struct Unsubscribe {
    uri: String,
}

impl McpMethod for Unsubscribe {
    type Output = EmptyObject;

    fn parse(raw: Option<&Value>) -> Result<Self, McpError> {
        // Any other string may be unsubscribed (it is simply not subscribed), but not one longer than a URI.
        let uri = UriParams::of(raw, |uri| ResourceUri::check_length(uri).map(|()| uri.to_owned()))?;
        Ok(Self { uri })
    }

    async fn apply(self, ctx: &Context<'_>) -> Result<EmptyObject, McpError> {
        let session = ctx.session.as_ref().ok_or(McpError::MissingSession)?;
        ctx.state.store.unsubscribe(&ctx.agent.id, &session.digest, &self.uri).await?;
        Ok(EmptyObject {})
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn params_are_checked() {
        assert!(Subscribe::parse(Some(&json!({"uri": "test://watched-resource"}))).is_ok());
        assert!(matches!(Subscribe::parse(Some(&json!({"uri": "no scheme"}))), Err(McpError::InvalidParams(_))));
        assert!(matches!(Subscribe::parse(None), Err(McpError::InvalidParams(_))));
        assert!(Unsubscribe::parse(Some(&json!({"uri": "anything at all"}))).is_ok());
        let too_long = format!("test://{}", "a".repeat(2048));
        assert!(matches!(Subscribe::parse(Some(&json!({"uri": too_long}))), Err(McpError::InvalidParams(_))));
        assert!(matches!(Unsubscribe::parse(Some(&json!({"uri": too_long}))), Err(McpError::InvalidParams(_))));
    }
}
