//! Method dispatch: the table of known methods (every method string lives here) and the context a method
//! applies against. A known method with bad params is -32602; an unknown one, or one its era does not
//! serve, is -32601 (HTTP 404 on the modern wire, 200 on the legacy one).

use std::sync::Arc;

use super::era::Era;
use super::error::McpError;
use super::jsonrpc::Call;
use super::methods::{self, Answer, completion, lifecycle, prompts, read, resources, subscribe};
use super::types::{CacheHints, CacheScope, Implementation, MetaObject, ResultType, ServerMeta};
use crate::domain::model::{Agent, KeyRecord};
use crate::domain::session::Session;
use crate::guard::{Costly, RateLimitSlot};
use crate::registry::cache::RegistryCache;
use crate::state::AppState;

/// Every method hivegate knows, by wire name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Discover,
    Listen,
    Initialize,
    Initialized,
    Ping,
    Subscribe,
    Unsubscribe,
    SetLevel,
    Cancelled,
    ListResources,
    ReadResource,
    ListTemplates,
    ListPrompts,
    GetPrompt,
    Complete,
}

/// Which eras a method belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Served {
    Modern,
    Legacy,
    Both,
}

/// The method table: wire name, method, era, and whether it is a notification.
const METHODS: [(&str, Method, Served, bool); 15] = [
    ("server/discover", Method::Discover, Served::Modern, false),
    ("subscriptions/listen", Method::Listen, Served::Modern, false),
    ("initialize", Method::Initialize, Served::Legacy, false),
    ("notifications/initialized", Method::Initialized, Served::Legacy, true),
    ("ping", Method::Ping, Served::Legacy, false),
    ("resources/subscribe", Method::Subscribe, Served::Legacy, false),
    ("resources/unsubscribe", Method::Unsubscribe, Served::Legacy, false),
    ("logging/setLevel", Method::SetLevel, Served::Legacy, false),
    ("notifications/cancelled", Method::Cancelled, Served::Both, true),
    ("resources/list", Method::ListResources, Served::Both, false),
    ("resources/read", Method::ReadResource, Served::Both, false),
    ("resources/templates/list", Method::ListTemplates, Served::Both, false),
    ("prompts/list", Method::ListPrompts, Served::Both, false),
    ("prompts/get", Method::GetPrompt, Served::Both, false),
    ("completion/complete", Method::Complete, Served::Both, false),
];

impl Method {
    /// The method called `name` as a request (`is_notification == false`) or a notification, in `era`.
    pub fn lookup(name: &str, era: Era, is_notification: bool) -> Option<Self> {
        let (_, method, served, notification) = METHODS.iter().find(|(wire, ..)| *wire == name)?;
        let is_served = match served {
            Served::Both => true,
            Served::Modern => era.is_modern(),
            Served::Legacy => !era.is_modern(),
        };
        (is_served && *notification == is_notification).then_some(*method)
    }

    /// `name` if it is in the method table (of any era), else `other`: a bounded metric label.
    pub fn label(name: &str) -> &'static str {
        METHODS.iter().find(|(wire, ..)| *wire == name).map_or("other", |(wire, ..)| wire)
    }

    pub fn name(self) -> &'static str {
        METHODS.iter().find(|(_, method, ..)| *method == self).map_or("", |(name, ..)| name)
    }
}

/// What a method applies against: the agent being served, the key and (legacy) session the request came
/// with, the era of the request, and shared state.
pub struct Context<'a> {
    pub state: &'a AppState,
    pub agent: Arc<crate::guard::Bucketed<Agent>>,
    pub key: &'a KeyRecord,
    /// The legacy session named by `Mcp-Session-Id`, already checked; `None` without one (and always on
    /// the modern wire, which has no sessions).
    pub session: Option<Arc<Session>>,
    pub era: Era,
    /// Where the answer's rate-limit fields are left ([`crate::guard`]).
    pub slot: Option<&'a RateLimitSlot>,
    /// The agent's row and registry as found for this request ([`crate::registry::cache::AgentLink`]).
    pub link: Option<&'a crate::registry::cache::AgentLink>,
}

impl Context<'_> {
    pub fn registry(&self) -> &RegistryCache {
        &self.state.registry
    }

    pub fn is_modern(&self) -> bool {
        self.era.is_modern()
    }

    /// `resultType` for modern results; legacy results have none.
    pub fn result_type(&self) -> Option<ResultType> {
        self.is_modern().then_some(ResultType::COMPLETE)
    }

    /// The caching hints for cacheable modern results: the agent's `cacheTtlMs`, else the configured default.
    pub fn cache_hints(&self) -> Option<CacheHints> {
        let ttl_ms = self.agent.cache_ttl_ms.unwrap_or(self.state.config.mcp.default_cache_ttl_ms);
        self.is_modern().then_some(CacheHints { ttl_ms, scope: CacheScope::Private })
    }

    /// hivegate as an MCP implementation: titled with the agent's name.
    pub fn server_info(&self) -> Implementation {
        ServerMeta { title: &self.agent.name }.implementation()
    }

    /// The result `_meta` of modern results (`io.modelcontextprotocol/serverInfo`), as written.
    pub fn server_meta(&self) -> Option<ServerMeta<'_>> {
        self.is_modern().then_some(ServerMeta { title: &self.agent.name })
    }

    /// The result `_meta` of modern results, as a map, for results that keep theirs in one.
    pub fn result_meta(&self) -> Option<MetaObject> {
        let info = serde_json::to_value(self.server_meta()?).ok()?;
        match info {
            serde_json::Value::Object(map) => Some(MetaObject(map)),
            _ => None,
        }
    }

    /// A costly method's own limit for this key ([`crate::guard::Guard::method`]): 429/-31429 when refused,
    /// with that policy's fields on the answer.
    fn limit(&self, method: Costly) -> Result<(), McpError> {
        let verdict = self.state.guard.method(&self.key.id, method);
        if verdict.retry_after.is_none() {
            return Ok(());
        }
        verdict
            .settle_in(self.slot, &self.state.metrics)
            .map_err(|wait| McpError::RateLimited { retry_after_ms: crate::guard::millis_up(wait) })
    }

    /// The era's "resource not found".
    pub fn not_found(&self, uri: &str) -> McpError {
        McpError::ResourceNotFound { uri: uri.to_owned(), is_modern: self.is_modern() }
    }
}

