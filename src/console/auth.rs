//! Sign-in, sign-out, and the [`Console`] extractor: the session of a request, checked on every page.
//!
//! Sign-in takes the operator token (everything) or a key of an agent with scope `registry` (that agent
//! only). A failed sign-in counts toward the client address's failed-authentication lockout
//! (`rate_limits.failed_auth_attempts`), as a 401 of the admin API does, and a locked-out address is refused
//! before its credential is looked at. Each console request also takes a token from the credential's admin
//! rate limit, the bucket its API requests draw from.
//!
//! [`Console`]: crate::console::auth::Console

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use minijinja::context;

use super::form::Form;
use super::session::{Principal, Session};
use super::view::{self, ConsoleError, Result};
use crate::domain::model::{Actor, Agent};
use crate::domain::time::Timestamp;
use crate::domain::{AgentId, KeyDigest, Scope};
use crate::error::ApiError;
use crate::http::REQUEST_ID;
use crate::state::AppState;

/// The session cookie's name.
pub const COOKIE: &str = "hivegate_console";

/// Whether the listener serving this request speaks TLS (the cookie is then `Secure`).
#[derive(Debug, Clone, Copy)]
pub struct Transport {
    pub is_tls: bool,
}

/// A signed-in request: its session and where it came from.
#[derive(Debug)]
pub struct Console {
    pub session: Session,
    session_id: String,
    request_id: Option<String>,
}

impl Console {
    /// Who the audit record of a change names: the console as the channel, then the credential.
    pub fn actor(&self) -> Actor {
        Actor { name: self.session.principal.actor_name(), request_id: self.request_id.clone() }
    }

    /// The agent a key session is confined to; `None` for the operator.
    pub fn own_agent(&self) -> Option<&AgentId> {
        match &self.session.principal {
            Principal::Operator { .. } => None,
            Principal::Agent { agent, .. } => Some(agent),
        }
    }

    /// A change's form must carry this session's CSRF token.
    pub fn check_csrf(&self, form: &Form) -> Result<()> {
        match form.get("csrf") {
            Some(token) if self.session.is_csrf(token) => Ok(()),
            _ => Err(ConsoleError::Csrf),
        }
    }

    /// Operator-only pages and changes (agents, keys, the audit log).
    pub fn require_operator(&self) -> Result<()> {
        if self.session.principal.is_operator() {
            return Ok(());
        }
        Err(ApiError::Forbidden("this page is the operator's; a registry key manages its own agent's registry".into())
            .into())
    }

    /// A change to the path's agent: the form's CSRF token, then [`Console::agent`].
    pub async fn change(&self, state: &AppState, raw: &str, form: &Form) -> Result<Agent> {
        self.check_csrf(form)?;
        self.agent(state, raw).await
    }

    /// An operator-only change to the path's agent (its settings and keys).
    pub async fn operator_change(&self, state: &AppState, raw: &str, form: &Form) -> Result<Agent> {
        self.require_operator()?;
        self.change(state, raw, form).await
    }

    /// The agent named by the path, which this session may manage: 403 for another agent's, 404 when it
    /// does not exist.
    pub async fn agent(&self, state: &AppState, raw: &str) -> Result<Agent> {
        let missing = || ConsoleError::Api(ApiError::NotFound(format!("agent {raw:?} does not exist")));
        let id = AgentId::parse(raw).map_err(|_| missing())?;
        if !self.session.principal.may_manage(&id) {
            return Err(ApiError::Forbidden("this session belongs to another agent".to_owned()).into());
        }
        state.store.get_agent(&id).await?.ok_or_else(missing)
    }
}

/// A page about the path's agent, checked in the order the handlers took it: the session, the path, the
/// agent this session may see ([`Console::agent`]), then the query string's fields.
pub struct AgentPage {
    pub console: Console,
    pub agent: Agent,
    pub query: Form,
}

impl FromRequestParts<AppState> for AgentPage {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> std::result::Result<Self, Response> {
        let console = Console::from_request_parts(parts, state).await.map_err(IntoResponse::into_response)?;
        let Path(id) = Path::<String>::from_request_parts(parts, state).await.map_err(IntoResponse::into_response)?;
        let agent = console.agent(state, &id).await.map_err(IntoResponse::into_response)?;
        let query =
            Form::parse(parts.uri.query().unwrap_or_default().as_bytes()).map_err(IntoResponse::into_response)?;
        Ok(Self { console, agent, query })
    }
}

