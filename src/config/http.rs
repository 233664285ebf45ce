//! `[http]` and `[tls]`: the listeners, their timeouts and connection caps, the public origin; native TLS on
//! `listen`.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::ConfigError;

section! {
    pub struct HttpConfig {
        /// Longest time one non-streaming request may take before it is answered 408.
        pub request_timeout_ms: u64 = 30_000,
        /// On SIGTERM/SIGINT, how long in-flight requests get to finish.
        pub shutdown_grace_ms: u64 = 10_000,
        /// A second address, plain HTTP, serving only the operator endpoints (`/metrics`, `/healthz`, `/readyz`,
        /// `/admin/v1`); when set, `/metrics` is no longer served on `listen`.
        pub operator_listen: Option<SocketAddr> = None,
        /// Whether `listen` serves the admin API too (agents use their `registry` keys there); `false` needs
        /// `operator_listen`.
        pub public_admin: bool = true,
        /// How long a client has to send a request's head (request line and header fields): from the connection's
        /// start for its first request, from the head's first byte for the next ones. Beyond it the connection is
        /// closed ([`crate::http::connection`]).
        pub header_read_timeout_ms: u64 = 10_000,
        /// How long a connection with no request in flight (nothing being answered, no stream open) stays open
        /// waiting for the next one.
        pub idle_timeout_ms: u64 = 75_000,
        /// Connections each listener keeps open at once; one more is refused at once. 0: no cap.
        pub max_connections: u32 = 16_384,
        /// Connections one client address may keep open at once on each listener; a peer in
        /// `rate_limits.trusted_proxies` is not capped (its clients are many). 0: no cap.
        pub max_connections_per_address: u32 = 512,
        /// The origin clients reach `listen` at (`https://mcp.example.com`, behind a proxy or not): an agent's
        /// canonical MCP URL, the audience its access tokens must name, is `{public_url}/{agent_id}/mcp`. Unset:
        /// `http://` (`https://` with `[tls]`) and the bound address, fit for local use only. Never taken from
        /// a request's `Host`.
        pub public_url: Option<String> = None,
        /// How long a console session (`/console/`) lasts without a request before it must sign in again.
        pub console_idle_timeout_secs: u64 = 1800,
        /// Threads serving the listeners' connections, each with a single-threaded runtime of its own
        /// ([`crate::http::threads`]). 0: one per CPU the process may use.
        pub threads: u32 = 0,
    }
}

section! {
    /// Native TLS on `listen` ([`crate::tls`]): both files or neither; without them `listen` serves plain HTTP.
    pub struct TlsConfig {
        /// The certificate chain (PEM, the server's certificate first).
        pub cert_path: Option<PathBuf> = None,
        /// The certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
        pub key_path: Option<PathBuf> = None,
        /// How often both files are re-read; a changed, valid pair is used for new connections.
        pub reload_interval_ms: u64 = 1_000,
        /// How long a client may take to finish its TLS handshake before the connection is closed.
        pub handshake_timeout_ms: u64 = 10_000,
    }
}

impl TlsConfig {
    /// Whether `listen` serves HTTPS.
    pub fn enabled(&self) -> bool {
        self.cert_path.is_some()
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        const CERT_PATH: &str = key!(tls.cert_path);
        const KEY_PATH: &str = key!(tls.key_path);
        let both = |missing, set| ConfigError::Invalid {
            key: missing,
            message: format!("must be set when {set} is (both or neither)"),
        };
        match (&self.cert_path, &self.key_path) {
            (Some(_), None) => Err(both(KEY_PATH, CERT_PATH)),
            (None, Some(_)) => Err(both(CERT_PATH, KEY_PATH)),
            _ => Ok(()),
        }
    }
}

/// `http[s]://host[:port]`, with at most a trailing `/`.
pub(super) fn is_origin_url(text: &str) -> bool {
    crate::oauth::config::is_http_url(text)
        && text.parse::<axum::http::Uri>().is_ok_and(|uri| uri.path() == "/" && uri.query().is_none())
        && !text.contains('@')
}
