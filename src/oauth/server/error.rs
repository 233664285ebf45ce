//! The errors of the token, registration and revocation endpoints: RFC 6749 §5.2 JSON (`error`,
//! `error_description`), never cached.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// An OAuth error answered as JSON.
#[derive(Debug, Clone)]
pub struct OAuthError {
    pub status: StatusCode,
    /// The OAuth error code (`invalid_request`, `invalid_grant`, …).
    pub code: &'static str,
    pub description: String,
    /// Seconds a client should wait (429, 503).
    pub retry_after: Option<u64>,
}

/// One constructor per error a client can cause: its name, its status and its OAuth error code.
macro_rules! constructors {
    ($($(#[$doc:meta])* $name:ident => $status:ident, $code:literal;)+) => {$(
        $(#[$doc])*
        pub fn $name(description: impl Into<String>) -> Self {
            Self::new(StatusCode::$status, $code, description)
        }
    )+};
}

impl OAuthError {
    fn new(status: StatusCode, code: &'static str, description: impl Into<String>) -> Self {
        Self { status, code, description: description.into(), retry_after: None }
    }

    constructors! {
        invalid_request => BAD_REQUEST, "invalid_request";
        invalid_grant => BAD_REQUEST, "invalid_grant";
        invalid_client => UNAUTHORIZED, "invalid_client";
        invalid_scope => BAD_REQUEST, "invalid_scope";
        invalid_target => BAD_REQUEST, "invalid_target";
        unsupported_grant_type => BAD_REQUEST, "unsupported_grant_type";
        /// RFC 7591 §3.2.2.
        invalid_redirect_uri => BAD_REQUEST, "invalid_redirect_uri";
        /// RFC 7591 §3.2.2.
        invalid_client_metadata => BAD_REQUEST, "invalid_client_metadata";
        too_large => PAYLOAD_TOO_LARGE, "invalid_request";
    }

    pub fn too_many(description: impl Into<String>, retry_after: u64) -> Self {
        Self { retry_after: Some(retry_after), ..Self::new(StatusCode::TOO_MANY_REQUESTS, "slow_down", description) }
    }

    /// The database cannot serve right now.
    pub fn unavailable() -> Self {
        Self {
            retry_after: Some(1),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable", "the database is unavailable")
        }
    }
}

impl From<crate::store::StoreError> for OAuthError {
    fn from(error: crate::store::StoreError) -> Self {
        tracing::warn!(%error, "authorization server store error");
        match error {
            crate::store::StoreError::Unavailable(_) => Self::unavailable(),
            _ => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "internal error"),
        }
    }
}

impl IntoResponse for OAuthError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.code, "error_description": self.description });
        let mut response = (self.status, axum::Json(body)).into_response();
        no_store(&mut response);
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// Marks an answer as never to be cached (RFC 6749 §5.1).
pub fn no_store(response: &mut Response) {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
}
