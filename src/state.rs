//! The shared state every handler gets: built once in [`crate::app::Application::build`].

use crate::audit::AuditWriter;
use std::sync::Arc;

use crate::config::Config;
use crate::domain::KeyHasher;
use crate::events::LocalBus;
use crate::guard::Guard;
use crate::http::auth::{KeyCache, OperatorToken};
use crate::mcp::session::Sessions;
use crate::mcp::stream::hub::Hub;
use crate::metrics::Metrics;
use crate::registry::cache::RegistryCache;
use crate::registry::cursor::CursorCodec;
use crate::store::Store;

/// Cheap to clone: one reference count, whatever the number of fields (every layer and extractor of a
/// request clones the state). The fields are those of [`Shared`], reached through `Deref`.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What [`AppState`] shares.
pub struct Shared {
    pub config: Arc<Config>,
    /// `Arc<dyn Store>` rather than a generic, so handlers are compiled once for both backends.
    pub store: Arc<dyn Store>,
    /// Committed changes from every replica.
    pub bus: LocalBus,
    /// Presented key digest → stored key, invalidated through the bus.
    pub keys: Arc<KeyCache>,
    /// The operator token: the configured one, or the stored digest, refreshed so a rotation reaches this replica.
    pub operator: Arc<OperatorToken>,
    /// Access tokens on the MCP endpoint, the agents' metadata documents ([`crate::oauth`]).
    pub oauth: Arc<crate::oauth::OAuth>,
    /// The built-in authorization server, when `oauth.mode = "builtin"`.
    pub oauth_server: Option<Arc<crate::oauth::server::BuiltinServer>>,
    /// Signs and checks pagination cursors with the key every replica shares.
    pub cursors: Arc<CursorCodec>,
    /// Digests presented keys (HMAC with `keys.pepper` when set) to look them up.
    pub hasher: KeyHasher,
    /// Agent rows, list pages and small contents per agent, invalidated through the bus.
    pub registry: Arc<RegistryCache>,
    /// Legacy sessions this replica has seen, invalidated through the bus.
    pub sessions: Arc<Sessions>,
    /// Every SSE stream open on this replica; the bus feeds it committed changes.
    pub hub: Arc<Hub>,
    /// Queues MCP request audit records for the batching writer.
    pub audit: AuditWriter,
    /// What `GET /metrics` exports.
    pub metrics: Arc<Metrics>,
    /// This replica's rate limiters.
    pub guard: Arc<Guard>,
    /// The console's signed-in sessions on this replica ([`crate::console::session`]).
    pub console: Arc<crate::console::session::ConsoleSessions>,
    /// Turns for the renders and compiles that run on the blocking pool, so one agent queues behind itself.
    pub renders: Arc<crate::mcp::render_gate::RenderGate>,
}
