//! How a client learns what it talks to: `server/discover` (modern), `initialize` (legacy version
//! negotiation), `ping` and `logging/setLevel` (legacy).
//!
//! Capabilities are honest: resources (with `subscribe` and `listChanged`: legacy sessions subscribe,
//! modern clients listen), prompts (with `listChanged`) and completions are served; `logging: {}` is
//! legacy-only (the modern revision deprecates it, and hivegate emits no log messages either way).

use serde::Deserialize;
use serde_json::{Map, Value};

use super::{McpMethod, no_params, params};
use crate::mcp::dispatch::Context;
use crate::mcp::error::McpError;
use crate::mcp::types::{
    DiscoverResult, EmptyObject, InitializeRequestParams, InitializeResult, LATEST_LEGACY_VERSION, LOG_LEVELS,
    PromptsCapability, ProtocolVersion, ResourcesCapability, SUPPORTED_VERSIONS, ServerCapabilities, is_legacy_version,
};

/// What hivegate serves, in the shape of `era`.
fn capabilities(is_modern: bool) -> ServerCapabilities {
    let mut capabilities = ServerCapabilities::default();
    let mut resources = ResourcesCapability::default();
    resources.subscribe = Some(true);
    resources.list_changed = Some(true);
    capabilities.resources = Some(resources);
    let mut prompts = PromptsCapability::default();
    prompts.list_changed = Some(true);
    capabilities.prompts = Some(prompts);
    capabilities.completions = Some(Map::new());
    if !is_modern {
        capabilities.logging = Some(Map::new());
    }
    capabilities
}

/// `server/discover`: supported versions, capabilities, identity; cacheable.
pub struct Discover;

impl McpMethod for Discover {
    type Output = DiscoverResult;

    fn parse(params: Option<&Value>) -> Result<Self, McpError> {
        no_params(params).map(|()| Discover)
    }

    async fn apply(self, ctx: &Context<'_>) -> Result<DiscoverResult, McpError> {
        let versions: Result<Vec<ProtocolVersion>, _> =
            SUPPORTED_VERSIONS.iter().map(|v| serde_json::from_value(Value::from(*v))).collect();
        let versions = versions.map_err(|_| McpError::Internal)?;
        let mut result = DiscoverResult::new(versions, capabilities(true)).with_server_info(ctx.server_info());
        if let Some(hints) = ctx.cache_hints() {
            result = result.with_ttl_ms(hints.ttl_ms).with_cache_scope(hints.scope);
        }
        result.instructions = ctx.agent.description.clone();
        Ok(result)
    }
}

/// `initialize`: echoes a requested legacy version hivegate serves, else offers the newest legacy one.
pub struct Initialize {
    requested: String,
}

impl McpMethod for Initialize {
    type Output = InitializeResult;

    fn parse(raw: Option<&Value>) -> Result<Self, McpError> {
        let parsed: InitializeRequestParams = params(raw)?;
        let requested = serde_json::to_value(&parsed.protocol_version)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        Ok(Initialize { requested })
    }

    async fn apply(self, ctx: &Context<'_>) -> Result<InitializeResult, McpError> {
        let version = if is_legacy_version(&self.requested) { self.requested.as_str() } else { LATEST_LEGACY_VERSION };
        let version: ProtocolVersion = serde_json::from_value(Value::from(version)).map_err(|_| McpError::Internal)?;
        // The transport issues the session (`Mcp-Session-Id`) once this result exists.
        let mut result = InitializeResult::new(capabilities(false))
            .with_protocol_version(version)
            .with_server_info(ctx.server_info());
        result.instructions = ctx.agent.description.clone();
        Ok(result)
    }
}

/// `ping`: `{}`.
pub struct Ping;

impl McpMethod for Ping {
    type Output = EmptyObject;

    fn parse(params: Option<&Value>) -> Result<Self, McpError> {
        no_params(params).map(|()| Ping)
    }

    async fn apply(self, _ctx: &Context<'_>) -> Result<EmptyObject, McpError> {
        Ok(EmptyObject {})
    }
}

/// `logging/setLevel`: accepted and answered `{}`; hivegate sends no log notifications.
pub struct SetLevel;

#[derive(Deserialize)]
struct SetLevelParams {
    level: String,
}

impl McpMethod for SetLevel {
    type Output = EmptyObject;

    fn parse(raw: Option<&Value>) -> Result<Self, McpError> {
        let parsed: SetLevelParams = params(raw)?;
        if !LOG_LEVELS.contains(&parsed.level.as_str()) {
            return Err(McpError::InvalidParams(format!("{:?} is not a log level", parsed.level)));
        }
        Ok(SetLevel)
    }

    async fn apply(self, _ctx: &Context<'_>) -> Result<EmptyObject, McpError> {
        Ok(EmptyObject {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_are_honest_per_era() {
        let served = serde_json::json!({"completions": {}, "prompts": {"listChanged": true},
            "resources": {"subscribe": true, "listChanged": true}});
        let modern = serde_json::to_value(capabilities(true)).expect("json");
        assert_eq!(modern, served);
        let mut legacy_served = served;
        legacy_served["logging"] = serde_json::json!({});
        let legacy = serde_json::to_value(capabilities(false)).expect("json");
        assert_eq!(legacy, legacy_served);
    }

    #[test]
    fn set_level_checks_the_level() {
        assert!(SetLevel::parse(Some(&serde_json::json!({"level": "debug"}))).is_ok());
        assert!(SetLevel::parse(Some(&serde_json::json!({"level": "loud"}))).is_err());
        assert!(SetLevel::parse(None).is_err());
    }
}
