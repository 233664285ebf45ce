//! The MCP endpoint `/{agent_id}/mcp`: both protocol eras of Streamable HTTP on one URL ("dual-era").
//!
//! - **modern** (2026-07-28): stateless; every request carries its version and capabilities in
//!   `params._meta` and mirrors `method`/`params.name|uri` in `Mcp-Method`/`Mcp-Name` headers; results carry
//!   `resultType`, and cacheable ones `ttlMs`/`cacheScope`; entry point `server/discover`; change
//!   notifications on `subscriptions/listen` streams ([`stream::listen`]).
//! - **legacy** (2024-11-05 … 2025-11-25): `initialize` negotiates the version and issues a session
//!   ([`session`]); no `resultType`; change notifications on the session's `GET` stream
//!   ([`stream::standalone`]), resumable with `Last-Event-ID`.
//! - **plain curl**: no envelope, no session, no protocol header → sessionless legacy, answered as JSON.
//!
//! # The life of one request
//!
//! [`transport::endpoint`] checks `Host`/`Origin` ([`origin`]), the key, the agent and the scope; a POST
//! then reads the body within the limit, parses it ([`jsonrpc`]), settles the era and validates its envelope
//! and headers ([`era`], [`headers`]), resolves a legacy `Mcp-Session-Id` ([`session`]), then [`dispatch`]
//! finds the method in its table and runs the method's type ([`methods`]) against a [`dispatch::Context`]:
//! the agent, the key, the session, the era, and the registry cache ([`crate::registry::cache`]) in front of
//! the store.
//! Every failure is an [`error::McpError`], mapped to HTTP status and JSON-RPC code in one place.
//!
//! # The life of one notification
//!
//! An admin change commits with its event row → the bus applies `Change{agent, seq}` to the stream hub on
//! every replica → the agent's pump reads the new rows once per replica and serialises their notifications
//! once → each open stream of the agent keeps what its session's subscriptions or listen filter want. The
//! [`stream`] module's doc follows it step by step.
//!
//! [`stream::listen`]: crate::mcp::stream::listen
//! [`session`]: crate::mcp::session
//! [`stream::standalone`]: crate::mcp::stream::standalone
//! [`transport::endpoint`]: crate::mcp::transport::endpoint
//! [`origin`]: crate::mcp::origin
//! [`jsonrpc`]: crate::mcp::jsonrpc
//! [`era`]: crate::mcp::era
//! [`headers`]: crate::mcp::headers
//! [`dispatch`]: crate::mcp::dispatch
//! [`methods`]: crate::mcp::methods
//! [`dispatch::Context`]: crate::mcp::dispatch::Context
//! [`error::McpError`]: crate::mcp::error::McpError
//! [`stream`]: crate::mcp::stream

/// JSON-RPC batches: a rate-limit token and an audit record per message.
pub mod batch;
/// Method table and the context methods apply against.
pub mod dispatch;
/// Era detection and the modern envelope and header checks.
pub mod era;
/// `McpError` and its one mapping to HTTP status and JSON-RPC code.
pub mod error;
/// `Mcp-Name` sentinel decoding and `Accept` negotiation.
pub mod headers;
/// JSON-RPC envelopes: parsing with our own errors, ids kept exactly.
pub mod jsonrpc;
/// One type per JSON-RPC method.
pub mod methods;
/// DNS-rebinding protection: `Host` and `Origin` allow-lists.
pub mod origin;
/// Turns for the renders that leave the request's task, per agent and for the gateway.
pub mod render_gate;
/// Legacy sessions: issued by `initialize`, resolved per request, ended by `DELETE` or idleness.
pub mod session;
/// The span of one MCP message and the trace context of its `_meta`.
pub mod span;
/// Change notifications over SSE: legacy `GET` streams, listen streams, the hub that feeds them.
pub mod stream;
/// The POST handler and the order of checks.
pub mod transport;
/// The wire types: the only module that names `rmcp`.
pub mod types;
/// Matching URIs against RFC 6570 templates (template reads, completion).
pub mod uri_match;
