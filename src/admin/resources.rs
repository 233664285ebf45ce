//! `/agents/{agent_id}/resources`: upsert, list, read with content, and delete an agent's resources.
//!
//! Content is `text` (UTF-8) or `blob` (standard base64 with padding), never both. Content larger than
//! `limits.max_resource_bytes` (text bytes or decoded blob bytes) is refused with 413, like an oversized
//! body. Lists never carry content; `GET .../resources/content?uri=` does.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::access::RegistryAccess;
use super::extract::{JsonBody, QueryParams};
use super::page::{Page, PageQuery};
use crate::domain::content::{validate_annotations, validate_base64, validate_meta};
use crate::domain::limits::{Field, FieldLimits};
use crate::domain::model::{Actor, Content, NewResource, Resource};
use crate::domain::{AgentId, ResourceUri};
use crate::error::{ApiError, Problem};
use crate::metrics::ConfiguredLimit;
use crate::registry::collection::{Collection, Resources};
use crate::registry::cursor::ListKind;
use crate::state::AppState;
use crate::store::{StoreError, Upserted};

/// A resource to create or replace, keyed by `uri`, with exactly one of `text` or `blob`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceBody {
    /// An absolute URI (RFC 3986: a scheme, no fragment), at most 2048 bytes.
    #[schema(example = "test://static-text", max_length = 2048)]
    pub uri: String,
    /// Not blank.
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    /// A media type, `type/subtype` with optional parameters.
    pub mime_type: Option<String>,
    /// MCP annotations: `audience`, `priority`, `lastModified`.
    #[schema(value_type = Option<Object>)]
    pub annotations: Option<Value>,
    #[serde(rename = "_meta")]
    #[schema(value_type = Option<Object>)]
    pub meta: Option<Value>,
    /// UTF-8 content.
    pub text: Option<String>,
    /// Binary content, standard base64 with padding.
    pub blob: Option<String>,
}

impl ResourceBody {
    /// The validated resource; 422 for an invalid value, 413 for content over `max_bytes` or a field over
    /// its limit.
    pub fn into_new(self, max_bytes: usize, limits: &FieldLimits) -> Result<NewResource, ApiError> {
        let invalid = |message: &dyn std::fmt::Display| ApiError::Unprocessable(message.to_string());
        limits.text(Field::Name, "name", Some(&self.name))?;
        limits.text(Field::Title, "title", self.title.as_deref())?;
        limits.text(Field::Description, "description", self.description.as_deref())?;
        limits.text(Field::MimeType, "mimeType", self.mime_type.as_deref())?;
        limits.json(Field::Annotations, "annotations", self.annotations.as_ref())?;
        limits.json(Field::Meta, "_meta", self.meta.as_ref())?;
        let uri = ResourceUri::parse(&self.uri)?;
        if self.name.trim().is_empty() {
            return Err(invalid(&"name must not be empty"));
        }
        if let Some(mime_type) = &self.mime_type {
            check_mime_type(mime_type)?;
        }
        self.annotations.as_ref().map(validate_annotations).transpose().map_err(|error| invalid(&error))?;
        self.meta.as_ref().map(validate_meta).transpose().map_err(|error| invalid(&error))?;
        let content = match (self.text, self.blob) {
            (Some(text), None) => Content::Text(text),
            (None, Some(blob)) => Content::Blob(validate_base64("blob", &blob).map_err(|error| invalid(&error))?),
            (Some(_), Some(_)) => return Err(invalid(&"give either text or blob, not both")),
            (None, None) => return Err(invalid(&"text or blob is required")),
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

/// 201 when created, 200 when replaced.
pub fn upsert_status(created: bool) -> StatusCode {
    if created { StatusCode::CREATED } else { StatusCode::OK }
}

/// Create or replace a resource.
#[utoipa::path(put, path = "/admin/v1/agents/{agent_id}/resources", operation_id = "putResource", tag = "resources", request_body = ResourceBody,
    params(("agent_id" = String, Path)),
    security(("operator" = []), ("agentKey" = [])),
    responses((status = 201, description = "Created (without content)", body = Resource),
               (status = 200, description = "Replaced (without content)", body = Resource),
               (status = 413, description = "Content over the limit", body = Problem, content_type = "application/problem+json"),
               (status = 422, description = "Invalid values", body = Problem, content_type = "application/problem+json")))]
#[tracing::instrument(name = "admin.put_resource", skip_all, fields(agent = %access.agent))]
pub async fn put(
    State(state): State<AppState>,
    access: RegistryAccess,
    JsonBody(body): JsonBody<ResourceBody>,
) -> Result<(StatusCode, Json<Resource>), ApiError> {
    let upserted = put_resource(&state, &access.agent, body, &access.actor).await?;
    Ok((upsert_status(upserted.created), Json(upserted.item)))
}

/// List resources (without content), ordered by URI.
#[utoipa::path(get, path = "/admin/v1/agents/{agent_id}/resources", operation_id = "listResources", tag = "resources",
    params(("agent_id" = String, Path),
           ("limit" = Option<u32>, Query, description = "1 to 1000, default 100"),
           ("cursor" = Option<String>, Query, description = "`nextCursor` of the page before")),
    security(("operator" = []), ("agentKey" = [])),
    responses((status = 200, description = "A page of resources", body = Page<Resource>)))]
