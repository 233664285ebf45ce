//! Metric names in one place, and `GET /metrics` (Prometheus text format).
//!
//! Counters and histograms are updated where things happen (HTTP middleware, the MCP endpoint, caches,
//! streams); what is a level rather than an event (open streams, cache size, audit backlog, pool usage) is
//! read at scrape time by a collector. Labels are bounded: route templates, never raw paths; MCP method
//! names from the method table (anything else is `other`), never URIs, agents or keys.

use std::fmt;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

use crate::audit::AuditStats;
use crate::mcp::stream::hub::Hub;
use crate::registry::cache::RegistryCache;
use crate::state::AppState;
use crate::store::Store;

/// Counters and latency histograms in a shard per thread, and the families of them updated on every request.
mod shards;

pub use shards::{LatencyHistogram, Resolved, ShardedCounter, claim_shard};

/// The content type of the text exposition format.
const TEXT_FORMAT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Declares label sets: each a struct whose fields are the labels (bounded values only).
macro_rules! label_sets {
    ($($(#[$attr:meta])* pub struct $name:ident { $($(#[$field_attr:meta])* pub $field:ident: $ty:ty,)* })*) => {
        $(
            $(#[$attr])*
            #[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
            pub struct $name {
                $($(#[$field_attr])* pub $field: $ty,)*
            }
        )*
    };
}

/// Declares an enum of label values, each with the text it is exported as ([`as_str`](ConfiguredLimit::as_str)), so
/// that a label's values are listed once, here, and clients cannot grow them.
macro_rules! label_values {
    ($(#[$attr:meta])* pub enum $name:ident { $($(#[$variant_attr:meta])* $variant:ident => $text:literal,)* }) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $($(#[$variant_attr])* $variant,)*
        }

        impl $name {
            /// The label value.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)*
                }
            }
        }
    };
}

label_sets! {
    pub struct HttpLabels {
        /// The matched route template, e.g. `/{agent_id}/mcp`; `unmatched` for 404s of unknown paths.
        pub route: std::borrow::Cow<'static, str>,
        /// The request method ([`method_label`]).
        pub method: &'static str,
        pub status: u16,
    }

    pub struct HttpRouteLabels {
        pub route: std::borrow::Cow<'static, str>,
        pub method: &'static str,
    }

    pub struct McpLabels {
        /// A method of the MCP method table, `GET`/`DELETE` for the stream and session end, `batch`, or `other`.
        pub method: &'static str,
        /// `legacy` or `modern` ([`Era`]).
        pub era: &'static str,
        /// `ok` or `error` ([`Outcome`]).
        pub outcome: &'static str,
    }

    pub struct McpMethodLabels {
        pub method: &'static str,
        pub era: &'static str,
    }

    /// `hit` or `miss` ([`CacheResult`]).
    pub struct ResultLabels { pub result: &'static str, }
    /// What the refused limit applies to, e.g. `key`, `agent`, `admin`, `auth_failures`.
    pub struct ScopeLabels { pub scope: &'static str, }
    /// The refusing limit's name ([`ConfiguredLimit::as_str`]).
    pub struct LimitLabels { pub limit: &'static str, }
    /// [`Outcome`] (TLS reloads) or [`TokenOutcome`] (access tokens).
    pub struct OutcomeLabels { pub outcome: &'static str, }
    /// [`ListenerName`]: `public` (`listen`) or `operator` (`http.operator_listen`).
    pub struct ListenerLabels { pub listener: &'static str, }
    /// [`UnreadBody`]: what became of the connection.
    pub struct UnreadBodyLabels { pub outcome: &'static str, }

    pub struct ConnectionRefusedLabels {
        pub listener: &'static str,
        /// The cap that refused the connection: `max_connections` or `max_connections_per_address`.
        pub reason: &'static str,
    }

    pub struct ConnectionTimeoutLabels {
        pub listener: &'static str,
        /// `header_read` (`http.header_read_timeout_ms`) or `idle` (`http.idle_timeout_ms`).
        pub timeout: &'static str,
    }
}

/// A request method as a metric label: the methods of RFC 9110 and PATCH by name, any other `OTHER`, so that
/// clients cannot create series at will.
pub fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "OTHER",
    }
}

label_values! {
    /// A configured limit that refused a request (rate limits are counted in `rate_limited`). The label set is
    /// this enum: clients cannot grow it.
    pub enum ConfiguredLimit {
        /// `limits.max_body_bytes` (413).
        Body => "body",
        /// `limits.max_json_depth` (400).
        JsonDepth => "json_depth",
        /// `limits.max_header_bytes` (431).
        Header => "header",
        /// `limits.max_uri_bytes` (414).
        Uri => "uri",
        /// `limits.max_resource_bytes` (413).
        ResourceSize => "resource_size",
        /// The count and byte quotas per agent and for the gateway (409/413).
        Quota => "quota",
        /// `http.request_timeout_ms` (408).
        Timeout => "timeout",
        /// A template render's output budget, fuel or recursion limit (-32602).
        Template => "template",
        /// The open streams per key or per agent (`streams.max_per_*`, 429).
        Streams => "streams",
        /// The URIs one session or listen may subscribe to (`sessions.max_subscriptions`).
        Subscriptions => "subscriptions",
        /// The live legacy sessions of one key (`sessions.max_per_key`, 429).
        Sessions => "sessions",
        /// The messages of one JSON-RPC batch, or the items of one admin batch.
        Batch => "batch",
        /// The size of a field a key writes (`limits.max_*_bytes`, `limits.max_prompt_arguments`; 413).
        Field => "field",
    }
}

label_values! {
    /// How something that can fail went: an MCP request, a TLS certificate reload.
    pub enum Outcome {
        Ok => "ok",
        Error => "error",
    }
}

label_values! {
    /// The MCP protocol era a request belongs to.
    pub enum Era {
        /// Protocol versions 2024-11-05 … 2025-11-25: the `initialize` handshake, sessions.
        Legacy => "legacy",
        /// Protocol version 2026-07-28: stateless, per-request `_meta`.
        Modern => "modern",
    }
}

label_values! {
    /// What became of an access token presented on the MCP endpoint ([`crate::oauth`]).
    pub enum TokenOutcome {
        Accepted => "accepted",
        Invalid => "invalid",
        Forbidden => "forbidden",
        Unavailable => "unavailable",
    }
}

label_values! {
    /// A registry cache lookup's result.
    pub enum CacheResult {
        Hit => "hit",
        /// Loaded from the database.
        Miss => "miss",
        /// Not cached, and shared the load another request was making of it.
        Joined => "joined",
    }
}

label_values! {
    /// The listener a connection came to.
    pub enum ListenerName {
        /// `listen`.
        Public => "public",
        /// `http.operator_listen`.
        Operator => "operator",
    }
}

label_values! {
    /// What became of a connection whose request was answered before its body was read.
    pub enum UnreadBody {
        /// The body was read and discarded, the connection kept.
        Drained => "drained",
        /// The answer said `Connection: close`.
        Closed => "closed",
    }
}

/// A response extension: this answer is a refusal by `ConfiguredLimit`. The request counter
/// ([`crate::http`]) counts it in `limit_refused`, so every refusal is counted once, where it is answered,
/// whichever layer refused it.
#[derive(Debug, Clone, Copy)]
pub struct Refused(pub ConfiguredLimit);

impl Metrics {
    /// Counts one refusal by `limit` (for refusals that are not an answer of their own, e.g. a batch item).
    pub fn refused(&self, limit: ConfiguredLimit) {
        self.limit_refused.get_or_create(&LimitLabels { limit: limit.as_str() }).inc();
    }
}

/// What can be registered in a [`Registry`]: a metric, a family, or a [`Resolved`] family.
trait Register {
    fn register(&self, registry: &mut Registry, name: &str, help: &str);
}

impl<S, M, C> Register for Family<S, M, C>
where
    Family<S, M, C>: prometheus_client::registry::Metric + Clone,
{
    fn register(&self, registry: &mut Registry, name: &str, help: &str) {
        registry.register(name, help, self.clone());
    }
}

impl<S, M, C> Register for Resolved<S, M, C>
where
    Family<S, M, C>: Register,
{
    fn register(&self, registry: &mut Registry, name: &str, help: &str) {
        self.family().register(registry, name, help);
    }
}

impl Register for Counter {
    fn register(&self, registry: &mut Registry, name: &str, help: &str) {
        registry.register(name, help, self.clone());
    }
}

impl Register for LatencyHistogram {
    fn register(&self, registry: &mut Registry, name: &str, help: &str) {
        registry.register(name, help, self.clone());
    }
}

/// Declares [`Metrics`]: each metric once, with its field, its type, how it is made, and the name and help it
/// is exported with (registered in this order, which is the order of `GET /metrics`).
macro_rules! metrics {
    ($($(#[$attr:meta])* $field:ident: $ty:ty = $new:expr => $name:literal, $help:expr;)*) => {
        /// Every metric hivegate exports, per application.
        pub struct Metrics {
            registry: Mutex<Registry>,
            $($(#[$attr])* pub $field: $ty,)*
        }

        impl Metrics {
            pub fn new() -> Self {
                let metrics = Self { registry: Mutex::new(Registry::with_prefix("hivegate")), $($field: $new,)* };
                {
                    let mut registry = metrics.registry.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                    $(Register::register(&metrics.$field, &mut registry, $name, $help);)*
                }
                metrics
            }
        }
    };
}

metrics! {
    http_requests: Resolved<HttpLabels, ShardedCounter> = Resolved::new(Family::default())
        => "http_requests", "HTTP requests answered, by route template, method and status";
    http_duration: Resolved<HttpRouteLabels, LatencyHistogram> = Resolved::new(Family::default())
        => "http_request_duration_seconds", "Time to answer an HTTP request (streams: until the stream starts)";
    mcp_requests: Resolved<McpLabels, ShardedCounter> = Resolved::new(Family::default())
        => "mcp_requests", "MCP requests that passed authentication, by method, era and outcome";
    mcp_duration: Resolved<McpMethodLabels, LatencyHistogram> = Resolved::new(Family::default())
        => "mcp_request_duration_seconds", "Time to answer an MCP request, by method and era";
    cache_lookups: Family<ResultLabels, ShardedCounter> = Family::default()
        => "cache_lookups", "Registry cache lookups, by result";
    rate_limited: Family<ScopeLabels, Counter> = Family::default()
        => "rate_limited", "Requests refused by a rate limit, by the limit's scope";
    limit_refused: Family<LimitLabels, Counter> = Family::default()
        => "limit_refused",
        "Requests refused by a configured limit (body, JSON depth, header, URI, sizes, quotas, timeout, ...)";
    notifications_sent: Counter = Counter::default()
        => "notifications_sent", "Notifications written to SSE streams";
    /// Client addresses locked out for failed authentications (each lockout once).
    auth_lockouts: Counter = Counter::default()
        => "auth_lockouts",
        "Client addresses locked out for failed authentications (rate_limits.failed_auth_attempts)";
    /// Access tokens presented on the MCP endpoint, by outcome ([`crate::oauth`]).
    oauth_tokens: Family<OutcomeLabels, Counter> = Family::default()
        => "oauth_tokens",
        "Access tokens presented on the MCP endpoint, by outcome (accepted, invalid, forbidden, unavailable)";
    /// Seconds from a change's commit to its notification being written to a stream.
    notification_lag: LatencyHistogram = LatencyHistogram::default()
        => "notification_lag_seconds", "Time from a change's commit to its notification on a stream";
    /// Changed TLS certificate files taken (`ok`) or refused (`error`).
    tls_reloads: Family<OutcomeLabels, Counter> = Family::default()
        => "tls_certificate_reloads",
        "Changed TLS certificate files, by outcome: taken (ok) or refused, the previous kept (error)";
    /// Connections open, by listener ([`crate::http::admission`]).
    connections_open: Family<ListenerLabels, Gauge> = Family::default()
        => "connections_open", "Connections open, by listener";
    /// Connections refused by a cap, by listener and cap.
    connections_refused: Family<ConnectionRefusedLabels, Counter> = Family::default()
        => "connections_refused",
        "Connections refused at once by a cap (max_connections, max_connections_per_address), by listener";
    /// Connections closed by a timeout, by listener and timeout ([`crate::http::connection`]).
    connections_timed_out: Family<ConnectionTimeoutLabels, Counter> = Family::default()
        => "connections_timed_out", "Connections closed by a timeout (header_read, idle), by listener";
    /// Failed `accept` calls (out of file descriptors or memory), by listener.
    accept_errors: Family<ListenerLabels, Counter> = Family::default()
        => "accept_errors",
        "Connections the listener failed to accept (out of file descriptors or memory), by listener";
    /// HTTP/1 requests answered without their body having been read, by what became of the connection.
    unread_bodies: Family<UnreadBodyLabels, Counter> = Family::default()
        => "unread_bodies",
        "HTTP/1 requests answered before their body was read: the body drained and the connection kept \
         (drained), or answered with Connection: close (closed)";
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Adds what is read at scrape time from the running application.
    pub fn register_levels(&self, levels: Levels) {
        self.registry.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).register_collector(Box::new(levels));
    }

    /// The exposition text.
    pub fn encode(&self) -> Result<String, fmt::Error> {
        let mut text = String::new();
        let registry = self.registry.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        prometheus_client::encoding::text::encode(&mut text, &registry)?;
        Ok(text)
    }
}

/// The levels read at scrape time.
pub struct Levels {
    pub hub: Arc<Hub>,
    pub registry: Arc<RegistryCache>,
    pub audit: Arc<AuditStats>,
    pub store: Arc<dyn Store>,
}

impl fmt::Debug for Levels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Levels").finish_non_exhaustive()
    }
}

impl Collector for Levels {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        use std::sync::atomic::Ordering::Relaxed;
        let pool = self.store.pool_usage();
        let levels: [(&str, &str, Level); 15] = [
            (
                "streams_open",
                "SSE streams open on this replica (legacy GET and subscriptions/listen)",
                Level::Gauge(to_i64(self.hub.open_streams() as u64)),
            ),
            (
                "cache_bytes",
                "Estimated bytes held by the registry cache",
                Level::Gauge(to_i64(self.registry.bytes() as u64)),
            ),
            (
                "cache_max_bytes",
                "The registry cache's budget in bytes (cache.max_bytes, or its default sized by memory)",
                Level::Gauge(to_i64(self.registry.max_bytes() as u64)),
            ),
            (
                "audit_queue_capacity",
                "MCP audit records the queue holds at most (audit.queue_capacity, or its default sized by memory)",
                Level::Gauge(to_i64(self.audit.capacity.load(Relaxed))),
            ),
            (
                "audit_queue_depth",
                "MCP audit records accepted but not yet written",
                Level::Gauge(to_i64(self.audit.backlog())),
            ),
            (
                "audit_stream_agents",
                "Agents whose audit chain head the writer's current stream holds in memory",
                Level::Gauge(to_i64(self.audit.stream_agents.load(Relaxed))),
            ),
            ("db_pool_connections", "Database connections open", Level::Gauge(i64::from(pool.size))),
            ("db_pool_idle_connections", "Database connections open and idle", Level::Gauge(to_i64(pool.idle as u64))),
            ("db_pool_max_connections", "Database connections allowed", Level::Gauge(i64::from(pool.max))),
            (
                "audit_write_lag_seconds",
                "How long the oldest MCP audit record of the last batch written had waited when it was stored",
                Level::Micros(self.audit.lag_us.load(Relaxed)),
            ),
            (
                "audit_write_lag_max_seconds",
                "The longest an MCP audit record waited to be stored since start-up",
                Level::Micros(self.audit.max_lag_us.load(Relaxed)),
            ),
            ("audit_records_written", "MCP audit records written", Level::Counter(self.audit.written.load(Relaxed))),
            (
                "audit_records_dropped",
                "MCP audit records dropped because the queue was full or the database refused them",
                Level::Counter(self.audit.dropped.load(Relaxed)),
            ),
            (
                "audit_batches_failed",
                "MCP audit batches that failed to write (retried, or split when the database refused a value)",
                Level::Counter(self.audit.failed_batches.load(Relaxed)),
            ),
            (
                "audit_requests_rejected",
                "MCP requests refused with 503 because the audit queue was full (audit.on_overload = \"reject\")",
                Level::Counter(self.audit.rejected.load(Relaxed)),
            ),
        ];
        for (name, help, level) in levels {
            match level {
                Level::Gauge(value) => encode_one(&mut encoder, name, help, ConstGauge::new(value))?,
                Level::Micros(micros) => encode_one(&mut encoder, name, help, ConstGauge::new(micros as f64 / 1e6))?,
                Level::Counter(value) => encode_one(&mut encoder, name, help, ConstCounter::new(value))?,
            }
        }
        Ok(())
    }
}

/// A level read at scrape time, and what it is exported as.
enum Level {
    /// A gauge.
    Gauge(i64),
    /// A gauge in seconds, read in microseconds.
    Micros(u64),
    /// A counter kept outside the registry.
    Counter(u64),
}

/// Encodes `metric` as the metric `name`.
fn encode_one(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric: impl EncodeMetric,
) -> Result<(), fmt::Error> {
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// `GET /metrics`.
pub async fn handler(State(state): State<AppState>) -> Response {
    match state.metrics.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, HeaderValue::from_static(TEXT_FORMAT))], text).into_response(),
        Err(_) => axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}
