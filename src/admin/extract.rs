//! The admin API's own extractors, so malformed input always gets a problem+json answer.
//!
//! Bodies are read as bytes, scanned for their nesting and for keys given twice in one object
//! ([`crate::http::json_scan`], 400 either way), parsed as JSON (400 when they do not parse), then deserialised
//! into the request type: a value of the wrong JSON type is a 400, any other refusal (unknown field, missing
//! field, a value out of range or not among the allowed ones) a 422. Bodies are accepted whatever their
//! `Content-Type`, like on the MCP endpoint.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Query, RawPathParams, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ApiError;
use crate::metrics::ConfiguredLimit;
use crate::state::AppState;

/// A JSON body deserialised into `T` with the admin API's error classification.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T> FromRequest<AppState> for JsonBody<T>
where
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let limits = &state.config.limits;
        let bytes = Bytes::from_request(request, state).await.map_err(|rejection| {
            if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                let detail =
                    format!("the request body is larger than {} bytes (limits.max_body_bytes)", limits.max_body_bytes);
                ApiError::limited(ConfiguredLimit::Body, ApiError::PayloadTooLarge(detail))
            } else {
                ApiError::BadRequest(format!("cannot read the request body: {}", rejection.body_text()))
            }
        })?;
        let shape = crate::http::json_scan::scan(&bytes, limits.max_json_depth);
        if shape.is_too_deep {
            let max = limits.max_json_depth;
            let detail = format!("the body nests arrays and objects deeper than {max} levels (limits.max_json_depth)");
            return Err(ApiError::limited(ConfiguredLimit::JsonDepth, ApiError::BadRequest(detail)));
        }
        let value = parse_json(&bytes)?;
        if let Some(key) = shape.duplicate_key {
            return Err(ApiError::BadRequest(format!("the key {key:?} appears twice in one object of the body")));
        }
        from_value(value, "").map(JsonBody)
    }
}

/// Parses a body as JSON: 400 when it is not JSON.
pub fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::BadRequest("the request body is empty; a JSON object is expected".to_owned()));
    }
    serde_json::from_slice(bytes).map_err(|error| ApiError::BadRequest(format!("the body is not valid JSON: {error}")))
}

/// Deserialises a JSON object (every admin body and batch item is one), never taking an array for a
/// struct (see [`super::strict`]); `at` (e.g. `upsert[2]: `) prefixes the error's detail.
pub fn from_value<T: DeserializeOwned>(value: Value, at: &str) -> Result<T, ApiError> {
    if !value.is_object() {
        return Err(ApiError::BadRequest(format!("{at}a JSON object is expected")));
    }
    let typed = super::strict::from_value(&value).map_err(|error| classify(&error, at))?;
    if let Some(path) = nul_at(&value) {
        let path = if path.is_empty() { "/" } else { path.as_str() };
        return Err(ApiError::Unprocessable(format!("{at}{path} contains U+0000, which strings may not contain")));
    }
    Ok(typed)
}

/// Where a string (or an object key) holds U+0000, as a path like `/messages/0/content/text` (empty for
/// the root). PostgreSQL's `text` cannot store it, so both backends refuse it alike instead of one failing
/// late. The path is only built on the way back from a find.
fn nul_at(value: &Value) -> Option<String> {
    match value {
        Value::String(text) if text.contains('\0') => Some(String::new()),
        Value::Array(items) => {
            items.iter().enumerate().find_map(|(i, item)| nul_at(item).map(|rest| format!("/{i}{rest}")))
        }
        Value::Object(map) => map.iter().find_map(|(key, item)| {
            if key.contains('\0') {
                Some(format!("/{}", key.replace('\0', "\\u0000")))
            } else {
                nul_at(item).map(|rest| format!("/{key}{rest}"))
            }
        }),
        _ => None,
    }
}

/// 400 for a value of the wrong JSON type, 422 for everything else serde refuses.
pub fn classify(error: &serde_json::Error, at: &str) -> ApiError {
    let message = error.to_string();
    if message.starts_with("invalid type") {
        ApiError::BadRequest(format!("{at}{message}"))
    } else {
        ApiError::Unprocessable(format!("{at}{message}"))
    }
}

/// For `Option<Option<T>>` fields of a JSON merge-patch: absent → `None` (with `#[serde(default)]`),
/// `null` → `Some(None)`, a value → `Some(Some(value))`.
pub fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    <Option<T> as serde::Deserialize>::deserialize(deserializer).map(Some)
}