#[tracing::instrument(name = "admin.list_resources", skip_all, fields(agent = %access.agent))]
pub async fn list(
    State(state): State<AppState>,
    access: RegistryAccess,
    page: PageQuery,
) -> Result<Json<Page<Resource>>, ApiError> {
    let agent = access.agent.as_str();
    let after = page.after(&state.cursors, ListKind::Resources, agent)?;
    let rows = Resources::store(&*state.store).list(&access.agent, after.as_deref(), page.fetch_limit()).await?;
    Ok(Json(Page::from_rows(rows, &page, &state, ListKind::Resources, agent, |r| r.uri.to_string())))
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
    query: QueryParams,
) -> Result<Json<ResourceWithContent>, ApiError> {
    let uri = query.require("uri")?;
    let missing = || ApiError::NotFound(format!("resource {uri:?} does not exist"));
    // A value that cannot be a URI is invalid (422), not absent.
    let uri = ResourceUri::parse(uri)?;
    let (resource, content) = state.store.get_resource(&access.agent, uri.as_str()).await?.ok_or_else(missing)?;
    Ok(Json(ResourceWithContent::new(resource, content)))
}

/// Delete a resource.
#[utoipa::path(delete, path = "/admin/v1/agents/{agent_id}/resources", operation_id = "deleteResource", tag = "resources",
    params(("agent_id" = String, Path), ("uri" = String, Query)),
    security(("operator" = []), ("agentKey" = [])),
    responses((status = 204, description = "Deleted"),
               (status = 404, description = "No such resource", body = Problem, content_type = "application/problem+json"),
               (status = 422, description = "Not a resource URI", body = Problem, content_type = "application/problem+json")))]
#[tracing::instrument(name = "admin.delete_resource", skip_all, fields(agent = %access.agent))]
pub async fn delete(
    State(state): State<AppState>,
    access: RegistryAccess,
    query: QueryParams,
) -> Result<StatusCode, ApiError> {
    delete_resource(&state, &access.agent, query.require("uri")?, &access.actor).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Validates a resource and commits it with its event and audit rows: `PUT .../resources` and the console.
pub async fn put_resource(
    state: &AppState,
    agent: &AgentId,
    body: ResourceBody,
    actor: &Actor,
) -> Result<Upserted<Resource>, ApiError> {
    let resource = body.into_new(state.config.limits.max_resource_bytes, &state.config.limits.fields())?;
    Resources::store(&*state.store).put(agent, &resource, actor).await.map_err(agent_gone)
}

/// Deletes a resource: `DELETE .../resources?uri=` and the console.
pub async fn delete_resource(state: &AppState, agent: &AgentId, uri: &str, actor: &Actor) -> Result<(), ApiError> {
    let missing = || ApiError::NotFound(format!("resource {uri:?} does not exist"));
    // A value that cannot be a URI is invalid (422), not absent.
    let uri = ResourceUri::parse(uri)?;
    Resources::store(&*state.store).delete(agent, &uri, actor).await.map_err(|error| match error {
        StoreError::NotFound => missing(),
        other => other.into(),
    })
}

/// A `NotFound` from an upsert means the agent went away after the access check.
pub fn agent_gone(error: StoreError) -> ApiError {
    match error {
        StoreError::NotFound => ApiError::NotFound("the agent does not exist".to_owned()),
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::extract::{from_value, parse_json};

    fn check(json: &str) -> Result<NewResource, StatusCode> {
        parse_json(json.as_bytes())
            .and_then(|v| from_value::<ResourceBody>(v, ""))
            .and_then(|body| body.into_new(16, &crate::config::LimitsConfig::default().fields()))
            .map_err(|e| e.status())
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