/// A form that changes the path's agent, checked in the order the handlers took it: the session, the path,
/// the form (its body), then [`Console::change`] (the form's CSRF token, the agent this session may manage).
pub struct Change {
    pub console: Console,
    pub agent: Agent,
    pub form: Form,
    /// The route's path parameters, for those beside the agent's id (a key's).
    path: Vec<(String, String)>,
}

impl Change {
    async fn extract(
        request: Request,
        state: &AppState,
        is_operator_only: bool,
    ) -> std::result::Result<Self, Response> {
        let (mut parts, body) = request.into_parts();
        let console = Console::from_request_parts(&mut parts, state).await.map_err(IntoResponse::into_response)?;
        let Path(path) = Path::<Vec<(String, String)>>::from_request_parts(&mut parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let form =
            Form::from_request(Request::from_parts(parts, body), state).await.map_err(IntoResponse::into_response)?;
        if is_operator_only {
            console.require_operator().map_err(IntoResponse::into_response)?;
        }
        let id = path.iter().find(|(name, _)| name == "agent_id").map_or("", |(_, id)| id.as_str());
        let agent = console.change(state, id, &form).await.map_err(IntoResponse::into_response)?;
        Ok(Self { console, agent, form, path })
    }

    /// The path parameter `name` (empty when the route has none).
    pub fn param(&self, name: &str) -> &str {
        self.path.iter().find(|(key, _)| key == name).map_or("", |(_, value)| value.as_str())
    }
}

impl FromRequest<AppState> for Change {
    type Rejection = Response;

    async fn from_request(request: Request, state: &AppState) -> std::result::Result<Self, Response> {
        Self::extract(request, state, false).await
    }
}

/// A [`Change`] only the operator may make (an agent's settings and keys): the operator is required after
/// the form is read, before its CSRF token is checked.
pub struct OperatorChange(pub Change);

impl FromRequest<AppState> for OperatorChange {
    type Rejection = Response;

    async fn from_request(request: Request, state: &AppState) -> std::result::Result<Self, Response> {
        Change::extract(request, state, true).await.map(Self)
    }
}

/// The value of the session cookie, if the request has one.
fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
}

impl FromRequestParts<AppState> for Console {
    type Rejection = ConsoleError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        let id = session_cookie(&parts.headers).ok_or(ConsoleError::SignIn)?.to_owned();
        let session = state.console.touch(&id).ok_or(ConsoleError::SignIn)?;
        let credential = match &session.principal {
            Principal::Operator { token } => {
                // The operator token was rotated: sessions opened with the old one end.
                if *token != state.operator.fingerprint() {
                    state.console.end(&id);
                    return Err(ConsoleError::SignIn);
                }
                "operator".to_owned()
            }
            Principal::Agent { agent, key_id, digest, .. } => {
                // The key is read again on every request: revoked, expired or moved, the session ends.
                let record = match KeyDigest::from_hex(digest) {
                    Some(digest) => state.store.find_key(&digest).await?,
                    None => None,
                };
                let usable = record.is_some_and(|record| {
                    record.is_usable_at(Timestamp::now())
                        && record.has_scope(Scope::Registry)
                        && &record.agent_id == agent
                        && &record.id == key_id
                });
                if !usable {
                    state.console.end(&id);
                    return Err(ConsoleError::SignIn);
                }
                format!("key:{key_id}")
            }
        };
        crate::admin::access::take_admin_token(parts, state, &credential).await?;
        let request_id = parts.headers.get(REQUEST_ID).and_then(|v| v.to_str().ok()).map(str::to_owned);
        Ok(Self { session, session_id: id, request_id })
    }
}

/// `GET /console/sign-in`.
pub async fn sign_in_page() -> Response {
    view::render_status(StatusCode::OK, "sign_in.html", context! {})
}

