//! The external issuer's signing keys (JWKS), fetched over HTTP and kept in memory.
//!
//! The set is fetched on first use, again once it is older than `oauth.jwks_refresh_secs` (so keys the issuer
//! rotates in are known), and again when a token names a `kid` the set lacks, but then at most once every
//! `oauth.jwks_min_refetch_ms`: tokens with made-up `kid`s cannot make hivegate hammer the issuer. One fetch
//! runs at a time (`Jwks::fetch_turn`); requests that need it wait for it rather than fetch again. Every
//! fetch (the JWKS, and the issuer's metadata when `oauth.jwks_url` is unset) is bounded by
//! `oauth.jwks_timeout_ms` and `oauth.jwks_max_bytes`, follows no redirect, and a failed one keeps the keys
//! already known.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};

use super::config::OAuthConfig;

/// A verification key of the set.
pub struct VerifyingKey {
    pub key: DecodingKey,
    /// The `alg` the JWK is restricted to, if it names one.
    pub algorithm: Option<Algorithm>,
}

/// The keys of one fetch, by `kid`; keys without a `kid` are tried for tokens without one.
#[derive(Default)]
struct KeySet {
    by_kid: HashMap<String, Arc<VerifyingKey>>,
    anonymous: Vec<Arc<VerifyingKey>>,
    /// When the set was fetched (`None`: never).
    fetched_at: Option<Instant>,
}

/// Why no key could be had for a token.
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    /// The set (fresh enough, or fetched again) has no key with this `kid`.
    #[error("no signing key with this kid is known to the issuer")]
    UnknownKey,
    /// The set could not be fetched and none is known.
    #[error("the issuer's signing keys cannot be fetched: {0}")]
    Unavailable(String),
}

/// Why the issuer's JWKS could not be fetched; `Display` is the reason logged and given in
/// [`JwksError::Unavailable`].
#[derive(Debug, thiserror::Error)]
enum FetchError {
    /// The request failed (its URL left out: it is named where it matters).
    #[error("{0}")]
    Request(reqwest::Error),
    #[error("HTTP {0}")]
    Status(reqwest::StatusCode),
    #[error("larger than {0} bytes (oauth.jwks_max_bytes)")]
    TooLarge(u64),
    /// A metadata document that is not JSON.
    #[error("{0}")]
    Metadata(serde_json::Error),
    #[error("the JWKS is not valid: {0}")]
    InvalidSet(serde_json::Error),
    /// No metadata document named a JWKS: each URL tried, and why it did not.
    #[error("{}", .0.join("; "))]
    Undiscovered(Vec<String>),
}

/// The issuer's JWKS, cached.
pub struct Jwks {
    issuer: String,
    configured_url: Option<String>,
    client: reqwest::Client,
    max_bytes: u64,
    refresh: Duration,
    min_refetch: Duration,
    /// Read on every token; replaced whole by a fetch. A std lock: held only to clone an `Arc`.
    keys: RwLock<Arc<KeySet>>,
    /// The `jwks_uri` discovered in the issuer's metadata, once found.
    discovered: RwLock<Option<String>>,
    /// One fetch at a time; holds when the last one was attempted, successful or not.
    fetch_turn: tokio::sync::Mutex<Option<Instant>>,
}

