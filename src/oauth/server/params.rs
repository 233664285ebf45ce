//! Form and query parameters of the OAuth endpoints: each name at most once (RFC 6749 §3.1, §3.2), bounded in
//! number and size, read from the raw bytes so that malformed input always gets an OAuth error.

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request};
use axum::http::{HeaderMap, header};

use super::error::OAuthError;
use crate::state::AppState;

/// Bytes of a form body the endpoints read.
pub const MAX_FORM_BYTES: usize = 16 * 1024;
/// Parameters one request may carry.
const MAX_PARAMS: usize = 32;
/// Bytes of one parameter's value.
pub const MAX_VALUE_BYTES: usize = 4096;

/// What a form endpoint (the consent page's decision, the token and registration endpoints) is given: the
/// application, the peer's address, the head, and the body, which the endpoint reads within its own limits.
pub struct Submission {
    pub state: AppState,
    pub peer: SocketAddr,
    pub headers: HeaderMap,
    pub body: Body,
}

impl FromRequest<AppState> for Submission {
    type Rejection = <ConnectInfo<SocketAddr> as FromRequestParts<AppState>>::Rejection;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = request.into_parts();
        let ConnectInfo(peer) = ConnectInfo::<SocketAddr>::from_request_parts(&mut parts, state).await?;
        Ok(Self { state: state.clone(), peer, headers: parts.headers, body })
    }
}

/// Parameters by name, each present at most once.
#[derive(Debug, Default, Clone)]
pub struct Params(Vec<(String, String)>);

impl Params {
    /// Parses `application/x-www-form-urlencoded` bytes (a query string or a form body).
    pub fn parse(bytes: &[u8]) -> Result<Self, OAuthError> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for (name, value) in form_urlencoded::parse(bytes) {
            if pairs.len() == MAX_PARAMS {
                return Err(OAuthError::invalid_request(format!("more than {MAX_PARAMS} parameters")));
            }
            if value.len() > MAX_VALUE_BYTES {
                return Err(OAuthError::invalid_request(format!(
                    "parameter {name:?} is longer than {MAX_VALUE_BYTES} bytes"
                )));
            }
            if pairs.iter().any(|(seen, _)| *seen == name) {
                return Err(OAuthError::invalid_request(format!("parameter {name:?} is given more than once")));
            }
            pairs.push((name.into_owned(), value.into_owned()));
        }
        Ok(Self(pairs))
    }

    /// Reads and parses a form body; its `Content-Type` must be `application/x-www-form-urlencoded`.
    pub async fn from_form(headers: &HeaderMap, body: Body) -> Result<Self, OAuthError> {
        if !has_media_type(headers, "application/x-www-form-urlencoded") {
            return Err(OAuthError::invalid_request("the body must be application/x-www-form-urlencoded"));
        }
        Self::parse(&read_body(body).await?)
    }

    /// The value of `name`, if present and not empty (an empty value counts as absent, RFC 6749 §3.1).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(seen, _)| seen == name).map(|(_, value)| value.as_str()).filter(|value| !value.is_empty())
    }

    /// The value of `name`, or `invalid_request` naming it.
    pub fn require(&self, name: &str) -> Result<&str, OAuthError> {
        self.get(name).ok_or_else(|| OAuthError::invalid_request(format!("parameter {name:?} is missing")))
    }

    /// Every pair, in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.0
    }
}

/// Whether the request's `Content-Type` is `media_type` (parameters aside).
pub fn has_media_type(headers: &HeaderMap, media_type: &str) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|value| value.trim().eq_ignore_ascii_case(media_type))
}

/// The body, at most [`MAX_FORM_BYTES`].
pub async fn read_body(body: Body) -> Result<axum::body::Bytes, OAuthError> {
    axum::body::to_bytes(body, MAX_FORM_BYTES)
        .await
        .map_err(|_| OAuthError::too_large(format!("the body is larger than {MAX_FORM_BYTES} bytes")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_name_is_refused() {
        let error = Params::parse(b"code=a&code=b").expect_err("a repeated parameter");
        assert_eq!(error.code, "invalid_request");
        let params = Params::parse(b"code=a%20b&empty=").expect("parses");
        assert_eq!(params.get("code"), Some("a b"));
        assert_eq!(params.get("empty"), None);
        assert!(params.require("missing").is_err());
    }

    #[test]
    fn too_many_or_too_long_is_refused() {
        let many = (0..40).map(|i| format!("p{i}=x")).collect::<Vec<_>>().join("&");
        assert!(Params::parse(many.as_bytes()).is_err());
        let long = format!("state={}", "x".repeat(MAX_VALUE_BYTES + 1));
        assert!(Params::parse(long.as_bytes()).is_err());
    }
}
