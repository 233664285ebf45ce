//! `[oauth.builtin]`: the built-in authorization server's lifetimes and bounds.

use serde::{Deserialize, Serialize};

use crate::config::ConfigError;

/// The built-in authorization server (used when `oauth.mode = "builtin"`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct BuiltinConfig {
    /// Lifetime of an access token.
    pub access_token_ttl_secs: u64,
    /// Lifetime of a refresh token (each refresh issues a new one with a fresh lifetime).
    pub refresh_token_ttl_secs: u64,
    /// Lifetime of an authorization code.
    pub code_ttl_secs: u64,
    /// Clients registered through Dynamic Client Registration, in total.
    pub max_clients: u64,
    /// A registered client unused for this long is deleted.
    pub client_idle_secs: u64,
    /// Registrations accepted per client address and minute.
    pub registrations_per_minute: u32,
    /// Redirect URIs one client may register or list in its metadata document.
    pub max_redirect_uris: usize,
    /// Bytes of one redirect URI.
    pub max_redirect_uri_bytes: usize,
    /// Bytes of a client's name.
    pub max_client_name_bytes: usize,
    /// Authorization codes one key may have outstanding (unused and unexpired).
    pub max_codes_per_key: u32,
    /// Grants (refresh token families) one key may hold; the oldest is revoked to make room for a new one.
    pub max_grants_per_key: u32,
    /// Time allowed for fetching a client's metadata document.
    pub metadata_timeout_ms: u64,
    /// Bytes of a client's metadata document.
    pub max_metadata_bytes: usize,
    /// How long a fetched metadata document is used before it is fetched again.
    pub metadata_cache_secs: u64,
    /// Metadata documents held in memory.
    pub max_cached_metadata: usize,
    /// Hosts whose metadata documents may be fetched over plain HTTP and from any address (loopback and
    /// private ones included). Empty in production; for development and tests, e.g. `["127.0.0.1"]`.
    pub allow_insecure_metadata_hosts: Vec<String>,
    /// How often expired codes and tokens and idle clients are deleted.
    pub prune_interval_secs: u64,
}

impl Default for BuiltinConfig {
    fn default() -> Self {
        Self {
            access_token_ttl_secs: 3600,
            refresh_token_ttl_secs: 30 * 24 * 3600,
            code_ttl_secs: 60,
            max_clients: 10_000,
            client_idle_secs: 30 * 24 * 3600,
            registrations_per_minute: 10,
            max_redirect_uris: 10,
            max_redirect_uri_bytes: 2048,
            max_client_name_bytes: 200,
            max_codes_per_key: 20,
            max_grants_per_key: 50,
            metadata_timeout_ms: 5000,
            max_metadata_bytes: 16 * 1024,
            metadata_cache_secs: 300,
            max_cached_metadata: 1000,
            allow_insecure_metadata_hosts: Vec::new(),
            prune_interval_secs: 300,
        }
    }
}

impl BuiltinConfig {
    /// Checks that no value is out of range; each error names its key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        const YEAR: u64 = 365 * 24 * 3600;
        let ranges: [(&'static str, u64, u64, u64); 16] = [
            ("oauth.builtin.access_token_ttl_secs", self.access_token_ttl_secs, 1, 7 * 24 * 3600),
            ("oauth.builtin.refresh_token_ttl_secs", self.refresh_token_ttl_secs, 1, YEAR),
            ("oauth.builtin.code_ttl_secs", self.code_ttl_secs, 1, 600),
            ("oauth.builtin.max_clients", self.max_clients, 1, 10_000_000),
            ("oauth.builtin.client_idle_secs", self.client_idle_secs, 1, 10 * YEAR),
            ("oauth.builtin.registrations_per_minute", u64::from(self.registrations_per_minute), 1, 1_000_000),
            ("oauth.builtin.max_redirect_uris", self.max_redirect_uris as u64, 1, 100),
            ("oauth.builtin.max_redirect_uri_bytes", self.max_redirect_uri_bytes as u64, 16, 8192),
            ("oauth.builtin.max_client_name_bytes", self.max_client_name_bytes as u64, 1, 1000),
            ("oauth.builtin.max_codes_per_key", u64::from(self.max_codes_per_key), 1, 10_000),
            ("oauth.builtin.max_grants_per_key", u64::from(self.max_grants_per_key), 1, 10_000),
            ("oauth.builtin.metadata_timeout_ms", self.metadata_timeout_ms, 1, 60_000),
            ("oauth.builtin.max_metadata_bytes", self.max_metadata_bytes as u64, 256, 1 << 20),
            ("oauth.builtin.metadata_cache_secs", self.metadata_cache_secs, 0, 24 * 3600),
            ("oauth.builtin.max_cached_metadata", self.max_cached_metadata as u64, 1, 1_000_000),
            ("oauth.builtin.prune_interval_secs", self.prune_interval_secs, 1, 24 * 3600),
        ];
        for (key, value, min, max) in ranges {
            if !(min..=max).contains(&value) {
                return Err(ConfigError::Invalid { key, message: format!("must be between {min} and {max}") });
            }
        }
        if self.allow_insecure_metadata_hosts.iter().any(|host| host.trim().is_empty()) {
            return Err(ConfigError::Invalid {
                key: "oauth.builtin.allow_insecure_metadata_hosts",
                message: "must not hold an empty host".to_owned(),
            });
        }
        Ok(())
    }
}
