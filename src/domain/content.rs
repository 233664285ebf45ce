//! MCP content blocks and annotations: checked when an agent stores them, rendered when a client reads.
//!
//! Prompt messages carry one content block each (`text`, `image`, `audio`, `resource_link`, `resource`).
//! Their templated fields (`text`; the `uri`/`text` of `resource` and `resource_link` blocks) are
//! MiniJinja templates: they must compile and stay within the allowed subset when stored
//! ([`render::compile_check`]), and are rendered by [`render_block`] within the request's output budget.
//!
//! [`render_block`]: crate::domain::content::render_block

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

use super::ResourceUri;
use super::id::InvalidValue;
use super::render::{self, Budget, TemplateError};
use super::time::Timestamp;

/// Why a content block (or its annotations, `_meta` or a base64 field) is refused, or a block failed to
/// render; `Display` is the message the caller sees, e.g. `content.annotations.priority must be a number
/// from 0 to 1`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContentError {
    /// A field is missing, unknown, or of the wrong type or value.
    #[error("{0}")]
    Field(String),
    /// A field that is not strict standard base64.
    #[error("{field} is not valid base64 ({error})")]
    Base64 { field: String, error: base64::DecodeError },
    /// A templated field that does not compile.
    #[error("{field} does not compile: {error}")]
    Template { field: String, error: TemplateError },
    /// A URI field without template syntax that is not a valid URI.
    #[error("{field}: {error}")]
    Uri { field: String, error: InvalidValue },
    /// A field's error, inside the member `at`: `at.` before its own message.
    #[error("{at}.{error}")]
    Within { at: &'static str, error: Box<ContentError> },
    /// A templated field failed to render.
    #[error(transparent)]
    Render(#[from] TemplateError),
    /// A rendered URI that is not a valid URI.
    #[error(transparent)]
    RenderedUri(InvalidValue),
}

impl ContentError {
    fn field(message: impl Into<String>) -> Self {
        ContentError::Field(message.into())
    }

    /// The error of a field of the member `at`.
    fn within(self, at: &'static str) -> Self {
        ContentError::Within { at, error: Box::new(self) }
    }
}

/// Checks MCP `annotations`: an object with only `audience` (`user`/`assistant`), `priority` (0 to 1)
/// and `lastModified` (RFC 3339).
pub fn validate_annotations(annotations: &Value) -> Result<(), ContentError> {
    let object = annotations.as_object().ok_or_else(|| ContentError::field("annotations must be an object"))?;
    for (key, value) in object {
        match key.as_str() {
            "audience" => {
                let roles =
                    value.as_array().ok_or_else(|| ContentError::field("annotations.audience must be an array"))?;
                if !roles.iter().all(|role| matches!(role.as_str(), Some("user" | "assistant"))) {
                    return Err(ContentError::field(
                        "annotations.audience may only contain \"user\" and \"assistant\"",
                    ));
                }
            }
            "priority" => {
                if !value.as_f64().is_some_and(|p| (0.0..=1.0).contains(&p)) {
                    return Err(ContentError::field("annotations.priority must be a number from 0 to 1"));
                }
            }
            "lastModified" => {
                if value.as_str().and_then(Timestamp::parse_rfc3339).is_none() {
                    return Err(ContentError::field("annotations.lastModified must be an RFC 3339 date-time"));
                }
            }
            other => return Err(ContentError::field(format!("annotations has an unknown field {other:?}"))),
        }
    }
    Ok(())
}

/// Checks an MCP `_meta`: any object.
pub fn validate_meta(meta: &Value) -> Result<(), ContentError> {
    if meta.is_object() { Ok(()) } else { Err(ContentError::field("_meta must be an object")) }
}

/// Checks strict standard base64 (RFC 4648 §4, with padding).
pub fn validate_base64(field: &str, value: &str) -> Result<Vec<u8>, ContentError> {
    STANDARD.decode(value).map_err(|error| ContentError::Base64 { field: field.to_owned(), error })
}

/// Checks one content block: its `type`, its required fields, no unknown fields, and that every
/// templated field compiles.
pub fn validate_block(block: &Value) -> Result<(), ContentError> {
    let object = block.as_object().ok_or_else(|| ContentError::field("content must be an object"))?;
    let kind = object
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| ContentError::field("content.type must be a string"))?;
    let (required, optional): (&[&str], &[&str]) = match kind {
        "text" => (&["text"], &[]),
        "image" | "audio" => (&["data", "mimeType"], &[]),
        "resource_link" => (&["uri", "name"], &["title", "description", "mimeType", "size", "icons"]),
        "resource" => (&["resource"], &[]),
        other => {
            return Err(ContentError::field(format!(
                "content.type {other:?} is not one of text, image, audio, resource_link, resource"
            )));
        }
    };
    check_fields(object, "content", required, optional)?;
    for (key, value) in object {
        match key.as_str() {
            "type" => {}
            "annotations" => validate_annotations(value).map_err(|error| error.within("content"))?,
            "_meta" => validate_meta(value).map_err(|error| error.within("content"))?,
            "size" => {
                if !value.is_u64() {
                    return Err(ContentError::field("content.size must be a non-negative integer"));
                }
            }
            "icons" => {
                if !value.is_array() {
                    return Err(ContentError::field("content.icons must be an array"));
                }
            }
            "resource" => validate_embedded(value)?,
            other => {
                let text =
                    value.as_str().ok_or_else(|| ContentError::field(format!("content.{other} must be a string")))?;
                match (kind, other) {
                    ("text", "text") => compile(&format!("content.{other}"), text)?,
                    ("resource_link", "uri") => check_uri_template("content.uri", text)?,
                    ("image" | "audio", "data") => validate_base64("content.data", text).map(drop)?,
                    _ => {}
                }
            }
        }
    }
    Ok(())
}

