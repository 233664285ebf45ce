//! `POST /oauth/token` (RFC 6749 §4.1.3, §6; OAuth 2.1) and `POST /oauth/revoke` (RFC 7009).
//!
//! - `authorization_code`: the code once only (a second exchange revokes every token the first issued), its
//!   PKCE verifier (S256), its client and redirect URI, and its resource if given again.
//! - `refresh_token`: rotated on every use; presenting a rotated one revokes its whole family.
//!
//! Either way the key the grant is bound to must still be usable. Answers are never cached; errors are
//! RFC 6749 JSON.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::audit::{self, Event};
use super::error::{OAuthError, no_store};
use super::params::{Params, Submission};
use super::{ACCESS_TOKEN_PREFIX, BuiltinServer, REFRESH_TOKEN_PREFIX};
use crate::domain::key::random_token;
use crate::domain::model::KeyRecord;
use crate::domain::time::Timestamp;
use crate::http::auth::KeyError;
use crate::state::AppState;
use crate::store::oauth_server::{Exchange, NewToken, TokenKind};

pub const PATH: &str = "/oauth/token";
pub const REVOKE_PATH: &str = "/oauth/revoke";

/// `POST /oauth/token`.
pub async fn handler(Submission { state, peer, headers, body }: Submission) -> Response {
    let Some(server) = state.oauth_server.clone() else {
        return OAuthError::invalid_request("the built-in authorization server is off").into_response();
    };
    let client_ip = super::authorize::client_address(&state, peer, &headers);
    if let Err(wait) = server.token_requests.check_key(&super::rate_key(client_ip)) {
        let wait = wait.wait_time_from(governor::clock::Clock::now(&governor::clock::DefaultClock::default()));
        return OAuthError::too_many(
            format!("too many token requests from this address ({} a minute)", super::TOKEN_REQUESTS_PER_MINUTE),
            wait.as_secs().max(1),
        )
        .into_response();
    }
    let outcome = async {
        let params = Params::from_form(&headers, body).await?;
        let context = Context { state: &state, server: &server, client_ip };
        match params.require("grant_type")? {
            "authorization_code" => context.exchange_code(&params).await,
            "refresh_token" => context.refresh(&params).await,
            other => Err(OAuthError::unsupported_grant_type(format!(
                "grant_type {other:?}: authorization_code and refresh_token are supported"
            ))),
        }
    }
    .await;
    match outcome {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

struct Context<'a> {
    state: &'a AppState,
    server: &'a BuiltinServer,
    client_ip: std::net::IpAddr,
}

/// The access and refresh tokens of one issue.
struct Issued {
    access: String,
    refresh: String,
    rows: [NewToken; 2],
}

impl Context<'_> {
    async fn exchange_code(&self, params: &Params) -> Result<Response, OAuthError> {
        let code = params.require("code")?;
        let client_id = params.require("client_id")?;
        let verifier = params.require("code_verifier")?;
        let redirect_uri = params.require("redirect_uri")?;
        let store = self.state.store.oauth_server();
        let digest = self.server.hasher.digest(code).to_hex();
        let Some(stored) = store.find_code(&digest).await? else {
            return Err(OAuthError::invalid_grant("the code is unknown or expired"));
        };
        let code = stored.code;
        let refuse = |outcome: &'static str, description: &str| {
            self.audit(&code.agent_id, None, "oauth/token", &code.client_id, outcome);
            OAuthError::invalid_grant(description)
        };
        let now = Timestamp::now();
        if stored.used_at.is_some() {
            // A replayed code: whoever holds it, the grant it started is no longer safe.
            store.revoke_family(&code.family_id, now).await?;
            return Err(refuse("code_reused", "the code was used already: the tokens it issued are revoked"));
        }
        if code.expires_at <= now {
            return Err(refuse("code_expired", "the code has expired"));
        }
        if code.client_id != client_id {
            return Err(refuse("client_mismatch", "the code was issued to another client"));
        }
        if code.redirect_uri != redirect_uri {
            return Err(refuse("redirect_uri_mismatch", "redirect_uri differs from the authorization request's"));
        }
        if params.get("resource").is_some_and(|resource| resource != code.resource) {
            return Err(OAuthError::invalid_target("resource differs from the authorization request's"));
        }
        if !verifier_matches(verifier, &code.code_challenge) {
            return Err(refuse("pkce_mismatch", "code_verifier does not match the code_challenge"));
        }
        let key = self.usable_key(&code.key_id, &code.agent_id).await.inspect_err(|error| {
            if error.code == "invalid_grant" {
                self.audit(&code.agent_id, None, "oauth/token", &code.client_id, "key_refused");
            }
        })?;
        let issued = self.issue(&code.family_id, &code.client_id, &key, &code.resource, &code.scopes, now);
        match store.exchange_code(&digest, now, &issued.rows, self.server.bounds()).await? {
            Exchange::Done => {
                self.audit(&code.agent_id, Some(&key), "oauth/token", &code.client_id, "ok");
                Ok(self.answer(&issued, &code.scopes))
            }
            Exchange::Replayed => {
                Err(refuse("code_reused", "the code was used already: the tokens it issued are revoked"))
            }
        }
    }

    async fn refresh(&self, params: &Params) -> Result<Response, OAuthError> {
        let presented = params.require("refresh_token")?;
        let client_id = params.require("client_id")?;
        let store = self.state.store.oauth_server();
        let digest = self.server.hasher.digest(presented).to_hex();
        let unknown = || OAuthError::invalid_grant("the refresh token is unknown, expired or revoked");
        if !presented.starts_with(REFRESH_TOKEN_PREFIX) {
            return Err(unknown());
        }
        let Some(stored) = store.find_token(&digest).await? else { return Err(unknown()) };
        let token = stored.token;
        if token.kind != TokenKind::Refresh {
            return Err(unknown());
        }
        let now = Timestamp::now();
        let refuse = |outcome: &'static str, error: OAuthError| {
            self.audit(&token.agent_id, None, "oauth/refresh", &token.client_id, outcome);
            error
        };
        if stored.used_at.is_some() || stored.revoked_at.is_some() {
            store.revoke_family(&token.family_id, now).await?;
            return Err(refuse(
                "refresh_reused",
                OAuthError::invalid_grant("the refresh token was used or revoked: its grant is revoked"),
            ));
        }
        if token.expires_at <= now {
            return Err(refuse("refresh_expired", unknown()));
        }
        if token.client_id != client_id {
            return Err(refuse(
                "client_mismatch",
                OAuthError::invalid_grant("the refresh token was issued to another client"),
            ));
        }
        if params.get("resource").is_some_and(|resource| resource != token.resource) {
            return Err(OAuthError::invalid_target("resource differs from the grant's"));
        }
        let scopes = super::authorize::requested_scope(params.get("scope").or(Some(&token.scopes)))
            .map_err(|error| OAuthError::invalid_scope(error.to_string()))?;
        let key = self.usable_key(&token.key_id, &token.agent_id).await.inspect_err(|error| {
            if error.code == "invalid_grant" {
                self.audit(&token.agent_id, None, "oauth/refresh", &token.client_id, "key_refused");
            }
        })?;
        let issued = self.issue(&token.family_id, &token.client_id, &key, &token.resource, &scopes, now);
        match store.rotate_refresh(&digest, now, &issued.rows).await? {
            Exchange::Done => {
                self.audit(&token.agent_id, Some(&key), "oauth/refresh", &token.client_id, "ok");
                Ok(self.answer(&issued, &scopes))
            }
            Exchange::Replayed => Err(refuse(
                "refresh_reused",
                OAuthError::invalid_grant("the refresh token was used or revoked: its grant is revoked"),
            )),
        }
    }

    /// The key a grant is bound to, if it is still usable (through the key cache, as the MCP endpoint).
    async fn usable_key(
        &self,
        key_id: &str,
        agent: &crate::domain::AgentId,
    ) -> Result<std::sync::Arc<crate::guard::Bucketed<KeyRecord>>, OAuthError> {
        let gone = || OAuthError::invalid_grant("the key this grant is bound to is revoked, expired or deleted");
        match self.state.keys.by_id(key_id).await {
            Ok(key) if &key.agent_id == agent && key.scopes.contains(&crate::domain::Scope::Mcp) => Ok(key),
            Ok(_) | Err(KeyError::Unauthenticated) => Err(gone()),
            Err(KeyError::Store(error)) => Err(error.into()),
        }
    }

    fn issue(
        &self,
        family: &str,
        client_id: &str,
        key: &KeyRecord,
        resource: &str,
        scopes: &str,
        now: Timestamp,
    ) -> Issued {
        let config = &self.server.config;
        let access = random_token(ACCESS_TOKEN_PREFIX);
        let refresh = random_token(REFRESH_TOKEN_PREFIX);
        let row = |secret: &str, kind: TokenKind, ttl: u64| NewToken {
            digest: self.server.hasher.digest(secret).to_hex(),
            kind,
            family_id: family.to_owned(),
            client_id: client_id.to_owned(),
            agent_id: key.agent_id.clone(),
            key_id: key.id.clone(),
            resource: resource.to_owned(),
            scopes: scopes.to_owned(),
            expires_at: Timestamp::from_micros(now.as_micros().saturating_add(super::client::secs_micros(ttl))),
            created_at: now,
        };
        let rows = [
            row(&access, TokenKind::Access, config.access_token_ttl_secs),
            row(&refresh, TokenKind::Refresh, config.refresh_token_ttl_secs),
        ];
        Issued { access, refresh, rows }
    }

    fn answer(&self, issued: &Issued, scopes: &str) -> Response {
        let body = json!({
            "access_token": issued.access,
            "token_type": "Bearer",
            "expires_in": self.server.config.access_token_ttl_secs,
            "refresh_token": issued.refresh,
            "scope": scopes,
        });
        let mut response = (StatusCode::OK, axum::Json(body)).into_response();
        no_store(&mut response);
        response
    }

    fn audit(
        &self,
        agent: &crate::domain::AgentId,
        key: Option<&KeyRecord>,
        action: &'static str,
        client_id: &str,
        outcome: &'static str,
    ) {
        audit::record(self.state, Event { agent, key, action, client_id, outcome, client_ip: Some(self.client_ip) });
    }
}

