//! `prompts/list` (never showing an argument's `completions`) and `prompts/get` (messages rendered with the
//! arguments in the sandboxed MiniJinja environment, off the async workers, within one output budget; or,
//! for a prompt of plain templates, written from its cached outline with the arguments in their places).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::Value;

use super::resources::{List, McpCollection};
use super::{Answer, IntoAnswer, Items, McpMethod, MetaShape, find_compiled, params, render_bounded};
use crate::domain::content::{self, template_sources};
use crate::domain::model::{Prompt, PromptMessage, Role};
use crate::domain::prompt::{compile_messages, render_messages};
use crate::domain::render::{BUDGET_BYTES, Compiled, Part};
use crate::domain::{PromptName, ResourceUri};
use crate::mcp::dispatch::Context;
use crate::mcp::error::McpError;
use crate::mcp::types::{
    ContentBlock, GetPromptResult, McpPrompt, McpPromptArgument, McpPromptMessage, McpRole, Outline,
};
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
/// that `prompts/get` only renders them, and, when every template is plain, its messages' JSON with a place
/// for each argument.
pub(crate) struct CachedPrompt {
    pub prompt: Prompt,
    pub compiled: Compiled,
    pub outline: Option<MessagesOutline>,
}

impl CachedPrompt {
    fn new(prompt: Prompt) -> Self {
        let compiled = compile_messages(&prompt.messages);
        let outline = MessagesOutline::of(&prompt.messages, &compiled);
        Self { prompt, compiled, outline }
    }
}

/// The messages of a prompt whose every templated field is plain (text and `{{ name }}` only, a URI without
/// any argument), as the JSON array `prompts/get` answers with, and the places in it where each argument's
/// value goes: a call writes the JSON with its arguments' values, escaped, in those places. That is the
/// array rendering each message's fields, taking the block as the SDK's `ContentBlock` and serialising the
/// messages gives (a JSON string's escaping is character by character, so escaping a rendered field is
/// escaping its parts one after the other), without those steps' copies of every block.
pub(crate) struct MessagesOutline {
    /// The messages' JSON without the arguments' values.
    json: Box<str>,
    /// Where each value goes in `json`, in order, and whose it is (an index into `names`).
    places: Vec<(u32, u16)>,
    /// The arguments' names, each once.
    names: Vec<Box<str>>,
    /// The bytes of the templates' text, which every render makes.
    text_len: usize,
}

/// What stands for an argument in the messages the outline is cut from: `\0`, the place's index, `\0`.
/// A template with a `\0` of its own gets no outline, nor does a block with a `\0` in any other field (the
/// marks found are then more than the places).
const MARK: char = '\0';
/// The mark as serialised JSON writes it.
const ESCAPED_MARK: &str = "\\u0000";

impl MessagesOutline {
    /// The outline of `messages`, if each of their templated fields is plain in `compiled`, and each URI is
    /// fixed and valid (a rendered URI is checked again; one that does not depend on the arguments is
    /// checked here once).
    fn of(messages: &[PromptMessage], compiled: &Compiled) -> Option<Self> {
        let mut names: Vec<Box<str>> = Vec::new();
        let mut index_of: HashMap<Box<str>, u16> = HashMap::new();
        // Whose each place is, in order.
        let mut places: Vec<u16> = Vec::new();
        let mut text_len = 0;
        let mut marked = Vec::with_capacity(messages.len());
        for message in messages {
            let block = content::with_templated(&message.content, |source, is_uri| {
                let parts = compiled.plain_parts(source).ok_or(())?;
                let mut field = String::with_capacity(source.len());
                for part in parts {
                    match part {
                        Part::Text(text) if !text.contains(MARK) => {
                            text_len += text.len();
                            field.push_str(text);
                        }
                        Part::Argument(name) if !is_uri => {
                            let index = match index_of.get(name) {
                                Some(index) => *index,
                                None => {
                                    let index = u16::try_from(names.len()).map_err(drop)?;
                                    names.push(name.clone());
                                    index_of.insert(name.clone(), index);
                                    index
                                }
                            };
                            field.push(MARK);
                            field.push_str(itoa::Buffer::new().format(places.len()));
                            field.push(MARK);
                            places.push(index);
                        }
                        _ => return Err(()),
                    }
                }
                if is_uri && ResourceUri::parse(&field).is_err() {
                    return Err(());
                }
                Ok(field)
            })
            .ok()?;
            let content: ContentBlock = serde_json::from_value(block).ok()?;
            marked.push(McpPromptMessage::new(mcp_role(message.role), content));
        }
        let marked = serde_json::to_string(&marked).ok()?;
        let (json, places) = Self::cut(&marked, &places)?;
        Some(Self { json: json.into(), places, names, text_len })
    }

