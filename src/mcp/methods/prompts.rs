//! `prompts/list` (never showing an argument's `completions`) and `prompts/get` (messages rendered with the
//! arguments in the sandboxed MiniJinja environment, off the async workers, within one output budget).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::resources::{List, McpCollection};
use super::{McpMethod, MetaShape, find_compiled, params, render_bounded};
use crate::domain::PromptName;
use crate::domain::content::template_sources;
use crate::domain::model::{Prompt, Role};
use crate::domain::prompt::{compile_messages, render_messages};
use crate::domain::render::Compiled;
use crate::mcp::dispatch::Context;
use crate::mcp::error::McpError;
use crate::mcp::types::{ContentBlock, GetPromptResult, McpPrompt, McpPromptArgument, McpPromptMessage, McpRole};
use crate::metrics::ConfiguredLimit;
use crate::registry::cache::Key;
use crate::registry::collection::Prompts;

/// `prompts/list`: prompts in name order.
pub type ListPrompts = List<Prompts>;

impl McpCollection for Prompts {
    type Listed = McpPrompt;

    fn listed(prompt: &Prompt) -> McpPrompt {
        mcp_prompt(prompt)
    }
}

/// A stored prompt as MCP lists it: the arguments without their admin-only `completions`.
fn mcp_prompt(prompt: &Prompt) -> McpPrompt {
    let arguments: Vec<McpPromptArgument> = prompt
        .arguments
        .iter()
        .map(|argument| {
            let mut listed = McpPromptArgument::new(argument.name.clone());
            listed.title = argument.title.clone();
            listed.description = argument.description.clone();
            listed.required = argument.required;
            listed
        })
        .collect();
    let arguments = (!arguments.is_empty()).then_some(arguments);
    let mut listed = McpPrompt::new(prompt.name.as_str(), prompt.description.clone(), arguments);
    listed.title = prompt.title.clone();
    listed
}

/// A stored prompt as the registry cache keeps it: with its messages' templates checked and compiled, so
/// that `prompts/get` only renders them.
pub(crate) struct CachedPrompt {
    pub prompt: Prompt,
    pub compiled: Compiled,
}

/// What a cached prompt is counted as, beyond its messages' JSON: the compiled environments' tables and
/// the compiled instructions, which take a multiple of the templates' sources.
fn compiled_bytes(prompt: &Prompt) -> usize {
    const ENVIRONMENTS: usize = 8 * 1024;
    let sources: usize = prompt.messages.iter().flat_map(|m| template_sources(&m.content)).map(str::len).sum();
    ENVIRONMENTS + 16 * sources
}

/// The stored prompt called `name`, through the cache; `None` when there is none (or the name is invalid).
pub(crate) async fn find_prompt(ctx: &Context<'_>, name: &str) -> Result<Option<Arc<CachedPrompt>>, McpError> {
    let Ok(parsed) = PromptName::parse(name) else {
        return Ok(None);
    };
    find_compiled::<Prompts, _, _, _>(ctx, Key::Prompt(name.into()), parsed, "a prompt", |prompt| {
        let bytes = serde_json::to_string(&prompt.messages).map_or(4096, |s| s.len() + 512) + compiled_bytes(&prompt);
        Some((bytes, move || {
            let compiled = compile_messages(&prompt.messages);
            CachedPrompt { prompt, compiled }
        }))
    })
    .await
}

/// The most arguments one `prompts/get` may pass.
pub const MAX_ARGUMENTS: usize = 64;
/// The largest value one argument may have, in bytes.
pub const MAX_ARGUMENT_BYTES: usize = 64 * 1024;
/// The most bytes all arguments may have together, names and values.
pub const MAX_ARGUMENTS_BYTES: usize = 256 * 1024;

/// A refusal by one of the limits on what a render is given or makes: -32602, counted as `template`.
fn over_limit(message: String) -> McpError {
    McpError::OverLimit { limit: ConfiguredLimit::Template, message }
}

/// `prompts/get`.
pub struct GetPrompt {
    name: String,
    arguments: BTreeMap<String, String>,
}

/// The params of `prompts/get` this server reads (the SDK's type would copy `_meta` out of them).
#[derive(serde::Deserialize)]
struct GetParams {
    #[serde(rename = "_meta", default)]
    _meta: Option<MetaShape>,
    name: String,
    #[serde(default)]
    arguments: Option<serde_json::Map<String, Value>>,
}