/// Whether `verifier` (RFC 7636 §4.1: 43 to 128 unreserved characters) hashes to `challenge` (S256).
pub fn verifier_matches(verifier: &str, challenge: &str) -> bool {
    let well_formed = (43..=128).contains(&verifier.len())
        && verifier.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'));
    if !well_formed {
        return false;
    }
    let computed = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    subtle::ConstantTimeEq::ct_eq(computed.as_bytes(), challenge.as_bytes()).into()
}

/// `POST /oauth/revoke` (RFC 7009): an access token is revoked, a refresh token revokes its whole grant. The
/// answer is 200 whether or not the token was known (or was the client's), so it tells nothing.
pub async fn revoke(State(state): State<AppState>, headers: HeaderMap, body: axum::body::Body) -> Response {
    let Some(server) = state.oauth_server.clone() else {
        return OAuthError::invalid_request("the built-in authorization server is off").into_response();
    };
    let outcome = async {
        let params = Params::from_form(&headers, body).await?;
        let presented = params.require("token")?;
        let client_id = params.require("client_id")?;
        let store = state.store.oauth_server();
        let digest = server.hasher.digest(presented).to_hex();
        if let Some(stored) = store.find_token(&digest).await?
            && stored.token.client_id == client_id
        {
            let now = Timestamp::now();
            match stored.token.kind {
                TokenKind::Access => store.revoke_token(&digest, now).await?,
                TokenKind::Refresh => store.revoke_family(&stored.token.family_id, now).await?,
            }
            audit::record(
                &state,
                Event {
                    agent: &stored.token.agent_id,
                    key: None,
                    action: "oauth/revoke",
                    client_id,
                    outcome: "ok",
                    client_ip: None,
                },
            );
        }
        let mut response = StatusCode::OK.into_response();
        no_store(&mut response);
        Ok::<_, OAuthError>(response)
    }
    .await;
    outcome.unwrap_or_else(IntoResponse::into_response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verifier_matches_its_s256_challenge_only() {
        // The challenge computed independently: base64url(SHA-256(verifier)) without padding.
        let verifier = "hivegate-pkce-verifier-0123456789abcdefghijklmnop";
        assert!(verifier_matches(verifier, "dc431qBmqMbOVbfWcf8qFOrm5GYcmmmJapfsYgNavg4"));
        assert!(!verifier_matches(verifier, "dc431qBmqMbOVbfWcf8qFOrm5GYcmmmJapfsYgNavg5"));
        assert!(!verifier_matches("short", "dc431qBmqMbOVbfWcf8qFOrm5GYcmmmJapfsYgNavg4"));
        assert!(!verifier_matches(&format!("{verifier} "), "dc431qBmqMbOVbfWcf8qFOrm5GYcmmmJapfsYgNavg4"));
    }
}