/// The `resource` of an embedded-resource block: `uri` and exactly one of `text` or `blob`.
fn validate_embedded(resource: &Value) -> Result<(), ContentError> {
    let object = resource.as_object().ok_or_else(|| ContentError::field("content.resource must be an object"))?;
    check_fields(object, "content.resource", &["uri"], &["mimeType", "text", "blob", "_meta"])?;
    if object.contains_key("text") == object.contains_key("blob") {
        return Err(ContentError::field("content.resource must have exactly one of text or blob"));
    }
    for (key, value) in object {
        if key == "_meta" {
            validate_meta(value).map_err(|error| error.within("content.resource"))?;
            continue;
        }
        let field = format!("content.resource.{key}");
        let text = value.as_str().ok_or_else(|| ContentError::field(format!("{field} must be a string")))?;
        match key.as_str() {
            "uri" => check_uri_template(&field, text)?,
            "text" => compile(&field, text)?,
            "blob" => validate_base64(&field, text).map(drop)?,
            _ => {}
        }
    }
    Ok(())
}

/// The templated fields of a content block of type `kind`: the member holding the field (`None` for the
/// block itself), the field, and whether it is a URI.
fn templated_fields(kind: &str) -> &'static [(Option<&'static str>, &'static str, bool)] {
    match kind {
        "text" => &[(None, "text", false)],
        "resource_link" => &[(None, "uri", true)],
        "resource" => &[(Some("resource"), "uri", true), (Some("resource"), "text", false)],
        _ => &[],
    }
}

/// The sources of a content block's templated fields, to compile once ([`render::Compiled`]).
pub fn template_sources(block: &Value) -> impl Iterator<Item = &str> {
    let kind = block.get("type").and_then(Value::as_str).unwrap_or_default();
    templated_fields(kind).iter().filter_map(move |(member, field, _)| {
        let holder = match member {
            Some(member) => block.get(member)?,
            None => block,
        };
        holder.get(field)?.as_str()
    })
}

/// Renders the templated fields of a content block with `args`, from `compiled` where it holds them,
/// charging `budget`; a rendered URI is re-validated.
pub fn render_block(
    block: &Value,
    compiled: &render::Compiled,
    args: &BTreeMap<String, String>,
    budget: &mut Budget,
) -> Result<Value, ContentError> {
    with_templated(block, |source, is_uri| {
        let rendered = compiled.render(source, args, budget)?;
        if is_uri {
            ResourceUri::parse(&rendered).map_err(ContentError::RenderedUri)?;
        }
        Ok(rendered)
    })
}

/// A copy of `block` with each templated field's source replaced by what `replace` makes of it, given the
/// source and whether the field is a URI; the first error `replace` gives ends it.
pub fn with_templated<E>(block: &Value, mut replace: impl FnMut(&str, bool) -> Result<String, E>) -> Result<Value, E> {
    let mut block = block.clone();
    let kind = block.get("type").and_then(Value::as_str).unwrap_or_default();
    let fields = templated_fields(kind);
    for (member, field, is_uri) in fields {
        let holder = match member {
            Some(member) => match block.get_mut(*member) {
                Some(holder) => holder,
                None => continue,
            },
            None => &mut block,
        };
        let Some(slot) = holder.get_mut(*field) else { continue };
        let Some(source) = slot.as_str() else { continue };
        *slot = Value::String(replace(source, *is_uri)?);
    }
    Ok(block)
}