/// Answers a request: the serialised result, or the error to answer with. Its span is made for trace export
/// alone, as the message's `mcp` span is ([`crate::telemetry::EXPORT_TARGET`]): log lines name the agent and
/// the method through the request span, so without an export it costs nothing.
#[tracing::instrument(target = "hivegate::export", skip_all, fields(method = %call.method, agent = %ctx.agent.id))]
pub async fn call(ctx: &Context<'_>, call: &Call) -> Result<Answer, McpError> {
    let not_found = || McpError::MethodNotFound { method: call.method.clone(), is_modern: ctx.is_modern() };
    let method = Method::lookup(&call.method, ctx.era, false).ok_or_else(not_found)?;
    let costly = match method {
        Method::GetPrompt => Some(Costly::GetPrompt),
        Method::Complete => Some(Costly::Complete),
        Method::ReadResource => Some(Costly::ReadResource),
        _ => None,
    };
    if let Some(costly) = costly {
        ctx.limit(costly)?;
    }
    let params = call.params.as_ref();
    let result = match method {
        Method::Discover => methods::run::<lifecycle::Discover>(ctx, params).await,
        Method::Initialize => methods::run::<lifecycle::Initialize>(ctx, params).await,
        Method::Ping => methods::run::<lifecycle::Ping>(ctx, params).await,
        Method::SetLevel => methods::run::<lifecycle::SetLevel>(ctx, params).await,
        Method::ListResources => methods::run::<resources::ListResources>(ctx, params).await,
        Method::ListTemplates => methods::run::<resources::ListTemplates>(ctx, params).await,
        Method::ReadResource => methods::run::<read::ReadResource>(ctx, params).await,
        Method::ListPrompts => methods::run::<prompts::ListPrompts>(ctx, params).await,
        Method::GetPrompt => methods::run::<prompts::GetPrompt>(ctx, params).await,
        Method::Complete => methods::run::<completion::Complete>(ctx, params).await,
        // The session check comes before the method's own (contract: session → method).
        Method::Subscribe | Method::Unsubscribe if ctx.session.is_none() => Err(McpError::MissingSession),
        Method::Subscribe => methods::run::<subscribe::Subscribe>(ctx, params).await,
        Method::Unsubscribe => methods::run::<subscribe::Unsubscribe>(ctx, params).await,
        // A listen is answered with a stream, by the transport (see `super::stream::listen`), never from here.
        Method::Listen => Err(McpError::Internal),
        Method::Initialized | Method::Cancelled => Err(not_found()),
    };
    match &result {
        Ok(read) if method == Method::ReadResource => ctx.state.guard.charge_read(&ctx.key.id, read.json_len()),
        Ok(_) => {}
        Err(error) => tracing::debug!(code = error.code(), %error, "method failed"),
    }
    result
}

/// Takes a notification: accepted (202) whether or not it is known, since a notification is never answered.
/// Its span is made for trace export alone, as [`call`]'s is.
#[tracing::instrument(target = "hivegate::export", skip_all, fields(method = %call.method, agent = %ctx.agent.id))]
pub fn notify(ctx: &Context<'_>, call: &Call) {
    match Method::lookup(&call.method, ctx.era, true) {
        // A modern client cancelling its listen: close that stream if it is open here. (On HTTP, closing
        // the stream is the cancellation that counts; official clients do both.)
        Some(Method::Cancelled) if ctx.is_modern() => {
            if let Some(request) = call.params_object().and_then(|params| params.get("requestId")) {
                ctx.state.hub.cancel(&ctx.agent.id, &ctx.key.id, request);
            }
        }
        Some(Method::Initialized | Method::Cancelled) => {}
        _ => tracing::debug!("ignoring an unknown notification"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEGACY: Era = Era::Legacy { version: "2025-11-25" };

    #[test]
    fn table_lookup_respects_era_and_kind() {
        assert_eq!(Method::lookup("server/discover", Era::Modern, false), Some(Method::Discover));
        assert_eq!(Method::lookup("server/discover", LEGACY, false), None);
        assert_eq!(Method::lookup("initialize", Era::Modern, false), None);
        assert_eq!(Method::lookup("initialize", LEGACY, false), Some(Method::Initialize));
        assert_eq!(Method::lookup("ping", Era::Modern, false), None);
        assert_eq!(Method::lookup("resources/read", Era::Modern, false), Some(Method::ReadResource));
        assert_eq!(Method::lookup("notifications/initialized", LEGACY, true), Some(Method::Initialized));
        assert_eq!(Method::lookup("notifications/initialized", LEGACY, false), None);
        assert_eq!(Method::lookup("tools/list", LEGACY, false), None);
    }

    #[test]
    fn names_round_trip() {
        for (name, method, ..) in METHODS {
            assert_eq!(method.name(), name);
        }
    }
}
