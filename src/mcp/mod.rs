//! The MCP endpoint `/{agent_id}/mcp`: both protocol eras of Streamable HTTP on one URL ("dual-era").
//!
//! - **modern** (2026-07-28): stateless; every request carries its version and capabilities in
//!   `params._meta` and mirrors `method`/`params.name|uri` in `Mcp-Method`/`Mcp-Name` headers; results carry
//!   `resultType`, and cacheable ones `ttlMs`/`cacheScope`; entry point `server/discover`; change
//!   notifications on `subscriptions/listen` streams ([`listen`]).
//! - **legacy** (2024-11-05 … 2025-11-25): `initialize` negotiates the version and issues a session
//!   ([`session`]); no `resultType`; change notifications on the session's `GET` stream ([`standalone`]),
//!   resumable with `Last-Event-ID`.
//! - **plain curl**: no envelope, no session, no protocol header → sessionless legacy, answered as JSON.
//!
//! # The life of one request
//!
//! [`transport::post`] checks `Host`/`Origin` ([`origin`]), the key, the agent and the scope, reads the
//! body within the limit, parses it ([`jsonrpc`]), settles the era and validates its envelope and headers
//! ([`era`], [`headers`]), resolves a legacy `Mcp-Session-Id` ([`session`]), then [`dispatch`] finds the
//! method in its table and runs the method's type ([`methods`]) against a [`dispatch::Context`]: the agent,
//! the key, the session, the era, and the registry cache ([`crate::registry::cache`]) in front of the store.
//! Every failure is an [`error::McpError`], mapped to HTTP status and JSON-RPC code in one place.
//!
//! # The life of one notification
//!
//! An admin change commits with its event row → the bus applies `Change{agent, seq}` to the [`hub`] on
//! every replica → the agent's pump ([`fanout`]) reads the new rows once per replica and serialises their
//! notifications once ([`sse`]) → each open [`stream`] of the agent takes the shared frames from its bounded
//! queue, keeps what its session's subscriptions or listen filter want, and writes them; a gap, a lag or a
//! `Last-Event-ID` is filled from the event table, so nothing is sent twice or lost.

/// JSON-RPC batches: a rate-limit token and an audit record per message.
pub mod batch;
/// Method table and the context methods apply against.
pub mod dispatch;
/// Era detection and the modern envelope and header checks.
pub mod era;
/// `McpError` and its one mapping to HTTP status and JSON-RPC code.
pub mod error;
/// One agent's streams on this replica and their pump: committed events read once, fanned out to all.
pub mod fanout;
/// `Mcp-Name` sentinel decoding and `Accept` negotiation.
pub mod headers;
/// The stream hub: every SSE stream of this replica, and the fan-out of committed changes to them.
pub mod hub;
/// JSON-RPC envelopes: parsing with our own errors, ids kept exactly.
pub mod jsonrpc;
/// `subscriptions/listen` (modern): the filter, its acknowledgement, the stream.
pub mod listen;
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
/// The one place SSE events are built: event ids, notification frames, listen messages.
pub mod sse;
/// `GET` (the session's SSE stream) and `DELETE` (end the session) for legacy clients.
pub mod standalone;
/// One open SSE stream: replay, live delivery, gaps, keep-alives, the end.
pub mod stream;
/// The POST handler and the order of checks.
pub mod transport;
/// The wire types: the only module that names `rmcp`.
pub mod types;
/// Matching URIs against RFC 6570 templates (template reads, completion).
pub mod uri_match;
