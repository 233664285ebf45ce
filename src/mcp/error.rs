//! `McpError`: every way a request to the MCP endpoint can fail, with its JSON-RPC code and HTTP status
//! mapped in one place ([`McpError::status_and_code`]).
//!
//! HTTP-level failures (auth, body, envelope, headers, version) carry a non-200 status and a JSON-RPC error
//! body; errors a method raises while handling well-formed params answer HTTP 200 with the request's id.
//!
//! [`McpError::status_and_code`]: crate::mcp::error::McpError::status_and_code

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::jsonrpc::{self, RequestId};
use super::types::SUPPORTED_VERSIONS;
use crate::http::auth::Challenge;
use crate::metrics::{ConfiguredLimit, Refused};
use crate::store::StoreError;

/// hivegate's own JSON-RPC codes, outside the range JSON-RPC and MCP reserve.
pub mod code {
    pub const UNAUTHENTICATED: i32 = -31401;
    pub const FORBIDDEN: i32 = -31403;
    pub const UNKNOWN_AGENT: i32 = -31404;
    pub const UNKNOWN_SESSION: i32 = -31410;
    /// The request took longer than `http.request_timeout_ms` (HTTP 408).
    pub const TIMEOUT: i32 = -31408;
    pub const RATE_LIMITED: i32 = -31429;
    pub const UNAVAILABLE: i32 = -31503;
    pub const PARSE_ERROR: i32 = -32700;
    pub const INVALID_REQUEST: i32 = -32600;
    pub const METHOD_NOT_FOUND: i32 = -32601;
    pub const INVALID_PARAMS: i32 = -32602;
    pub const INTERNAL_ERROR: i32 = -32603;
    /// Resource not found before 2026-07-28.
    pub const RESOURCE_NOT_FOUND: i32 = -32002;
    pub const HEADER_MISMATCH: i32 = -32020;
    pub const UNSUPPORTED_PROTOCOL_VERSION: i32 = -32022;
}

/// Seconds a client should wait before retrying while the database is unreachable.
const UNAVAILABLE_RETRY_AFTER_SECS: &str = "1";

