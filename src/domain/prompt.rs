//! Prompts: checked when stored (arguments, messages, templates that compile), rendered on `prompts/get`.

use std::collections::{BTreeMap, HashSet};

use super::content::{self, ContentError};
use super::limits::{Field, FieldLimits, TooLarge, json_len};
use super::model::{PromptArgument, PromptMessage};
use super::render::{self, Budget, Compiled, TemplateError};

/// Why a prompt's arguments or messages are refused, or its messages failed to render; `Display` is the
/// message the caller sees, naming the offending item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PromptError {
    #[error("arguments[{index}].name must not be empty")]
    EmptyName { index: usize },
    #[error("arguments[{index}].name {name:?} is declared twice")]
    DeclaredTwice { index: usize, name: String },
    #[error("messages must not be empty")]
    NoMessages,
    /// A message's content block is refused.
    #[error("messages[{index}].{error}")]
    Content { index: usize, error: ContentError },
    /// A message's template does not compile.
    #[error("messages[{index}].content: {error}")]
    Template { index: usize, error: TemplateError },
    /// A message's templates read variables that are not declared arguments (listed quoted).
    #[error(
        "messages[{index}].content uses {} that {} not declared in arguments: {}",
        if undeclared.len() == 1 { "a variable" } else { "variables" },
        if undeclared.len() == 1 { "is" } else { "are" },
        undeclared.join(", ")
    )]
    Undeclared { index: usize, undeclared: Vec<String> },
    /// A message failed to render.
    #[error("messages[{index}]: {error}")]
    Render { index: usize, error: ContentError },
}

/// Checks the size of every field of a prompt's arguments and messages, and how many arguments it declares,
/// before anything compiles its templates.
pub fn check_sizes(
    limits: &FieldLimits,
    arguments: &[PromptArgument],
    messages: &[PromptMessage],
) -> Result<(), TooLarge> {
    if arguments.len() > limits.prompt_arguments {
        return Err(TooLarge {
            path: "arguments".to_owned(),
            size: arguments.len(),
            limit: limits.prompt_arguments,
            key: "max_prompt_arguments",
        });
    }
    for (index, argument) in arguments.iter().enumerate() {
        limits.text(Field::Name, &format!("arguments[{index}].name"), Some(&argument.name))?;
        limits.text(Field::Title, &format!("arguments[{index}].title"), argument.title.as_deref())?;
        limits.text(Field::Description, &format!("arguments[{index}].description"), argument.description.as_deref())?;
        limits.json(Field::Completions, &format!("arguments[{index}].completions"), argument.completions.as_ref())?;
    }
    for (index, message) in messages.iter().enumerate() {
        for source in content::template_sources(&message.content) {
            limits.text(Field::TemplateText, &format!("messages[{index}].content"), Some(source))?;
        }
    }
    let size = json_len(arguments) + json_len(messages);
    limits.size(Field::Prompt, "arguments and messages", size)
}

/// Checks a prompt's arguments and messages; the error names the offending item, e.g.
/// `messages[1].content.text does not compile: ...`.
pub fn validate(arguments: &[PromptArgument], messages: &[PromptMessage]) -> Result<(), PromptError> {
    let mut names = HashSet::new();
    for (index, argument) in arguments.iter().enumerate() {
        if argument.name.trim().is_empty() {
            return Err(PromptError::EmptyName { index });
        }
        if !names.insert(argument.name.as_str()) {
            return Err(PromptError::DeclaredTwice { index, name: argument.name.clone() });
        }
    }
    if messages.is_empty() {
        return Err(PromptError::NoMessages);
    }
    for (index, message) in messages.iter().enumerate() {
        content::validate_block(&message.content).map_err(|error| PromptError::Content { index, error })?;
    }
    // Every variable a template reads must be a declared argument: `prompts/get` refuses arguments that are
    // not declared, so an undeclared one could never be given.
    for (index, message) in messages.iter().enumerate() {
        let mut undeclared = std::collections::BTreeSet::new();
        for source in content::template_sources(&message.content) {
            let free = render::free_variables(source).map_err(|error| PromptError::Template { index, error })?;
            undeclared.extend(free.into_iter().filter(|variable| !names.contains(variable.as_str())));
        }
        if !undeclared.is_empty() {
            let undeclared = undeclared.iter().map(|name| format!("{name:?}")).collect();
            return Err(PromptError::Undeclared { index, undeclared });
        }
    }
    Ok(())
}

