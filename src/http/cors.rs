//! CORS on the MCP endpoint and the OAuth endpoints, for browser-based MCP clients.
//!
//! An origin in `mcp.allowed_origins` (where `*` allows any; loopback origins, which the MCP endpoint
//! accepts without being listed, get no CORS unless listed) gets CORS: a preflight (`OPTIONS` with `Access-Control-Request-Method`) is answered
//! 204 here, before any credential, rate limit or failed-authentication lockout is looked at, with the
//! origin echoed and the header lists of the contract; an actual answer gets the origin echoed and
//! [`EXPOSE_HEADERS`]. Any other origin gets no CORS field at all (its preflight is 403), so a browser keeps
//! the answer from the page. Every answer of these routes carries `Vary: Origin`, since it differs by origin.
//!
//! tower-http's `CorsLayer` answers preflights 200 and sends its method and header lists to every origin;
//! the contract wants 204 and nothing for other origins, hence this small layer.
//!
//! [`EXPOSE_HEADERS`]: crate::http::cors::EXPOSE_HEADERS

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::state::AppState;

/// The request header fields a browser client may send.
pub const ALLOW_HEADERS: &str = "Content-Type, Accept, Authorization, X-Agent-API-Key, MCP-Protocol-Version, \
                                 Mcp-Session-Id, Mcp-Method, Mcp-Name, Last-Event-ID";
/// The answer's header fields a browser client may read.
pub const EXPOSE_HEADERS: &str =
    "Mcp-Session-Id, WWW-Authenticate, Retry-After, RateLimit, RateLimit-Policy, Hivegate-RateLimit-Scope";
const ALLOW_METHODS: &str = "GET, POST, DELETE, OPTIONS";
/// How long a browser may keep a preflight's answer.
const MAX_AGE_SECS: &str = "600";

/// What CORS makes of one request: its origin when it is allowed, and whether it is a preflight.
pub struct Cors {
    allowed: Option<HeaderValue>,
    is_preflight: bool,
}

impl Cors {
    /// Reads the request's `Origin` (a missing, malformed or doubled one is not allowed) and method.
    pub fn of(state: &AppState, request: &Request) -> Self {
        let headers = request.headers();
        let allowed = crate::mcp::origin::single_origin(headers)
            .ok()
            .flatten()
            .filter(|origin| crate::mcp::origin::is_listed_origin(origin, &state.config.mcp.allowed_origins))
            .and_then(|origin| HeaderValue::from_str(origin).ok());
        let is_preflight = request.method() == Method::OPTIONS
            && headers.contains_key(header::ORIGIN)
            && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
        Self { allowed, is_preflight }
    }

    /// The answer to a preflight (204 for an allowed origin, 403 for another), or `None` for any other
    /// request, which goes on to its handler.
    pub fn preflight(&self) -> Option<Response> {
        if !self.is_preflight {
            return None;
        }
        let response = match &self.allowed {
            Some(_) => {
                let fields = [
                    (header::ACCESS_CONTROL_ALLOW_METHODS, ALLOW_METHODS),
                    (header::ACCESS_CONTROL_ALLOW_HEADERS, ALLOW_HEADERS),
                    (header::ACCESS_CONTROL_MAX_AGE, MAX_AGE_SECS),
                ];
                (StatusCode::NO_CONTENT, fields).into_response()
            }
            None => StatusCode::FORBIDDEN.into_response(),
        };
        Some(self.finish(response))
    }

    /// `response` with `Vary: Origin`, and for an allowed origin the CORS fields.
    pub fn finish(&self, mut response: Response) -> Response {
        let headers = response.headers_mut();
        headers.append(header::VARY, HeaderValue::from_static("Origin"));
        if let Some(origin) = &self.allowed {
            headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
            if !self.is_preflight {
                headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static(EXPOSE_HEADERS));
            }
        }
        response
    }
}

/// CORS as a layer (`axum::middleware::from_fn_with_state`), for the OAuth endpoints; the MCP endpoint
/// calls [`Cors`] itself, sparing its hot path a layer.
pub async fn layer(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let cors = Cors::of(&state, &request);
    match cors.preflight() {
        Some(answer) => answer,
        None => cors.finish(next.run(request).await),
    }
}
