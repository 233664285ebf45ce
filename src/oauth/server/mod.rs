//! The built-in OAuth 2.1 authorization server (`oauth.mode = "builtin"`), for deployments without an
//! identity provider: the owner of an agent's `mcp` key consents by pasting it, and the client gets tokens
//! bound to that key. No user database: the key is the user.
//!
//! - [`metadata`]: Authorization Server Metadata (RFC 8414) at `/.well-known/oauth-authorization-server`.
//! - [`client`]: Dynamic Client Registration (RFC 7591, `POST /oauth/register`); [`metadata_document`]:
//!   clients identified by the URL of their metadata document, fetched behind SSRF guards.
//! - [`authorize`]: `GET`/`POST /oauth/authorize`, the consent page (`page`) and its signed form.
//! - [`token`]: `POST /oauth/token` (authorization code with PKCE S256, rotated refresh tokens) and
//!   `POST /oauth/revoke` (RFC 7009).
//!
//! Codes and tokens are random strings stored as digests (the [`KeyHasher`] of API keys). An access token
//! resolves ([`AccessTokens::resolve`]) to a grant naming the key it is bound to, which the MCP endpoint
//! then looks up through the key cache ([`crate::http::auth::KeyCache::by_id`]), which the bus keeps true on
//! every replica: revoking, expiring or deleting the key ends its tokens at once.
//!
//! [`client`]: crate::oauth::server::client
//! [`metadata_document`]: crate::oauth::server::metadata_document
//! [`authorize`]: crate::oauth::server::authorize
//! [`token`]: crate::oauth::server::token
//! [`KeyHasher`]: crate::domain::key::KeyHasher

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::domain::time::Timestamp;
use crate::domain::{AgentId, KeyHasher, Scope};
use crate::oauth::{AccessTokens, Grant};
use crate::state::AppState;
use crate::store::oauth_server::{GrantBounds, TokenKind};
use crate::store::{Store, StoreError};

/// Audit records of codes and tokens issued and refused.
mod audit;
/// The authorize endpoint, its consent page and its form.
pub mod authorize;
/// Registered and metadata-document clients; Dynamic Client Registration.
pub mod client;
/// `[oauth.builtin]`.
pub mod config;
/// The OAuth error answer.
pub mod error;
/// Authorization Server Metadata (RFC 8414).
pub mod metadata;
/// Client ID Metadata Documents: fetched behind SSRF guards, cached.
pub mod metadata_document;
/// The consent page's HTML.
mod page;
/// Form and query parameters.
pub mod params;
/// The token and revocation endpoints.
pub mod token;

pub use config::BuiltinConfig;

/// Access tokens start with this: recognisable in a header or a leak, never mistaken for a key (`bak_`).
pub const ACCESS_TOKEN_PREFIX: &str = "hgat_";
/// Refresh tokens start with this.
pub const REFRESH_TOKEN_PREFIX: &str = "hgrt_";
/// Authorization codes start with this.
pub const CODE_PREFIX: &str = "hgac_";
/// The scope an access token carries: what an `mcp` key may do.
pub const SCOPE: &str = "mcp";

/// The built-in authorization server's state, shared by its handlers and the MCP endpoint's authentication.
pub struct BuiltinServer {
    pub config: BuiltinConfig,
    /// `http.public_url` without a trailing `/`: the issuer, and the base of every agent's resource URL.
    pub issuer: String,
    hasher: KeyHasher,
    store: Arc<dyn Store>,
    /// Fetches clients' metadata documents.
    pub documents: metadata_document::DocumentFetcher,
    /// Signs the consent form (a key every replica shares, kept in the database).
    form_key: [u8; 32],
    /// Registrations per client address; forgotten by the prune task once idle.
    pub registrations: DefaultKeyedRateLimiter<IpAddr>,
    /// Token requests per client address (each stores rows kept until they expire); forgotten likewise.
    pub token_requests: DefaultKeyedRateLimiter<IpAddr>,
}

/// Token requests one client address (an IPv6 /64) may make a minute: a client refreshes about once an
/// access token's life, so this leaves room for thousands of clients behind one address.
pub const TOKEN_REQUESTS_PER_MINUTE: u32 = 120;

/// The setting that holds the consent form's signing key (hex).
const FORM_KEY_SETTING: &str = "oauth_form_key";

impl BuiltinServer {
    /// The server for `issuer` (`http.public_url`), with the form key every replica shares.
    pub async fn start(
        config: &BuiltinConfig,
        issuer: &str,
        store: Arc<dyn Store>,
        hasher: KeyHasher,
    ) -> anyhow::Result<Arc<Self>> {
        let stored = store.init_setting(FORM_KEY_SETTING, &hex::encode(rand::random::<[u8; 32]>())).await?;
        let mut form_key = [0u8; 32];
        hex::decode_to_slice(&stored, &mut form_key)
            .map_err(|_| anyhow::anyhow!("the stored {FORM_KEY_SETTING} setting is corrupt"))?;
        let per_minute =
            std::num::NonZeroU32::new(config.registrations_per_minute).unwrap_or(std::num::NonZeroU32::MIN);
        Ok(Arc::new(Self {
            config: config.clone(),
            issuer: issuer.trim_end_matches('/').to_owned(),
            hasher,
            store,
            documents: metadata_document::DocumentFetcher::new(config)?,
            form_key,
            registrations: RateLimiter::keyed(Quota::per_minute(per_minute)),
            token_requests: RateLimiter::keyed(Quota::per_minute(
                std::num::NonZeroU32::new(TOKEN_REQUESTS_PER_MINUTE).unwrap_or(std::num::NonZeroU32::MIN),
            )),
        }))
    }

