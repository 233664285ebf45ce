//! The admin API's error: one enum, mapped once to `application/problem+json` (RFC 9457).
//!
//! Every problem has `type` `about:blank`, so its `title` is the HTTP status phrase (RFC 9457 §4.2.1)
//! and `detail` says what was wrong with this request. Client errors say exactly what to fix; server
//! errors (500) are logged with their cause and answered with a generic detail.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::domain::id::InvalidValue;
use crate::http::auth::Challenge;
use crate::metrics::{ConfiguredLimit, Refused};
use crate::registry::cursor::InvalidCursor;
use crate::store::StoreError;

/// The media type of every error answer.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Why an admin request failed; the `String` is the `detail` shown to the caller.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: unparsable JSON, a value of the wrong type, an invalid cursor, a malformed query string.
    #[error("{0}")]
    BadRequest(String),
    /// 401: no credentials, a wrong operator token, or an unknown, revoked or expired key.
    #[error("{0}")]
    Unauthorized(String),
    /// 403: valid credentials that may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// 404: the agent or the item does not exist.
    #[error("{0}")]
    NotFound(String),
    /// 405: a known path with a method it does not serve.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// 409: a create of something that exists, or a change that would exceed an agent's count quota.
    #[error("{0}")]
    Conflict(String),
    /// 413: a body or a resource's content over its limit, or a change over a storage quota.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// 422: well-formed JSON with an invalid value, an unknown or a missing field.
    #[error("{0}")]
    Unprocessable(String),
    /// 408: not answered within `http.request_timeout_ms`.
    #[error("{0}")]
    RequestTimeout(String),
    /// 414: the request target is longer than `limits.max_uri_bytes`.
    #[error("{0}")]
    UriTooLong(String),
    /// 431: the header fields are larger than `limits.max_header_bytes`.
    #[error("{0}")]
    HeaderFieldsTooLarge(String),
    /// 429: the credential's rate limit, or the client's failed authentications, are used up for now.
    #[error("too many requests; retry after {retry_after:?}")]
    TooManyRequests { retry_after: std::time::Duration },
    /// 429: the client's address used up its failed authentications; the detail says so and until when.
    #[error("{detail}")]
    LockedOut { retry_after: std::time::Duration, detail: String },
    /// 503: the database is unreachable or overloaded; the client should retry.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// 500: a bug or corrupt data; the cause is logged, never returned.
    #[error("internal error: {0}")]
    Internal(String),
    /// A configured limit refused the request: answered as `error` is, and counted by `limit`.
    #[error("{error}")]
    Limited { limit: ConfiguredLimit, error: Box<ApiError> },
}

/// The problem details body.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// Always `about:blank`: the status says what kind of problem it is.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The HTTP status phrase.
    pub title: &'static str,
    pub status: u16,
    /// What was wrong with this request.
    pub detail: String,
}

impl ApiError {
    /// A 422 whose detail is `error`'s text: a value that parsed but is not valid.
    pub fn invalid(error: impl std::fmt::Display) -> Self {
        ApiError::Unprocessable(error.to_string())
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::TooManyRequests { .. } | ApiError::LockedOut { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::UriTooLong(_) => StatusCode::URI_TOO_LONG,
            ApiError::HeaderFieldsTooLarge(_) => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ApiError::Limited { error, .. } => error.status(),
        }
    }

    /// `error`, as the refusal of `limit`.
    pub fn limited(limit: ConfiguredLimit, error: ApiError) -> Self {
        ApiError::Limited { limit, error: Box::new(error) }
    }

    /// The same error with `at` (e.g. `upsert[2]: `) before its detail.
    pub fn at(self, at: &str) -> Self {
        match self {
            ApiError::BadRequest(detail) => ApiError::BadRequest(format!("{at}{detail}")),
            ApiError::Unprocessable(detail) => ApiError::Unprocessable(format!("{at}{detail}")),
            ApiError::PayloadTooLarge(detail) => ApiError::PayloadTooLarge(format!("{at}{detail}")),
            ApiError::Limited { limit, error } => ApiError::limited(limit, error.at(at)),
            other => other,
        }
    }

