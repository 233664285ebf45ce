//! `/agents/{agent_id}/resource-templates`: upsert, list and delete an agent's resource templates.
//!
//! `uriTemplate` may be any RFC 6570 template. A template with a `text` is matched against URIs on
//! `resources/read`, so it must stay within levels 1–3 without explode or prefix modifiers, and its
//! `text` must compile as a MiniJinja template.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;

use super::access::RegistryAccess;
use super::collection::{self, AdminCollection, ItemKey};
use super::extract::{JsonBody, PathParams};
use super::page::{Page, PageQuery};
use super::resources::check_mime_type;
use crate::domain::UriTemplate;
use crate::domain::content::validate_annotations;
use crate::domain::limits::{Field, FieldLimits};
use crate::domain::model::{NewResourceTemplate, ResourceTemplate};
use crate::domain::render;
use crate::error::{ApiError, Problem};
use crate::registry::collection::Templates;
use crate::state::AppState;

/// A resource template to create or replace, keyed by `uriTemplate`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TemplateBody {
    /// RFC 6570.
    #[schema(example = "test://template/{id}/data", min_length = 1)]
    pub uri_template: String,
    /// Not blank.
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    /// A media type, `type/subtype` with optional parameters.
    pub mime_type: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub annotations: Option<Value>,
    /// A MiniJinja template rendered with the URI's variables when a matching URI is read.
    pub text: Option<String>,
}

impl TemplateBody {
    /// The validated template; 422 for an invalid value or a text that does not compile, 413 for a field over
    /// its limit.
    pub fn into_new(self, limits: &FieldLimits) -> Result<NewResourceTemplate, ApiError> {
        limits.text(Field::UriTemplate, "uriTemplate", Some(&self.uri_template))?;
        limits.text(Field::Name, "name", Some(&self.name))?;
        limits.text(Field::Title, "title", self.title.as_deref())?;
        limits.text(Field::Description, "description", self.description.as_deref())?;
        limits.text(Field::MimeType, "mimeType", self.mime_type.as_deref())?;
        limits.json(Field::Annotations, "annotations", self.annotations.as_ref())?;
        // Measured before it is compiled: compiling costs time in proportion to the source.
        limits.text(Field::TemplateText, "text", self.text.as_deref())?;
        let template = UriTemplate::parse(&self.uri_template)?;
        if self.name.trim().is_empty() {
            return Err(ApiError::Unprocessable("name must not be empty".to_owned()));
        }
        if let Some(mime_type) = &self.mime_type {
            check_mime_type(mime_type)?;
        }
        self.annotations.as_ref().map(validate_annotations).transpose().map_err(ApiError::Unprocessable)?;
        if let Some(text) = &self.text {
            if !template.is_matchable() {
                return Err(ApiError::Unprocessable(
                    "a template with text may only use RFC 6570 levels 1-3, without explode (*) or prefix (:N) \
                     modifiers"
                        .to_owned(),
                ));
            }
            render::compile_check(text)
                .map_err(|error| ApiError::Unprocessable(format!("text does not compile: {error}")))?;
        }
        Ok(NewResourceTemplate {
            uri_template: self.uri_template,
            name: self.name,
            title: self.title,
            description: self.description,
            mime_type: self.mime_type,
            annotations: self.annotations,
            text: self.text,
        })
    }
}

impl AdminCollection for Templates {
    type Body = TemplateBody;
    const KEY_PARAM: &'static str = "uriTemplate";

    fn parse_key(raw: &str) -> Result<String, ApiError> {
        Ok(raw.to_owned())
    }

    fn new_item(state: &AppState, _path: &PathParams, body: TemplateBody) -> Result<NewResourceTemplate, ApiError> {
        body.into_new(&state.config.limits.fields())
    }
}