/// `POST /console/sign-in`: `credential` is the operator token or a `registry` key.
pub async fn sign_in(
    State(state): State<AppState>,
    axum::Extension(transport): axum::Extension<Transport>,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
    form: Form,
) -> Response {
    let client =
        extensions.get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(peer)| state.guard.client_ip(peer.ip(), &headers));
    if let Some(wait) = client.and_then(|client| state.guard.failures().blocked(client)) {
        let message = format!("too many failed sign-ins from this address; try again in {} s", wait.as_secs().max(1));
        return view::render_status(StatusCode::TOO_MANY_REQUESTS, "sign_in.html", context! { message });
    }
    // Another site's page cannot sign a browser in (to an account of its choosing): browsers say where a form
    // came from.
    if headers
        .get("sec-fetch-site")
        .and_then(|value| value.to_str().ok())
        .is_some_and(|site| !matches!(site, "same-origin" | "none"))
    {
        let message = "a sign-in must come from this console's own page";
        return view::render_status(StatusCode::FORBIDDEN, "sign_in.html", context! { message });
    }
    let presented = form.get("credential").map(str::trim).unwrap_or_default();
    let principal = if state.operator.is_valid(presented) {
        Some(Principal::Operator { token: state.operator.fingerprint() })
    } else {
        match state.keys.authenticate(Some(presented)).await.map(|hit| hit.key) {
            Ok(record) if record.has_scope(Scope::Registry) => Some(Principal::Agent {
                agent: record.agent_id.clone(),
                key_id: record.id.clone(),
                key_prefix: record.prefix.clone(),
                digest: state.hasher.digest(presented).to_hex(),
            }),
            Ok(_) => {
                let message = "this key lacks the registry scope: the console takes the operator token or a key \
                               with scope registry";
                return view::render_status(StatusCode::FORBIDDEN, "sign_in.html", context! { message });
            }
            Err(crate::http::auth::KeyError::Store(error)) => return ConsoleError::from(error).into_response(),
            Err(crate::http::auth::KeyError::Unauthenticated) => None,
        }
    };
    let Some(principal) = principal else {
        if let Some(client) = client
            && let Some(count) = state.guard.failures().record(client)
        {
            state.metrics.auth_lockouts.inc();
            tracing::warn!(%client, failures = count, "client address locked out after failed console sign-ins");
        }
        let message = "the operator token or key is unknown, revoked or expired";
        return view::render_status(StatusCode::UNAUTHORIZED, "sign_in.html", context! { message });
    };
    let home = match &principal {
        Principal::Operator { .. } => "/console/".to_owned(),
        Principal::Agent { agent, .. } => format!("/console/agents/{agent}/registry"),
    };
    // A sign-in takes a token from the credential's admin budget, as any console request does.
    let credential = match &principal {
        Principal::Operator { .. } => "operator".to_owned(),
        Principal::Agent { key_id, .. } => format!("key:{key_id}"),
    };
    if let Err(retry_after) = state.guard.admin(&credential).await.settle(&extensions, &state.metrics) {
        return ConsoleError::from(ApiError::TooManyRequests { retry_after }).into_response();
    }
    tracing::info!(who = %principal.actor_name(), "console sign-in");
    let (id, _) = state.console.open(principal);
    let secure = if transport.is_tls { "; Secure" } else { "" };
    let cookie = format!("{COOKIE}={id}; Path=/console; HttpOnly; SameSite=Strict{secure}");
    let mut response = Redirect::to(&home).into_response();
    view::secure(&mut response);
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// `POST /console/sign-out`: ends the session and clears the cookie.
pub async fn sign_out(State(state): State<AppState>, console: Console, form: Form) -> Result<Response> {
    console.check_csrf(&form)?;
    state.console.end(&console.session_id);
    let mut response = Redirect::to("/console/sign-in").into_response();
    view::secure(&mut response);
    let cleared = format!("{COOKIE}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0");
    if let Ok(value) = HeaderValue::from_str(&cleared) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.append(header::COOKIE, HeaderValue::from_static("a=1; hivegate_console=abc; b=2"));
        assert_eq!(session_cookie(&headers), Some("abc"));
        let mut other = HeaderMap::new();
        other.append(header::COOKIE, HeaderValue::from_static("hivegate_consoleX=abc"));
        assert_eq!(session_cookie(&other), None);
    }
}