    /// A 404 for a route that does not exist (for the application's fallback).
    pub fn no_route() -> Self {
        ApiError::NotFound("no such endpoint".to_owned())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Limited { limit, error } = self {
            let mut response = error.into_response();
            response.extensions_mut().insert(Refused(limit));
            return response;
        }
        let status = self.status();
        // `Retry-After` in whole seconds, rounded up: never earlier than the limit allows.
        let retry_after = match &self {
            ApiError::TooManyRequests { retry_after } | ApiError::LockedOut { retry_after, .. } => {
                Some(retry_after.as_nanos().div_ceil(1_000_000_000).max(1))
            }
            _ => None,
        };
        let detail = match self {
            ApiError::Internal(cause) => {
                tracing::error!(%cause, "admin request failed");
                "an internal error occurred; it has been logged".to_owned()
            }
            ApiError::Unavailable(cause) => {
                tracing::warn!(%cause, "admin request refused: database unavailable");
                "the database is unavailable; retry shortly".to_owned()
            }
            ApiError::MethodNotAllowed => "this path does not serve this method; see the Allow header".to_owned(),
            ApiError::TooManyRequests { .. } => {
                "too many requests; retry after the time the Retry-After header gives".to_owned()
            }
            ApiError::LockedOut { detail, .. }
            | ApiError::BadRequest(detail)
            | ApiError::Unauthorized(detail)
            | ApiError::Forbidden(detail)
            | ApiError::NotFound(detail)
            | ApiError::Conflict(detail)
            | ApiError::PayloadTooLarge(detail)
            | ApiError::Unprocessable(detail)
            | ApiError::RequestTimeout(detail)
            | ApiError::UriTooLong(detail)
            | ApiError::HeaderFieldsTooLarge(detail) => detail,
            // Answered above.
            ApiError::Limited { error, .. } => error.to_string(),
        };
        let problem = Problem {
            kind: "about:blank",
            title: status.canonical_reason().unwrap_or("Error"),
            status: status.as_u16(),
            detail,
        };
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        let mut response =
            (status, [(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON))], body).into_response();
        match status {
            StatusCode::UNAUTHORIZED => Challenge::default().put_on(response.headers_mut()),
            StatusCode::SERVICE_UNAVAILABLE => {
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            StatusCode::TOO_MANY_REQUESTS => {
                let seconds = u64::try_from(retry_after.unwrap_or(1)).unwrap_or(u64::MAX);
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            }
            _ => {}
        }
        response
    }
}

impl From<crate::domain::limits::TooLarge> for ApiError {
    fn from(error: crate::domain::limits::TooLarge) -> Self {
        ApiError::limited(ConfiguredLimit::Field, ApiError::PayloadTooLarge(error.to_string()))
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::NotFound => ApiError::NotFound("not found".to_owned()),
            StoreError::Absent(detail) => ApiError::NotFound(detail),
            StoreError::Conflict => ApiError::Conflict("already exists".to_owned()),
            StoreError::TooMany(detail) => ApiError::limited(ConfiguredLimit::Quota, ApiError::Conflict(detail)),
            StoreError::Invalid(detail) => ApiError::Unprocessable(detail),
            StoreError::TooLarge(detail) => {
                ApiError::limited(ConfiguredLimit::Quota, ApiError::PayloadTooLarge(detail))
            }
            StoreError::Unavailable(cause) => ApiError::Unavailable(cause.to_string()),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<InvalidValue> for ApiError {
    fn from(error: InvalidValue) -> Self {
        ApiError::Unprocessable(error.0)
    }
}

impl From<InvalidCursor> for ApiError {
    fn from(_: InvalidCursor) -> Self {
        ApiError::BadRequest("invalid cursor: pass the nextCursor of a previous page of this list".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body_of(response: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), 4096).await.expect("body");
        serde_json::from_slice(&bytes).expect("json")
    }

    #[tokio::test]
    async fn problem_json_with_status_headers() {
        let response = ApiError::Unauthorized("no credentials".to_owned()).into_response();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(response.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
        assert_eq!(response.headers()[header::WWW_AUTHENTICATE], crate::http::auth::CHALLENGE);
        let body = body_of(response).await;
        assert_eq!(
            body,
            serde_json::json!({"type": "about:blank", "title": "Unauthorized", "status": 401, "detail": "no credentials"})
        );
    }

    #[tokio::test]
    async fn server_errors_hide_their_cause() {
        let response = ApiError::Internal("secret table name".to_owned()).into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!body_of(response).await.to_string().contains("secret"));
        let response = ApiError::from(StoreError::Unavailable(sqlx::Error::PoolTimedOut)).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    }

    #[tokio::test]
    async fn too_many_requests_says_when_to_retry() {
        let retry_after = std::time::Duration::from_millis(1200);
        let response = ApiError::TooManyRequests { retry_after }.into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "2", "seconds, rounded up");
        assert_eq!(body_of(response).await["status"], 429);
    }

    #[test]
    fn store_errors_map_by_kind() {
        assert_eq!(ApiError::from(StoreError::NotFound).status(), StatusCode::NOT_FOUND);
        assert_eq!(ApiError::from(StoreError::Conflict).status(), StatusCode::CONFLICT);
        assert_eq!(ApiError::from(StoreError::Corrupt("x".into())).status(), StatusCode::INTERNAL_SERVER_ERROR);
        let quota = ApiError::from(StoreError::TooMany("over".into()));
        assert_eq!(quota.status(), StatusCode::CONFLICT);
        assert!(matches!(quota, ApiError::Limited { limit: ConfiguredLimit::Quota, .. }));
    }

    #[tokio::test]
    async fn limit_refusals_are_marked_for_the_counter() {
        let error =
            ApiError::limited(ConfiguredLimit::Body, ApiError::PayloadTooLarge("too big".into())).at("upsert[1]: ");
        let response = error.into_response();
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert!(matches!(response.extensions().get::<Refused>(), Some(Refused(ConfiguredLimit::Body))));
        assert_eq!(body_of(response).await["detail"], "upsert[1]: too big");
    }
}
