//! `/agents/{agent_id}/resources`: upsert, list, read with content, and delete an agent's resources.
//!
//! Content is `text` (UTF-8) or `blob` (standard base64 with padding), never both. Content larger than
//! `limits.max_resource_bytes` (text bytes or decoded blob bytes) is refused with 413, like an oversized
//! body. Lists never carry content; `GET .../resources/content?uri=` does.

use axum::Json;
use axum::extract::State;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::access::RegistryAccess;
use super::collection::{self, AdminCollection, ItemKey, missing};
use super::extract::PathParams;
use super::page::Page;
use crate::domain::ResourceUri;
use crate::domain::content::{validate_base64, validate_meta};
use crate::domain::limits::{Field, FieldLimits};
use crate::domain::model::{Content, NewResource, Resource};
use crate::error::{ApiError, Problem};
use crate::metrics::ConfiguredLimit;
use crate::registry::collection::Resources;
use crate::state::AppState;

collection::described_body! {
    /// A resource to create or replace, keyed by `uri`, with exactly one of `text` or `blob`.
    #[derive(Debug, Deserialize, utoipa::ToSchema)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    pub struct ResourceBody {
        /// An absolute URI (RFC 3986: a scheme, no fragment), at most 2048 bytes.
        #[schema(example = "test://static-text", max_length = 2048)]
        pub uri: String,
        /// MCP annotations: `audience`, `priority`, `lastModified`.
        pub annotations: Option<Value>,
        #[serde(rename = "_meta")]
        #[schema(value_type = Option<Object>)]
        pub meta: Option<Value>,
        /// UTF-8 content.
        pub text: Option<String>,
        /// Binary content, standard base64 with padding.
        pub blob: Option<String>,
    }
}

impl ResourceBody {
    /// The validated resource; 422 for an invalid value, 413 for content over `max_bytes` or a field over
    /// its limit.
    pub fn into_new(self, max_bytes: usize, limits: &FieldLimits) -> Result<NewResource, ApiError> {
        self.limit_described(limits)?;
        limits.json(Field::Meta, "_meta", self.meta.as_ref())?;
        let uri = ResourceUri::parse(&self.uri)?;
        self.check_described()?;
        self.meta.as_ref().map(validate_meta).transpose().map_err(ApiError::invalid)?;
        let content = match (self.text, self.blob) {
            (Some(text), None) => Content::Text(text),
            (None, Some(blob)) => Content::Blob(validate_base64("blob", &blob).map_err(ApiError::invalid)?),
            (Some(_), Some(_)) => return Err(ApiError::invalid("give either text or blob, not both")),
            (None, None) => return Err(ApiError::invalid("text or blob is required")),
        };
        if content.size() > max_bytes as u64 {
            return Err(ApiError::limited(
                ConfiguredLimit::ResourceSize,
                ApiError::PayloadTooLarge(format!(
                    "the content is {} bytes; at most {max_bytes} are allowed (limits.max_resource_bytes)",
                    content.size()
                )),
            ));
        }
        Ok(NewResource {
            uri,
            name: self.name,
            title: self.title,
            description: self.description,
            mime_type: self.mime_type,
            annotations: self.annotations,
            meta: self.meta,
            content,
        })
    }
}

/// A media type has the shape `type/subtype` (parameters allowed), without control characters.
pub fn check_mime_type(mime_type: &str) -> Result<(), ApiError> {
    let essence = mime_type.split(';').next().unwrap_or_default().trim();
    let valid = essence.split_once('/').is_some_and(|(t, s)| !t.is_empty() && !s.is_empty())
        && !mime_type.chars().any(char::is_control);
    if !valid {
        return Err(ApiError::Unprocessable(format!("mimeType {mime_type:?} is not a media type (type/subtype)")));
    }
    Ok(())
}

/// A resource with its content: `text`, or `blob` in base64.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ResourceWithContent {
    #[serde(flatten)]
    pub resource: Resource,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
}

impl ResourceWithContent {
    fn new(resource: Resource, content: Content) -> Self {
        match content {
            Content::Text(text) => Self { resource, text: Some(text), blob: None },
            Content::Blob(bytes) => Self { resource, text: None, blob: Some(STANDARD.encode(bytes)) },
        }
    }
}

impl AdminCollection for Resources {
    type Body = ResourceBody;
    const KEY_PARAM: &'static str = "uri";

    fn parse_key(raw: &str) -> Result<ResourceUri, ApiError> {
        // A value that cannot be a URI is invalid (422), not absent.
        Ok(ResourceUri::parse(raw)?)
    }

    fn new_item(state: &AppState, _path: &PathParams, body: ResourceBody) -> Result<NewResource, ApiError> {
        body.into_new(state.config.limits.max_resource_bytes, &state.config.limits.fields())
    }
}

