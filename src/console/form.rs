//! Form bodies: `application/x-www-form-urlencoded`, read whole within `limits.max_body_bytes` (the layer's
//! limit) by our own extractor, so that a bad body is a console page, not a framework's plain-text answer.

use axum::body::Body;
use axum::extract::{FromRequest, Request};

use super::view::ConsoleError;
use crate::error::ApiError;
use crate::state::AppState;

/// A form's fields in order; a name may repeat (checkboxes).
#[derive(Debug, Default)]
pub struct Form(Vec<(String, String)>);

impl Form {
    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The first value of `name`, `None` when absent or blank.
    pub fn given(&self, name: &str) -> Option<&str> {
        self.get(name).map(str::trim).filter(|v| !v.is_empty())
    }

    /// Every value of `name`.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.0.iter().filter(|(n, _)| n == name).map(|(_, v)| v.as_str()).collect()
    }

    /// A form from fields read elsewhere (a multipart body's).
    pub fn from_fields(fields: Vec<(String, String)>) -> Self {
        Form(fields)
    }

    /// Parses a URL-encoded body or query string.
    pub fn parse(bytes: &[u8]) -> Result<Self, ConsoleError> {
        serde_urlencoded::from_bytes(bytes)
            .map(Form)
            .map_err(|error| ApiError::BadRequest(format!("the form is not URL-encoded: {error}")).into())
    }

    /// A whole number field, absent when blank; 422 naming the field otherwise.
    pub fn number<T: std::str::FromStr>(&self, name: &str, label: &str) -> Result<Option<T>, ConsoleError> {
        self.given(name)
            .map(|raw| {
                raw.parse::<T>().map_err(|_| {
                    ConsoleError::Api(ApiError::Unprocessable(format!("{label} must be a whole number, not {raw:?}")))
                })
            })
            .transpose()
    }
}

impl FromRequest<AppState> for Form {
    type Rejection = ConsoleError;

    async fn from_request(request: Request<Body>, state: &AppState) -> Result<Self, Self::Rejection> {
        let limit = state.config.limits.max_body_bytes;
        let bytes = axum::body::to_bytes(request.into_body(), limit).await.map_err(|_| {
            ApiError::PayloadTooLarge(format!("the form is over {limit} bytes (limits.max_body_bytes)"))
        })?;
        Form::parse(&bytes)
    }
}
