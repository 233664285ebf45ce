//! `oauth.mode = "external"`: access tokens are JWTs of an identity provider (`oauth.issuer`).
//!
//! A token is accepted for an agent when its signature verifies with a key of the issuer's JWKS
//! ([`super::jwks`]) under an algorithm of `oauth.algorithms` (never `none`, never HMAC: a JWKS is public),
//! its `iss` is the issuer, its `aud` the agent's canonical MCP URL (RFC 8707), `exp` and `nbf` hold within
//! `oauth.leeway_s`, its scopes (`scope` string or `scp` array) hold `mcp`, and its subject (`sub`) is
//! granted on the agent through the admin API ([`crate::admin::oauth_subjects`]). The grant names the key
//! the token acts as. Nothing of the token is logged.
//!
//! [`super::jwks`]: crate::oauth::jwks

use std::sync::Arc;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;

use super::config::OAuthConfig;
use super::jwks::{Jwks, JwksError};
use super::{AuthError, Grant, SCOPE};
use crate::FastMap;
use crate::domain::time::Timestamp;
use crate::domain::{AgentId, Scope};
use crate::events::{BusHook, BusMessage, CacheGate, Stale};
use crate::store::Store;

/// The claims hivegate reads; `iss`, `aud`, `exp` and `nbf` are checked by [`jsonwebtoken`].
#[derive(Debug, Deserialize)]
struct Claims {
    /// Optional here so that a token without one is refused as lacking a required claim.
    #[serde(default)]
    sub: Option<String>,
    #[serde(default)]
    exp: Option<u64>,
    /// Space-separated scopes (RFC 9068, RFC 8693).
    #[serde(default)]
    scope: Option<String>,
    /// Scopes as an array (or a string), as some identity providers send them.
    #[serde(default)]
    scp: Option<serde_json::Value>,
}

impl Claims {
    fn scopes(&self) -> Vec<&str> {
        let mut scopes: Vec<&str> = self.scope.as_deref().map(|s| s.split(' ').collect()).unwrap_or_default();
        match &self.scp {
            Some(serde_json::Value::String(text)) => scopes.extend(text.split(' ')),
            Some(serde_json::Value::Array(items)) => scopes.extend(items.iter().filter_map(|item| item.as_str())),
            _ => {}
        }
        scopes
    }
}

/// The validator of the external issuer's tokens.
pub struct External {
    issuer: String,
    algorithms: Vec<Algorithm>,
    leeway: u64,
    jwks: Jwks,
    store: Arc<dyn Store>,
    grants: GrantCache,
}

/// Granted subjects, (agent, subject) → the key id, so that a token costs no database read once its subject
/// was seen. Only grants that exist are kept (at most the stored grants). Entries are dropped by the bus
/// messages a grant's change commits with (`KeyChanged` of the key it named), by a key's revocation, by the
/// agent's deletion, and all of them while the bus is offline; the gate's generation keeps a read that raced an
/// invalidation out of the map, as in [`crate::http::auth::KeyCache`].
#[derive(Default)]
struct GrantCache {
    entries: FastMap<(AgentId, String), String>,
    gate: CacheGate,
}

impl GrantCache {
    fn forget(&self, keep: impl Fn(&(AgentId, String), &String) -> bool) {
        self.gate.invalidate();
        self.entries.retain(|lookup, key| keep(lookup, key));
    }
}

impl BusHook for External {
    fn apply(&self, message: &BusMessage) {
        let grants = &self.grants;
        // A grant's change commits with `KeyChanged` of the key it names: grants hold the key's settings.
        let forget_stale = |stale: Stale<'_>| {
            if let Some(is_stale) = stale.of_keys(true) {
                grants.forget(|(agent, _), key| !is_stale(agent, key));
            }
        };
        grants.gate.apply(message, || grants.forget(|_, _| false), forget_stale);
    }
}

impl External {
    pub fn new(config: &OAuthConfig, store: Arc<dyn Store>) -> Self {
        Self {
            issuer: config.issuer.clone().unwrap_or_default(),
            algorithms: config.parsed_algorithms(),
            leeway: config.leeway_s,
            jwks: Jwks::new(config),
            store,
            grants: GrantCache::default(),
        }
    }

