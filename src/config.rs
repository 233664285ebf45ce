//! Configuration: defaults, then the TOML file, then `HIVEGATE_*` environment variables.
//!
//! Every key of `config/hivegate.toml` can be set as `HIVEGATE_<SECTION>__<KEY>`; the top-level keys as
//! `HIVEGATE_LISTEN`, `HIVEGATE_DATABASE_URL` and `HIVEGATE_ADMIN_TOKEN`. Unknown keys are errors, so a
//! typo is reported at start-up with the key's name instead of being silently ignored.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

/// The file read when `--config` is not given and the file exists.
pub const DEFAULT_CONFIG_PATH: &str = "config/hivegate.toml";
/// The database used when none is configured: an embedded SQLite file in the working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://hivegate.db?mode=rwc";

#[derive(Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address the HTTP server binds.
    pub listen: SocketAddr,
    /// `sqlite://...` or `postgres://...`.
    pub database_url: DatabaseUrl,
    /// The operator token; when set it is the only one, and none is generated or stored.
    #[serde(serialize_with = "redact")]
    pub admin_token: Option<SecretString>,
    pub database: DatabaseConfig,
    pub keys: KeysConfig,
    pub http: HttpConfig,
    pub tls: TlsConfig,
    pub limits: LimitsConfig,
    pub mcp: McpConfig,
    pub events: EventsConfig,
    pub cache: CacheConfig,
    pub sessions: SessionsConfig,
    pub streams: StreamsConfig,
    pub audit: AuditConfig,
    pub rate_limits: RateLimitsConfig,
    pub log: LogConfig,
    pub telemetry: TelemetryConfig,
    pub oauth: crate::oauth::config::OAuthConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            database_url: DatabaseUrl(DEFAULT_DATABASE_URL.to_owned()),
            admin_token: None,
            database: DatabaseConfig::default(),
            keys: KeysConfig::default(),
            http: HttpConfig::default(),
            tls: TlsConfig::default(),
            limits: LimitsConfig::default(),
            mcp: McpConfig::default(),
            events: EventsConfig::default(),
            cache: CacheConfig::default(),
            sessions: SessionsConfig::default(),
            audit: AuditConfig::default(),
            streams: StreamsConfig::default(),
            rate_limits: RateLimitsConfig::default(),
            log: LogConfig::default(),
            telemetry: TelemetryConfig::default(),
            oauth: crate::oauth::config::OAuthConfig::default(),
        }
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseConfig {
    /// Connections in the pool (PostgreSQL; SQLite uses one writer plus this many readers).
    pub max_connections: u32,
    /// How long a request waits for a pooled connection before it is answered 503.
    pub acquire_timeout_ms: u64,
    /// How long start-up keeps retrying an unreachable database before it gives up with an error.
    pub startup_timeout_secs: u64,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self { max_connections: 16, acquire_timeout_ms: 3000, startup_timeout_secs: 60 }
    }
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct KeysConfig {
    /// Optional secret mixed into key digests (HMAC-SHA-256). Changing it invalidates every key.
    #[serde(serialize_with = "redact")]
    pub pepper: Option<SecretString>,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Longest time one non-streaming request may take before it is answered 408.
    pub request_timeout_ms: u64,
    /// On SIGTERM/SIGINT, how long in-flight requests get to finish.
    pub shutdown_grace_ms: u64,
    /// A second address, plain HTTP, serving only the operator endpoints (`/metrics`, `/healthz`, `/readyz`,
    /// `/admin/v1`); when set, `/metrics` is no longer served on `listen`.
    pub operator_listen: Option<SocketAddr>,
    /// Whether `listen` serves the admin API too (agents use their `registry` keys there); `false` needs
    /// `operator_listen`.
    pub public_admin: bool,
    /// How long a client has to send a request's head (request line and header fields): from the connection's
    /// start for its first request, from the head's first byte for the next ones. Beyond it the connection is
    /// closed ([`crate::http::connection`]).
    pub header_read_timeout_ms: u64,
    /// How long a connection with no request in flight (nothing being answered, no stream open) stays open
    /// waiting for the next one.
    pub idle_timeout_ms: u64,
    /// Connections each listener keeps open at once; one more is refused at once. 0: no cap.
    pub max_connections: u32,
    /// Connections one client address may keep open at once on each listener; a peer in
    /// `rate_limits.trusted_proxies` is not capped (its clients are many). 0: no cap.
    pub max_connections_per_address: u32,
    /// The origin clients reach `listen` at (`https://mcp.example.com`, behind a proxy or not): an agent's
    /// canonical MCP URL, the audience its access tokens must name, is `{public_url}/{agent_id}/mcp`. Unset:
    /// `http://` (`https://` with `[tls]`) and the bound address, fit for local use only. Never taken from
    /// a request's `Host`.
    pub public_url: Option<String>,
    /// How long a console session (`/console/`) lasts without a request before it must sign in again.
    pub console_idle_timeout_secs: u64,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            request_timeout_ms: 30_000,
            shutdown_grace_ms: 10_000,
            operator_listen: None,
            public_admin: true,
            header_read_timeout_ms: 10_000,
            idle_timeout_ms: 75_000,
            max_connections: 16_384,
            max_connections_per_address: 512,
            public_url: None,
            console_idle_timeout_secs: 1800,
        }
    }
}

/// Native TLS on `listen` ([`crate::tls`]): both files or neither; without them `listen` serves plain HTTP.
#[derive(Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// The certificate chain (PEM, the server's certificate first).
    pub cert_path: Option<PathBuf>,
    /// The certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_path: Option<PathBuf>,
    /// How often both files are re-read; a changed, valid pair is used for new connections.
    pub reload_interval_ms: u64,
    /// How long a client may take to finish its TLS handshake before the connection is closed.
    pub handshake_timeout_ms: u64,
}

