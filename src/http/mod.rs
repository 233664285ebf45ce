//! The HTTP surface: the listeners and their connections ([`serve`], [`connection`], [`admission`],
//! [`threads`]), the
//! public listener's routes (the MCP endpoint's served directly, [`Routes`]), the operator listener's (when
//! `http.operator_listen` is set), the request layer every answer goes through (`frame`), and the health
//! endpoints.
//!
//! [`Routes`]: crate::http::Routes
//! [`serve`]: crate::http::serve
//! [`connection`]: crate::http::connection
//! [`admission`]: crate::http::admission
//! [`threads`]: crate::http::threads

use std::borrow::Cow;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use http_body::Body as _;
use tower::ServiceBuilder;
use tower_http::classify::ServerErrorsFailureClass;
use tower_http::trace::{
    DefaultOnFailure, DefaultOnRequest, DefaultOnResponse, OnFailure as _, OnRequest as _, OnResponse as _,
};

use crate::metrics::{HttpLabels, HttpRouteLabels, Refused};
use crate::state::AppState;
use crate::telemetry::request::{self, RequestSpan};

/// The connection caps of a listener, in total and per client address.
pub mod admission;
/// Authentication of agent keys and the operator token.
pub mod auth;
/// One connection served by hyper, with its header-read and idle timeouts and its unread request bodies.
pub mod connection;
/// CORS on the MCP endpoint and the OAuth endpoints.
pub mod cors;
/// One pass over a JSON body before it is parsed: nesting depth and duplicate object keys.
pub mod json_scan;
/// The landing page at `/` and the API reference (Swagger UI over the OpenAPI document, embedded).
pub mod page;
/// Limits on the request itself (target, header fields, JSON nesting, time; rate limits are [`crate::guard`])
/// and the answers of the layers that cut a request short.
pub mod request_limits;
/// The accept loop of a listener: caps, TLS handshakes, one task per connection, graceful shutdown.
pub mod serve;
/// The threads connections are served on, each with a single-threaded runtime of its own.
pub mod threads;

/// The request id header: taken from the client when present, else generated; echoed on the response.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The routes of the public listener (`listen`): health, the MCP endpoint, the admin API unless
/// `http.public_admin` is false, and `/metrics` unless the operator listener serves it.
pub fn routes(state: AppState) -> Routes {
    let http = &state.config.http;
    let separate_operator = http.operator_listen.is_some();
    let mut routes =
        Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz)).merge(with_cors(&state));
    let with_admin = http.public_admin || !separate_operator;
    if with_admin {
        routes = with_reference(routes.nest("/admin/v1", admin(&state, crate::guard::admin_gate)));
    }
    routes = routes.route("/", get(move || async move { page::landing(with_admin) }));
    if with_admin {
        routes = routes.merge(crate::console::router(&state, state.config.tls.enabled()));
    }
    if !separate_operator {
        routes = routes.route("/metrics", get(crate::metrics::handler));
    }
    Routes { router: with_layers(routes, state.clone()), mcp: Some(state) }
}

/// A listener's routes: the MCP endpoint's requests served straight away, everything else by the router.
///
/// `/{agent_id}/mcp` is the path nearly every request takes. Through the router it would be matched among all
/// the others, its agent segment copied into the request's extensions with the matched route, and the
/// handler reached through the request layer's service (cloned and boxed for each request) and the
/// handler's own boxed service. [`Routes::serve`] instead recognises the path, runs the same request layer
/// (`framed`) around [`crate::mcp::transport::endpoint`], and finishes the answer as the router does. A
/// path whose agent segment holds a percent-escape goes to the router, whose `Path` extractor decodes it;
/// the router keeps the route for that reason, and the two answer alike.
#[derive(Clone)]
pub struct Routes {
    router: Router,
    /// The state of the MCP endpoint, on the listener that serves it.
    mcp: Option<AppState>,
}