impl McpMethod for GetPrompt {
    type Output = GetPromptResult;

    fn parse(raw: Option<&Value>) -> Result<Self, McpError> {
        let parsed: GetParams = params(raw)?;
        let given = parsed.arguments.unwrap_or_default();
        if given.len() > MAX_ARGUMENTS {
            return Err(over_limit(format!("{} arguments given; at most {MAX_ARGUMENTS} are allowed", given.len())));
        }
        let mut arguments = BTreeMap::new();
        let mut total = 0;
        for (name, value) in given {
            let Value::String(value) = value else {
                return Err(McpError::InvalidParams(format!("argument {name:?} must be a string")));
            };
            if value.len() > MAX_ARGUMENT_BYTES {
                return Err(over_limit(format!(
                    "argument {name:?} is {} bytes; at most {MAX_ARGUMENT_BYTES} are allowed",
                    value.len()
                )));
            }
            total += name.len() + value.len();
            if total > MAX_ARGUMENTS_BYTES {
                return Err(over_limit(format!("the arguments are more than {MAX_ARGUMENTS_BYTES} bytes together")));
            }
            arguments.insert(name, value);
        }
        Ok(Self { name: parsed.name, arguments })
    }

    async fn apply(self, ctx: &Context<'_>) -> Result<GetPromptResult, McpError> {
        let cached = find_prompt(ctx, &self.name)
            .await?
            .ok_or_else(|| McpError::InvalidParams(format!("unknown prompt {:?}", self.name)))?;
        let prompt = &cached.prompt;
        if let Some(undeclared) = self.arguments.keys().find(|name| !prompt.arguments.iter().any(|a| &a.name == *name))
        {
            return Err(McpError::InvalidParams(format!(
                "argument {undeclared:?} is not declared by prompt {:?}",
                self.name
            )));
        }
        if let Some(missing) = prompt
            .arguments
            .iter()
            .find(|argument| argument.required == Some(true) && !self.arguments.contains_key(&argument.name))
        {
            return Err(McpError::InvalidParams(format!("missing required argument {:?}", missing.name)));
        }
        // Rendering is CPU work up to the fuel limit. Most prompts need little: they are rendered here with
        // the quick fuel, and only one that runs out of it is rendered again, with the full fuel, on the
        // blocking pool rather than on an async worker. Fuel only ever ends a render, so a quick render
        // that completes (or fails for another reason) is what the full one would give.
        let stored = Arc::clone(&cached);
        let arguments = self.arguments;
        let (rendered, budget) = render_bounded(ctx, prompt.name.as_str(), move |budget| {
            render_messages(&stored.prompt.messages, &stored.compiled, &arguments, budget)
        })
        .await?;
        let rendered = rendered.map_err(|message| {
            let message = message.to_string();
            if budget.is_spent() { over_limit(message) } else { McpError::InvalidParams(message) }
        })?;
        let mut messages = Vec::with_capacity(rendered.len());
        for message in rendered {
            let content: ContentBlock = serde_json::from_value(message.content).map_err(|error| {
                tracing::error!(prompt = %prompt.name, %error, "stored content block does not parse");
                McpError::Internal
            })?;
            let role = match message.role {
                Role::User => McpRole::User,
                Role::Assistant => McpRole::Assistant,
            };
            messages.push(McpPromptMessage::new(role, content));
        }
        let mut result = GetPromptResult::new(messages);
        result.description = prompt.description.clone();
        result.result_type = ctx.result_type();
        result.meta = ctx.result_meta();
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::model::PromptArgument;
    use crate::domain::time::Timestamp;

    #[test]
    fn listed_prompts_hide_completions() {
        let prompt = Prompt {
            name: PromptName::parse("research").expect("name"),
            title: Some("Research".into()),
            description: None,
            arguments: vec![PromptArgument {
                name: "topic".into(),
                title: None,
                description: None,
                required: Some(true),
                completions: Some(vec!["bees".into()]),
            }],
            messages: vec![],
            created_at: Timestamp::now(),
            updated_at: Timestamp::now(),
        };
        let listed = serde_json::to_value(mcp_prompt(&prompt)).expect("json");
        assert_eq!(
            listed,
            serde_json::json!({"name": "research", "title": "Research", "arguments": [{"name": "topic", "required": true}]})
        );
    }
}