    /// `marked` without its marks, which must be those of `places` in their order, and where each was.
    fn cut(marked: &str, places: &[u16]) -> Option<(String, Vec<(u32, u16)>)> {
        // The marks are found as JSON escapes, escape by escape: `\\u0000` is a backslash and text, not a mark.
        let bytes = marked.as_bytes();
        let mut marks = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            if bytes[at] == b'\\' {
                if marked[at..].starts_with(ESCAPED_MARK) {
                    marks.push(at);
                }
                at += 2;
            } else {
                at += 1;
            }
        }
        if marks.len() != 2 * places.len() {
            return None;
        }
        let mut json = String::with_capacity(marked.len());
        let mut cut = Vec::with_capacity(places.len());
        let mut from = 0;
        for (index, (whose, pair)) in places.iter().zip(marks.chunks_exact(2)).enumerate() {
            let (open, close) = (pair[0], pair[1]);
            if marked[open + ESCAPED_MARK.len()..close] != *itoa::Buffer::new().format(index) {
                return None;
            }
            json.push_str(&marked[from..open]);
            cut.push((u32::try_from(json.len()).ok()?, *whose));
            from = close + ESCAPED_MARK.len();
        }
        json.push_str(&marked[from..]);
        Some((json, cut))
    }

    /// The messages' JSON array with `args` in their places; `None` when the rendered fields would be more
    /// than a render's budget allows (a render then reports it).
    fn write(&self, args: &BTreeMap<String, String>) -> Option<Vec<u8>> {
        let values: Vec<&str> = self.names.iter().map(|name| args.get(&**name).map_or("", String::as_str)).collect();
        let mut given = 0;
        for (_, whose) in &self.places {
            given += values.get(usize::from(*whose))?.len();
        }
        if self.text_len + given > BUDGET_BYTES {
            return None;
        }
        let json = self.json.as_bytes();
        let mut out = Vec::with_capacity(json.len() + given + given / 8);
        let mut quoted = Vec::new();
        let mut from = 0;
        for (at, whose) in &self.places {
            let at = *at as usize;
            out.extend_from_slice(json.get(from..at)?);
            // The value as a JSON string, without its quotes.
            quoted.clear();
            serde_json::to_writer(&mut quoted, values.get(usize::from(*whose))?).ok()?;
            out.extend_from_slice(quoted.get(1..quoted.len().saturating_sub(1))?);
            from = at;
        }
        out.extend_from_slice(json.get(from..)?);
        Some(out)
    }
}

fn mcp_role(role: Role) -> McpRole {
    match role {
        Role::User => McpRole::User,
        Role::Assistant => McpRole::Assistant,
    }
}

/// What a cached prompt is counted as, beyond its messages' JSON as stored: the compiled environments' tables
/// and the compiled instructions, which take a multiple of the templates' sources and more for each tag (a
/// template dense with `{{ a }}` compiles to about 220 bytes a tag); and the outline, about as long as the
/// messages' JSON, with 8 bytes for each place an argument goes.
fn derived_bytes(prompt: &Prompt, messages_json: usize) -> usize {
    const ENVIRONMENTS: usize = 8 * 1024;
    let sources = prompt.messages.iter().flat_map(|m| template_sources(&m.content));
    let (bytes, places, tags) = sources.fold((0, 0, 0), |(bytes, places, tags), source| {
        let places_here = source.matches("{{").count();
        (bytes + source.len(), places + places_here, tags + places_here + source.matches("{%").count())
    });
    ENVIRONMENTS + 16 * bytes + 256 * tags + messages_json + 8 * places
}