    /// The routes of the authorization server, on the public listener.
    pub fn routes() -> Router<AppState> {
        Router::new()
            .route(metadata::PATH, get(metadata::handler))
            .route(authorize::PATH, get(authorize::show).post(authorize::decide))
            .route(token::PATH, post(token::handler))
            .route(token::REVOKE_PATH, post(token::revoke))
            .route(REGISTER_PATH, post(client::register))
    }

    /// The canonical MCP URL of `agent` (RFC 8707 resource).
    pub fn resource_of(&self, agent: &AgentId) -> String {
        format!("{}/{}/mcp", self.issuer, agent.as_str())
    }

    /// The agent whose canonical MCP URL `resource` is, if it is one.
    pub fn agent_of(&self, resource: &str) -> Option<AgentId> {
        let rest = resource.strip_prefix(&self.issuer)?.strip_prefix('/')?;
        let id = rest.strip_suffix("/mcp")?;
        AgentId::parse(id).ok()
    }

    fn bounds(&self) -> GrantBounds {
        GrantBounds {
            max_codes_per_key: self.config.max_codes_per_key,
            max_grants_per_key: self.config.max_grants_per_key,
        }
    }

    /// Deletes expired codes and tokens and idle clients every `prune_interval_secs`, and forgets idle
    /// registration limits; stops when the returned handle is dropped.
    pub(crate) fn start_pruning(self: &Arc<Self>) -> crate::task::AbortOnDrop {
        let server = self.clone();
        crate::task::AbortOnDrop::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(server.config.prune_interval_secs));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                server.registrations.retain_recent();
                server.token_requests.retain_recent();
                server.documents.fetches.retain_recent();
                let now = Timestamp::now().as_micros();
                let idle_before = now.saturating_sub(client::secs_micros(server.config.client_idle_secs));
                match server
                    .store
                    .oauth_server()
                    .prune_oauth(Timestamp::from_micros(now), Timestamp::from_micros(idle_before))
                    .await
                {
                    Ok(pruned) => tracing::debug!(?pruned, "authorization server pruned"),
                    Err(error) => tracing::warn!(%error, "could not prune the authorization server's tables"),
                }
            }
        })
    }
}

/// Dynamic Client Registration.
pub const REGISTER_PATH: &str = "/oauth/register";

#[async_trait::async_trait]
impl AccessTokens for BuiltinServer {
    /// The grant behind an access token of this server, if it is unexpired and unrevoked; the caller
    /// ([`crate::oauth::OAuth::authenticate`]) then goes to the key it names through the key cache, which the
    /// bus keeps true on every replica, so a revoked or expired key ends the token at once.
    async fn resolve(&self, token: &str) -> Result<Option<Grant>, StoreError> {
        if !token.starts_with(ACCESS_TOKEN_PREFIX) {
            return Ok(None);
        }
        let digest = self.hasher.digest(token).to_hex();
        let Some(stored) = self.store.oauth_server().find_token(&digest).await? else { return Ok(None) };
        let now = Timestamp::now();
        if stored.token.kind != TokenKind::Access || stored.revoked_at.is_some() || stored.token.expires_at <= now {
            return Ok(None);
        }
        let scopes = stored.token.scopes.split(' ').filter_map(Scope::parse).collect();
        Ok(Some(Grant {
            key_id: stored.token.key_id,
            agent: stored.token.agent_id,
            scopes,
            expires_at: stored.token.expires_at,
        }))
    }
}

/// The key of a client address in the per-address limits: an IPv6 address by its /64 (one subscriber's
/// prefix, whose addresses it can rotate through at will), an IPv4 address as it is.
pub(crate) fn rate_key(address: std::net::IpAddr) -> std::net::IpAddr {
    match address {
        std::net::IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => {
            let prefix = u128::from(v6) & (u128::MAX << 64);
            std::net::IpAddr::V6(std::net::Ipv6Addr::from(prefix))
        }
        other => other,
    }
}

#[cfg(test)]
mod rate_key_tests {
    use super::rate_key;

    #[test]
    fn ipv6_addresses_of_one_prefix_share_a_key() {
        let a = rate_key("2001:db8:1:2:aaaa::1".parse().unwrap());
        let b = rate_key("2001:db8:1:2:bbbb::9".parse().unwrap());
        let other = rate_key("2001:db8:1:3::1".parse().unwrap());
        assert_eq!(a, b);
        assert_ne!(a, other);
        let v4 = "192.0.2.7".parse().unwrap();
        assert_eq!(rate_key(v4), v4);
    }
}