impl Default for TlsConfig {
    fn default() -> Self {
        Self { cert_path: None, key_path: None, reload_interval_ms: 1_000, handshake_timeout_ms: 10_000 }
    }
}

impl TlsConfig {
    /// Whether `listen` serves HTTPS.
    pub fn enabled(&self) -> bool {
        self.cert_path.is_some()
    }

    fn validate(&self) -> Result<(), ConfigError> {
        match (&self.cert_path, &self.key_path) {
            (Some(_), None) => Err(ConfigError::Invalid {
                key: "tls.key_path",
                message: "must be set when tls.cert_path is (both or neither)".to_owned(),
            }),
            (None, Some(_)) => Err(ConfigError::Invalid {
                key: "tls.cert_path",
                message: "must be set when tls.key_path is (both or neither)".to_owned(),
            }),
            _ => Ok(()),
        }
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Largest request body accepted on any endpoint (413 beyond).
    pub max_body_bytes: usize,
    /// Largest content of one resource (text bytes or decoded blob bytes).
    pub max_resource_bytes: usize,
    /// Resources one agent may hold (0: unlimited).
    pub max_resources_per_agent: u64,
    /// Resource templates one agent may hold: 1 to [`MAX_TEMPLATES_PER_AGENT`] (a read is matched against
    /// all of them).
    pub max_templates_per_agent: u64,
    /// Prompts one agent may hold (0: unlimited).
    pub max_prompts_per_agent: u64,
    /// Stored bytes of one agent together (0: unlimited): every field of its resources (content, URI, name,
    /// title, description, MIME type, annotations, `_meta`), templates and prompts, and its own name and
    /// description.
    pub max_agent_bytes: u64,
    /// Stored bytes of every agent together, counted as for `max_agent_bytes` (0: unlimited).
    pub max_total_bytes: u64,

    /// How deeply arrays and objects may nest in a request body (MCP and admin): 1 to [`MAX_JSON_DEPTH`].
    pub max_json_depth: usize,
    /// Bytes of a request's header fields together, each counted as `name: value` and a line break (431
    /// beyond).
    pub max_header_bytes: usize,
    /// Bytes of a request's target (path and query; 414 beyond).
    pub max_uri_bytes: usize,

    /// Bytes of a `name` (resource, template, prompt argument, agent, key; 413 beyond, as for every field
    /// limit below).
    pub max_name_bytes: usize,
    /// Bytes of a `title`.
    pub max_title_bytes: usize,
    /// Bytes of a `description` (an agent's is every modern answer's `instructions`).
    pub max_description_bytes: usize,
    /// Bytes of a `mimeType`.
    pub max_mime_type_bytes: usize,
    /// Bytes of a `_meta` object, as compact JSON.
    pub max_meta_bytes: usize,
    /// Bytes of an `annotations` object, as compact JSON.
    pub max_annotations_bytes: usize,
    /// Bytes of a resource template's `uriTemplate`.
    pub max_uri_template_bytes: usize,
    /// Bytes of one MiniJinja source: a resource template's `text`, a templated field of a prompt message.
    pub max_template_text_bytes: usize,
    /// Bytes of a prompt's `arguments` and `messages` together, as compact JSON.
    pub max_prompt_bytes: usize,
    /// Bytes of one prompt argument's `completions`, as compact JSON.
    pub max_completions_bytes: usize,
    /// Arguments one prompt may declare.
    pub max_prompt_arguments: usize,
    /// Bytes of the items of one list page (MCP and admin): a page that would grow past it ends early, with
    /// a cursor; it always holds at least one item.
    pub max_page_bytes: usize,
    /// Renders that leave the request's task (those past the quick fuel, on the blocking pool) one agent may
    /// run at once; its others wait for a turn, so that it cannot take every core from the other agents.
    pub max_renders_per_agent: usize,
    /// Such renders all agents may run at once (default: the number of CPUs).
    pub max_renders: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 8 * 1024 * 1024,
            max_resource_bytes: 4 * 1024 * 1024,
            max_resources_per_agent: 100_000,
            max_templates_per_agent: 1_000,
            max_prompts_per_agent: 1_000,
            max_agent_bytes: 1024 * 1024 * 1024,
            max_total_bytes: 0,

            max_json_depth: 64,
            max_header_bytes: 32 * 1024,
            max_uri_bytes: 8 * 1024,

            max_name_bytes: 1024,
            max_title_bytes: 1024,
            max_description_bytes: 16 * 1024,
            max_mime_type_bytes: 256,
            max_meta_bytes: 16 * 1024,
            max_annotations_bytes: 1024,
            max_uri_template_bytes: 2048,
            max_template_text_bytes: 64 * 1024,
            max_prompt_bytes: 256 * 1024,
            max_completions_bytes: 64 * 1024,
            max_prompt_arguments: 64,
            max_page_bytes: 1024 * 1024,
            max_renders_per_agent: 1,
            max_renders: std::thread::available_parallelism().map_or(2, std::num::NonZero::get),
        }
    }
}

/// The most resource templates an agent may be allowed: every read of a URI no resource has is matched
/// against all of the agent's templates.
pub const MAX_TEMPLATES_PER_AGENT: u64 = 1_000;

/// The deepest nesting `limits.max_json_depth` may allow: the JSON parser's own recursion limit.
pub const MAX_JSON_DEPTH: usize = 127;

impl LimitsConfig {
    /// The size limit of each field a key can write.
    pub fn fields(&self) -> crate::domain::limits::FieldLimits {
        crate::domain::limits::FieldLimits {
            name: self.max_name_bytes,
            title: self.max_title_bytes,
            description: self.max_description_bytes,
            mime_type: self.max_mime_type_bytes,
            meta: self.max_meta_bytes,
            annotations: self.max_annotations_bytes,
            uri_template: self.max_uri_template_bytes,
            template_text: self.max_template_text_bytes,
            prompt: self.max_prompt_bytes,
            completions: self.max_completions_bytes,
            prompt_arguments: self.max_prompt_arguments,
        }
    }

