//! The `[oauth]` section: whether access tokens are accepted on the MCP endpoint, and from which
//! authorization server.

use serde::{Deserialize, Serialize};

use crate::config::ConfigError;

/// Where access tokens come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// API keys only, as before OAuth: no metadata document, no token is accepted. The default, because
    /// turning OAuth on publishes per-agent metadata and changes what a 401 says, which an operator should
    /// choose (and `http.public_url` must be right for it).
    #[default]
    Off,
    /// hivegate's own authorization server issues the tokens ([`crate::oauth::AccessTokens`]).
    Builtin,
    /// An identity provider issues JWT access tokens, checked against its JWKS ([`crate::oauth::external`]).
    External,
}

/// Signature algorithms an external issuer may use. HMAC (`HS*`) is never one: its key is a shared secret,
/// and a JWKS is public. `none` is never one either.
const ASYMMETRIC: [&str; 9] = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"];

crate::config::section! {
    /// `[oauth]`: whether access tokens are accepted, from which authorization server, and its bounds.
    #[derive(Clone)]
    pub struct OAuthConfig {
        /// `off`, `builtin` or `external`.
        pub mode: Mode = Mode::Off,
        /// Agents on which OAuth stays off whatever `mode` says: only API keys reach them, and they publish no
        /// metadata document.
        pub disabled_agents: Vec<String> = Vec::new(),
        /// The external authorization server's issuer identifier (the `iss` of its tokens); `mode = "external"`
        /// needs it.
        pub issuer: Option<String> = None,
        /// Where the issuer's JWKS is; default: the `jwks_uri` of its metadata (RFC 8414
        /// `/.well-known/oauth-authorization-server`, then OpenID Connect discovery).
        pub jwks_url: Option<String> = None,
        /// The signature algorithms accepted (asymmetric ones only).
        pub algorithms: Vec<String> = vec!["RS256".to_owned(), "ES256".to_owned()],
        /// Seconds of clock difference allowed when checking `exp` and `nbf`.
        pub leeway_s: u64 = 60,
        /// How often the JWKS is fetched again, so that keys the issuer rotates in are known before they sign.
        pub jwks_refresh_secs: u64 = 300,
        /// The shortest time between two fetches of the JWKS caused by tokens naming an unknown `kid`, so that
        /// tokens with random `kid`s cannot make hivegate hammer the issuer.
        pub jwks_min_refetch_ms: u64 = 10_000,
        /// How long one fetch of the JWKS or of the issuer's metadata may take.
        pub jwks_timeout_ms: u64 = 5_000,
        /// The largest JWKS (or metadata document) read.
        pub jwks_max_bytes: u64 = 256 * 1024,
        /// Subject grants one agent may hold (`/admin/v1/agents/{agent_id}/oauth-subjects`).
        pub max_subjects_per_agent: u64 = 1_000,
        /// Bytes of one granted subject (`sub`).
        pub max_subject_bytes: usize = 255,
        /// `[oauth.builtin]`: the built-in authorization server (`mode = "builtin"`).
        pub builtin: crate::oauth::server::BuiltinConfig = crate::oauth::server::BuiltinConfig::default(),
    }
}

impl OAuthConfig {
    /// Whether access tokens are accepted for `agent` (and its metadata document is published).
    pub fn is_on_for(&self, agent: &str) -> bool {
        self.mode != Mode::Off && !self.disabled_agents.iter().any(|disabled| disabled == agent)
    }

    /// The accepted algorithms, parsed (validated at start-up).
    pub fn parsed_algorithms(&self) -> Vec<jsonwebtoken::Algorithm> {
        self.algorithms.iter().filter_map(|name| name.parse().ok()).collect()
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, message: String| Err(ConfigError::Invalid { key, message });
        if self.algorithms.is_empty() {
            return invalid("oauth.algorithms", "must name at least one algorithm".to_owned());
        }
        for name in &self.algorithms {
            if !ASYMMETRIC.contains(&name.as_str()) {
                return invalid(
                    "oauth.algorithms",
                    format!("{name:?} is not accepted; choose among {}", ASYMMETRIC.join(", ")),
                );
            }
        }
        if self.leeway_s > 600 {
            return invalid("oauth.leeway_s", "must be at most 600".to_owned());
        }
        let positive = [
            ("oauth.jwks_refresh_secs", self.jwks_refresh_secs),
            ("oauth.jwks_min_refetch_ms", self.jwks_min_refetch_ms),
            ("oauth.jwks_timeout_ms", self.jwks_timeout_ms),
            ("oauth.jwks_max_bytes", self.jwks_max_bytes),
            ("oauth.max_subjects_per_agent", self.max_subjects_per_agent),
            ("oauth.max_subject_bytes", self.max_subject_bytes as u64),
        ];
        for (key, value) in positive {
            if value == 0 {
                return invalid(key, "must be greater than 0".to_owned());
            }
        }
        if self.jwks_refresh_secs > 7 * 24 * 60 * 60 {
            return invalid("oauth.jwks_refresh_secs", "must be at most a week (604800)".to_owned());
        }
        if self.jwks_timeout_ms > 60_000 {
            return invalid("oauth.jwks_timeout_ms", "must be at most 60000".to_owned());
        }
        if self.jwks_max_bytes > 16 * 1024 * 1024 {
            return invalid("oauth.jwks_max_bytes", "must be at most 16 MiB".to_owned());
        }
        for (key, url) in [("oauth.issuer", &self.issuer), ("oauth.jwks_url", &self.jwks_url)] {
            if let Some(url) = url
                && !is_http_url(url)
            {
                return invalid(key, format!("{url:?} is not an http:// or https:// URL"));
            }
        }
        self.builtin.validate()?;
        if self.mode == Mode::External && self.issuer.is_none() {
            return invalid("oauth.issuer", "must be set when oauth.mode is \"external\"".to_owned());
        }
        Ok(())
    }
}

/// An absolute `http://` or `https://` URL with a host and no fragment.
pub(crate) fn is_http_url(text: &str) -> bool {
    let Ok(uri) = text.parse::<axum::http::Uri>() else { return false };
    matches!(uri.scheme_str(), Some("http" | "https"))
        && uri.host().is_some_and(|h| !h.is_empty())
        && !text.contains('#')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_off() {
        let config = OAuthConfig::default();
        config.validate().expect("defaults validate");
        assert!(!config.is_on_for("a"));
        assert_eq!(config.parsed_algorithms(), [jsonwebtoken::Algorithm::RS256, jsonwebtoken::Algorithm::ES256]);
    }

    #[test]
    fn symmetric_and_none_algorithms_are_refused() {
        for name in ["HS256", "none", "HS512", "rs256"] {
            let config = OAuthConfig { algorithms: vec![name.to_owned()], ..OAuthConfig::default() };
            let error = config.validate().expect_err(name);
            assert!(error.to_string().contains("oauth.algorithms"), "{error}");
        }
    }

    #[test]
    fn external_needs_an_issuer_and_agents_can_opt_out() {
        let mut config = OAuthConfig { mode: Mode::External, ..OAuthConfig::default() };
        assert!(config.validate().expect_err("no issuer").to_string().contains("oauth.issuer"));
        config.issuer = Some("ftp://idp".to_owned());
        assert!(config.validate().is_err());
        config.issuer = Some("https://idp.example.com".to_owned());
        config.disabled_agents = vec!["legacy".to_owned()];
        config.validate().expect("valid");
        assert!(config.is_on_for("a"));
        assert!(!config.is_on_for("legacy"));
    }
}