/// Create or replace a resource template.
#[utoipa::path(put, path = "/admin/v1/agents/{agent_id}/resource-templates", operation_id = "putResourceTemplate", tag = "resource templates",
    request_body = TemplateBody,
    params(("agent_id" = String, Path)),
    security(("operator" = []), ("agentKey" = [])),
    responses((status = 201, description = "Created", body = ResourceTemplate),
               (status = 200, description = "Replaced", body = ResourceTemplate),
               (status = 422, description = "Invalid template or text that does not compile", body = Problem, content_type = "application/problem+json")))]
#[tracing::instrument(name = "admin.put_template", skip_all, fields(agent = %access.agent))]
pub async fn put(
    state: State<AppState>,
    access: RegistryAccess,
    path: PathParams,
    body: JsonBody<TemplateBody>,
) -> Result<Response, ApiError> {
    collection::put::<Templates>(state, access, path, body).await
}

/// List resource templates, ordered by `uriTemplate`.
#[utoipa::path(get, path = "/admin/v1/agents/{agent_id}/resource-templates", operation_id = "listResourceTemplates", tag = "resource templates",
    params(("agent_id" = String, Path),
           ("limit" = Option<u32>, Query, description = "1 to 1000, default 100"),
           ("cursor" = Option<String>, Query, description = "`nextCursor` of the page before")),
    security(("operator" = []), ("agentKey" = [])),
    responses((status = 200, description = "A page of resource templates", body = Page<ResourceTemplate>)))]
#[tracing::instrument(name = "admin.list_templates", skip_all, fields(agent = %access.agent))]
pub async fn list(
    state: State<AppState>,
    access: RegistryAccess,
    page: PageQuery,
) -> Result<Json<Page<ResourceTemplate>>, ApiError> {
    collection::list::<Templates>(state, access, page).await
}

/// Delete a resource template.
#[utoipa::path(delete, path = "/admin/v1/agents/{agent_id}/resource-templates", operation_id = "deleteResourceTemplate", tag = "resource templates",
    params(("agent_id" = String, Path), ("uriTemplate" = String, Query)),
    security(("operator" = []), ("agentKey" = [])),
    responses((status = 204, description = "Deleted"),
               (status = 404, description = "No such template", body = Problem, content_type = "application/problem+json")))]
#[tracing::instrument(name = "admin.delete_template", skip_all, fields(agent = %access.agent))]
pub async fn delete(
    state: State<AppState>,
    access: RegistryAccess,
    raw: ItemKey<Templates>,
) -> Result<StatusCode, ApiError> {
    collection::delete::<Templates>(state, access, raw).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::extract::{from_value, parse_json};

    fn check(json: &str) -> Result<NewResourceTemplate, StatusCode> {
        parse_json(json.as_bytes())
            .and_then(|v| from_value::<TemplateBody>(v, ""))
            .and_then(|body| body.into_new(&crate::config::LimitsConfig::default().fields()))
            .map_err(|e| e.status())
    }

    #[test]
    fn templates() {
        assert!(check(r#"{"uriTemplate": "test://template/{id}/data", "name": "t", "text": "id={{ id }}"}"#).is_ok());
        assert!(check(r#"{"uriTemplate": "test://items/{name}", "name": "item"}"#).is_ok());
        assert!(check(r#"{"uriTemplate": "x://{/path*}", "name": "level 4 without text"}"#).is_ok());
        let unprocessable = Err(StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(check(r#"{"uriTemplate": "x://{/path*}", "name": "t", "text": "x"}"#).map(drop), unprocessable);
        assert_eq!(check(r#"{"uriTemplate": "x://{id:3}", "name": "t", "text": "x"}"#).map(drop), unprocessable);
        assert_eq!(check(r#"{"uriTemplate": "x://{id", "name": "t"}"#).map(drop), unprocessable);
        assert_eq!(check(r#"{"uriTemplate": "x://{id}", "name": "t", "text": "{{ id"}"#).map(drop), unprocessable);
        assert_eq!(check(r#"{"uriTemplate": "x://{id}", "name": ""}"#).map(drop), unprocessable);
        assert_eq!(check(r#"{"uriTemplate": "x://{id}", "name": "t", "blob": "AA=="}"#).map(drop), unprocessable);
    }
}