#[derive(Debug, Clone, thiserror::Error)]
pub enum McpError {
    #[error("Forbidden: {0}")]
    OriginNotAllowed(String),
    #[error("missing, unknown, revoked or expired API key")]
    Unauthenticated,
    /// The operator token, presented where an agent key is needed: 401 like [`McpError::Unauthenticated`],
    /// with a message that says what to present instead.
    #[error("the operator token is not an agent key: MCP requests need a key of the agent with scope mcp")]
    OperatorToken,
    /// An access token that is not valid here (OAuth): 401, `error="invalid_token"` in the challenge.
    #[error("invalid access token: {0}")]
    InvalidToken(String),
    /// A valid access token that may not use this agent (its scope, its subject): 403,
    /// `error="insufficient_scope"` in the challenge.
    #[error("Forbidden: {0}")]
    InsufficientScope(String),
    #[error("agent not found")]
    UnknownAgent,
    #[error("Forbidden: {0}")]
    Forbidden(&'static str),
    #[error("rate limit exceeded")]
    RateLimited { retry_after_ms: u64 },
    /// The client's address used up its failed authentications ([`crate::guard::failed_auth`]).
    #[error(
        "locked out: {attempts} failed authentications from this address within {window_secs} s; requests from it \
         are refused for {} s more",
        retry_after_ms.div_ceil(1000).max(1)
    )]
    LockedOut { retry_after_ms: u64, attempts: u32, window_secs: u64 },
    #[error("database unavailable; retry shortly")]
    Unavailable,
    /// The audit queue is full and `audit.on_overload` is `reject`: the request is not served unaudited.
    #[error("the audit log is behind; retry shortly")]
    AuditOverloaded,
    /// The replica is shutting down: no new streams; the client reconnects (to another replica).
    #[error("shutting down; reconnect")]
    ShuttingDown,
    /// A legacy request that needs a session (GET, DELETE, resources/subscribe, resources/unsubscribe)
    /// came without `Mcp-Session-Id`.
    #[error("Bad Request: this request needs an Mcp-Session-Id header (from initialize)")]
    MissingSession,
    /// An unknown, ended or expired session, or one another key created: start a new one with initialize.
    #[error("Session not found: it is unknown, ended or expired; initialize a new one")]
    UnknownSession,
    /// Opening another SSE stream would exceed the limit for the key or the agent on this replica.
    #[error("too many open streams for this {scope} (the limit is {limit}); close one first")]
    TooManyStreams { scope: &'static str, limit: u32 },
    /// Another legacy session would exceed the live sessions one key may hold (on every replica together).
    #[error(
        "too many sessions for this key (the limit is {limit}, sessions.max_per_key); end one with DELETE or \
         let one expire"
    )]
    TooManySessions { limit: u32 },
    #[error("Invalid Request: the request body is larger than {limit} bytes (limits.max_body_bytes)")]
    BodyTooLarge { limit: usize },
    /// Arrays and objects nested deeper than `limits.max_json_depth`. -32600 rather than -32700: the body
    /// may well be JSON, but it is one hivegate does not accept, like a body over the size limit (the
    /// contract's -32600 with 413); the status is 400 as for any other envelope that cannot be accepted.
    #[error("Invalid Request: the body nests arrays and objects deeper than {limit} levels (limits.max_json_depth)")]
    JsonTooDeep { limit: usize },
    /// The request target is longer than `limits.max_uri_bytes` (414).
    #[error("Invalid Request: the request URI is longer than {limit} bytes (limits.max_uri_bytes)")]
    UriTooLong { limit: usize },
    /// The header fields together are larger than `limits.max_header_bytes` (431).
    #[error("Invalid Request: the request's header fields are larger than {limit} bytes (limits.max_header_bytes)")]
    HeadersTooLarge { limit: usize },
    /// A batch of more messages than one answer may hold.
    #[error("Invalid Request: a batch holds at most {max} messages")]
    BatchTooLarge { max: usize },
    /// The request was not answered within `http.request_timeout_ms` (408); it may or may not have taken
    /// effect, like any request whose answer is lost.
    #[error("Request Timeout: no answer within {limit_ms} ms (http.request_timeout_ms)")]
    Timeout { limit_ms: u64 },
    /// A bug while handling the request (a panic): 500, the cause is logged.
    #[error("Internal error")]
    Crashed,
    /// Valid params that a limit refuses (e.g. too many subscriptions, a render over its budget): -32602
    /// with HTTP 200, like other params the method cannot serve.
    #[error("Invalid params: {message}")]
    OverLimit { limit: ConfiguredLimit, message: String },
    #[error("Parse error: {0}")]
    Parse(String),
    #[error("Invalid Request: {0}")]
    InvalidRequest(String),
    /// The response can be neither JSON nor an event stream (`Accept` allows neither).
    #[error("Not Acceptable: the response is application/json or text/event-stream")]
    NotAcceptable,
    /// A GET or DELETE on the modern wire, which has no standalone stream and no sessions.
    #[error("Method Not Allowed: 2026-07-28 clients POST (subscriptions/listen for change notifications)")]
    HttpMethodNotAllowed,
    #[error("Header mismatch: {0}")]
    HeaderMismatch(String),
    #[error("Unsupported protocol version")]
    UnsupportedVersion { requested: String },
    /// A modern request whose `_meta` lacks a required field: -32602 with HTTP 400.
    #[error("Invalid params: {0}")]
    InvalidMeta(String),
    #[error("Method not found: {method}")]
    MethodNotFound { method: String, is_modern: bool },
    #[error("Invalid params: {0}")]
    InvalidParams(String),
    #[error("Resource not found")]
    ResourceNotFound { uri: String, is_modern: bool },
    /// A fault of ours while handling a well-formed request (details are logged, not returned).
    #[error("Internal error")]
    Internal,
}

