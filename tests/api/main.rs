//! The black-box test suite of the HTTP API: every story runs against the real server, once on SQLite and once
//! on PostgreSQL (`HIVEGATE_TEST_POSTGRES_URL`; `scripts/test` provides one).

/// Generates `mod <story> { sqlite, postgres }` test functions running `async fn <story>(Backend)` on each
/// backend, so every story is written once and runs on both (`cargo test sqlite`, `cargo test postgres`).
macro_rules! both {
    ($($story:ident),+ $(,)?) => {
        $(
            mod $story {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$story($crate::helpers::Backend::Sqlite).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$story($crate::helpers::Backend::Postgres).await;
                }
            }
        )+
    };
}

/// Test databases, the in-process application, the binary in a child process, response assertions.
mod helpers;

/// Agents: create, list, get, merge-patch, delete, and their errors.
mod agents;
/// The audit log of MCP requests and its hash chain.
mod audit;
/// Audit records of refusals after authentication, of each batch message, of non-ASCII user agents.
mod audit_refusals;
/// Who may do what: the operator token, `registry` and `mcp` keys, revocation and expiry.
mod auth;
/// Batches apply all or nothing.
mod batch;
/// A JSON-RPC batch takes a rate-limit token per message.
mod batch_tokens;
/// The admin API client commands of the binary.
mod cli;
/// Connection hygiene: header-read and idle timeouts, connection caps, early refusals on keep-alive.
mod connections;
/// The web console over HTTP: sessions, CSRF, inert names, confinement of keys, changes audited.
mod console;
/// The console in headless Chromium: every page's flow, screenshots, axe-core.
mod console_browser;
/// CORS on the MCP endpoint and the metadata documents.
mod cors;
/// Fault injection between hivegate and PostgreSQL.
mod faults;
/// Every field a key writes has a size limit; list pages are bounded by bytes.
mod field_limits;
/// Health, readiness and the OpenAPI document.
mod health;
/// Tenant isolation as a randomized property.
mod isolation;
/// API keys: issue, list, revoke, and their errors.
mod keys;
/// The hardening limits: JSON nesting, header fields, request target, resource URIs, time; secrets in logs.
mod limits;
/// Clients for the live-update stories: SSE reading, legacy sessions, listen streams.
mod live_client;
/// A key's expiry ends its streams at that instant.
mod live_expiry;
/// Modern subscriptions/listen streams: acknowledgement, filter, tags, several listens, the server's end.
mod live_listen;
/// Live updates across two hivegate processes on one PostgreSQL database.
mod live_replicas;
/// Re-reading on a notification sees the change.
mod live_reread;
/// Streams in the real world: Last-Event-ID replay and retention, keep-alives, limits, slow consumers, shutdown.
mod live_resume;
/// Legacy sessions and their GET streams: subscriptions, list changes, errors, replacement, revocation.
mod live_sessions;
/// The failed-authentication lockout: its message, log line, metric and operator exemption.
mod lockout;
/// The MCP endpoint: who may reach it, in the contract's order of checks; tenant isolation.
mod mcp_access;
/// A small MCP client for the endpoint stories, and the conformance suite's fixtures.
mod mcp_client;
/// The MCP endpoint's two eras: detection, lifecycle, header validation, batches.
mod mcp_eras;
/// The registry over MCP: lists, pagination, reads, templates, directories, prompts, completion.
mod mcp_methods;
/// `GET /metrics` after known traffic.
mod metrics;
/// OAuth: metadata documents, the challenge, an external issuer's tokens, subject grants.
mod oauth;
/// The built-in OAuth authorization server: registration, metadata documents, consent, codes, tokens.
mod oauth_server;
/// The OpenAPI document against the server, the landing page and the API reference.
mod openapi;
/// The operator endpoints on a listener of their own.
mod operator;
/// OpenTelemetry traces: `traceparent` and MCP `_meta` propagation (the `otel` feature).
#[cfg(feature = "otel")]
mod otel;
/// Lists: page sizes, cursors, bytewise order.
mod pagination;
/// TLS to PostgreSQL: the store and the listener over TLS, a wrong root certificate stopping start-up.
mod postgres_tls;
/// The binary: the generated operator token, concurrent migrations, graceful shutdown.
mod process;
/// Prompts: templates compiled at write time.
mod prompts;
/// Per-agent and gateway-wide quotas.
mod quotas;
/// Rate limits per key, agent and admin credential; failed authentications per client address.
mod rate_limits;
/// A raw HTTP/1.1 client over TCP: stalled heads, pipelining, repeated header fields, chosen source addresses.
mod raw;
/// The README's curl sessions, run as written.
mod readme;
/// Several replicas on one PostgreSQL database, and a broken LISTEN connection.
mod replicas;
/// Resources: text and blob content, validation, round trips.
mod resources;
/// Live legacy sessions per key are capped.
mod session_cap;
/// Resource templates: RFC 6570 and their optional MiniJinja text.
mod templates;
/// Native TLS: certificates served and reloaded, start-up errors, slow handshakes, the health check.
mod tls;