    /// The quotas the store enforces.
    pub fn quotas(&self) -> crate::store::Quotas {
        crate::store::Quotas {
            max_resources_per_agent: self.max_resources_per_agent,
            max_templates_per_agent: self.max_templates_per_agent,
            max_prompts_per_agent: self.max_prompts_per_agent,
            max_agent_bytes: self.max_agent_bytes,
            max_total_bytes: self.max_total_bytes,
        }
    }
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// `ttlMs` given to modern clients for agents that set no `cacheTtlMs`.
    pub default_cache_ttl_ms: u64,
    /// Extra `Host` names accepted besides the loopback names (DNS-rebinding protection).
    pub allowed_hosts: Vec<String>,
    /// Extra `Origin`s accepted besides loopback origins; a request with another `Origin` gets 403.
    pub allowed_origins: Vec<String>,
}

/// The audit log of MCP requests (admin changes are always audited, in their own transaction).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    /// Record every MCP request.
    pub mcp_requests: bool,
    /// Records waiting to be written at most; beyond this new records are dropped (and counted).
    pub queue_capacity: usize,
    /// Records written per transaction at most.
    pub batch_size: usize,
    /// How long a record may wait before its batch is written.
    pub flush_interval_ms: u64,
    /// Records (admin and MCP) older than this many days are pruned; 0 keeps them forever.
    pub retention_days: u64,
    /// Per-agent exceptions to `retention_days` (agent id → days; 0 keeps that agent's records forever).
    pub agent_retention_days: std::collections::BTreeMap<String, u64>,
    /// What an MCP request meets when the queue is full: served and its record dropped, or refused (503).
    pub on_overload: OnOverload,
}

/// What happens to an MCP request while the audit queue is full.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnOverload {
    /// Serve it; its record is dropped (counted and logged).
    #[default]
    Drop,
    /// Refuse it: 503 with `Retry-After`, JSON-RPC -31503.
    Reject,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            mcp_requests: true,
            queue_capacity: 65_536,
            batch_size: 5_000,
            flush_interval_ms: 200,
            retention_days: 90,
            agent_retention_days: std::collections::BTreeMap::new(),
            on_overload: OnOverload::Drop,
        }
    }
}

impl AuditConfig {
    /// How long `agent`'s records are kept; `None` is forever. `stored` is the agent's own
    /// `auditRetentionDays` (admin API), which wins over this configuration.
    pub fn retention_of(&self, agent: &str, stored: Option<u32>) -> Option<std::time::Duration> {
        let days = stored
            .map(u64::from)
            .or_else(|| self.agent_retention_days.get(agent).copied())
            .unwrap_or(self.retention_days);
        (days > 0).then(|| std::time::Duration::from_secs(days.saturating_mul(24 * 60 * 60)))
    }
}

/// Event retention: how far back `Last-Event-ID` can resume (an older one gets a resync instead).
#[derive(Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct EventsConfig {
    /// Events older than this are pruned.
    pub retention_secs: u64,
    /// At most this many of each agent's latest events are kept.
    pub retention_count: u64,
    /// How often each replica runs the pruning of old events and expired sessions.
    pub prune_interval_ms: u64,
}

impl Default for EventsConfig {
    fn default() -> Self {
        Self { retention_secs: 24 * 60 * 60, retention_count: 10_000, prune_interval_ms: 60_000 }
    }
}

/// The registry cache: each agent's list pages, resource contents, prompts and templates, kept in memory so
/// that requests do not go to the database. Its memory is bounded by `max_bytes`, whatever the registries'
/// size; what does not fit is read from the database.
#[derive(Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Estimated bytes the cache may hold across all agents (0: nothing is cached). A value larger than an
    /// eighth of this is never cached; when full, whole agents' registries are dropped until half is free.
    pub max_bytes: u64,
    /// Resource contents larger than this are always read from the database.
    pub max_content_bytes: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            max_bytes: crate::registry::cache::DEFAULT_MAX_BYTES as u64,
            max_content_bytes: crate::registry::cache::DEFAULT_MAX_CONTENT_BYTES as u64,
        }
    }
}

/// Legacy Streamable HTTP sessions (protocol versions 2024-11-05 … 2025-11-25).
#[derive(Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionsConfig {
    /// A session without requests or an open stream for this long expires (404 afterwards).
    pub idle_timeout_secs: u64,
    /// URIs one session may subscribe to, and one `subscriptions/listen` may name.
    pub max_subscriptions: u32,
    /// Live sessions one key may hold, on all replicas together (counted in the database); `initialize`
    /// beyond it is 429. Ended and expired sessions do not count.
    pub max_per_key: u32,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        Self { idle_timeout_secs: 30 * 60, max_subscriptions: 1000, max_per_key: 1000 }
    }
}

/// Server-sent event streams: legacy `GET` streams and modern `subscriptions/listen` streams.
#[derive(Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StreamsConfig {
    /// How often an idle stream sends an SSE comment, so proxies and clients do not time it out.
    pub keep_alive_ms: u64,
    /// Open streams one key may hold on one replica (429 beyond).
    pub max_per_key: u32,
    /// Open streams one agent's keys may hold together on one replica (429 beyond).
    pub max_per_agent: u32,
    /// Changes queued for one stream whose client reads slowly; beyond it a legacy stream is closed (the
    /// client resumes with `Last-Event-ID`) and a modern one catches up from the event table.
    pub queue_capacity: u32,
}

impl Default for StreamsConfig {
    fn default() -> Self {
        Self { keep_alive_ms: 15_000, max_per_key: 100, max_per_agent: 10_000, queue_capacity: 256 }
    }
}