impl McpError {
    /// The single mapping from failure to HTTP status and JSON-RPC code.
    pub fn status_and_code(&self) -> (StatusCode, i32) {
        match self {
            McpError::OriginNotAllowed(_) | McpError::Forbidden(_) | McpError::InsufficientScope(_) => {
                (StatusCode::FORBIDDEN, code::FORBIDDEN)
            }
            McpError::Unauthenticated | McpError::OperatorToken | McpError::InvalidToken(_) => {
                (StatusCode::UNAUTHORIZED, code::UNAUTHENTICATED)
            }
            McpError::UnknownAgent => (StatusCode::NOT_FOUND, code::UNKNOWN_AGENT),
            McpError::RateLimited { .. } | McpError::LockedOut { .. } => {
                (StatusCode::TOO_MANY_REQUESTS, code::RATE_LIMITED)
            }
            McpError::Unavailable | McpError::ShuttingDown | McpError::AuditOverloaded => {
                (StatusCode::SERVICE_UNAVAILABLE, code::UNAVAILABLE)
            }
            McpError::MissingSession => (StatusCode::BAD_REQUEST, code::INVALID_REQUEST),
            McpError::UnknownSession => (StatusCode::NOT_FOUND, code::UNKNOWN_SESSION),
            McpError::TooManyStreams { .. } | McpError::TooManySessions { .. } => {
                (StatusCode::TOO_MANY_REQUESTS, code::RATE_LIMITED)
            }
            McpError::BodyTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, code::INVALID_REQUEST),
            McpError::JsonTooDeep { .. } | McpError::BatchTooLarge { .. } => {
                (StatusCode::BAD_REQUEST, code::INVALID_REQUEST)
            }
            McpError::UriTooLong { .. } => (StatusCode::URI_TOO_LONG, code::INVALID_REQUEST),
            McpError::HeadersTooLarge { .. } => (StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, code::INVALID_REQUEST),
            McpError::Timeout { .. } => (StatusCode::REQUEST_TIMEOUT, code::TIMEOUT),
            McpError::Crashed => (StatusCode::INTERNAL_SERVER_ERROR, code::INTERNAL_ERROR),
            McpError::OverLimit { .. } => (StatusCode::OK, code::INVALID_PARAMS),
            McpError::Parse(_) => (StatusCode::BAD_REQUEST, code::PARSE_ERROR),
            McpError::InvalidRequest(_) => (StatusCode::BAD_REQUEST, code::INVALID_REQUEST),
            McpError::NotAcceptable => (StatusCode::NOT_ACCEPTABLE, code::INVALID_REQUEST),
            McpError::HttpMethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, code::INVALID_REQUEST),
            McpError::HeaderMismatch(_) => (StatusCode::BAD_REQUEST, code::HEADER_MISMATCH),
            McpError::UnsupportedVersion { .. } => (StatusCode::BAD_REQUEST, code::UNSUPPORTED_PROTOCOL_VERSION),
            McpError::InvalidMeta(_) => (StatusCode::BAD_REQUEST, code::INVALID_PARAMS),
            McpError::MethodNotFound { is_modern: true, .. } => (StatusCode::NOT_FOUND, code::METHOD_NOT_FOUND),
            McpError::MethodNotFound { is_modern: false, .. } => (StatusCode::OK, code::METHOD_NOT_FOUND),
            McpError::InvalidParams(_) => (StatusCode::OK, code::INVALID_PARAMS),
            McpError::ResourceNotFound { is_modern: true, .. } => (StatusCode::OK, code::INVALID_PARAMS),
            McpError::ResourceNotFound { is_modern: false, .. } => (StatusCode::OK, code::RESOURCE_NOT_FOUND),
            McpError::Internal => (StatusCode::OK, code::INTERNAL_ERROR),
        }
    }

    pub fn code(&self) -> i32 {
        self.status_and_code().1
    }

    pub fn status(&self) -> StatusCode {
        self.status_and_code().0
    }

    /// The configured limit this error is a refusal by, if it is one (counted in `limit_refused`).
    pub fn limit(&self) -> Option<ConfiguredLimit> {
        match self {
            McpError::BodyTooLarge { .. } => Some(ConfiguredLimit::Body),
            McpError::JsonTooDeep { .. } => Some(ConfiguredLimit::JsonDepth),
            McpError::UriTooLong { .. } => Some(ConfiguredLimit::Uri),
            McpError::HeadersTooLarge { .. } => Some(ConfiguredLimit::Header),
            McpError::BatchTooLarge { .. } => Some(ConfiguredLimit::Batch),
            McpError::Timeout { .. } => Some(ConfiguredLimit::Timeout),
            McpError::TooManyStreams { .. } => Some(ConfiguredLimit::Streams),
            McpError::TooManySessions { .. } => Some(ConfiguredLimit::Sessions),
            McpError::OverLimit { limit, .. } => Some(*limit),
            _ => None,
        }
    }

    /// The error's `data` member, when the specification or the contract defines one.
    pub fn data(&self) -> Option<Value> {
        match self {
            McpError::UnsupportedVersion { requested } => {
                Some(json!({ "supported": SUPPORTED_VERSIONS, "requested": requested }))
            }
            McpError::ResourceNotFound { uri, .. } => Some(json!({ "uri": uri })),
            McpError::RateLimited { retry_after_ms } => Some(json!({ "retryAfterMs": retry_after_ms })),
            McpError::LockedOut { retry_after_ms, .. } => {
                Some(json!({ "retryAfterMs": retry_after_ms, "reason": "failedAuthentications" }))
            }
            McpError::TooManyStreams { scope, limit } => Some(json!({ "limit": limit, "per": scope })),
            McpError::TooManySessions { limit } => Some(json!({ "limit": limit, "per": "key" })),
            McpError::BodyTooLarge { limit }
            | McpError::JsonTooDeep { limit }
            | McpError::UriTooLong { limit }
            | McpError::HeadersTooLarge { limit } => Some(json!({ "limit": limit })),
            McpError::Timeout { limit_ms } => Some(json!({ "limitMs": limit_ms })),
            _ => None,
        }
    }

    /// The HTTP response for this error, carrying `id` (null when the request's id is not known).
    pub fn into_http(self, id: Option<&RequestId>) -> Response {
        let status = self.status();
        let mut response = (
            status,
            [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
            jsonrpc::failure(id, &self),
        )
            .into_response();
        response.extensions_mut().insert(crate::audit::request::ErrorCode(self.code()));
        if let Some(limit) = self.limit() {
            response.extensions_mut().insert(Refused(limit));
        }
        let headers = response.headers_mut();
        match &self {
            McpError::Unauthenticated | McpError::OperatorToken | McpError::InvalidToken(_) => {
                Challenge::default().put_on(headers);
            }
            McpError::Unavailable | McpError::ShuttingDown | McpError::AuditOverloaded => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static(UNAVAILABLE_RETRY_AFTER_SECS));
            }
            McpError::RateLimited { retry_after_ms } | McpError::LockedOut { retry_after_ms, .. } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after_ms.div_ceil(1000).max(1)));
            }
            McpError::HttpMethodNotAllowed => {
                headers.insert(header::ALLOW, HeaderValue::from_static("POST"));
            }
            _ => {}
        }
        response
    }
}