/// The messages' templates, checked and compiled once (for the registry cache).
pub fn compile_messages(messages: &[PromptMessage]) -> Compiled {
    Compiled::new(messages.iter().flat_map(|message| content::template_sources(&message.content)))
}

/// Renders every message with `args`, from `compiled` (see [`compile_messages`]) where it holds their
/// templates, all of them charging the one `budget` of the request. The caller has checked that `args` names
/// only declared arguments and holds every required one; missing optional ones render empty.
pub fn render_messages(
    messages: &[PromptMessage],
    compiled: &Compiled,
    args: &BTreeMap<String, String>,
    budget: &mut Budget,
) -> Result<Vec<PromptMessage>, PromptError> {
    messages
        .iter()
        .enumerate()
        .map(|(index, message)| {
            let content = content::render_block(&message.content, compiled, args, budget)
                .map_err(|error| PromptError::Render { index, error })?;
            Ok(PromptMessage { role: message.role, content })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::model::Role;

    fn argument(name: &str) -> PromptArgument {
        PromptArgument { name: name.to_owned(), title: None, description: None, required: None, completions: None }
    }

    fn message(content: serde_json::Value) -> PromptMessage {
        PromptMessage { role: Role::User, content }
    }

    #[test]
    fn accepts_a_valid_prompt() {
        let messages = [message(json!({"type": "text", "text": "Research {{ topic }}."}))];
        assert_eq!(validate(&[argument("topic"), argument("depth")], &messages), Ok(()));
    }

    #[test]
    fn refuses_bad_arguments_and_messages() {
        let ok = [message(json!({"type": "text", "text": "x"}))];
        assert!(validate(&[argument("a"), argument("a")], &ok).is_err());
        assert!(validate(&[argument("")], &ok).is_err());
        assert!(validate(&[], &[]).is_err());
        let error = validate(&[], &[ok[0].clone(), message(json!({"type": "text", "text": "{{ x"}))])
            .expect_err("does not compile")
            .to_string();
        assert!(error.starts_with("messages[1].content.text"), "{error}");
    }

    #[test]
    fn refuses_templates_that_read_undeclared_variables() {
        let reads = |text: &str| [message(json!({"type": "text", "text": text}))];
        let error = validate(&[argument("topic")], &reads("{{ topic }} {{ depth }} {{ x }}"))
            .expect_err("undeclared")
            .to_string();
        assert_eq!(error, r#"messages[0].content uses variables that are not declared in arguments: "depth", "x""#);
        // Loop variables and the functions every template may call are not arguments.
        let looped = "{% for i in range(3) %}{{ i }}{{ loop.index }}{{ topic }}{% else %}{% endfor %}";
        assert_eq!(validate(&[argument("topic")], &reads(looped)), Ok(()));
        let link = [message(json!({"type": "resource_link", "uri": "test://{{ id }}", "name": "n"}))];
        let error = validate(&[], &link).expect_err("undeclared in a uri").to_string();
        assert!(error.contains(r#"a variable that is not declared in arguments: "id""#), "{error}");
        assert_eq!(validate(&[argument("id")], &link), Ok(()));
    }

    #[test]
    fn renders_messages() {
        let messages = [message(json!({"type": "text", "text": "a={{ a }} b={{ b }}"}))];
        let args = [("a".to_owned(), "1".to_owned())].into();
        for compiled in [compile_messages(&messages), Compiled::new([])] {
            let rendered = render_messages(&messages, &compiled, &args, &mut Budget::default()).expect("renders");
            assert_eq!(rendered[0].content, json!({"type": "text", "text": "a=1 b="}));
        }
    }

    #[test]
    fn messages_share_one_budget() {
        // Each message renders 600 KiB: one fits in the 1 MiB budget, the second exceeds it.
        let text = "{% for i in range(600) %}{{ kib }}{% endfor %}";
        let messages = vec![message(json!({"type": "text", "text": text})); 3];
        let args = [("kib".to_owned(), "x".repeat(1024))].into();
        let compiled = compile_messages(&messages);
        let error = render_messages(&messages, &compiled, &args, &mut Budget::default())
            .expect_err("over the total budget")
            .to_string();
        assert!(error.starts_with("messages[1]: "), "{error}");
        assert!(error.contains("output budget of 1048576 bytes"), "{error}");
        let one = render_messages(&messages[..1], &compiled, &args, &mut Budget::default()).expect("one message fits");
        assert_eq!(one[0].content["text"].as_str().map(str::len), Some(600 * 1024));
    }
}
