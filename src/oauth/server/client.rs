//! Clients: registered through Dynamic Client Registration (RFC 7591, `POST /oauth/register`, stored) or
//! identified by the URL of their metadata document (fetched, [`super::metadata_document`]). Both are public
//! clients (no secret; PKCE proves the code's owner), described by the same checked [`ClientInfo`].
//!
//! [`super::metadata_document`]: crate::oauth::server::metadata_document
//! [`ClientInfo`]: crate::oauth::server::client::ClientInfo

use std::net::IpAddr;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::config::BuiltinConfig;
use super::error::{OAuthError, no_store};
use super::params::Submission;
use crate::domain::key::random_token;
use crate::domain::time::Timestamp;
use crate::state::AppState;
use crate::store::oauth_server::{ClientBounds, StoredClient};

/// Registered client ids start with this; a client id that is an `https://` URL names a metadata document.
pub const CLIENT_ID_PREFIX: &str = "hgc_";

/// A client the authorization server knows, its fields checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    pub id: String,
    pub name: Option<String>,
    pub redirect_uris: Vec<String>,
}

/// The client metadata fields hivegate reads (RFC 7591 §2); others are ignored.
#[derive(Debug, Deserialize)]
pub struct ClientMetadata {
    pub client_id: Option<String>,
    pub redirect_uris: Option<Vec<String>>,
    pub client_name: Option<String>,
    pub token_endpoint_auth_method: Option<String>,
    pub grant_types: Option<Vec<String>>,
    pub response_types: Option<Vec<String>>,
}

impl ClientMetadata {
    /// The checked client this metadata describes, with id `id`. Clients are public: a metadata document
    /// asking for another authentication method is refused (a registration gets `none` instead, RFC 7591
    /// §3.2.1 lets the server choose).
    pub fn check(self, id: String, config: &BuiltinConfig, is_document: bool) -> Result<ClientInfo, OAuthError> {
        if is_document
            && let Some(method) = self.token_endpoint_auth_method.as_deref()
            && method != "none"
        {
            return Err(OAuthError::invalid_client_metadata(format!(
                "token_endpoint_auth_method {method:?} is not supported: clients are public (\"none\")"
            )));
        }
        if let Some(grants) = &self.grant_types {
            if let Some(other) =
                grants.iter().find(|grant| !matches!(grant.as_str(), "authorization_code" | "refresh_token"))
            {
                return Err(OAuthError::invalid_client_metadata(format!("grant type {other:?} is not supported")));
            }
            if !grants.iter().any(|grant| grant == "authorization_code") {
                return Err(OAuthError::invalid_client_metadata("grant_types must include authorization_code"));
            }
        }
        if let Some(types) = &self.response_types
            && types.iter().any(|kind| kind != "code")
        {
            return Err(OAuthError::invalid_client_metadata("response_types may only hold \"code\""));
        }
        let redirect_uris = self.redirect_uris.unwrap_or_default();
        if redirect_uris.is_empty() {
            return Err(OAuthError::invalid_redirect_uri("redirect_uris must list at least one URI"));
        }
        if redirect_uris.len() > config.max_redirect_uris {
            return Err(OAuthError::invalid_redirect_uri(format!(
                "at most {} redirect URIs (oauth.builtin.max_redirect_uris)",
                config.max_redirect_uris
            )));
        }
        for uri in &redirect_uris {
            check_redirect_uri(uri, config.max_redirect_uri_bytes)?;
        }
        let name = match self.client_name.map(|name| name.trim().to_owned()).filter(|name| !name.is_empty()) {
            Some(name) if name.len() > config.max_client_name_bytes => {
                return Err(OAuthError::invalid_client_metadata(format!(
                    "client_name is longer than {} bytes (oauth.builtin.max_client_name_bytes)",
                    config.max_client_name_bytes
                )));
            }
            Some(name) if name.chars().any(char::is_control) => {
                return Err(OAuthError::invalid_client_metadata("client_name holds control characters"));
            }
            name => name,
        };
        Ok(ClientInfo { id, name, redirect_uris })
    }
}

/// A redirect URI a code may be sent to: absolute, without fragment, not longer than `max_bytes`; `https`,
/// `http` only to a loopback host (native apps, RFC 8252 §7.3), or a private-use scheme (RFC 8252 §7.1)
/// other than those a browser would run or read.
pub fn check_redirect_uri(uri: &str, max_bytes: usize) -> Result<(), OAuthError> {
    if uri.len() > max_bytes {
        return Err(OAuthError::invalid_redirect_uri(format!(
            "a redirect URI is longer than {max_bytes} bytes (oauth.builtin.max_redirect_uri_bytes)"
        )));
    }
    let parsed = url::Url::parse(uri).map_err(|error| {
        OAuthError::invalid_redirect_uri(format!("redirect URI {uri:?} is not an absolute URI: {error}"))
    })?;
    if parsed.fragment().is_some() {
        return Err(OAuthError::invalid_redirect_uri(format!("redirect URI {uri:?} has a fragment")));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(OAuthError::invalid_redirect_uri(format!("redirect URI {uri:?} holds credentials")));
    }
    match parsed.scheme() {
        "https" => Ok(()),
        "http" if is_loopback_host(&parsed) => Ok(()),
        "http" => Err(OAuthError::invalid_redirect_uri(format!(
            "redirect URI {uri:?}: plain http is only allowed to a loopback host"
        ))),
        "javascript" | "data" | "file" | "vbscript" | "blob" | "about" | "ws" | "wss" | "ftp" => {
            Err(OAuthError::invalid_redirect_uri(format!("redirect URI {uri:?} has a scheme that is not allowed")))
        }
        _ => Ok(()),
    }
}