impl IntoResponse for McpError {
    fn into_response(self) -> Response {
        self.into_http(None)
    }
}

impl From<StoreError> for McpError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Unavailable(source) => {
                tracing::warn!(error = %source, "database unavailable");
                McpError::Unavailable
            }
            other => {
                tracing::error!(error = %other, "store failure while serving MCP");
                McpError::Internal
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_differs_by_era() {
        let modern = McpError::ResourceNotFound { uri: "a://b".into(), is_modern: true };
        let legacy = McpError::ResourceNotFound { uri: "a://b".into(), is_modern: false };
        assert_eq!(modern.status_and_code(), (StatusCode::OK, -32602));
        assert_eq!(legacy.status_and_code(), (StatusCode::OK, -32002));
        assert_eq!(modern.data(), Some(json!({ "uri": "a://b" })));
    }

    #[test]
    fn unknown_method_is_404_on_the_modern_wire_only() {
        let modern = McpError::MethodNotFound { method: "x".into(), is_modern: true };
        let legacy = McpError::MethodNotFound { method: "x".into(), is_modern: false };
        assert_eq!(modern.status(), StatusCode::NOT_FOUND);
        assert_eq!(legacy.status(), StatusCode::OK);
    }

    #[test]
    fn unauthenticated_carries_the_challenge() {
        let response = McpError::Unauthenticated.into_http(None);
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(response.headers()[header::WWW_AUTHENTICATE], crate::http::auth::CHALLENGE);
    }
}