/// Every required field is present and every field is known (`annotations` and `_meta` always are).
fn check_fields(
    object: &Map<String, Value>,
    at: &str,
    required: &[&str],
    optional: &[&str],
) -> Result<(), ContentError> {
    if let Some(missing) = required.iter().find(|field| !object.contains_key(**field)) {
        return Err(ContentError::field(format!("{at}.{missing} is required")));
    }
    let known = |key: &str| {
        matches!(key, "type" | "annotations" | "_meta") || required.contains(&key) || optional.contains(&key)
    };
    match object.keys().find(|key| !known(key)) {
        Some(unknown) => Err(ContentError::field(format!("{at} has an unknown field {unknown:?}"))),
        None => Ok(()),
    }
}

fn compile(field: &str, source: &str) -> Result<(), ContentError> {
    render::compile_check(source).map_err(|error| ContentError::Template { field: field.to_owned(), error })
}

/// A URI field may be a template; one without any template syntax must already be a valid URI.
fn check_uri_template(field: &str, source: &str) -> Result<(), ContentError> {
    if source.contains('{') {
        compile(field, source)
    } else {
        ResourceUri::parse(source).map(drop).map_err(|error| ContentError::Uri { field: field.to_owned(), error })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn annotations() {
        assert!(validate_annotations(&json!({})).is_ok());
        assert!(
            validate_annotations(
                &json!({"audience": ["user", "assistant"], "priority": 0.5, "lastModified": "2025-01-12T15:00:58Z"})
            )
            .is_ok()
        );
        assert!(validate_annotations(&json!([])).is_err());
        assert!(validate_annotations(&json!({"audience": ["system"]})).is_err());
        assert!(validate_annotations(&json!({"audience": "user"})).is_err());
        assert!(validate_annotations(&json!({"priority": 1.5})).is_err());
        assert!(validate_annotations(&json!({"priority": "high"})).is_err());
        assert!(validate_annotations(&json!({"lastModified": "yesterday"})).is_err());
        assert!(validate_annotations(&json!({"color": "red"})).is_err());
    }

    #[test]
    fn valid_blocks() {
        let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
        for block in [
            json!({"type": "text", "text": "Hello {{ name }}"}),
            json!({"type": "text", "text": "x", "annotations": {"priority": 1}, "_meta": {"a": 1}}),
            json!({"type": "image", "data": png, "mimeType": "image/png"}),
            json!({"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}),
            json!({"type": "resource_link", "uri": "test://{{ id }}", "name": "n", "size": 3}),
            json!({"type": "resource_link", "uri": "test://fixed", "name": "n"}),
            json!({"type": "resource", "resource": {"uri": "{{ resourceUri }}", "mimeType": "text/plain", "text": "t"}}),
            json!({"type": "resource", "resource": {"uri": "test://b", "blob": "AAAA"}}),
        ] {
            assert_eq!(validate_block(&block), Ok(()), "{block}");
        }
    }

    #[test]
    fn invalid_blocks() {
        for block in [
            json!("text"),
            json!({"text": "no type"}),
            json!({"type": "video", "data": "AAAA"}),
            json!({"type": "text"}),
            json!({"type": "text", "text": 5}),
            json!({"type": "text", "text": "{{ unclosed"}),
            json!({"type": "text", "text": "x", "extra": true}),
            json!({"type": "image", "data": "not base64!", "mimeType": "image/png"}),
            json!({"type": "image", "data": "AAAA"}),
            json!({"type": "resource_link", "uri": "x://a"}),
            json!({"type": "resource_link", "uri": "relative", "name": "n"}),
            json!({"type": "resource", "resource": {"uri": "x://a"}}),
            json!({"type": "resource", "resource": {"uri": "x://a", "text": "t", "blob": "AAAA"}}),
            json!({"type": "resource", "resource": {"text": "t"}}),
            json!({"type": "resource", "resource": {"uri": "x://a", "text": "{% if %}"}}),
            json!({"type": "text", "text": "{% set x = 1 %}{{ x }}"}),
            json!({"type": "resource_link", "uri": "test://{{ id * 3 }}", "name": "n"}),
            json!({"type": "text", "text": "x", "annotations": {"priority": 7}}),
        ] {
            assert!(validate_block(&block).is_err(), "{block} should be refused");
        }
    }

    #[test]
    fn renders_templated_fields() {
        let args: BTreeMap<String, String> = [("id".to_owned(), "42".to_owned())].into();
        let block = json!({"type": "resource", "resource": {"uri": "test://{{ id }}", "text": "item {{ id }}"}});
        assert_eq!(
            render_block(&block, &render::Compiled::new(template_sources(&block)), &args, &mut Budget::default()),
            Ok(json!({"type": "resource", "resource": {"uri": "test://42", "text": "item 42"}}))
        );
        let link = json!({"type": "resource_link", "uri": "{{ id }}", "name": "n"});
        let compiled = render::Compiled::new([]);
        assert!(
            render_block(&link, &compiled, &args, &mut Budget::default()).is_err(),
            "a rendered URI is re-validated"
        );
    }
}