/// Rate limits ([`crate::guard`]), kept by each replica on its own. A rate of 0 requests per second is
/// unlimited; otherwise its burst must be at least 1.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitsConfig {
    /// Requests per second all keys of an agent get together when the agent sets no `rateLimit`.
    pub agent_requests_per_second: u32,
    /// Requests at once those keys may send together (the bucket's size).
    pub agent_burst: u32,
    /// Requests per second each key gets on its own, within its agent's limit.
    pub key_requests_per_second: u32,
    /// Requests at once one key may send.
    pub key_burst: u32,
    /// Requests per second on the admin API for each credential (the operator token, each registry key).
    pub admin_requests_per_second: u32,
    /// Admin requests at once per credential.
    pub admin_burst: u32,
    /// `prompts/get` calls per second each key gets, besides its requests (rendering is the costly part).
    pub prompts_get_per_second: u32,
    pub prompts_get_burst: u32,
    /// `completion/complete` calls per second each key gets, besides its requests.
    pub completion_per_second: u32,
    pub completion_burst: u32,
    /// Bytes of `resources/read` answers per second each key gets; a read is admitted while the key's budget
    /// is not overdrawn and then charged with its answer's size.
    pub read_bytes_per_second: u32,
    pub read_bytes_burst: u32,
    /// Failed authentications (401) one client address may have within `failed_auth_window_secs` before its
    /// requests are refused (429) until the window ends; 0 turns this off.
    pub failed_auth_attempts: u32,
    /// The window of `failed_auth_attempts`, from the client's first failure.
    pub failed_auth_window_secs: u64,
    /// Proxies (CIDR networks) whose `X-Forwarded-For` is believed: behind one, the client is the rightmost
    /// entry that is not a trusted proxy.
    pub trusted_proxies: Vec<ipnet::IpNet>,
}

impl Default for RateLimitsConfig {
    fn default() -> Self {
        Self {
            agent_requests_per_second: 200,
            agent_burst: 400,
            key_requests_per_second: 100,
            key_burst: 200,
            admin_requests_per_second: 100,
            admin_burst: 200,
            prompts_get_per_second: 0,
            prompts_get_burst: 0,
            completion_per_second: 0,
            completion_burst: 0,
            read_bytes_per_second: 0,
            read_bytes_burst: 0,
            failed_auth_attempts: 20,
            failed_auth_window_secs: 60,
            trusted_proxies: Vec::new(),
        }
    }
}

/// The longest `rate_limits.failed_auth_window_secs`: a day.
const MAX_FAILED_AUTH_WINDOW_SECS: u64 = 24 * 60 * 60;

impl RateLimitsConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let rates = [
            ("rate_limits.agent_burst", self.agent_requests_per_second, self.agent_burst),
            ("rate_limits.key_burst", self.key_requests_per_second, self.key_burst),
            ("rate_limits.admin_burst", self.admin_requests_per_second, self.admin_burst),
            ("rate_limits.prompts_get_burst", self.prompts_get_per_second, self.prompts_get_burst),
            ("rate_limits.completion_burst", self.completion_per_second, self.completion_burst),
            ("rate_limits.read_bytes_burst", self.read_bytes_per_second, self.read_bytes_burst),
        ];
        for (key, per_second, burst) in rates {
            if per_second > 0 && burst == 0 {
                return Err(ConfigError::Invalid {
                    key,
                    message: "must be at least 1 when its requests_per_second is set (0 requests per second is \
                              unlimited)"
                        .to_owned(),
                });
            }
        }
        if self.failed_auth_attempts > 0 && !(1..=MAX_FAILED_AUTH_WINDOW_SECS).contains(&self.failed_auth_window_secs) {
            return Err(ConfigError::Invalid {
                key: "rate_limits.failed_auth_window_secs",
                message: format!(
                    "must be between 1 and {MAX_FAILED_AUTH_WINDOW_SECS} when failed_auth_attempts is set (0 \
                     attempts turns the check off)"
                ),
            });
        }
        Ok(())
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `pretty` for people, `json` for log pipelines.
    pub format: LogFormat,
    /// A tracing filter, e.g. `info` or `hivegate=debug,sqlx=warn`; `RUST_LOG` wins when set.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self { format: LogFormat::Pretty, level: "info".to_owned() }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Pretty,
    Json,
}

/// OpenTelemetry traces (the `otel` cargo feature). The section exists in every build, so one configuration
/// file serves both; a build without the feature refuses an endpoint instead of ignoring it.
#[derive(Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP base URL (`http://collector:4318`); spans go to `<url>/v1/traces` as
    /// protobuf. Unset: no traces are exported.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the exported spans.
    pub service_name: String,
    /// Share of new traces recorded (0.0 to 1.0); a request that comes with trace context follows its
    /// caller's sampling decision.
    pub sample_ratio: f64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self { otlp_endpoint: None, service_name: "hivegate".to_owned(), sample_ratio: 1.0 }
    }
}

impl TelemetryConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if let Some(endpoint) = &self.otlp_endpoint {
            if !cfg!(feature = "otel") {
                return Err(ConfigError::Invalid {
                    key: "telemetry.otlp_endpoint",
                    message: "this build has no OpenTelemetry support (build with `--features otel`), \
                              or leave the key unset"
                        .to_owned(),
                });
            }
            let is_http = endpoint.starts_with("http://") || endpoint.starts_with("https://");
            if !is_http || endpoint.parse::<axum::http::Uri>().is_err() {
                return Err(ConfigError::Invalid {
                    key: "telemetry.otlp_endpoint",
                    message: format!("{endpoint:?} is not an http:// or https:// URL"),
                });
            }
        }
        if self.service_name.trim().is_empty() {
            return Err(ConfigError::Invalid {
                key: "telemetry.service_name",
                message: "must not be empty".to_owned(),
            });
        }
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            return Err(ConfigError::Invalid {
                key: "telemetry.sample_ratio",
                message: "must be between 0.0 and 1.0".to_owned(),
            });
        }
        Ok(())
    }
}

