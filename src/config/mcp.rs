//! `[mcp]`, `[sessions]`, `[streams]`, `[events]` and `[cache]`: what the MCP endpoint accepts, its legacy
//! sessions and SSE streams, how far back a stream can resume, and the registry cache that answers it.

section! {
    pub struct McpConfig {
        /// `ttlMs` given to modern clients for agents that set no `cacheTtlMs`.
        pub default_cache_ttl_ms: u64 = 0,
        /// Extra `Host` names accepted besides the loopback names (DNS-rebinding protection).
        pub allowed_hosts: Vec<String> = Vec::new(),
        /// Extra `Origin`s accepted besides loopback origins; a request with another `Origin` gets 403.
        pub allowed_origins: Vec<String> = Vec::new(),
    }
}

section! {
    /// Legacy Streamable HTTP sessions (protocol versions 2024-11-05 … 2025-11-25).
    pub struct SessionsConfig {
        /// A session without requests or an open stream for this long expires (404 afterwards).
        pub idle_timeout_secs: u64 = 30 * 60,
        /// URIs one session may subscribe to, and one `subscriptions/listen` may name.
        pub max_subscriptions: u32 = 1000,
        /// Live sessions one key may hold, on all replicas together (counted in the database); `initialize`
        /// beyond it is 429. Ended and expired sessions do not count.
        pub max_per_key: u32 = 1000,
    }
}

section! {
    /// Server-sent event streams: legacy `GET` streams and modern `subscriptions/listen` streams.
    pub struct StreamsConfig {
        /// How often an idle stream sends an SSE comment, so proxies and clients do not time it out.
        pub keep_alive_ms: u64 = 15_000,
        /// Open streams one key may hold on one replica (429 beyond).
        pub max_per_key: u32 = 100,
        /// Open streams one agent's keys may hold together on one replica (429 beyond).
        pub max_per_agent: u32 = 10_000,
        /// Changes queued for one stream whose client reads slowly; beyond it a legacy stream is closed (the
        /// client resumes with `Last-Event-ID`) and a modern one catches up from the event table.
        pub queue_capacity: u32 = 256,
    }
}

section! {
    /// Event retention: how far back `Last-Event-ID` can resume (an older one gets a resync instead).
    pub struct EventsConfig {
        /// Events older than this are pruned.
        pub retention_secs: u64 = 24 * 60 * 60,
        /// At most this many of each agent's latest events are kept.
        pub retention_count: u64 = 10_000,
        /// How often each replica prunes old events, expired sessions and audit records past their retention.
        pub prune_interval_ms: u64 = 60_000,
    }
}

section! {
    /// The registry cache: each agent's list pages, resource contents, prompts and templates, kept in memory so
    /// that requests do not go to the database. Its memory is bounded by `max_bytes`, whatever the registries'
    /// size; what does not fit is read from the database.
    pub struct CacheConfig {
        /// Estimated bytes the cache may hold across all agents (0: nothing is cached). Unset: an eighth of the
        /// memory the process may use (its cgroup's limit, else the machine's memory), at least 64 MiB and at
        /// most 1 GiB ([`CacheConfig::budget`]). A value larger than an eighth of this is never cached; when
        /// full, whole agents' registries are dropped until half is free.
        pub max_bytes: Option<u64> = None,
        /// Resource contents larger than this are always read from the database.
        pub max_content_bytes: u64 = crate::registry::cache::DEFAULT_MAX_CONTENT_BYTES as u64,
    }
}

impl CacheConfig {
    /// The cache's budget in bytes: `max_bytes`, or when it is unset the share of memory it defaults to.
    pub fn budget(&self) -> u64 {
        self.max_bytes.unwrap_or_else(crate::registry::cache::default_max_bytes)
    }
}
