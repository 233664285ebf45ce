//! Limits on the request itself (its size and its time; rate limits per key, agent and credential are
//! [`crate::guard`]), and the answers of the layers that cut a request short, in the format of
//! the endpoint it was for: a JSON-RPC error on `/{agent_id}/mcp`, `application/problem+json` elsewhere.
//!
//! - [`refuse_head`]: the request target (`limits.max_uri_bytes`, 414), the header fields
//!   (`limits.max_header_bytes`, 431) and, outside the MCP endpoint, a duplicate or malformed `Host` or
//!   `Origin` (400), before anything else looks at the request. This is a check on the
//!   parsed request: hyper's own caps still apply below it (a request head must fit hyper's read buffer of
//!   about 400 KiB, with at most 100 header fields, and a target of at most 65534 bytes), and hyper answers a
//!   request over those with a bare 431 or 414 before hivegate sees it.
//! - [`within`]: `http.request_timeout_ms` (408) and a handler that panics (500).
//!
//! Both run in the outermost layer of every request (`super::frame`), which also counts it. The body's
//! nesting (`limits.max_json_depth`) is checked by [`super::json_scan`] before it is parsed.
//!
//! Every refusal is marked with [`Refused`] so that the request counter counts it in `limit_refused`.
//!
//! [`refuse_head`]: crate::http::request_limits::refuse_head
//! [`within`]: crate::http::request_limits::within
//! [`super::json_scan`]: crate::http::json_scan

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use axum::extract::Request;
use axum::http::HeaderMap;
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use futures::FutureExt;

use crate::config::LimitsConfig;
use crate::error::ApiError;
use crate::mcp::error::McpError;
use crate::mcp::origin::{single_host, single_origin};
use crate::metrics::ConfiguredLimit;

/// The route whose errors are JSON-RPC errors.
pub const MCP_ROUTE: &str = "/{agent_id}/mcp";

/// Whether the request was routed to the MCP endpoint (its errors are JSON-RPC errors).
pub fn is_mcp(route: Option<&str>) -> bool {
    route == Some(MCP_ROUTE)
}

/// Refuses a request target longer than `limits.max_uri_bytes` (414) and header fields larger than
/// `limits.max_header_bytes` together (431), in that order; then, except on the MCP endpoint (which answers
/// 403 for them, [`crate::mcp::origin`]), a `Host` or `Origin` given twice or malformed (400, as RFC 9112
/// §3.2 asks for `Host`).
pub fn refuse_head(limits: &LimitsConfig, is_mcp: bool, request: &Request) -> Option<Response> {
    let uri_bytes = uri_len(request.uri());
    if uri_bytes > limits.max_uri_bytes {
        let limit = limits.max_uri_bytes;
        if is_mcp {
            return Some(McpError::UriTooLong { limit }.into_http(None));
        }
        let detail =
            format!("the request URI is {uri_bytes} bytes; at most {limit} are allowed (limits.max_uri_bytes)");
        return Some(ApiError::limited(ConfiguredLimit::Uri, ApiError::UriTooLong(detail)).into_response());
    }
    let header_bytes = header_len(request.headers());
    if header_bytes > limits.max_header_bytes {
        let limit = limits.max_header_bytes;
        if is_mcp {
            return Some(McpError::HeadersTooLarge { limit }.into_http(None));
        }
        let detail = format!(
            "the header fields are {header_bytes} bytes; at most {limit} are allowed (limits.max_header_bytes)"
        );
        return Some(
            ApiError::limited(ConfiguredLimit::Header, ApiError::HeaderFieldsTooLarge(detail)).into_response(),
        );
    }
    // The MCP endpoint refuses these with its own 403 (Host and Origin come first in its order of checks).
    if !is_mcp {
        let headers = request.headers();
        if let Err(detail) = single_host(headers).and_then(|_| single_origin(headers)) {
            return Some(ApiError::BadRequest(detail.to_string()).into_response());
        }
    }
    None
}

/// The request target's bytes as the client sent them: the path and query, and the scheme and authority of
/// an absolute-form target.
pub fn uri_len(uri: &Uri) -> usize {
    uri.scheme_str().map_or(0, |scheme| scheme.len() + "://".len())
        + uri.authority().map_or(0, |authority| authority.as_str().len())
        + uri.path_and_query().map_or(0, |path| path.as_str().len())
}

/// The header fields' bytes, each counted as HTTP/1.1 writes it: `name: value` and a line break.
pub fn header_len(headers: &HeaderMap) -> usize {
    headers.iter().map(|(name, value)| name.as_str().len() + value.len() + ": \r\n".len()).sum()
}