collection::handler! {
    /// Create or replace a resource.
    put::<Resources>(ResourceBody -> Resource) in "admin.put_resource"
        at "/admin/v1/agents/{agent_id}/resources" as "putResource", tag "resources", params(("agent_id" = String, Path)),
        created "Created (without content)", replaced "Replaced (without content)",
        refused(413 "Content over the limit", 422 "Invalid values")
}

collection::handler! {
    /// List resources (without content), ordered by URI.
    list::<Resources>(Resource) in "admin.list_resources"
        at "/admin/v1/agents/{agent_id}/resources" as "listResources", tag "resources", described "A page of resources"
}

/// Read a resource with its content.
#[utoipa::path(get, path = "/admin/v1/agents/{agent_id}/resources/content", operation_id = "getResource", tag = "resources",
    params(("agent_id" = String, Path), ("uri" = String, Query)),
    security(("operator" = []), ("agentKey" = [])),
    responses((status = 200, description = "The resource with `text` or `blob`", body = ResourceWithContent),
               (status = 404, description = "No such resource", body = Problem, content_type = "application/problem+json"),
               (status = 422, description = "Not a resource URI", body = Problem, content_type = "application/problem+json")))]
#[tracing::instrument(name = "admin.get_resource", skip_all, fields(agent = %access.agent))]
pub async fn content(
    State(state): State<AppState>,
    access: RegistryAccess,
    raw: ItemKey<Resources>,
) -> Result<Json<ResourceWithContent>, ApiError> {
    let uri = Resources::parse_key(raw.as_str())?;
    let found = state.store.get_resource(&access.agent, uri.as_str()).await?;
    let (resource, content) = found.ok_or_else(|| missing::<Resources>(raw.as_str()))?;
    Ok(Json(ResourceWithContent::new(resource, content)))
}

collection::handler! {
    /// Delete a resource.
    delete::<Resources> in "admin.delete_resource" at "/admin/v1/agents/{agent_id}/resources" as "deleteResource",
        tag "resources", params(("agent_id" = String, Path), ("uri" = String, Query)),
        refused(404 "No such resource", 422 "Not a resource URI")
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;
    use crate::admin::extract::body_status;

    fn check(json: &str) -> Result<NewResource, StatusCode> {
        body_status(json, |body: ResourceBody| body.into_new(16, &crate::config::LimitsConfig::default().fields()))
    }

    #[test]
    fn content_is_text_or_blob() {
        let text = check(r#"{"uri": "x://a", "name": "a", "text": "hello"}"#).expect("valid");
        assert_eq!(text.content, Content::Text("hello".to_owned()));
        let blob = check(r#"{"uri": "x://a", "name": "a", "blob": "AAEC"}"#).expect("valid");
        assert_eq!(blob.content, Content::Blob(vec![0, 1, 2]));
        assert!(check(r#"{"uri": "x://a", "name": "a", "text": ""}"#).is_ok());
        let unprocessable = Err(StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(check(r#"{"uri": "x://a", "name": "a"}"#).map(drop), unprocessable);
        assert_eq!(check(r#"{"uri": "x://a", "name": "a", "text": "t", "blob": "AA=="}"#).map(drop), unprocessable);
        assert_eq!(check(r#"{"uri": "x://a", "name": "a", "blob": "AA"}"#).map(drop), unprocessable);
        assert_eq!(check(r#"{"uri": "x://a", "name": "a", "blob": "!!!!"}"#).map(drop), unprocessable);
    }

    #[test]
    fn values_are_checked() {
        let unprocessable = Err(StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(check(r#"{"uri": "relative", "name": "a", "text": ""}"#).map(drop), unprocessable);
        assert_eq!(check(r#"{"uri": "x://a", "name": "", "text": ""}"#).map(drop), unprocessable);
        assert_eq!(check(r#"{"uri": "x://a", "text": ""}"#).map(drop), unprocessable);
        assert_eq!(check(r#"{"uri": "x://a", "name": "a", "text": "", "size": 1}"#).map(drop), unprocessable);
        assert_eq!(check(r#"{"uri": "x://a", "name": "a", "text": "", "mimeType": "text"}"#).map(drop), unprocessable);
        assert_eq!(check(r#"{"uri": "x://a", "name": "a", "text": "", "_meta": 1}"#).map(drop), unprocessable);
        let bad_priority = r#"{"uri": "x://a", "name": "a", "text": "", "annotations": {"priority": 2}}"#;
        assert_eq!(check(bad_priority).map(drop), unprocessable);
        assert_eq!(check(r#"{"uri": "x://a", "name": "a", "text": 1}"#).map(drop), Err(StatusCode::BAD_REQUEST));
        let meta =
            r#"{"uri": "x://a", "name": "a", "text": "", "mimeType": "text/plain; charset=utf-8", "_meta": {"k": 1}}"#;
        assert!(check(meta).is_ok());
    }

    #[test]
    fn content_is_capped() {
        let big = r#"{"uri": "x://a", "name": "a", "text": "01234567890123456"}"#;
        assert_eq!(check(big).map(drop), Err(StatusCode::PAYLOAD_TOO_LARGE));
    }
}
