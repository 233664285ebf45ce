//! `/agents/{agent_id}/prompts`: upsert, list, read and delete an agent's prompts.
//!
//! Message texts (and the `uri`/`text` of `resource` and `resource_link` blocks) are MiniJinja
//! templates; a prompt whose templates do not compile is refused with 422.

use serde::Deserialize;

use super::collection::{self, AdminCollection, missing};
use super::extract::PathParams;
use super::page::Page;
use crate::domain::limits::{Field, FieldLimits};
use crate::domain::model::{NewPrompt, Prompt, PromptArgument, PromptMessage};
use crate::domain::prompt;
use crate::domain::{AgentId, PromptName};
use crate::error::{ApiError, Problem};
use crate::registry::collection::Prompts;
use crate::state::AppState;

/// A prompt to create or replace; the name is in the path.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PromptBody {
    pub title: Option<String>,
    pub description: Option<String>,
    #[serde(default)]
    pub arguments: Vec<PromptArgument>,
    #[schema(min_items = 1)]
    pub messages: Vec<PromptMessage>,
}

impl PromptBody {
    /// The validated prompt called `name`; 422 for invalid arguments or messages or a template that does not
    /// compile, 413 for a field over its limit.
    pub fn into_new(self, name: PromptName, limits: &FieldLimits) -> Result<NewPrompt, ApiError> {
        limits.text(Field::Title, "title", self.title.as_deref())?;
        limits.text(Field::Description, "description", self.description.as_deref())?;
        // Measured before the templates are compiled.
        prompt::check_sizes(limits, &self.arguments, &self.messages)?;
        prompt::validate(&self.arguments, &self.messages).map_err(ApiError::invalid)?;
        let Self { title, description, arguments, messages } = self;
        Ok(NewPrompt { name, title, description, arguments, messages })
    }
}

impl AdminCollection for Prompts {
    type Body = PromptBody;
    const KEY_PARAM: &'static str = "name";
    const IS_KEY_IN_PATH: bool = true;

    /// A name that cannot exist is a 404 on reads and deletes.
    fn parse_key(raw: &str) -> Result<PromptName, ApiError> {
        PromptName::parse(raw).map_err(|_| missing::<Self>(raw))
    }

    /// The name is in the path; one that is not a prompt name is invalid (422) here.
    fn new_item(state: &AppState, path: &PathParams, body: PromptBody) -> Result<NewPrompt, ApiError> {
        let name = PromptName::parse(path.get(Self::KEY_PARAM)?)?;
        body.into_new(name, &state.config.limits.fields())
    }

    fn location(agent: &AgentId, prompt: &Prompt) -> Option<String> {
        Some(format!("/admin/v1/agents/{agent}/prompts/{}", prompt.name))
    }
}

collection::handler! {
    /// Create or replace a prompt.
    put::<Prompts>(PromptBody -> Prompt) in "admin.put_prompt" at "/admin/v1/agents/{agent_id}/prompts/{name}"
        as "putPrompt", tag "prompts",
        params(("agent_id" = String, Path), ("name" = String, Path, description = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")),
        created "Created", replaced "Replaced",
        refused(422 "Invalid name, arguments or messages, or a template that does not compile")
}

collection::handler! {
    /// List prompts, ordered by name.
    list::<Prompts>(Prompt) in "admin.list_prompts"
        at "/admin/v1/agents/{agent_id}/prompts" as "listPrompts", tag "prompts", described "A page of prompts"
}

collection::handler! {
    /// Read a prompt.
    get::<Prompts>(Prompt) in "admin.get_prompt" at "/admin/v1/agents/{agent_id}/prompts/{name}" as "getPrompt",
        tag "prompts", params(("agent_id" = String, Path), ("name" = String, Path)), found "The prompt",
        refused(404 "No such prompt")
}

collection::handler! {
    /// Delete a prompt.
    delete::<Prompts> in "admin.delete_prompt" at "/admin/v1/agents/{agent_id}/prompts/{name}" as "deletePrompt",
        tag "prompts", params(("agent_id" = String, Path), ("name" = String, Path)), refused(404 "No such prompt")
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;
    use crate::admin::extract::body_status;

    fn check(json: &str) -> Result<NewPrompt, StatusCode> {
        let name = PromptName::parse("p").expect("valid name");
        body_status(json, |body: PromptBody| body.into_new(name, &crate::config::LimitsConfig::default().fields()))
    }

    #[test]
    fn prompts() {
        let research = r#"{"arguments": [{"name": "topic", "required": true}, {"name": "depth"}],
            "messages": [{"role": "user", "content": {"type": "text",
            "text": "Research {{ topic }}.{% if depth == 'deep' %} More.{% endif %}"}}]}"#;
        assert!(check(research).is_ok());
        let unprocessable = Err(StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(check(r#"{"messages": []}"#).map(drop), unprocessable);
        assert_eq!(check(r#"{}"#).map(drop), unprocessable);
        let system = r#"{"messages": [{"role": "system", "content": {"type": "text", "text": "x"}}]}"#;
        assert_eq!(check(system).map(drop), unprocessable);
        let broken = r#"{"messages": [{"role": "user", "content": {"type": "text", "text": "{% for %}"}}]}"#;
        assert_eq!(check(broken).map(drop), unprocessable);
        let twice = r#"{"arguments": [{"name": "a"}, {"name": "a"}],
            "messages": [{"role": "user", "content": {"type": "text", "text": "x"}}]}"#;
        assert_eq!(check(twice).map(drop), unprocessable);
        let unknown = r#"{"name": "p", "messages": [{"role": "user", "content": {"type": "text", "text": "x"}}]}"#;
        assert_eq!(check(unknown).map(drop), unprocessable);
        assert_eq!(check(r#"{"messages": "hi"}"#).map(drop), Err(StatusCode::BAD_REQUEST));
    }
}