/// The stored prompt called `name`, through the cache; `None` when there is none (or the name is invalid).
pub(crate) async fn find_prompt(ctx: &Context<'_>, name: &str) -> Result<Option<Arc<CachedPrompt>>, McpError> {
    let Ok(parsed) = PromptName::parse(name) else {
        return Ok(None);
    };
    find_compiled::<Prompts, _, _, _>(ctx, Key::Prompt(name.into()), parsed, "a prompt", |prompt| {
        let messages_json = serde_json::to_string(&prompt.messages).map_or(4096, |s| s.len() + 512);
        let bytes = messages_json + derived_bytes(&prompt, messages_json);
        Some((bytes, move || CachedPrompt::new(prompt)))
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
    type Output = Answer;

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

    async fn apply(self, ctx: &Context<'_>) -> Result<Answer, McpError> {
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
        let result = |messages| {
            let mut result = GetPromptResult::new(messages);
            result.description = prompt.description.clone();
            result.result_type = ctx.result_type();
            result.meta = ctx.result_meta();
            result
        };
        let serialised = |error: serde_json::Error| {
            tracing::error!(prompt = %prompt.name, %error, "could not serialise a prompt's result");
            McpError::Internal
        };
        // Plain templates: the cached messages with the arguments written in (see `MessagesOutline`).
        if let Some(outline) = &cached.outline
            && let Some(messages) = outline.write(&self.arguments)
        {
            let whole = serde_json::to_string(&result(Vec::new())).map_err(serialised)?;
            let outline = Outline::cut(whole, "\"messages\":", "[]").map_err(serialised)?;
            return Ok(Answer::Around { outline, items: Items::Written(messages) });
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
            messages.push(McpPromptMessage::new(mcp_role(message.role), content));
        }
        result(messages).into_answer().map_err(serialised)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::model::PromptArgument;
    use crate::domain::render::Budget;
    use crate::domain::time::Timestamp;

    fn messages(blocks: &[(Role, Value)]) -> Vec<PromptMessage> {
        blocks.iter().map(|(role, content)| PromptMessage { role: *role, content: content.clone() }).collect()
    }

    /// The messages' JSON as a render gives it: each block rendered, taken as a `ContentBlock`, serialised.
    fn rendered(messages: &[PromptMessage], compiled: &Compiled, args: &BTreeMap<String, String>) -> String {
        let rendered = render_messages(messages, compiled, args, &mut Budget::quick()).expect("renders");
        let messages: Vec<McpPromptMessage> = rendered
            .into_iter()
            .map(|message| {
                let content = serde_json::from_value(message.content).expect("a content block");
                McpPromptMessage::new(mcp_role(message.role), content)
            })
            .collect();
        serde_json::to_string(&messages).expect("json")
    }

    fn args(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(name, value)| ((*name).to_owned(), (*value).to_owned())).collect()
    }

    #[test]
    fn an_outline_writes_what_a_render_gives() {
        let prompts = [
            messages(&[(Role::User, json!({"type": "text", "text": "Research {{ topic }} in {{ depth }} depth."}))]),
            messages(&[
                (Role::User, json!({"type": "text", "text": "say \"{{a}}\" \\u0000 {{ b }}\n\t\\ é 😀 {{ a }}"})),
                (Role::Assistant, json!({"type": "text", "text": "{{ b }}", "annotations": {"priority": 0.5}})),
                (Role::User, json!({"type": "image", "data": "aGk=", "mimeType": "image/png"})),
                (
                    Role::User,
                    json!({"type": "resource", "resource":
                        {"uri": "file:///notes/a.txt", "mimeType": "text/plain", "text": "Notes on {{ a }}"}}),
                ),
                (Role::Assistant, json!({"type": "resource_link", "uri": "file:///notes/b.txt", "name": "b"})),
                (Role::User, json!({"type": "text", "text": "no arguments at all"})),
            ]),
        ];
        let calls = [
            args(&[("topic", "bees"), ("depth", "deep")]),
            args(&[("topic", "quantum \"computing\"\n\\ é 😀 \u{1} \u{0} </script>")]),
            args(&[("a", "\u{0}0\u{0}"), ("b", "\\u0000")]),
            args(&[("a", "x")]),
            args(&[]),
        ];
        for messages in &prompts {
            let compiled = compile_messages(messages);
            let outline = MessagesOutline::of(messages, &compiled).expect("plain templates have an outline");
            for call in &calls {
                let written = String::from_utf8(outline.write(call).expect("within the budget")).expect("UTF-8");
                assert_eq!(written, rendered(messages, &compiled, call), "{call:?}");
                let parsed: Value = serde_json::from_str(&written).expect("the outline writes JSON");
                assert!(parsed.is_array());
            }
        }
    }

    /// The result's outline is cut where its messages go, whatever the description holds, and the written
    /// messages go in there: the whole is the result the render path serialises.
    #[test]
    fn a_written_prompt_result_is_the_serialised_one() {
        let messages = messages(&[(Role::User, json!({"type": "text", "text": "a {{ a }} b"}))]);
        let compiled = compile_messages(&messages);
        let outline = MessagesOutline::of(&messages, &compiled).expect("an outline");
        let call = args(&[("a", "\"messages\":[] \u{0}0\u{0}")]);
        for description in [None, Some("plain"), Some("\"messages\":[] \\\"messages\":[] \u{0}0\u{0} \\u0000")] {
            let result = |messages| {
                let mut result = GetPromptResult::new(messages);
                result.description = description.map(str::to_owned);
                result
            };
            let whole = serde_json::to_string(&result(Vec::new())).expect("json");
            let cut = Outline::cut(whole, "\"messages\":", "[]").expect("the messages' place");
            let written = outline.write(&call).expect("within the budget");
            let answer = Answer::Around { outline: cut, items: Items::Written(written) };
            let mut out = Vec::new();
            answer.write(&mut out);
            let rendered: Vec<McpPromptMessage> =
                serde_json::from_str(&rendered(&messages, &compiled, &call)).expect("the render path's messages");
            assert_eq!(String::from_utf8(out).expect("UTF-8"), serde_json::to_string(&result(rendered)).expect("json"));
        }
    }

    /// A mark in a field that is not a template (a name, `_meta`) is more marks than places: no outline.
    #[test]
    fn a_mark_outside_the_templates_leaves_the_prompt_to_the_renderer() {
        for block in [
            json!({"type": "resource_link", "uri": "file:///b.txt", "name": "\u{0}0\u{0}"}),
            json!({"type": "text", "text": "plain", "_meta": {"k": "\u{0}0\u{0}"}}),
        ] {
            let messages =
                messages(&[(Role::User, json!({"type": "text", "text": "{{ a }}"})), (Role::User, block.clone())]);
            let compiled = compile_messages(&messages);
            assert!(MessagesOutline::of(&messages, &compiled).is_none(), "{block}");
        }
    }

    #[test]
    fn prompts_a_render_must_judge_have_no_outline() {
        for block in [
            json!({"type": "text", "text": "{% if a %}{{ a }}{% endif %}"}),
            json!({"type": "text", "text": "{{ a | upper }}"}),
            json!({"type": "text", "text": "a \u{0}0\u{0} {{ a }}"}),
            json!({"type": "resource_link", "uri": "file:///{{ a }}", "name": "a"}),
            json!({"type": "resource_link", "uri": "not a uri", "name": "a"}),
        ] {
            let messages = messages(&[(Role::User, block.clone())]);
            let compiled = compile_messages(&messages);
            assert!(MessagesOutline::of(&messages, &compiled).is_none(), "{block}");
        }
    }

    #[test]
    fn an_outline_leaves_a_render_past_the_budget_to_the_renderer() {
        let messages = messages(&[(Role::User, json!({"type": "text", "text": "ab {{ a }} {{ a }}"}))]);
        let compiled = compile_messages(&messages);
        let outline = MessagesOutline::of(&messages, &compiled).expect("an outline");
        // 4 bytes of text: two values of half the budget less 2 fit exactly, one byte more does not.
        let fits = "x".repeat(BUDGET_BYTES / 2 - 2);
        assert!(outline.write(&args(&[("a", &fits)])).is_some());
        let over = "x".repeat(BUDGET_BYTES / 2 - 1);
        assert!(outline.write(&args(&[("a", &over)])).is_none());
        let mut budget = Budget::quick();
        assert!(render_messages(&messages, &compiled, &args(&[("a", &over)]), &mut budget).is_err());
        let mut budget = Budget::quick();
        assert!(render_messages(&messages, &compiled, &args(&[("a", &fits)]), &mut budget).is_ok());
    }

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
