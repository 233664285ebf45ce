//! `GET /oauth/authorize` shows the consent page; `POST /oauth/authorize` takes the decision.
//!
//! The request is checked in two stages (RFC 6749 §4.1.2.1): while the client or its redirect URI is not
//! established (unknown client, unfetchable metadata document, a redirect URI not registered exactly), the
//! error is shown on the page and nothing is redirected; after that, errors go back to the client's redirect
//! URI with an OAuth error code and the request's `state`.
//!
//! The form carries the request's parameters and a token signed with a key every replica shares, over those
//! parameters and the time it was issued: the POST is accepted only for a page this server rendered, within
//! `FORM_TTL`, with its parameters unchanged. The decision is the pasted key: it must be usable, carry
//! `mcp` and belong to the agent of `resource`, as on the MCP endpoint; a refused key counts toward the
//! client address's failed-authentication lockout.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::extract::{ConnectInfo, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::audit::{self, Event};
use super::client::ClientInfo;
use super::metadata_document::DocumentFetcher;
use super::page::{self, Form};
use super::params::{Params, Submission};
use super::{BuiltinServer, CODE_PREFIX, SCOPE};
use crate::domain::AgentId;
use crate::domain::key::{Scope, random_token};
use crate::domain::time::Timestamp;
use crate::http::auth::KeyError;
use crate::state::AppState;
use crate::store::StoreError;
use crate::store::oauth_server::NewCode;

pub const PATH: &str = "/oauth/authorize";

/// How long a rendered consent form may be submitted.
const FORM_TTL: Duration = Duration::from_secs(15 * 60);
/// Bytes of `state`, which is sent back as it came.
const MAX_STATE_BYTES: usize = 1024;

/// An authorization request whose every parameter checked out.
#[derive(Debug, Clone)]
struct Request {
    client: ClientInfo,
    redirect_uri: String,
    state: Option<String>,
    code_challenge: String,
    resource: String,
    agent: AgentId,
    scope: String,
}

/// Why a request is refused, and where that is said.
enum Refusal {
    /// On the page: the redirect URI cannot be trusted (yet).
    Page(StatusCode, String),
    /// To the client's redirect URI.
    Redirect { redirect_uri: String, state: Option<String>, error: &'static str, description: String },
}

impl Refusal {
    fn into_response(self, issuer: &str) -> Response {
        match self {
            Refusal::Page(status, message) => page::error(status, &message),
            Refusal::Redirect { redirect_uri, state, error, description } => {
                let pairs = [("error", error), ("error_description", description.as_str())];
                redirect(&redirect_uri, &pairs, state.as_deref(), issuer)
            }
        }
    }
}

/// `GET /oauth/authorize`: the consent page, or the refusal.
pub async fn show(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let Some(server) = state.oauth_server.as_ref() else { return page::error(StatusCode::NOT_FOUND, "off") };
    let params = match Params::parse(query.unwrap_or_default().as_bytes()) {
        Ok(params) => params,
        Err(error) => return page::error(StatusCode::BAD_REQUEST, &error.description),
    };
    let client_ip = client_address(&state, peer, &headers);
    match check(server, &params, client_ip).await {
        Ok(request) => consent_page(server, &request, StatusCode::OK, None),
        Err(refusal) => refusal.into_response(&server.issuer),
    }
}

/// `POST /oauth/authorize`: the user's decision.
pub async fn decide(Submission { state, peer, headers, body }: Submission) -> Response {
    let Some(server) = state.oauth_server.clone() else { return page::error(StatusCode::NOT_FOUND, "off") };
    // The decision must come from the consent page itself: another site's page could otherwise submit a
    // form token it fetched, and send the user's browser to the client's redirect URI (browsers say where
    // a form came from).
    if headers
        .get("sec-fetch-site")
        .and_then(|value| value.to_str().ok())
        .is_some_and(|site| !matches!(site, "same-origin" | "none"))
    {
        return page::error(StatusCode::FORBIDDEN, "The decision must be made on this server's own page.");
    }
    let params = match Params::from_form(&headers, body).await {
        Ok(params) => params,
        Err(error) => return page::error(error.status, &error.description),
    };
    let client_ip = client_address(&state, peer, &headers);
    let request = match check(&server, &params, client_ip).await {
        Ok(request) => request,
        Err(refusal) => return refusal.into_response(&server.issuer),
    };
    if !server.form_token_is_valid(&request, params.get("form_token").unwrap_or("")) {
        return page::error(
            StatusCode::BAD_REQUEST,
            "This form has expired or was altered. Start the connection again from your client.",
        );
    }
    let issuer = server.issuer.clone();
    match params.get("decision") {
        Some("allow") => {}
        Some("deny") => {
            let pairs = [("error", "access_denied"), ("error_description", "the key's owner denied the request")];
            return redirect(&request.redirect_uri, &pairs, request.state.as_deref(), &issuer);
        }
        _ => return consent_page(&server, &request, StatusCode::BAD_REQUEST, Some("Choose Allow or Deny.")),
    }
    let failures = state.guard.failures();
    if let Some(wait) = failures.blocked(client_ip) {
        let message = format!("Too many refused keys from your address: try again in {} s.", wait.as_secs().max(1));
        return consent_page(&server, &request, StatusCode::TOO_MANY_REQUESTS, Some(&message));
    }
    let presented = params.get("api_key").map(str::trim);
    let refused = |status: StatusCode, message: &str, outcome: &'static str| {
        if let Some(count) = failures.record(client_ip) {
            state.metrics.auth_lockouts.inc();
            tracing::warn!(client = %client_ip, failures = count, "client address locked out after refused keys");
        }
        audit::record(
            &state,
            Event {
                agent: &request.agent,
                key: None,
                action: "oauth/authorize",
                client_id: &request.client.id,
                outcome,
                client_ip: Some(client_ip),
            },
        );
        consent_page(&server, &request, status, Some(message))
    };
    let key = match state.keys.authenticate(presented).await {
        Ok(hit) => hit.key,
        Err(KeyError::Unauthenticated) => {
            return refused(
                StatusCode::UNAUTHORIZED,
                "That key is not valid: it is unknown, revoked or expired.",
                "key_refused",
            );
        }
        Err(KeyError::Store(error)) => return store_failed(&error),
    };
    if key.agent_id != request.agent || !key.scopes.contains(&Scope::Mcp) {
        let message = format!("That key is not an mcp key of agent {}.", request.agent.as_str());
        return refused(StatusCode::FORBIDDEN, &message, "key_not_allowed");
    }
    match issue_code(&state, &server, &request, &key).await {
        Ok(code) => {
            audit::record(
                &state,
                Event {
                    agent: &request.agent,
                    key: Some(&key),
                    action: "oauth/authorize",
                    client_id: &request.client.id,
                    outcome: "ok",
                    client_ip: Some(client_ip),
                },
            );
            redirect(&request.redirect_uri, &[("code", code.as_str())], request.state.as_deref(), &issuer)
        }
        Err(IssueError::TooMany) => consent_page(
            &server,
            &request,
            StatusCode::TOO_MANY_REQUESTS,
            Some("This key has too many authorizations in progress: finish them or wait a minute."),
        ),
        Err(IssueError::Store(StoreError::NotFound)) => {
            refused(StatusCode::UNAUTHORIZED, "That key is not valid any more.", "key_refused")
        }
        Err(IssueError::Store(error)) => store_failed(&error),
    }
}