/// A database URL whose `Debug` and `Display` hide the password.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct DatabaseUrl(String);

impl DatabaseUrl {
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_postgres(&self) -> bool {
        self.0.starts_with("postgres://") || self.0.starts_with("postgresql://")
    }

    pub fn is_sqlite(&self) -> bool {
        self.0.starts_with("sqlite:")
    }

    /// The URL with any password replaced by `***`.
    pub fn redacted(&self) -> String {
        let url = &self.0;
        let mut redacted = match (url.find("://"), url.rfind('@')) {
            (Some(scheme_end), Some(at)) if at > scheme_end => {
                let userinfo = &url[scheme_end + 3..at];
                match userinfo.find(':') {
                    Some(colon) => format!("{}{}:***{}", &url[..scheme_end + 3], &userinfo[..colon], &url[at..]),
                    None => url.clone(),
                }
            }
            _ => url.clone(),
        };
        // A password can also be a query parameter (`?password=...`, libpq style).
        if let Some(query_start) = redacted.find('?') {
            let (base, query) = redacted.split_at(query_start + 1);
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, _)) if name.eq_ignore_ascii_case("password") => format!("{name}=***"),
                    _ => pair.to_owned(),
                })
                .collect();
            redacted = format!("{base}{}", query.join("&"));
        }
        redacted
    }
}

/// Serialised with the password hidden (`hivegate config check` prints it).
impl Serialize for DatabaseUrl {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.redacted())
    }
}

/// A secret serialised as `"(redacted)"` when set (`hivegate config check` prints the configuration).
fn redact<S: serde::Serializer>(secret: &Option<SecretString>, serializer: S) -> Result<S::Ok, S::Error> {
    match secret {
        Some(_) => serializer.serialize_some("(redacted)"),
        None => serializer.serialize_none(),
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.redacted())
    }
}

impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// A configuration problem, naming the offending key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read configuration: {0}")]
    Load(String),
    #[error("invalid configuration value for `{key}`: {message}")]
    Invalid { key: &'static str, message: String },
}

/// A loaded configuration with its layers: the defaults, the file (when one was read) and the environment.
pub struct Loaded {
    pub config: Config,
    /// The merged layers; [`Figment::find_metadata`] says which one a key's value came from.
    pub figment: Figment,
    /// The file read, if any.
    pub file: Option<PathBuf>,
}