/// Declares the body of a JSON merge-patch: each field `pub name: T` is an `Option<Option<T>>` read with
/// [`present`], so that an absent member, `null` and a value stay apart.
macro_rules! merge_patch {
    (
        $(#[$attr:meta])*
        pub struct $name:ident {
            $($(#[$field_attr:meta])* pub $field:ident: $type:ty,)*
        }
    ) => {
        $(#[$attr])*
        pub struct $name {
            $(
                $(#[$field_attr])*
                #[serde(default, deserialize_with = "crate::admin::extract::present")]
                pub $field: Option<Option<$type>>,
            )*
        }
    };
}

pub(crate) use merge_patch;

/// What a handler makes of the JSON body `json`: parsed, deserialised as a `B` and turned into its domain
/// value by `into`; the status of the first refusal.
#[cfg(test)]
pub fn body_status<B: DeserializeOwned, T>(
    json: &str,
    into: impl FnOnce(B) -> Result<T, ApiError>,
) -> Result<T, axum::http::StatusCode> {
    parse_json(json.as_bytes()).and_then(|value| from_value::<B>(value, "")).and_then(into).map_err(|e| e.status())
}

/// The query string as name/value pairs, percent-decoded. Unknown names are ignored.
#[derive(Debug, Default)]
pub struct QueryParams(Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for QueryParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Query::<Vec<(String, String)>>::try_from_uri(&parts.uri)
            .map(|Query(pairs)| QueryParams(pairs))
            .map_err(|error| ApiError::BadRequest(format!("malformed query string: {}", error.body_text())))
    }
}

impl QueryParams {
    pub fn from_pairs(pairs: Vec<(String, String)>) -> Self {
        Self(pairs)
    }

    /// The parameter's value; 400 when it is given more than once.
    pub fn get(&self, name: &str) -> Result<Option<&str>, ApiError> {
        let mut values = self.0.iter().filter(|(key, _)| key == name).map(|(_, value)| value.as_str());
        let first = values.next();
        if values.next().is_some() {
            return Err(ApiError::BadRequest(format!("query parameter {name:?} is given more than once")));
        }
        Ok(first)
    }

    /// A parameter the operation needs: 422 when it is missing.
    pub fn require(&self, name: &str) -> Result<&str, ApiError> {
        self.get(name)?.ok_or_else(|| ApiError::Unprocessable(format!("query parameter {name:?} is required")))
    }
}

/// The route's path parameters, percent-decoded.
#[derive(Debug)]
pub struct PathParams(RawPathParams);

impl<S: Send + Sync> FromRequestParts<S> for PathParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        RawPathParams::from_request_parts(parts, state)
            .await
            .map(PathParams)
            .map_err(|error| ApiError::BadRequest(format!("malformed path: {}", error.body_text())))
    }
}

impl PathParams {
    /// The parameter named in the route; a route without it is a bug (500).
    pub fn get(&self, name: &str) -> Result<&str, ApiError> {
        self.0
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value)
            .ok_or_else(|| ApiError::Internal(format!("route has no path parameter {name:?}")))
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Body {
        name: String,
        count: Option<u32>,
        #[serde(default, deserialize_with = "present")]
        note: Option<Option<String>>,
    }

    fn status_of(json: &str) -> Result<Body, StatusCode> {
        parse_json(json.as_bytes()).and_then(|v| from_value::<Body>(v, "")).map_err(|e| e.status())
    }

    #[test]
    fn classifies_errors() {
        assert!(status_of(r#"{"name": "a", "count": 3}"#).is_ok());
        assert_eq!(status_of("").unwrap_err(), StatusCode::BAD_REQUEST);
        assert_eq!(status_of("{\"name\": ").unwrap_err(), StatusCode::BAD_REQUEST);
        assert_eq!(status_of("{\"name\": \"a\", \"x\": 1, ").unwrap_err(), StatusCode::BAD_REQUEST);
        assert_eq!(status_of("[]").unwrap_err(), StatusCode::BAD_REQUEST);
        assert_eq!(status_of(r#"["a", 1, null]"#).unwrap_err(), StatusCode::BAD_REQUEST);
        assert_eq!(status_of("null").unwrap_err(), StatusCode::BAD_REQUEST);
        assert_eq!(status_of(r#"{"name": 5}"#).unwrap_err(), StatusCode::BAD_REQUEST);
        assert_eq!(status_of(r#"{"name": "a", "count": "3"}"#).unwrap_err(), StatusCode::BAD_REQUEST);
        assert_eq!(status_of(r#"{"name": "a", "extra": 1}"#).unwrap_err(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(status_of(r#"{"count": 1}"#).unwrap_err(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(status_of(r#"{"name": "a", "count": -1}"#).unwrap_err(), StatusCode::UNPROCESSABLE_ENTITY);
    }

    #[test]
    fn nul_is_refused_wherever_it_is() {
        assert_eq!(status_of("{\"name\": \"a\\u0000b\"}").unwrap_err(), StatusCode::UNPROCESSABLE_ENTITY);
        let nested = serde_json::json!({"a": [{"b": "x\u{0}"}]});
        assert_eq!(nul_at(&nested).as_deref(), Some("/a/0/b"));
        assert_eq!(nul_at(&serde_json::json!({"ok": ["fine"]})), None);
    }

    #[test]
    fn merge_patch_fields() {
        let absent = status_of(r#"{"name": "a"}"#).expect("valid");
        assert_eq!(absent.note, None);
        let null = status_of(r#"{"name": "a", "note": null}"#).expect("valid");
        assert_eq!(null.note, Some(None));
        let set = status_of(r#"{"name": "a", "note": "n"}"#).expect("valid");
        assert_eq!(set.note, Some(Some("n".to_owned())));
    }

    #[test]
    fn query_parameters() {
        let params = QueryParams::from_pairs(vec![("uri".into(), "x://a".into()), ("a".into(), "1".into())]);
        assert_eq!(params.get("uri").ok().flatten(), Some("x://a"));
        assert_eq!(params.require("missing").unwrap_err().status(), StatusCode::UNPROCESSABLE_ENTITY);
        let twice = QueryParams::from_pairs(vec![("a".into(), "1".into()), ("a".into(), "2".into())]);
        assert_eq!(twice.get("a").unwrap_err().status(), StatusCode::BAD_REQUEST);
    }
}