impl Jwks {
    pub fn new(config: &OAuthConfig) -> Self {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_millis(config.jwks_timeout_ms))
            .build()
            .unwrap_or_default();
        Self {
            issuer: config.issuer.clone().unwrap_or_default(),
            configured_url: config.jwks_url.clone(),
            client,
            max_bytes: config.jwks_max_bytes,
            refresh: Duration::from_secs(config.jwks_refresh_secs),
            min_refetch: Duration::from_millis(config.jwks_min_refetch_ms),
            keys: RwLock::new(Arc::new(KeySet::default())),
            discovered: RwLock::new(None),
            fetch_turn: tokio::sync::Mutex::new(None),
        }
    }

    fn current(&self) -> Arc<KeySet> {
        self.keys.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The keys that may have signed a token with header `kid`: the one key of that `kid`, or (no `kid`)
    /// every key without one.
    pub async fn keys_for(&self, kid: Option<&str>) -> Result<Vec<Arc<VerifyingKey>>, JwksError> {
        let set = self.current();
        let is_fresh = set.fetched_at.is_some_and(|at| at.elapsed() < self.refresh);
        if is_fresh && let Some(found) = Self::lookup(&set, kid) {
            return Ok(found);
        }
        let mut turn = self.fetch_turn.lock().await;
        // Another request may have fetched while this one waited for its turn.
        let set = self.current();
        let is_fresh = set.fetched_at.is_some_and(|at| at.elapsed() < self.refresh);
        let found = Self::lookup(&set, kid);
        // Fetched (or tried) moments ago: what is known must do, stale or not.
        let is_due = turn.is_none_or(|at| at.elapsed() >= self.min_refetch);
        if (is_fresh && found.is_some()) || !is_due {
            return match (found, set.fetched_at) {
                (Some(found), _) => Ok(found),
                (None, Some(_)) => Err(JwksError::UnknownKey),
                (None, None) => Err(JwksError::Unavailable("the last fetch failed moments ago".to_owned())),
            };
        }
        *turn = Some(Instant::now());
        match self.fetch().await {
            Ok(fresh) => {
                let fresh = Arc::new(fresh);
                *self.keys.write().unwrap_or_else(std::sync::PoisonError::into_inner) = fresh.clone();
                Self::lookup(&fresh, kid).ok_or(JwksError::UnknownKey)
            }
            Err(error) => {
                tracing::warn!(%error, issuer = %self.issuer, "could not fetch the issuer's JWKS; keeping the known keys");
                match (found, set.fetched_at) {
                    (Some(found), _) => Ok(found),
                    (None, Some(_)) => Err(JwksError::UnknownKey),
                    (None, None) => Err(JwksError::Unavailable(error.to_string())),
                }
            }
        }
    }

    fn lookup(set: &KeySet, kid: Option<&str>) -> Option<Vec<Arc<VerifyingKey>>> {
        match kid {
            Some(kid) => set.by_kid.get(kid).map(|key| vec![key.clone()]),
            None => (!set.anonymous.is_empty()).then(|| set.anonymous.clone()),
        }
    }

    /// Fetches and parses the set.
    async fn fetch(&self) -> Result<KeySet, FetchError> {
        let url = self.jwks_url().await?;
        let body = self.get(&url).await?;
        let set: JwkSet = serde_json::from_slice(&body).map_err(FetchError::InvalidSet)?;
        let mut keys = KeySet { fetched_at: Some(Instant::now()), ..KeySet::default() };
        for jwk in &set.keys {
            if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
                continue;
            }
            // Shared secrets are never verification keys here: a JWKS is public.
            if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_) | AlgorithmParameters::Other(_)) {
                continue;
            }
            let Ok(key) = DecodingKey::from_jwk(jwk) else { continue };
            let algorithm = jwk.common.key_algorithm.and_then(|alg| Algorithm::try_from(alg).ok());
            let key = Arc::new(VerifyingKey { key, algorithm });
            match &jwk.common.key_id {
                Some(kid) => {
                    keys.by_kid.insert(kid.clone(), key);
                }
                None => keys.anonymous.push(key),
            }
        }
        Ok(keys)
    }

    /// `oauth.jwks_url`, else the `jwks_uri` of the issuer's metadata (RFC 8414, then OpenID Connect
    /// discovery), whose `issuer` must be the configured one (RFC 8414 §3.3).
    async fn jwks_url(&self) -> Result<String, FetchError> {
        if let Some(url) = &self.configured_url {
            return Ok(url.clone());
        }
        if let Some(url) = self.discovered.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone() {
            return Ok(url);
        }
        let mut problems = Vec::new();
        for url in discovery_urls(&self.issuer) {
            let metadata = match self
                .get(&url)
                .await
                .and_then(|body| serde_json::from_slice::<serde_json::Value>(&body).map_err(FetchError::Metadata))
            {
                Ok(metadata) => metadata,
                Err(error) => {
                    problems.push(format!("{url}: {error}"));
                    continue;
                }
            };
            if metadata["issuer"].as_str() != Some(self.issuer.as_str()) {
                problems.push(format!("{url}: its issuer is not {}", self.issuer));
                continue;
            }
            match metadata["jwks_uri"].as_str() {
                Some(jwks) if super::config::is_http_url(jwks) => {
                    *self.discovered.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(jwks.to_owned());
                    return Ok(jwks.to_owned());
                }
                _ => problems.push(format!("{url}: no jwks_uri")),
            }
        }
        Err(FetchError::Undiscovered(problems))
    }

    /// The body of `GET url`, at most `max_bytes`, within the client's timeout.
    async fn get(&self, url: &str) -> Result<Vec<u8>, FetchError> {
        let mut response =
            self.client.get(url).send().await.map_err(|error| FetchError::Request(error.without_url()))?;
        if !response.status().is_success() {
            return Err(FetchError::Status(response.status()));
        }
        if response.content_length().is_some_and(|length| length > self.max_bytes) {
            return Err(FetchError::TooLarge(self.max_bytes));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|error| FetchError::Request(error.without_url()))? {
            if (body.len() + chunk.len()) as u64 > self.max_bytes {
                return Err(FetchError::TooLarge(self.max_bytes));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// Where an issuer's metadata may be: RFC 8414's well-known path inserted before the issuer's path, then
/// OpenID Connect discovery's appended to it.
fn discovery_urls(issuer: &str) -> Vec<String> {
    let issuer = issuer.trim_end_matches('/');
    let Some((scheme, rest)) = issuer.split_once("://") else { return Vec::new() };
    let (authority, path) = rest.find('/').map_or((rest, ""), |slash| rest.split_at(slash));
    vec![
        format!("{scheme}://{authority}/.well-known/oauth-authorization-server{path}"),
        format!("{issuer}/.well-known/openid-configuration"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_inserts_the_well_known_path() {
        assert_eq!(
            discovery_urls("https://idp.example.com"),
            [
                "https://idp.example.com/.well-known/oauth-authorization-server",
                "https://idp.example.com/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            discovery_urls("https://idp.example.com/tenant/1/"),
            [
                "https://idp.example.com/.well-known/oauth-authorization-server/tenant/1",
                "https://idp.example.com/tenant/1/.well-known/openid-configuration"
            ]
        );
    }
}
