//! OAuth 2.1 for MCP clients (the MCP authorization specification, 2025-06-18 and later): hivegate as a
//! protected resource, with access tokens from its own authorization server or from an external one.
//!
//! # Map
//!
//! - [`config`]: the `[oauth]` section: `mode` (`off`, `builtin`, `external`), agents opted out, the
//!   external issuer.
//! - This module: which credential a request to the MCP endpoint presents ([`Presented`]), and
//!   [`OAuth::authenticate`], the one step that turns it into the key ([`KeyRecord`]) the request acts as.
//!   An API key (`bak_…`, in `X-Agent-API-Key` or `Authorization: Bearer`) is looked up as it always was;
//!   anything else in `Authorization: Bearer` is an access token, resolved to a [`Grant`] and then to the key
//!   the grant names, through the key cache ([`KeyCache::by_id`]). So revocation, expiry, rate limits,
//!   sessions and audit follow from that key with no second model, and the token's scopes only narrow the
//!   key's. Access tokens are accepted on the MCP endpoint only; the admin API takes keys and the operator
//!   token as before.
//! - [`metadata`]: the Protected Resource Metadata document of each agent (RFC 9728) and the URLs it names
//!   (the canonical MCP URL `{http.public_url}/{agent_id}/mcp`, never derived from a request's `Host`).
//! - [`external`]: `mode = "external"`: JWTs checked against the issuer's JWKS ([`jwks`]), and the subject
//!   grants (issuer, `sub`) → key of the agent, managed through the admin API ([`crate::admin::oauth_subjects`]).
//! - [`server`]: `mode = "builtin"`: hivegate's own authorization server, which implements [`AccessTokens`]
//!   and is handed to [`OAuth::set_builtin`] by [`crate::app`].
//! - [`crate::http::cors`]: CORS on the MCP endpoint and the OAuth endpoints.
//! - The `WWW-Authenticate` challenge is spelled once, in [`crate::http::auth::Challenge`].
//!
//! [`Presented`]: crate::oauth::Presented
//! [`OAuth::authenticate`]: crate::oauth::OAuth::authenticate
//! [`KeyRecord`]: crate::domain::model::KeyRecord
//! [`Grant`]: crate::oauth::Grant
//! [`KeyCache::by_id`]: crate::http::auth::KeyCache::by_id
//! [`metadata`]: crate::oauth::metadata
//! [`external`]: crate::oauth::external
//! [`jwks`]: crate::oauth::jwks
//! [`server`]: crate::oauth::server
//! [`AccessTokens`]: crate::oauth::AccessTokens
//! [`OAuth::set_builtin`]: crate::oauth::OAuth::set_builtin

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use axum::http::HeaderMap;

use crate::domain::model::KeyRecord;
use crate::domain::time::Timestamp;
use crate::domain::{AgentId, Scope};
use crate::guard::Bucketed;
use crate::http::auth::{KEY_HEADER, KeyCache, KeyError, bearer};
use crate::store::{Store, StoreError};

/// The `[oauth]` section.
pub mod config;
/// `mode = "external"`: JWT access tokens of an identity provider, and who may use which agent.
pub mod external;
/// The JWKS of an external issuer: fetched with limits, cached, refreshed.
pub mod jwks;
/// Protected Resource Metadata (RFC 9728).
pub mod metadata;
/// `mode = "builtin"`: hivegate's own authorization server (codes with PKCE, rotated refresh tokens, the
/// consent page on which a key's owner pastes the key).
pub mod server;

/// The OAuth scope that lets a token use an agent's MCP endpoint (hivegate's `mcp` key scope).
pub const SCOPE: &str = "mcp";

/// The prefix of every API key: a bearer credential with it is a key, never an access token.
const KEY_PREFIX: &str = "bak_";

/// The credential a request to the MCP endpoint presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presented<'a> {
    Missing,
    /// An API key (`X-Agent-API-Key`, or `Authorization: Bearer bak_…`), or with OAuth off anything in
    /// `Authorization: Bearer`.
    Key(&'a str),
    /// An access token: anything else in `Authorization: Bearer`, with OAuth on for the agent.
    Token(&'a str),
}

impl<'a> Presented<'a> {
    /// What `headers` present; `is_oauth_on` is whether the agent takes access tokens.
    pub fn of(headers: &'a HeaderMap, is_oauth_on: bool) -> Self {
        if let Some(value) = headers.get(&KEY_HEADER) {
            return value.to_str().map_or(Presented::Missing, |key| Presented::Key(key.trim()));
        }
        match bearer(headers) {
            None => Presented::Missing,
            Some(token) if is_oauth_on && !token.starts_with(KEY_PREFIX) => Presented::Token(token),
            Some(key) => Presented::Key(key),
        }
    }

    /// The credential's text, if any.
    pub fn text(self) -> Option<&'a str> {
        match self {
            Presented::Missing => None,
            Presented::Key(text) | Presented::Token(text) => Some(text),
        }
    }
}