enum IssueError {
    TooMany,
    Store(StoreError),
}

/// Stores a new one-time code for `request`, bound to `key`; returns the code itself.
async fn issue_code(
    state: &AppState,
    server: &BuiltinServer,
    request: &Request,
    key: &crate::domain::model::KeyRecord,
) -> Result<String, IssueError> {
    let code = random_token(CODE_PREFIX);
    let now = Timestamp::now();
    let ttl = super::client::secs_micros(server.config.code_ttl_secs);
    let new = NewCode {
        digest: server.hasher.digest(&code).to_hex(),
        family_id: uuid::Uuid::now_v7().to_string(),
        client_id: request.client.id.clone(),
        agent_id: request.agent.clone(),
        key_id: key.id.clone(),
        redirect_uri: request.redirect_uri.clone(),
        resource: request.resource.clone(),
        scopes: request.scope.clone(),
        code_challenge: request.code_challenge.clone(),
        expires_at: Timestamp::from_micros(now.as_micros().saturating_add(ttl)),
        created_at: now,
    };
    let store = state.store.oauth_server();
    if !store.create_code(&new, server.bounds()).await.map_err(IssueError::Store)? {
        return Err(IssueError::TooMany);
    }
    if !DocumentFetcher::is_document_url(&request.client.id)
        && let Err(error) = store.touch_client(&request.client.id, now).await
    {
        tracing::debug!(%error, "could not record a client's use");
    }
    Ok(code)
}

fn store_failed(error: &StoreError) -> Response {
    tracing::warn!(%error, "authorization failed on the store");
    page::error(StatusCode::SERVICE_UNAVAILABLE, "The service cannot answer right now; try again shortly.")
}