fn is_loopback_host(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

impl From<StoredClient> for ClientInfo {
    fn from(client: StoredClient) -> Self {
        Self { id: client.id, name: client.name, redirect_uris: client.redirect_uris }
    }
}

/// `POST /oauth/register` (RFC 7591): registers a public client. Bounded: the body's size, the redirect URIs'
/// number and length, the name's length, registrations per client address and minute, and the number of
/// registered clients (unused ones are pruned to make room).
pub async fn register(Submission { state, peer, headers, body }: Submission) -> Response {
    match register_client(&state, peer.ip(), &headers, body).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

/// How long a registered client that has not yet been used to obtain a code keeps its place once the table
/// is full.
const NEVER_USED_SECS: u64 = 3600;

async fn register_client(
    state: &AppState,
    peer: IpAddr,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> Result<Response, OAuthError> {
    let Some(server) = state.oauth_server.as_ref() else {
        return Err(OAuthError::invalid_request("the built-in authorization server is off"));
    };
    let client_ip = state.guard.client_ip(peer, headers);
    if let Err(wait) = server.registrations.check_key(&super::rate_key(client_ip)) {
        let wait = wait.wait_time_from(governor::clock::Clock::now(&governor::clock::DefaultClock::default()));
        return Err(OAuthError::too_many(
            "too many registrations from this address (oauth.builtin.registrations_per_minute)",
            wait.as_secs().max(1),
        ));
    }
    if !super::params::has_media_type(headers, "application/json") {
        return Err(OAuthError::invalid_client_metadata("the body must be application/json"));
    }
    let bytes = super::params::read_body(body).await?;
    let metadata: ClientMetadata = serde_json::from_slice(&bytes)
        .map_err(|error| OAuthError::invalid_client_metadata(format!("the body is not client metadata: {error}")))?;
    let config = &server.config;
    let client = metadata.check(random_token(CLIENT_ID_PREFIX), config, false)?;
    let now = Timestamp::now();
    let stored = StoredClient {
        id: client.id.clone(),
        name: client.name.clone(),
        redirect_uris: client.redirect_uris.clone(),
        last_used_at: now,
        created_at: now,
    };
    let bounds = ClientBounds {
        max_clients: config.max_clients,
        idle_before: Timestamp::from_micros(now.as_micros().saturating_sub(secs_micros(config.client_idle_secs))),
        never_used_before: Timestamp::from_micros(now.as_micros().saturating_sub(secs_micros(NEVER_USED_SECS))),
    };
    if !state.store.oauth_server().register_client(&stored, bounds).await? {
        tracing::warn!(max = config.max_clients, "client registration refused: oauth.builtin.max_clients reached");
        return Err(OAuthError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "temporarily_unavailable",
            description: "the registered clients are at their limit (oauth.builtin.max_clients)".to_owned(),
            retry_after: Some(3600),
        });
    }
    tracing::info!(client_id = %client.id, "client registered");
    let body = json!({
        "client_id": client.id,
        "client_id_issued_at": now.as_micros() / 1_000_000,
        "client_name": client.name,
        "redirect_uris": client.redirect_uris,
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    });
    let mut response = (StatusCode::CREATED, axum::Json(body)).into_response();
    no_store(&mut response);
    Ok(response)
}

/// `secs` as microseconds, saturating.
pub fn secs_micros(secs: u64) -> i64 {
    i64::try_from(secs).unwrap_or(i64::MAX).saturating_mul(1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_uris_are_checked() {
        for good in ["https://app.example/cb", "http://127.0.0.1:3000/cb", "http://localhost/cb", "cursor://cb"] {
            check_redirect_uri(good, 2048).unwrap_or_else(|error| panic!("{good}: {error:?}"));
        }
        for bad in [
            "/relative",
            "http://example.com/cb",
            "https://a.example/cb#frag",
            "javascript:alert(1)",
            "https://u:p@a.example/",
        ] {
            assert!(check_redirect_uri(bad, 2048).is_err(), "{bad} accepted");
        }
        assert!(check_redirect_uri(&format!("https://a.example/{}", "x".repeat(100)), 50).is_err());
    }

    #[test]
    fn metadata_is_bounded() {
        let config = BuiltinConfig { max_redirect_uris: 2, ..BuiltinConfig::default() };
        let metadata = |uris: Vec<&str>, name: &str| ClientMetadata {
            client_id: None,
            redirect_uris: Some(uris.into_iter().map(str::to_owned).collect()),
            client_name: Some(name.to_owned()),
            token_endpoint_auth_method: None,
            grant_types: None,
            response_types: None,
        };
        assert!(metadata(vec!["https://a.example/1"], "ok").check("id".into(), &config, false).is_ok());
        assert!(metadata(vec![], "ok").check("id".into(), &config, false).is_err());
        let three = vec!["https://a.example/1", "https://a.example/2", "https://a.example/3"];
        assert!(metadata(three, "ok").check("id".into(), &config, false).is_err());
        assert!(metadata(vec!["https://a.example/1"], &"n".repeat(300)).check("id".into(), &config, false).is_err());
    }
}