/// What a valid access token grants: the key it acts as, for which agent, with which scopes, until when.
#[derive(Debug, Clone)]
pub struct Grant {
    /// The key the token was consented with (built-in server) or its subject is bound to (external issuer).
    pub key_id: String,
    /// The agent the token is for (its audience).
    pub agent: AgentId,
    /// The token's scopes that are hivegate's; the request gets those the key has too.
    pub scopes: Vec<Scope>,
    /// When the token stops being valid (already checked by whoever made the grant, with its leeway).
    pub expires_at: Timestamp,
}

/// Access tokens issued by hivegate's built-in authorization server (`crate::oauth::server`).
#[async_trait]
pub trait AccessTokens: Send + Sync + 'static {
    /// The grant behind `token`, if it is a live token of this server (`None`: unknown, expired or revoked);
    /// the key it names is then checked by the caller ([`OAuth::authenticate`]).
    /// The token is only ever compared as a digest and never logged.
    async fn resolve(&self, token: &str) -> Result<Option<Grant>, StoreError>;
}

/// Why a credential was refused.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No credential: 401.
    #[error("no credential")]
    Missing,
    /// An unknown, revoked or expired API key: 401.
    #[error("missing, unknown, revoked or expired API key")]
    Key,
    /// An access token that is not valid here (signature, issuer, audience, time, or its key gone): 401
    /// `invalid_token`; the text says which, without echoing the token.
    #[error("invalid access token: {0}")]
    Token(String),
    /// A valid token that may not use this agent (scope, subject not granted): 403 `insufficient_scope`.
    #[error("{0}")]
    Forbidden(String),
    /// The database (or the issuer's JWKS) cannot be reached: 503.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl From<StoreError> for AuthError {
    fn from(error: StoreError) -> Self {
        AuthError::Unavailable(error.to_string())
    }
}

/// The key a request acts as, and whether an access token brought it (its refusals then carry OAuth's
/// error codes).
#[derive(Debug, Clone)]
pub struct Authenticated {
    pub key: Arc<Bucketed<KeyRecord>>,
    pub is_token: bool,
    /// What the presented key's last request found of its agent, and the key's digest to keep what this
    /// one finds (none for an access token).
    pub link: Option<crate::registry::cache::AgentLink>,
    pub digest: Option<crate::domain::KeyDigest>,
}

/// This replica's OAuth state: the configuration, the public URL, the external issuer's validator and the
/// built-in server's tokens.
pub struct OAuth {
    config: config::OAuthConfig,
    /// `http.public_url` (or the derived one), without a trailing `/`.
    public_url: String,
    external: Option<external::External>,
    /// Set once at start-up by [`crate::app`] when `mode = "builtin"`.
    builtin: OnceLock<Arc<dyn AccessTokens>>,
}

/// The external issuer's cache of granted subjects follows the bus ([`external`]).
impl crate::events::BusHook for OAuth {
    fn apply(&self, message: &crate::events::BusMessage) {
        if let Some(external) = &self.external {
            external.apply(message);
        }
    }
}

impl OAuth {
    /// `public_url` is the configured `http.public_url`, or the one derived from the bound address.
    pub fn new(config: &config::OAuthConfig, public_url: &str, store: Arc<dyn Store>) -> Self {
        let external = (config.mode == config::Mode::External).then(|| external::External::new(config, store));
        Self {
            config: config.clone(),
            public_url: public_url.trim_end_matches('/').to_owned(),
            external,
            builtin: OnceLock::new(),
        }
    }

    /// Hands the built-in authorization server's tokens over (once; later calls are ignored).
    pub fn set_builtin(&self, tokens: Arc<dyn AccessTokens>) {
        let _ = self.builtin.set(tokens);
    }

    /// The origin clients reach hivegate at.
    pub fn public_url(&self) -> &str {
        &self.public_url
    }

    pub fn config(&self) -> &config::OAuthConfig {
        &self.config
    }

    /// Whether `agent` takes access tokens and publishes its metadata document.
    pub fn is_on_for(&self, agent: &str) -> bool {
        self.config.is_on_for(agent)
    }

    /// The external issuer's validator (`mode = "external"`).
    pub fn external(&self) -> Option<&external::External> {
        self.external.as_ref()
    }