/// Checks an authorization request's parameters, in the two stages of the module documentation.
async fn check(server: &BuiltinServer, params: &Params, client_ip: IpAddr) -> Result<Request, Refusal> {
    let page = |message: String| Refusal::Page(StatusCode::BAD_REQUEST, message);
    let client_id = params.get("client_id").ok_or_else(|| page("The request names no client (client_id).".into()))?;
    let client = resolve_client(server, client_id, client_ip).await?;
    let redirect_uri =
        params.get("redirect_uri").ok_or_else(|| page("The request names no redirect_uri.".into()))?.to_owned();
    if !client.redirect_uris.contains(&redirect_uri) {
        return Err(page(format!("The redirect URI {redirect_uri} is not one the client registered.")));
    }
    let state = params.get("state").map(str::to_owned);
    let refuse = |error: &'static str, description: String| Refusal::Redirect {
        redirect_uri: redirect_uri.clone(),
        state: if state.as_ref().is_some_and(|state| state.len() > MAX_STATE_BYTES) { None } else { state.clone() },
        error,
        description,
    };
    if state.as_ref().is_some_and(|state| state.len() > MAX_STATE_BYTES) {
        return Err(refuse("invalid_request", format!("state is longer than {MAX_STATE_BYTES} bytes")));
    }
    match params.get("response_type") {
        Some("code") => {}
        Some(other) => return Err(refuse("unsupported_response_type", format!("response_type {other:?}: only code"))),
        None => return Err(refuse("invalid_request", "response_type is missing".into())),
    }
    let Some(code_challenge) = params.get("code_challenge") else {
        return Err(refuse("invalid_request", "code_challenge is missing: PKCE (S256) is required".into()));
    };
    match params.get("code_challenge_method") {
        Some("S256") => {}
        Some(other) => {
            return Err(refuse("invalid_request", format!("code_challenge_method {other:?}: only S256 is supported")));
        }
        None => {
            return Err(refuse("invalid_request", "code_challenge_method is missing: only S256 is supported".into()));
        }
    }
    if !is_s256_challenge(code_challenge) {
        return Err(refuse("invalid_request", "code_challenge is not a base64url SHA-256 digest".into()));
    }
    let Some(resource) = params.get("resource") else {
        return Err(refuse("invalid_target", "resource is missing: name the agent's MCP URL (RFC 8707)".into()));
    };
    let Some(agent) = server.agent_of(resource) else {
        return Err(refuse(
            "invalid_target",
            format!("resource {resource:?} is not an agent's MCP URL ({}/{{agent_id}}/mcp)", server.issuer),
        ));
    };
    let scope = requested_scope(params.get("scope")).map_err(|error| refuse("invalid_scope", error.to_string()))?;
    Ok(Request {
        client,
        redirect_uri: redirect_uri.clone(),
        state: state.clone(),
        code_challenge: code_challenge.to_owned(),
        resource: resource.to_owned(),
        agent,
        scope,
    })
}

/// A scope other than `mcp` and `offline_access` was asked for; `Display` is the refusal's description.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("scope {0:?} is not supported: only {SCOPE}", SCOPE = SCOPE)]
pub struct UnsupportedScope(String);

/// The scope a request is granted: `mcp`, whatever subset of `mcp` and `offline_access` (refresh tokens
/// are always issued) was asked for; any other scope is refused.
pub fn requested_scope(scope: Option<&str>) -> Result<String, UnsupportedScope> {
    for part in scope.unwrap_or(SCOPE).split(' ').filter(|part| !part.is_empty()) {
        if part != SCOPE && part != "offline_access" {
            return Err(UnsupportedScope(part.to_owned()));
        }
    }
    Ok(SCOPE.to_owned())
}

/// The client named by `client_id`: a metadata document URL, or a registered client.
async fn resolve_client(server: &BuiltinServer, client_id: &str, client_ip: IpAddr) -> Result<ClientInfo, Refusal> {
    if DocumentFetcher::is_document_url(client_id) {
        return server
            .documents
            .client(client_id, client_ip)
            .await
            .map_err(|error| Refusal::Page(StatusCode::BAD_REQUEST, format!("{error}.")));
    }
    let unknown =
        || Refusal::Page(StatusCode::BAD_REQUEST, "The client is not registered here (unknown client_id).".into());
    if !client_id.starts_with(super::client::CLIENT_ID_PREFIX) {
        return Err(unknown());
    }
    match server.store.oauth_server().get_client(client_id).await {
        Ok(Some(client)) => Ok(client.into()),
        Ok(None) => Err(unknown()),
        Err(error) => {
            tracing::warn!(%error, "client lookup failed");
            Err(Refusal::Page(StatusCode::SERVICE_UNAVAILABLE, "The service cannot answer right now.".into()))
        }
    }
}