/// `answer`, unless it takes longer than `limit` (`http.request_timeout_ms`: 408) or panics (500), both in
/// the endpoint's format. The time is the handler's until its answer starts: an SSE stream, answered at
/// once, runs as long as it lasts. Dropping the handler's future on time-out cancels its work (a store
/// transaction that has not committed rolls back).
pub async fn within(limit: Duration, is_mcp: bool, answer: impl Future<Output = Response>) -> Response {
    let limit_ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
    match tokio::time::timeout(limit, AssertUnwindSafe(answer).catch_unwind()).await {
        Ok(Ok(response)) => response,
        Ok(Err(panic)) => {
            let cause = panic_message(panic.as_ref());
            if is_mcp {
                tracing::error!(%cause, "an MCP request panicked");
                McpError::Crashed.into_http(None)
            } else {
                ApiError::Internal(format!("the handler panicked: {cause}")).into_response()
            }
        }
        Err(_elapsed) if is_mcp => McpError::Timeout { limit_ms }.into_http(None),
        Err(_elapsed) => ApiError::limited(
            ConfiguredLimit::Timeout,
            ApiError::RequestTimeout(format!(
                "the request was not answered within {limit_ms} ms (http.request_timeout_ms); it may or may not \
                 have taken effect"
            )),
        )
        .into_response(),
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic.downcast_ref::<&str>().copied().or_else(|| panic.downcast_ref::<String>().map(String::as_str)).unwrap_or("?")
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::extract::MatchedPath;
    use axum::http::{HeaderValue, StatusCode};
    use axum::middleware::Next;
    use axum::routing::get;

    use super::*;

    #[test]
    fn sizes_count_what_the_client_sent() {
        assert_eq!(uri_len(&"/a/mcp?x=1".parse().unwrap()), 10);
        assert_eq!(uri_len(&"http://h:1/a".parse().unwrap()), 12);
        let mut headers = HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("example"));
        headers.append("x-a", HeaderValue::from_static("1"));
        headers.append("x-a", HeaderValue::from_static("22"));
        assert_eq!(header_len(&headers), (4 + 7 + 4) + (3 + 1 + 4) + (3 + 2 + 4));
    }

    async fn answer_of(router: Router, path: &str) -> (StatusCode, String, serde_json::Value) {
        use tower::ServiceExt;
        let request = Request::builder().uri(path).body(axum::body::Body::empty()).unwrap();
        let response = router.oneshot(request).await.unwrap();
        let status = response.status();
        let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
        let body = axum::body::to_bytes(response.into_body(), 4096).await.unwrap();
        (status, content_type, serde_json::from_slice(&body).unwrap())
    }

    /// A router whose routes (the MCP route and an admin one) answer as `handler` does, within 100 ms.
    fn guarded<H, T>(handler: H) -> Router
    where
        H: axum::handler::Handler<T, ()>,
        T: 'static,
    {
        Router::new().route(MCP_ROUTE, get(handler.clone())).route("/admin/v1/agents", get(handler)).layer(
            axum::middleware::from_fn(|route: Option<MatchedPath>, request: Request, next: Next| {
                within(Duration::from_millis(100), is_mcp(route.as_ref().map(MatchedPath::as_str)), next.run(request))
            }),
        )
    }

    /// A panic cannot be provoked through the real API (it would be a bug): this handler panics on purpose.
    #[tokio::test]
    async fn a_panic_is_a_500_in_the_endpoints_format() {
        async fn panics() -> &'static str {
            panic!("on purpose")
        }
        let router = guarded(panics);
        let (status, content_type, body) = answer_of(router.clone(), "/bot/mcp").await;
        assert_eq!((status, content_type.as_str()), (StatusCode::INTERNAL_SERVER_ERROR, "application/json"));
        assert_eq!(body["error"]["code"], -32603);
        assert_eq!(body["id"], serde_json::Value::Null);
        let (status, content_type, body) = answer_of(router, "/admin/v1/agents").await;
        assert_eq!((status, content_type.as_str()), (StatusCode::INTERNAL_SERVER_ERROR, crate::error::PROBLEM_JSON));
        assert!(!body["detail"].as_str().unwrap().contains("on purpose"), "the cause is logged, not returned");
    }

    #[tokio::test]
    async fn a_late_answer_is_a_408_in_the_endpoints_format() {
        async fn never() -> &'static str {
            std::future::pending().await
        }
        let router = guarded(never);
        let (status, content_type, body) = answer_of(router.clone(), "/bot/mcp").await;
        assert_eq!((status, content_type.as_str()), (StatusCode::REQUEST_TIMEOUT, "application/json"));
        assert_eq!(body["error"]["code"], -31408);
        assert_eq!(body["error"]["data"]["limitMs"], 100);
        let (status, content_type, body) = answer_of(router, "/admin/v1/agents").await;
        assert_eq!((status, content_type.as_str()), (StatusCode::REQUEST_TIMEOUT, crate::error::PROBLEM_JSON));
        assert!(body["detail"].as_str().unwrap().contains("http.request_timeout_ms"), "{body}");
    }
}