/// Each problem of `error` on a line of its own, naming its key and where the key was set. An unknown key
/// lists the known ones (figment's own message quotes that list twice over).
fn describe(error: figment::Error) -> String {
    error
        .into_iter()
        .map(|error| {
            let key = error.path.join(".");
            let origin = error.metadata.as_ref().map(|metadata| match &metadata.source {
                Some(figment::Source::File(path)) => format!(" in {}", path.display()),
                _ => format!(" in {}", metadata.name),
            });
            let origin = origin.unwrap_or_default();
            match &error.kind {
                figment::error::Kind::UnknownField(found, expected) => {
                    let at = key.rsplit_once('.').map(|(section, _)| format!(" in [{section}]")).unwrap_or_default();
                    format!("unknown key `{found}`{at}{origin}; the known keys are {}", expected.join(", "))
                }
                kind => format!("{kind} for key `{key}`{origin}"),
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The top-level keys an environment variable can set; section keys (`HIVEGATE_<SECTION>__<KEY>`) are
/// checked against the sections. Other `HIVEGATE_*` variables (`HIVEGATE_CONFIG`, tooling's own) are not
/// configuration and are left alone.
const TOP_LEVEL_KEYS: [&str; 3] = ["listen", "database_url", "admin_token"];

impl Config {
    /// Load from `path` (or the default file when present), then the environment; then validate.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_with_sources(path).map(|loaded| loaded.config)
    }

    /// [`Config::load`], keeping where each value came from (for `hivegate config check`).
    pub fn load_with_sources(path: Option<&Path>) -> Result<Loaded, ConfigError> {
        let file = match path {
            Some(path) => {
                if !path.exists() {
                    return Err(ConfigError::Load(format!("config file {} does not exist", path.display())));
                }
                Some(path.to_owned())
            }
            None => Some(PathBuf::from(DEFAULT_CONFIG_PATH)).filter(|path| path.exists()),
        };
        // The defaults as a layer of their own, so that a value's metadata tells default from file.
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(file) = &file {
            figment = figment.merge(Toml::file_exact(file));
        }
        let env = Env::prefixed("HIVEGATE_")
            .split("__")
            .filter(|key| key.as_str().contains('.') || TOP_LEVEL_KEYS.iter().any(|name| key == *name));
        let figment = figment.merge(env);
        let config: Config = figment.extract().map_err(|error| ConfigError::Load(describe(error)))?;
        config.validate()?;
        Ok(Loaded { config, figment, file })
    }

    /// Checks that no value is out of range; each error names its key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.database_url.is_postgres() && !self.database_url.is_sqlite() {
            return Err(ConfigError::Invalid {
                key: "database_url",
                message: format!("{} is neither sqlite://... nor postgres://...", self.database_url),
            });
        }
        if let Some(token) = &self.admin_token
            && token.expose_secret().len() < 16
        {
            return Err(ConfigError::Invalid {
                key: "admin_token",
                message: "the operator token must be at least 16 characters".to_owned(),
            });
        }
        if !(1..=MAX_TEMPLATES_PER_AGENT).contains(&self.limits.max_templates_per_agent) {
            return Err(ConfigError::Invalid {
                key: "limits.max_templates_per_agent",
                message: format!("must be between 1 and {MAX_TEMPLATES_PER_AGENT}"),
            });
        }
        if !(1..=MAX_JSON_DEPTH).contains(&self.limits.max_json_depth) {
            return Err(ConfigError::Invalid {
                key: "limits.max_json_depth",
                message: format!("must be between 1 and {MAX_JSON_DEPTH}"),
            });
        }
        let positive: [(&'static str, u64); 40] = [
            ("audit.queue_capacity", self.audit.queue_capacity as u64),
            ("audit.batch_size", self.audit.batch_size as u64),
            ("audit.flush_interval_ms", self.audit.flush_interval_ms),
            ("database.max_connections", u64::from(self.database.max_connections)),
            ("database.acquire_timeout_ms", self.database.acquire_timeout_ms),
            ("http.request_timeout_ms", self.http.request_timeout_ms),
            ("http.shutdown_grace_ms", self.http.shutdown_grace_ms),
            ("http.header_read_timeout_ms", self.http.header_read_timeout_ms),
            ("http.idle_timeout_ms", self.http.idle_timeout_ms),
            ("http.console_idle_timeout_secs", self.http.console_idle_timeout_secs),
            ("tls.reload_interval_ms", self.tls.reload_interval_ms),
            ("tls.handshake_timeout_ms", self.tls.handshake_timeout_ms),
            ("limits.max_body_bytes", self.limits.max_body_bytes as u64),
            ("limits.max_resource_bytes", self.limits.max_resource_bytes as u64),
            ("limits.max_header_bytes", self.limits.max_header_bytes as u64),
            ("limits.max_uri_bytes", self.limits.max_uri_bytes as u64),
            ("limits.max_name_bytes", self.limits.max_name_bytes as u64),
            ("limits.max_title_bytes", self.limits.max_title_bytes as u64),
            ("limits.max_description_bytes", self.limits.max_description_bytes as u64),
            ("limits.max_mime_type_bytes", self.limits.max_mime_type_bytes as u64),
            ("limits.max_meta_bytes", self.limits.max_meta_bytes as u64),
            ("limits.max_annotations_bytes", self.limits.max_annotations_bytes as u64),
            ("limits.max_uri_template_bytes", self.limits.max_uri_template_bytes as u64),
            ("limits.max_template_text_bytes", self.limits.max_template_text_bytes as u64),
            ("limits.max_prompt_bytes", self.limits.max_prompt_bytes as u64),
            ("limits.max_completions_bytes", self.limits.max_completions_bytes as u64),
            ("limits.max_prompt_arguments", self.limits.max_prompt_arguments as u64),
            ("limits.max_page_bytes", self.limits.max_page_bytes as u64),
            ("limits.max_renders_per_agent", self.limits.max_renders_per_agent as u64),
            ("limits.max_renders", self.limits.max_renders as u64),
            ("events.retention_secs", self.events.retention_secs),
            ("events.retention_count", self.events.retention_count),
            ("events.prune_interval_ms", self.events.prune_interval_ms),
            ("sessions.idle_timeout_secs", self.sessions.idle_timeout_secs),
            ("sessions.max_subscriptions", u64::from(self.sessions.max_subscriptions)),
            ("sessions.max_per_key", u64::from(self.sessions.max_per_key)),
            ("streams.keep_alive_ms", self.streams.keep_alive_ms),
            ("streams.max_per_key", u64::from(self.streams.max_per_key)),
            ("streams.max_per_agent", u64::from(self.streams.max_per_agent)),
            ("streams.queue_capacity", u64::from(self.streams.queue_capacity)),
        ];
        for (key, value) in positive {
            if value == 0 {
                return Err(ConfigError::Invalid { key, message: "must be greater than 0".to_owned() });
            }
        }
        // Times become `Duration`s and microsecond offsets: keep them far from overflowing.
        let bounded: [(&'static str, u64, u64); 8] = [
            ("events.retention_secs", self.events.retention_secs, 10 * 365 * 24 * 60 * 60),
            ("sessions.idle_timeout_secs", self.sessions.idle_timeout_secs, 365 * 24 * 60 * 60),
            ("streams.keep_alive_ms", self.streams.keep_alive_ms, 60 * 60 * 1000),
            ("streams.queue_capacity", u64::from(self.streams.queue_capacity), 1 << 20),
            ("tls.reload_interval_ms", self.tls.reload_interval_ms, 24 * 60 * 60 * 1000),
            ("tls.handshake_timeout_ms", self.tls.handshake_timeout_ms, 10 * 60 * 1000),
            ("http.header_read_timeout_ms", self.http.header_read_timeout_ms, 10 * 60 * 1000),
            ("http.idle_timeout_ms", self.http.idle_timeout_ms, 24 * 60 * 60 * 1000),
        ];
        // A budget beyond any memory is a typo; 1 TiB also stays far from what a `usize` can count.
        const MAX_CACHE_BYTES: u64 = 1 << 40;
        for (key, value) in
            [("cache.max_bytes", self.cache.max_bytes), ("cache.max_content_bytes", self.cache.max_content_bytes)]
        {
            if value > MAX_CACHE_BYTES {
                return Err(ConfigError::Invalid {
                    key,
                    message: format!("must be at most {MAX_CACHE_BYTES} (1 TiB)"),
                });
            }
        }
        for (key, value, max) in bounded {
            if value > max {
                return Err(ConfigError::Invalid { key, message: format!("must be at most {max}") });
            }
        }
        self.rate_limits.validate()?;
        self.tls.validate()?;
        if !self.http.public_admin && self.http.operator_listen.is_none() {
            return Err(ConfigError::Invalid {
                key: "http.public_admin",
                message: "can only be false when http.operator_listen is set (the admin API would be served nowhere)"
                    .to_owned(),
            });
        }
        if self.http.operator_listen == Some(self.listen) && self.listen.port() != 0 {
            return Err(ConfigError::Invalid {
                key: "http.operator_listen",
                message: format!("must differ from listen ({})", self.listen),
            });
        }
        if self.log.level.trim().is_empty() {
            return Err(ConfigError::Invalid { key: "log.level", message: "must not be empty".to_owned() });
        }
        self.telemetry.validate()?;
        if let Some(url) = &self.http.public_url
            && !is_origin_url(url)
        {
            return Err(ConfigError::Invalid {
                key: "http.public_url",
                message: format!("{url:?} is not an http:// or https:// origin (scheme, host, optional port; no path)"),
            });
        }
        self.oauth.validate()?;
        Ok(())
    }
}

/// `http[s]://host[:port]`, with at most a trailing `/`.
fn is_origin_url(text: &str) -> bool {
    crate::oauth::config::is_http_url(text)
        && text.parse::<axum::http::Uri>().is_ok_and(|uri| uri.path() == "/" && uri.query().is_none())
        && !text.contains('@')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_url_password_is_redacted() {
        let url = DatabaseUrl::new("postgres://user:secret@db:5432/hivegate");
        assert_eq!(url.redacted(), "postgres://user:***@db:5432/hivegate");
        assert!(!format!("{url:?}").contains("secret"));
        assert_eq!(DatabaseUrl::new("sqlite://x.db").redacted(), "sqlite://x.db");
        let url = DatabaseUrl::new("postgres://db/hivegate?user=u&password=secret&sslmode=disable");
        assert_eq!(url.redacted(), "postgres://db/hivegate?user=u&password=***&sslmode=disable");
        assert!(!format!("{url:?}").contains("secret"));
    }

    #[test]
    fn defaults_are_valid() {
        Config::default().validate().expect("defaults validate");
    }

    #[test]
    fn public_url_is_an_origin() {
        for url in ["https://mcp.example.com", "http://127.0.0.1:8080/", "https://h.example:8443"] {
            let mut config = Config::default();
            config.http.public_url = Some(url.to_owned());
            config.validate().unwrap_or_else(|error| panic!("{url}: {error}"));
        }
        for url in ["mcp.example.com", "ftp://h", "https://h/prefix", "https://h?q=1", "https://u@h", "https://h#f"] {
            let mut config = Config::default();
            config.http.public_url = Some(url.to_owned());
            let error = config.validate().expect_err(url);
            assert!(error.to_string().contains("http.public_url"), "{error}");
        }
    }

    #[test]
    fn live_update_settings_are_checked() {
        let mut config = Config::default();
        config.streams.queue_capacity = 0;
        let error = config.validate().expect_err("an empty queue is refused");
        assert!(error.to_string().contains("streams.queue_capacity"), "{error}");
        let mut config = Config::default();
        config.sessions.idle_timeout_secs = u64::MAX;
        let error = config.validate().expect_err("an absurd timeout is refused");
        assert!(error.to_string().contains("sessions.idle_timeout_secs"), "{error}");
    }

    #[test]
    fn quotas_and_audit_settings_are_checked() {
        for templates in [0, MAX_TEMPLATES_PER_AGENT + 1] {
            let mut config = Config::default();
            config.limits.max_templates_per_agent = templates;
            let error = config.validate().expect_err("templates out of range");
            assert!(error.to_string().contains("limits.max_templates_per_agent"), "{error}");
        }
        for depth in [0, MAX_JSON_DEPTH + 1] {
            let mut config = Config::default();
            config.limits.max_json_depth = depth;
            let error = config.validate().expect_err("depth out of range");
            assert!(error.to_string().contains("limits.max_json_depth"), "{error}");
        }
        let mut config = Config::default();
        config.limits.max_uri_bytes = 0;
        let error = config.validate().expect_err("a zero URI limit");
        assert!(error.to_string().contains("limits.max_uri_bytes"), "{error}");
        let mut config = Config::default();
        config.audit.batch_size = 0;
        let error = config.validate().expect_err("an empty batch is refused");
        assert!(error.to_string().contains("audit.batch_size"), "{error}");
        let mut config = Config::default();
        config.audit.agent_retention_days.insert("bot".to_owned(), 0);
        assert_eq!(config.audit.retention_of("bot", None), None, "0 keeps that agent's records forever");
        assert_eq!(config.audit.retention_of("other", None), Some(std::time::Duration::from_secs(90 * 86_400)));
        assert_eq!(
            config.audit.retention_of("bot", Some(2)),
            Some(std::time::Duration::from_secs(2 * 86_400)),
            "the agent's own setting wins"
        );
        assert_eq!(config.audit.retention_of("other", Some(0)), None);
    }

    #[test]
    fn rate_limits_are_checked() {
        let mut config = Config::default();
        config.rate_limits.key_burst = 0;
        let error = config.validate().expect_err("a rate without a burst is refused");
        assert!(error.to_string().contains("rate_limits.key_burst"), "{error}");
        config.rate_limits.key_requests_per_second = 0;
        config.validate().expect("0 requests per second is unlimited, whatever the burst");
        config.rate_limits.failed_auth_window_secs = 0;
        let error = config.validate().expect_err("attempts without a window are refused");
        assert!(error.to_string().contains("rate_limits.failed_auth_window_secs"), "{error}");
        config.rate_limits.failed_auth_attempts = 0;
        config.validate().expect("0 attempts turns the check off");
    }

    #[test]
    fn telemetry_settings_are_checked() {
        let mut config = Config::default();
        config.telemetry.sample_ratio = 1.5;
        let error = config.validate().expect_err("a ratio above 1 is refused");
        assert!(error.to_string().contains("telemetry.sample_ratio"), "{error}");
        config.telemetry.sample_ratio = f64::NAN;
        let error = config.validate().expect_err("NaN is refused");
        assert!(error.to_string().contains("telemetry.sample_ratio"), "{error}");
        let mut config = Config::default();
        config.telemetry.service_name = " ".to_owned();
        let error = config.validate().expect_err("an empty service name is refused");
        assert!(error.to_string().contains("telemetry.service_name"), "{error}");
        let mut config = Config::default();
        config.telemetry.otlp_endpoint = Some("http://collector:4318".to_owned());
        let outcome = config.validate();
        if cfg!(feature = "otel") {
            outcome.expect("an endpoint is accepted by a build with the otel feature");
            config.telemetry.otlp_endpoint = Some("collector:4318".to_owned());
            let error = config.validate().expect_err("an endpoint without a scheme is refused");
            assert!(error.to_string().contains("telemetry.otlp_endpoint"), "{error}");
        } else {
            let error = outcome.expect_err("a build without the otel feature refuses an endpoint");
            assert!(error.to_string().contains("telemetry.otlp_endpoint"), "{error}");
            assert!(error.to_string().contains("--features otel"), "{error}");
        }
    }

    #[test]
    #[allow(clippy::result_large_err)]
    fn rate_limits_come_from_the_environment() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("HIVEGATE_RATE_LIMITS__KEY_REQUESTS_PER_SECOND", "7");
            jail.set_env("HIVEGATE_RATE_LIMITS__TRUSTED_PROXIES", r#"["10.0.0.0/8", "::1/128"]"#);
            let config = Config::load(None).map_err(|e| e.to_string())?;
            assert_eq!(config.rate_limits.key_requests_per_second, 7);
            assert_eq!(config.rate_limits.trusted_proxies.len(), 2);
            jail.set_env("HIVEGATE_RATE_LIMITS__TRUSTED_PROXIES", r#"["not a network"]"#);
            let error = Config::load(None).expect_err("a malformed network is refused");
            assert!(error.to_string().to_lowercase().contains("trusted_proxies"), "{error}");
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)]
    fn the_cache_budget_comes_from_the_environment() {
        figment::Jail::expect_with(|jail| {
            assert_eq!(Config::load(None).map_err(|e| e.to_string())?.cache.max_bytes, 64 * 1024 * 1024);
            jail.set_env("HIVEGATE_CACHE__MAX_BYTES", "536870912");
            jail.set_env("HIVEGATE_CACHE__MAX_CONTENT_BYTES", "0");
            let config = Config::load(None).map_err(|e| e.to_string())?;
            assert_eq!((config.cache.max_bytes, config.cache.max_content_bytes), (536_870_912, 0));
            jail.set_env("HIVEGATE_CACHE__MAX_BYTES", "-1");
            let error = Config::load(None).expect_err("a negative budget is refused");
            assert!(error.to_string().to_lowercase().contains("max_bytes"), "{error}");
            jail.set_env("HIVEGATE_CACHE__MAX_BYTES", "1099511627776000");
            let error = Config::load(None).expect_err("a budget beyond any memory is refused");
            assert!(error.to_string().contains("cache.max_bytes"), "{error}");
            Ok(())
        });
    }

    #[test]
    fn tls_and_operator_settings_are_checked() {
        let mut config = Config::default();
        config.tls.cert_path = Some(PathBuf::from("cert.pem"));
        let error = config.validate().expect_err("a certificate without a key").to_string();
        assert!(error.contains("tls.key_path"), "{error}");
        config.tls.cert_path = None;
        config.tls.key_path = Some(PathBuf::from("key.pem"));
        let error = config.validate().expect_err("a key without a certificate").to_string();
        assert!(error.contains("tls.cert_path"), "{error}");
        config.tls.cert_path = Some(PathBuf::from("cert.pem"));
        config.validate().expect("both files");
        config.tls.reload_interval_ms = 0;
        let error = config.validate().expect_err("no reload interval").to_string();
        assert!(error.contains("tls.reload_interval_ms"), "{error}");

        let mut config = Config::default();
        config.http.public_admin = false;
        let error = config.validate().expect_err("the admin API served nowhere").to_string();
        assert!(error.contains("http.public_admin"), "{error}");
        config.http.operator_listen = Some(config.listen);
        let error = config.validate().expect_err("one address for both listeners").to_string();
        assert!(error.contains("http.operator_listen"), "{error}");
        config.http.operator_listen = Some(SocketAddr::from(([127, 0, 0, 1], 9090)));
        config.validate().expect("an operator listener of its own");
    }

    #[test]
    #[allow(clippy::result_large_err)]
    fn tls_and_operator_settings_come_from_the_environment() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("HIVEGATE_HTTP__OPERATOR_LISTEN", "127.0.0.1:9090");
            jail.set_env("HIVEGATE_HTTP__PUBLIC_ADMIN", "false");
            jail.set_env("HIVEGATE_TLS__CERT_PATH", "/etc/hivegate/tls/tls.crt");
            jail.set_env("HIVEGATE_TLS__KEY_PATH", "/etc/hivegate/tls/tls.key");
            let config = Config::load(None).map_err(|e| e.to_string())?;
            assert_eq!(config.http.operator_listen, Some(SocketAddr::from(([127, 0, 0, 1], 9090))));
            assert!(!config.http.public_admin && config.tls.enabled());
            jail.set_env("HIVEGATE_HTTP__OPERATOR_LISTEN", "not an address");
            let error = Config::load(None).expect_err("a malformed address is refused");
            assert!(error.to_string().to_lowercase().contains("operator_listen"), "{error}");
            Ok(())
        });
    }

    #[test]
    // `figment::Jail` fixes the closure's error type (figment's own, which is large).
    #[allow(clippy::result_large_err)]
    fn environment_overrides_known_keys_and_ignores_other_variables() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("HIVEGATE_LISTEN", "127.0.0.1:9999");
            jail.set_env("HIVEGATE_LIMITS__MAX_BODY_BYTES", "1234");
            jail.set_env("HIVEGATE_BIN", "target/debug/hivegate");
            let config = Config::load(None).map_err(|e| e.to_string())?;
            assert_eq!(config.listen.port(), 9999);
            assert_eq!(config.limits.max_body_bytes, 1234);
            jail.set_env("HIVEGATE_LIMITS__MAX_BODY", "1");
            let error = Config::load(None).expect_err("a misspelt key in a known section is refused");
            assert!(error.to_string().contains("max_body"), "{error}");
            Ok(())
        });
    }
}