/// Whether `challenge` has the shape of an S256 challenge: 43 base64url characters.
fn is_s256_challenge(challenge: &str) -> bool {
    challenge.len() == 43 && challenge.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The consent page for a checked request, with a fresh form token.
fn consent_page(server: &BuiltinServer, request: &Request, status: StatusCode, message: Option<&str>) -> Response {
    let issued = Timestamp::now().as_micros() / 1_000_000;
    let token = format!("{issued}.{}", server.form_mac(request, issued));
    let mut hidden = vec![
        ("response_type".to_owned(), "code".to_owned()),
        ("client_id".to_owned(), request.client.id.clone()),
        ("redirect_uri".to_owned(), request.redirect_uri.clone()),
        ("code_challenge".to_owned(), request.code_challenge.clone()),
        ("code_challenge_method".to_owned(), "S256".to_owned()),
        ("resource".to_owned(), request.resource.clone()),
        ("scope".to_owned(), request.scope.clone()),
        ("form_token".to_owned(), token),
    ];
    if let Some(state) = &request.state {
        hidden.push(("state".to_owned(), state.clone()));
    }
    let form = Form {
        client_name: request.client.name.clone().unwrap_or_else(|| "An unnamed client".to_owned()),
        client_id: request.client.id.clone(),
        redirect_uri: request.redirect_uri.clone(),
        agent: request.agent.as_str().to_owned(),
        resource: request.resource.clone(),
        scope: request.scope.clone(),
        hidden,
    };
    let origin = redirect_origin(&request.redirect_uri);
    page::render(status, "Allow access", message, Some(&form), origin.as_deref())
}

/// The CSP source of a redirect URI: its origin (`https://host:port`), or its scheme for a private-use one.
fn redirect_origin(redirect_uri: &str) -> Option<String> {
    let url = url::Url::parse(redirect_uri).ok()?;
    match url.scheme() {
        "http" | "https" => Some(url.origin().ascii_serialization()),
        scheme => Some(format!("{scheme}:")),
    }
}

impl BuiltinServer {
    /// The form token's MAC over the request's parameters and the time the form was issued.
    fn form_mac(&self, request: &Request, issued: i64) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.form_key).expect("HMAC accepts keys of any length");
        for part in [
            issued.to_string().as_str(),
            &request.client.id,
            &request.redirect_uri,
            request.state.as_deref().unwrap_or(""),
            &request.code_challenge,
            &request.resource,
            &request.scope,
        ] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        hex::encode(mac.finalize().into_bytes())
    }

    /// Whether `token` was issued by [`consent_page`] for `request` within [`FORM_TTL`].
    fn form_token_is_valid(&self, request: &Request, token: &str) -> bool {
        let Some((issued, mac)) = token.split_once('.') else { return false };
        let Ok(issued) = issued.parse::<i64>() else { return false };
        let now = Timestamp::now().as_micros() / 1_000_000;
        let age = now.saturating_sub(issued);
        if !(0..=i64::try_from(FORM_TTL.as_secs()).unwrap_or(i64::MAX)).contains(&age) {
            return false;
        }
        let expected = self.form_mac(request, issued);
        subtle::ConstantTimeEq::ct_eq(expected.as_bytes(), mac.as_bytes()).into()
    }
}

/// A 303 to `redirect_uri` with `pairs`, `state` and `iss` (RFC 9207) added to its query.
fn redirect(redirect_uri: &str, pairs: &[(&str, &str)], state: Option<&str>, issuer: &str) -> Response {
    let Ok(mut url) = url::Url::parse(redirect_uri) else {
        return page::error(StatusCode::BAD_REQUEST, "The redirect URI is not a URL.");
    };
    {
        let mut query = url.query_pairs_mut();
        for (name, value) in pairs {
            query.append_pair(name, value);
        }
        if let Some(state) = state {
            query.append_pair("state", state);
        }
        query.append_pair("iss", issuer);
    }
    let Ok(location) = HeaderValue::from_str(url.as_str()) else {
        return page::error(StatusCode::BAD_REQUEST, "The redirect URI cannot be sent in a header.");
    };
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    headers.insert(header::LOCATION, location);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

/// The client address of a request, for audit records.
pub(super) fn client_address(state: &AppState, peer: SocketAddr, headers: &HeaderMap) -> IpAddr {
    state.guard.client_ip(peer.ip(), headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_are_mcp_only() {
        assert_eq!(requested_scope(None).as_deref(), Ok("mcp"));
        assert_eq!(requested_scope(Some("mcp offline_access")).as_deref(), Ok("mcp"));
        assert!(requested_scope(Some("mcp admin")).is_err());
    }

    #[test]
    fn challenges_have_the_s256_shape() {
        assert!(is_s256_challenge("E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"));
        assert!(!is_s256_challenge("short"));
        assert!(!is_s256_challenge("E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw+cM"));
    }

    #[test]
    fn redirect_origins_are_policy_sources() {
        assert_eq!(redirect_origin("http://127.0.0.1:3000/cb?x=1").as_deref(), Some("http://127.0.0.1:3000"));
        assert_eq!(redirect_origin("cursor://anysphere/cb").as_deref(), Some("cursor:"));
    }
}