impl Routes {
    /// Answers one request.
    pub async fn serve(&self, request: Request<axum::body::Body>) -> Response {
        if let Some(state) = &self.mcp
            && mcp_agent(request.uri().path()).is_some()
        {
            let is_head = request.method() == axum::http::Method::HEAD;
            let route = Some(request_limits::MCP_ROUTE);
            // The agent is read once the request layer has checked the target. The endpoint's future is large:
            // boxed, it is written once where it runs instead of being moved along with each future around it.
            let endpoint = |request: Request<axum::body::Body>| {
                let agent = mcp_agent(request.uri().path()).and_then(|id| crate::domain::AgentId::parse(id).ok());
                Box::pin(crate::mcp::transport::endpoint(state.clone(), agent, request))
            };
            let response = framed(state, route, request, endpoint).await;
            return finish_as_routed(response, is_head);
        }
        match tower::ServiceExt::oneshot(self.router.clone(), request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

/// The agent segment of a path `/{agent_id}/mcp` that the router would hand over as it is: one segment,
/// not empty, without a percent-escape.
fn mcp_agent(path: &str) -> Option<&str> {
    let agent = path.strip_prefix('/')?.strip_suffix("/mcp")?;
    (!agent.is_empty() && !agent.contains(['/', '%'])).then_some(agent)
}

/// What the router does to the answer of a route it matched (axum's `RouteFuture`) where hyper would not do
/// the same: an empty body's `Content-Length: 0` (hyper leaves it out of an HTTP/2 answer whose body has
/// ended), and the answer to `HEAD` without its body but with the `Content-Length` it would have had. Any
/// other body's length hyper writes itself, with no header value made for it.
fn finish_as_routed(mut response: Response, is_head: bool) -> Response {
    let size = response.body().size_hint().exact();
    if (is_head || size == Some(0))
        && !response.headers().contains_key(header::CONTENT_LENGTH)
        && let Some(size) = size
    {
        let mut digits = itoa::Buffer::new();
        if let Ok(value) = HeaderValue::from_str(digits.format(size)) {
            response.headers_mut().insert(header::CONTENT_LENGTH, value);
        }
    }
    if is_head {
        *response.body_mut() = axum::body::Body::empty();
    }
    response
}

/// `/{agent_id}/mcp` through the router: only the paths [`Routes::serve`] leaves to it, whose agent segment the
/// `Path` extractor decodes.
async fn mcp_route(
    State(state): State<AppState>,
    path: Result<axum::extract::Path<String>, axum::extract::rejection::PathRejection>,
    request: Request<axum::body::Body>,
) -> Response {
    let agent = path.ok().and_then(|axum::extract::Path(id)| crate::domain::AgentId::parse(&id).ok());
    crate::mcp::transport::endpoint(state, agent, request).await
}

/// The routes browser clients reach, with CORS ([`cors`]): the MCP endpoint and the OAuth endpoints (the
/// agents' metadata documents; the built-in authorization server's under `/oauth/` and
/// `/.well-known/oauth-authorization-server` go here too).
fn with_cors(state: &AppState) -> Router<AppState> {
    let mut oauth = Router::new().route(
        &format!("{}/{{agent_id}}/mcp", crate::oauth::metadata::WELL_KNOWN),
        get(crate::oauth::metadata::document),
    );
    if state.oauth_server.is_some() {
        // The built-in authorization server's metadata and endpoints (`oauth.mode = "builtin"`).
        oauth = oauth.merge(crate::oauth::server::BuiltinServer::routes());
    }
    let oauth = oauth.route_layer(axum::middleware::from_fn_with_state(state.clone(), cors::layer));
    Router::new()
        .route(
            request_limits::MCP_ROUTE,
            // One handler for every method, which runs CORS, the guard and the audit around the method's own:
            // as layers, each would clone and box the services inside it on every request. Most requests do
            // not come this way ([`Routes`]).
            any(mcp_route),
        )
        .merge(oauth)
}

/// The routes of the operator listener (`http.operator_listen`): `/metrics`, health and the admin API.
pub fn operator_routes(state: AppState) -> Routes {
    let routes = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(crate::metrics::handler))
        .nest("/admin/v1", admin(&state, crate::guard::operator_admin_gate))
        .route("/", get(|| async { page::landing(true) }))
        .merge(crate::console::router(&state, false));
    Routes { router: with_layers(with_reference(routes), state), mcp: None }
}

/// `routes` with the API reference, which goes wherever the admin API goes.
fn with_reference(routes: Router<AppState>) -> Router<AppState> {
    let path = page::REFERENCE_PATH;
    routes
        .route(path.trim_end_matches('/'), get(page::reference_redirect))
        .route(path, get(page::reference_index))
        .route(&format!("{path}{{*file}}"), get(page::reference_asset))
}

/// The admin API with its own layers; `gate` is the listener's failed-authentication gate.
fn admin<F, Fut>(state: &AppState, gate: F) -> Router<AppState>
where
    F: Fn(axum::extract::State<AppState>, Request<axum::body::Body>, axum::middleware::Next) -> Fut
        + Clone
        + Send
        + Sync
        + 'static,
    Fut: Future<Output = axum::response::Response> + Send + 'static,
{
    crate::admin::router()
        .layer(axum::middleware::from_fn_with_state(state.clone(), settle_after_write))
        // Outermost: a client with too many failed authentications is refused before anything.
        .layer(axum::middleware::from_fn_with_state(state.clone(), gate))
}

/// `routes` with the 404 for unknown paths and the layer stack every answer of the router goes through (the
/// MCP endpoint's answers go through [`frame`]'s work too, [`Routes`]).
fn with_layers(routes: Router<AppState>, state: AppState) -> Router {
    let max_body = state.config.limits.max_body_bytes;
    routes
        .fallback(not_found)
        .layer(
            ServiceBuilder::new()
                // The request's frame: its secrets marked, its id and trace span, its target and header fields
                // checked, its handler timed out or caught when it panics, its answer counted (see `frame`).
                .layer(axum::middleware::from_fn_with_state(state.clone(), frame))
                // Bodies are read by our own extractors, which turn this limit into a 413 in our format.
                .layer(DefaultBodyLimit::max(max_body)),
        )
        .with_state(state)
}

/// Records the answer's status on the request span, then logs it as tower-http's trace layer does, in the
/// span: the answer at DEBUG, and a 5xx as a failure at ERROR (which marks an exported span failed).
fn record_status<B>(response: &axum::http::Response<B>, latency: Duration, span: Option<&RequestSpan>) {
    let status = response.status();
    if let Some(span) = span {
        span.record_status(status.as_u16(), status.is_server_error());
    }
    if tracing::enabled!(target: "tower_http::trace::on_response", tracing::Level::DEBUG) {
        request::in_scope(span, || DefaultOnResponse::default().on_response(response, latency, &tracing::Span::none()));
    }
    if status.is_server_error() {
        let failure = ServerErrorsFailureClass::StatusCode(status);
        request::in_scope(span, || DefaultOnFailure::default().on_failure(failure, latency, &tracing::Span::none()));
    }
}

/// The header fields that carry secrets: marked sensitive before anything can look at the request, so that
/// no debug output or log line shows them.
const SECRET_HEADERS: [HeaderName; 2] = [header::AUTHORIZATION, auth::KEY_HEADER];

/// The one layer every request passes (the MCP endpoint's through [`framed`] directly, [`Routes`]). It also
/// does the work of tower-http's sensitive-header, request-id, request-id propagation and trace layers, whose
/// services, futures and body wrapper cost the request path more than that work does (bench/README.md); the
/// response bodies of our streams cannot fail, so no body failure goes unlogged without the trace layer's
/// wrapper:
/// - the secrets among the header fields are marked sensitive ([`SECRET_HEADERS`]);
/// - the request gets an id: the client's `x-request-id`, else a new UUID, which the answer carries back;
/// - the request runs in its trace span ([`RequestSpan`]: its route template, never the raw path, which can
///   hold names; method, request id and status; the MCP endpoint's agent, MCP method and era), which records
///   the answer's status and logs it as tower-http's trace layer does (a started and a finished event at
///   DEBUG, a 5xx at ERROR); a stream's body is polled in the span too;
/// - the request target and header fields are checked before anything else looks at them
///   ([`request_limits::refuse_head`]);
/// - a request that takes longer than `http.request_timeout_ms` is cut off with 408 rather than holding
///   resources, and a handler that panics is a 500 for that request, not a dead connection task; both answer
///   in the endpoint's format ([`request_limits::within`]);
/// - every answer, those refusals included, is counted by route template, method and status, and timed; a
///   limit's refusal (an answer marked [`Refused`]) is counted by the limit.
async fn frame(
    State(state): State<AppState>,
    route: Option<MatchedPath>,
    request: Request<axum::body::Body>,
    next: Next,
) -> Response {
    framed(&state, route.as_ref().map(MatchedPath::as_str), request, |request| next.run(request)).await
}

/// The route label of a request no route matched.
const UNMATCHED: &str = "unmatched";

/// [`frame`] around `run`, for a request matched to `route` (a route template).
async fn framed<F, Fut>(
    state: &AppState,
    route: Option<&str>,
    mut request: Request<axum::body::Body>,
    run: F,
) -> Response
where
    F: FnOnce(Request<axum::body::Body>) -> Fut,
    Fut: Future<Output = Response>,
{
    let started = std::time::Instant::now();
    let headers = request.headers_mut();
    let request_id = match hide_secrets(headers) {
        Some(id) => id,
        None => {
            let id = new_request_id();
            headers.insert(REQUEST_ID, id.clone());
            id
        }
    };
    let is_mcp = request_limits::is_mcp(route);
    // The MCP route's label is the constant itself: no copy of it for each request.
    let route = match route {
        Some(request_limits::MCP_ROUTE) => Cow::Borrowed(request_limits::MCP_ROUTE),
        Some(route) => Cow::Owned(route.to_owned()),
        None => Cow::Borrowed(UNMATCHED),
    };
    let mut span = RequestSpan::new(&request, route.clone(), request_id.clone());
    if tracing::enabled!(target: "tower_http::trace::on_request", tracing::Level::DEBUG) {
        request::in_scope(span.as_ref(), || DefaultOnRequest::default().on_request(&request, &tracing::Span::none()));
    }
    let method = crate::metrics::method_label(request.method());
    let mut response = match request_limits::refuse_head(&state.config.limits, is_mcp, &request) {
        Some(refusal) => refusal,
        None => {
            let limit = Duration::from_millis(state.config.http.request_timeout_ms);
            // Each poll in the span, which the request's future holds (`&mut`: it is not `Sync`).
            let mut answer = std::pin::pin!(request_limits::within(limit, is_mcp, run(request)));
            let span = &mut span;
            std::future::poll_fn(move |context| request::in_scope(span.as_ref(), || answer.as_mut().poll(context)))
                .await
        }
    };
    let latency = started.elapsed();
    record_status(&response, latency, span.as_ref());
    let metrics = &state.metrics;
    let labels = HttpRouteLabels { route, method };
    metrics.http_duration.with(&labels, |histogram| histogram.observe(latency.as_secs_f64()));
    let labels = HttpLabels { route: labels.route, method: labels.method, status: response.status().as_u16() };
    metrics.http_requests.with(&labels, |counter| {
        counter.inc();
    });
    if let Some(Refused(limit)) = response.extensions().get::<Refused>() {
        metrics.refused(*limit);
    }
    response.headers_mut().entry(REQUEST_ID).or_insert(request_id);
    // A stream's events are produced while its body is polled, long after the answer's head: in the span.
    if let Some(span) = span
        && response.body().size_hint().exact().is_none()
    {
        response = response.map(|body| axum::body::Body::new(InSpan { body, span }));
    }
    response
}

/// Marks the [`SECRET_HEADERS`] sensitive and returns the client's request id (its first `x-request-id`), in
/// one walk over the fields (a request has a handful) rather than a lookup for each name: a name that is not
/// one of HTTP's standard ones is hashed byte by byte on every lookup.
fn hide_secrets(headers: &mut HeaderMap) -> Option<HeaderValue> {
    let mut request_id = None;
    for (name, value) in headers.iter_mut() {
        if SECRET_HEADERS.contains(name) {
            value.set_sensitive(true);
        } else if request_id.is_none() && name == REQUEST_ID {
            request_id = Some(value.clone());
        }
    }
    request_id
}

/// A new request id: a random UUID.
fn new_request_id() -> HeaderValue {
    let mut buffer = uuid::Uuid::encode_buffer();
    let id = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buffer);
    HeaderValue::from_str(id).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

/// A response body polled in its request's span.
struct InSpan {
    body: axum::body::Body,
    span: RequestSpan,
}

impl http_body::Body for InSpan {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        this.span.in_scope(|| std::pin::Pin::new(&mut this.body).poll_frame(context))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// After a successful admin write, waits until the change has come back through the bus (see
/// [`crate::events::LocalBus::settle`]), so that the answer is only sent once this replica's caches are
/// true and every replica has been sent the change: a revoked key is refused on the very next request.
pub(crate) async fn settle_after_write(
    State(state): State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let is_write = !request.method().is_safe();
    let response = next.run(request).await;
    // A console change answers with a redirect to the page that shows it.
    if is_write && (response.status().is_success() || response.status().is_redirection()) {
        state.bus.settle(state.store.as_ref()).await;
    }
    response
}

/// Liveness: the process is up and serving.
async fn healthz() -> &'static str {
    "ok"
}

/// Readiness: the database answers. 503 otherwise, so load balancers route around this replica.
async fn readyz(State(state): State<AppState>) -> Response {
    match state.store.ping().await {
        Ok(()) => (StatusCode::OK, "ready").into_response(),
        Err(error) => {
            tracing::warn!(%error, "not ready: database unreachable");
            (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "1")], "database unreachable").into_response()
        }
    }
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "application/problem+json")],
        r#"{"type":"about:blank","title":"Not Found","status":404,"detail":"no such endpoint"}"#,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_hidden_and_the_clients_first_request_id_kept() {
        let mut headers = HeaderMap::new();
        headers.append(header::AUTHORIZATION, HeaderValue::from_static("Bearer token"));
        headers.append(auth::KEY_HEADER, HeaderValue::from_static("bak_one"));
        headers.append(auth::KEY_HEADER, HeaderValue::from_static("bak_two"));
        headers.append(REQUEST_ID, HeaderValue::from_static("first"));
        headers.append(REQUEST_ID, HeaderValue::from_static("second"));
        headers.append(header::ACCEPT, HeaderValue::from_static("*/*"));
        assert_eq!(hide_secrets(&mut headers), Some(HeaderValue::from_static("first")));
        for name in &SECRET_HEADERS {
            assert!(headers.get_all(name).iter().all(HeaderValue::is_sensitive), "{name} hidden");
            assert!(!format!("{headers:?}").contains("bak_"), "no key in debug output");
        }
        assert!(!headers.get(REQUEST_ID).is_some_and(HeaderValue::is_sensitive));
        assert!(!headers.get(header::ACCEPT).is_some_and(HeaderValue::is_sensitive));
        let mut none = HeaderMap::new();
        none.append(header::ACCEPT, HeaderValue::from_static("*/*"));
        assert_eq!(hide_secrets(&mut none), None);
    }
}
