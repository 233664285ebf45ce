//! `/agents/{agent_id}/resource-templates`: upsert, list and delete an agent's resource templates.
//!
//! `uriTemplate` may be any RFC 6570 template. A template with a `text` is matched against URIs on
//! `resources/read`, so it must stay within levels 1–3 without explode or prefix modifiers, and its
//! `text` must compile as a MiniJinja template.

use serde::Deserialize;
use serde_json::Value;

use super::collection::{self, AdminCollection};
use super::extract::PathParams;
use super::page::Page;
use crate::domain::UriTemplate;
use crate::domain::limits::{Field, FieldLimits};
use crate::domain::model::{NewResourceTemplate, ResourceTemplate};
use crate::domain::render;
use crate::error::{ApiError, Problem};
use crate::registry::collection::Templates;
use crate::state::AppState;

collection::described_body! {
    /// A resource template to create or replace, keyed by `uriTemplate`.
    #[derive(Debug, Deserialize, utoipa::ToSchema)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    pub struct TemplateBody {
        /// RFC 6570.
        #[schema(example = "test://template/{id}/data", min_length = 1)]
        pub uri_template: String,
        pub annotations: Option<Value>,
        /// A MiniJinja template rendered with the URI's variables when a matching URI is read.
        pub text: Option<String>,
    }
}

impl TemplateBody {
    /// The validated template; 422 for an invalid value or a text that does not compile, 413 for a field over
    /// its limit.
    pub fn into_new(self, limits: &FieldLimits) -> Result<NewResourceTemplate, ApiError> {
        limits.text(Field::UriTemplate, "uriTemplate", Some(&self.uri_template))?;
        self.limit_described(limits)?;
        // Measured before it is compiled: compiling costs time in proportion to the source.
        limits.text(Field::TemplateText, "text", self.text.as_deref())?;
        let template = UriTemplate::parse(&self.uri_template)?;
        self.check_described()?;
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
        let Self { uri_template, name, title, description, mime_type, annotations, text } = self;
        Ok(NewResourceTemplate { uri_template, name, title, description, mime_type, annotations, text })
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

collection::handler! {
    /// Create or replace a resource template.
    put::<Templates>(TemplateBody -> ResourceTemplate) in "admin.put_template"
        at "/admin/v1/agents/{agent_id}/resource-templates" as "putResourceTemplate", tag "resource templates",
        params(("agent_id" = String, Path)), created "Created", replaced "Replaced",
        refused(422 "Invalid template or text that does not compile")
}

collection::handler! {
    /// List resource templates, ordered by `uriTemplate`.
    list::<Templates>(ResourceTemplate) in "admin.list_templates" at "/admin/v1/agents/{agent_id}/resource-templates"
        as "listResourceTemplates", tag "resource templates", described "A page of resource templates"
}

collection::handler! {
    /// Delete a resource template.
    delete::<Templates> in "admin.delete_template" at "/admin/v1/agents/{agent_id}/resource-templates"
        as "deleteResourceTemplate", tag "resource templates",
        params(("agent_id" = String, Path), ("uriTemplate" = String, Query)), refused(404 "No such template")
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;
    use crate::admin::extract::body_status;

    fn check(json: &str) -> Result<NewResourceTemplate, StatusCode> {
        body_status(json, |body: TemplateBody| body.into_new(&crate::config::LimitsConfig::default().fields()))
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