    /// The issuer identifier subjects are granted under.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The grant behind `token` presented for `agent`, whose canonical MCP URL is `resource`.
    pub async fn grant(&self, token: &str, agent: &AgentId, resource: &str) -> Result<Grant, AuthError> {
        let invalid = |why: &str| AuthError::Token(why.to_owned());
        let header = jsonwebtoken::decode_header(token).map_err(|_| invalid("not a signed JWT"))?;
        if !self.algorithms.contains(&header.alg) {
            return Err(invalid("its signature algorithm is not accepted (oauth.algorithms)"));
        }
        let keys = self.jwks.keys_for(header.kid.as_deref()).await.map_err(|error| match error {
            JwksError::UnknownKey => invalid("no signing key of the issuer has its kid"),
            JwksError::Unavailable(why) => AuthError::Unavailable(why),
        })?;
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.leeway = self.leeway;
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[resource]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let mut refusal = invalid("no signing key of the issuer fits it");
        let mut claims = None;
        for key in keys {
            if key.algorithm.is_some_and(|alg| alg != header.alg) || key.key.family() != header.alg.family() {
                continue;
            }
            match jsonwebtoken::decode::<Claims>(token, &key.key, &validation) {
                Ok(data) => {
                    claims = Some(data.claims);
                    break;
                }
                Err(error) => refusal = invalid(why(error.kind())),
            }
        }
        let claims = claims.ok_or(refusal)?;
        if !claims.scopes().contains(&SCOPE) {
            return Err(AuthError::Forbidden(format!("the access token does not have scope {SCOPE}")));
        }
        let scopes: Vec<Scope> = claims.scopes().into_iter().filter_map(Scope::parse).collect();
        let (Some(subject), Some(exp)) = (claims.sub.as_deref(), claims.exp) else {
            return Err(invalid(why(&ErrorKind::MissingRequiredClaim(String::new()))));
        };
        let key_id = self.granted_key(agent, subject).await?.ok_or_else(|| {
            AuthError::Forbidden(format!(
                "the token's subject is not granted on agent {agent} (the operator grants it with PUT \
                 /admin/v1/agents/{agent}/oauth-subjects/{{subject}})"
            ))
        })?;
        let expires_at = Timestamp::from_micros(i64::try_from(exp.saturating_mul(1_000_000)).unwrap_or(i64::MAX));
        Ok(Grant { key_id, agent: agent.clone(), scopes, expires_at })
    }

    /// The key `subject` of the issuer is granted as on `agent`, if any: cached, else read.
    async fn granted_key(&self, agent: &AgentId, subject: &str) -> Result<Option<String>, AuthError> {
        let lookup = (agent.clone(), subject.to_owned());
        if let Some(key) = self.grants.entries.get(&lookup) {
            return Ok(Some(key.clone()));
        }
        let generation = self.grants.gate.generation();
        let Some(grant) = self.store.get_oauth_subject(agent, &self.issuer, subject).await? else { return Ok(None) };
        if let dashmap::Entry::Vacant(slot) = self.grants.entries.entry(lookup)
            && self.grants.gate.may_keep(generation)
        {
            slot.insert(grant.key_id.clone());
        }
        Ok(Some(grant.key_id))
    }
}

/// What a validation failure says, naming no value of the token.
fn why(kind: &ErrorKind) -> &'static str {
    match kind {
        ErrorKind::ExpiredSignature => "it has expired (exp)",
        ErrorKind::ImmatureSignature => "it is not valid yet (nbf)",
        ErrorKind::InvalidAudience => "it was issued for another resource (aud)",
        ErrorKind::InvalidIssuer => "it was issued by another issuer (iss)",
        ErrorKind::InvalidSignature => "its signature does not verify",
        ErrorKind::InvalidAlgorithm => "its signature algorithm does not fit the key",
        ErrorKind::MissingRequiredClaim(_) => "it lacks a required claim (exp, iss, aud, sub)",
        _ => "it is not a valid access token",
    }
}