    /// The key the request's credential stands for: `presented` is what its headers present
    /// ([`Presented::of`], read once by the caller). `agent` is the agent of the request's path, when it is
    /// a valid id: tokens are only taken for an agent with OAuth on, and must be for that agent; for any
    /// other, what looked like a token is tried as a key, as [`Presented::of`] reads it with OAuth off.
    pub async fn authenticate(
        &self,
        keys: &KeyCache,
        presented: Presented<'_>,
        agent: Option<&AgentId>,
    ) -> Result<Authenticated, AuthError> {
        match (presented, agent) {
            (Presented::Missing, _) => Err(AuthError::Missing),
            (Presented::Token(token), Some(agent)) if self.is_on_for(agent.as_str()) => {
                let grant = self.grant(token, agent).await?;
                let key = self.key_of(keys, &grant, agent).await?;
                Ok(Authenticated { key, is_token: true, link: None, digest: None })
            }
            (Presented::Key(key) | Presented::Token(key), _) => match keys.authenticate(Some(key)).await {
                Ok(hit) => {
                    Ok(Authenticated { key: hit.key, is_token: false, link: hit.link, digest: Some(hit.digest) })
                }
                Err(KeyError::Unauthenticated) => Err(AuthError::Key),
                Err(KeyError::Store(error)) => Err(error.into()),
            },
        }
    }

    /// The grant behind an access token presented for `agent`.
    async fn grant(&self, token: &str, agent: &AgentId) -> Result<Grant, AuthError> {
        match self.config.mode {
            config::Mode::External => match &self.external {
                Some(external) => external.grant(token, agent, &self.resource(agent.as_str())).await,
                None => Err(AuthError::Token("no external issuer is configured".to_owned())),
            },
            config::Mode::Builtin => match self.builtin.get() {
                Some(tokens) => tokens
                    .resolve(token)
                    .await?
                    .ok_or_else(|| AuthError::Token("unknown, expired or revoked access token".to_owned())),
                None => Err(AuthError::Token("this replica's authorization server issues no tokens".to_owned())),
            },
            config::Mode::Off => Err(AuthError::Token("OAuth is off".to_owned())),
        }
    }

    /// The key `grant` acts as, with the scopes both the key and the grant have.
    async fn key_of(
        &self,
        keys: &KeyCache,
        grant: &Grant,
        agent: &AgentId,
    ) -> Result<Arc<Bucketed<KeyRecord>>, AuthError> {
        if &grant.agent != agent {
            return Err(AuthError::Token("the token was issued for another agent".to_owned()));
        }
        let key = match keys.by_id(&grant.key_id).await {
            Ok(key) => key,
            Err(KeyError::Unauthenticated) => {
                return Err(AuthError::Token("the key the token acts as is revoked or expired".to_owned()));
            }
            Err(KeyError::Store(error)) => return Err(error.into()),
        };
        if &key.agent_id != agent {
            return Err(AuthError::Token("the token was issued for another agent".to_owned()));
        }
        if !grant.scopes.contains(&Scope::Mcp) {
            return Err(AuthError::Forbidden(format!("the access token does not have scope {SCOPE}")));
        }
        let scopes: Vec<Scope> = key.scopes.iter().copied().filter(|scope| grant.scopes.contains(scope)).collect();
        if scopes == key.scopes {
            return Ok(key);
        }
        Ok(Arc::new(key.with_record(KeyRecord { scopes, ..(**key).clone() })))
    }

    /// An agent's canonical MCP URL: the `resource` of its metadata, the audience of its tokens (RFC 8707).
    pub fn resource(&self, agent: &str) -> String {
        format!("{}/{agent}/mcp", self.public_url)
    }

    /// The URL of an agent's Protected Resource Metadata document (RFC 9728 §3.1: the well-known path
    /// inserted before the resource's path).
    pub fn metadata_url(&self, agent: &str) -> String {
        format!("{}{}/{agent}/mcp", self.public_url, metadata::WELL_KNOWN)
    }

    /// The authorization server that issues this deployment's tokens: hivegate itself (`builtin`) or the
    /// configured issuer (`external`).
    pub fn issuer(&self) -> Option<&str> {
        match self.config.mode {
            config::Mode::Off => None,
            config::Mode::Builtin => Some(&self.public_url),
            config::Mode::External => self.config.issuer.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(*name, HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn keys_keep_their_headers_and_other_bearers_are_tokens_when_on() {
        let key_header = headers(&[("x-agent-api-key", "bak_x"), ("authorization", "Bearer eyJ")]);
        assert_eq!(Presented::of(&key_header, true), Presented::Key("bak_x"));
        let bearer_key = headers(&[("authorization", "Bearer bak_y")]);
        assert_eq!(Presented::of(&bearer_key, true), Presented::Key("bak_y"));
        let token = headers(&[("authorization", "Bearer eyJ.a.b")]);
        assert_eq!(Presented::of(&token, true), Presented::Token("eyJ.a.b"));
        assert_eq!(Presented::of(&token, false), Presented::Key("eyJ.a.b"));
        assert_eq!(Presented::of(&headers(&[]), true), Presented::Missing);
    }
}
