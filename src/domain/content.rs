//! MCP content blocks and annotations: checked when an agent stores them, rendered when a client reads.
//!
//! Prompt messages carry one content block each (`text`, `image`, `audio`, `resource_link`, `resource`).
//! Their templated fields (`text`; the `uri`/`text` of `resource` and `resource_link` blocks) are
//! MiniJinja templates: they must compile and stay within the allowed subset when stored
//! ([`render::compile_check`]), and are rendered by [`render_block`] within the request's output budget.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

use super::ResourceUri;
use super::render::{self, Budget};
use super::time::Timestamp;

/// Checks MCP `annotations`: an object with only `audience` (`user`/`assistant`), `priority` (0 to 1)
/// and `lastModified` (RFC 3339).
pub fn validate_annotations(annotations: &Value) -> Result<(), String> {
    let object = annotations.as_object().ok_or("annotations must be an object")?;
    for (key, value) in object {
        match key.as_str() {
            "audience" => {
                let roles = value.as_array().ok_or("annotations.audience must be an array")?;
                if !roles.iter().all(|role| matches!(role.as_str(), Some("user" | "assistant"))) {
                    return Err("annotations.audience may only contain \"user\" and \"assistant\"".to_owned());
                }
            }
            "priority" => {
                if !value.as_f64().is_some_and(|p| (0.0..=1.0).contains(&p)) {
                    return Err("annotations.priority must be a number from 0 to 1".to_owned());
                }
            }
            "lastModified" => {
                if value.as_str().and_then(Timestamp::parse_rfc3339).is_none() {
                    return Err("annotations.lastModified must be an RFC 3339 date-time".to_owned());
                }
            }
            other => return Err(format!("annotations has an unknown field {other:?}")),
        }
    }
    Ok(())
}

/// Checks an MCP `_meta`: any object.
pub fn validate_meta(meta: &Value) -> Result<(), String> {
    if meta.is_object() { Ok(()) } else { Err("_meta must be an object".to_owned()) }
}

/// Checks strict standard base64 (RFC 4648 §4, with padding).
pub fn validate_base64(field: &str, value: &str) -> Result<Vec<u8>, String> {
    STANDARD.decode(value).map_err(|error| format!("{field} is not valid base64 ({error})"))
}

/// Checks one content block: its `type`, its required fields, no unknown fields, and that every
/// templated field compiles.
pub fn validate_block(block: &Value) -> Result<(), String> {
    let object = block.as_object().ok_or("content must be an object")?;
    let kind = object.get("type").and_then(Value::as_str).ok_or("content.type must be a string")?;
    let (required, optional): (&[&str], &[&str]) = match kind {
        "text" => (&["text"], &[]),
        "image" | "audio" => (&["data", "mimeType"], &[]),
        "resource_link" => (&["uri", "name"], &["title", "description", "mimeType", "size", "icons"]),
        "resource" => (&["resource"], &[]),
        other => {
            return Err(format!("content.type {other:?} is not one of text, image, audio, resource_link, resource"));
        }
    };
    check_fields(object, "content", required, optional)?;
    for (key, value) in object {
        match key.as_str() {
            "type" => {}
            "annotations" => validate_annotations(value).map_err(|e| format!("content.{e}"))?,
            "_meta" => validate_meta(value).map_err(|e| format!("content.{e}"))?,
            "size" => {
                if !value.is_u64() {
                    return Err("content.size must be a non-negative integer".to_owned());
                }
            }
            "icons" => {
                if !value.is_array() {
                    return Err("content.icons must be an array".to_owned());
                }
            }
            "resource" => validate_embedded(value)?,
            other => {
                let text = value.as_str().ok_or_else(|| format!("content.{other} must be a string"))?;
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
fn validate_embedded(resource: &Value) -> Result<(), String> {
    let object = resource.as_object().ok_or("content.resource must be an object")?;
    check_fields(object, "content.resource", &["uri"], &["mimeType", "text", "blob", "_meta"])?;
    if object.contains_key("text") == object.contains_key("blob") {
        return Err("content.resource must have exactly one of text or blob".to_owned());
    }
    for (key, value) in object {
        if key == "_meta" {
            validate_meta(value).map_err(|e| format!("content.resource.{e}"))?;
            continue;
        }
        let field = format!("content.resource.{key}");
        let text = value.as_str().ok_or_else(|| format!("{field} must be a string"))?;
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
) -> Result<Value, String> {
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
        let rendered = compiled.render(source, args, budget)?;
        if *is_uri {
            ResourceUri::parse(&rendered).map_err(|e| e.0)?;
        }
        *slot = Value::String(rendered);
    }
    Ok(block)
}

/// Every required field is present and every field is known (`annotations` and `_meta` always are).
fn check_fields(object: &Map<String, Value>, at: &str, required: &[&str], optional: &[&str]) -> Result<(), String> {
    if let Some(missing) = required.iter().find(|field| !object.contains_key(**field)) {
        return Err(format!("{at}.{missing} is required"));
    }
    let known = |key: &str| {
        matches!(key, "type" | "annotations" | "_meta") || required.contains(&key) || optional.contains(&key)
    };
    match object.keys().find(|key| !known(key)) {
        Some(unknown) => Err(format!("{at} has an unknown field {unknown:?}")),
        None => Ok(()),
    }
}

fn compile(field: &str, source: &str) -> Result<(), String> {
    render::compile_check(source).map_err(|error| format!("{field} does not compile: {error}"))
}

/// A URI field may be a template; one without any template syntax must already be a valid URI.
fn check_uri_template(field: &str, source: &str) -> Result<(), String> {
    if source.contains('{') {
        compile(field, source)
    } else {
        ResourceUri::parse(source).map(drop).map_err(|e| format!("{field}: {}", e.0))
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
