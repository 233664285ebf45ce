//! hivegate: a multi-tenant MCP gateway.
//!
//! Hosted agents publish context for language models through the admin API: resources (identified by
//! URI, text or binary), resource templates (RFC 6570) and prompts (MiniJinja message templates).
//! hivegate keeps each agent's registry in SQLite or PostgreSQL and serves it over MCP at
//! `/{agent_id}/mcp`.
//!
//! # Layout
//!
//! - [`config`]: the configuration (TOML file + `HIVEGATE_*` environment), validated at start-up.
//! - [`app`]: [`app::Application`] wires store, bus, caches and the HTTP server; shutdown.
//! - [`cli`] and [`commands`]: the command line, and what each `hivegate <subcommand>` runs besides `serve`;
//!   [`client`] is the admin API client the registry commands (`agent`, `key`, ...) use.
//! - [`allocator`]: mimalloc's options and purge thread (the binary's allocator).
//! - [`prefetch`]: the lines a request with a known key uses next (its key's, its agent's), asked for at once.
//! - [`task`]: [`task::AbortOnDrop`], a background task that ends with its owner.
//! - [`http`]: the routers (public and operator listeners), their layer stack, limits on the request itself
//!   ([`http::request_limits`]: size, time), authentication and health endpoints.
//! - [`tls`]: native TLS on the public listener; certificates reloaded when their files change.
//! - [`admin`]: the REST admin API under `/admin/v1` and its OpenAPI document.
//! - [`console`]: the web console at `/console/`, server-rendered over the admin API's functions.
//! - [`mcp`]: the MCP endpoint `/{agent_id}/mcp`, both protocol eras; its module doc follows one request,
//!   [`mcp::stream`]'s one change notification.
//! - [`oauth`]: OAuth 2.1 on the MCP endpoint: metadata documents, access tokens (built-in or external
//!   authorization server) resolved to the key each acts as.
//! - [`guard`]: rate limits per key, agent and admin credential (how often); failed authentications per
//!   client address.
//! - [`registry`]: what the registry looks like from outside: the three collections (resources, templates,
//!   prompts), each described once ([`registry::collection`]), pagination cursors, per-agent caches.
//! - [`domain`]: identifiers, keys and records that are valid once they exist.
//! - [`store`]: the storage traits, one per concern (agents, keys, registry, sessions and events, audit,
//!   replicas and shared buckets) under [`store::Store`], each written once for SQLite and PostgreSQL.
//! - [`events`]: the event bus that carries committed changes to every replica; event retention.
//! - [`audit`]: the audit log: what an MCP request's record holds, its batching writer, the hash chains and
//!   their verification; its module doc follows one record.
//! - [`metrics`]: every exported metric, and `GET /metrics`.
//! - [`error`]: the admin API's error type and its one mapping to `application/problem+json`.
//! - [`state`]: the shared state every handler gets; [`telemetry`]: logging and OpenTelemetry traces.
//! - `fuzzing` (hidden): the entry points of the fuzz targets (`fuzz/`) and of the test replaying their corpora.
//!
//! # The life of an admin change
//!
//! `PUT /admin/v1/agents/a/resources` → [`http`] assigns a request id and traces the request →
//! [`admin`] authenticates (operator token or the agent's `registry` key), parses the body into domain
//! types (a bad field is a 400/422 that changes nothing) → [`store`] commits the resource, the agent's next
//! event row and an audit row in one transaction → the [`events`] bus tells every replica, whose caches
//! drop what the change made stale and whose open SSE streams ([`mcp::stream`]) receive the change's
//! notifications, read once per replica from the event table. [`events::retention`] prunes the event table
//! to its window; a client resuming from before it gets a resync instead of a replay.

/// The admin REST API.
pub mod admin;
/// mimalloc's options and the thread that returns freed memory to the system.
pub mod allocator;
/// Composition root: builds the application from its configuration and runs it.
pub mod app;
/// The audit log: request records, the batching writer, hash chains and their verification.
pub mod audit;
/// The command line.
pub mod cli;
/// The command line client of the admin API (`hivegate agent|key|resource|template|prompt`, `audit tail`).
pub mod client;
/// The one-shot commands (`migrate`, `healthcheck`, `config check`, ...) and the dispatch of the command line.
pub mod commands;
/// Configuration loading and validation.
pub mod config;
/// The web console at `/console/`: server-rendered pages over the admin API's functions.
pub mod console;
/// Parse-don't-validate domain types.
pub mod domain;
/// The admin API's problem+json error.
pub mod error;
/// The event bus.
pub mod events;
/// Entry points of the fuzz targets (`fuzz/`) and of the test replaying their corpora.
#[doc(hidden)]
pub mod fuzzing;
/// Rate limits and the client address.
pub mod guard;
/// Router, layers, authentication, health.
pub mod http;
/// The MCP endpoint: both protocol eras on `/{agent_id}/mcp`.
pub mod mcp;
/// Metric names in one place, and `GET /metrics`.
pub mod metrics;
/// OAuth 2.1 for MCP clients: hivegate as a protected resource, access tokens resolved to the keys they act as.
pub mod oauth;
/// Software prefetches: the lines a request to an agent out of the CPU's caches uses next, asked for at once.
pub mod prefetch;
/// Registry views shared by the admin API and the MCP endpoint.
pub mod registry;
/// Shared handler state.
pub mod state;
/// Storage backends.
pub mod store;
/// Background tasks that end with their owner.
pub mod task;
/// Logging, and OpenTelemetry traces (the `otel` feature); W3C trace context.
pub mod telemetry;
/// Native TLS on the listener, with certificates reloaded when their files change.
pub mod tls;

/// The concurrent map of the state looked up on every request (keys, sessions, rate-limit buckets, failed
/// authentications, the registry cache, metrics), hashed with foldhash rather than std's SipHash, which cost more than
/// the lookups themselves. Its keys may come from clients (addresses, URIs): foldhash's seed is per process.
pub(crate) type FastMap<K, V> = dashmap::DashMap<K, V, foldhash::fast::RandomState>;
